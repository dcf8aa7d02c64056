/* mp_settings.c - one rank of a settings-agreement job (tests/mp/settings.sh).
 *
 * weft_init; if it fails, prints "INITERR <status> <message>" and exits 3.
 * Otherwise runs a few float32 allreduces of 1..100000 elements (rank r
 * contributes r + 1 + i/7 at element i) and compares each with the sum
 * computed here, prints "OK rank R" and exits 0 (1 on a wrong element). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

int main(void) {
  weft_world *w = NULL;
  weft_status st = weft_init(NULL, &w);
  if (st != WEFT_OK) {
    printf("INITERR %s %s\n", weft_status_string(st), weft_last_error());
    return 3;
  }
  int rank = weft_rank(w), size = weft_size(w), bad = 0;
  static const int64_t counts[] = {1, 1000, 100000};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0] && !bad; k++) {
    int64_t n = counts[k];
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return 1;
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rank + 1) + (float)(i % 7);
    weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &n, x, WEFT_DEVICE_CPU, 0, NULL};
    char name[32];
    snprintf(name, sizeof name, "settings.%lld", (long long)n);
    weft_request *req = NULL;
    st = weft_allreduce(weft_world_group(w), name, &t, &t, WEFT_OP_SUM, NULL, &req);
    if (st == WEFT_OK) st = weft_wait(req, 60.0);
    if (st != WEFT_OK) {
      printf("FAIL rank %d: allreduce of %lld: %s\n", rank, (long long)n, weft_last_error());
      bad = 1;
    }
    weft_request_free(req);
    /* small integers: the float sum is exact in any order */
    for (int64_t i = 0; i < n && !bad; i++) {
      float want = (float)(size * (size + 1) / 2) + (float)size * (float)(i % 7);
      if (x[i] != want) {
        printf("FAIL rank %d: element %lld of %lld is %g, want %g\n", rank, (long long)i, (long long)n, x[i], want);
        bad = 1;
      }
    }
    free(x);
  }
  weft_finalize(w);
  if (!bad) printf("OK rank %d\n", rank);
  return bad;
}
