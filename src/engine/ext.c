/* ext.c - the engine's hook for remote execution's frames (engine/ext.h):
 * frames in, held until the layer attaches (at most WF_EXT_EARLY_MAX frames
 * and WF_EXT_EARLY_BYTES, then dropped: the caller's deadline ends such a call), frames out through the
 * engine thread, and each peer's state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/ext.h"
#include "engine/rmbox.h"
#include "util/err.h"
#include "util/log.h"

#define WF_EXT_EARLY_MAX 4096                 /* frames held before the layer attaches */
#define WF_EXT_EARLY_BYTES ((size_t)256 << 20) /* and their bytes */

typedef struct wf_ext_frame {
  struct wf_ext_frame *next;
  int peer;
  uint8_t type;
  wf_buf frame;  /* out: the whole frame */
  size_t n;      /* in: the payload */
  uint8_t p[];
} wf_ext_frame;

/* A frame from the engine's path, to the layer: a local peer's frames in its
 * remote ring go first (they were sent before it; rmbox.h), then it is
 * counted for the peer's choice of way. */
static weft_status deliver_engine(weft_world *w, const wf_ext_ops *ops, void *ctx, int peer, uint8_t type,
                                  const uint8_t *p, size_t n, int may_fail, char *err, size_t errlen) {
  if (w->rmbox) wf_rmbox_drain(w, peer, 1, may_fail, ops->deliver, ctx);
  weft_status st = ops->deliver(ctx, peer, type, p, n, err, errlen);
  wf_rmbox_engine_seen(w, peer);
  return st;
}

int wf_ext_is_type(uint8_t type) { return type == WF_MSG_REMOTE_CALL || type == WF_MSG_REMOTE_REPLY; }

weft_status wf_ext_attach(weft_world *w, void *ctx, const wf_ext_ops *ops, void **out) {
  pthread_mutex_lock(&w->mu);
  if (w->ext_ctx) {
    *out = w->ext_ctx;
    pthread_mutex_unlock(&w->mu);
    return WEFT_OK;
  }
  w->ext_ctx = ctx;
  w->ext_ops = ops;
  *out = ctx;
  /* under mu, so that the engine thread (which delivers once it sees the
   * hook, after taking mu) cannot pass these */
  wf_ext_frame *f = w->ext_early;
  w->ext_early = w->ext_early_tail = NULL;
  w->ext_nearly = 0;
  w->ext_early_bytes = 0;
  while (f) {
    wf_ext_frame *next = f->next;
    char err[256];
    if (deliver_engine(w, ops, ctx, f->peer, f->type, f->p, f->n, 0, err, sizeof err) != WEFT_OK)
      WF_WARN(WF_SUB_ENGINE, "dropped a bad message from rank %d: %s", f->peer, err);
    free(f);
    f = next;
  }
  pthread_mutex_unlock(&w->mu);
  return WEFT_OK;
}

void *wf_ext_get(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  void *c = w->ext_ctx;
  pthread_mutex_unlock(&w->mu);
  return c;
}

weft_status wf_ext_send(weft_world *w, int peer, wf_buf *frame) {
  wf_ext_frame *f = calloc(1, sizeof *f);
  if (!f) {
    wf_buf_free(frame);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory queueing a message for rank %d", peer);
  }
  f->peer = peer;
  f->frame = *frame;
  memset(frame, 0, sizeof *frame);
  pthread_mutex_lock(&w->mu);
  if (w->stopping) {
    pthread_mutex_unlock(&w->mu);
    wf_buf_free(&f->frame);
    free(f);
    return wf_err(WEFT_ERR_SHUTDOWN, "the world is being finalized");
  }
  if (w->ext_out_tail) w->ext_out_tail->next = f;
  else w->ext_out = f;
  w->ext_out_tail = f;
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
  return WEFT_OK;
}

int wf_ext_peer_state(weft_world *w, int peer, char *msg, size_t len) {
  int g = w->gone ? atomic_load_explicit(&w->gone[peer], memory_order_acquire) : 0;
  pthread_mutex_lock(&w->mu);
  int failed = w->fail_status != WEFT_OK;
  if (g == 2 || failed) snprintf(msg, len, "%s", w->fail_msg[0] ? w->fail_msg : "the world failed");
  else if (g == 1) snprintf(msg, len, "rank %d finalized (%s)", peer, w->peers[peer].host);
  /* a world failed by a lost rank that this rank has not seen go itself
   * (another rank reported it first): 3, the failure names that rank */
  int lost_elsewhere = g != 2 && w->fail_status == WEFT_ERR_PEER_LOST;
  pthread_mutex_unlock(&w->mu);
  return g == 2 ? 2 : lost_elsewhere ? 3 : g == 1 || failed ? 1 : 0;
}

void wf_ext_on_frame(weft_world *w, int peer, uint8_t type, const uint8_t *p, size_t n) {
  pthread_mutex_lock(&w->mu);
  const wf_ext_ops *ops = w->ext_ops;
  void *ctx = w->ext_ctx;
  if (!ops) {
    wf_ext_frame *f =
        w->ext_nearly < WF_EXT_EARLY_MAX && n <= WF_EXT_EARLY_BYTES - w->ext_early_bytes ? malloc(sizeof *f + n) : NULL;
    if (f) {
      memset(f, 0, sizeof *f);
      f->peer = peer;
      f->type = type;
      f->n = n;
      if (n) memcpy(f->p, p, n);
      if (w->ext_early_tail) w->ext_early_tail->next = f;
      else w->ext_early = f;
      w->ext_early_tail = f;
      w->ext_nearly++;
      w->ext_early_bytes += n;
    }
    pthread_mutex_unlock(&w->mu);
    if (!f) WF_WARN(WF_SUB_ENGINE, "dropped a remote-execution message from rank %d: none served here yet", peer);
    return;
  }
  pthread_mutex_unlock(&w->mu);
  char err[256];
  if (deliver_engine(w, ops, ctx, peer, type, p, n, 1, err, sizeof err) != WEFT_OK) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "bad message from rank %d (%s): %s", peer, w->peers[peer].host, err);
    wf_tcp_close(w->tcp, peer);
  }
}

void wf_ext_progress(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  wf_ext_frame *f = w->ext_out;
  w->ext_out = w->ext_out_tail = NULL;
  pthread_mutex_unlock(&w->mu);
  while (f) {
    wf_ext_frame *next = f->next;
    if (!w->departed[f->peer]) wf_engine_send_frame(w, f->peer, &f->frame);
    wf_buf_free(&f->frame);
    free(f);
    f = next;
  }
}

void wf_ext_peer_gone(weft_world *w, int peer, int how) {
  if (!w->gone) return;
  unsigned char cur = atomic_load_explicit(&w->gone[peer], memory_order_relaxed);
  if (how > cur) atomic_store_explicit(&w->gone[peer], (unsigned char)how, memory_order_release);
}

void wf_ext_stop(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  const wf_ext_ops *ops = w->ext_ops;
  void *ctx = w->ext_ctx;
  w->ext_ops = NULL;
  w->ext_ctx = NULL;
  pthread_mutex_unlock(&w->mu);
  if (ops) ops->stop(ctx); /* joins the layer's threads: without mu */
  pthread_mutex_lock(&w->mu);
  wf_ext_frame *lists[2] = {w->ext_early, w->ext_out};
  w->ext_early = w->ext_early_tail = w->ext_out = w->ext_out_tail = NULL;
  w->ext_nearly = 0;
  w->ext_early_bytes = 0;
  pthread_mutex_unlock(&w->mu);
  for (int l = 0; l < 2; l++)
    for (wf_ext_frame *f = lists[l], *next; f; f = next) {
      next = f->next;
      wf_buf_free(&f->frame);
      free(f);
    }
}
