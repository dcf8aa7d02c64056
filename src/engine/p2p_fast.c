/* p2p_fast.c - point-to-point between ranks of one host in the callers'
 * threads, over the mailboxes of the host segment (host/mailbox.h): no
 * engine thread, no socket, no control message.
 *
 * Send (caller): a message without a callback to a local peer goes into
 * the next slot of the pair's ring: its bytes if at most WF_MBOX_INLINE,
 * else, when the host's ranks agreed on cross-memory attach (w->cma_ok),
 * only its address, up to READ_MAX, or at any size while this rank has a
 * receive beyond READ_MAX posted (p->big_rx: traffic both ways, where the
 * engine thread would copy both directions in turn); the receiver reads the
 * bytes straight from the sender's buffer (process_vm_readv: one copy, no
 * engine, no control message, as an MPI library's single-copy rendezvous).
 * Then it is published and the receiver's bell rings if it sleeps. It
 * completes when the receiver has matched it: whoever reaps the ring in
 * order (its weft_wait / weft_test, a later send finding the ring full, the
 * engine's scan) reads the result (OK, MISMATCH with the receiver's dtype
 * and count, or UNREAD: the receiver's read failed, and its receive says
 * why), so a read message's buffer is the sender's again only once it is
 * read. A send takes the engine's path instead while an earlier send to
 * that peer is still on it (p->slow_out), so per pair the unmatched
 * mailbox messages always precede the unmatched engine-path ones; the
 * receiver therefore looks at a sender's mailbox before its announcements
 * (wf_p2p_match_all), and FIFO order per (group, key, sender) holds across
 * both paths. A full ring sends the message the engine's way (its credit
 * then is the backpressure), never blocks.
 *
 * Receive (caller): posted on p->posted under p->mu and matched there by
 * whoever looks first (its waiter, a weft_test, the engine's scan every
 * WF_P2P_SCAN_NS or its handling of an announcement). A message from the
 * mailbox is copied out and its result written back; one to read is
 * claimed (its slot READING, so no later receive takes it; on p->reads) and
 * read outside p->mu by the next look of any waiter of this rank or by the
 * engine's scan (wf_p2p_fast_do_reads), never while the receive is being
 * posted: a rank that posts its receive, then its send, publishes the send
 * before it reads, so two ranks exchanging read in parallel. An
 * announcement or a request with a callback is left to the engine thread.
 *
 * Memory: the region is fixed by the host's rank count (mailbox.h: linear
 * in it), and each rank holds WF_MBOX_SLOTS request pointers per local
 * peer. Beyond WF_MBOX_INBOX + 1 local ranks a pair has no slot: no fast
 * path (every transfer takes the engine's). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algo/cma.h"
#include "engine/p2p_impl.h"
#include "engine/submit.h"
#include "host/segment.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define SPIN_NS 50000 /* a waiter spins this long before it sleeps on its bell */
/* The largest message read across processes; larger ones take the engine's
 * pipelined copy through the rings, which is faster from there on
 * (bench/results/p2p-vs-openmpi.md) */
#define READ_MAX ((uint64_t)256 << 10)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int on_engine(weft_world *w) { return w->thread_started && pthread_equal(pthread_self(), w->thread); }

static uint64_t elems_of(const weft_request *r) {
  uint64_t n = 1;
  for (int d = 0; d < r->msg.ndim; d++) n *= (uint64_t)r->msg.shape[d];
  return n;
}

static const char *group_str(uint32_t id, char *buf, size_t len) {
  if (id == 0) return "";
  snprintf(buf, len, "group %u, ", id);
  return buf;
}

weft_status wf_p2p_fast_attach(weft_world *w) {
  wf_p2p *p = w->p2p;
  uint8_t *mbox = w->host ? wf_host_mbox(w->host) : NULL;
  if (!mbox || !wf_mbox_pair_slots(wf_host_nlocal(w->host))) return WEFT_OK;
  int n = wf_host_nlocal(w->host);
  p->mslots = wf_mbox_pair_slots(n);
  p->li_of = malloc(sizeof *p->li_of * (size_t)w->size);
  p->rank_of = malloc(sizeof *p->rank_of * (size_t)n);
  p->rx_tail = calloc((size_t)n, sizeof *p->rx_tail);
  p->rx_lim = calloc((size_t)n, sizeof *p->rx_lim);
  p->tx = calloc((size_t)n, sizeof *p->tx);
  if (!p->li_of || !p->rank_of || !p->rx_tail || !p->rx_lim || !p->tx) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  for (int r = 0; r < w->size; r++) {
    p->li_of[r] = wf_host_index_of(w->host, r);
    if (p->li_of[r] >= 0) p->rank_of[p->li_of[r]] = r;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  p->oversub = cpus > 0 && n > cpus;
  p->nlocal = n;
  p->li = wf_host_local_index(w->host);
  pthread_mutex_lock(&p->mu);
  p->mbox = mbox;
  pthread_mutex_unlock(&p->mu);
  return WEFT_OK;
}

void wf_p2p_fast_detach(weft_world *w) {
  wf_p2p *p = w->p2p;
  pthread_mutex_lock(&p->mu);
  while (p->reading) { /* a read outside the lock still writes its slot's result: it ends (bounded) */
    pthread_mutex_unlock(&p->mu);
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&p->mu);
  }
  if (p->reads) wf_p2p_fast_fail_reads(w, WEFT_ERR_SHUTDOWN, "the world was finalized before the message was read");
  if (p->mbox) /* tests read this line to see which way messages went */
    WF_INFO(WF_SUB_ENGINE,
            "point-to-point mailboxes: %llu messages received inline, %llu read across processes (%llu beyond %llu "
            "KiB)",
            (unsigned long long)p->n_inline, (unsigned long long)p->n_read, (unsigned long long)p->n_read_big,
            (unsigned long long)(READ_MAX >> 10));
  p->mbox = NULL; /* every fast request failed before (finalize) */
  pthread_mutex_unlock(&p->mu);
}

void wf_p2p_fast_ring_self(wf_p2p *p) { wf_mbox_ring(wf_mbox_bell_at(p->mbox, p->li)); }

/* ------------------------------------------------------------------ sender */

static void mismatch_msg(char *msg, size_t len, uint32_t gid, uint64_t key, int srank, uint64_t scount, int sdt,
                         int rrank, uint64_t rcount, int rdt) {
  char g[32];
  snprintf(msg, len,
           "point-to-point mismatch (%skey %llu): rank %d sends %llu %s elements (%llu bytes) but the recv on "
           "rank %d expects %llu %s elements (%llu bytes)",
           group_str(gid, g, sizeof g), (unsigned long long)key, srank, (unsigned long long)scount,
           weft_dtype_name((weft_dtype)sdt), (unsigned long long)(scount * weft_dtype_size((weft_dtype)sdt)), rrank,
           (unsigned long long)rcount, weft_dtype_name((weft_dtype)rdt),
           (unsigned long long)(rcount * weft_dtype_size((weft_dtype)rdt)));
}

void wf_p2p_fast_reap(weft_world *w, int only) {
  wf_p2p *p = w->p2p;
  for (int li = only < 0 ? 0 : only; li < (only < 0 ? p->nlocal : only + 1); li++) {
    wf_mbox_tx *t = &p->tx[li];
    while (t->reap < t->head) {
      wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, p->li, li, t->reap);
      /* acquire: the receiver's result fields before done */
      if (atomic_load_explicit(&s->done, memory_order_acquire) != t->reap + 1) break;
      weft_request *r = t->reqs[t->reap % p->mslots];
      t->reqs[t->reap % p->mslots] = NULL;
      t->reap++;
      p->ntx--;
      if (s->status == WF_MBOX_MISMATCH) {
        char msg[1024];
        mismatch_msg(msg, sizeof msg, s->group_id, s->key, w->rank, s->count, s->dtype, p->rank_of[li], s->rcount,
                     s->rdtype);
        wf_request_complete(w, r, WEFT_ERR_MISMATCH, msg);
      } else if (s->status == WF_MBOX_UNREAD) {
        char msg[512], g[32];
        snprintf(msg, sizeof msg,
                 "point-to-point send to rank %d (%skey %llu): the receiver matched it but could not read this "
                 "rank's buffer across processes (its recv says why; WEFT_CMA=0 sends without such reads)",
                 p->rank_of[li], group_str(s->group_id, g, sizeof g), (unsigned long long)s->key);
        wf_request_complete(w, r, WEFT_ERR_SYSTEM, msg);
      } else {
        wf_request_complete(w, r, WEFT_OK, NULL);
      }
    }
  }
}

void wf_p2p_fast_fail(weft_world *w, int only, weft_status st, const char *msg) {
  wf_p2p *p = w->p2p;
  for (int li = only < 0 ? 0 : only; li < (only < 0 ? p->nlocal : only + 1); li++) {
    wf_mbox_tx *t = &p->tx[li];
    for (; t->reap < t->head; t->reap++) { /* nobody will match them (or it no longer matters) */
      weft_request *r = t->reqs[t->reap % p->mslots];
      t->reqs[t->reap % p->mslots] = NULL;
      p->ntx--;
      wf_request_complete(w, r, st, msg);
    }
  }
  wf_p2p_fast_ring_self(p);
}

int64_t wf_p2p_fast_deadline(wf_p2p *p, weft_request **which) {
  int64_t d = INT64_MAX;
  if (which) *which = NULL;
  for (int li = 0; p->ntx && li < p->nlocal; li++)
    for (uint64_t k = p->tx[li].reap; k < p->tx[li].head; k++) {
      weft_request *r = p->tx[li].reqs[k % p->mslots];
      if (r->deadline < d) {
        d = r->deadline;
        if (which) *which = r;
      }
    }
  return d;
}

int wf_p2p_fast_send(weft_request *r) {
  weft_world *w = r->world;
  wf_p2p *p = w->p2p;
  int peer = r->p2p_peer;
  if (r->callback || on_engine(w) || atomic_load(&p->slow_out[peer])) return 0;
  uint64_t count = elems_of(r), bytes = count * weft_dtype_size((weft_dtype)r->msg.dtype);
  int far = bytes > WF_MBOX_INLINE; /* the receiver reads it from r->in.data */
  if (far && !w->cma_ok) return 0;
  wf_request_arm(r);
  pthread_mutex_lock(&p->mu);
  int li = p->mbox ? p->li_of[peer] : -1;
  if (li < 0 || p->failed != WEFT_OK || p->gone[peer]) goto no;
  /* beyond READ_MAX only while this rank receives a large message too: its
   * engine thread would copy both directions in turn, where a read lets
   * each receiver copy its own */
  if (far && bytes > READ_MAX && !p->big_rx) goto no;
  wf_mbox_tx *t = &p->tx[li];
  if (t->head - t->reap == p->mslots) wf_p2p_fast_reap(w, li);
  if (t->head - t->reap == p->mslots) goto no; /* full: the engine's path, behind these */
  wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, p->li, li, t->head);
  s->key = r->p2p_key;
  s->count = count;
  s->group_id = r->group->id;
  s->addr = far ? (uint64_t)(uintptr_t)r->in.data : 0;
  s->bytes = far ? 0 : (uint32_t)bytes;
  s->dtype = r->msg.dtype;
  s->status = WF_MBOX_OK;
  if (!far && bytes) memcpy(s->data, r->in.data, bytes);
  t->reqs[t->head % p->mslots] = r;
  r->p2p_fast = 1;
  r->p2p_li = li;
  atomic_store_explicit(&r->state, WF_REQ_RUNNING, memory_order_relaxed);
  /* release: the header and bytes before seq (the receiver reads seq with acquire) */
  atomic_store_explicit(&s->seq, t->head + 1, memory_order_release);
  t->head++;
  p->ntx++;
  wf_mbox_bell *bell = wf_mbox_bell_at(p->mbox, li);
  pthread_mutex_unlock(&p->mu);
  wf_mbox_ring(bell);
  return 1;
no:
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* ------------------------------------------------------------------ receiver */

void wf_p2p_fast_snapshot(wf_p2p *p) {
  for (int li = 0; li < p->nlocal; li++) {
    if (li == p->li) continue;
    uint64_t i = p->rx_tail[li];
    while (i < p->rx_tail[li] + p->mslots) {
      wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, li, p->li, i);
      if (atomic_load_explicit(&s->seq, memory_order_acquire) < i + 1) break; /* not published yet */
      i++;
    }
    p->rx_lim[li] = i;
  }
}

/* The earliest unmatched message from local index li that o accepts, among
 * those published when the pass began (wf_p2p_fast_snapshot). */
static int scan(wf_p2p *p, const op *o, int li, uint64_t *k) {
  uint64_t t = p->rx_tail[li];
  for (;; t++) { /* past the matched ones (a reused slot: its message was reaped, so matched) */
    wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, li, p->li, t);
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (!(seq > t + 1 || (seq == t + 1 && atomic_load_explicit(&s->done, memory_order_relaxed) == t + 1))) break;
  }
  p->rx_tail[li] = t;
  uint32_t gid = o->r->group->id;
  uint64_t key = o->r->p2p_key;
  for (uint64_t i = t; i < p->rx_lim[li]; i++) {
    wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, li, p->li, i);
    /* acquire: pairs with the sender's release of seq */
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq < i + 1) return 0; /* not written yet: nor is anything after it */
    if (seq > i + 1 || atomic_load_explicit(&s->done, memory_order_relaxed) == i + 1) continue;
    if (s->status == WF_MBOX_READING) continue; /* matched, being read */
    if (s->group_id == gid && s->key == key) {
      *k = i;
      return 1;
    }
  }
  return 0;
}

int wf_p2p_fast_find(wf_p2p *p, const op *o, int *li, uint64_t *k) {
  if (o->peer >= 0) {
    *li = p->li_of[o->peer];
    return *li >= 0 && *li != p->li && scan(p, o, *li, k);
  }
  for (int s = 0; s < p->nlocal; s++) /* any source: the group's local members */
    if (s != p->li && wf_group_index(o->r->group, p->rank_of[s]) >= 0 && scan(p, o, s, k)) {
      *li = s;
      return 1;
    }
  return 0;
}

/* Reads o's message (addr in process pid, the send's key) into its
 * buffer; the error in msg when it fails. Any thread, p->mu held or not. */
static weft_status read_msg(op *o, int pid, uint64_t addr, uint64_t key, char *msg, size_t len) {
  char what[96];
  snprintf(what, sizeof what, "point-to-point recv (key %llu): ", (unsigned long long)key);
  weft_status st = wf_cma_read(pid, addr, o->r->in.data, (size_t)o->bytes, o->peer, what);
  if (st != WEFT_OK) snprintf(msg, len, "%s", wf_err_msg());
  return st;
}

static void count_read(wf_p2p *p, const op *o, weft_status st) { /* p->mu held */
  p->n_read += st == WEFT_OK;
  p->n_read_big += st == WEFT_OK && o->bytes > READ_MAX;
}

void wf_p2p_fast_match(weft_world *w, op *o, int li, uint64_t k) {
  wf_p2p *p = w->p2p;
  weft_request *r = o->r;
  wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, li, p->li, k);
  r->p2p_peer = o->peer = p->rank_of[li];
  weft_status st = WEFT_OK;
  char msg[1024]; /* written only for a mismatch (no 1 KiB zeroing per message) */
  if (s->dtype != r->msg.dtype || s->count != o->count) {
    mismatch_msg(msg, sizeof msg, s->group_id, s->key, o->peer, s->count, s->dtype, w->rank, o->count, r->msg.dtype);
    s->status = WF_MBOX_MISMATCH;
    s->rdtype = r->msg.dtype;
    s->rcount = o->count;
    st = WEFT_ERR_MISMATCH;
  } else if (s->addr && r->callback) { /* the engine's (callbacks run there): read here */
    st = read_msg(o, (int)w->peers[o->peer].pid, s->addr, s->key, msg, sizeof msg);
    s->status = st == WEFT_OK ? WF_MBOX_OK : WF_MBOX_UNREAD;
    count_read(p, o, st);
  } else if (s->addr) { /* claimed: read outside p->mu by wf_p2p_fast_do_reads, in any thread */
    s->status = WF_MBOX_READING;
    o->rli = li;
    o->rk = k;
    o->next = NULL;
    if (p->reads_tail) p->reads_tail->next = o;
    else p->reads = o;
    p->reads_tail = o;
    return;
  } else {
    if (o->bytes) memcpy(r->in.data, s->data, o->bytes);
    s->status = WF_MBOX_OK;
    p->n_inline++;
  }
  /* release: the result (and our reads of the bytes) before done */
  atomic_store_explicit(&s->done, k + 1, memory_order_release);
  wf_mbox_ring(wf_mbox_bell_at(p->mbox, li));
  wf_p2p_finish(w, o, st, st == WEFT_OK ? NULL : msg);
}

int wf_p2p_fast_recv(weft_request *r) {
  weft_world *w = r->world;
  wf_p2p *p = w->p2p;
  /* a callback (on the engine thread), or a receive too large for a
   * mailbox message (beyond READ_MAX, or beyond a slot when no message may
   * be read across processes: the engine posts it and will match it), or
   * one behind such: through the engine's queue, in order */
  if (on_engine(w) || atomic_load(&p->queued_recvs)) return 0;
  uint64_t bytes = elems_of(r) * weft_dtype_size((weft_dtype)r->msg.dtype);
  if (bytes > WF_MBOX_INLINE && !w->cma_ok) return 0;
  op *o = malloc(sizeof *o); /* not calloc: glibc's calloc skips the thread's cache of small blocks */
  if (!o) return 0;
  *o = (op){0};
  o->r = r;
  o->peer = r->p2p_peer;
  o->count = elems_of(r);
  o->bytes = o->count * weft_dtype_size((weft_dtype)r->msg.dtype);
  wf_request_arm(r);
  pthread_mutex_lock(&p->mu);
  if (!p->mbox || p->failed != WEFT_OK) { /* wf_p2p_submit reports the failure */
    pthread_mutex_unlock(&p->mu);
    free(o);
    return 0;
  }
  r->p2p_fast = 2;
  o->big = bytes > READ_MAX; /* a sender to this rank may then send large messages to be read */
  p->big_rx += o->big;
  atomic_store_explicit(&r->state, WF_REQ_RUNNING, memory_order_relaxed);
  if (p->posted_tail) p->posted_tail->next = o;
  else p->posted = o;
  p->posted_tail = o;
  wf_p2p_match_all(w, 0);
  pthread_mutex_unlock(&p->mu);
  return 1;
}

/* ------------------------------------------------------------------ reads */

void wf_p2p_fast_fail_reads(weft_world *w, weft_status st, const char *msg) {
  wf_p2p *p = w->p2p;
  op *o = p->reads;
  p->reads = p->reads_tail = NULL;
  for (op *n; o; o = n) {
    n = o->next;
    wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, o->rli, p->li, o->rk);
    s->status = WF_MBOX_UNREAD; /* the sender's send fails too (its message names this side's error) */
    atomic_store_explicit(&s->done, o->rk + 1, memory_order_release);
    wf_mbox_ring(wf_mbox_bell_at(p->mbox, o->rli));
    wf_p2p_finish(w, o, st, msg);
  }
}

void wf_p2p_fast_do_reads(weft_world *w) {
  wf_p2p *p = w->p2p;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    op *o = p->reads;
    if (!o || !p->mbox) {
      pthread_mutex_unlock(&p->mu);
      return;
    }
    p->reads = o->next;
    if (!p->reads) p->reads_tail = NULL;
    o->next = NULL;
    p->reading++; /* the slot stays valid (wf_p2p_fast_detach waits) and ours (READING) */
    wf_mbox_slot *s = wf_mbox_slot_at(p->mbox, p->mslots, o->rli, p->li, o->rk);
    uint64_t addr = s->addr, key = s->key;
    int pid = (int)w->peers[o->peer].pid;
    pthread_mutex_unlock(&p->mu);
    char msg[1024];
    weft_status st = read_msg(o, pid, addr, key, msg, sizeof msg);
    pthread_mutex_lock(&p->mu);
    p->reading--;
    s->status = st == WEFT_OK ? WF_MBOX_OK : WF_MBOX_UNREAD;
    count_read(p, o, st);
    /* release: the result (and our reads of the bytes) before done */
    atomic_store_explicit(&s->done, o->rk + 1, memory_order_release);
    wf_mbox_ring(wf_mbox_bell_at(p->mbox, o->rli));
    wf_p2p_finish(w, o, st, st == WEFT_OK ? NULL : msg);
    pthread_mutex_unlock(&p->mu);
  }
}

/* ------------------------------------------------------------------ waiting */

/* One look: reaps the rings with results in and matches the posted
 * receives, whichever r is: a rank waiting for its send must still match
 * its posted receives, or two ranks that each wait for their send to the
 * other (a ring shift) would wait for the engine's scan. 0 once there are
 * no mailboxes (finalized). */
static int look(weft_world *w, weft_request *r) {
  (void)r;
  wf_p2p *p = w->p2p;
  pthread_mutex_lock(&p->mu);
  int ok = p->mbox != NULL;
  if (ok && p->ntx) wf_p2p_fast_reap(w, -1);
  if (ok && p->posted) wf_p2p_match_all(w, 0);
  int reads = ok && p->reads;
  pthread_mutex_unlock(&p->mu);
  if (reads) wf_p2p_fast_do_reads(w);
  return ok;
}

void wf_p2p_fast_progress(weft_request *r, int64_t deadline, int wait) {
  weft_world *w = r->world;
  wf_p2p *p = w->p2p;
  if (on_engine(w)) return;
  pthread_mutex_lock(&p->mu);
  wf_mbox_bell *bell = p->mbox ? wf_mbox_bell_at(p->mbox, p->li) : NULL;
  pthread_mutex_unlock(&p->mu);
  if (!bell) return;
  /* Looks (under p->mu) only when the bell's word moved: a waiter that
   * spins on the lock would hold it when preempted and stall the engine */
  uint32_t seen = wf_mbox_word(bell);
  if (wf_request_done(r) || !look(w, r) || wf_request_done(r) || !wait) return;
  int64_t t0 = wf_now_ns(), now = t0;
  for (int i = 1;; i++) {
    uint32_t v = wf_mbox_word(bell);
    if (v != seen) {
      seen = v;
      if (!look(w, r)) return;
    }
    if (wf_request_done(r)) return;
    if (i % 32 == 0 || now - t0 >= SPIN_NS) {
      now = wf_now_ns();
      if (now >= deadline) return;
    }
    if (now - t0 < SPIN_NS) {
      if (p->oversub || i >= 16) sched_yield(); /* the peer or the engine may need this core */
      else cpu_relax();
      continue;
    }
    /* sleep on this rank's bell: the sender rings it after publishing, the
     * receiver after matching, the engine after completing a transfer */
    int64_t left = deadline - now;
    wf_mbox_sleep(bell, seen, left < 1000000 ? left : 1000000);
  }
}
