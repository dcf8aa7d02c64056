/* engine.c - the background engine thread of a world: one epoll loop that
 * takes submissions, talks to the coordinator, runs the coordinator (rank
 * 0), executes responses in order, sends heartbeats and enforces deadlines.
 * It never sleeps a fixed cycle: it blocks in epoll_wait until a socket is
 * ready, an eventfd wake-up arrives (new submission, abort, stop) or the
 * nearest deadline passes. */
#include "engine/engine.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/err.h"
#include "util/log.h"
#include "util/params.h"
#include "util/time.h"

#define EV_WAKE UINT32_MAX /* epoll data of the eventfd */

/* ------------------------------------------------------------------ helpers */

void wf_engine_wake(weft_world *w) {
  /* acq_rel: a waker that sees 1 knows a write is outstanding and the engine
   * will drain the queue after clearing the flag (cleared before draining) */
  if (atomic_exchange_explicit(&w->wake_pending, 1, memory_order_acq_rel)) return;
  uint64_t one = 1;
  ssize_t r = write(w->evfd, &one, sizeof one);
  (void)r;
}

void wf_world_fail(weft_world *w, weft_status st, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&w->mu);
  int first = w->fail_status == WEFT_OK;
  if (first) {
    w->fail_status = st;
    snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg);
  }
  pthread_mutex_unlock(&w->mu);
  if (first && st != WEFT_ERR_SHUTDOWN) WF_WARN(WF_SUB_ENGINE, "%s", msg);
  wf_engine_wake(w);
}

void wf_request_unref(weft_request *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  free(r->msg.splits);
  free(r->error);
  if (r->result_owned) free(r->result);
  free(r->recv_splits);
  atomic_store_explicit(&r->magic, WF_REQ_FREED, memory_order_relaxed);
  free(r);
}

void wf_request_complete(weft_world *w, weft_request *r, weft_status st, const char *msg) {
  r->status = st;
  if (st != WEFT_OK && msg) r->error = strdup(msg);
  pthread_mutex_lock(&w->mu);
  if (wf_strmap_get(&w->inflight, r->msg.name) == r) wf_strmap_del(&w->inflight, r->msg.name);
  /* release: the result fields above become visible to a thread that reads
   * state == DONE with acquire (weft_test / weft_wait) */
  atomic_store_explicit(&r->state, WF_REQ_DONE, memory_order_release);
  if (w->waiters) pthread_cond_broadcast(&w->done_cv); /* no futex syscall when nobody sleeps */
  pthread_mutex_unlock(&w->mu);
  if (r->callback) r->callback(r, st, r->user_data);
  wf_request_unref(r);
}

void wf_engine_submit(weft_world *w, weft_request *r) {
  pthread_mutex_lock(&w->mu);
  r->next = NULL;
  if (w->q_tail) w->q_tail->next = r;
  else w->q_head = r;
  w->q_tail = r;
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
}

static void handle_responses(weft_world *w, wf_response_msg *resps, uint32_t n);

const char *wf_phase_negotiate(int coll) {
  static const char *const n[WF_COLL_COUNT_] = {"NEGOTIATE_ALLREDUCE", "NEGOTIATE_ALLGATHER", "NEGOTIATE_BROADCAST",
                                                "NEGOTIATE_ALLTOALL", "NEGOTIATE_REDUCESCATTER", "NEGOTIATE_BARRIER"};
  return coll >= 0 && coll < WF_COLL_COUNT_ ? n[coll] : "NEGOTIATE";
}

const char *wf_phase_run(int coll) {
  static const char *const n[WF_COLL_COUNT_] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER",
                                                "BARRIER"};
  return coll >= 0 && coll < WF_COLL_COUNT_ ? n[coll] : "RUN";
}

uint64_t wf_request_bytes(const weft_request *r) {
  uint64_t b = weft_dtype_size((weft_dtype)r->msg.dtype);
  for (int d = 0; d < r->msg.ndim; d++) b *= (uint64_t)r->msg.shape[d];
  return r->msg.coll == WF_COLL_BARRIER ? 0 : b;
}

void wf_engine_send_frame(weft_world *w, int peer, wf_buf *frame) {
  if (frame->oom) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory encoding a message for rank %d", peer);
    wf_buf_free(frame);
    return;
  }
  if (wf_tcp_send_ctrl(w->tcp, peer, frame->data, frame->len) != WEFT_OK && !w->departed[peer])
    wf_world_fail(w, WEFT_ERR_PEER_LOST, "cannot send to rank %d (%s): %s", peer, w->peers[peer].host,
                  wf_err_msg());
  frame->data = NULL;
  frame->len = frame->cap = 0;
}

/* ------------------------------------------------------------------ transport callbacks */

static void inbox_push(weft_world *w, wf_inbox *m) {
  m->next = NULL;
  if (w->in_tail) w->in_tail->next = m;
  else w->in_head = m;
  w->in_tail = m;
}

static void on_ctrl(void *ctx, int peer, const wf_frame_hdr *h, const uint8_t *p, size_t n) {
  weft_world *w = ctx;
  char err[256];
  if (h->type == WF_MSG_HEARTBEAT) return;
  wf_inbox *m = calloc(1, sizeof *m);
  if (!m) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory receiving a message from rank %d", peer);
    return;
  }
  m->peer = peer;
  m->type = h->type;
  weft_status st = WEFT_OK;
  switch (h->type) {
    case WF_MSG_REQUESTS:
      if (w->rank != 0) st = WEFT_ERR_PROTOCOL, snprintf(err, sizeof err, "requests sent to a non-coordinator");
      else st = wf_decode_requests(p, n, &m->reqs, err, sizeof err);
      break;
    case WF_MSG_RESPONSES:
      if (peer != 0) st = WEFT_ERR_PROTOCOL, snprintf(err, sizeof err, "responses from a non-coordinator");
      else st = wf_decode_responses(p, n, &m->resps, err, sizeof err);
      break;
    case WF_MSG_ABORT:
    case WF_MSG_STALL:
      st = wf_decode_abort(p, n, m->reason, sizeof m->reason, err, sizeof err);
      break;
    case WF_MSG_BYE:
      w->departed[peer] = 1; /* now: its EOF may follow in the same read */
      break;
    default:
      st = WEFT_ERR_PROTOCOL;
      snprintf(err, sizeof err, "unexpected message type %u", h->type);
  }
  if (st != WEFT_OK) {
    free(m);
    wf_world_fail(w, st, "bad message from rank %d (%s): %s", peer, w->peers[peer].host, err);
    wf_tcp_close(w->tcp, peer);
    return;
  }
  inbox_push(w, m);
}

static void on_error(void *ctx, int peer, weft_status st, const char *msg) {
  weft_world *w = ctx;
  if (w->departed[peer]) return; /* it said goodbye: closing is expected */
  wf_world_fail(w, st, "%s (rank %d on host %s)", msg, peer, w->peers[peer].host);
}

/* ------------------------------------------------------------------ loop pieces */

/* Moves new submissions into the tensor table and sends their requests to
 * the coordinator in one batch. */
static void drain_submissions(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  weft_request *r = w->q_head;
  w->q_head = w->q_tail = NULL;
  weft_status fail = w->fail_status;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  if (!r) return;
  wf_request_msg *batch = NULL;
  uint32_t nb = 0, cap = 0;
  for (weft_request *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    if (fail != WEFT_OK) {
      wf_request_complete(w, r, fail, msg);
      continue;
    }
    if (wf_strmap_put(&w->table, r->msg.name, r)) {
      wf_request_complete(w, r, WEFT_ERR_NO_MEMORY, "out of memory in the tensor table");
      continue;
    }
    atomic_store_explicit(&r->state, WF_REQ_NEGOTIATING, memory_order_relaxed);
    wf_tl_begin(&w->tl, r->msg.name, wf_phase_negotiate(r->msg.coll), wf_request_bytes(r), NULL);
    if (w->rank == 0) {
      wf_tl_mark(&w->tl, r->msg.name, "rank 0 ready");
      wf_coord_add(w->coord, 0, &r->msg);
      continue;
    }
    if (nb == cap) {
      cap = cap ? cap * 2 : 16;
      wf_request_msg *nbatch = realloc(batch, cap * sizeof *nbatch);
      if (!nbatch) {
        free(batch);
        wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory batching requests");
        return;
      }
      batch = nbatch;
    }
    batch[nb++] = r->msg; /* shallow: the encoder only reads */
  }
  if (nb) {
    wf_buf b = {0};
    if (wf_encode_requests(&b, (uint32_t)w->rank, batch, nb) != WEFT_OK) b.oom = 1;
    wf_engine_send_frame(w, 0, &b);
    wf_buf_free(&b);
  }
  free(batch);
}

/* Rank 0: sends the coordinator's new responses to everyone (itself too). */
static void publish_responses(weft_world *w) {
  if (!w->coord) return;
  if (w->cycle_ns > 0) { /* hold ready responses for a cycle so more can fuse */
    int64_t now = wf_now_ns();
    if (now < w->next_publish) return;
    w->next_publish = now + w->cycle_ns;
  }
  wf_response_msg *resps;
  size_t n = wf_coord_take(w->coord, w->fusion_threshold, &resps);
  if (!n) return;
  wf_buf b = {0};
  if (wf_encode_responses(&b, 0, resps, (uint32_t)n) != WEFT_OK) b.oom = 1;
  for (int p = 1; p < w->size; p++) {
    if (w->departed[p]) continue;
    wf_buf copy = {0};
    if (b.oom || !(copy.data = malloc(b.len))) copy.oom = 1;
    else memcpy(copy.data, b.data, copy.len = copy.cap = b.len);
    wf_engine_send_frame(w, p, &copy);
    wf_buf_free(&copy);
  }
  wf_buf_free(&b);
  handle_responses(w, resps, (uint32_t)n); /* takes the array's contents */
  free(resps);
}

/* Queues responses for execution (takes their arrays). */
static void handle_responses(weft_world *w, wf_response_msg *resps, uint32_t n) {
  if (w->nresps + n > w->resps_cap) {
    /* compact first */
    if (w->resps_pos) {
      memmove(w->resps, w->resps + w->resps_pos, (w->nresps - w->resps_pos) * sizeof *w->resps);
      w->nresps -= w->resps_pos;
      w->resps_pos = 0;
    }
    size_t ncap = w->resps_cap ? w->resps_cap : 16;
    while (ncap < w->nresps + n) ncap *= 2;
    wf_response_msg *nr = realloc(w->resps, ncap * sizeof *nr);
    if (!nr) {
      for (uint32_t i = 0; i < n; i++) wf_response_msg_free(&resps[i]);
      wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory queueing responses");
      return;
    }
    w->resps = nr;
    w->resps_cap = ncap;
  }
  memcpy(w->resps + w->nresps, resps, n * sizeof *resps);
  w->nresps += n;
}

/* A peer said goodbye after its last operation: everything it sent us is
 * already here (same stream). Work that still needs it fails: the
 * coordinator fails tensors it never submitted; the executor fails a
 * collective still waiting for its data; without the coordinator, tensors
 * with no response queued can never run. */
static void peer_departed(weft_world *w, int peer) {
  if (w->coord) wf_coord_rank_departed(w->coord, peer);
  wf_exec_peer_departed(w, peer);
  if (peer != 0) return;
  for (size_t i = 0; i < w->table.cap; i++) {
    wf_strmap_entry *e = &w->table.slots[i];
    if (!e->key || e->tomb) continue;
    int queued = 0;
    for (size_t k = w->resps_pos; k < w->nresps && !queued; k++)
      for (uint32_t j = 0; j < w->resps[k].nnames && !queued; j++) queued = !strcmp(w->resps[k].names[j], e->key);
    if (!queued) {
      wf_world_fail(w, WEFT_ERR_PEER_LOST, "the coordinator (rank 0 on %s) has shut down (weft_finalize) while '%s' "
                    "was being negotiated", w->peers[0].host, e->key);
      return;
    }
  }
}

static void process_inbox(weft_world *w) {
  while (w->in_head) {
    wf_inbox *m = w->in_head;
    w->in_head = m->next;
    if (!w->in_head) w->in_tail = NULL;
    switch (m->type) {
      case WF_MSG_REQUESTS:
        for (uint32_t i = 0; i < m->reqs.count; i++) {
          if (wf_tl_on(&w->tl)) {
            char what[32];
            snprintf(what, sizeof what, "rank %d ready", m->peer);
            wf_tl_mark(&w->tl, m->reqs.reqs[i].name, what);
          }
          wf_coord_add(w->coord, m->peer, &m->reqs.reqs[i]);
        }
        wf_requests_msg_free(&m->reqs);
        break;
      case WF_MSG_RESPONSES:
        handle_responses(w, m->resps.resps, m->resps.count);
        free(m->resps.resps);
        break;
      case WF_MSG_ABORT:
        wf_world_fail(w, WEFT_ERR_ABORTED, "aborted by rank %d (%s): %s", m->peer, w->peers[m->peer].host,
                      m->reason);
        break;
      case WF_MSG_BYE:
        peer_departed(w, m->peer);
        break;
      case WF_MSG_STALL:
        WF_WARN(WF_SUB_COORD, "this rank waits: %s (reported by the coordinator)", m->reason);
        break;
    }
    free(m);
  }
}

/* Fails everything in flight with the world's failure. */
static void fail_all(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  weft_status st = w->fail_status;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  if (st == WEFT_OK) return;
  wf_exec_abort(w, st, msg);
  drain_submissions(w); /* fails the queued ones */
  for (size_t i = 0; i < w->table.cap; i++) {
    wf_strmap_entry *e = &w->table.slots[i];
    if (!e->key || e->tomb) continue;
    weft_request *r = e->val;
    wf_strmap_del(&w->table, e->key);
    wf_request_complete(w, r, st, msg);
  }
  for (size_t i = w->resps_pos; i < w->nresps; i++) wf_response_msg_free(&w->resps[i]);
  w->resps_pos = w->nresps = 0;
}

static void heartbeats(weft_world *w, int64_t now) {
  int64_t iv = (int64_t)(w->hb_interval * 1e9), to = (int64_t)(w->hb_timeout * 1e9);
  for (int p = 0; p < w->size; p++) {
    if (p == w->rank || w->departed[p] || !wf_tcp_alive(w->tcp, p)) continue;
    if (now - wf_tcp_last_tx(w->tcp, p) >= iv) {
      wf_buf b = {0};
      wf_encode_simple(&b, (uint32_t)w->rank, WF_MSG_HEARTBEAT);
      wf_engine_send_frame(w, p, &b);
      wf_buf_free(&b);
    }
    if (!wf_tcp_paused(w->tcp, p) && now - wf_tcp_last_rx(w->tcp, p) > to)
      wf_world_fail(w, WEFT_ERR_PEER_LOST, "rank %d (%s) is unresponsive: nothing received for %.1f s", p,
                    w->peers[p].host, (now - wf_tcp_last_rx(w->tcp, p)) / 1e9);
  }
}

static void send_abort(weft_world *w, const char *reason) {
  for (int p = 0; p < w->size; p++) {
    if (p == w->rank || w->departed[p] || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_abort(&b, (uint32_t)w->rank, reason);
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
}

static int64_t next_deadline(weft_world *w, int64_t now) {
  /* Work queued without a socket event (a message handled while posting a
   * receive, a response for an idle executor) must not wait for one. */
  if (w->in_head || (!w->exec.active && w->resps_pos < w->nresps)) return now;
  int64_t d = now + (int64_t)(w->hb_interval * 1e9);
  if (w->coord) {
    int64_t c = wf_coord_next_deadline(w->coord);
    if (c < d) d = c;
  }
  if (w->exec.active && w->exec.deadline < d) d = w->exec.deadline;
  if (w->coord && w->cycle_ns > 0 && w->next_publish < d) d = w->next_publish;
  return d;
}

/* Rank 0: tell every rank that waits for a stalled tensor, so the culprit
 * is visible from any rank's log (rank 0 has logged it already). */
static void on_stall(void *ctx, const char *report, const uint8_t *submitted) {
  weft_world *w = ctx;
  for (int p = 1; p < w->size; p++) {
    if (!submitted[p] || w->departed[p] || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_stall(&b, (uint32_t)w->rank, report);
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
}

static void *engine_main(void *arg) {
  weft_world *w = arg;
  struct epoll_event evs[64];
  wf_log_set_rank(w->rank);
  for (;;) {
    int64_t now = wf_now_ns();
    int n = epoll_wait(w->epfd, evs, 64, wf_ms_until(next_deadline(w, now)));
    if (n < 0 && errno != EINTR) {
      wf_world_fail(w, WEFT_ERR_SYSTEM, "epoll_wait: %s", strerror(errno));
      n = 0;
    }
    wf_tl_cycle(&w->tl);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u32 == EV_WAKE) {
        uint64_t v;
        ssize_t r = read(w->evfd, &v, sizeof v);
        (void)r;
        atomic_store_explicit(&w->wake_pending, 0, memory_order_release);
        continue;
      }
      wf_tcp_on_event(w->tcp, (int)evs[i].data.u32, evs[i].events);
    }
    pthread_mutex_lock(&w->mu);
    int stopping = w->stopping;
    weft_status fail = w->fail_status;
    int abort_send = w->abort_send;
    char reason[sizeof w->abort_reason];
    snprintf(reason, sizeof reason, "%s", w->abort_reason);
    w->abort_send = 0;
    pthread_mutex_unlock(&w->mu);
    if (abort_send) send_abort(w, reason);
    if (fail != WEFT_OK) fail_all(w);
    if (stopping) break;
    drain_submissions(w);
    process_inbox(w);
    publish_responses(w);
    wf_exec_progress(w);
    publish_responses(w);
    now = wf_now_ns();
    if (w->coord) wf_coord_check_timeouts(w->coord, now);
    publish_responses(w);
    if (w->exec.active && now >= w->exec.deadline) {
      char msg[512];
      snprintf(msg, sizeof msg, "collective '%s' (%s) timed out after %g s", w->exec.req->msg.name,
               w->exec.algo ? w->exec.algo : "?", w->timeout_seconds);
      wf_world_fail(w, WEFT_ERR_TIMEOUT, "%s", msg);
    }
    if (now >= w->next_hb_check) {
      heartbeats(w, now);
      w->next_hb_check = now + (int64_t)(w->hb_interval * 1e9 / 2);
    }
  }
  /* Stopping: fail what remains, say goodbye, flush control frames briefly. */
  wf_world_fail(w, WEFT_ERR_SHUTDOWN, "weft_finalize was called with this operation in flight");
  fail_all(w);
  for (int p = 0; p < w->size; p++) {
    if (p == w->rank || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_simple(&b, (uint32_t)w->rank, WF_MSG_BYE);
    w->departed[p] = 1; /* no errors from here on */
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
  int64_t flush_deadline = wf_deadline_after(0.5);
  while (wf_tcp_queued(w->tcp) > 0 && wf_now_ns() < flush_deadline) {
    int n = epoll_wait(w->epfd, evs, 64, wf_ms_until(flush_deadline));
    for (int i = 0; i < n; i++)
      if (evs[i].data.u32 != EV_WAKE) wf_tcp_on_event(w->tcp, (int)evs[i].data.u32, evs[i].events & ~EPOLLIN);
    if (n <= 0) break;
  }
  return NULL;
}

weft_status wf_engine_start(weft_world *w, int *fds) {
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (w->epfd < 0) return wf_err(WEFT_ERR_SYSTEM, "epoll_create1: %s", strerror(errno));
  w->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->evfd < 0) return wf_err(WEFT_ERR_SYSTEM, "eventfd: %s", strerror(errno));
  struct epoll_event e = {.events = EPOLLIN, .data.u32 = EV_WAKE};
  if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &e))
    return wf_err(WEFT_ERR_SYSTEM, "epoll_ctl(eventfd): %s", strerror(errno));
  w->departed = calloc((size_t)w->size, sizeof *w->departed);
  if (!w->departed) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory starting the engine");
  wf_tcp_callbacks cb = {.ctx = w, .on_ctrl = on_ctrl, .on_error = on_error};
  WF_CHECK(wf_tcp_create(w->rank, w->size, fds, w->epfd, &cb, &w->tcp));
  w->tr = wf_tcp_transport(w->tcp);
  if (w->rank == 0) {
    if (wf_coord_create(w->size, w->timeout_seconds, &w->coord))
      return wf_err(WEFT_ERR_NO_MEMORY, "out of memory creating the coordinator");
    wf_coord_set_stall_handler(w->coord, on_stall, w);
  }
  wf_strmap_init(&w->table);
  w->next_hb_check = wf_now_ns();
  int64_t thr = wf_param_int("WEFT_FUSION_THRESHOLD");
  w->fusion_threshold = thr > 0 ? (uint64_t)thr : 0;
  w->cycle_ns = wf_param_int("WEFT_CYCLE_TIME_US") * 1000;
  int rc = pthread_create(&w->thread, NULL, engine_main, w);
  if (rc) return wf_err(WEFT_ERR_SYSTEM, "pthread_create: %s", strerror(rc));
  w->thread_started = 1;
  return WEFT_OK;
}

void wf_engine_stop(weft_world *w) {
  if (w->thread_started) {
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_mutex_unlock(&w->mu);
    wf_engine_wake(w);
    pthread_join(w->thread, NULL);
    w->thread_started = 0;
  }
  while (w->in_head) {
    wf_inbox *m = w->in_head;
    w->in_head = m->next;
    wf_requests_msg_free(&m->reqs);
    wf_responses_msg_free(&m->resps);
    free(m);
  }
  w->in_tail = NULL;
  for (size_t i = w->resps_pos; i < w->nresps; i++) wf_response_msg_free(&w->resps[i]);
  free(w->resps);
  w->resps = NULL;
  w->nresps = w->resps_pos = w->resps_cap = 0;
  wf_tcp_destroy(w->tcp);
  w->tcp = NULL;
  wf_coord_destroy(w->coord);
  w->coord = NULL;
  wf_strmap_free(&w->table);
  free(w->fusion_buf);
  w->fusion_buf = NULL;
  w->fusion_cap = 0;
  free(w->departed);
  w->departed = NULL;
  if (w->evfd >= 0) close(w->evfd);
  if (w->epfd >= 0) close(w->epfd);
  w->evfd = w->epfd = -1;
}
