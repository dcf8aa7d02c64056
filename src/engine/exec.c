/* exec.c - executes responses, one collective at a time, in the
 * coordinator's order: prepares buffers (prescale, outputs whose size the
 * response revealed), asks the registry for a schedule, runs its rounds on
 * the transport without blocking, applies postscale/average, completes the
 * request. An allreduce or broadcast of device tensors runs once per chunk
 * of the device pipeline (devstage.h), each chunk's schedule built when its
 * input is in host memory. Engine thread only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "engine/devstage.h"
#include "engine/engine.h"
#include "engine/fuse.h"
#include "reduce/reduce.h"
#include "util/copy.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"
#include "util/time.h"

/* Local steps run at most this long before the engine looks around. */
#define LOCAL_SLICE_NS (1000 * 1000LL)

int64_t wf_elems(const int64_t *shape, int from, int ndim) {
  int64_t n = 1;
  for (int d = from; d < ndim; d++) n *= shape[d];
  return n;
}

static void exec_clear(wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  wf_sched_free(&x->sched);
  wf_response_msg_free(&x->resp);
  free(x->send_idx);
  free(x->recv_idx);
  free(x->tmp);
  free(x->arrays);
  free(x->fused);
  free(x->segs);
  memset(x, 0, sizeof *x);
}

/* Completes the group's executing collective. Its transfers must be done
 * or cancelled (wf_exec_abort cancels them all first). */
static void exec_finish(weft_world *w, wf_gstate *gs, weft_status st, const char *msg) {
  wf_exec *x = &gs->exec;
  if (x->dpipe) wf_devpipe_end(w, x->dpipe); /* each device tensor's done event after its last copy */
  x->dpipe = NULL;
  weft_request *one = x->req, **many = x->fused;
  uint32_t n = x->nfused;
  const char *algo = x->algo; /* the registry's choice, static (NULL: none was built) */
  x->fused = NULL;
  exec_clear(gs);
  if (one && one->phantom) { /* a joined rank's part: nobody waits for it */
    wf_tl_end(&w->tl, one->msg.name, st == WEFT_OK ? NULL : msg);
    free(one->in.data);
    free(one);
    return;
  }
  if (one && one->alloc_failed && st == WEFT_OK) {
    if (one->result_owned) free(one->result);
    one->result = NULL;
    one->result_owned = 0;
    st = WEFT_ERR_NO_MEMORY;
    msg = "the output allocator returned NULL: this rank took part in the collective but its result was discarded";
  }
  if (many) {
    uint32_t now = 0; /* those that complete now (the others when their copy up is done: devstage.h) */
    for (uint32_t i = 0; i < n; i++) {
      weft_status sti = st;
      const char *msgi = msg;
      if (many[i]->alloc_failed && st == WEFT_OK) { /* fused allgather/reducescatter: as for one, above */
        if (many[i]->result_owned) free(many[i]->result);
        many[i]->result = NULL;
        many[i]->result_owned = 0;
        sti = WEFT_ERR_NO_MEMORY;
        msgi = "the output allocator returned NULL: this rank took part in the collective but its result was "
               "discarded";
      }
      many[i]->algo = algo;
      if (sti == WEFT_OK && many[i]->dstage && wf_devstage_upload(w, many[i], &sti, &msgi)) {
        wf_tl_end(&w->tl, many[i]->msg.name, NULL);
        continue;
      }
      wf_tl_end(&w->tl, many[i]->msg.name, sti == WEFT_OK ? NULL : msgi ? msgi : weft_status_string(sti));
      many[i]->status = sti;
      if (sti != WEFT_OK && msgi) many[i]->error = strdup(msgi);
      many[now++] = many[i];
    }
    wf_request_complete_many(w, many, now); /* one lock, one wake-up for all */
    free(many);
  } else if (one) {
    one->algo = algo;
    if (st == WEFT_OK && one->dstage && wf_devstage_upload(w, one, &st, &msg)) {
      wf_tl_end(&w->tl, one->msg.name, NULL);
      return;
    }
    wf_tl_end(&w->tl, one->msg.name, st == WEFT_OK ? NULL : msg ? msg : weft_status_string(st));
    wf_request_complete(w, one, st, msg);
  }
}

void wf_exec_abort(weft_world *w, weft_status st, const char *msg) {
  int any = 0;
  for (int gi = 0; gi < w->ngs; gi++) any |= w->gs[gi]->exec.active;
  if (!any) return;
  w->tr->ops->cancel_data(w->tr); /* the transports forget every buffer first */
  for (int gi = 0; gi < w->ngs; gi++)
    if (w->gs[gi]->exec.active) exec_finish(w, w->gs[gi], st, msg);
}

int64_t wf_exec_deadline(weft_world *w, const char **name) {
  int64_t d = INT64_MAX;
  *name = "";
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_exec *x = &w->gs[gi]->exec;
    if (x->active && x->deadline < d) {
      d = x->deadline;
      *name = x->req->msg.name;
    }
  }
  return d;
}

weft_status wf_alloc_result(weft_request *r, size_t bytes) {
  if (r->dstage) return wf_devstage_host_result(r, bytes); /* a device tensor's: host, then copied up */
  if (r->alloc) {
    r->result = r->alloc(bytes, r->alloc_ctx);
    r->result_owned = 0;
    if (r->result || !bytes) return WEFT_OK;
    /* The other ranks run this collective anyway: take part with a private
     * buffer so nobody waits, and report NO_MEMORY for this request. */
    r->alloc_failed = 1;
  }
  {
    r->result = malloc(bytes ? bytes : 1);
    r->result_owned = 1;
    if (!r->result) return WEFT_ERR_NO_MEMORY;
  }
  return WEFT_OK;
}

static const char *forced_algo(const weft_world *w, wf_coll c);

/* Fills args for the response's collective; allocates outputs. */
/* The arguments every collective has. */
static void base_args(wf_gstate *gs, wf_coll_args *a) {
  const wf_request_msg *m = &gs->exec.req->msg;
  const weft_world *w = gs->group->world;
  memset(a, 0, sizeof *a);
  a->coll = m->coll;
  a->dtype = m->dtype;
  a->op = m->reduce_op;
  a->elem_size = weft_dtype_size(m->dtype);
  a->rank = gs->group->rank;
  a->size = gs->group->size;
  a->root = m->root;
  a->segment_bytes = (size_t)w->set.ring_segment_bytes;
  a->set = &w->set;
  a->topo = &gs->topo;
}

static weft_status prepare(wf_gstate *gs, wf_coll_args *a, char *err, size_t errlen) {
  wf_exec *x = &gs->exec;
  weft_request *r = x->req;
  const wf_request_msg *m = &r->msg;
  weft_group *g = r->group;
  const weft_world *w = g->world;
  int n = g->size, me = g->rank;
  size_t es = weft_dtype_size(m->dtype);
  base_args(gs, a);
  size_t row = m->ndim ? (size_t)wf_elems(m->shape, 1, m->ndim) : 1;
  size_t total = (size_t)wf_elems(m->shape, 0, m->ndim);
  x->arrays = calloc((size_t)n * 6, sizeof(size_t));
  if (!x->arrays) return WEFT_ERR_NO_MEMORY;
  size_t *counts = x->arrays, *displs = counts + n, *sc = displs + n, *sd = sc + n, *rc = sd + n, *rd = rc + n;
  switch (m->coll) {
    case WF_COLL_ALLREDUCE:
      if (x->nfused > 1) return wf_fuse_prepare_allreduce(gs, a, forced_algo(w, WF_COLL_ALLREDUCE));
      a->buf = r->out.data;
      a->count = total;
      wf_scale_copy(m->dtype, r->out.data, r->in.data, total, m->prescale); /* in place when in == out */
      break;
    case WF_COLL_BROADCAST:
      a->buf = r->in.data;
      a->count = total;
      break;
    case WF_COLL_ALLGATHER: {
      if (x->nfused > 1) return wf_fuse_prepare_allgather(gs, a, err, errlen);
      if (x->resp.nsizes != (uint32_t)n) {
        snprintf(err, errlen, "allgather response carries %u sizes for %d ranks", x->resp.nsizes, n);
        return WEFT_ERR_PROTOCOL;
      }
      size_t rows = 0;
      for (int i = 0; i < n; i++) {
        counts[i] = (size_t)x->resp.sizes[i] * row;
        displs[i] = rows * row;
        rows += (size_t)x->resp.sizes[i];
      }
      if (x->resp.sizes[me] != m->shape[0]) {
        snprintf(err, errlen, "allgather response says this rank has %lld rows, it has %lld",
                 (long long)x->resp.sizes[me], (long long)m->shape[0]);
        return WEFT_ERR_PROTOCOL;
      }
      if (wf_alloc_result(r, rows * row * es)) return WEFT_ERR_NO_MEMORY;
      wf_set_result_shape(r, (int64_t)rows);
      a->in = r->in.data;
      a->out = r->result;
      a->counts = counts;
      a->displs = displs;
      break;
    }
    case WF_COLL_ALLTOALL: {
      if (x->resp.nsizes != (uint32_t)(n * n)) {
        snprintf(err, errlen, "alltoall response carries %u splits for %d ranks", x->resp.nsizes, n);
        return WEFT_ERR_PROTOCOL;
      }
      r->recv_splits = malloc(sizeof(int64_t) * (size_t)n);
      if (!r->recv_splits) return WEFT_ERR_NO_MEMORY;
      r->nrecv_splits = n;
      size_t so = 0, ro = 0;
      int64_t bmax = 0; /* the largest block anywhere: the same on every rank */
      for (size_t k = 0; k < (size_t)n * (size_t)n; k++)
        if (x->resp.sizes[k] > bmax) bmax = x->resp.sizes[k];
      for (int j = 0; j < n; j++) {
        int64_t s = x->resp.sizes[(size_t)me * (size_t)n + (size_t)j];
        int64_t q = x->resp.sizes[(size_t)j * (size_t)n + (size_t)me];
        sc[j] = (size_t)s * row;
        sd[j] = so;
        so += sc[j];
        rc[j] = (size_t)q * row;
        rd[j] = ro;
        ro += rc[j];
        r->recv_splits[j] = q;
      }
      if (wf_alloc_result(r, ro * es)) return WEFT_ERR_NO_MEMORY;
      wf_set_result_shape(r, (int64_t)(row ? ro / row : 0));
      if (!row) {
        int64_t rows = 0;
        for (int j = 0; j < n; j++) rows += r->recv_splits[j];
        r->result_shape[0] = rows;
      }
      a->in = r->in.data;
      a->out = r->result;
      a->send_counts = sc;
      a->send_displs = sd;
      a->recv_counts = rc;
      a->recv_displs = rd;
      a->block_max = (size_t)bmax * row;
      break;
    }
    case WF_COLL_REDUCESCATTER: {
      if (x->nfused > 1) return wf_fuse_prepare_reducescatter(gs, a);
      size_t dim0 = (size_t)m->shape[0], off = 0;
      for (int i = 0; i < n; i++) {
        size_t rows = dim0 / (size_t)n + ((size_t)i < dim0 % (size_t)n);
        counts[i] = rows * row;
        displs[i] = off;
        off += counts[i];
      }
      const void *in = r->in.data;
      if (m->prescale != 1.0 && total) {
        x->tmp = malloc(total * es);
        if (!x->tmp) return WEFT_ERR_NO_MEMORY;
        wf_scale_copy(m->dtype, x->tmp, in, total, m->prescale);
        in = x->tmp;
      }
      if (r->out.data) {
        r->result = r->out.data;
        r->result_owned = 0;
      } else if (wf_alloc_result(r, counts[me] * es)) {
        return WEFT_ERR_NO_MEMORY;
      }
      wf_set_result_shape(r, (int64_t)(counts[me] / (row ? row : 1)));
      if (!row) r->result_shape[0] = (int64_t)wf_rs_rows(dim0, n, me);
      a->in = in;
      a->out = r->result;
      a->counts = counts;
      a->displs = displs;
      break;
    }
    case WF_COLL_PERMUTE: { /* the agreed permutation is the response's sizes (validate.c) */
      if (x->resp.nsizes != (uint32_t)n) {
        snprintf(err, errlen, "permute response carries %u entries for %d ranks", x->resp.nsizes, n);
        return WEFT_ERR_PROTOCOL;
      }
      a->send_to = (int)x->resp.sizes[me];
      a->recv_from = -1;
      for (int q = 0; q < n; q++)
        if (x->resp.sizes[q] == me) a->recv_from = q;
      a->count = total;
      a->in = r->in.data;
      a->out = r->out.data;
      if (total && a->send_to != me && r->in.data == r->out.data) { /* in place: send from a copy */
        x->tmp = malloc(total * es);
        if (!x->tmp) return WEFT_ERR_NO_MEMORY;
        memcpy(x->tmp, r->in.data, total * es);
        a->in = x->tmp;
      }
      break;
    }
    case WF_COLL_BARRIER:
    case WF_COLL_JOIN:
      break;
    default:
      snprintf(err, errlen, "unknown collective %u", m->coll);
      return WEFT_ERR_PROTOCOL;
  }
  return WEFT_OK;
}

/* WEFT_ALGO_<COLL> ("" automatic). */
static const char *forced_algo(const weft_world *w, wf_coll c) {
  return (int)c >= 0 && (int)c < WF_SET_ALGO_COLLS ? w->set.algo[c] : "";
}

/* Applies average (1/n) and postscale to count elements at buf. */
static void post_process(const wf_request_msg *m, void *buf, size_t count, int n) {
  wf_post_scale((weft_dtype)m->dtype, (weft_reduce_op)m->reduce_op, m->postscale, buf, count, n);
}

/* Output post-processing once the schedule has run. */
static void finalize_output(wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  weft_request *r = x->req;
  const wf_request_msg *m = &r->msg;
  int n = r->group->size;
  if (x->nfused > 1 && m->coll != WF_COLL_BARRIER) {
    wf_fuse_finalize(gs);
  } else if (m->coll == WF_COLL_ALLREDUCE) {
    post_process(m, r->out.data, (size_t)wf_elems(m->shape, 0, m->ndim), n);
  } else if (m->coll == WF_COLL_REDUCESCATTER) {
    post_process(m, r->result, x->arrays[r->group->rank], n);
  }
}

/* The identity of op for dtype, written count times: what a joined rank
 * contributes so the others' result is unchanged. */
#define FILL(T, v)                                                             \
  do {                                                                         \
    T *p_ = buf;                                                               \
    for (size_t i_ = 0; i_ < count; i_++) p_[i_] = (v);                        \
  } while (0)
static void fill_identity(weft_dtype t, weft_reduce_op op, void *buf, size_t count) {
  int lo = op == WEFT_OP_MAX, hi = op == WEFT_OP_MIN, one = op == WEFT_OP_PRODUCT;
  if (!lo && !hi && !one) { /* sum, average */
    memset(buf, 0, count * weft_dtype_size(t));
    return;
  }
  switch (t) {
    case WEFT_DTYPE_UINT8: FILL(uint8_t, one ? 1 : hi ? UINT8_MAX : 0); break;
    case WEFT_DTYPE_INT8: FILL(int8_t, one ? 1 : hi ? INT8_MAX : INT8_MIN); break;
    case WEFT_DTYPE_UINT16: FILL(uint16_t, one ? 1 : hi ? UINT16_MAX : 0); break;
    case WEFT_DTYPE_INT16: FILL(int16_t, one ? 1 : hi ? INT16_MAX : INT16_MIN); break;
    case WEFT_DTYPE_INT32: FILL(int32_t, one ? 1 : hi ? INT32_MAX : INT32_MIN); break;
    case WEFT_DTYPE_INT64: FILL(int64_t, one ? 1 : hi ? INT64_MAX : INT64_MIN); break;
    case WEFT_DTYPE_FLOAT16: FILL(uint16_t, one ? 0x3C00 : hi ? 0x7C00 : 0xFC00); break;
    case WEFT_DTYPE_BFLOAT16: FILL(uint16_t, one ? 0x3F80 : hi ? 0x7F80 : 0xFF80); break;
    case WEFT_DTYPE_FLOAT32: FILL(float, one ? 1.0f : hi ? INFINITY : -INFINITY); break;
    case WEFT_DTYPE_FLOAT64: FILL(double, one ? 1.0 : hi ? INFINITY : -INFINITY); break;
    case WEFT_DTYPE_BOOL: FILL(uint8_t, one || hi ? 1 : 0); break; /* and: true; or: false */
    default: break;
  }
}

/* This rank has joined: a request standing in for its part in a collective
 * the others submitted (allreduce: the identity; barrier: nothing). */
static weft_request *phantom(weft_world *w, wf_gstate *gs, const wf_response_msg *resp) {
  weft_request *p = wf_request_new();
  if (!p) return NULL;
  p->phantom = 1;
  p->world = w;
  p->group = gs->group;
  p->msg.group_id = gs->id;
  p->msg.coll = resp->coll;
  p->msg.prescale = p->msg.postscale = 1.0;
  p->msg.root = -1;
  snprintf(p->msg.name, sizeof p->msg.name, "%s", resp->names[0]);
  if (resp->coll == WF_COLL_ALLREDUCE && resp->nsizes >= 3) {
    int64_t n = 0;
    for (uint32_t i = 2; i < resp->nsizes; i++) n += resp->sizes[i];
    p->msg.dtype = (uint8_t)resp->sizes[0];
    p->msg.reduce_op = (uint8_t)(resp->sizes[1] & ~(int64_t)WF_AR_STAGED);
    if (resp->sizes[1] & WF_AR_STAGED) p->phantom = 2;
    p->msg.ndim = 1;
    p->msg.shape[0] = n;
    size_t bytes = (size_t)n * weft_dtype_size((weft_dtype)p->msg.dtype);
    p->in.data = malloc(bytes ? bytes : 1);
    if (!p->in.data) {
      free(p);
      return NULL;
    }
    fill_identity((weft_dtype)p->msg.dtype, (weft_reduce_op)p->msg.reduce_op, p->in.data, (size_t)n);
    p->out.data = p->in.data;
  }
  return p;
}

/* Starts the group's next queued response. Returns 1 if one was taken. */
static int start_built(weft_world *w, wf_gstate *gs, weft_request *r, weft_request **fused, uint32_t nfused,
                       wf_response_msg *resp, const char *name);

/* 1 when the next response's device tensors have their inputs on the host
 * (devstage.h); else it stays queued and the engine looks again soon. */
static int inputs_ready(weft_world *w, wf_gstate *gs) {
  const wf_response_msg *resp = &gs->resps[gs->resps_pos];
  gs->dev_wait = 0;
  if (resp->type == WF_RESP_ERROR || !wf_devstage_used(w)) return 1;
  for (uint32_t i = 0; i < resp->nnames; i++)
    if (!wf_devstage_ready(w, wf_strmap_get(&gs->table, resp->names[i]))) return !(gs->dev_wait = 1);
  return 1;
}

static int start_next(weft_world *w, wf_gstate *gs) {
  if (gs->resps_pos >= gs->nresps || !inputs_ready(w, gs)) return 0;
  wf_response_msg resp = gs->resps[gs->resps_pos++];
  if (gs->resps_pos == gs->nresps) gs->resps_pos = gs->nresps = 0;
  if (resp.seq != gs->next_seq) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "group %u: response %llu arrived when %llu was expected (coordinator rank %d)",
                  gs->id, (unsigned long long)resp.seq, (unsigned long long)gs->next_seq, gs->coord_rank);
    wf_response_msg_free(&resp);
    return 1;
  }
  gs->next_seq++;
  const char *name = resp.nnames ? resp.names[0] : "";
  weft_request *r = resp.nnames ? wf_strmap_get(&gs->table, name) : NULL;
  if (resp.type == WF_RESP_ERROR) {
    /* A timeout may name a tensor this rank never submitted: nothing to
     * fail. One decided without this rank (it lists the rank among those
     * missing) is not about the request this rank may have in flight for
     * the name: that one reached the coordinator after the decision and is
     * negotiated anew. */
    int without_me = 0;
    for (uint32_t i = 0; i < resp.nsizes && !without_me; i++) without_me = resp.sizes[i] == gs->group->rank;
    if (r && !without_me) {
      wf_strmap_del(&gs->table, name);
      wf_tl_end(&w->tl, name, resp.error ? resp.error : "error");
      wf_request_complete(w, r, resp.status < 0 ? (weft_status)resp.status : WEFT_ERR_INTERNAL, resp.error);
    }
    wf_response_msg_free(&resp);
    return 1;
  }
  weft_request *joined = wf_strmap_get(&gs->table, "weft.join");
  if (!r && joined && (resp.coll == WF_COLL_ALLREDUCE || resp.coll == WF_COLL_BARRIER)) {
    /* joined: take part with the identity; the fused tensors count as one */
    r = phantom(w, gs, &resp);
    if (!r) {
      wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory taking part in '%s' after joining", name);
      wf_response_msg_free(&resp);
      return 1;
    }
    return start_built(w, gs, r, NULL, 1, &resp, name);
  }
  if (r && resp.coll == WF_COLL_JOIN) {
    wf_strmap_del(&gs->table, name);
    r->last_joined = resp.nsizes ? (int)resp.sizes[0] : -1;
    wf_tl_end(&w->tl, name, NULL);
    wf_response_msg_free(&resp);
    wf_request_complete(w, r, WEFT_OK, NULL);
    return 1;
  }
  weft_request **fused = NULL;
  if (r && resp.nnames > 1) {
    fused = malloc(sizeof *fused * resp.nnames);
    for (uint32_t i = 0; fused && i < resp.nnames; i++) {
      fused[i] = wf_strmap_get(&gs->table, resp.names[i]);
      if (!fused[i] || fused[i]->msg.coll != resp.coll) {
        name = resp.names[i];
        r = NULL;
        break;
      }
    }
    if (!fused) {
      wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory starting a fused collective");
      wf_response_msg_free(&resp);
      return 1;
    }
  }
  if (!r) {
    free(fused);
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "the coordinator of group %u scheduled tensor '%s', which this rank did not "
                  "submit", gs->id, name);
    wf_response_msg_free(&resp);
    return 1;
  }
  for (uint32_t i = 0; i < resp.nnames; i++) {
    weft_request *q = wf_strmap_del(&gs->table, resp.names[i]);
    atomic_store_explicit(&q->state, WF_REQ_RUNNING, memory_order_relaxed);
  }
  return start_built(w, gs, r, fused, fused ? resp.nnames : 1, &resp, name);
}

/* Sets up gs's executor for response *resp (taken) and request r (or the
 * nfused requests of a fused response), prepares buffers and builds the
 * schedule. Returns 1 (a response was taken). */
static int start_built(weft_world *w, wf_gstate *gs, weft_request *r, weft_request **fused, uint32_t nfused,
                       wf_response_msg *resp, const char *name) {
  wf_exec *x = &gs->exec;
  memset(x, 0, sizeof *x);
  x->active = 1;
  x->req = r;
  x->fused = fused;
  x->nfused = nfused;
  x->resp = *resp;
  x->seq = resp->seq;
  x->tag = wf_data_tag(gs->id, resp->seq);
  x->deadline = wf_deadline_after(w->timeout_seconds);
  char err[512] = "";
  wf_coll_args a;
  weft_status st = WEFT_OK;
  int piped = r->dstage || fused ? wf_devpipe_wants(x) : 0;
  int chunked = piped || r->phantom == 2;
  if (piped) {
    /* device tensors' allreduce/broadcast: chunk by chunk (chunk_start) */
    st = wf_devpipe_begin(w, gs, &x->dpipe);
    if (st != WEFT_OK) snprintf(err, sizeof err, "%s", wf_err_msg());
    x->chunk_wait = 1;
  } else if (chunked) { /* joined: the same chunks, in host memory */
    x->hchunk = wf_devpipe_chunk_elems(w, (weft_dtype)r->msg.dtype);
    x->chunk_wait = 1;
  } else {
    for (uint32_t i = 0; i < nfused && st == WEFT_OK; i++) { /* gathers: the inputs into host memory first */
      weft_request *q = fused ? fused[i] : r;
      if (!q->dstage) continue;
      st = wf_devstage_bounce_in(w, q, x->deadline);
      if (st != WEFT_OK) {
        snprintf(err, sizeof err, "device tensor '%s': %s", q->msg.name, wf_err_msg());
        name = q->msg.name;
      }
    }
    if (st == WEFT_OK) st = prepare(gs, &a, err, sizeof err);
  }
  if (st == WEFT_OK) {
    x->send_idx = calloc((size_t)w->size, sizeof *x->send_idx);
    x->recv_idx = calloc((size_t)w->size, sizeof *x->recv_idx);
    if (!x->send_idx || !x->recv_idx) st = WEFT_ERR_NO_MEMORY;
  }
  if (!chunked) wf_sched_init(&x->sched, r->msg.dtype, (weft_reduce_op)r->msg.reduce_op);
  if (st == WEFT_OK && !chunked && r->msg.coll != WF_COLL_BARRIER && r->msg.coll != WF_COLL_JOIN) {
    st = wf_algo_build(&a, forced_algo(w, r->msg.coll), &x->sched, &x->algo);
    if (st != WEFT_OK) snprintf(err, sizeof err, "%s", wf_err_msg());
  }
  if (st == WEFT_OK && !chunked) st = wf_sched_finish(&x->sched);
  if (st != WEFT_OK) {
    /* The other ranks run this collective: one that cannot leaves them
     * waiting, so the whole world fails, naming the tensor and the cause. */
    char msg[1024];
    snprintf(msg, sizeof msg, "tensor '%s' cannot run on rank %d: %s", name, w->rank,
             err[0] ? err : weft_status_string(st));
    exec_finish(w, gs, st, msg);
    wf_world_fail(w, st, "%s", msg);
    return 1;
  }
  if (wf_tl_on(&w->tl)) {
    for (uint32_t i = 0; i < x->nfused; i++) {
      weft_request *q = x->fused ? x->fused[i] : r;
      wf_tl_end(&w->tl, q->msg.name, NULL);
      wf_tl_begin(&w->tl, q->msg.name, wf_phase_run(q->msg.coll), wf_request_bytes(q),
                  piped ? "device-pipeline" : x->algo ? x->algo : "-");
    }
  }
  WF_DEBUG(WF_SUB_ENGINE, "run %s '%s' group %u seq %llu with %s (%zu rounds; %zu device chunks)",
           wf_coll_name(r->msg.coll), name, gs->id, (unsigned long long)x->seq, x->algo ? x->algo : "-",
           x->sched.nrounds, x->dpipe ? wf_devpipe_chunks(x->dpipe) : (size_t)0);
  return 1;
}

/* A joined rank's next chunk of a staged allreduce (its identity, in host
 * memory): 1 and *buf, *count set, or 0 when none is left. */
static int host_chunk(wf_exec *x, void **buf, size_t *count) {
  size_t total = (size_t)x->req->msg.shape[0];
  if (x->hchunk_at >= total || !x->hchunk) return 0;
  *count = total - x->hchunk_at < x->hchunk ? total - x->hchunk_at : x->hchunk;
  *buf = (char *)x->req->in.data + x->hchunk_at * weft_dtype_size((weft_dtype)x->req->msg.dtype);
  x->hchunk_at += *count;
  return 1;
}

/* The pipeline's current chunk: once its input is in host memory, builds
 * its schedule (the response's algorithm on the chunk). 1: built (post its
 * first round), 0: not yet, -1: nothing more to do here (finished, or
 * failed: the world's failure ends it). */
static int chunk_start(weft_world *w, wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  void *buf = NULL;
  size_t count = 0;
  if (x->dpipe ? !wf_devpipe_chunks(x->dpipe) : !host_chunk(x, &buf, &count)) { /* nothing to move: empty */
    x->chunk_wait = 0;
    exec_finish(w, gs, WEFT_OK, NULL);
    return -1;
  }
  int rc = x->dpipe ? wf_devpipe_chunk(w, x->dpipe, &buf, &count) : 1;
  if (rc == 0) return 0;
  x->chunk_wait = 0;
  if (rc < 0) {
    x->pending = 1; /* stuck until the world's failure ends it */
    return -1;
  }
  wf_coll_args a;
  base_args(gs, &a);
  a.buf = buf;
  a.count = count;
  wf_sched_free(&x->sched);
  x->round = x->round_first = x->local_done = 0;
  x->pending = 0;
  wf_sched_init(&x->sched, x->req->msg.dtype, (weft_reduce_op)x->req->msg.reduce_op);
  weft_status st = wf_algo_build(&a, forced_algo(w, x->req->msg.coll), &x->sched, &x->algo);
  if (st == WEFT_OK) st = wf_sched_finish(&x->sched);
  if (st != WEFT_OK) {
    char msg[768];
    snprintf(msg, sizeof msg, "tensor '%s' cannot run on rank %d: %s", x->req->msg.name, w->rank, wf_err_msg());
    exec_finish(w, gs, st, msg);
    wf_world_fail(w, st, "%s", msg);
    return -1;
  }
  return 1;
}

/* x needs peer, which has left: its failure, after a grace period in which
 * the real cause (another rank's death, a relayed failure) may arrive. */
static void fail_departed(weft_world *w, const wf_exec *x, int peer) {
  wf_world_fail_later(w, WEFT_ERR_PEER_LOST, "rank %d (%s) has shut down (weft_finalize) but collective '%s' needs it",
                      peer, w->peers[peer].host, x->req->msg.name);
}

/* Posts the transfers of the current round. Returns WEFT_OK or an error. */
static weft_status post_round(weft_world *w, wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  const int *ranks = gs->group->ranks;
  size_t end = x->sched.round_end[x->round];
  for (size_t i = x->round_first; i < end; i++) {
    const wf_step *s = &x->sched.steps[i];
    if (s->kind != WF_STEP_SEND && s->kind != WF_STEP_RECV) continue;
    int peer = ranks[s->peer];
    weft_status st = s->kind == WF_STEP_SEND
                         ? w->tr->ops->send(w->tr, peer, x->tag, x->send_idx[peer]++, s->src, s->bytes, &x->pending)
                         : w->tr->ops->recv(w->tr, peer, x->tag, x->recv_idx[peer]++, s->dst, s->bytes, &x->pending);
    if (st != WEFT_OK) {
      if (w->departed[peer]) {
        /* a peer that left is rarely the cause: give the real one (another
         * rank's death, a relayed failure) a moment to arrive first */
        fail_departed(w, x, peer);
        return WEFT_IN_PROGRESS; /* stuck until then */
      }
      char why[512];
      snprintf(why, sizeof why, "%s", wf_err_msg());
      return wf_err(st, "collective '%s': %s (rank %d on %s)", x->req->msg.name, why, peer, w->peers[peer].host);
    }
  }
  /* A peer that left (its BYE processed, so all it sent has arrived) never
   * completes a transfer that is still incomplete once posted: whether the
   * transport noticed the closed connection yet or not, that is a failure. */
  for (size_t i = x->round_first; i < end; i++) {
    const wf_step *s = &x->sched.steps[i];
    if (s->kind != WF_STEP_SEND && s->kind != WF_STEP_RECV) continue;
    int peer = ranks[s->peer];
    if (w->departed[peer] && w->tr->ops->incomplete(w->tr, peer)) {
      fail_departed(w, x, peer);
      return WEFT_OK; /* its transfers stay pending until then */
    }
  }
  return WEFT_OK;
}

void wf_set_result_shape(weft_request *r, int64_t dim0) {
  r->result_ndim = r->msg.ndim;
  memcpy(r->result_shape, r->msg.shape, sizeof r->msg.shape);
  if (r->msg.ndim) r->result_shape[0] = dim0;
}

void wf_exec_peer_departed(weft_world *w, int peer) {
  /* Everything peer sent came before its BYE: a transfer with it that is
   * still incomplete now never will be. Later receives from it are checked
   * when posted (the transport satisfies them from what arrived, or fails). */
  /* Nor will it take part in the cross-memory reads still to come: it gave
   * up on the collective, and its buffer may already be gone. */
  int incomplete = w->tr->ops->incomplete(w->tr, peer);
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_exec *x = &w->gs[gi]->exec;
    int gp = x->active ? wf_group_index(w->gs[gi]->group, peer) : -1;
    if (gp >= 0 && (incomplete || wf_sched_reads_peer(&x->sched, x->round_first, gp))) {
      fail_departed(w, x, peer);
      return;
    }
  }
}

static void progress_group(weft_world *w, wf_gstate *gs) {
  wf_exec *x = &gs->exec;
  for (;;) {
    weft_status st = WEFT_OK;
    if (!x->active || x->chunk_wait) {
      if (!x->active && !start_next(w, gs)) return;
      if (!x->active) continue;
      if (x->chunk_wait) {
        int rc = chunk_start(w, gs);
        if (rc < 0) continue; /* finished (the next response), or stuck until the failure ends it */
        if (rc == 0) return;
      }
      if (x->sched.nrounds > 0) st = post_round(w, gs);
    } else if (x->pending > 0) {
      return;
    } else {
      /* The round's transfers are complete: run its local steps, for a
       * millisecond at most (a 128 MiB fold takes tens of them, hundreds
       * under sanitizers), so the engine thread keeps answering heartbeats,
       * departures and finalize in between. */
      wf_sched_cursor cur = {x->round_first, x->local_done};
      st = wf_sched_run_local_until(&x->sched, &cur, x->sched.round_end[x->round], wf_now_ns() + LOCAL_SLICE_NS);
      x->round_first = cur.step;
      x->local_done = cur.done;
      if (st == WEFT_IN_PROGRESS) {
        /* out of time: again at once; a staged step waiting for its peers
         * (algo/shm_stage.h): again when the segment moves */
        if (x->sched.steps[cur.step].kind != WF_STEP_STAGE) w->local_more = 1;
        return;
      }
      if (st != WEFT_OK) {
        /* A cross-memory read failed: the peer died, or gave up on this
         * collective (and reused its buffer) because of a failure whose
         * report may still be on its way. As for a departed peer, give the
         * real cause a moment to arrive first; the world's failure then
         * ends this collective, which nothing else completes. */
        char why[512];
        snprintf(why, sizeof why, "%s", wf_err_msg());
        wf_world_fail_later(w, st, "collective '%s' on rank %d: %s", x->req->msg.name, w->rank, why);
        x->pending = 1;
        return;
      }
      x->round_first = x->sched.round_end[x->round];
      x->local_done = 0;
      if (++x->round < x->sched.nrounds) st = post_round(w, gs);
    }
    if (st == WEFT_IN_PROGRESS) return; /* waits for a failure already scheduled */
    if (st != WEFT_OK) {
      /* A transfer could not be posted: the peer is gone, or memory. */
      char msg[768];
      snprintf(msg, sizeof msg, "%s", wf_err_msg());
      wf_world_fail(w, st, "%s", msg);
      return;
    }
    if (x->round >= x->sched.nrounds && x->dpipe) {
      int rc = wf_devpipe_chunk_done(w, x->dpipe); /* post-scaled there, chunk by chunk */
      if (rc > 0) x->chunk_wait = 1;
      else if (rc == 0) exec_finish(w, gs, WEFT_OK, NULL);
      else x->pending = 1; /* stuck until the world's failure ends it */
    } else if (x->round >= x->sched.nrounds && x->hchunk && x->hchunk_at < (size_t)x->req->msg.shape[0]) {
      x->chunk_wait = 1; /* a joined rank's next chunk */
    } else if (x->round >= x->sched.nrounds) {
      finalize_output(gs);
      exec_finish(w, gs, WEFT_OK, NULL);
    }
  }
}

void wf_exec_progress(weft_world *w) {
  w->local_more = 0;
  for (int gi = 0; gi < w->ngs; gi++) progress_group(w, w->gs[gi]);
}
