/* fuse.c - the executor's side of tensor fusion: the coordinator sends one
 * response naming several tensors (coord.c, wf_coord_take); here their
 * inputs become one collective's arguments and its output goes back to
 * each tensor. Allreduces run where the tensors lie when the algorithm
 * takes segments (algo.h, wf_seg: one host's staging), else through the
 * group's persistent fusion buffer (packed, prescaled; unpacked,
 * postscaled); allgathers and reducescatters always through the buffer.
 * Engine thread only. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/fuse.h"
#include "reduce/reduce.h"
#include "util/copy.h"
#include "util/log.h"

/* Grows the group's persistent fusion buffer to at least bytes. */
static weft_status fusion_reserve(wf_gstate *gs, size_t bytes) {
  if (!bytes) bytes = 1;
  if (bytes <= gs->fusion_cap) return WEFT_OK;
  void *nb = realloc(gs->fusion_buf, bytes);
  if (!nb) return WEFT_ERR_NO_MEMORY;
  gs->fusion_buf = nb;
  gs->fusion_cap = bytes;
  return WEFT_OK;
}

/* Fused allgather: every rank's rows of each tensor, packed rank by rank
 * (this rank's part: tensor after tensor), gathered once through the fusion
 * buffer [gathered | this rank's input]; wf_fuse_finalize unpacks. The
 * response's sizes hold each tensor's rows per rank, tensor after tensor. */
weft_status wf_fuse_prepare_allgather(wf_gstate *gs, wf_coll_args *a, char *err, size_t errlen) {
  wf_exec *x = &gs->exec;
  int n = gs->group->size, me = gs->group->rank;
  size_t es = a->elem_size, *counts = x->arrays, *displs = counts + n;
  if (x->resp.nsizes != (uint64_t)x->nfused * (uint64_t)n) {
    snprintf(err, errlen, "fused allgather response carries %u sizes for %u tensors of %d ranks", x->resp.nsizes,
             x->nfused, n);
    return WEFT_ERR_PROTOCOL;
  }
  for (uint32_t t = 0; t < x->nfused; t++) {
    const wf_request_msg *q = &x->fused[t]->msg;
    if (q->ndim < 1 || q->dtype != a->dtype || x->resp.sizes[(size_t)t * n + me] != q->shape[0]) {
      snprintf(err, errlen, "fused allgather response does not match this rank's tensor '%s'", q->name);
      return WEFT_ERR_PROTOCOL;
    }
    size_t row = (size_t)wf_elems(q->shape, 1, q->ndim);
    for (int i = 0; i < n; i++) counts[i] += (size_t)x->resp.sizes[(size_t)t * n + i] * row;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    displs[i] = total;
    total += counts[i];
  }
  if (fusion_reserve(gs, (total + counts[me]) * es)) return WEFT_ERR_NO_MEMORY;
  char *out = gs->fusion_buf, *in = out + total * es;
  size_t off = 0;
  for (uint32_t t = 0; t < x->nfused; t++) {
    weft_request *q = x->fused[t];
    size_t row = (size_t)wf_elems(q->msg.shape, 1, q->msg.ndim), k = (size_t)q->msg.shape[0] * row, rows = 0;
    if (k) wf_copy(in + off * es, q->in.data, k * es);
    off += k;
    for (int i = 0; i < n; i++) rows += (size_t)x->resp.sizes[(size_t)t * n + i];
    if (wf_alloc_result(q, rows * row * es)) return WEFT_ERR_NO_MEMORY;
    wf_set_result_shape(q, (int64_t)rows);
  }
  a->in = in;
  a->out = out;
  a->counts = counts;
  a->displs = displs;
  return WEFT_OK;
}

/* Fused reducescatter: every tensor's slice for rank i, prescaled, packed
 * rank by rank (tensor after tensor) into the fusion buffer [input |
 * this rank's result], reduce-scattered once; wf_fuse_finalize unpacks and
 * post-scales. The shapes are the same on every rank (validated), so the
 * response needs no sizes. */
weft_status wf_fuse_prepare_reducescatter(wf_gstate *gs, wf_coll_args *a) {
  wf_exec *x = &gs->exec;
  int n = gs->group->size, me = gs->group->rank;
  size_t es = a->elem_size, *counts = x->arrays, *displs = counts + n;
  for (uint32_t t = 0; t < x->nfused; t++) {
    const wf_request_msg *q = &x->fused[t]->msg;
    size_t row = (size_t)wf_elems(q->shape, 1, q->ndim), dim0 = (size_t)q->shape[0];
    for (int i = 0; i < n; i++) counts[i] += wf_rs_rows(dim0, n, i) * row;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    displs[i] = total;
    total += counts[i];
  }
  if (fusion_reserve(gs, (total + counts[me]) * es)) return WEFT_ERR_NO_MEMORY;
  char *in = gs->fusion_buf;
  size_t off = 0;
  for (int i = 0; i < n; i++)
    for (uint32_t t = 0; t < x->nfused; t++) {
      const wf_request_msg *q = &x->fused[t]->msg;
      size_t row = (size_t)wf_elems(q->shape, 1, q->ndim), dim0 = (size_t)q->shape[0], start = wf_rs_first(dim0, n, i);
      size_t k = wf_rs_rows(dim0, n, i) * row;
      if (k) wf_scale_copy(a->dtype, in + off * es, (const char *)x->fused[t]->in.data + start * row * es, k, q->prescale);
      off += k;
    }
  for (uint32_t t = 0; t < x->nfused; t++) {
    weft_request *q = x->fused[t];
    size_t rows = wf_rs_rows((size_t)q->msg.shape[0], n, me), row = (size_t)wf_elems(q->msg.shape, 1, q->msg.ndim);
    if (q->out.data) {
      q->result = q->out.data;
      q->result_owned = 0;
    } else if (wf_alloc_result(q, rows * row * es)) {
      return WEFT_ERR_NO_MEMORY;
    }
    wf_set_result_shape(q, (int64_t)rows);
  }
  a->in = in;
  a->out = in + total * es;
  a->counts = counts;
  a->displs = displs;
  return WEFT_OK;
}

/* Fused allreduce for an algorithm that takes the tensors where they lie
 * (algo.h, wf_seg): each output, prescaled (in place, or copied from its
 * input), is one segment; no fusion buffer, no packing, no unpacking. */
static weft_status prepare_segments(wf_gstate *gs, wf_coll_args *a) {
  wf_exec *x = &gs->exec;
  const wf_request_msg *m = &x->req->msg;
  wf_seg *segs = malloc(sizeof *segs * x->nfused);
  if (!segs) return WEFT_ERR_NO_MEMORY;
  size_t at = 0, n = 0;
  for (uint32_t i = 0; i < x->nfused; i++) {
    weft_request *q = x->fused[i];
    size_t k = (size_t)wf_elems(q->msg.shape, 0, q->msg.ndim);
    if (!k) continue;
    wf_scale_copy(m->dtype, q->out.data, q->in.data, k, m->prescale); /* in place when in == out */
    segs[n++] = (wf_seg){q->out.data, at, k};
    at += k;
  }
  x->segs = segs;
  x->segmented = 1;
  WF_DEBUG(WF_SUB_ENGINE, "fused allreduce of %u tensors in place (%zu segments)", x->nfused, n);
  a->segs = segs;
  a->nsegs = n;
  return WEFT_OK;
}


weft_status wf_fuse_prepare_allreduce(wf_gstate *gs, wf_coll_args *a, const char *forced) {
  wf_exec *x = &gs->exec;
  const wf_request_msg *m = &x->req->msg;
  size_t es = a->elem_size, sum = 0;
  for (uint32_t i = 0; i < x->nfused; i++) sum += (size_t)wf_elems(x->fused[i]->msg.shape, 0, x->fused[i]->msg.ndim);
  a->count = sum;
  if (wf_algo_takes_segments(a, forced)) return prepare_segments(gs, a);
  if (fusion_reserve(gs, sum * es)) return WEFT_ERR_NO_MEMORY;
  size_t off = 0; /* pack every tensor (prescaled) */
  for (uint32_t i = 0; i < x->nfused; i++) {
    weft_request *q = x->fused[i];
    size_t k = (size_t)wf_elems(q->msg.shape, 0, q->msg.ndim);
    wf_scale_copy(m->dtype, (char *)gs->fusion_buf + off * es, q->in.data, k, m->prescale);
    off += k;
  }
  a->buf = gs->fusion_buf;
  return WEFT_OK;
}

void wf_fuse_finalize(wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  weft_request *r = x->req;
  const wf_request_msg *m = &r->msg;
  int n = r->group->size;
  size_t es = weft_dtype_size(m->dtype);
  if (m->coll == WF_COLL_ALLREDUCE) { /* unpack unless reduced where they lie; post-process each */
    size_t off = 0;
    for (uint32_t i = 0; i < x->nfused; i++) {
      weft_request *q = x->fused[i];
      size_t k = (size_t)wf_elems(q->msg.shape, 0, q->msg.ndim);
      if (!x->segmented) wf_copy(q->out.data, (char *)gs->fusion_buf + off * es, k * es);
      wf_post_scale((weft_dtype)m->dtype, (weft_reduce_op)m->reduce_op, m->postscale, q->out.data, k, n);
      off += k;
    }
  } else if (m->coll == WF_COLL_ALLGATHER) { /* rank by rank, each tensor's rows */
    size_t *displs = x->arrays + n, *cur = x->arrays + 2 * n;
    for (int i = 0; i < n; i++) cur[i] = displs[i];
    for (uint32_t t = 0; t < x->nfused; t++) {
      weft_request *q = x->fused[t];
      size_t row = (size_t)wf_elems(q->msg.shape, 1, q->msg.ndim), off = 0;
      for (int i = 0; i < n; i++) {
        size_t k = (size_t)x->resp.sizes[(size_t)t * n + i] * row;
        if (k) wf_copy((char *)q->result + off * es, (char *)gs->fusion_buf + cur[i] * es, k * es);
        cur[i] += k;
        off += k;
      }
    }
  } else if (m->coll == WF_COLL_REDUCESCATTER) { /* this rank's slices, tensor after tensor */
    size_t total = 0, off = 0;
    for (int i = 0; i < n; i++) total += x->arrays[i];
    const char *res = (const char *)gs->fusion_buf + total * es;
    for (uint32_t t = 0; t < x->nfused; t++) {
      weft_request *q = x->fused[t];
      size_t k = wf_rs_rows((size_t)q->msg.shape[0], n, r->group->rank) * (size_t)wf_elems(q->msg.shape, 1, q->msg.ndim);
      if (k) wf_copy(q->result, res + off * es, k * es);
      wf_post_scale((weft_dtype)q->msg.dtype, (weft_reduce_op)q->msg.reduce_op, q->msg.postscale, q->result, k, n);
      off += k;
    }
  }
}
