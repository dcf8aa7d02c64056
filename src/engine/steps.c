/* steps.c - step sequences (seed 004's StepSequenceInterface: graphs that
 * share collective instances run with identical step ids): weft_step_next,
 * weft_step_retire and weft_step_refresh, as TensorFlow's
 * RpcCollectiveExecutorMgr does them, per group.
 *
 * A group's leader (its first member) keeps the sequence of each graph key:
 * a key it has never seen starts at a random id (TensorFlow's
 * NewRandomStepId: 57 bits). Every rank keeps its copy (w->step_seqs, under
 * w->mu; on the leader the copy is the sequence itself): the first
 * weft_step_next of a key on a member asks the leader (STEP_REQ, answered by
 * STEP_REPLY) and caches the answer; later calls are local. Retiring the
 * current id advances the rank's copy by one (the leader's advances the
 * sequence others fetch); a refresh fetches the leader's value again (on
 * the leader: a new random start). A caller's request waits in
 * w->step_waits until the engine thread has sent it and the answer came;
 * the world's failure, or the leader leaving, completes it with an error
 * naming the rank. On the leader, a request for a group not registered yet
 * (a keyed group whose leader has not taken its answer yet) waits in
 * w->step_pend, at most the world's timeout. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "engine/engine.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

struct wf_step_seq { /* under w->mu */
  struct wf_step_seq *next;
  uint32_t group_id;
  int64_t key;
  int64_t next_id;
};

struct wf_step_wait { /* under w->mu */
  struct wf_step_wait *next;
  uint32_t group_id;
  int64_t key;
  int leader; /* world rank */
  int sent, done;
  weft_status st;
  int64_t id;
  char msg[600];
};

struct wf_step_pend { /* engine thread: the leader's requests for a group not registered here yet */
  struct wf_step_pend *next;
  int peer;
  uint32_t group_id;
  int64_t key, deadline;
};

static int64_t random_id(void) {
  uint64_t v;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint64_t)wf_now_ns() * 0x9e3779b97f4a7c15ull;
  return (int64_t)(v & WF_STEP_ID_MASK);
}

static struct wf_step_seq *find_seq(weft_world *w, uint32_t gid, int64_t key) {
  for (struct wf_step_seq *s = w->step_seqs; s; s = s->next)
    if (s->group_id == gid && s->key == key) return s;
  return NULL;
}

/* Under mu: the sequence of (gid, key), made if missing (NULL: out of memory). */
static struct wf_step_seq *get_seq(weft_world *w, uint32_t gid, int64_t key, int *made) {
  struct wf_step_seq *s = find_seq(w, gid, key);
  *made = 0;
  if (s) return s;
  if (!(s = calloc(1, sizeof *s))) return NULL;
  s->group_id = gid;
  s->key = key;
  s->next = w->step_seqs;
  w->step_seqs = s;
  *made = 1;
  return s;
}

/* ------------------------------------------------------------ callers */
weft_status wf_step_get(weft_group *g, int64_t key, int refresh, int64_t *id) {
  weft_world *w = g->world;
  int leader = g->ranks[0], made;
  pthread_mutex_lock(&w->mu);
  if (w->fail_status != WEFT_OK) {
    weft_status st = wf_err(w->fail_status, "%s", w->fail_msg);
    pthread_mutex_unlock(&w->mu);
    return st;
  }
  struct wf_step_seq *s = find_seq(w, g->id, key);
  if (s && !refresh) {
    *id = s->next_id;
    pthread_mutex_unlock(&w->mu);
    return WEFT_OK;
  }
  if (leader == w->rank) { /* the sequence is here */
    if (!(s = get_seq(w, g->id, key, &made))) {
      pthread_mutex_unlock(&w->mu);
      return wf_err(WEFT_ERR_NO_MEMORY, "out of memory for the step sequence of graph key %" PRId64, key);
    }
    if (made || refresh) s->next_id = random_id();
    *id = s->next_id;
    pthread_mutex_unlock(&w->mu);
    return WEFT_OK;
  }
  struct wf_step_wait *wt = calloc(1, sizeof *wt);
  if (!wt) {
    pthread_mutex_unlock(&w->mu);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory asking for graph key %" PRId64, key);
  }
  wt->group_id = g->id;
  wt->key = key;
  wt->leader = leader;
  wt->next = w->step_waits;
  w->step_waits = wt;
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
  /* the leader answers at once, or within the timeout for a group it has
   * not registered yet; a dead leader fails the world within the heartbeat
   * timeout. Past both, something is wrong. */
  double limit = w->timeout_seconds + w->hb_timeout + 5.0;
  int64_t deadline = wf_deadline_after(limit);
  pthread_mutex_lock(&w->mu);
  while (!wt->done)
    if (!wf_world_wait_once(w, deadline)) break;
  for (struct wf_step_wait **p = &w->step_waits; *p; p = &(*p)->next)
    if (*p == wt) {
      *p = wt->next;
      break;
    }
  weft_status st;
  if (!wt->done) {
    st = wf_err(WEFT_ERR_TIMEOUT, "graph key %" PRId64 " of group %u: no answer from the group leader, rank %d, within "
                "%g s", key, g->id, leader, limit);
  } else if (wt->st != WEFT_OK) {
    st = wf_err(wt->st, "%s", wt->msg);
  } else if (!(s = get_seq(w, g->id, key, &made))) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "out of memory for the step sequence of graph key %" PRId64, key);
  } else {
    s->next_id = wt->id;
    *id = wt->id;
    st = WEFT_OK;
  }
  pthread_mutex_unlock(&w->mu);
  free(wt);
  return st;
}

weft_status wf_step_retire(weft_group *g, int64_t key, int64_t id) {
  weft_world *w = g->world;
  weft_status st = WEFT_OK;
  pthread_mutex_lock(&w->mu);
  struct wf_step_seq *s = find_seq(w, g->id, key);
  if (!s)
    st = wf_err(WEFT_ERR_NOT_FOUND, "weft_step_retire: graph key %" PRId64 " has no step sequence on rank %d in group "
                "%u (weft_step_next or weft_step_refresh first)", key, w->rank, g->id);
  else if (s->next_id != id)
    st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_step_retire: step id %" PRId64 " is not graph key %" PRId64
                "'s current step id on rank %d (%" PRId64 "); nothing changed", id, key, w->rank, s->next_id);
  else
    s->next_id = (int64_t)(((uint64_t)id + 1) & WF_STEP_ID_MASK);
  pthread_mutex_unlock(&w->mu);
  return st;
}

/* ------------------------------------------------------------ engine thread */
static void send_reply(weft_world *w, int peer, uint32_t gid, int64_t key, weft_status st, int64_t id,
                       const char *msg) {
  wf_step_msg m = {.group_id = gid, .graph_key = key, .status = st, .step_id = st == WEFT_OK ? id : 0,
                   .error = st == WEFT_OK ? NULL : (char *)msg};
  wf_buf b = {0};
  if (wf_encode_step_reply(&b, (uint32_t)w->rank, &m) != WEFT_OK) {
    wf_world_fail(w, WEFT_ERR_INTERNAL, "group leader: %s", wf_err_msg());
  } else {
    WF_DEBUG(WF_SUB_COORD, "group leader: STEP_REPLY (group %u, graph key %" PRId64 ", status %d) to rank %d", gid, key,
             (int)st, peer);
    wf_engine_send_frame(w, peer, &b);
  }
  wf_buf_free(&b);
}

/* The leader answers a request about a group it has registered. */
static void answer(weft_world *w, int peer, wf_gstate *gs, int64_t key) {
  char msg[600];
  if (gs->group->rank != 0) {
    snprintf(msg, sizeof msg, "graph key %" PRId64 " of group %u: rank %d is not its leader (its first member is rank %d)",
             key, gs->id, w->rank, gs->group->ranks[0]);
    send_reply(w, peer, gs->id, key, WEFT_ERR_PROTOCOL, 0, msg);
    return;
  }
  if (wf_group_index(gs->group, peer) < 0) {
    snprintf(msg, sizeof msg, "graph key %" PRId64 " of group %u: rank %d is not a member", key, gs->id, peer);
    send_reply(w, peer, gs->id, key, WEFT_ERR_PROTOCOL, 0, msg);
    return;
  }
  int made;
  pthread_mutex_lock(&w->mu);
  struct wf_step_seq *s = get_seq(w, gs->id, key, &made);
  if (s && made) s->next_id = random_id();
  int64_t id = s ? s->next_id : 0;
  pthread_mutex_unlock(&w->mu);
  if (!s) send_reply(w, peer, gs->id, key, WEFT_ERR_NO_MEMORY, 0, "the group leader is out of memory");
  else send_reply(w, peer, gs->id, key, WEFT_OK, id, NULL);
}

void wf_steps_on_req(weft_world *w, int peer, const wf_step_msg *m) {
  WF_DEBUG(WF_SUB_COORD, "group leader: STEP_REQ (group %u, graph key %" PRId64 ") from rank %d", m->group_id,
           m->graph_key, peer);
  wf_gstate *gs = wf_gs_find(w, m->group_id);
  if (gs) {
    answer(w, peer, gs, m->graph_key);
    return;
  }
  struct wf_step_pend *p = calloc(1, sizeof *p);
  if (!p) {
    send_reply(w, peer, m->group_id, m->graph_key, WEFT_ERR_NO_MEMORY, 0, "the group leader is out of memory");
    return;
  }
  *p = (struct wf_step_pend){w->step_pend, peer, m->group_id, m->graph_key, wf_deadline_after(w->timeout_seconds)};
  w->step_pend = p;
}

static void complete_locked(weft_world *w, struct wf_step_wait *wt, weft_status st, int64_t id, const char *msg) {
  if (wt->done) return;
  wt->st = st;
  wt->id = id;
  snprintf(wt->msg, sizeof wt->msg, "%s", msg ? msg : "");
  wt->done = 1;
  if (w->waiters) pthread_cond_broadcast(&w->done_cv);
}

void wf_steps_on_reply(weft_world *w, int peer, const wf_step_msg *m) {
  int n = 0;
  pthread_mutex_lock(&w->mu);
  for (struct wf_step_wait *wt = w->step_waits; wt; wt = wt->next)
    if (wt->sent && !wt->done && wt->leader == peer && wt->group_id == m->group_id && wt->key == m->graph_key) {
      complete_locked(w, wt, (weft_status)m->status, m->step_id, m->error);
      n++;
    }
  pthread_mutex_unlock(&w->mu);
  if (!n)
    WF_WARN(WF_SUB_COORD, "a STEP_REPLY from rank %d (group %u, graph key %" PRId64 ") that nobody here waits for", peer,
            m->group_id, m->graph_key);
}

void wf_steps_progress(weft_world *w, int64_t now) {
  wf_buf frames[16];
  int to[16], nf = 0;
  pthread_mutex_lock(&w->mu);
  for (struct wf_step_wait *wt = w->step_waits; wt && nf < 16; wt = wt->next) {
    if (wt->sent || wt->done) continue;
    if (w->departed[wt->leader] || !wf_tcp_alive(w->tcp, wt->leader)) {
      char msg[600];
      snprintf(msg, sizeof msg, "graph key %" PRId64 " of group %u: the group leader, rank %d (%s), has left", wt->key,
               wt->group_id, wt->leader, w->peers[wt->leader].host);
      complete_locked(w, wt, WEFT_ERR_PEER_LOST, 0, msg);
      continue;
    }
    wf_step_msg m = {.group_id = wt->group_id, .graph_key = wt->key};
    frames[nf] = (wf_buf){0};
    if (wf_encode_step_req(&frames[nf], (uint32_t)w->rank, &m) != WEFT_OK) {
      complete_locked(w, wt, WEFT_ERR_NO_MEMORY, 0, wf_err_msg());
      wf_buf_free(&frames[nf]);
      continue;
    }
    wt->sent = 1;
    WF_DEBUG(WF_SUB_COORD, "STEP_REQ (group %u, graph key %" PRId64 ") sent to the group leader, rank %d", wt->group_id,
             wt->key, wt->leader);
    to[nf++] = wt->leader;
  }
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < nf; i++) {
    wf_engine_send_frame(w, to[i], &frames[i]);
    wf_buf_free(&frames[i]);
  }
  for (struct wf_step_pend **pp = &w->step_pend; *pp;) {
    struct wf_step_pend *p = *pp;
    wf_gstate *gs = wf_gs_find(w, p->group_id);
    if (!gs && now < p->deadline) {
      pp = &p->next;
      continue;
    }
    if (gs) {
      answer(w, p->peer, gs, p->key);
    } else {
      char msg[600];
      snprintf(msg, sizeof msg, "graph key %" PRId64 " of group %u: rank %d, asked as its leader, has no such group "
               "(not created there within %g s)", p->key, p->group_id, w->rank, w->timeout_seconds);
      send_reply(w, p->peer, p->group_id, p->key, WEFT_ERR_NOT_FOUND, 0, msg);
    }
    *pp = p->next;
    free(p);
  }
}

int64_t wf_steps_next(weft_world *w) {
  int64_t d = INT64_MAX;
  for (struct wf_step_pend *p = w->step_pend; p; p = p->next)
    if (p->deadline < d) d = p->deadline;
  pthread_mutex_lock(&w->mu);
  for (struct wf_step_wait *wt = w->step_waits; wt; wt = wt->next)
    if (!wt->sent && !wt->done) d = 0;
  pthread_mutex_unlock(&w->mu);
  return d;
}

void wf_steps_peer_departed(weft_world *w, int peer) {
  char msg[600];
  snprintf(msg, sizeof msg, "the group leader, rank %d (%s), left (weft_finalize) before it answered about a graph key",
           peer, w->peers[peer].host);
  pthread_mutex_lock(&w->mu);
  for (struct wf_step_wait *wt = w->step_waits; wt; wt = wt->next)
    if (wt->leader == peer) complete_locked(w, wt, WEFT_ERR_PEER_LOST, 0, msg);
  pthread_mutex_unlock(&w->mu);
}

void wf_steps_fail_all(weft_world *w, weft_status st, const char *msg) {
  pthread_mutex_lock(&w->mu);
  for (struct wf_step_wait *wt = w->step_waits; wt; wt = wt->next) complete_locked(w, wt, st, 0, msg);
  pthread_mutex_unlock(&w->mu);
}

void wf_steps_free(weft_world *w) {
  for (struct wf_step_seq *s = w->step_seqs, *n; s; s = n) {
    n = s->next;
    free(s);
  }
  for (struct wf_step_pend *p = w->step_pend, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  w->step_seqs = NULL;
  w->step_pend = NULL;
}
