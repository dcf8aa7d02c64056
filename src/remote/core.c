/* core.c - one rank's remote-execution core: its lifetime, the inbox the
 * link delivers into, the service thread (frames, deadlines, idle
 * contexts, dead peers), the outbox sent without the lock, the function
 * registry, ids and statistics. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote/remote_impl.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

int64_t wf_remote_deadline(double seconds) { return seconds > 0 ? wf_deadline_after(seconds) : INT64_MAX; }

void wf_remote_out_locked(wf_remote *r, int peer, wf_buf *frame) {
  wf_rout *o = calloc(1, sizeof *o);
  if (!o) { /* the peer's call then ends at its deadline */
    wf_buf_free(frame);
    return;
  }
  o->peer = peer;
  o->frame = *frame;
  memset(frame, 0, sizeof *frame);
  if (r->out_tail) r->out_tail->next = o;
  else r->out_head = o;
  r->out_tail = o;
}

void wf_remote_flush(wf_remote *r) {
  pthread_mutex_lock(&r->mu);
  wf_rout *o = r->out_head;
  r->out_head = r->out_tail = NULL;
  wf_rbulk *b = r->post_head;
  r->post_head = r->post_tail = NULL;
  pthread_mutex_unlock(&r->mu);
  if (b) wf_bulk_post_all(r, b); /* receives before the BULK_GO frames that announce them */
  while (o) {
    wf_rout *next = o->next;
    r->link.send(r->link.ctx, o->peer, &o->frame);
    free(o);
    o = next;
  }
}

/* set while this thread drains the link's own way (wf_remote_poll), which
 * then sends what the frames queued itself */
static _Thread_local int tl_polling;

int wf_remote_poll(wf_remote *r) {
  if (!r->link.poll) return 0;
  tl_polling = 1;
  int n = r->link.poll(r->link.ctx);
  tl_polling = 0;
  if (n > 0) wf_remote_flush(r);
  return n;
}

/* A bell of this rank's, unless the world may be gone (an abandoned worker frees the core late). */
static void ring(wf_remote *r, int which) {
  if (r->link.ring && !r->abandoned) r->link.ring(r->link.ctx, which);
}

void wf_remote_kick_work(wf_remote *r) {
  pthread_cond_signal(&r->work_cv);
  ring(r, WF_RLINK_WORK);
}

void wf_remote_kick_done(wf_remote *r) {
  pthread_cond_broadcast(&r->done_cv);
  ring(r, WF_RLINK_DONE);
}

void wf_remote_kick_svc(wf_remote *r) {
  pthread_cond_signal(&r->svc_cv);
  if (r->svc_on_bell) ring(r, WF_RLINK_WORK);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ns) {
  struct timespec ts;
  int64_t at = wf_now_ns() + ns;
  ts.tv_sec = (time_t)(at / WF_NS_PER_SEC);
  ts.tv_nsec = (long)(at % WF_NS_PER_SEC);
  pthread_cond_timedwait(cv, mu, &ts);
}

/* Dead peers: their jobs go (serve.c); after the grace, what they owned
 * here is freed. (Calls to them fail in call.c's tick.) */
static void peers_tick(wf_remote *r, int64_t now) {
  for (int p = 0; p < r->size; p++) {
    if (r->pstate[p] && (r->stage || r->holds)) wf_bulk_drop_peer(r, p);
    if (p == r->rank || r->lost_at[p] < 0 || r->pstate[p] != 2) continue;
    if (!r->lost_at[p]) {
      r->lost_at[p] = now;
      wf_serve_drop_peer(r, p);
    }
    if (now - r->lost_at[p] >= (int64_t)(r->grace * 1e9)) {
      int64_t n = wf_remote_free_owned(r, p);
      r->orphans_freed += n;
      r->lost_at[p] = -1;
      WF_INFO(WF_SUB_API, "remote: rank %d is gone: freed %lld objects it owned here", p, (long long)n);
    }
  }
}

/* The link's view of every peer, asked without mu (lock order). */
static void peers_query(wf_remote *r) {
  pthread_mutex_unlock(&r->mu);
  for (int p = 0; p < r->size; p++)
    r->pstate[p] = p == r->rank ? 0 : r->link.peer_lost(r->link.ctx, p, r->pmsg[p], sizeof r->pmsg[p]);
  pthread_mutex_lock(&r->mu);
}

static void handle_frame(wf_remote *r, wf_rframe *f) {
  char err[256];
  wf_remote_msg m;
  weft_status st = f->type == WF_MSG_REMOTE_CALL ? wf_decode_remote_call(f->bytes, f->n, &m, err, sizeof err)
                                                 : wf_decode_remote_reply(f->bytes, f->n, &m, err, sizeof err);
  if (st != WEFT_OK) { /* wf_remote_deliver checked it already */
    free(f);
    return;
  }
  if (f->type == WF_MSG_REMOTE_CALL) {
    wf_serve_call(r, f->peer, (uint8_t *)f, &m); /* m points into f->bytes; f goes with the job */
  } else {
    wf_call_on_reply(r, f->peer, &m);
    wf_remote_msg_free(&m);
    free(f);
  }
}

static void *service(void *arg) {
  wf_remote *r = arg;
  pthread_mutex_lock(&r->mu);
  int64_t next_tick = 0;
  while (!r->stopping) {
    if (r->link.poll) { /* frames in the link's own way that no other thread took */
      pthread_mutex_unlock(&r->mu);
      wf_remote_poll(r);
      pthread_mutex_lock(&r->mu);
    }
    while (r->in_head) {
      wf_rframe *f = r->in_head;
      r->in_head = f->next;
      if (!r->in_head) r->in_tail = NULL;
      handle_frame(r, f);
    }
    if (r->bdone) wf_bulk_tick(r);
    int64_t now = wf_now_ns();
    if (now >= next_tick) {
      peers_query(r);
      now = wf_now_ns();
      peers_tick(r, now);
      wf_call_tick(r, now);
      wf_serve_tick(r, now);
      wf_remote_collect_idle(r, now);
      next_tick = now + WF_REMOTE_TICK_NS;
    }
    if (r->out_head || r->post_head) {
      pthread_mutex_unlock(&r->mu);
      wf_remote_flush(r);
      pthread_mutex_lock(&r->mu);
      continue;
    }
    if (r->in_head || r->bdone || r->stopping) continue;
    if (r->running && r->link.sleep) {
      /* the worker runs a function and cannot take frames from the link's
       * own way: this thread waits for them (and for svc kicks) */
      uint32_t seen = r->link.bell(r->link.ctx, WF_RLINK_WORK);
      r->svc_on_bell = 1;
      pthread_mutex_unlock(&r->mu);
      r->link.sleep(r->link.ctx, WF_RLINK_WORK, seen, next_tick - now);
      pthread_mutex_lock(&r->mu);
      r->svc_on_bell = 0;
    } else {
      timed_wait(&r->svc_cv, &r->mu, next_tick - now);
    }
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

weft_status wf_remote_new(int rank, int size, const wf_remote_link *link, double default_timeout, double grace,
                          wf_remote **out) {
  *out = NULL;
  wf_remote *r = calloc(1, sizeof *r);
  if (!r || !(r->lost_at = calloc((size_t)size, sizeof *r->lost_at)) ||
      !(r->pstate = calloc((size_t)size, sizeof *r->pstate)) || !(r->pmsg = calloc((size_t)size, sizeof *r->pmsg))) {
    if (r) free(r->lost_at), free(r->pstate), free(r->pmsg);
    free(r);
    return wf_err(WEFT_ERR_NO_MEMORY, "remote: out of memory");
  }
  r->rank = rank;
  r->size = size;
  r->link = *link;
  r->default_timeout = default_timeout > 0 ? default_timeout : 60;
  r->grace = grace >= 0 ? grace : 0;
  r->next_ctx = 1;
  r->next_call = 1;
  r->next_local = 1;
  if (wf_bulk_init(r) != WEFT_OK) {
    free(r->lost_at), free(r->pstate), free(r->pmsg), free(r);
    return wf_err(WEFT_ERR_NO_MEMORY, "remote: out of memory");
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->svc_cv, &ca);
  pthread_cond_init(&r->work_cv, &ca);
  pthread_cond_init(&r->done_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&r->svc, NULL, service, r) != 0) goto fail;
  if (pthread_create(&r->worker, NULL, wf_serve_worker, r) != 0) {
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_broadcast(&r->svc_cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->svc, NULL);
    goto fail;
  }
  r->threads = 1;
  *out = r;
  return WEFT_OK;
fail:
  wf_bulk_detach(r);
  wf_bulk_release(r);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->svc_cv);
  pthread_cond_destroy(&r->work_cv);
  pthread_cond_destroy(&r->done_cv);
  free(r->lost_at);
  free(r->pstate);
  free(r->pmsg);
  free(r);
  return wf_err(WEFT_ERR_SYSTEM, "remote: cannot start its threads: %s", strerror(errno));
}

/* Frees what is left once no thread of r runs (mu not held). */
static void finish_free(wf_remote *r) {
  wf_bulk_detach(r); /* transfers that end from now on free what they hold (after this teardown) */
  pthread_mutex_lock(&r->mu);
  wf_call_fail_all(r, WEFT_ERR_SHUTDOWN, "the world was finalized");
  wf_bulk_free_all(r);
  wf_serve_free_all(r);
  while (r->in_head) {
    wf_rframe *f = r->in_head;
    r->in_head = f->next;
    free(f);
  }
  while (r->out_head) {
    wf_rout *o = r->out_head;
    r->out_head = o->next;
    wf_buf_free(&o->frame);
    free(o);
  }
  while (r->fns) {
    wf_rfn *f = r->fns;
    r->fns = f->next;
    free(f);
  }
  pthread_mutex_unlock(&r->mu);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->svc_cv);
  pthread_cond_destroy(&r->work_cv);
  pthread_cond_destroy(&r->done_cv);
  wf_bulk_release(r);
  free(r->lost_at);
  free(r->pstate);
  free(r->pmsg);
  free(r);
}

void wf_remote_worker_exit(wf_remote *r) {
  r->worker_done = 1;
  int left = r->abandoned;
  pthread_cond_broadcast(&r->done_cv);
  pthread_mutex_unlock(&r->mu);
  if (left) finish_free(r); /* wf_remote_free gave up waiting: the last thread frees */
}

void wf_remote_free(wf_remote *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->stopping = 1;
  pthread_cond_broadcast(&r->svc_cv);
  pthread_cond_broadcast(&r->work_cv);
  ring(r, WF_RLINK_WORK); /* threads asleep on the bells */
  wf_remote_kick_done(r);
  pthread_mutex_unlock(&r->mu);
  if (r->threads) {
    pthread_join(r->svc, NULL); /* never runs user code: returns within a tick */
    /* the worker may be inside a registered function that does not return:
     * finalize must not hang on it; after a bound the worker frees the core
     * itself when (if ever) the function returns, without the link */
    pthread_mutex_lock(&r->mu);
    int64_t until = wf_now_ns() + WF_REMOTE_JOIN_SECONDS * WF_NS_PER_SEC;
    while (!r->worker_done && wf_now_ns() < until) timed_wait(&r->done_cv, &r->mu, WF_REMOTE_TICK_NS);
    if (!r->worker_done) {
      r->abandoned = 1;
      pthread_mutex_unlock(&r->mu);
      pthread_detach(r->worker);
      WF_WARN(WF_SUB_API, "remote: a registered function still runs %d s after finalize began: left to finish",
              WF_REMOTE_JOIN_SECONDS);
      return;
    }
    /* transfers posted end first (bounded: a peer that leaves fails them):
     * one cut off by this rank's leaving would fail the peer's world */
    while (r->moving && wf_now_ns() < until) timed_wait(&r->done_cv, &r->mu, WF_REMOTE_TICK_NS);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->worker, NULL);
  }
  finish_free(r);
}

weft_status wf_remote_deliver(wf_remote *r, int peer, uint8_t type, const uint8_t *p, size_t n, char *err,
                              size_t errlen) {
  if (type != WF_MSG_REMOTE_CALL && type != WF_MSG_REMOTE_REPLY) {
    snprintf(err, errlen, "message type %u is not a remote-execution message", type);
    return WEFT_ERR_PROTOCOL;
  }
  /* validate now, on the delivering thread, so a bad frame is the link's to report */
  wf_remote_msg m;
  weft_status st = type == WF_MSG_REMOTE_CALL ? wf_decode_remote_call(p, n, &m, err, errlen)
                                              : wf_decode_remote_reply(p, n, &m, err, errlen);
  if (st != WEFT_OK) return st;
  uint8_t op = m.op;
  wf_remote_msg_free(&m);
  m.op = op;
  wf_rframe *f = malloc(sizeof *f + n);
  if (!f) {
    snprintf(err, errlen, "out of memory (%zu bytes)", n);
    return WEFT_ERR_NO_MEMORY;
  }
  f->next = NULL;
  f->peer = peer;
  f->type = type;
  f->n = n;
  if (n) memcpy(f->bytes, p, n);
  pthread_mutex_lock(&r->mu);
  /* acted on here, one handoff less per frame, unless it may run user code
   * (a fetch's reply calls the allocator) or frames wait before it (order);
   * what it queues to send goes with the service thread (this thread may
   * hold the link's locks: the link is never called here) */
  int here = !r->stopping && !r->in_head && !(type == WF_MSG_REMOTE_REPLY && m.op == WF_ROP_FETCH);
  if (here) {
    handle_frame(r, f);
  } else {
    if (r->in_tail) r->in_tail->next = f;
    else r->in_head = f;
    r->in_tail = f;
  }
  /* (a thread draining the link's own way sends what was queued itself) */
  if (!here || ((r->out_head || r->post_head) && !tl_polling) || r->bdone) wf_remote_kick_svc(r);
  pthread_mutex_unlock(&r->mu);
  return WEFT_OK;
}

weft_status wf_remote_register(wf_remote *r, const char *name, int n_in, int n_out, weft_remote_fn fn, void *ctx) {
  size_t len = name ? strnlen(name, WF_NAME_MAX + 1) : 0;
  if (len < 1 || len > WF_NAME_MAX)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_register: the name must be 1..%d bytes", WF_NAME_MAX);
  if (!fn) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_register('%s'): fn is NULL", name);
  if (n_in < 0 || n_in > WF_REMOTE_MAX_ARGS || n_out < 0 || n_out > WF_REMOTE_MAX_ARGS)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_register('%s'): %d inputs, %d outputs (each 0..%d)", name,
                  n_in, n_out, WF_REMOTE_MAX_ARGS);
  wf_rfn *f = calloc(1, sizeof *f);
  if (!f) return wf_err(WEFT_ERR_NO_MEMORY, "weft_remote_register: out of memory");
  memcpy(f->name, name, len);
  f->n_in = n_in;
  f->n_out = n_out;
  f->fn = fn;
  f->ctx = ctx;
  pthread_mutex_lock(&r->mu);
  for (wf_rfn *g = r->fns; g; g = g->next)
    if (!strcmp(g->name, f->name)) {
      pthread_mutex_unlock(&r->mu);
      free(f);
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_register: '%s' is registered already on rank %d", name,
                    r->rank);
    }
  f->next = r->fns;
  r->fns = f;
  pthread_mutex_unlock(&r->mu);
  return WEFT_OK;
}

weft_status wf_remote_id_new(wf_remote *r, weft_remote_id *out) {
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_id_new: out is NULL");
  pthread_mutex_lock(&r->mu);
  out->owner = r->rank;
  out->local = r->next_local++;
  pthread_mutex_unlock(&r->mu);
  return WEFT_OK;
}

void wf_remote_stats(wf_remote *r, weft_remote_stats *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&r->mu);
  for (wf_rctx *c = r->ctxs; c; c = c->next) {
    out->contexts++;
    for (wf_robj *o = c->objs; o; o = o->next) out->objects++;
  }
  for (weft_remote_call *c = r->calls; c; c = c->next) out->calls_pending++;
  out->orphans_freed = r->orphans_freed;
  out->collected = r->ncollected_total;
  pthread_mutex_unlock(&r->mu);
}
