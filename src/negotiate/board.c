/* board.c - the one-host negotiation board in shared memory (see board.h):
 * its layout, its locks, and the round state machine. Any thread of any
 * local rank; every wait is bounded.
 *
 * Locks: each record has its own, on a line of its own; each round has
 * two lines, one that arrivals and claims write and one that waiters poll
 * (the key, read by every lookup, is on read-mostly lines), so an arrival
 * writes the lock's line, its round's bookkeeping and its own input, and
 * reads the polled line (written once more if it completes the round);
 * waiters read (with a pause)
 * instead of retrying exchanges, which would take the line from the holder;
 * the board's lock only serialises inserting a record and the data-slot
 * pool, always taken inside a record's lock, never around one. Records are
 * never removed, so lookups need no lock: a record is published (used = 1,
 * release) after its key is written. Each rank keeps its own submission
 * counts per record in private memory: nobody else reads them. */
#include "negotiate/board.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/copy.h"
#include "util/err.h"
#include "util/strmap.h"
#include "util/time.h"

#define NREC 1024u       /* records (names) per board */
#define NDATA 256u       /* pooled data slots, for inputs over INLINE bytes (a multiple of 64) */
#define NBIG 4u          /* large slots, for inputs over the pooled slots' size; index NDATA + k */
#define LARGE_BUDGET ((size_t)32 << 20) /* the large slots' bytes at most, all members together */
#define PROBES 64u       /* linear probing limit: a longer chain counts as full */
#define INLINE 64u       /* inputs up to this size live in the record itself */
#define D_NONE (-1)      /* round data: none */
#define D_INLINE (-2)    /* round data: the record's inline area */
#define D_REMOTE (-3)    /* round data: in the members' own memory; the inline area says where */
#define SPIN_NS 50000    /* wf_board_wait spins (yielding) this long before sleeping */
#define LOCK_SLICE_NS 10000000 /* a sleeping lock waiter rechecks its deadline this often */
#define SLEEP_NS 20000000 /* wf_board_wait sleeps at most this long at a time */

enum { R_FREE = 0, R_OPEN = 1, R_DIVERTED = 2, R_DONE = 3 };

/* ThreadSanitizer sees the atomics and locks of this process only. A data
 * slot's reuse is ordered by a chain that may pass through another local
 * rank (its claim, or its free of the slot, then this process's board lock),
 * so its accesses are told to TSan as what they are: released by every
 * thread of this process done with a slot (after writing its input, before
 * its claim), acquired before every access (wf_board_part: the round's
 * opener may be another process, and the reader another thread). */
#if defined(__SANITIZE_THREAD__)
#define WF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WF_TSAN 1
#endif
#endif
#ifdef WF_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SLOT_ACQUIRE(b, d) __tsan_acquire((void *)slot_base(b, d))
#define SLOT_RELEASE(b, d) __tsan_release((void *)slot_base(b, d))
#else
#define SLOT_ACQUIRE(b, d) ((void)(b), (void)(d))
#define SLOT_RELEASE(b, d) ((void)(b), (void)(d))
#endif

typedef struct round {
  /* the line waiters poll, written when the round opens, completes,
   * diverts or is freed (arrivals and claims write the next one, so a
   * waiter's reads do not take the line from an arrival in progress) */
  alignas(64) _Atomic uint32_t state; /* R_* */
  _Atomic uint32_t gen;
  int32_t data;              /* data slot, D_NONE, D_INLINE or D_REMOTE */
  _Atomic uint32_t word;     /* futex: bumped on a state change when someone sleeps */
  _Atomic uint32_t sleepers; /* waiters asleep on word */
  uint32_t claims;           /* members claim the round (all but named inline rounds: wf_board_claim) */
  alignas(64) uint64_t arrived; /* group-rank bits (under the record's lock) */
  _Atomic uint64_t claimed;  /* group-rank bits of members done reading a DONE round */
  uint32_t writers;          /* large slot: members copying their input in, outside the lock */
  uint32_t release_late;     /* large slot: freed or diverted while writers > 0; the last writer releases it */
  _Atomic uint32_t gone;     /* remote round: a member stopped waiting for the claims */
} round;

typedef struct record {
  /* what every arrival writes: the lock on its own line, then each round
   * on two (above) */
  alignas(128) _Atomic uint32_t lock; /* 0 free, 1 held, 2 held with sleepers */
  round r0, r1;
  /* read-mostly (every lookup reads the key; not on the lock's line, which
   * moves between ranks at every arrival): written when made, and when a
   * round opens only if its description changed */
  alignas(128) _Atomic uint32_t used;
  uint32_t group;
  uint64_t hash;
  wf_board_desc desc[2];
  char name[WF_NAME_MAX + 1];
  /* then 2 x nlocal x INLINE bytes: each round's inline inputs */
} record;

typedef struct hdr {
  alignas(128) _Atomic uint32_t lock; /* inserts and the data pool */
  alignas(128) _Atomic uint32_t off;  /* read on every submission: alone on its lines */
  alignas(128) uint64_t data_used[NDATA / 64 + 1]; /* bit per data slot, then per large slot; under lock */
} hdr;

struct wf_board {
  hdr *h;
  uint8_t *recs;
  size_t rec_stride;
  uint8_t *data, *big;
  size_t part_bytes, slot_bytes; /* per member; per data slot (nlocal parts) */
  size_t big_part, big_slot;     /* the same for the large slots (0: none) */
  int nlocal;
  int yield_after; /* spins before each yield: 0 when the host's ranks outnumber its cores */
  uint32_t *count; /* this process's submissions per record (private) */
};

static size_t rup(size_t x, size_t a) { return (x + a - 1) / a * a; }
static size_t recs_off(void) { return rup(sizeof(hdr), 4096); }
static size_t rec_head(void) { return rup(sizeof(record), 128); }
static size_t rec_stride(int nlocal) { return rec_head() + 2 * (size_t)nlocal * INLINE; }
static size_t data_off(int nlocal) { return rup(recs_off() + rec_stride(nlocal) * NREC, 4096); }

/* The large slots' bytes for nlocal members of large bytes each (0: none). */
static size_t big_bytes(int nlocal, size_t large) { return rup(large, 4096) * (size_t)nlocal * NBIG; }

size_t wf_board_large_for(int nlocal, size_t part_bytes, size_t large_bytes) {
  if (nlocal < 2 || nlocal > WF_BOARD_MAX_MEMBERS || large_bytes > WF_BOARD_MAX_LARGE) return 0;
  size_t cap = LARGE_BUDGET / NBIG / (size_t)nlocal / 4096 * 4096;
  if (large_bytes > cap) large_bytes = cap;
  return large_bytes > rup(part_bytes < INLINE ? INLINE : part_bytes, 64) ? rup(large_bytes, 4096) : 0;
}

size_t wf_board_bytes(int nlocal, size_t part_bytes, size_t large_bytes) {
  if (nlocal < 2 || nlocal > WF_BOARD_MAX_MEMBERS || part_bytes > (1u << 20) || large_bytes > WF_BOARD_MAX_LARGE)
    return 0;
  large_bytes = wf_board_large_for(nlocal, part_bytes, large_bytes);
  if (part_bytes < INLINE) part_bytes = INLINE;
  return rup(data_off(nlocal) + rup(part_bytes, 64) * (size_t)nlocal * NDATA, 4096) + big_bytes(nlocal, large_bytes);
}

wf_board *wf_board_open(void *mem, size_t bytes, int nlocal, size_t large_bytes) {
  if (!mem || nlocal < 2 || nlocal > WF_BOARD_MAX_MEMBERS || large_bytes > WF_BOARD_MAX_LARGE) return NULL;
  size_t big = big_bytes(nlocal, large_bytes);
  if (bytes <= data_off(nlocal) + big) return NULL;
  size_t part = (bytes - big - data_off(nlocal)) / NDATA / (size_t)nlocal / 64 * 64;
  if (part < INLINE || (large_bytes && large_bytes <= part)) return NULL;
  wf_board *b = calloc(1, sizeof *b);
  if (!b || !(b->count = calloc(NREC, sizeof *b->count))) {
    free(b);
    return NULL;
  }
  b->h = mem;
  b->recs = (uint8_t *)mem + recs_off();
  b->rec_stride = rec_stride(nlocal);
  b->data = (uint8_t *)mem + data_off(nlocal);
  b->part_bytes = part;
  b->slot_bytes = part * (size_t)nlocal;
  if (large_bytes) {
    b->big_part = rup(large_bytes, 4096);
    b->big_slot = b->big_part * (size_t)nlocal;
    b->big = (uint8_t *)mem + bytes - big;
  }
  b->nlocal = nlocal;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  /* oversubscribed: hand the core over at once; else after a short spin */
  b->yield_after = cpus > 0 && nlocal > cpus ? 0 : 1024;
  return b;
}

void wf_board_close(wf_board *b) {
  if (!b) return;
  free(b->count);
  free(b);
}

size_t wf_board_part_bytes(const wf_board *b) { return b->part_bytes; }
size_t wf_board_large_bytes(const wf_board *b) { return b->big_part > b->part_bytes ? b->big_part : b->part_bytes; }
int wf_board_oversubscribed(const wf_board *b) { return b->yield_after == 0; }
int wf_board_is_off(const wf_board *b) { return atomic_load_explicit(&b->h->off, memory_order_acquire) != 0; }

/* ------------------------------------------------------------------ futex locks */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  /* shared (not FUTEX_PRIVATE): the word is in memory other processes map */
  return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* A spinning thread's pause (x86 pause, Arm yield): lets the core's other
 * thread and the line's holder get on. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A hint to fetch p's line for writing (x86 prefetchw: a no-op on CPUs
 * without it). */
static inline void prefetch_w(const void *p) {
#if defined(__x86_64__)
  __asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/* An absolute deadline (wf_now_ns) from an absolute or a relative one
 * (WF_BOARD_WITHIN: from now). */
static int64_t absolute(int64_t deadline) { return deadline > 0 ? deadline : wf_now_ns() - deadline; }

/* Drepper's mutex (futexes are tricky, #3), with a bounded spin first and
 * a deadline (absolute, or relative from here: WF_BOARD_WITHIN). */
static weft_status lock(const wf_board *b, _Atomic uint32_t *l, int64_t deadline) {
  for (int i = 0; i < 100; i++) {
    uint32_t z = 0;
    if (atomic_compare_exchange_weak_explicit(l, &z, 1, memory_order_acquire, memory_order_relaxed)) return WEFT_OK;
    if (i >= 20 || !b->yield_after) { /* oversubscribed: the holder may need this core */
      sched_yield();
      continue;
    }
    /* wait for it to look free without writing: a failed exchange takes
     * the line from the holder, who is about to write it */
    for (int k = 0; k < 64 && atomic_load_explicit(l, memory_order_relaxed); k++) cpu_relax();
  }
  uint32_t c = atomic_exchange_explicit(l, 2, memory_order_acquire);
  if (c != 0) deadline = absolute(deadline); /* WF_BOARD_WITHIN: from now, when it turns out to be held */
  while (c != 0) {
    int64_t left = deadline - wf_now_ns();
    if (left <= 0) return wf_err(WEFT_ERR_TIMEOUT, "the one-host negotiation board stayed locked (a local rank died?)");
    struct timespec ts = {0, left < LOCK_SLICE_NS ? left : LOCK_SLICE_NS};
    futex(l, FUTEX_WAIT, 2, &ts);
    c = atomic_exchange_explicit(l, 2, memory_order_acquire);
  }
  return WEFT_OK;
}

static void unlock(_Atomic uint32_t *l) {
  if (atomic_exchange_explicit(l, 0, memory_order_release) == 2) futex(l, FUTEX_WAKE, 1, NULL);
}

/* ------------------------------------------------------------------ records */


uint64_t wf_board_hash(uint32_t group, const char *name) {
  char key[WF_NAME_MAX + 16];
  int n = snprintf(key, sizeof key, "%u/%s", (unsigned)group, name);
  return wf_str_hash_n(key, n < 0 ? 0 : (size_t)n < sizeof key ? (size_t)n : sizeof key - 1);
}

static record *rec_at(const wf_board *b, uint32_t i) { return (record *)(b->recs + b->rec_stride * i); }
static round *rnd(record *r, uint32_t k) { return k & 1 ? &r->r1 : &r->r0; }

/* Probes for (group, name): the record, or NULL with *idx at the first
 * unused slot of its chain (*idx = NREC: the chain is full). */
static record *probe(wf_board *b, uint32_t group, const char *name, uint64_t h, uint32_t *idx) {
  for (uint32_t i = 0; i < PROBES; i++) {
    *idx = (uint32_t)((h + i) % NREC);
    record *r = rec_at(b, *idx);
    if (!atomic_load_explicit(&r->used, memory_order_acquire)) return NULL;
    if (r->hash == h && r->group == group && !strcmp(r->name, name)) return r;
  }
  *idx = NREC;
  return NULL;
}

/* The record of (group, name), made if absent; NULL when its chain is full:
 * permanent for that name, on every rank alike. */
static record *find(wf_board *b, uint32_t group, const char *name, uint64_t h, int64_t deadline, uint32_t *idx) {
  record *r = probe(b, group, name, h, idx);
  if (r || *idx == NREC) return r;
  if (lock(b, &b->h->lock, deadline) != WEFT_OK) return NULL;
  r = probe(b, group, name, h, idx); /* again: another rank may have made it meanwhile */
  if (!r && *idx < NREC) {
    r = rec_at(b, *idx);
    r->group = group;
    r->hash = h;
    snprintf(r->name, sizeof r->name, "%s", name);
    for (uint32_t k = 0; k < 2; k++) rnd(r, k)->data = D_NONE;
    atomic_store_explicit(&r->used, 1, memory_order_release);
  }
  unlock(&b->h->lock);
  return r;
}

/* ------------------------------------------------------------------ rounds */

/* Publishes a state change and wakes sleepers. seq_cst on state/sleepers
 * here and in wf_board_wait: a waiter either sees the change before it
 * sleeps or is counted before the waker looks. */
static void wake(round *o) {
  if (atomic_load(&o->sleepers)) {
    atomic_fetch_add(&o->word, 1);
    futex(&o->word, FUTEX_WAKE, INT_MAX, NULL);
  }
}

static void set_state(round *o, uint32_t st) {
  atomic_store(&o->state, st);
  wake(o);
}

/* set_state for an arrival, which holds its record's lock: a release store
 * only; the caller calls wake(o) after it unlocks. The unlock's exchange
 * orders the store before wake's look at the sleepers on x86 (a locked
 * instruction) and AArch64 (a release store before a seq_cst load), not by
 * the letter of C11: a wake-up lost there would cost a waiter one bounded
 * sleep (SLEEP_NS), never a hang. One full barrier per arrival instead of
 * two: the exchanges were a large part of an arrival's cost
 * (bench/NOTES.md, "Barriers of an arrival"). */
static void set_state_quiet(round *o, uint32_t st) { atomic_store_explicit(&o->state, st, memory_order_release); }

#ifdef WF_TSAN
/* The first byte of data slot d (pooled or large): the slot's name for TSan. */
static const uint8_t *slot_base(const wf_board *b, int32_t d) {
  return d >= (int32_t)NDATA ? b->big + (size_t)(d - (int32_t)NDATA) * b->big_slot : b->data + (size_t)d * b->slot_bytes;
}
#endif

/* Data pool (a record's lock held; takes the board's lock inside it): a
 * pooled slot for inputs of need bytes, or a large one, the lowest free
 * (the most recently used stay in cache); D_NONE if none is free. */
static int32_t alloc_data(wf_board *b, size_t need, int64_t deadline) {
  int big = need > b->part_bytes;
  if ((big && need > b->big_part) || lock(b, &b->h->lock, deadline) != WEFT_OK) return D_NONE;
  int32_t k = D_NONE;
  for (uint32_t w = big ? NDATA / 64 : 0; k == D_NONE && w < (big ? NDATA / 64 + 1 : NDATA / 64); w++) {
    uint64_t u = b->h->data_used[w] | (big ? ~0ull << NBIG : 0);
    if (u == ~0ull) continue;
    int bit = __builtin_ctzll(~u);
    b->h->data_used[w] |= 1ull << bit;
    k = (int32_t)(w * 64 + (uint32_t)bit);
  }
  unlock(&b->h->lock);
  return k;
}

static int is_big(const round *o) { return o->data >= (int32_t)NDATA; }

/* Gives a round's pooled slot back (record locked); a large slot that a
 * member is still copying into goes back when that copy ends. */
static void release_data(wf_board *b, round *o) {
  if (o->data < 0) return;
  if (is_big(o) && o->writers) {
    o->release_late = 1;
    return;
  }
  if (lock(b, &b->h->lock, wf_deadline_after(10.0)) == WEFT_OK) {
    b->h->data_used[o->data / 64] &= ~(1ull << (o->data % 64));
    unlock(&b->h->lock);
    o->data = D_NONE;
    o->release_late = 0;
  }
}

static void free_round(wf_board *b, round *o) {
  release_data(b, o);
  o->arrived = 0;
  atomic_store_explicit(&o->claimed, 0, memory_order_relaxed);
  set_state(o, R_FREE);
}

/* Diverts an open round (record locked): nobody reads its inputs any more,
 * so a pooled slot goes back at once (a generation some rank never submits
 * must not hold it for the rest of the job). */
static void divert(wf_board *b, round *o) {
  release_data(b, o);
  set_state(o, R_DIVERTED);
}

static int same_desc(const wf_board_desc *a, const wf_board_desc *b) {
  if (a->coll != b->coll || a->dtype != b->dtype || a->ndim != b->ndim || a->op != b->op || a->root != b->root ||
      a->remote != b->remote || a->split != b->split || a->ordered != b->ordered ||
      a->prescale != b->prescale || a->postscale != b->postscale)
    return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static round *round_of(const wf_board *b, wf_board_ticket t) { return rnd(rec_at(b, t.rec), t.gen); }

/* Member k's inline cell of t's round: its input (inline rounds) or where
 * its input is (remote rounds). */
static uint8_t *cell_of(const wf_board *b, record *r, uint32_t gen, int k) {
  return (uint8_t *)r + rec_head() + ((size_t)(gen & 1) * (size_t)b->nlocal + (size_t)k) * INLINE;
}

static uint8_t *cell(const wf_board *b, wf_board_ticket t, int k) { return cell_of(b, rec_at(b, t.rec), t.gen, k); }

typedef struct remote_cell {
  uint64_t pid, addr, len;
} remote_cell;
_Static_assert(sizeof(remote_cell) <= INLINE, "a remote cell fits a member's inline cell");

/* A split round's slice s: 0 free, else taken ((taker + 1) << 2 | 1) or
 * folded (2), at the start of member s's inline cell. */
static _Atomic uint64_t *slice_word_of(const wf_board *b, record *r, uint32_t gen, int s) {
  return (_Atomic uint64_t *)(void *)cell_of(b, r, gen, s);
}
static _Atomic uint64_t *slice_word(const wf_board *b, wf_board_ticket t, int s) {
  return slice_word_of(b, rec_at(b, t.rec), t.gen, s);
}
_Static_assert(INLINE % sizeof(uint64_t) == 0, "a slice word is aligned in its cell");

const void *wf_board_part(const wf_board *b, wf_board_ticket t, int k) {
  int32_t d = round_of(b, t)->data;
  if (d == D_INLINE) return cell(b, t, k);
  if (d == D_REMOTE) return NULL; /* the inputs are the members' own: wf_board_remote */
  if (d >= 0) SLOT_ACQUIRE(b, d); /* every access to a slot's data goes through here */
  if (d >= (int32_t)NDATA) return b->big + (size_t)(d - (int32_t)NDATA) * b->big_slot + (size_t)k * b->big_part;
  return b->data + (size_t)d * b->slot_bytes + (size_t)k * b->part_bytes;
}

/* Opens round o of record r for generation gen (record locked). */
static void open_round(wf_board *b, record *r, round *o, uint32_t gen, const wf_board_desc *desc, int64_t deadline) {
  atomic_store_explicit(&o->gen, gen, memory_order_relaxed);
  o->arrived = 0;
  atomic_store_explicit(&o->claimed, 0, memory_order_relaxed);
  /* sized by the description, not by this arrival's part: a broadcast's
   * non-roots bring none, and one of them may open the round */
  size_t need = desc ? weft_dtype_size((weft_dtype)desc->dtype) : 0;
  for (int i = 0; desc && i < desc->ndim; i++) need *= (size_t)desc->shape[i];
  /* a split round's slice words live in the inline cells: its data never does */
  o->data = !desc                          ? D_NONE
            : desc->remote                 ? D_REMOTE
            : need <= INLINE && !desc->split ? D_INLINE
                                           : alloc_data(b, need, deadline);
  o->claims = o->data != D_INLINE || desc->ordered; /* desc: D_INLINE needs one */
  o->writers = 0;
  o->release_late = 0;
  atomic_store_explicit(&o->gone, 0, memory_order_relaxed);
  if (desc && desc->split && o->data >= 0) /* its slices' words: nobody reads this round's cells before it opens */
    for (int k = 0; k < b->nlocal; k++)
      atomic_store_explicit(slice_word_of(b, r, gen, k), 0, memory_order_relaxed);
  wf_board_desc *d = &r->desc[gen & 1];
  if (desc && !same_desc(desc, d)) *d = *desc; /* unchanged: the line stays shared in every cache */
  set_state_quiet(o, o->data != D_NONE ? R_OPEN : R_DIVERTED); /* the caller wakes: an arrival */
}

/* Every member arrived at generation gen - 1 (record locked): its round is
 * DONE, or FREE (diverted after every member arrived). Then every member
 * has read generation gen - 2, an unclaimed inline round (wf_board_claim):
 * each arrived at gen - 1 after its gen - 2 completed. Not so when gen - 1
 * ended in an error on some rank without every member (a coordinator
 * timeout or stall shutdown): a member may still read gen - 2. */
static int all_came_next(record *r, uint32_t gen) {
  round *p = rnd(r, gen - 1);
  uint32_t st = atomic_load_explicit(&p->state, memory_order_relaxed);
  return atomic_load_explicit(&p->gen, memory_order_relaxed) == gen - 1 && (st == R_DONE || st == R_FREE);
}

/* Bytes one member's input may have in round o. */
static size_t capacity(const wf_board *b, const round *o) {
  return o->data == D_REMOTE ? SIZE_MAX
         : o->data == D_INLINE ? INLINE
         : is_big(o)           ? b->big_part
         : o->data >= 0        ? b->part_bytes
                               : 0;
}

/* A member finished copying its input into o's large slot: the round is
 * DONE if it is still open and every member arrived and copied; a slot
 * released meanwhile goes back now that nobody writes it. The round cannot
 * have moved on to another generation: that needs this member's arrival. */
static weft_status copied(wf_board *b, record *r, round *o, int gsize, int64_t deadline, int *how) {
  /* without the lock by the deadline (a local rank died holding it) the
   * slot stays taken and the round open until waiters give up on it */
  weft_status st = lock(b, &r->lock, deadline);
  if (st != WEFT_OK) { /* the round can never complete nor give its slot back */
    wf_board_off(b, wf_now_ns() + 1000000000);
    return st;
  }
  o->writers--;
  uint32_t state = atomic_load_explicit(&o->state, memory_order_relaxed);
  if (state == R_OPEN && !o->writers && o->arrived == wf_board_all(gsize)) {
    set_state(o, R_DONE);
    *how = WF_BOARD_DONE;
  } else if (state != R_OPEN && o->release_late && !o->writers) {
    release_data(b, o);
    /* diverted after every member arrived (a waiter gave up while copies
     * ran): no later arrival frees it, so free it now (the members'
     * tickets read it as diverted: same generation, not open) */
    if (o->arrived == wf_board_all(gsize)) free_round(b, o);
  }
  unlock(&r->lock);
  return WEFT_OK;
}

/* Copies member grank's input into its part of t's slot, around bytes
 * [skip.off, skip.off + skip.len), which no other member reads. */
static void put(const wf_board *b, wf_board_ticket t, int grank, const void *part, size_t len, wf_board_span skip) {
  uint8_t *dst = (uint8_t *)wf_board_part(b, t, grank);
  size_t lo = skip.off, hi = skip.off + skip.len;
  if (!skip.len || hi > len) {
    wf_copy(dst, part, len);
    return;
  }
  if (lo) wf_copy(dst, part, lo);
  if (hi < len) wf_copy(dst + hi, (const uint8_t *)part + hi, len - hi);
}

weft_status wf_board_arrive(wf_board *b, uint32_t group, const char *name, int grank, int gsize,
                            const wf_board_desc *desc, const void *part, size_t part_len, wf_board_span skip,
                            int64_t deadline, int *how, wf_board_ticket *t) {
  return wf_board_arrive_h(b, group, name, wf_board_hash(group, name), grank, gsize, desc, part, part_len, skip,
                           deadline, how, t);
}

weft_status wf_board_arrive_h(wf_board *b, uint32_t group, const char *name, uint64_t hash, int grank, int gsize,
                              const wf_board_desc *desc, const void *part, size_t part_len, wf_board_span skip,
                              int64_t deadline, int *how, wf_board_ticket *t) {
  *how = WF_BOARD_SLOW;
  if (gsize < 1 || gsize > WF_BOARD_MAX_MEMBERS || gsize > b->nlocal || grank < 0 || grank >= gsize) return WEFT_OK;
  if (part_len > wf_board_large_bytes(b) && !(desc && desc->remote)) desc = NULL; /* remote: nothing copied in */
  uint32_t idx;
  record *r = wf_board_is_off(b) ? NULL : find(b, group, name, hash, deadline, &idx);
  if (!r) return WEFT_OK;
  /* this rank's cell (its inline input), to be written under the lock:
   * its line comes over (from the members that read it last) while the
   * lock's does */
  if (part_len && part_len <= INLINE) /* the count: another thread may bump it under the lock meanwhile */
    prefetch_w(cell_of(b, r, __atomic_load_n(&b->count[idx], __ATOMIC_RELAXED), grank));
  WF_CHECK(lock(b, &r->lock, deadline));
  if (atomic_load(&b->h->off)) { /* turned off meanwhile: the counts no longer matter */
    unlock(&r->lock);
    return WEFT_OK;
  }
  uint32_t gen = __atomic_fetch_add(&b->count[idx], 1, __ATOMIC_RELAXED); /* under the lock; read above without */
  round *o = rnd(r, gen);
  uint32_t st = atomic_load_explicit(&o->state, memory_order_relaxed);
  uint32_t og = atomic_load_explicit(&o->gen, memory_order_relaxed);
  if (st == R_DONE && og != gen && (o->data == D_INLINE || o->data == D_REMOTE) &&
      (o->claims ? atomic_load_explicit(&o->claimed, memory_order_acquire) == o->arrived : all_came_next(r, gen)))
    st = R_FREE; /* an inline or remote round every member has read: left as it was, reused now */
  if (st == R_FREE) {
    open_round(b, r, o, gen, desc, deadline);
    st = atomic_load_explicit(&o->state, memory_order_relaxed);
  } else if (og != gen || (o->arrived >> grank & 1)) {
    unlock(&r->lock);
    /* generations out of step: a bug or a rank that skipped; never guess */
    wf_board_off(b, deadline);
    return WEFT_OK;
  } else if (st == R_OPEN && (!desc || !same_desc(desc, &r->desc[gen & 1]) || part_len > capacity(b, o))) {
    divert(b, o);
    st = R_DIVERTED;
  }
  o->arrived |= 1ull << grank;
  int all = o->arrived == wf_board_all(gsize);
  if (st == R_OPEN) {
    t->rec = idx;
    t->gen = gen;
    *how = WF_BOARD_WAIT;
    if (is_big(o) && part_len) { /* copied outside the lock: the others arrive meanwhile */
      int32_t d = o->data; /* stays: writers > 0 holds the slot */
      o->writers++;
      unlock(&r->lock);
      wake(o); /* it may have opened the round (set_state_quiet) */
      put(b, *t, grank, part, part_len, skip);
      SLOT_RELEASE(b, d);
      return copied(b, r, o, gsize, deadline, how);
    }
    if (o->data == D_REMOTE) { /* where the others read it: nothing is copied */
      remote_cell c = {(uint64_t)getpid(), (uint64_t)(uintptr_t)part, (uint64_t)part_len};
      memcpy(cell(b, *t, grank), &c, sizeof c);
    } else if (part_len) {
      put(b, *t, grank, part, part_len, skip);
    }
    if (part_len && o->data >= 0) SLOT_RELEASE(b, o->data);
    if (all && !o->writers) {
      set_state_quiet(o, R_DONE);
      *how = WF_BOARD_DONE;
    }
  } else if (all) {
    free_round(b, o); /* diverted and everyone has seen it: the next but one generation may use it */
  }
  unlock(&r->lock);
  wake(o); /* after set_state_quiet: the unlock's exchange ordered the state before this look */
  return WEFT_OK;
}

int wf_board_state(const wf_board *b, wf_board_ticket t) {
  round *o = round_of(b, t);
  uint32_t st = atomic_load(&o->state);
  if (atomic_load_explicit(&o->gen, memory_order_relaxed) != t.gen) return WF_BOARD_SLOW; /* diverted and freed */
  return st == R_OPEN ? WF_BOARD_WAIT : st == R_DONE ? WF_BOARD_DONE : WF_BOARD_SLOW;
}

uint64_t wf_board_arrived(const wf_board *b, wf_board_ticket t) { return round_of(b, t)->arrived; }

weft_status wf_board_claim(wf_board *b, wf_board_ticket t, int grank, int64_t deadline) {
  round *o = round_of(b, t);
  /* a named inline round: every member has read it before g+2 opens (board.h).
   * One atomic on a line every member writes, saved per op (bench/NOTES.md,
   * "Unclaimed inline rounds") */
  if (!o->claims) return WEFT_OK;
  /* no lock but for the last pooled claim: acq_rel orders every member's
   * reads of the inputs before the last claim frees the slot (an inline
   * round is left as it is and reused by its next but one generation) */
  uint64_t all = o->arrived; /* before our claim: the last claim's free_round clears it */
  int32_t data = o->data;
  if (data >= 0) SLOT_RELEASE(b, data); /* this thread's reads of the inputs are done */
  /* seq_cst: against the claim waiters' sleepers count (as in set_state) */
  uint64_t bit = 1ull << grank, prev = atomic_fetch_or(&o->claimed, bit);
  if (data == D_REMOTE && (prev | bit) == all) wake(o); /* members waiting for the claims */
  if ((prev | bit) != all || data == D_INLINE || data == D_REMOTE) return WEFT_OK;
  record *r = rec_at(b, t.rec);
  WF_CHECK(lock(b, &r->lock, deadline));
  free_round(b, o);
  unlock(&r->lock);
  return WEFT_OK;
}

int wf_board_divert(wf_board *b, wf_board_ticket t, int64_t deadline) {
  record *r = rec_at(b, t.rec);
  if (lock(b, &r->lock, deadline) != WEFT_OK) return wf_board_state(b, t);
  round *o = round_of(b, t);
  if (atomic_load_explicit(&o->gen, memory_order_relaxed) == t.gen &&
      atomic_load_explicit(&o->state, memory_order_relaxed) == R_OPEN)
    divert(b, o);
  unlock(&r->lock);
  return wf_board_state(b, t);
}

/* Waits until done(b, t, arg) or until (wf_now_ns) passes: spins (pausing;
 * yielding after a while, at once when the host is oversubscribed), reading
 * the clock now and then; after SPIN_NS sleeps once on t's round's futex
 * word (SLEEP_NS at most: callers notice other events). Returns done's last
 * value. Whoever makes done true bumps the word if anyone sleeps. */
static int wait_for(wf_board *b, wf_board_ticket t, int (*done)(const wf_board *, wf_board_ticket, const void *),
                    const void *arg, int64_t until) {
  round *o = round_of(b, t);
  int64_t t0 = 0, now = 0;
  for (int i = 1;; i++) {
    if (done(b, t, arg)) return 1;
    if (i % 512 == 0) {
      now = wf_now_ns();
      if (!t0) t0 = now;
      if (now >= until) return 0;
      if (now - t0 >= SPIN_NS) break;
    }
    if (i >= b->yield_after) sched_yield();
    else cpu_relax();
  }
  uint32_t w = atomic_load(&o->word);
  atomic_fetch_add(&o->sleepers, 1);
  if (!done(b, t, arg) && until > now) {
    int64_t left = until - now;
    if (left > SLEEP_NS) left = SLEEP_NS;
    struct timespec ts = {left / 1000000000, left % 1000000000};
    futex(&o->word, FUTEX_WAIT, w, &ts); /* EAGAIN: it changed already */
  }
  atomic_fetch_sub(&o->sleepers, 1);
  return done(b, t, arg);
}

static int not_open(const wf_board *b, wf_board_ticket t, const void *unused) {
  (void)unused;
  return wf_board_state(b, t) != WF_BOARD_WAIT;
}

int wf_board_wait(wf_board *b, wf_board_ticket t, int64_t until) {
  return !wait_for(b, t, not_open, NULL, until) && wf_now_ns() >= until;
}

void wf_board_off(wf_board *b, int64_t deadline) {
  if (atomic_exchange(&b->h->off, 1)) return; /* already off (or being turned off) */
  deadline = absolute(deadline); /* one budget for the whole sweep */
  /* every arrival checks off under its record's lock: after this sweep
   * locked a record, none can join one of its rounds */
  for (uint32_t i = 0; i < NREC; i++) {
    record *r = rec_at(b, i);
    if (!atomic_load_explicit(&r->used, memory_order_acquire) || lock(b, &r->lock, deadline) != WEFT_OK) continue;
    for (uint32_t k = 0; k < 2; k++)
      if (atomic_load_explicit(&rnd(r, k)->state, memory_order_relaxed) == R_OPEN) divert(b, rnd(r, k));
    unlock(&r->lock);
  }
}

/* ------------------------------------------------------------------ remote rounds */

int wf_board_is_remote(const wf_board *b, wf_board_ticket t) { return round_of(b, t)->data == D_REMOTE; }

void wf_board_remote(const wf_board *b, wf_board_ticket t, int k, int *pid, uint64_t *addr, uint64_t *len) {
  remote_cell c;
  memcpy(&c, cell(b, t, k), sizeof c);
  *pid = (int)c.pid;
  *addr = c.addr;
  *len = c.len;
}

uint64_t wf_board_claimed(const wf_board *b, wf_board_ticket t) {
  return atomic_load_explicit(&round_of(b, t)->claimed, memory_order_acquire);
}

/* Every member of gsize claimed t's round (it may have moved on since: it
 * is reused only after every claim). */
static int all_claimed(const wf_board *b, wf_board_ticket t, const void *arg) {
  int gsize = *(const int *)arg;
  round *o = round_of(b, t);
  uint64_t c = atomic_load(&o->claimed);
  return c == wf_board_all(gsize) || atomic_load(&o->gen) != t.gen;
}

int wf_board_wait_claims(wf_board *b, wf_board_ticket t, int gsize, int64_t until) {
  if (until <= 0) return all_claimed(b, t, &gsize); /* a look only */
  return wait_for(b, t, all_claimed, &gsize, until);
}

void wf_board_abandon(wf_board *b, wf_board_ticket t) { atomic_store(&round_of(b, t)->gone, 1); }

/* ------------------------------------------------------------------ split rounds */

#define SLICE_DONE 2u

int wf_board_split_kind(const wf_board *b, wf_board_ticket t) { return rec_at(b, t.rec)->desc[t.gen & 1].split; }

int wf_board_slice_take(wf_board *b, wf_board_ticket t, int s, int grank) {
  _Atomic uint64_t *w = slice_word(b, t, s);
  uint64_t free_ = 0;
  if (atomic_load_explicit(w, memory_order_relaxed)) return 0;
  /* acquire: the slice's inputs were written before DONE, which the caller
   * saw; the CAS only decides who folds */
  return atomic_compare_exchange_strong_explicit(w, &free_, (uint64_t)(grank + 1) << 2 | 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

void wf_board_slice_done(wf_board *b, wf_board_ticket t, int s) {
  round *o = round_of(b, t);
  if (o->data >= 0) SLOT_RELEASE(b, o->data); /* the folded slice, for TSan (see SLOT_ACQUIRE) */
  /* seq_cst: publishes the slice (release) and pairs with the sleepers
   * count in wait_for (as set_state does) */
  atomic_store(slice_word(b, t, s), SLICE_DONE);
  wake(o);
}

uint64_t wf_board_slices_done(const wf_board *b, wf_board_ticket t, int gsize, uint64_t *busy, int *taker) {
  uint64_t done = 0, taken = 0;
  if (taker) *taker = -1;
  for (int s = 0; s < gsize; s++) {
    uint64_t v = atomic_load(slice_word(b, t, s)); /* acquire (seq_cst): a folded slice is readable */
    if (v == SLICE_DONE) {
      done |= 1ull << s;
    } else if (v) {
      if (taker && !taken) *taker = (int)(v >> 2) - 1;
      taken |= 1ull << s;
    }
  }
  if (busy) *busy = taken;
  return done;
}

typedef struct slices_arg {
  int gsize;
  uint64_t have, mine; /* mine: the slices the caller may take */
} slices_arg;

/* A slice outside have is folded, or one the caller may take is free. */
static int slices_moved(const wf_board *b, wf_board_ticket t, const void *arg) {
  const slices_arg *a = arg;
  uint64_t busy, done = wf_board_slices_done(b, t, a->gsize, &busy, NULL);
  return (done & ~a->have) != 0 || (~(done | busy) & a->mine) != 0;
}

void wf_board_wait_slices(wf_board *b, wf_board_ticket t, int gsize, int grank, uint64_t have, int64_t until) {
  /* a WF_SPLIT_OWN round's slices are their owners' alone: another's free
   * slice is no reason to stop waiting (it would spin) */
  uint64_t mine = wf_board_split_kind(b, t) == WF_SPLIT_OWN ? 1ull << grank : wf_board_all(gsize);
  slices_arg a = {gsize, have, mine};
  wait_for(b, t, slices_moved, &a, until);
}

void *wf_board_part_mut(const wf_board *b, wf_board_ticket t, int k) { return (void *)(uintptr_t)wf_board_part(b, t, k); }

int wf_board_abandoned(const wf_board *b, wf_board_ticket t) { return atomic_load(&round_of(b, t)->gone) != 0; }
