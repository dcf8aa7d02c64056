/* fold.c - the one rank-order fold (reduce.h: wf_fold). */
#include <string.h>

#include "reduce/reduce.h"

void wf_fold(weft_dtype t, weft_reduce_op op, void *dst, const void *const *x, int n, size_t count, void *tmp) {
  if (n < 1 || !count) return;
  if (n == 1) {
    if (dst != x[0]) memmove(dst, x[0], count * weft_dtype_size(t));
    return;
  }
  const void *acc = x[0];
  for (int k = 1; k < n; k++) {
    void *d = k == n - 1 || !tmp ? dst : tmp;
    wf_reduce3(t, op, d, acc, x[k], count);
    acc = d;
  }
}
