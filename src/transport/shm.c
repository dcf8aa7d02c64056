/* shm.c - the shared-memory transport (see shm.h for the design): segment
 * setup over the bootstrap sockets, SPSC slot rings per ordered pair of local
 * ranks, and futex doorbells. Engine thread only, except wf_shm_interrupt.
 *
 * Segment layout (offsets page-aligned):
 *   header   magic, geometry, the local ranks (validated by every mapper)
 *   bells    one 128-byte line per local rank: futex word + "waiting" flag
 *   rings    nlocal*(nlocal-1) rings, ring (i->j) at index i*(nlocal-1) +
 *            (j < i ? j : j-1); each: head line, tail line, nslots slots of
 *            a 64-byte header + slot_bytes payload.
 * head counts slots published by the producer, tail slots released by the
 * consumer (both only grow; slot k lives at k % nslots). Each sits alone on
 * 128 bytes: the adjacent-line prefetcher pulls 64-byte lines in pairs. */
#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define SEG_MAGIC 0x316d687374666577ULL /* "weftshm1" */
#define SEG_VERSION 1
#define SLOT_HDR 64u
#define LINE 128u
#define PAGE 4096u
#define DEF_SLOT_BYTES (64u << 10)
#define DEF_NSLOTS 16u
#define AUTO_MAX_BYTES (256u << 20) /* shrink default rings beyond this segment size */
#define NT_MIN_MSG (4u << 20)       /* non-temporal copies only for messages this large (> L2) */
#ifndef SPIN_NS
#define SPIN_NS 20000               /* wf_shm_wait: spin/yield this long before blocking */
#endif

typedef struct seg_hdr {
  uint64_t magic;
  uint32_t version, nlocal;
  uint64_t slot_bytes, nslots, ring_bytes, size;
  int32_t ranks[]; /* nlocal world ranks */
} seg_hdr;

typedef struct bell {
  _Atomic uint32_t word;    /* futex word: bumped by whoever wakes this rank */
  _Atomic uint32_t waiting; /* 1 while this rank is about to sleep or asleep on word */
  char pad[LINE - 8];
} bell;

typedef struct ring_ctl {
  alignas(LINE) _Atomic uint64_t head; /* written by the producer only */
  alignas(LINE) _Atomic uint64_t tail; /* written by the consumer only */
} ring_ctl;

typedef struct slot_hdr {
  uint64_t seq, msg_len, offset; /* message tag, total length, where this chunk goes */
  uint32_t idx, len;             /* len: payload bytes in this slot (> 0) */
} slot_hdr;

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
  ring_ctl *out, *in; /* this rank -> peer, peer -> this rank */
  uint8_t *out_slots, *in_slots;
  bell *bell;             /* the peer's doorbell */
  uint64_t out_head;      /* our head (we are the only writer) */
  uint64_t out_tail;      /* last tail seen: the ring has room while out_head - out_tail < nslots */
  uint64_t in_tail;       /* our tail */
  uint64_t in_head;       /* last head seen */
  tx *txh, *txt;
  rx *rxh, *rxt;
  int broken;             /* protocol error: the pair is dead */
} peer;

struct wf_shm {
  wf_transport base;
  int rank, size, nlocal, me;
  int *lidx; /* world rank -> local index, -1 if not local */
  peer *peers; /* nlocal entries, [me] unused */
  uint8_t *map;
  size_t map_size;
  bell *bell; /* ours */
  size_t slot_bytes, nslots, stride;
  int nt; /* use non-temporal copies into receive buffers */
  _Atomic int interrupt;
  tx *tx_free;
  rx *rx_free;
  void *cb_ctx;
  void (*on_error)(void *ctx, int peer, weft_status st, const char *msg);
};

static const wf_transport_ops shm_ops;

/* ------------------------------------------------------------------ copies */

#if defined(__x86_64__)
/* Streaming stores bypass the cache: no read-for-ownership of the
 * destination and no eviction of useful lines. The final sfence orders them
 * before the release store that publishes the data (plain release stores do
 * not order non-temporal ones). */
__attribute__((target("avx2"))) static void copy_nt_avx2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 31);
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)s), b = _mm256_loadu_si256((const __m256i *)(s + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + 64)), e = _mm256_loadu_si256((const __m256i *)(s + 96));
    _mm256_stream_si256((__m256i *)d, a);
    _mm256_stream_si256((__m256i *)(d + 32), b);
    _mm256_stream_si256((__m256i *)(d + 64), c);
    _mm256_stream_si256((__m256i *)(d + 96), e);
  }
  for (; n >= 32; d += 32, s += 32, n -= 32) _mm256_stream_si256((__m256i *)d, _mm256_loadu_si256((const __m256i *)s));
  memcpy(d, s, n);
  _mm_sfence();
}

static void copy_nt_sse2(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (size_t)(-(uintptr_t)d & 15);
  if (head > n) head = n;
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  for (; n >= 16; d += 16, s += 16, n -= 16) _mm_stream_si128((__m128i *)d, _mm_loadu_si128((const __m128i *)s));
  memcpy(d, s, n);
  _mm_sfence();
}
#endif

typedef void (*copy_fn)(void *, const void *, size_t);

#if !defined(__x86_64__)
static void copy_plain(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif

static copy_fn nt_copy(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? copy_nt_avx2 : copy_nt_sse2;
#else
  return copy_plain;
#endif
}

static copy_fn g_nt_copy; /* set once in wf_shm_create (engine init, before any transfer) */

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
static void ring_bell(bell *b) {
  atomic_thread_fence(memory_order_seq_cst); /* see above: orders our ring store before the load of waiting */
  /* relaxed: the fence above provides the ordering; the exchange makes only
   * one waker pay for the syscall. */
  if (atomic_load_explicit(&b->waiting, memory_order_relaxed) &&
      atomic_exchange_explicit(&b->waiting, 0, memory_order_relaxed)) {
    /* release: pairs with the waiter's acquire load of word, so a waiter that
     * reads the new value also sees our ring update. */
    atomic_fetch_add_explicit(&b->word, 1, memory_order_release);
    futex(&b->word, FUTEX_WAKE, 1, NULL);
  }
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

/* Copies the queued sends to p into free slots, in order. */
static int push(wf_shm *s, peer *p) {
  int moved = 0;
  while (p->txh && !p->broken) {
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
    slot_hdr *h = (slot_hdr *)slot;
    h->seq = t->seq;
    h->msg_len = t->len;
    h->offset = t->off;
    h->idx = t->idx;
    h->len = (uint32_t)n;
    /* Into the ring with plain stores: the consumer reads it next, from
     * cache (streaming stores here measured slower, see the report). */
    memcpy(slot + SLOT_HDR, t->buf + t->off, n);
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

/* Copies published slots from p into the earliest posted receive. */
static int pull(wf_shm *s, peer *p) {
  int moved = 0;
  while (p->rxh && !p->broken) {
    if (p->in_tail == p->in_head) {
      /* acquire: the producer's writes of the slots happen before we read them. */
      p->in_head = atomic_load_explicit(&p->in->head, memory_order_acquire);
      if (p->in_tail == p->in_head) break;
    }
    rx *r = p->rxh;
    uint8_t *slot = slot_at(s, p->in_slots, p->in_tail);
    slot_hdr h = *(const slot_hdr *)slot;
    if (h.seq < r->seq) {
      /* Left over from a collective that was cancelled: drop it. */
    } else if (h.seq > r->seq) {
      /* The peer abandoned this message (cancelled) or skipped it: nothing
       * here is for r. Wait; the engine's deadline or abort ends it. */
      break;
    } else if (h.idx != r->idx || h.msg_len != r->len || h.offset != r->got || h.len == 0 || h.len > s->slot_bytes ||
               h.len > r->len - r->got) {
      pair_fail(s, p,
                "shared memory: rank %d sent message %u of collective %llu (%llu bytes, chunk %llu+%u) but message %u "
                "of %zu bytes was expected (at byte %zu)",
                p->world, h.idx, (unsigned long long)h.seq, (unsigned long long)h.msg_len,
                (unsigned long long)h.offset, h.len, r->idx, r->len, r->got);
      break;
    } else {
      if (s->nt && r->len >= NT_MIN_MSG)
        g_nt_copy(r->buf + r->got, slot + SLOT_HDR, h.len);
      else
        memcpy(r->buf + r->got, slot + SLOT_HDR, h.len);
      r->got += h.len;
    }
    p->in_tail++;
    /* release: our reads of the slot happen before the producer may reuse it. */
    atomic_store_explicit(&p->in->tail, p->in_tail, memory_order_release);
    ring_bell(p->bell);
    moved = 1;
    if (r->got == r->len && h.seq == r->seq) {
      p->rxh = r->next;
      if (!p->rxh) p->rxt = NULL;
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
  else if (!(t = malloc(sizeof *t))) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory queueing data to rank %d", peer_rank);
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
     * A head slot of a later collective than the posted receive is not work
     * (the sender abandoned a message): do not spin on it. */
    if (p->rxh && atomic_load_explicit(&p->in->head, memory_order_acquire) != p->in_tail &&
        ((const slot_hdr *)slot_at(s, p->in_slots, p->in_tail))->seq <= p->rxh->seq)
      return 1;
    if (p->txh && p->out_head - atomic_load_explicit(&p->out->tail, memory_order_acquire) < s->nslots) return 1;
  }
  return 0;
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

static const wf_transport_ops shm_ops = {
    .name = "shm",
    .send = shm_send,
    .recv = shm_recv,
    .cancel_data = shm_cancel_data,
    .incomplete = shm_incomplete,
};

/* ------------------------------------------------------------------ setup */

/* Records exchanged over the bootstrap sockets, all of this one size, strictly
 * paired: creator -> each peer NAME, READY; peer -> creator ACK (only after a
 * successful READY); creator -> peer VERDICT (only after its ACK). Both ends
 * are on one host: native byte order. */
enum { MSG_NAME = 1, MSG_READY = 2, MSG_ACK = 3, MSG_VERDICT = 4 };
#define MSG_MAGIC 0x4d485357u /* "WSHM" */

typedef struct setup_msg {
  uint32_t magic, kind;
  int32_t status;
  uint32_t pad;
  uint64_t size;
  char text[232]; /* NAME: the segment name; errors: what failed */
} setup_msg;

typedef struct layout {
  size_t slot_bytes, nslots, stride, ring_bytes, bells_off, rings_off, size;
} layout;

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Fills l from the geometry; 0 if the sizes overflow. */
static int make_layout(int nlocal, size_t slot_bytes, size_t nslots, layout *l) {
  size_t pairs = (size_t)nlocal * (size_t)(nlocal - 1), ring, rings;
  l->slot_bytes = round_up(slot_bytes, 64);
  l->nslots = nslots;
  l->stride = SLOT_HDR + l->slot_bytes;
  if (__builtin_mul_overflow(l->stride, nslots, &ring) || ring > SIZE_MAX / 2) return 0;
  l->ring_bytes = round_up(sizeof(ring_ctl) + ring, PAGE);
  l->bells_off = round_up(sizeof(seg_hdr) + sizeof(int32_t) * (size_t)nlocal, PAGE);
  l->rings_off = l->bells_off + round_up(sizeof(bell) * (size_t)nlocal, PAGE);
  if (__builtin_mul_overflow(l->ring_bytes, pairs, &rings) || __builtin_add_overflow(rings, l->rings_off, &l->size))
    return 0;
  return 1;
}

/* The geometry used when the config leaves it at 0: 64 KiB x 16 slots per
 * ring, fewer slots then smaller ones when many local ranks would make the
 * segment larger than AUTO_MAX_BYTES. */
static int auto_layout(const wf_shm_cfg *cfg, layout *l) {
  size_t slot = cfg->slot_bytes ? cfg->slot_bytes : DEF_SLOT_BYTES;
  size_t n = cfg->nslots ? (cfg->nslots < 2 ? 2 : cfg->nslots) : DEF_NSLOTS;
  if (slot > UINT32_MAX - 64) slot = UINT32_MAX - 64;
  if (!make_layout(cfg->nlocal, slot, n, l)) return 0;
  while (l->size > AUTO_MAX_BYTES && ((!cfg->nslots && n > 4) || (!cfg->slot_bytes && slot > 8192))) {
    if (!cfg->nslots && n > 4) n /= 2;
    else slot /= 2;
    if (!make_layout(cfg->nlocal, slot, n, l)) return 0;
  }
  return 1;
}

static void sanitize(char *dst, size_t cap, const char *src) {
  size_t k = 0;
  for (; src && *src && k + 1 < cap; src++) {
    char c = *src;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
             c == '.';
    dst[k++] = ok ? c : '_';
  }
  dst[k] = '\0';
}

/* "/weft-<job>-<host>-<random>": the job id lets an operator (and the tests)
 * recognize a leak, the random suffix makes O_EXCL collisions impossible. */
static void seg_name(const char *job_id, char *name, size_t cap) {
  char job[48], host[48], hn[256] = "";
  gethostname(hn, sizeof hn - 1);
  sanitize(job, sizeof job, job_id && *job_id ? job_id : "nojob");
  sanitize(host, sizeof host, hn[0] ? hn : "host");
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
    r = (uint64_t)wf_now_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
  snprintf(name, cap, "/weft-%s-%s-%016llx", job, host, (unsigned long long)r);
}

static weft_status msg_put(int fd, uint32_t kind, weft_status st, uint64_t size, const char *text, int64_t deadline,
                           char *err, size_t errlen) {
  setup_msg m = {.magic = MSG_MAGIC, .kind = kind, .status = st, .size = size};
  if (text) snprintf(m.text, sizeof m.text, "%s", text);
  return wf_sock_write_all(fd, &m, sizeof m, deadline, NULL, err, errlen);
}

static weft_status msg_get(int fd, uint32_t kind, setup_msg *m, int64_t deadline, char *err, size_t errlen) {
  weft_status st = wf_sock_read_all(fd, m, sizeof *m, deadline, NULL, err, errlen);
  if (st != WEFT_OK) return st;
  if (m->magic != MSG_MAGIC || m->kind != kind) {
    snprintf(err, errlen, "unexpected setup message (kind %u, expected %u)", m->kind, kind);
    return WEFT_ERR_PROTOCOL;
  }
  m->text[sizeof m->text - 1] = '\0';
  return WEFT_OK;
}

/* Creator: makes the file, reserves its pages and initializes the header. */
static weft_status seg_make(const char *name, const wf_shm_cfg *cfg, const layout *l, uint8_t **map, int *created,
                            char *err, size_t errlen) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open(/dev/shm%s): %s", name, strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  *created = 1;
  weft_status st = WEFT_ERR_SYSTEM;
  int rc;
  if (ftruncate(fd, (off_t)l->size)) {
    snprintf(err, errlen, "ftruncate(/dev/shm%s, %zu): %s", name, l->size, strerror(errno));
    goto out;
  }
  /* Reserve every page now: a full /dev/shm must fail here, not SIGBUS a
   * rank later when it first touches a slot. */
  while ((rc = posix_fallocate(fd, 0, (off_t)l->size)) == EINTR) {
  }
  if (rc) {
    snprintf(err, errlen, "cannot reserve %zu MiB in /dev/shm (posix_fallocate: %s)", l->size >> 20, strerror(rc));
    goto out;
  }
  void *m = mmap(NULL, l->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap of %zu bytes: %s", l->size, strerror(errno));
    goto out;
  }
  seg_hdr *h = m; /* the pages are zero: rings empty, doorbells idle */
  h->version = SEG_VERSION;
  h->nlocal = (uint32_t)cfg->nlocal;
  h->slot_bytes = l->slot_bytes;
  h->nslots = l->nslots;
  h->ring_bytes = l->ring_bytes;
  h->size = l->size;
  for (int i = 0; i < cfg->nlocal; i++) h->ranks[i] = cfg->local_ranks[i];
  h->magic = SEG_MAGIC; /* peers map only after READY, sent after this */
  *map = m;
  st = WEFT_OK;
out:
  close(fd);
  return st;
}

/* Peer: maps the creator's segment and checks it is the one we expect. */
static weft_status seg_attach(const char *name, size_t size, const wf_shm_cfg *cfg, layout *l, uint8_t **map,
                              char *err, size_t errlen) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open(/dev/shm%s): %s", name, strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  struct stat sb;
  weft_status st = WEFT_ERR_SYSTEM;
  if (fstat(fd, &sb) || (size_t)sb.st_size != size || size < PAGE) {
    snprintf(err, errlen, "/dev/shm%.160s has the wrong size", name);
    goto out;
  }
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap of %zu bytes: %s", size, strerror(errno));
    goto out;
  }
  const seg_hdr *h = m;
  int ok = h->magic == SEG_MAGIC && h->version == SEG_VERSION && h->nlocal == (uint32_t)cfg->nlocal &&
           h->size == size && h->nslots >= 2 && h->slot_bytes >= 64 && h->slot_bytes <= UINT32_MAX &&
           make_layout(cfg->nlocal, h->slot_bytes, h->nslots, l) && l->size == size;
  for (int i = 0; ok && i < cfg->nlocal; i++) ok = h->ranks[i] == cfg->local_ranks[i];
  if (!ok) {
    munmap(m, size);
    snprintf(err, errlen, "the segment's header does not match this rank's view of the host's ranks");
    st = WEFT_ERR_PROTOCOL;
    goto out;
  }
  *map = m;
  st = WEFT_OK;
out:
  close(fd);
  return st;
}

/* Creator side of the exchange (see setup_msg). Every live peer gets the
 * records it waits for, also on failure, so none is left hanging. */
static weft_status setup_creator(const wf_shm_cfg *cfg, layout *l, uint8_t **map, int64_t dl, char *err,
                                 size_t errlen) {
  char name[200], e[256] = "";
  seg_name(cfg->job_id, name, sizeof name);
  int created = 0, n = cfg->nlocal;
  weft_status st = WEFT_OK;
  char *state = calloc((size_t)n, 1); /* per peer: 0 dead, 1 has NAME, 2 has READY ok, 3 ACK ok */
  if (!state) {
    snprintf(err, errlen, "out of memory");
    return WEFT_ERR_NO_MEMORY;
  }
  /* The name goes out before the file exists: if we die after creating it,
   * the peers (who see our socket close) unlink it. */
  for (int i = 1; i < n; i++) {
    int fd = cfg->fds[cfg->local_ranks[i]];
    weft_status r = msg_put(fd, MSG_NAME, WEFT_OK, 0, name, dl, e, sizeof e);
    if (r == WEFT_OK) state[i] = 1;
    else if (st == WEFT_OK) st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
  }
  if (st == WEFT_OK && !auto_layout(cfg, l)) {
    st = WEFT_ERR_INVALID_ARGUMENT;
    snprintf(err, errlen, "ring geometry too large");
  }
  if (st == WEFT_OK) st = seg_make(name, cfg, l, map, &created, err, errlen);
  for (int i = 1; i < n; i++) {
    if (!state[i]) continue;
    weft_status r = msg_put(cfg->fds[cfg->local_ranks[i]], MSG_READY, st, l->size, st ? err : NULL, dl, e, sizeof e);
    if (r != WEFT_OK) {
      state[i] = 0;
      if (st == WEFT_OK) st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
    } else if (state[i] == 1 && st == WEFT_OK) {
      state[i] = 2;
    }
  }
  for (int i = 1; i < n; i++) {
    if (state[i] != 2) continue;
    setup_msg m;
    weft_status r = msg_get(cfg->fds[cfg->local_ranks[i]], MSG_ACK, &m, dl, e, sizeof e);
    if (r == WEFT_OK) state[i] = 3;
    if (st != WEFT_OK) continue;
    if (r != WEFT_OK) st = r, snprintf(err, errlen, "waiting for rank %d to map the segment: %s", cfg->local_ranks[i], e);
    else if (m.status != WEFT_OK)
      st = (weft_status)m.status, snprintf(err, errlen, "rank %d could not map the segment: %s", cfg->local_ranks[i],
                                          m.text);
  }
  /* Everyone who will ever map it has: the name can go. */
  if (created && shm_unlink(name) && st == WEFT_OK) {
    st = WEFT_ERR_SYSTEM;
    snprintf(err, errlen, "shm_unlink(/dev/shm%s): %s", name, strerror(errno));
  }
  for (int i = 1; i < n; i++)
    if (state[i] == 3) {
      weft_status r = msg_put(cfg->fds[cfg->local_ranks[i]], MSG_VERDICT, st, 0, st ? err : NULL, dl, e, sizeof e);
      if (r != WEFT_OK && st == WEFT_OK)
        st = r, snprintf(err, errlen, "sending to rank %d: %s", cfg->local_ranks[i], e);
    }
  free(state);
  if (st != WEFT_OK && *map) {
    munmap(*map, l->size);
    *map = NULL;
  }
  return st;
}

/* Peer side: NAME, READY, map, ACK, VERDICT. */
static weft_status setup_peer(const wf_shm_cfg *cfg, layout *l, uint8_t **map, int64_t dl, char *err, size_t errlen) {
  int creator = cfg->local_ranks[0], fd = cfg->fds[creator];
  char name[sizeof ((setup_msg *)0)->text], e[256] = "";
  setup_msg m;
  weft_status st = msg_get(fd, MSG_NAME, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    snprintf(err, errlen, "waiting for rank %d to name the segment: %s", creator, e);
    return st;
  }
  snprintf(name, sizeof name, "%s", m.text);
  st = msg_get(fd, MSG_READY, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    shm_unlink(name); /* the creator may have died holding it */
    snprintf(err, errlen, "waiting for rank %d to create the segment: %s", creator, e);
    return st;
  }
  if (m.status != WEFT_OK) {
    snprintf(err, errlen, "rank %d could not create the segment: %s", creator, m.text);
    return (weft_status)m.status;
  }
  weft_status mine = seg_attach(name, m.size, cfg, l, map, e, sizeof e);
  st = msg_put(fd, MSG_ACK, mine, 0, mine ? e : NULL, dl, e, sizeof e);
  if (st == WEFT_OK) st = msg_get(fd, MSG_VERDICT, &m, dl, e, sizeof e);
  if (st != WEFT_OK) {
    shm_unlink(name); /* the creator may have died before unlinking */
    snprintf(err, errlen, "setting up the segment with rank %d: %s", creator, e);
  } else if (mine != WEFT_OK) {
    st = mine;
    snprintf(err, errlen, "%s", e);
  } else if (m.status != WEFT_OK) {
    st = (weft_status)m.status;
    snprintf(err, errlen, "%s", m.text);
  }
  if (st != WEFT_OK && *map) {
    munmap(*map, l->size);
    *map = NULL;
  }
  return st;
}

static weft_status check_cfg(const wf_shm_cfg *c) {
  if (!c || c->size < 1 || c->rank < 0 || c->rank >= c->size || !c->local_ranks || c->nlocal < 1 ||
      c->nlocal > c->size || !c->fds)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: bad configuration");
  int found = 0;
  for (int i = 0; i < c->nlocal; i++) {
    int r = c->local_ranks[i];
    if (r < 0 || r >= c->size || (i > 0 && r <= c->local_ranks[i - 1]))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: local ranks must be ascending world ranks");
    if (r == c->rank) found = 1;
    else if (c->fds[r] < 0 && (i == 0 || c->rank == c->local_ranks[0]))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: no connection to local rank %d", r);
  }
  if (!found) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "shared memory: rank %d is not among the local ranks", c->rank);
  return WEFT_OK;
}

weft_status wf_shm_create(const wf_shm_cfg *cfg, wf_shm **out) {
  *out = NULL;
  WF_CHECK(check_cfg(cfg));
  weft_status st = WEFT_ERR_NO_MEMORY;
  char err[512] = "out of memory";
  layout l = {0};
  uint8_t *map = NULL;
  wf_shm *s = calloc(1, sizeof *s);
  if (!s || !(s->lidx = malloc(sizeof(int) * (size_t)cfg->size)) ||
      !(s->peers = calloc((size_t)cfg->nlocal, sizeof *s->peers)))
    goto fail;
  s->base.ops = &shm_ops;
  s->rank = cfg->rank;
  s->size = cfg->size;
  s->nlocal = cfg->nlocal;
  s->cb_ctx = cfg->cb_ctx;
  s->on_error = cfg->on_error;
  for (int r = 0; r < cfg->size; r++) s->lidx[r] = -1;
  for (int i = 0; i < cfg->nlocal; i++) {
    s->lidx[cfg->local_ranks[i]] = i;
    s->peers[i].world = cfg->local_ranks[i];
    if (cfg->local_ranks[i] == cfg->rank) s->me = i;
  }
  if (cfg->nlocal == 1) {
    *out = s;
    return WEFT_OK;
  }
  if (!g_nt_copy) g_nt_copy = nt_copy();
  s->nt = cfg->copy_mode == WF_SHM_COPY_NT; /* AUTO: plain copies measured as fast here (see the report) */
  int64_t dl = wf_deadline_after(cfg->timeout_seconds);
  st = s->me == 0 ? setup_creator(cfg, &l, &map, dl, err, sizeof err) : setup_peer(cfg, &l, &map, dl, err, sizeof err);
  if (st != WEFT_OK) goto fail;
  s->map = map;
  s->map_size = l.size;
  s->slot_bytes = l.slot_bytes;
  s->nslots = l.nslots;
  s->stride = l.stride;
  s->bell = (bell *)(map + l.bells_off) + s->me;
  int n = cfg->nlocal;
  for (int i = 0; i < n; i++) {
    if (i == s->me) continue;
    peer *p = &s->peers[i];
    uint8_t *out_ring = map + l.rings_off + l.ring_bytes * (size_t)(s->me * (n - 1) + (i < s->me ? i : i - 1));
    uint8_t *in_ring = map + l.rings_off + l.ring_bytes * (size_t)(i * (n - 1) + (s->me < i ? s->me : s->me - 1));
    p->out = (ring_ctl *)out_ring;
    p->in = (ring_ctl *)in_ring;
    p->out_slots = out_ring + sizeof(ring_ctl);
    p->in_slots = in_ring + sizeof(ring_ctl);
    p->bell = (bell *)(map + l.bells_off) + i;
  }
  WF_INFO(WF_SUB_SHM, "shared memory with %d local ranks: %zu slots of %zu bytes per pair, %zu MiB, %s copies", n,
          s->nslots, s->slot_bytes, s->map_size >> 20, s->nt ? "non-temporal" : "plain");
  *out = s;
  return WEFT_OK;
fail:
  if (s) {
    free(s->lidx);
    free(s->peers);
    free(s);
  }
  return wf_err(st, "shared-memory transport setup failed on rank %d: %s (set WEFT_TRANSPORT=tcp to run without it)",
                cfg->rank, err);
}

void wf_shm_destroy(wf_shm *s) {
  if (!s) return;
  if (s->map) munmap(s->map, s->map_size);
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
