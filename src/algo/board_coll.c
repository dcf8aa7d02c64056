/* board_coll.c - the board-slot algorithms (board_coll.h). */
#include "algo/board_coll.h"

#include <stdlib.h>

#include "reduce/reduce.h"
#include "util/copy.h"
#include "util/err.h"

size_t wf_rs_rows(size_t dim0, int n, int i) { return dim0 / (size_t)n + ((size_t)i < dim0 % (size_t)n); }

size_t wf_rs_first(size_t dim0, int n, int i) {
  size_t r = dim0 % (size_t)n;
  return (size_t)i * (dim0 / (size_t)n) + ((size_t)i < r ? (size_t)i : r);
}

weft_status wf_slot_get(const wf_slot *s, int k, size_t off, void *dst, size_t len) {
  if (!len) return WEFT_OK;
  if (k == s->me) { /* its own input, as it went in (an alltoall's own block never does) */
    wf_copy(dst, (const char *)s->own + off, len);
    return WEFT_OK;
  }
  if (!s->remote) {
    wf_copy(dst, (const char *)s->part[k] + off, len);
    return WEFT_OK;
  }
  return s->read(s->ctx, k, off, dst, len);
}

#define FOLD_STACK 64 /* members whose operand pointers fit on the stack (the board has fewer) */

void wf_slot_fold(const wf_slot *s, weft_dtype t, weft_reduce_op op, double postscale, void *dst, size_t off,
                  size_t count, int own) {
  const void *x[FOLD_STACK];
  size_t es = weft_dtype_size(t);
  int n = s->n < FOLD_STACK ? s->n : FOLD_STACK;
  for (int k = 0; k < n; k++)
    x[k] = (const char *)(own && k == s->me ? s->own : s->part[k]) + off * es;
  wf_fold(t, op, dst, x, n, count, NULL);
  wf_post_scale(t, op, postscale, dst, count, s->n);
}

weft_status wf_slot_result(const wf_slot *s, const wf_slot_args *a) {
  int n = s->n, me = s->me;
  size_t es = weft_dtype_size(a->dtype), bytes = a->count * es;
  char *out = a->out;
  switch (a->coll) {
    case WF_COLL_ALLREDUCE:
      if (bytes) wf_slot_fold(s, a->dtype, a->op, a->postscale, out, 0, a->count, 0);
      return WEFT_OK;
    case WF_COLL_BROADCAST:
      return bytes && me != a->root ? wf_slot_get(s, a->root, 0, out, bytes) : WEFT_OK;
    case WF_COLL_ALLGATHER:
      for (int k = 0; k < n && bytes; k++)
        if (k != me || !a->skip_own) WF_CHECK(wf_slot_get(s, k, 0, out + (size_t)k * bytes, bytes));
      return WEFT_OK;
    case WF_COLL_ALLTOALL: {
      size_t block = bytes / (size_t)n;
      for (int k = 0; k < n; k++)
        if (k != me || !a->skip_own) WF_CHECK(wf_slot_get(s, k, (size_t)me * block, out + (size_t)k * block, block));
      return WEFT_OK;
    }
    case WF_COLL_REDUCESCATTER: {
      size_t row = a->dim0 ? a->count / a->dim0 : 0;
      size_t first = wf_rs_first(a->dim0, n, me), rows = wf_rs_rows(a->dim0, n, me);
      if (rows && row) wf_slot_fold(s, a->dtype, a->op, a->postscale, out, first * row, rows * row, a->own_rows);
      return WEFT_OK;
    }
    default:
      return WEFT_OK;
  }
}
