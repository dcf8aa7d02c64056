/* shm.c - the shared-memory transport's data path (see shm.h for the
 * design, host/segment.h for the segment): SPSC slot rings per ordered pair of
 * local ranks (each a sender's share of its receiver's inbox), copies in and
 * out of them, and futex doorbells. Engine thread
 * only, except wf_shm_interrupt. */
#include "transport/shm.h"
#include "host/segment.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "util/copy.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define NT_MIN_MSG (4u << 20) /* streaming copies only into receives this large (well above L2) */
#define SPIN_NS 20000         /* wf_shm_wait spins/yields this long before blocking */

typedef struct tx {
  struct tx *next;
  uint64_t seq;
  uint32_t idx;
  const uint8_t *buf;
  size_t len, off;
  int *pending;
} tx;

typedef struct rx {
  struct rx *next;
  uint64_t seq;
  uint32_t idx;
  uint8_t *buf;
  size_t len, got;
  int *pending;
} rx;

typedef struct peer {
  int world;
  wf_shm_ring *out, *in; /* this rank -> peer, peer -> this rank */
  uint8_t *out_slots, *in_slots;
  wf_shm_bell *bell; /* the peer's doorbell */
  uint64_t out_head; /* our head (we are the only writer) */
  uint64_t out_tail; /* last tail seen: the ring has room while out_head - out_tail < nslots */
  uint64_t in_tail;  /* our tail */
  uint64_t in_head;  /* last head seen */
  tx *txh, *txt;     /* sends queued to the peer, in order */
  rx *rxh, *rxt;     /* receives posted from the peer, in order */
  int broken;        /* protocol error: the pair is dead */
} peer;

struct wf_shm {
  wf_transport base;
  int rank, size, nlocal, me;
  int *lidx;   /* world rank -> local index, -1 if not local */
  peer *peers; /* nlocal entries, [me] unused */
  wf_shm_bell *bell; /* ours */
  size_t slot_bytes, nslots, stride;
  wf_copy_fn nt_copy; /* streaming copy into large receive buffers, or NULL */
  _Atomic int interrupt;
  tx *tx_free; /* recycled queue entries: no malloc per message */
  rx *rx_free;
  void *cb_ctx;
  void (*on_error)(void *ctx, int peer, weft_status st, const char *msg);
  int (*poll)(void *ctx); /* extra wake-up condition (wf_shm_set_poll), or NULL */
  void *poll_ctx;
};

static const wf_transport_ops shm_ops;

/* ------------------------------------------------------------------ doorbells */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  /* Not FUTEX_PRIVATE: the word is in a mapping shared between processes. */
  return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* Called after publishing a slot (head) or releasing one (tail) in a ring
 * the owner of b reads or writes. Dekker pattern with wf_shm_wait: we store
 * the ring index, fence, load waiting; the waiter stores waiting, fences,
 * loads the ring index. With both fences seq_cst, at least one side sees the
 * other's store: either the waiter finds the work, or we see it waiting and
 * wake it. So no syscall unless it sleeps. */
static void wake_if_waiting(wf_shm_bell *b) {
  /* relaxed: the caller's fence provides the ordering; the exchange makes
   * only one waker pay for the syscall. */
  if (atomic_load_explicit(&b->waiting, memory_order_relaxed) &&
      atomic_exchange_explicit(&b->waiting, 0, memory_order_relaxed)) {
    /* release: pairs with the waiter's acquire load of word, so a waiter that
     * reads the new value also sees our ring update. */
    atomic_fetch_add_explicit(&b->word, 1, memory_order_release);
    futex(&b->word, FUTEX_WAKE, 1, NULL);
  }
}

static void ring_bell(wf_shm_bell *b) {
  atomic_thread_fence(memory_order_seq_cst); /* see above: orders our ring store before the load of waiting */
  wake_if_waiting(b);
}

void wf_shm_wake_peers(wf_shm *s) {
  if (!s || !s->bell) return;
  atomic_thread_fence(memory_order_seq_cst); /* as in ring_bell: the caller's store before the loads of waiting */
  for (int i = 0; i < s->nlocal; i++)
    if (i != s->me) wake_if_waiting(s->peers[i].bell);
}

void wf_shm_set_poll(wf_shm *s, int (*ready)(void *ctx), void *ctx) {
  s->poll = ready;
  s->poll_ctx = ctx;
}

void wf_shm_interrupt(wf_shm *s) {
  if (!s || !s->bell) return;
  /* relaxed: ring_bell's fence orders it before the load of waiting, and the
   * waiter's exchange in has_work is after its own fence (same Dekker). */
  atomic_store_explicit(&s->interrupt, 1, memory_order_relaxed);
  ring_bell(s->bell);
}

/* ------------------------------------------------------------------ errors */

static void pair_fail(wf_shm *s, peer *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pair_fail(wf_shm *s, peer *p, const char *fmt, ...) {
  if (p->broken) return;
  p->broken = 1;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  WF_WARN(WF_SUB_SHM, "%s", msg);
  if (s->on_error) s->on_error(s->cb_ctx, p->world, WEFT_ERR_PROTOCOL, msg);
}

/* ------------------------------------------------------------------ data path */

static uint8_t *slot_at(const wf_shm *s, uint8_t *slots, uint64_t k) { return slots + (k % s->nslots) * s->stride; }

/* Copies the queued sends to p into free slots, in order: at most one ring's
 * worth per call, so a long stream does not hold the engine thread. */
static int push(wf_shm *s, peer *p) {
  int moved = 0;
  for (size_t budget = s->nslots; p->txh && !p->broken && budget > 0; budget--) {
    tx *t = p->txh;
    if (p->out_head - p->out_tail == s->nslots) {
      /* acquire: the consumer's reads of the slots it released happen before
       * we overwrite them. */
      p->out_tail = atomic_load_explicit(&p->out->tail, memory_order_acquire);
      if (p->out_head - p->out_tail == s->nslots) break; /* full: backpressure */
    }
    uint8_t *slot = slot_at(s, p->out_slots, p->out_head);
    size_t n = t->len - t->off;
    if (n > s->slot_bytes) n = s->slot_bytes;
    wf_shm_slot_hdr *h = (wf_shm_slot_hdr *)slot;
    h->seq = t->seq;
    h->msg_len = t->len;
    h->offset = t->off;
    h->idx = t->idx;
    h->len = (uint32_t)n;
    /* Into the ring with plain stores: the consumer reads it next, from
     * cache (with streaming stores it would read from memory, which is
     * slower; bench/NOTES.md, "Ring copies"). */
    wf_copy(slot + WF_SHM_SLOT_HDR, t->buf + t->off, n);
    p->out_head++;
    /* release: the slot's header and payload are visible before the new head. */
    atomic_store_explicit(&p->out->head, p->out_head, memory_order_release);
    ring_bell(p->bell);
    moved = 1;
    t->off += n;
    if (t->off == t->len) {
      p->txh = t->next;
      if (!p->txh) p->txt = NULL;
      (*t->pending)--;
      t->next = s->tx_free;
      s->tx_free = t;
    }
  }
  return moved;
}

/* The posted receive a head slot with tag (seq, idx) belongs to, or NULL.
 * *stale is set when the slot is left over from an older (cancelled)
 * collective of a group that has moved on; *other_idx when a receive of the
 * same collective expects a different message (a protocol error). */
static rx *match(peer *p, uint64_t seq, uint32_t idx, rx **prev, int *stale, int *other_idx) {
  *stale = *other_idx = 0;
  *prev = NULL;
  for (rx *q = p->rxh, *qp = NULL; q; qp = q, q = q->next) {
    if (q->seq == seq && q->idx == idx) {
      *prev = qp;
      return q;
    }
    if (q->seq == seq) *other_idx = 1;
    if (wf_tag_same_group(q->seq, seq) && seq < q->seq) *stale = 1;
  }
  return NULL;
}

/* Copies published slots from p into the posted receives they belong to (at
 * most one ring's worth per call). Per pair and collective, slots come in
 * send order; collectives of different groups interleave, so the head may
 * belong to any posted receive, or to one not posted yet (then it waits: the
 * engine posts it when that group's collective starts). */
static int pull(wf_shm *s, peer *p) {
  int moved = 0;
  for (size_t budget = s->nslots; p->rxh && !p->broken && budget > 0; budget--) {
    if (p->in_tail == p->in_head) {
      /* acquire: the producer's writes of the slots happen before we read them. */
      p->in_head = atomic_load_explicit(&p->in->head, memory_order_acquire);
      if (p->in_tail == p->in_head) break;
    }
    uint8_t *slot = slot_at(s, p->in_slots, p->in_tail);
    wf_shm_slot_hdr h = *(const wf_shm_slot_hdr *)slot;
    rx *prev, *r;
    int stale, other_idx;
    r = match(p, h.seq, h.idx, &prev, &stale, &other_idx);
    if (!r && other_idx) {
      rx *q = p->rxh;
      while (q->seq != h.seq) q = q->next;
      pair_fail(s, p,
                "shared memory: rank %d sent message %u of collective %llu but message %u was expected", p->world,
                h.idx, (unsigned long long)h.seq, q->idx);
      break;
    }
    if (!r && !stale) break; /* for a receive not posted yet: wait */
    if (r && (h.msg_len != r->len || h.offset != r->got || h.len == 0 || h.len > s->slot_bytes ||
              h.len > r->len - r->got)) {
      pair_fail(s, p,
                "shared memory: rank %d sent message %u of collective %llu (%llu bytes, chunk %llu+%u) but message %u "
                "of %zu bytes was expected (at byte %zu)",
                p->world, h.idx, (unsigned long long)h.seq, (unsigned long long)h.msg_len,
                (unsigned long long)h.offset, h.len, r->idx, r->len, r->got);
      break;
    }
    if (r) {
      if (s->nt_copy && r->len >= NT_MIN_MSG)
        s->nt_copy(r->buf + r->got, slot + WF_SHM_SLOT_HDR, h.len);
      else
        wf_copy(r->buf + r->got, slot + WF_SHM_SLOT_HDR, h.len);
      r->got += h.len;
    } /* else: left over from a cancelled collective: drop it */
    p->in_tail++;
    /* release: our reads of the slot happen before the producer may reuse it. */
    atomic_store_explicit(&p->in->tail, p->in_tail, memory_order_release);
    ring_bell(p->bell);
    moved = 1;
    if (r && r->got == r->len) {
      if (prev) prev->next = r->next;
      else p->rxh = r->next;
      if (p->rxt == r) p->rxt = prev;
      (*r->pending)--;
      r->next = s->rx_free;
      s->rx_free = r;
    }
  }
  return moved;
}

static peer *local_peer(wf_shm *s, int peer_rank, const char *what) {
  if (peer_rank < 0 || peer_rank >= s->size || s->lidx[peer_rank] < 0 || peer_rank == s->rank) {
    wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: cannot %s rank %d: not another rank on this host", what,
           peer_rank);
    return NULL;
  }
  return &s->peers[s->lidx[peer_rank]];
}

static weft_status shm_send(wf_transport *tr, int peer_rank, uint64_t seq, uint32_t idx, const void *buf, size_t len,
                            int *pending) {
  wf_shm *s = (wf_shm *)tr;
  peer *p = local_peer(s, peer_rank, "send to");
  if (!p) return WEFT_ERR_INVALID_ARGUMENT;
  if (p->broken) return wf_err(WEFT_ERR_PROTOCOL, "shared memory: the link to rank %d broke earlier", peer_rank);
  if (len == 0) return WEFT_OK;
  tx *t = s->tx_free;
  if (t) s->tx_free = t->next;
  else if (!(t = malloc(sizeof *t)))
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory queueing data to rank %d", peer_rank);
  *t = (tx){.seq = seq, .idx = idx, .buf = buf, .len = len, .pending = pending};
  (*pending)++;
  if (p->txt) p->txt->next = t;
  else p->txh = t;
  p->txt = t;
  push(s, p);
  return WEFT_OK;
}

static weft_status shm_recv(wf_transport *tr, int peer_rank, uint64_t seq, uint32_t idx, void *buf, size_t len,
                            int *pending) {
  wf_shm *s = (wf_shm *)tr;
  peer *p = local_peer(s, peer_rank, "receive from");
  if (!p) return WEFT_ERR_INVALID_ARGUMENT;
  if (p->broken) return wf_err(WEFT_ERR_PROTOCOL, "shared memory: the link to rank %d broke earlier", peer_rank);
  if (len == 0) return WEFT_OK;
  rx *r = s->rx_free;
  if (r) s->rx_free = r->next;
  else if (!(r = malloc(sizeof *r)))
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory posting a receive from rank %d", peer_rank);
  *r = (rx){.seq = seq, .idx = idx, .buf = buf, .len = len, .pending = pending};
  (*pending)++;
  if (p->rxt) p->rxt->next = r;
  else p->rxh = r;
  p->rxt = r;
  pull(s, p);
  return WEFT_OK;
}

static void shm_cancel_data(wf_transport *tr) {
  wf_shm *s = (wf_shm *)tr;
  /* A message cut short stays half in the ring: the receiver drops what is
   * left of it once it posts a receive of a later collective (pull). */
  for (int i = 0; i < s->nlocal; i++) {
    peer *p = &s->peers[i];
    for (tx *t = p->txh, *n; t; t = n) {
      n = t->next;
      t->next = s->tx_free;
      s->tx_free = t;
    }
    for (rx *r = p->rxh, *n; r; r = n) {
      n = r->next;
      r->next = s->rx_free;
      s->rx_free = r;
    }
    p->txh = p->txt = NULL;
    p->rxh = p->rxt = NULL;
  }
}

static int shm_incomplete(wf_transport *tr, int peer_rank) {
  wf_shm *s = (wf_shm *)tr;
  if (peer_rank < 0 || peer_rank >= s->size || s->lidx[peer_rank] < 0) return 0;
  const peer *p = &s->peers[s->lidx[peer_rank]];
  return p->txh != NULL || p->rxh != NULL;
}

int wf_shm_progress(wf_shm *s) {
  int moved = 0;
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me) continue;
    peer *p = &s->peers[i];
    if (p->txh) moved |= push(s, p);
    if (p->rxh) moved |= pull(s, p);
  }
  return moved;
}

/* 1 if progress could move something now (or an interrupt is pending). Reads
 * the rings' indices without consuming anything. */
static int has_work(wf_shm *s) {
  /* relaxed: a hint; the caller's fence (wf_shm_wait) or the waker's orders it. */
  if (atomic_load_explicit(&s->interrupt, memory_order_relaxed) &&
      atomic_exchange_explicit(&s->interrupt, 0, memory_order_relaxed))
    return 1;
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me) continue;
    peer *p = &s->peers[i];
    if (p->broken) continue;
    /* acquire (both): what we then find in the ring is what progress reads.
     * A head slot for a receive not posted yet is not work: do not spin on
     * it. */
    if (p->rxh && atomic_load_explicit(&p->in->head, memory_order_acquire) != p->in_tail) {
      const wf_shm_slot_hdr *h = (const wf_shm_slot_hdr *)slot_at(s, p->in_slots, p->in_tail);
      rx *prev;
      int stale, other_idx;
      if (match(p, h->seq, h->idx, &prev, &stale, &other_idx) || stale || other_idx) return 1;
    }
    if (p->txh && p->out_head - atomic_load_explicit(&p->out->tail, memory_order_acquire) < s->nslots) return 1;
  }
  return s->poll && s->poll(s->poll_ctx);
}

static void cpu_relax(void) {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

void wf_shm_wait(wf_shm *s, int64_t timeout_ns) {
  if (!s->bell || has_work(s) || timeout_ns <= 0) return;
  int64_t start = wf_now_ns(), end = start + timeout_ns;
  /* Spin a little (a peer mid-copy usually publishes within microseconds),
   * then yield (oversubscribed ranks hand the core to the peer we wait for),
   * then block. */
  for (int i = 1;; i++) {
    if (has_work(s)) return;
    if (i <= 64) {
      cpu_relax();
      continue;
    }
    int64_t now = wf_now_ns();
    if (now - start >= SPIN_NS || now >= end) break;
    sched_yield();
  }
  /* relaxed: the seq_cst fence below orders it before the ring loads. */
  atomic_store_explicit(&s->bell->waiting, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst); /* Dekker with ring_bell: store waiting, then load the rings */
  /* acquire: pairs with ring_bell's release increment (see there). */
  uint32_t w = atomic_load_explicit(&s->bell->word, memory_order_acquire);
  if (!has_work(s)) {
    int64_t left = end - wf_now_ns();
    if (left > 0) {
      struct timespec ts = {.tv_sec = left / WF_NS_PER_SEC, .tv_nsec = left % WF_NS_PER_SEC};
      futex(&s->bell->word, FUTEX_WAIT, w, &ts); /* EAGAIN: already rung; EINTR/ETIMEDOUT: return */
    }
  }
  atomic_store_explicit(&s->bell->waiting, 0, memory_order_relaxed); /* relaxed: only suppresses wake-ups */
}

wf_transport *wf_shm_transport(wf_shm *s) { return &s->base; }

int wf_shm_is_local(const wf_shm *s, int world_rank) {
  return s && world_rank >= 0 && world_rank < s->size && world_rank != s->rank && s->lidx[world_rank] >= 0;
}

int wf_shm_local_index(const wf_shm *s) { return s->me; }
int wf_shm_nlocal(const wf_shm *s) { return s->nlocal; }

static const wf_transport_ops shm_ops = {
    .name = "shm",
    .send = shm_send,
    .recv = shm_recv,
    .cancel_data = shm_cancel_data,
    .incomplete = shm_incomplete,
};

weft_status wf_shm_create(struct wf_host *host, const wf_shm_cfg *cfg, wf_shm **out) {
  *out = NULL;
  int nlocal = host ? wf_host_nlocal(host) : 1;
  wf_shm *s = calloc(1, sizeof *s);
  if (!s || !(s->lidx = malloc(sizeof(int) * (size_t)cfg->size)) ||
      !(s->peers = calloc((size_t)nlocal, sizeof *s->peers))) {
    if (s) free(s->lidx);
    free(s);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory for the shared-memory transport");
  }
  s->base.ops = &shm_ops;
  s->rank = cfg->rank;
  s->size = cfg->size;
  s->nlocal = nlocal;
  s->cb_ctx = cfg->cb_ctx;
  s->on_error = cfg->on_error;
  for (int r = 0; r < cfg->size; r++) {
    s->lidx[r] = host ? wf_host_index_of(host, r) : r == cfg->rank ? 0 : -1;
    if (s->lidx[r] >= 0) s->peers[s->lidx[r]].world = r;
  }
  s->me = s->lidx[cfg->rank];
  if (!host) {
    *out = s;
    return WEFT_OK;
  }
  s->nt_copy = cfg->copy_mode != WF_SHM_COPY_MEMCPY ? wf_copy_nt() : NULL;
  uint8_t *map = wf_host_map(host);
  const wf_shm_layout *l = wf_host_layout(host);
  s->slot_bytes = l->slot_bytes;
  s->nslots = l->nslots;
  s->stride = l->stride;
  s->bell = wf_shm_bell_at(map, l, s->me);
  for (int i = 0; i < s->nlocal; i++) {
    if (i == s->me) continue;
    peer *p = &s->peers[i];
    p->out = wf_shm_ring_at(map, l, s->me, i);
    p->in = wf_shm_ring_at(map, l, i, s->me);
    p->out_slots = (uint8_t *)(p->out + 1);
    p->in_slots = (uint8_t *)(p->in + 1);
    p->bell = wf_shm_bell_at(map, l, i);
  }
  WF_INFO(WF_SUB_SHM, "shared memory with %d local ranks: %zu slots of %zu bytes per pair, %zu MiB", s->nlocal,
          s->nslots, s->slot_bytes, l->size >> 20);
  *out = s;
  return WEFT_OK;
}

void wf_shm_destroy(wf_shm *s) {
  if (!s) return;
  shm_cancel_data(&s->base);
  for (tx *t = s->tx_free, *n; t; t = n) {
    n = t->next;
    free(t);
  }
  for (rx *r = s->rx_free, *n; r; r = n) {
    n = r->next;
    free(r);
  }
  free(s->lidx);
  free(s->peers);
  free(s);
}
