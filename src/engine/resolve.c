/* resolve.c - groups resolved through a leader (negotiate/resolve.h), the
 * engine's side: a caller's JOIN waits in the world's list (under mu) until
 * the engine thread sends it to the leader and the GROUP_REPLY for it
 * arrives. The leader of keyed groups is world rank 0; of a member list, its
 * lowest member (alive while the list is created, whoever else finalized).
 * A leader's engine thread runs the leader's table, fed by the JOINs (its
 * own handed over directly, as its answers to itself), ticked for
 * deadlines. A failed world completes every wait with its failure; a leader
 * that finalized, every wait for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/submit.h"
#include "negotiate/resolve.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define KEY_LEADER 0 /* the world rank that resolves keyed groups */

struct wf_rwait {
  struct wf_rwait *next;
  int leader;        /* the world rank asked */
  wf_group_msg join; /* what this rank asks (ranks owned) */
  int sent, done;
  wf_group_msg reply; /* done: the answer (owned), or status/error of the world's failure */
};

static int same_group(const wf_group_msg *a, const wf_group_msg *b) {
  if (a->kind != b->kind) return 0;
  if (a->kind == WF_GROUP_KEYED) return a->key == b->key;
  return a->size == b->size && !memcmp(a->ranks, b->ranks, sizeof(uint32_t) * (size_t)a->size);
}

/* Completes wt (under mu) with a copy of m, or with st/msg when m is NULL. */
static void complete_locked(weft_world *w, struct wf_rwait *wt, const wf_group_msg *m, weft_status st,
                            const char *msg) {
  if (wt->done) return;
  if (m) {
    wt->reply = *m;
    wt->reply.ranks = NULL;
    wt->reply.error = NULL;
    if (m->nranks && (wt->reply.ranks = malloc(sizeof(uint32_t) * m->nranks)))
      memcpy(wt->reply.ranks, m->ranks, sizeof(uint32_t) * m->nranks);
    else if (m->nranks)
      wt->reply.status = WEFT_ERR_NO_MEMORY, wt->reply.nranks = 0;
    if (m->error) wt->reply.error = strdup(m->error);
  } else {
    wt->reply = (wf_group_msg){.kind = wt->join.kind, .key = wt->join.key, .status = st};
    wt->reply.error = strdup(msg ? msg : "group resolution failed");
  }
  wt->done = 1;
  if (w->waiters) pthread_cond_broadcast(&w->done_cv);
}

weft_status wf_resolve_wait(weft_world *w, const wf_group_msg *join, wf_group_msg *reply) {
  memset(reply, 0, sizeof *reply);
  struct wf_rwait *wt = calloc(1, sizeof *wt);
  if (!wt) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory resolving a group");
  wt->join = *join;
  wt->leader = join->kind == WF_GROUP_KEYED ? KEY_LEADER : (int)join->ranks[0];
  wt->join.ranks = NULL;
  wt->join.error = NULL;
  if (join->nranks) {
    wt->join.ranks = malloc(sizeof(uint32_t) * join->nranks);
    if (!wt->join.ranks) {
      free(wt);
      return wf_err(WEFT_ERR_NO_MEMORY, "out of memory resolving a group");
    }
    memcpy(wt->join.ranks, join->ranks, sizeof(uint32_t) * join->nranks);
  }
  pthread_mutex_lock(&w->mu);
  if (w->fail_status != WEFT_OK) {
    weft_status st = wf_err(w->fail_status, "%s", w->fail_msg);
    pthread_mutex_unlock(&w->mu);
    free(wt->join.ranks);
    free(wt);
    return st;
  }
  wt->next = w->rwaits;
  w->rwaits = wt;
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
  /* the leader answers by its deadline (its timeout); a dead leader fails
   * the world within the heartbeat timeout. Past both, something is wrong. */
  int64_t deadline = wf_deadline_after(2 * w->timeout_seconds + w->hb_timeout + 5.0);
  weft_status st = WEFT_OK;
  pthread_mutex_lock(&w->mu);
  while (!wt->done)
    if (!wf_world_wait_once(w, deadline)) break;
  for (struct wf_rwait **p = &w->rwaits; *p; p = &(*p)->next)
    if (*p == wt) {
      *p = wt->next;
      break;
    }
  pthread_mutex_unlock(&w->mu);
  if (!wt->done) {
    st = wf_err(WEFT_ERR_TIMEOUT, "no answer from the group leader (rank %d) within %g s", wt->leader,
                2 * w->timeout_seconds + w->hb_timeout + 5.0);
    wf_group_msg_free(&wt->reply);
  } else {
    *reply = wt->reply;
    st = (weft_status)wt->reply.status;
    if (st != WEFT_OK) wf_err(st, "%s", wt->reply.error ? wt->reply.error : "group resolution failed");
  }
  wf_group_msg_free(&wt->join);
  free(wt);
  return st;
}

/* ------------------------------------------------------------ engine thread */
static void send_replies(weft_world *w, wf_resolve_replies *out) {
  for (size_t i = 0; i < out->n; i++) {
    if (out->v[i].to == w->rank) {
      wf_resolve_on_reply(w, w->rank, &out->v[i].msg);
      continue;
    }
    wf_buf b = {0};
    if (wf_encode_group_reply(&b, (uint32_t)w->rank, &out->v[i].msg) != WEFT_OK) {
      wf_world_fail(w, WEFT_ERR_INTERNAL, "group leader: %s", wf_err_msg());
      wf_buf_free(&b);
      break;
    }
    WF_DEBUG(WF_SUB_COORD, "group leader: GROUP_REPLY (kind %u, key %d, status %d) to rank %d", out->v[i].msg.kind,
             out->v[i].msg.key, out->v[i].msg.status, out->v[i].to);
    wf_engine_send_frame(w, out->v[i].to, &b);
    wf_buf_free(&b);
  }
  wf_resolve_replies_clear(out);
}

void wf_resolve_progress(weft_world *w, int64_t now) {
  /* JOINs to send: taken under mu, sent without it; the leader's own are
   * handed to it directly (copies: the wait may go meanwhile) */
  wf_buf frames[16];
  wf_group_msg own[16];
  int nf = 0, nown = 0;
  pthread_mutex_lock(&w->mu);
  int to[16];
  for (struct wf_rwait *wt = w->rwaits; wt && nf < 16 && nown < 16; wt = wt->next) {
    if (wt->sent || wt->done) continue;
    if (wt->leader != w->rank && (w->departed[wt->leader] || !wf_tcp_alive(w->tcp, wt->leader))) {
      char msg[512];
      snprintf(msg, sizeof msg, "the group leader, rank %d (%s), has left (weft_finalize): %s", wt->leader,
               w->peers[wt->leader].host,
               wt->join.kind == WF_GROUP_KEYED ? "keyed groups resolve through world rank 0, which must stay"
                                               : "a group by members resolves through its lowest member");
      complete_locked(w, wt, NULL, WEFT_ERR_PEER_LOST, msg);
      continue;
    }
    wt->sent = 1;
    WF_DEBUG(WF_SUB_COORD, "GROUP_JOIN (kind %u, key %d, size %d) sent to the group leader, rank %d", wt->join.kind,
             wt->join.key, wt->join.size, wt->leader);
    if (wt->leader == w->rank) {
      own[nown] = wt->join;
      own[nown].ranks = NULL;
      if (wt->join.nranks && !(own[nown].ranks = malloc(sizeof(uint32_t) * wt->join.nranks))) {
        complete_locked(w, wt, NULL, WEFT_ERR_NO_MEMORY, "out of memory resolving a group");
        continue;
      }
      if (wt->join.nranks) memcpy(own[nown].ranks, wt->join.ranks, sizeof(uint32_t) * wt->join.nranks);
      nown++;
      continue;
    }
    frames[nf] = (wf_buf){0};
    if (wf_encode_group_join(&frames[nf], (uint32_t)w->rank, &wt->join) != WEFT_OK) {
      complete_locked(w, wt, NULL, WEFT_ERR_INTERNAL, wf_err_msg());
      wf_buf_free(&frames[nf]);
      continue;
    }
    to[nf++] = wt->leader;
  }
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < nf; i++) {
    wf_engine_send_frame(w, to[i], &frames[i]);
    wf_buf_free(&frames[i]);
  }
  for (int i = 0; i < nown; i++) {
    wf_resolve_on_join(w, w->rank, &own[i]);
    wf_group_msg_free(&own[i]);
  }
  if (w->leader && wf_resolver_next_deadline(w->leader) <= now) {
    wf_resolve_replies out = {0};
    if (wf_resolver_tick(w->leader, now, &out) != WEFT_OK)
      wf_world_fail(w, WEFT_ERR_NO_MEMORY, "group leader: out of memory");
    send_replies(w, &out);
    wf_resolve_replies_free(&out);
  }
}

int64_t wf_resolve_next(weft_world *w) {
  int64_t d = w->leader ? wf_resolver_next_deadline(w->leader) : INT64_MAX;
  pthread_mutex_lock(&w->mu);
  for (struct wf_rwait *wt = w->rwaits; wt; wt = wt->next)
    if (!wt->sent && !wt->done) d = 0; /* a JOIN to send now */
  pthread_mutex_unlock(&w->mu);
  return d;
}

void wf_resolve_on_join(weft_world *w, int peer, const wf_group_msg *m) {
  int mine = m->kind == WF_GROUP_KEYED ? w->rank == KEY_LEADER : m->ranks[0] == (uint32_t)w->rank;
  int listed = 0;
  for (uint32_t i = 0; i < m->nranks; i++) listed |= m->ranks[i] == (uint32_t)peer;
  if (!mine || (m->kind == WF_GROUP_LISTED && !listed) || (m->nranks && m->ranks[m->nranks - 1] >= (uint32_t)w->size)) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d sent a GROUP_JOIN that rank %d does not lead (kind %u, size %d)",
                  peer, w->rank, m->kind, m->size);
    if (peer != w->rank) wf_tcp_close(w->tcp, peer);
    return;
  }
  if (!w->leader && !(w->leader = wf_resolver_create(w->size, w->timeout_seconds))) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "group leader: out of memory");
    return;
  }
  WF_DEBUG(WF_SUB_COORD, "group leader: GROUP_JOIN (kind %u, key %d, size %d) from rank %d", m->kind, m->key, m->size,
           peer);
  wf_resolve_replies out = {0};
  if (wf_resolver_join(w->leader, peer, m, wf_now_ns(), &out) != WEFT_OK)
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "group leader: out of memory");
  send_replies(w, &out);
  wf_resolve_replies_free(&out);
}

void wf_resolve_on_reply(weft_world *w, int peer, const wf_group_msg *m) {
  pthread_mutex_lock(&w->mu);
  struct wf_rwait *match = NULL;
  for (struct wf_rwait *wt = w->rwaits; wt; wt = wt->next)
    if (wt->sent && !wt->done && wt->leader == peer && same_group(&wt->join, m))
      match = wt; /* the oldest: the list is newest first */
  if (match) complete_locked(w, match, m, WEFT_OK, NULL);
  pthread_mutex_unlock(&w->mu);
  if (!match) /* its caller gave up waiting (an answer after the local deadline), or a rogue peer */
    WF_WARN(WF_SUB_COORD, "an answer from rank %d about a group (kind %u, key %d) that nobody here asked it about",
            peer, m->kind, m->key);
}

void wf_resolve_peer_departed(weft_world *w, int peer) {
  char msg[512];
  snprintf(msg, sizeof msg, "the group leader, rank %d (%s), left (weft_finalize) before it answered", peer,
           w->peers[peer].host);
  pthread_mutex_lock(&w->mu);
  for (struct wf_rwait *wt = w->rwaits; wt; wt = wt->next)
    if (wt->leader == peer && wt->leader != w->rank) complete_locked(w, wt, NULL, WEFT_ERR_PEER_LOST, msg);
  pthread_mutex_unlock(&w->mu);
}

void wf_resolve_fail_all(weft_world *w, weft_status st, const char *msg) {
  pthread_mutex_lock(&w->mu);
  for (struct wf_rwait *wt = w->rwaits; wt; wt = wt->next) complete_locked(w, wt, NULL, st, msg);
  pthread_mutex_unlock(&w->mu);
}

void wf_resolve_stop(weft_world *w) {
  wf_resolver_destroy(w->leader);
  w->leader = NULL;
}
