/* api.c - weft_remote_* on a world: the world's core (made on first use
 * and attached to the engine's hook, engine/ext.h), its link (frames out
 * through the remote rings to ranks of this host (engine/rmbox.h; drained
 * and waited for by the core's threads) or else the engine thread, to this
 * rank directly; peers' state from the
 * engine; bulk transfers as point-to-point transfers in the world's remote
 * group, engine/p2p.h), and argument checks that need the world. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/ext.h"
#include "engine/p2p.h"
#include "engine/rmbox.h"
#include "remote/remote.h"
#include "util/err.h"

#define WF_REMOTE_GRACE_SECONDS 2.0 /* a dead caller's objects are freed this long after it was seen dead */
/* Tensors of at least this many bytes travel on the point-to-point data path
 * rather than inline in their frame: p2p's own inline size (below it a
 * transfer is one frame either way). */
#define WF_REMOTE_BULK_MIN ((uint64_t)WF_P2P_EAGER_MAX)

typedef struct wf_remote_world {
  weft_world *w;
  wf_remote *r;
  _Atomic int attached; /* the world's core (its threads drain the rings only then: r is set, frames go nowhere else) */
} wf_remote_world;

static weft_status link_send(void *ctx, int peer, wf_buf *frame) {
  wf_remote_world *rw = ctx;
  if (peer != rw->w->rank) return wf_rmbox_send(rw->w, peer, frame); /* a ring of this host's, or the engine */
  char err[256]; /* to this rank: no connection; straight into the core */
  weft_status st = frame->oom || frame->len < WF_FRAME_HDR_SIZE
                       ? WEFT_ERR_NO_MEMORY
                       : wf_remote_deliver(rw->r, peer, frame->data[5], frame->data + WF_FRAME_HDR_SIZE,
                                           frame->len - WF_FRAME_HDR_SIZE, err, sizeof err);
  wf_buf_free(frame);
  return st;
}

/* Engine thread, p2p's lock held: hands the end to the core (which posts nothing here). */
static void bulk_done(weft_request *req, weft_status st, void *ctx) {
  wf_remote_bulk_done(ctx, st, st == WEFT_OK ? NULL : weft_request_error(req));
  weft_request_free(req);
}

static weft_status link_bulk(void *ctx, int peer, int send, uint64_t key, void *data, size_t n, wf_rbulk *tok) {
  weft_world *w = ((wf_remote_world *)ctx)->w;
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {.dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = shape, .data = data, .device = WEFT_DEVICE_CPU};
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.callback = bulk_done;
  o.user_data = tok;
  weft_request *req;
  return wf_p2p_post(&w->remote_group, send ? WF_P2P_REQ_SEND : WF_P2P_REQ_RECV, peer, key, &t, &o, &req);
}

static int link_lost(void *ctx, int peer, char *msg, size_t len) {
  return wf_ext_peer_state(((wf_remote_world *)ctx)->w, peer, msg, len);
}

static weft_status ext_deliver(void *ctx, int peer, uint8_t type, const uint8_t *p, size_t n, char *err,
                               size_t errlen) {
  return wf_remote_deliver(((wf_remote_world *)ctx)->r, peer, type, p, n, err, errlen);
}

/* The rings into this rank (engine/rmbox.h), drained by the core's waiting threads. */
static int link_poll(void *ctx) {
  wf_remote_world *rw = ctx;
  if (!atomic_load_explicit(&rw->attached, memory_order_acquire)) return 0;
  return wf_rmbox_drain(rw->w, -1, 0, 1, ext_deliver, rw);
}

static uint32_t link_bell(void *ctx, int which) { return wf_rmbox_bell(((wf_remote_world *)ctx)->w, which); }

static void link_sleep(void *ctx, int which, uint32_t seen, int64_t ns) {
  wf_rmbox_sleep(((wf_remote_world *)ctx)->w, which, seen, ns);
}

static void link_ring(void *ctx, int which) { wf_rmbox_ring(((wf_remote_world *)ctx)->w, which); }

static void link_busy(void *ctx, int on) { wf_rmbox_busy(((wf_remote_world *)ctx)->w, on); }

_Static_assert((int)WF_RLINK_WORK == (int)WF_RMBOX_BELL_WORK && (int)WF_RLINK_DONE == (int)WF_RMBOX_BELL_DONE,
               "the bells");

static void ext_stop(void *ctx) {
  wf_remote_world *rw = ctx;
  wf_remote_free(rw->r);
  free(rw);
}

static const wf_ext_ops k_ops = {ext_deliver, ext_stop};

/* The world's core, made on first use. */
static weft_status get(weft_world *w, const char *fn, wf_remote **out) {
  weft_status st;
  *out = NULL;
  if (!w || w->magic != WF_WORLD_MAGIC) return wf_err(WEFT_ERR_MISUSE, "%s: not a world handle", fn);
  wf_remote_world *rw = wf_ext_get(w);
  if (rw) {
    *out = rw->r;
    return WEFT_OK;
  }
  if (!(rw = calloc(1, sizeof *rw))) return wf_err(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  rw->w = w;
  uint64_t bulk_min = WF_REMOTE_BULK_MIN;
  if (w->set.max_message_bytes > 0 && bulk_min > (uint64_t)w->set.max_message_bytes / 2)
    bulk_min = (uint64_t)w->set.max_message_bytes / 2; /* whatever does not fit a frame goes apart */
  wf_remote_link link = {.ctx = rw, .max_payload = (uint64_t)w->set.max_message_bytes, .send = link_send,
                         .peer_lost = link_lost, .bulk = link_bulk, .bulk_min = bulk_min};
  if (w->rmbox) { /* ranks of this host: their frames through the rings */
    link.poll = link_poll;
    link.bell = link_bell;
    link.sleep = link_sleep;
    link.ring = link_ring;
    link.busy = link_busy;
  }
  WF_CHECK_GOTO(wf_remote_new(w->rank, w->size, &link, w->timeout_seconds, WF_REMOTE_GRACE_SECONDS, &rw->r), st,
                fail);
  void *got;
  wf_ext_attach(w, rw, &k_ops, &got);
  if (got != rw) { /* another thread attached first */
    wf_remote_free(rw->r);
    free(rw);
    rw = got;
  } else {
    atomic_store_explicit(&rw->attached, 1, memory_order_release);
    if (w->rmbox) wf_rmbox_ring(w, WF_RMBOX_BELL_WORK); /* frames may wait in the rings: the worker drains them */
  }
  *out = rw->r;
  return WEFT_OK;
fail:
  free(rw);
  return st;
}

weft_status weft_remote_register(weft_world *world, const char *name, int n_in, int n_out, weft_remote_fn fn,
                                 void *ctx) {
  wf_remote *r;
  WF_CHECK(get(world, "weft_remote_register", &r));
  return wf_remote_register(r, name, n_in, n_out, fn, ctx);
}

weft_status weft_remote_id_new(weft_world *world, weft_remote_id *out) {
  wf_remote *r;
  WF_CHECK(get(world, "weft_remote_id_new", &r));
  return wf_remote_id_new(r, out);
}

weft_status weft_remote_context_create(weft_world *world, int task, double idle_seconds, uint64_t *ctx) {
  wf_remote *r;
  WF_CHECK(get(world, "weft_remote_context_create", &r));
  return wf_remote_ctx_op(r, task, WF_ROP_CTX_CREATE, 0, idle_seconds, ctx);
}

weft_status weft_remote_context_close(weft_world *world, int task, uint64_t ctx) {
  wf_remote *r;
  WF_CHECK(get(world, "weft_remote_context_close", &r));
  return wf_remote_ctx_op(r, task, WF_ROP_CTX_CLOSE, ctx, 0, NULL);
}

weft_status weft_remote_keepalive(weft_world *world, int task, uint64_t ctx) {
  wf_remote *r;
  WF_CHECK(get(world, "weft_remote_keepalive", &r));
  return wf_remote_ctx_op(r, task, WF_ROP_KEEPALIVE, ctx, 0, NULL);
}

weft_status weft_remote_execute(weft_world *world, int task, uint64_t ctx, const char *name, int n_in,
                                const weft_remote_input *inputs, int n_out, const weft_remote_id *outputs, int n_meta,
                                const weft_remote_options *opt, weft_remote_call **call) {
  wf_remote *r;
  if (call) *call = NULL;
  WF_CHECK(get(world, "weft_remote_execute", &r));
  return wf_remote_execute(r, task, ctx, name, n_in, inputs, n_out, outputs, n_meta, opt, call);
}

weft_status weft_remote_put(weft_world *world, int task, uint64_t ctx, const weft_tensor *tensor, weft_remote_id id,
                            const weft_remote_options *opt, weft_remote_call **call) {
  wf_remote *r;
  if (call) *call = NULL;
  WF_CHECK(get(world, "weft_remote_put", &r));
  return wf_remote_put(r, task, ctx, tensor, id, opt, call);
}

weft_status weft_remote_fetch(weft_world *world, int task, uint64_t ctx, weft_remote_id id,
                              const weft_remote_options *opt, weft_remote_call **call) {
  wf_remote *r;
  if (call) *call = NULL;
  WF_CHECK(get(world, "weft_remote_fetch", &r));
  return wf_remote_fetch(r, task, ctx, id, opt, call);
}

weft_status weft_remote_delete(weft_world *world, int task, uint64_t ctx, int n, const weft_remote_id *ids,
                               const weft_remote_options *opt, weft_remote_call **call) {
  wf_remote *r;
  if (call) *call = NULL;
  WF_CHECK(get(world, "weft_remote_delete", &r));
  return wf_remote_delete(r, task, ctx, n, ids, opt, call);
}

weft_status weft_remote_stats_get(weft_world *world, weft_remote_stats *out) {
  wf_remote *r;
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_stats_get: out is NULL");
  WF_CHECK(get(world, "weft_remote_stats_get", &r));
  wf_remote_stats(r, out);
  return WEFT_OK;
}
