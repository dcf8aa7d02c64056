/* engine.c - the background engine thread of a world: one epoll loop that
 * takes submissions, talks to the coordinator, runs the coordinator (rank
 * 0), executes responses in order, sends heartbeats and enforces deadlines.
 * It never sleeps a fixed cycle: it blocks in epoll_wait until a socket is
 * ready, an eventfd wake-up arrives (new submission, abort, stop) or the
 * nearest deadline passes. Control frames are decoded and acted on in
 * inbox.c. */
#include "engine/devstage.h"
#include "engine/engine.h"
#include "engine/ext.h"
#include "engine/p2p.h"
#include "engine/onehost.h"
#include "engine/local.h"
#include "engine/rmbox.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/launcher_link.h"
#include "bootstrap/mpi_boot.h"
#include "negotiate/cache.h"
#include "util/err.h"
#include "util/log.h"
#include "util/params.h"
#include "util/time.h"

#define EV_WAKE UINT32_MAX /* epoll data of the eventfd */
/* After an event the engine polls this long before it blocks in epoll. */
#define IDLE_SPIN_NS (100 * 1000LL)

/* ------------------------------------------------------------------ helpers */

void wf_engine_wake(weft_world *w) {
  /* acq_rel: a waker that sees 1 knows a write is outstanding and the engine
   * will drain the queue after clearing the flag (cleared before draining) */
  if (atomic_exchange_explicit(&w->wake_pending, 1, memory_order_acq_rel)) return;
  uint64_t one = 1;
  ssize_t r = write(w->evfd, &one, sizeof one);
  (void)r;
  /* the engine may be waiting on shared memory instead of epoll */
  if (w->shm) wf_shm_interrupt(w->shm);
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
  if (st == WEFT_ERR_PEER_LOST) wf_mpi_peer_lost();
  if (first && st != WEFT_ERR_SHUTDOWN) wf_launcher_link_report(w->rank, w->size, st, msg); /* weftrun: who caused it */
  wf_engine_wake(w);
}

#define LATER_GRACE_NS (250 * 1000 * 1000LL)

void wf_world_fail_later(weft_world *w, weft_status st, const char *fmt, ...) {
  if (w->later_at) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->later_msg, sizeof w->later_msg, fmt, ap);
  va_end(ap);
  w->later_st = st;
  w->later_at = wf_now_ns() + LATER_GRACE_NS;
}

const char *wf_phase_negotiate(int coll) {
  static const char *const n[WF_COLL_COUNT_] = {"NEGOTIATE_ALLREDUCE",     "NEGOTIATE_ALLGATHER",
                                                "NEGOTIATE_BROADCAST",     "NEGOTIATE_ALLTOALL",
                                                "NEGOTIATE_REDUCESCATTER", "NEGOTIATE_BARRIER", "NEGOTIATE_JOIN",
                                                "NEGOTIATE_PERMUTE"};
  return coll >= 0 && coll < WF_COLL_COUNT_ ? n[coll] : "NEGOTIATE";
}

const char *wf_phase_run(int coll) {
  static const char *const n[WF_COLL_COUNT_] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER",
                                                "BARRIER",   "JOIN",      "PERMUTE"};
  return coll >= 0 && coll < WF_COLL_COUNT_ ? n[coll] : "RUN";
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

/* ------------------------------------------------------------------ loop pieces */

/* The response cache's member side, for a group this rank does not
 * coordinate: from the group's start, so it sees every response. */
static void cache_attach(weft_world *w, weft_group *g) {
  wf_gstate *gs = wf_gs_find(w, g->id);
  if (gs && !gs->coord && !gs->mcache) gs->mcache = wf_mcache_create(wf_cache_capacity(&w->set));
}

static void cache_detach(wf_gstate *gs) {
  if (gs->mcache)
    WF_DEBUG(WF_SUB_ENGINE, "group %u response cache: %llu hits, %llu misses, %llu resent", gs->id,
             (unsigned long long)gs->mcache->hits, (unsigned long long)gs->mcache->misses,
             (unsigned long long)gs->mcache->resends);
  wf_mcache_destroy(gs->mcache);
  gs->mcache = NULL;
}

/* Sends refs (CACHED or RESEND) to peer, split into frames the receiver
 * accepts. */
void wf_engine_send_refs(weft_world *w, int peer, wf_msg_type type, const wf_cache_ref *refs, uint32_t n) {
  for (uint32_t off = 0; off < n; off += WF_MAX_BATCH) {
    uint32_t c = n - off < WF_MAX_BATCH ? n - off : WF_MAX_BATCH;
    wf_buf b = {0};
    if (wf_encode_cache_refs(&b, (uint32_t)w->rank, type, refs + off, c) != WEFT_OK) b.oom = 1;
    wf_engine_send_frame(w, peer, &b);
    wf_buf_free(&b);
  }
}

void wf_engine_send_requests(weft_world *w, int peer, const wf_request_msg *reqs, uint32_t n) {
  for (uint32_t off = 0; off < n; off += WF_MAX_BATCH) { /* the receiver caps a frame's entries */
    uint32_t c = n - off < WF_MAX_BATCH ? n - off : WF_MAX_BATCH;
    wf_buf b = {0};
    if (wf_encode_requests(&b, (uint32_t)w->rank, reqs + off, c) != WEFT_OK) b.oom = 1;
    wf_engine_send_frame(w, peer, &b);
    wf_buf_free(&b);
  }
}

/* New and destroyed groups, in the order the callers made them (before any
 * request submitted after a creation). */
static void drain_groups(weft_world *w, weft_group *add, weft_group *del) {
  /* the list is newest first: register in creation order */
  weft_group *rev = NULL;
  while (add) {
    weft_group *next = add->next;
    add->next = rev;
    rev = add;
    add = next;
  }
  for (weft_group *g = rev, *next; g; g = next) {
    next = g->next;
    if (wf_gs_add(w, g) != WEFT_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", wf_err_msg());
      wf_world_fail(w, WEFT_ERR_NO_MEMORY, "%s", msg);
      free(g->ranks);
      free(g);
    } else {
      cache_attach(w, g);
    }
  }
  for (weft_group *g = del, *next; g; g = next) {
    next = g->dead_next;
    wf_gstate *gs = wf_gs_find(w, g->id);
    if (gs && gs->group == g) {
      cache_detach(gs);
      wf_gs_remove(w, gs); /* frees g */
    } else {
      free(g->ranks);
      free(g);
    }
  }
  /* requests that came for a group before it was registered here */
  if (rev && w->orphans) {
    wf_inbox *o = w->orphans;
    w->orphans = NULL;
    w->norphans = 0;
    while (o) {
      wf_inbox *next = o->next;
      o->next = NULL;
      if (w->in_tail) w->in_tail->next = o;
      else w->in_head = o;
      w->in_tail = o;
      o = next;
    }
  }
}

/* Room for one more item in a batch (items of isz bytes) and its
 * destination array, doubling *cap when full. 0, or -1 out of memory (the
 * arrays stay valid and owned by the caller). */
static int batch_room(void **items, size_t isz, int **dest, uint32_t n, uint32_t *cap) {
  if (n < *cap) return 0;
  uint32_t ncap = *cap ? *cap * 2 : 16;
  void *ni = realloc(*items, (size_t)ncap * isz);
  if (!ni) return -1;
  *items = ni;
  int *nd = realloc(*dest, (size_t)ncap * sizeof *nd);
  if (!nd) return -1;
  *dest = nd;
  *cap = ncap;
  return 0;
}

/* Moves new submissions into their group's tensor table and sends their
 * requests to each group's coordinator, one batch per coordinator. 1 if
 * there were submissions or groups. */
static int drain_submissions(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  weft_request *r = w->q_head;
  w->q_head = w->q_tail = NULL;
  /* groups under the same lock: a group created before a request on it is
   * registered before the request is seen */
  weft_group *add = w->new_groups, *del = w->dead_groups;
  w->new_groups = w->dead_groups = NULL;
  weft_status fail = w->fail_status;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  if (add || del) drain_groups(w, add, NULL);
  if (!r) {
    if (del) drain_groups(w, NULL, del);
    return add || del;
  }
  wf_request_msg *batch = NULL; /* grouped by destination below */
  int *dest = NULL;
  uint32_t nb = 0, cap = 0;
  wf_cache_ref *refs = NULL; /* cache hits: CACHED instead of REQUESTS */
  int *rdest = NULL;
  uint32_t nrefs = 0, rcap = 0;
  for (weft_request *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    if (r->p2p) { /* point-to-point: no coordinator (p2p.c) */
      if (fail != WEFT_OK) wf_request_complete(w, r, fail, msg);
      else wf_p2p_start(w, r);
      continue;
    }
    wf_gstate *gs = wf_gs_find(w, r->msg.group_id);
    if (fail != WEFT_OK || !gs) {
      wf_request_complete(w, r, fail != WEFT_OK ? fail : WEFT_ERR_MISUSE,
                          fail != WEFT_OK ? msg : "the group was destroyed");
      continue;
    }
    if (gs->coord_gone) {
      char why[1024];
      snprintf(why, sizeof why, "tensor '%s': the coordinator of its group (rank %d on %s) has shut down (weft_finalize)",
               r->msg.name, gs->coord_rank, w->peers[gs->coord_rank].host);
      wf_request_complete(w, r, WEFT_ERR_PEER_LOST, why);
      continue;
    }
    /* the key is borrowed: r leaves the table before it completes (start_next, fail_all, peer_departed) */
    int rc = wf_strmap_insert(&gs->table, r->msg.name, r, 1);
    if (rc) { /* present: impossible while the in-flight set rejects duplicates */
      wf_request_complete(w, r, rc < 0 ? WEFT_ERR_NO_MEMORY : WEFT_ERR_INTERNAL,
                          rc < 0 ? "out of memory in the tensor table" : "the tensor table already holds this name");
      continue;
    }
    atomic_store_explicit(&r->state, WF_REQ_NEGOTIATING, memory_order_relaxed);
    if (r->op_timeout > 0) { /* its own deadline: cancel.c watches it */
      wf_request_arm(r);
      w->ntimed++;
      if (r->deadline < w->timed_next) w->timed_next = r->deadline;
    }
    wf_tl_begin(&w->tl, r->msg.name, wf_phase_negotiate(r->msg.coll), wf_request_bytes(r), NULL);
    if (gs->coord) {
      if (wf_tl_on(&w->tl)) { /* the coordinator's own request: this rank, by its world rank */
        char what[32];
        snprintf(what, sizeof what, "rank %d ready", w->rank);
        wf_tl_mark(&w->tl, r->msg.name, what);
      }
      wf_coord_add(gs->coord, gs->group->rank, &r->msg);
      continue;
    }
    wf_cache_ref ref;
    if (gs->mcache && wf_mcache_lookup(gs->mcache, gs->id, &r->msg, &ref)) {
      if (batch_room((void **)&refs, sizeof *refs, &rdest, nrefs, &rcap)) goto oom;
      rdest[nrefs] = gs->coord_rank;
      refs[nrefs++] = ref;
      continue;
    }
    if (batch_room((void **)&batch, sizeof *batch, &dest, nb, &cap)) goto oom;
    dest[nb] = gs->coord_rank;
    batch[nb++] = r->msg; /* shallow: the encoder only reads */
  }
  /* cache hits first: one CACHED frame per coordinator */
  wf_cache_ref *rone = nrefs ? malloc(nrefs * sizeof *rone) : NULL;
  if (nrefs && !rone) wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory batching requests");
  for (uint32_t i = 0; rone && i < nrefs; i++) {
    int d = rdest[i];
    if (d < 0) continue;
    uint32_t k = 0;
    for (uint32_t j = i; j < nrefs; j++)
      if (rdest[j] == d) {
        rone[k++] = refs[j];
        rdest[j] = -1;
      }
    wf_engine_send_refs(w, d, WF_MSG_CACHED, rone, k);
  }
  free(rone);
  free(refs);
  free(rdest);
  /* one REQUESTS frame per coordinator, requests in submission order */
  wf_request_msg *one = nb ? malloc(nb * sizeof *one) : NULL;
  if (nb && !one) wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory batching requests");
  for (uint32_t i = 0; one && i < nb; i++) {
    int d = dest[i];
    if (d < 0) continue;
    uint32_t k = 0;
    for (uint32_t j = i; j < nb; j++)
      if (dest[j] == d) {
        one[k++] = batch[j];
        dest[j] = -1;
      }
    wf_engine_send_requests(w, d, one, k);
  }
  free(one);
  free(batch);
  free(dest);
  if (del) drain_groups(w, NULL, del);
  return 1;
oom:
  free(batch);
  free(dest);
  free(refs);
  free(rdest);
  wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory batching requests");
  return 1;
}

/* Coordinators: send each group's new responses to its members (and queue
 * them here: the coordinator is a member). */
static void publish_responses(weft_world *w) {
  int64_t now = 0;
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    if (!gs->coord) continue;
    if (w->cycle_ns > 0) { /* hold ready responses for a cycle so more can fuse */
      if (!now) now = wf_now_ns();
      if (now < gs->next_publish) continue;
    }
    wf_response_msg *resps;
    size_t n = wf_coord_take(gs->coord, w->fusion_threshold, &resps);
    if (!n) continue;
    if (w->cycle_ns > 0) gs->next_publish = now + w->cycle_ns;
    for (size_t i = 0; i < n; i++) resps[i].group_id = gs->id;
    for (size_t off = 0; off < n; off += WF_MAX_BATCH) { /* the receiver caps a frame's entries */
      uint32_t c = (uint32_t)(n - off < WF_MAX_BATCH ? n - off : WF_MAX_BATCH);
      wf_buf b = {0};
      if (wf_encode_responses(&b, (uint32_t)w->rank, resps + off, c) != WEFT_OK) b.oom = 1;
      for (int i = 0; i < gs->group->size; i++) {
        int p = gs->group->ranks[i];
        if (p == w->rank || w->departed[p]) continue;
        wf_buf copy = {0};
        if (b.oom || !(copy.data = malloc(b.len))) copy.oom = 1;
        else memcpy(copy.data, b.data, copy.len = copy.cap = b.len);
        wf_engine_send_frame(w, p, &copy);
        wf_buf_free(&copy);
      }
      wf_buf_free(&b);
    }
    wf_gs_queue_responses(gs, resps, (uint32_t)n); /* takes the array's contents */
    free(resps);
  }
}

void wf_engine_send_abort(weft_world *w, const char *reason) {
  for (int p = 0; p < w->size; p++) {
    if (p == w->rank || w->departed[p] || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_abort(&b, (uint32_t)w->rank, reason);
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
}

int wf_world_failed(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  int f = w->fail_status != WEFT_OK;
  pthread_mutex_unlock(&w->mu);
  return f;
}

/* Fails everything in flight with the world's failure. */
static void fail_all(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  weft_status st = w->fail_status;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  if (st == WEFT_OK) return;
  if (!w->fail_relayed) {
    /* Tell the peers why, before anything else this rank sends (its BYE,
     * a dropped connection): they fail with the first cause, naming the
     * rank it is about, not with "rank N left". Aborts carry their own. */
    w->fail_relayed = 1;
    if (st != WEFT_ERR_ABORTED && st != WEFT_ERR_SHUTDOWN) {
      char relay[1200];
      snprintf(relay, sizeof relay, "status %d: %s", (int)st, msg);
      wf_engine_send_abort(w, relay);
    }
  }
  wf_exec_abort(w, st, msg);
  wf_p2p_fail_all(w, st, msg);
  wf_fast_fail_all(w, st, msg);
  wf_resolve_fail_all(w, st, msg);
  wf_inst_fail_all(w, st, msg);
  wf_steps_fail_all(w, st, msg);
  drain_submissions(w); /* fails the queued ones */
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    for (size_t i = 0; i < gs->table.cap; i++) {
      wf_strmap_entry *e = &gs->table.slots[i];
      if (!e->key || e->tomb) continue;
      weft_request *r = e->val;
      wf_strmap_del(&gs->table, e->key);
      wf_request_complete(w, r, st, msg);
    }
    for (size_t i = gs->resps_pos; i < gs->nresps; i++) wf_response_msg_free(&gs->resps[i]);
    gs->resps_pos = gs->nresps = 0;
    gs->dev_wait = 0; /* no response waits for a copy down any more */
  }
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
    if (!wf_tcp_paused(w->tcp, p) && now - wf_tcp_last_rx(w->tcp, p) > to) {
      wf_ext_peer_gone(w, p, 2);
      wf_world_fail(w, WEFT_ERR_PEER_LOST, "rank %d (%s) is unresponsive: nothing received for %.1f s", p,
                    w->peers[p].host, (now - wf_tcp_last_rx(w->tcp, p)) / 1e9);
    }
  }
}

static int64_t next_deadline(weft_world *w, int64_t now) {
  /* Work queued without a socket event (a message handled while posting a
   * receive, a response for an idle executor) must not wait for one. */
  if (w->in_head) return now;
  int64_t d = now + (int64_t)(w->hb_interval * 1e9);
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    if (!gs->exec.active && gs->resps_pos < gs->nresps && !gs->dev_wait) return now;
    if (gs->coord) {
      int64_t c = wf_coord_next_deadline(gs->coord);
      if (c < d) d = c;
      if (w->cycle_ns > 0 && gs->next_publish < d) d = gs->next_publish;
    }
  }
  if (w->later_at && w->later_at < d) d = w->later_at;
  if (w->ntimed && w->timed_next < d) d = w->timed_next < now ? now : w->timed_next;
  int64_t f = wf_resolve_next(w); /* a JOIN to send, the group leader's deadlines */
  if (f < d) d = f < now ? now : f;
  f = wf_fast_next_scan(w, now);
  if (f < d) d = f;
  f = wf_devstage_next(w, now); /* device copies in flight: polled, never waited for */
  if (f < d) d = f;
  f = wf_p2p_next_deadline(w);
  if (f < d) d = f;
  f = wf_inst_next(w); /* operations waiting for their instances: their deadlines */
  if (f < d) d = f < now ? now : f;
  f = wf_steps_next(w); /* a STEP_REQ to send, the leader's pending ones */
  if (f < d) d = f < now ? now : f;
  const char *name;
  int64_t x = wf_exec_deadline(w, &name);
  return x < d ? x : d;
}

static int exec_active(weft_world *w) {
  for (int gi = 0; gi < w->ngs; gi++)
    if (w->gs[gi]->exec.active) return 1;
  return 0;
}

/* [mpi] The MPI transport's errors are not filtered by departure: a receive
 * from a peer that said BYE but whose data never came is still a failure. */
static void on_mpi_error(void *ctx, int peer, weft_status st, const char *msg) {
  weft_world *w = ctx;
  if (peer >= 0 && peer < w->size) wf_world_fail(w, st, "%s (MPI, rank %d on host %s)", msg, peer, w->peers[peer].host);
  else wf_world_fail(w, st, "%s (MPI)", msg);
}

static void *engine_main(void *arg) {
  weft_world *w = arg;
  struct epoll_event evs[64];
  wf_log_set_rank(w->rank);
  for (;;) {
    int64_t now = wf_now_ns();
    int64_t dl = next_deadline(w, now);
    int n;
    if (w->local_more) {
      /* a collective's local steps stopped for time (exec.c): look at the
       * sockets and the segment without waiting, then go on with them */
      if (w->shm) wf_shm_progress(w->shm);
      n = epoll_wait(w->epfd, evs, 64, 0);
    } else if (w->shm && (exec_active(w) || wf_p2p_moving(w))) {
      /* a collective runs: its shared-memory peers do not wake epoll, so
       * wait on the segment (spin, then futex) for at most a millisecond,
       * then look at the sockets without blocking */
      if (!wf_shm_progress(w->shm)) {
        int64_t t = dl - now;
        wf_shm_wait(w->shm, t < 1000000 ? (t > 0 ? t : 0) : 1000000);
      }
      n = epoll_wait(w->epfd, evs, 64, 0);
    } else {
      /* [mpi] poll hook: pending MPI transfers bound the wait (spin, then 1 ms) */
      int ms = wf_mux_wait_ms(&w->mux, wf_ms_until(dl));
      if (ms == 1 && dl - now < 1000000 && wf_devstage_next(w, now) != INT64_MAX) {
        /* a device copy is polled sooner than epoll's millisecond: sleep
         * that long, then look at the sockets without waiting */
        struct timespec ts = {0, (long)(dl - now)};
        nanosleep(&ts, NULL);
        ms = 0;
      }
      if (ms != 0 && now - w->last_busy < IDLE_SPIN_NS) {
        /* busy a moment ago: the next message (a response, the peer's
         * data) usually follows within microseconds, and waking from
         * epoll costs far more on a VM (bench/NOTES.md, "Idle poll after
         * activity"); poll, handing the core over */
        sched_yield();
        ms = 0;
      }
      n = epoll_wait(w->epfd, evs, 64, ms);
    }
    if (n < 0 && errno != EINTR) {
      wf_world_fail(w, WEFT_ERR_SYSTEM, "epoll_wait: %s", strerror(errno));
      n = 0;
    }
    wf_tl_cycle(&w->tl);
    /* busy (poll for IDLE_SPIN_NS before blocking again): a socket event or
     * new submissions, whose responses follow soon; not a wake-up alone (a
     * one-host remote round's kick, a failure, finalize), which would have
     * this thread poll beside ranks that need the cores */
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u32 != EV_WAKE) w->last_busy = now;
      if (evs[i].data.u32 == EV_WAKE) {
        uint64_t v;
        ssize_t r = read(w->evfd, &v, sizeof v);
        (void)r;
        atomic_store_explicit(&w->wake_pending, 0, memory_order_release);
        continue;
      }
      wf_tcp_on_event(w->tcp, (int)evs[i].data.u32, evs[i].events);
    }
    if (w->shm) wf_shm_progress(w->shm);
    wf_mux_progress(&w->mux); /* [mpi] poll hook: test MPI requests */
    pthread_mutex_lock(&w->mu);
    int stopping = w->stopping;
    weft_status fail = w->fail_status;
    int abort_send = w->abort_send;
    char reason[sizeof w->abort_reason];
    snprintf(reason, sizeof reason, "%s", w->abort_reason);
    w->abort_send = 0;
    pthread_mutex_unlock(&w->mu);
    if (abort_send) wf_engine_send_abort(w, reason);
    if (fail != WEFT_OK) fail_all(w);
    if (stopping) break;
    wf_inst_progress(w, now); /* before the drain: what it starts goes in this one */
    if (drain_submissions(w)) w->last_busy = now;
    wf_cancel_progress(w); /* after the drain: a cancelled request's REQUESTS went first */
    if (w->ntimed && now >= w->timed_next) w->timed_next = wf_timed_progress(w, now);
    wf_engine_process_inbox(w);
    wf_ext_progress(w);
    if (wf_world_failed(w)) {
      fail_all(w);
      wf_devstage_poll(w); /* copies up already queued still complete their requests */
      continue;
    }
    publish_responses(w);
    wf_p2p_progress(w);
    wf_exec_progress(w);
    wf_devstage_poll(w); /* device tensors whose copy up is done complete */
    publish_responses(w);
    now = wf_now_ns();
    for (int gi = 0; gi < w->ngs; gi++)
      if (w->gs[gi]->coord) wf_coord_check_timeouts(w->gs[gi]->coord, now);
    publish_responses(w);
    wf_resolve_progress(w, now);
    wf_steps_progress(w, now);
    wf_fast_scan_due(w, now);
    if (w->later_at && now >= w->later_at) {
      w->later_at = 0;
      wf_world_fail(w, w->later_st, "%s", w->later_msg);
    }
    wf_p2p_check_deadlines(w, now);
    const char *late;
    if (wf_exec_deadline(w, &late) <= now)
      wf_world_fail(w, WEFT_ERR_TIMEOUT, "collective '%s' timed out after %g s: its data did not arrive", late,
                    w->timeout_seconds);
    if (now >= w->next_hb_check) {
      heartbeats(w, now);
      w->next_hb_check = now + (int64_t)(w->hb_interval * 1e9 / 2);
    }
  }
  /* Stopping: fail what remains, say goodbye, flush control frames briefly. */
  wf_world_fail(w, WEFT_ERR_SHUTDOWN, "weft_finalize was called with this operation in flight");
  fail_all(w);
  wf_devstage_stop(w); /* device copies in flight: bounded */
  wf_resolve_stop(w);
  for (int p = 0; p < w->size; p++) {
    if (p == w->rank || !wf_tcp_alive(w->tcp, p)) continue;
    wf_buf b = {0};
    wf_encode_simple(&b, (uint32_t)w->rank, WF_MSG_BYE);
    w->departed[p] = 1; /* no errors from here on */
    wf_engine_send_frame(w, p, &b);
    wf_buf_free(&b);
  }
  int64_t flush_deadline = wf_deadline_after(0.2); /* BYE is a courtesy: peers also see the close */
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
  w->gone = calloc((size_t)w->size, sizeof *w->gone);
  if (!w->departed || !w->gone) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory starting the engine");
  WF_CHECK(wf_local_attach(w, fds)); /* the host segment and the ring transport over it */
  WF_CHECK(wf_fast_start(w));
  WF_CHECK(wf_p2p_fast_attach(w)); /* the point-to-point mailboxes in the segment */
  WF_CHECK(wf_rmbox_attach(w));      /* and remote execution's rings there */
  WF_CHECK(wf_local_cma(w, fds));
  wf_tcp_callbacks cb = {.ctx = w,
                        .on_ctrl = wf_engine_on_ctrl,
                        .on_error = wf_engine_on_error,
                        .chunk_bytes = w->set.tcp_chunk_bytes,
                        .max_message_bytes = w->set.max_message_bytes};
  WF_CHECK(wf_tcp_create(w->rank, w->size, fds, w->epfd, &cb, &w->tcp));
  wf_mux_init(&w->mux, wf_tcp_transport(w->tcp), w->shm);
  WF_CHECK(wf_mux_start_mpi(&w->mux, &w->set, w->rank, w->size, w, on_mpi_error)); /* [mpi] WEFT_TRANSPORT=mpi */
  w->tr = &w->mux.base;
  WF_CHECK(wf_gs_add(w, &w->world_group));
  w->world_gs = w->gs[0];
  WF_CHECK(wf_stage_attach(w)); /* shm staging algorithms for the world group (engine/local.c) */
  cache_attach(w, &w->world_group);
  w->next_hb_check = wf_now_ns();
  int64_t thr = w->set.fusion_threshold;
  w->fusion_threshold = thr > 0 ? (uint64_t)thr : 0;
  w->cycle_ns = w->set.cycle_time_us * 1000;
  if (w->cycle_ns <= 0) w->cycle_ns = (int64_t)(w->set.cycle_time_ms * 1e6);
  int rc = pthread_create(&w->thread, NULL, engine_main, w);
  if (rc) return wf_err(WEFT_ERR_SYSTEM, "pthread_create: %s", strerror(rc));
  w->thread_started = 1;
  return WEFT_OK;
}

/* Groups never registered or removed: each freed once, also when it is on
 * both lists (created and destroyed since the engine last drained them). */
static void free_group_lists(weft_group *add, weft_group *del) {
  for (weft_group *g = del, *next; g; g = next) {
    next = g->dead_next;
    int also_new = 0;
    for (weft_group *a = add; a && !also_new; a = a->next) also_new = a == g;
    if (also_new) continue;
    free(g->ranks);
    free(g);
  }
  for (weft_group *g = add, *next; g; g = next) {
    next = g->next;
    free(g->ranks);
    g->magic = 0;
    free(g);
  }
}

void wf_engine_stop(weft_world *w) {
  wf_ext_stop(w); /* remote execution first: its threads send through the engine */
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
    wf_inbox_free(m);
  }
  w->in_tail = NULL;
  while (w->orphans) {
    wf_inbox *m = w->orphans;
    w->orphans = m->next;
    wf_inbox_free(m);
  }
  wf_stage_detach(w);
  for (int gi = 0; gi < w->ngs; gi++) cache_detach(w->gs[gi]);
  while (w->ngs > 0) wf_gs_remove(w, w->gs[w->ngs - 1]);
  free(w->gs);
  w->gs = NULL;
  /* groups created or destroyed but never seen by the engine */
  free_group_lists(w->new_groups, w->dead_groups);
  w->new_groups = w->dead_groups = NULL;
  wf_tcp_destroy(w->tcp);
  w->tcp = NULL;
  wf_fast_stop(w);
  wf_p2p_fast_detach(w);
  wf_rmbox_detach(w);
  wf_local_detach(w);
  free(w->departed);
  w->departed = NULL;
  free((void *)w->gone);
  w->gone = NULL;
  if (w->evfd >= 0) close(w->evfd);
  if (w->epfd >= 0) close(w->epfd);
  w->evfd = w->epfd = -1;
}
