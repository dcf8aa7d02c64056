/* p2p.c - point-to-point transfers (weft_send / weft_recv), matched by the
 * receiving engine without the coordinator, over the executor's transports
 * (shared-memory rings or TCP for the data, TCP for the two control
 * messages).
 *
 * Sender: the engine numbers the message (per receiver, from 1) and sends
 * P2P_SEND {id, incarnation, group, key, dtype, count}, with the bytes
 * inline ("eager") when they are at most the eager size and the bytes this
 * rank has sent inline to that peer and not yet seen acknowledged stay
 * within WF_P2P_EAGER_CREDIT; otherwise alone ("rendezvous").
 *
 * Receiver: keeps its posted receives (post order) and the P2P_SENDs not
 * matched yet (arrival order, inline bytes copied: at most the credit per
 * peer). A new P2P_SEND meets the first posted receive of its group and key
 * from its sender or any source; a new receive the first P2P_SEND it
 * accepts; so messages of one (sender, group, key) match in order. Matched:
 *  - dtype or element count differ: the receive fails (WEFT_ERR_MISMATCH,
 *    naming both sides) and P2P_REPLY MISMATCH makes the sender fail alike;
 *  - inline: copied; the receive completes; P2P_REPLY OK completes the send
 *    and gives its credit back;
 *  - rendezvous: a transport receive tagged (WF_P2P_TAG_GROUP, id) is posted
 *    first, then P2P_REPLY OK (clear to send); the sender posts the
 *    transport send; each side completes when its transfer does. Data thus
 *    never arrives before its receive is posted, and a ring's head always
 *    belongs to a posted receive.
 * Small messages between ranks of one host skip all this: the sender's
 * thread puts them in the pair's mailbox and the receiver's thread matches
 * them (p2p_fast.c); receives are then posted by the callers' threads, and
 * matching (wf_p2p_match_all) looks at the mailboxes first.
 * Failures: the world's failure (a peer died, abort) fails everything here;
 * a peer's BYE fails what still waits for it; a deadline passing fails the
 * world (the other side's state is unknown). Engine thread, under p->mu
 * (p2p_impl.h), except wf_p2p_submit. */
#include "engine/p2p.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/p2p_impl.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

wf_p2p *wf_p2p_new(int size) {
  wf_p2p *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->size = size;
  pthread_mutex_init(&p->mu, NULL);
  p->next_id = calloc((size_t)size, sizeof *p->next_id);
  p->credit = calloc((size_t)size, sizeof *p->credit);
  p->gone = calloc((size_t)size, 1);
  p->slow_out = calloc((size_t)size, sizeof *p->slow_out);
  if (!p->next_id || !p->credit || !p->gone || !p->slow_out) {
    wf_p2p_free(p);
    return NULL;
  }
  return p;
}

static void free_ops(op *o) {
  for (op *n; o; o = n) {
    n = o->next;
    free(o);
  }
}

void wf_p2p_free(wf_p2p *p) {
  if (!p) return;
  free_ops(p->sends);
  free_ops(p->posted);
  free_ops(p->moving);
  free_ops(p->reads);
  for (ann *a = p->anns, *n; a; a = n) {
    n = a->next;
    free(a->data);
    free(a);
  }
  free(p->next_id);
  free(p->credit);
  free(p->gone);
  free((void *)p->slow_out);
  free(p->li_of);
  free(p->rank_of);
  free(p->rx_tail);
  free(p->rx_lim);
  free(p->tx);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

weft_status wf_p2p_submit(weft_request *r, weft_request **out) {
  weft_world *w = r->world;
  wf_request_arm(r);
  /* counted before it is queued: a later send of this thread sees it and
   * stays off the mailbox until it completes (p2p_fast.c) */
  if (r->p2p == WF_P2P_REQ_SEND) atomic_fetch_add(&w->p2p->slow_out[r->p2p_peer], 1);
  else atomic_fetch_add(&w->p2p->queued_recvs, 1); /* later receives queue behind it (p2p_fast.c) */
  pthread_mutex_lock(&w->mu);
  weft_status st = WEFT_OK;
  if (w->fail_status != WEFT_OK) st = wf_err(w->fail_status, "%s", w->fail_msg);
  else if (w->stopping) st = wf_err(WEFT_ERR_SHUTDOWN, "the world is being finalized");
  else wf_engine_queue_locked(w, r);
  pthread_mutex_unlock(&w->mu);
  if (st != WEFT_OK) {
    if (r->p2p == WF_P2P_REQ_SEND) atomic_fetch_sub(&w->p2p->slow_out[r->p2p_peer], 1);
    else atomic_fetch_sub(&w->p2p->queued_recvs, 1);
    free(r);
    return st;
  }
  *out = r;
  wf_engine_wake(w);
  return WEFT_OK;
}

weft_status wf_p2p_post(weft_group *g, int dir, int peer, uint64_t key, const weft_tensor *t,
                        const weft_op_options *o, weft_request **out) {
  char name[32], digits[20];
  int nd = 0; /* "send.<key>" / "recv.<key>", without snprintf (a third of a small transfer's own cost) */
  uint64_t k = key;
  do digits[nd++] = (char)('0' + k % 10); while ((k /= 10) && nd < 20);
  memcpy(name, dir == WF_P2P_REQ_SEND ? "send." : "recv.", 5);
  for (int i = 0; i < nd; i++) name[5 + i] = digits[nd - 1 - i];
  name[5 + nd] = '\0';
  /* BROADCAST: output is the tensor; no key: matched by (group, key, source), not by name */
  weft_request *r = wf_request_make_unkeyed(g, WF_COLL_BROADCAST, name, t, o);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->out = r->in;
  r->p2p = dir;
  r->p2p_peer = peer;
  r->p2p_key = key;
  if (dir == WF_P2P_REQ_SEND ? wf_p2p_fast_send(r) : wf_p2p_fast_recv(r)) { /* the host's mailboxes */
    *out = r;
    return WEFT_OK;
  }
  return wf_p2p_submit(r, out);
}

/* ------------------------------------------------------------------ helpers */

static uint64_t elems_of(const weft_request *r) {
  uint64_t n = 1;
  for (int d = 0; d < r->msg.ndim; d++) n *= (uint64_t)r->msg.shape[d];
  return n;
}

/* "group 5, " for a process set, "" for the world: messages name the group
 * only when it is not the world's. */
static const char *group_str(uint32_t id, char *buf, size_t len) {
  if (id == 0) return "";
  snprintf(buf, len, "group %u, ", id);
  return buf;
}

static void unlink_op(op **head, op *o) {
  for (op **pp = head; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      o->next = NULL;
      return;
    }
}

static void push_op(op **head, op *o) {
  o->next = *head;
  *head = o;
}

/* Completes o's request and frees o (already off every list); wakes this
 * rank's threads waiting on the mailbox bell (a receive they posted). */
void wf_p2p_finish(weft_world *w, op *o, weft_status st, const char *msg) {
  if (o->r->p2p == WF_P2P_REQ_SEND && !o->r->p2p_fast) atomic_fetch_sub(&w->p2p->slow_out[o->peer], 1);
  w->p2p->big_rx -= o->big;
  wf_request_complete(w, o->r, st, msg);
  free(o);
  if (w->p2p->mbox) wf_p2p_fast_ring_self(w->p2p);
}

static void send_reply(weft_world *w, int peer, uint64_t id, uint8_t status, uint8_t dtype, uint64_t count) {
  wf_p2p_reply_msg m = {.msg_id = id, .status = status, .dtype = dtype, .count = count};
  wf_buf b = {0};
  if (wf_encode_p2p_reply(&b, (uint32_t)w->rank, &m) != WEFT_OK) {
    wf_world_fail(w, WEFT_ERR_INTERNAL, "encoding a P2P_REPLY for rank %d: %s", peer, wf_err_msg());
    wf_buf_free(&b);
    return;
  }
  wf_engine_send_frame(w, peer, &b);
}

/* Fails o (not in a transport) because peer finalized. */
static void fail_departed_op(weft_world *w, op *o, int peer, const char *what) {
  char g[32], msg[512];
  snprintf(msg, sizeof msg,
           "point-to-point %s (%skey %llu) with rank %d: rank %d (%s) has shut down (weft_finalize) before it matched",
           what, group_str(o->r->group->id, g, sizeof g), (unsigned long long)o->r->p2p_key, peer, peer,
           w->peers[peer].host);
  wf_p2p_finish(w, o, WEFT_ERR_PEER_LOST, msg);
}

/* ------------------------------------------------------------------ matching (receiver) */

static int accepts(const op *o, const ann *a) {
  const weft_request *r = o->r;
  if (r->group->id != a->group_id || r->p2p_key != a->key) return 0;
  if (o->peer >= 0) return o->peer == a->peer;
  return wf_group_index(r->group, a->peer) >= 0;
}

/* o (off the posted list) meets a (off the announcement list; freed here). */
static void match(weft_world *w, op *o, ann *a) {
  wf_p2p *p = w->p2p;
  weft_request *r = o->r;
  r->p2p_peer = o->peer = a->peer;
  o->id = a->id;
  if (a->dtype != r->msg.dtype || a->count != o->count) {
    char g[32], msg[1024];
    size_t es = weft_dtype_size((weft_dtype)a->dtype), mes = weft_dtype_size((weft_dtype)r->msg.dtype);
    snprintf(msg, sizeof msg,
             "point-to-point mismatch (%skey %llu): rank %d sends %llu %s elements (%llu bytes) but the recv on "
             "rank %d expects %llu %s elements (%llu bytes)",
             group_str(a->group_id, g, sizeof g), (unsigned long long)a->key, a->peer, (unsigned long long)a->count,
             weft_dtype_name((weft_dtype)a->dtype), (unsigned long long)(a->count * es), w->rank,
             (unsigned long long)o->count, weft_dtype_name((weft_dtype)r->msg.dtype),
             (unsigned long long)(o->count * mes));
    send_reply(w, a->peer, a->id, WF_P2P_MISMATCH, r->msg.dtype, o->count);
    wf_p2p_finish(w, o, WEFT_ERR_MISMATCH, msg);
  } else if (a->eager || o->bytes == 0) {
    if (o->bytes) memcpy(r->in.data, a->data, o->bytes);
    send_reply(w, a->peer, a->id, WF_P2P_OK, r->msg.dtype, o->count);
    wf_p2p_finish(w, o, WEFT_OK, NULL);
  } else {
    weft_status st = w->tr->ops->recv(w->tr, a->peer, wf_data_tag(WF_P2P_TAG_GROUP, a->id), 0, r->in.data,
                                      (size_t)o->bytes, &o->pending);
    if (st != WEFT_OK) {
      char msg[768];
      snprintf(msg, sizeof msg, "point-to-point recv from rank %d (key %llu): %s", a->peer,
               (unsigned long long)a->key, wf_err_msg());
      wf_world_fail(w, st, "%s", msg);
      wf_p2p_finish(w, o, st, msg);
    } else {
      push_op(&p->moving, o);
      send_reply(w, a->peer, a->id, WF_P2P_OK, r->msg.dtype, o->count); /* clear to send */
    }
  }
  free(a->data);
  free(a);
}

static void unlink_posted(wf_p2p *p, op *prev, op *o) {
  if (prev) prev->next = o->next;
  else p->posted = o->next;
  if (p->posted_tail == o) p->posted_tail = prev;
  o->next = NULL;
}

void wf_p2p_match_all(weft_world *w, int engine) {
  wf_p2p *p = w->p2p;
  if (engine) p->asked = 0;
  if (p->mbox && p->posted) wf_p2p_fast_snapshot(p);
  op *prev = NULL;
  for (op *o = p->posted, *next; o; o = next) {
    next = o->next;
    int li = -1;
    uint64_t k = 0;
    ann *a = NULL, *aprev = NULL;
    int fast = p->mbox && wf_p2p_fast_find(p, o, &li, &k);
    if (!fast)
      for (a = p->anns; a && !accepts(o, a); aprev = a, a = a->next) {}
    if (!fast && !a) {
      if (engine && o->peer >= 0 && p->gone[o->peer]) { /* it finalized: nothing more comes */
        unlink_posted(p, prev, o);
        fail_departed_op(w, o, o->peer, "recv");
      } else {
        prev = o;
      }
      continue;
    }
    if (!engine && (a || o->r->callback)) { /* the engine replies, and runs callbacks */
      if (!p->asked) {
        p->asked = 1;
        wf_engine_wake(w);
      }
      return;
    }
    unlink_posted(p, prev, o);
    if (fast) {
      wf_p2p_fast_match(w, o, li, k);
    } else {
      if (aprev) aprev->next = a->next;
      else p->anns = a->next;
      if (p->anns_tail == a) p->anns_tail = aprev;
      a->next = NULL;
      match(w, o, a);
    }
  }
}

static void start_recv(weft_world *w, op *o) {
  wf_p2p *p = w->p2p;
  if (p->posted_tail) p->posted_tail->next = o;
  else p->posted = o;
  p->posted_tail = o;
  wf_p2p_match_all(w, 1);
}

static void on_send(weft_world *w, int peer, const wf_p2p_send_msg *m) {
  wf_p2p *p = w->p2p;
  if (w->peers[peer].incarnation && m->incarnation != w->peers[peer].incarnation) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL,
                  "rank %d (%s) restarted: its message carries incarnation %016llx, this world knows it as %016llx",
                  peer, w->peers[peer].host, (unsigned long long)m->incarnation,
                  (unsigned long long)w->peers[peer].incarnation);
    return;
  }
  ann *a = calloc(1, sizeof *a);
  size_t bytes = m->eager ? (size_t)(m->count * weft_dtype_size((weft_dtype)m->dtype)) : 0;
  if (a && bytes && !(a->data = malloc(bytes))) {
    free(a);
    a = NULL;
  }
  if (!a) {
    wf_world_fail(w, WEFT_ERR_NO_MEMORY, "out of memory receiving a point-to-point message from rank %d", peer);
    return;
  }
  if (bytes) memcpy(a->data, m->data, bytes);
  a->peer = peer;
  a->id = m->msg_id;
  a->key = m->key;
  a->count = m->count;
  a->group_id = m->group_id;
  a->dtype = m->dtype;
  a->eager = m->eager;
  if (p->anns_tail) p->anns_tail->next = a;
  else p->anns = a;
  p->anns_tail = a;
  wf_p2p_match_all(w, 1); /* after the mailbox's messages from peer, which precede it */
}

/* ------------------------------------------------------------------ sender */

static void start_send(weft_world *w, op *o) {
  wf_p2p *p = w->p2p;
  weft_request *r = o->r;
  int peer = o->peer;
  if (p->gone[peer]) {
    fail_departed_op(w, o, peer, "send");
    return;
  }
  int64_t eager_max = w->set.max_message_bytes - 64;
  if (eager_max > WF_P2P_EAGER_MAX) eager_max = WF_P2P_EAGER_MAX;
  o->id = ++p->next_id[peer];
  o->eager = (int64_t)o->bytes <= eager_max && p->credit[peer] + o->bytes <= WF_P2P_EAGER_CREDIT;
  wf_p2p_send_msg m = {.msg_id = o->id,
                       .incarnation = w->incarnation,
                       .group_id = r->group->id,
                       .key = r->p2p_key,
                       .dtype = r->msg.dtype,
                       .eager = (uint8_t)o->eager,
                       .count = o->count,
                       .data = o->eager ? r->in.data : NULL};
  wf_buf b = {0};
  if (wf_encode_p2p_send(&b, (uint32_t)w->rank, &m) != WEFT_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "point-to-point send to rank %d: %s", peer, wf_err_msg());
    weft_status st = b.oom ? WEFT_ERR_NO_MEMORY : WEFT_ERR_INTERNAL;
    wf_buf_free(&b);
    wf_p2p_finish(w, o, st, msg);
    return;
  }
  if (o->eager) p->credit[peer] += o->bytes;
  push_op(&p->sends, o);
  wf_engine_send_frame(w, peer, &b);
}

static void on_reply(weft_world *w, int peer, const wf_p2p_reply_msg *m) {
  wf_p2p *p = w->p2p;
  op *o = p->sends;
  while (o && !(o->peer == peer && o->id == m->msg_id)) o = o->next;
  if (!o) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "bad message from rank %d (%s): P2P_REPLY for message %llu, which is not pending",
                  peer, w->peers[peer].host, (unsigned long long)m->msg_id);
    return;
  }
  unlink_op(&p->sends, o);
  weft_request *r = o->r;
  if (o->eager) p->credit[peer] -= o->bytes;
  if (m->status == WF_P2P_MISMATCH) {
    char g[32], msg[1024];
    size_t es = weft_dtype_size((weft_dtype)r->msg.dtype), mes = weft_dtype_size((weft_dtype)m->dtype);
    snprintf(msg, sizeof msg,
             "point-to-point mismatch (%skey %llu): rank %d sends %llu %s elements (%llu bytes) but the recv on "
             "rank %d expects %llu %s elements (%llu bytes)",
             group_str(r->group->id, g, sizeof g), (unsigned long long)r->p2p_key, w->rank,
             (unsigned long long)o->count, weft_dtype_name((weft_dtype)r->msg.dtype),
             (unsigned long long)(o->count * es), peer, (unsigned long long)m->count,
             weft_dtype_name((weft_dtype)m->dtype), (unsigned long long)(m->count * mes));
    wf_p2p_finish(w, o, WEFT_ERR_MISMATCH, msg);
    return;
  }
  if (o->eager || o->bytes == 0) {
    wf_p2p_finish(w, o, WEFT_OK, NULL);
    return;
  }
  weft_status st = w->tr->ops->send(w->tr, peer, wf_data_tag(WF_P2P_TAG_GROUP, o->id), 0, r->in.data,
                                    (size_t)o->bytes, &o->pending);
  if (st != WEFT_OK) {
    char msg[768];
    snprintf(msg, sizeof msg, "point-to-point send to rank %d (key %llu): %s", peer, (unsigned long long)r->p2p_key,
             wf_err_msg());
    wf_world_fail(w, st, "%s", msg);
    wf_p2p_finish(w, o, st, msg);
    return;
  }
  push_op(&p->moving, o);
}

/* ------------------------------------------------------------------ engine hooks */
/* Each takes p->mu (the callers' threads match receives too). */

void wf_p2p_start(weft_world *w, weft_request *r) {
  op *o = calloc(1, sizeof *o);
  if (!o) {
    if (r->p2p == WF_P2P_REQ_SEND) atomic_fetch_sub(&w->p2p->slow_out[r->p2p_peer], 1);
    else atomic_fetch_sub(&w->p2p->queued_recvs, 1);
    wf_request_complete(w, r, WEFT_ERR_NO_MEMORY, "out of memory starting a point-to-point transfer");
    return;
  }
  o->r = r;
  o->peer = r->p2p_peer;
  o->count = elems_of(r);
  o->bytes = o->count * weft_dtype_size((weft_dtype)r->msg.dtype);
  atomic_store_explicit(&r->state, WF_REQ_RUNNING, memory_order_relaxed);
  pthread_mutex_lock(&w->p2p->mu);
  if (r->p2p == WF_P2P_REQ_SEND) {
    start_send(w, o);
  } else {
    start_recv(w, o);
    atomic_fetch_sub(&w->p2p->queued_recvs, 1); /* posted: a later receive may be posted directly */
  }
  pthread_mutex_unlock(&w->p2p->mu);
}

void wf_p2p_on_send(weft_world *w, int peer, const wf_p2p_send_msg *m) {
  pthread_mutex_lock(&w->p2p->mu);
  on_send(w, peer, m);
  pthread_mutex_unlock(&w->p2p->mu);
}

void wf_p2p_on_reply(weft_world *w, int peer, const wf_p2p_reply_msg *m) {
  pthread_mutex_lock(&w->p2p->mu);
  on_reply(w, peer, m);
  pthread_mutex_unlock(&w->p2p->mu);
}

static void progress_locked(weft_world *w) {
  wf_p2p *p = w->p2p;
  if (p->mbox) {
    if (p->ntx) wf_p2p_fast_reap(w, -1);
    wf_p2p_match_all(w, 1); /* receives nobody waits for, or left to the engine */
  }
  for (op **pp = &p->moving; *pp;) {
    op *o = *pp;
    if (o->pending > 0) {
      pp = &o->next;
      continue;
    }
    *pp = o->next;
    wf_p2p_finish(w, o, WEFT_OK, NULL);
  }
}

void wf_p2p_progress(weft_world *w) {
  pthread_mutex_lock(&w->p2p->mu);
  progress_locked(w);
  int reads = w->p2p->reads != NULL;
  pthread_mutex_unlock(&w->p2p->mu);
  if (reads) wf_p2p_fast_do_reads(w); /* matched here and nobody waits for them */
}

int wf_p2p_moving(weft_world *w) { return w->p2p->moving != NULL; } /* engine-written only: no lock */

static int64_t earliest(const op *o, int64_t d) {
  for (; o; o = o->next)
    if (o->r->deadline < d) d = o->r->deadline;
  return d;
}

static int64_t next_deadline_locked(wf_p2p *p) {
  int64_t d = earliest(p->reads, earliest(p->moving, earliest(p->posted, earliest(p->sends, INT64_MAX))));
  if (p->mbox) {
    int64_t f = wf_p2p_fast_deadline(p, NULL);
    if (f < d) d = f;
  }
  return d;
}

int64_t wf_p2p_next_deadline(weft_world *w) {
  wf_p2p *p = w->p2p;
  pthread_mutex_lock(&p->mu);
  int64_t d = next_deadline_locked(p);
  /* mailbox traffic does not wake the engine: look every WF_P2P_SCAN_NS
   * while a receive is posted or a fast send is not reaped */
  if (p->mbox && (p->posted || p->ntx || p->reads)) {
    int64_t t = wf_now_ns() + WF_P2P_SCAN_NS;
    if (t < d) d = t;
  }
  pthread_mutex_unlock(&p->mu);
  return d;
}

static void check_deadlines_locked(weft_world *w, int64_t now) {
  wf_p2p *p = w->p2p;
  if (next_deadline_locked(p) > now) return;
  const char *why = NULL;
  op *o = NULL;
  weft_request *r = NULL;
  int peer_rank = -1;
  for (o = p->sends; o && o->r->deadline > now; o = o->next) {}
  if (o) why = "no matching weft_recv was posted there";
  if (!o) {
    for (o = p->posted; o && o->r->deadline > now; o = o->next) {}
    if (o) why = "no matching weft_send arrived";
  }
  if (!o) {
    for (o = p->moving; o && o->r->deadline > now; o = o->next) {}
    if (o) why = "its data did not arrive";
  }
  if (!o) {
    for (o = p->reads; o && o->r->deadline > now; o = o->next) {}
    if (o) why = "its data was not read from the sender's memory in time";
  }
  if (o) {
    r = o->r;
    peer_rank = o->peer;
  } else if (p->mbox && wf_p2p_fast_deadline(p, &r) <= now && r) {
    why = "no matching weft_recv was posted there";
    peer_rank = r->p2p_peer;
  }
  if (!r) return;
  char g[32], peer[WF_HOST_MAX + 32];
  if (peer_rank >= 0) snprintf(peer, sizeof peer, "rank %d (%s)", peer_rank, w->peers[peer_rank].host);
  else snprintf(peer, sizeof peer, "any source");
  wf_world_fail(w, WEFT_ERR_TIMEOUT, "point-to-point %s %s %s (%skey %llu) timed out after %g s: %s",
                r->p2p == WF_P2P_REQ_SEND ? "send" : "recv", r->p2p == WF_P2P_REQ_SEND ? "to" : "from", peer,
                group_str(r->group->id, g, sizeof g), (unsigned long long)r->p2p_key, w->timeout_seconds, why);
}

void wf_p2p_check_deadlines(weft_world *w, int64_t now) {
  pthread_mutex_lock(&w->p2p->mu);
  check_deadlines_locked(w, now);
  pthread_mutex_unlock(&w->p2p->mu);
}

void wf_p2p_peer_departed(weft_world *w, int peer) {
  wf_p2p *p = w->p2p;
  pthread_mutex_lock(&p->mu);
  p->gone[peer] = 1;
  for (op **pp = &p->sends; *pp;) {
    op *o = *pp;
    if (o->peer != peer) {
      pp = &o->next;
      continue;
    }
    *pp = o->next;
    fail_departed_op(w, o, peer, "send");
  }
  /* Data it sent is all here, in its ring or in its mailbox (its sends
   * completed, or were published, before its BYE): move what the ring
   * holds, match what the mailbox holds (wf_p2p_match_all fails the
   * receives from it that still have nothing), then what is still missing
   * never comes. */
  if (w->shm)
    for (int i = 0; i < 4 && wf_shm_progress(w->shm); i++) {}
  progress_locked(w);
  if (!p->mbox) wf_p2p_match_all(w, 1);
  if (p->mbox && p->li_of[peer] >= 0) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "point-to-point send to rank %d: rank %d (%s) has shut down (weft_finalize) before it matched", peer,
             peer, w->peers[peer].host);
    wf_p2p_fast_fail(w, p->li_of[peer], WEFT_ERR_PEER_LOST, msg);
  }
  for (op *o = p->moving; o; o = o->next)
    if (o->peer == peer && o->pending > 0) {
      wf_world_fail_later(w, WEFT_ERR_PEER_LOST,
                          "rank %d (%s) has shut down (weft_finalize) during a point-to-point transfer (key %llu)",
                          peer, w->peers[peer].host, (unsigned long long)o->r->p2p_key);
      break;
    }
  pthread_mutex_unlock(&p->mu);
}

void wf_p2p_fail_all(weft_world *w, weft_status st, const char *msg) {
  wf_p2p *p = w->p2p;
  pthread_mutex_lock(&p->mu);
  if (p->failed == WEFT_OK) {
    p->failed = st;
    snprintf(p->failed_msg, sizeof p->failed_msg, "%s", msg);
  }
  if (p->moving) w->tr->ops->cancel_data(w->tr); /* the transports forget the buffers first */
  op *lists[3] = {p->sends, p->posted, p->moving};
  p->sends = p->posted = p->posted_tail = p->moving = NULL;
  for (int i = 0; i < 3; i++)
    for (op *o = lists[i], *n; o; o = n) {
      n = o->next;
      wf_p2p_finish(w, o, st, msg);
    }
  if (p->mbox) {
    wf_p2p_fast_fail(w, -1, st, msg);
    wf_p2p_fast_fail_reads(w, st, msg);
  }
  memset(p->credit, 0, sizeof *p->credit * (size_t)p->size);
  pthread_mutex_unlock(&p->mu);
}
