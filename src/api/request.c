/* request.c - request handles: test, wait, results, free (the request's
 * life itself is engine/request.c's). */
#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/submit.h"
#include "util/copy.h"
#include "util/err.h"
#include "util/time.h"

static int live(const weft_request *r) { return wf_request_live(r); }
static int done(const weft_request *r) { return wf_request_done(r); }

weft_status weft_test(weft_request *r) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_test: not a live request handle");
  if (!wf_request_poll(r)) return WEFT_IN_PROGRESS;
  wf_request_observed(r); /* the caller sees it complete: its name is free again */
  if (r->status != WEFT_OK) wf_err(r->status, "%s", r->error ? r->error : weft_status_string(r->status));
  return r->status;
}

weft_status weft_wait(weft_request *r, double timeout_seconds) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_wait: not a live request handle");
  return wf_request_wait(r, timeout_seconds) ? weft_test(r) : WEFT_IN_PROGRESS;
}

weft_status weft_request_cancel(weft_request *r) {
  wf_err_clear();
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_cancel: not a live request handle");
  return wf_submit_cancel(r);
}

const char *weft_request_error(weft_request *r) {
  if (!live(r) || !done(r) || !r->error) return "";
  return r->error;
}

const char *weft_request_algorithm(const weft_request *r) {
  weft_request *q = (weft_request *)r; /* live() and done() only read */
  if (!live(q) || !done(q)) return "";
  if (!q->kids) return q->algo ? q->algo : "";
  /* a grouped op: its children completed before it (their algo fields
   * were written before their completions, which came before its own) */
  const char *first = NULL;
  for (int i = 0; i < q->nkids; i++) {
    const char *a = q->kids[i] && q->kids[i]->algo ? q->kids[i]->algo : "";
    if (!first) first = a;
    else if (strcmp(first, a)) return "mixed";
  }
  return first ? first : "";
}

weft_status weft_request_output(weft_request *r, weft_tensor *out) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_output: not a live request handle");
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_output: out is NULL");
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_output: the request has not completed");
  memset(out, 0, sizeof *out);
  out->dtype = (weft_dtype)r->msg.dtype;
  out->device = WEFT_DEVICE_CPU;
  switch (r->msg.coll) {
    case WF_COLL_ALLREDUCE:
    case WF_COLL_PERMUTE:
      *out = r->out;
      out->stream = NULL;
      return r->status;
    case WF_COLL_BROADCAST:
      *out = r->in;
      out->stream = NULL;
      return r->status;
    case WF_COLL_ALLGATHER:
    case WF_COLL_ALLTOALL:
    case WF_COLL_REDUCESCATTER:
      /* reported even on failure, so memory from the caller's allocator can be freed */
      out->device = r->in.device; /* a device input's output is on its device */
      out->device_kind = r->in.device < 0 ? 0 : r->in.device_kind;
      out->data = r->result;
      out->ndim = r->result_ndim;
      out->shape = r->result_shape;
      return r->status;
    default:
      return r->status;
  }
}

weft_status weft_request_recv_splits(weft_request *r, const int64_t **splits, int *n) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_recv_splits: not a live request handle");
  if (!splits || !n) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_recv_splits: NULL output argument");
  if (r->msg.coll != WF_COLL_ALLTOALL)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_recv_splits: '%s' is not an alltoall", r->msg.name);
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_recv_splits: the request has not completed");
  *splits = r->recv_splits;
  *n = r->recv_splits ? r->nrecv_splits : 0;
  return r->status;
}

weft_status weft_request_free(weft_request *r) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_free: not a live request handle");
  /* The user's reference may be dropped once: a second free of a detached
   * (still pending) request must not steal the engine's reference. */
  if (!wf_request_detach(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_free: not a live request handle");
  wf_request_unref(r);
  return WEFT_OK;
}

weft_status weft_request_last_joined(weft_request *r, int *rank) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_last_joined: not a live request handle");
  if (!rank) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_last_joined: rank is NULL");
  if (r->msg.coll != WF_COLL_JOIN)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_last_joined: '%s' is not a join", r->msg.name);
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_last_joined: the join has not completed");
  *rank = r->last_joined;
  return r->status;
}
