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
 * pool, always taken inside a record's lock, never around one. The record's
 * lock is taken by a round's opener, by arrivals into large slots or that
 * divert, and by the last claim; other arrivals copy in without it and meet
 * in the arrival tree (below), so n arrivals are not n critical sections in
 * a row. Records are
 * never removed, so lookups need no lock: a record is published (used = 1,
 * release) after its key is written. Each rank keeps its own submission
 * counts per record in private memory: nobody else reads them. */
#include "negotiate/board_impl.h"

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

static size_t recs_off(void) { return rup(sizeof(hdr), 4096); }
static size_t rec_stride(int nlocal) { return rec_head() + 2 * (size_t)nlocal * CELL; }
static size_t data_off(int nlocal) { return rup(recs_off() + rec_stride(nlocal) * NREC, 4096); }

/* The large slots' bytes for nlocal members of large bytes each (0: none). */
static size_t nbig(int nlocal, size_t large) {
  size_t per = rup(large, 4096) * (size_t)nlocal, k = per ? LARGE_BUDGET / per : NBIG;
  return k < 2 ? 2 : k > NBIG ? NBIG : k;
}
static size_t big_bytes(int nlocal, size_t large) { return rup(large, 4096) * (size_t)nlocal * nbig(nlocal, large); }

size_t wf_board_large_for(int nlocal, size_t part_bytes, size_t large_bytes) {
  if (nlocal < 2 || nlocal > WF_BOARD_MAX_MEMBERS || large_bytes > WF_BOARD_MAX_LARGE) return 0;
  size_t cap = LARGE_BUDGET / 2 / (size_t)nlocal / 4096 * 4096;
  if (cap < LARGE_PER_RANK) cap = LARGE_PER_RANK;
  if (large_bytes > cap) large_bytes = cap;
  return large_bytes > rup(part_bytes < INLINE ? INLINE : part_bytes, 64) ? rup(large_bytes, 4096) : 0;
}

void wf_board_formula(char *buf, size_t len) {
  snprintf(buf, len,
           "n x (%u records x %u B + %u pooled slots x WEFT_FAST_BYTES) + 2..%u large slots of n x "
           "min(WEFT_FAST_LARGE_BYTES, max(%zu MiB / n, %zu MiB)), at most max(%zu MiB, n x %zu MiB) together",
           NREC, 2 * CELL, NDATA, NBIG, LARGE_BUDGET / 2 >> 20, LARGE_PER_RANK >> 20, LARGE_BUDGET >> 20,
           2 * LARGE_PER_RANK >> 20);
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
    b->nbig = (uint32_t)nbig(nlocal, large_bytes);
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
void wf_board_wake(round *o) {
  if (atomic_load(&o->sleepers)) {
    atomic_fetch_add(&o->word, 1);
    futex(&o->word, FUTEX_WAKE, INT_MAX, NULL);
  }
}

static void set_state(round *o, uint32_t st) {
  atomic_store(&o->state, st);
  wf_board_wake(o);
}

/* set_state for an arrival, which holds its record's lock: a release store
 * only; the caller calls wf_board_wake(o) after it unlocks. The unlock's exchange
 * orders the store before wake's look at the sleepers on x86 (a locked
 * instruction) and AArch64 (a release store before a seq_cst load), not by
 * the letter of C11: a wake-up lost there would cost a waiter one bounded
 * sleep (SLEEP_NS), never a hang. One full barrier per arrival instead of
 * two: the exchanges were a large part of an arrival's cost
 * (bench/NOTES.md, "Barriers of an arrival"). */
static void set_state_quiet(round *o, uint32_t st) { atomic_store_explicit(&o->state, st, memory_order_release); }


/* Data pool (a record's lock held; takes the board's lock inside it): a
 * pooled slot for inputs of need bytes, or a large one, the lowest free
 * (the most recently used stay in cache); D_NONE if none is free. */
static int32_t alloc_data(wf_board *b, size_t need, int64_t deadline) {
  int big = need > b->part_bytes;
  if ((big && need > b->big_part) || lock(b, &b->h->lock, deadline) != WEFT_OK) return D_NONE;
  int32_t k = D_NONE;
  for (uint32_t w = big ? NDATA / 64 : 0; k == D_NONE && w < (big ? NDATA / 64 + 1 : NDATA / 64); w++) {
    uint64_t u = b->h->data_used[w] | (big ? ~0ull << b->nbig : 0);
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
    __atomic_store_n(&o->data, D_NONE, __ATOMIC_RELAXED); /* open_fast reads it without the lock */
    o->release_late = 0;
  }
}

static void free_round(wf_board *b, round *o) {
  release_data(b, o);
  atomic_store_explicit(&o->claimed, 0, memory_order_relaxed);
  set_state(o, R_FREE);
}

/* Diverts an open round (record locked): nobody reads its inputs any more,
 * so a pooled slot goes back at once (a generation some rank never submits
 * must not hold it for the rest of the job). */
static int writing(const wf_board *b, record *r, const round *o);

static void divert(wf_board *b, record *r, round *o) {
  /* an exchange: the generation's last arrival completes an open round
   * without the lock (arrived), so exactly one of the two wins; seq_cst:
   * the state before the look at the writers, who announce themselves
   * before they look at the state (open_fast's callers) */
  uint32_t open = R_OPEN;
  if (!atomic_compare_exchange_strong(&o->state, &open, R_DIVERTED)) return; /* DONE meanwhile */
  wf_board_wake(o);
  if (o->data >= 0 && !is_big(o) && writing(b, r, o)) {
    o->release_late = 1; /* the last of them gives it back (wrote) */
    return;
  }
  release_data(b, o);
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


const void *wf_board_part(const wf_board *b, wf_board_ticket t, int k) {
  int32_t d = round_of(b, t)->data;
  if (d == D_INLINE) return cell(b, t, k);
  if (d == D_REMOTE) return NULL; /* the inputs are the members' own: wf_board_remote */
  if (d >= 0) SLOT_ACQUIRE(b, d); /* every access to a slot's data goes through here */
  if (d >= (int32_t)NDATA) return b->big + (size_t)(d - (int32_t)NDATA) * b->big_slot + (size_t)k * b->big_part;
  return b->data + (size_t)d * b->slot_bytes + (size_t)k * b->part_bytes;
}

/* Bytes of each member's input a description says (a broadcast root's). */
static size_t desc_bytes(const wf_board_desc *d) {
  size_t need = weft_dtype_size((weft_dtype)d->dtype);
  for (int i = 0; i < d->ndim; i++) need *= (size_t)d->shape[i];
  return need;
}

/* Opens round o of record r for generation gen (record locked). */
static void open_round(wf_board *b, record *r, round *o, uint32_t gen, int gsize, const wf_board_desc *desc,
                       int64_t deadline) {
  o->n = (uint32_t)gsize;
  atomic_store_explicit(&o->claimed, 0, memory_order_relaxed);
  /* sized by the description, not by this arrival's part: a broadcast's
   * non-roots bring none, and one of them may open the round */
  size_t need = desc ? desc_bytes(desc) : 0;
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
  /* release: open_fast reads the generation first, then what was written
   * above (it holds no lock) */
  atomic_store_explicit(&o->gen, gen, memory_order_release);
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

/* A member finished copying its input into o's large slot (it climbs the
 * arrival tree next): a slot released meanwhile goes back now that nobody
 * writes it. The round cannot have moved on to another generation: that
 * needs this member's arrival. */
static weft_status copied(wf_board *b, record *r, round *o, int64_t deadline) {
  /* without the lock by the deadline (a local rank died holding it) the
   * slot stays taken and the round open until waiters give up on it */
  weft_status st = lock(b, &r->lock, deadline);
  if (st != WEFT_OK) { /* the round can never complete nor give its slot back */
    wf_board_off(b, wf_now_ns() + 1000000000);
    return st;
  }
  o->writers--;
  uint32_t state = atomic_load_explicit(&o->state, memory_order_relaxed);
  if (state != R_OPEN && o->release_late && !o->writers) release_data(b, o);
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

/* ------------------------------------------------------------------ the arrival tree
 *
 * Every arrival of generation gen (eligible or not, into an open round or a
 * diverted one) climbs a binary combining tree over the members: leaves
 * n .. 2n-1 are the members (heap order), internal node i (1 .. n-1) lives
 * in member i's cell and counts the arrivals of its two children; the
 * first arrival at a node stops there, the second climbs on, so the
 * arrival that completes node 1 is the generation's last, and it alone
 * decides the round (DONE, or freed if diverted) under the record's lock.
 * An arrival thus takes at most ceil(log2 n) exchanges on lines shared
 * with one other arrival each, plus the decision, instead of every member
 * queueing on one lock: no arrival waits for another. The exchanges are
 * acq_rel, so the decider has seen every member's input before it
 * publishes DONE (release), and a waiter that sees DONE (acquire) has too.
 * A node's word carries the generation (a stale count from two
 * generations ago reads as zero) and a step clock (one more than the
 * latest of the exchanges it follows): the decider's clock is the longest
 * chain of serialised exchanges this generation took (wf_board_ticket
 * depth, for tests). */

/* Climbs from grank's leaf; 1 if this arrival completed the root (the
 * generation's last). *steps: exchanges made; *clock: the clock reached. */
static int climb(const wf_board *b, record *r, uint32_t gen, int grank, int n, uint32_t *steps, uint32_t *clock) {
  uint32_t clk = *clock, k = 0;
  for (uint32_t i = ((uint32_t)n + (uint32_t)grank) >> 1; i >= 1; i >>= 1) {
    _Atomic uint64_t *w = &tline(b, r, gen, (int)i)->node;
    uint64_t old = atomic_load_explicit(w, memory_order_relaxed), nw;
    uint32_t cnt;
    do {
      int cur = (uint32_t)(old >> 32) == gen + 1; /* else another generation's: none yet in this one */
      uint32_t ck = cur ? (uint32_t)(old >> 8) & 0xffffffu : 0;
      cnt = (cur ? (uint32_t)old & 0xffu : 0) + 1;
      nw = (uint64_t)(gen + 1) << 32 | (uint64_t)(((ck > clk ? ck : clk) + 1) & 0xffffffu) << 8 | cnt;
    } while (!atomic_compare_exchange_weak_explicit(w, &old, nw, memory_order_acq_rel, memory_order_relaxed));
    k++;
    clk = (uint32_t)(nw >> 8) & 0xffffffu;
    if (cnt < 2) break; /* the node's other child is still to come: it climbs on */
    if (i == 1) {
      *steps = k;
      *clock = clk;
      return 1;
    }
  }
  *steps = k;
  *clock = clk;
  return n == 1;
}

/* This member arrived at t's round (its input in place, or the round not
 * open for it): it climbs, and the generation's last decides: an open round
 * is DONE (*how = WF_BOARD_DONE if it arrived eligible), a diverted one is
 * freed (everyone has seen it: the next but one generation may use it).
 * lock_steps: record-lock acquisitions this arrival made already. */
static weft_status arrived(wf_board *b, record *r, round *o, wf_board_ticket *t, int grank, int gsize,
                           uint32_t lock_steps, int64_t deadline, int *how) {
  uint32_t steps = 0, clock = lock_steps;
  int last = climb(b, r, t->gen, grank, gsize, &steps, &clock);
  t->steps = (uint16_t)(steps + lock_steps);
  t->depth = 0;
  if (!last) return WEFT_OK;
  t->steps++;
  t->depth = (uint16_t)(clock + 1);
  /* an open round is DONE by an exchange, without the lock (a divert
   * exchanges too: one of them wins); seq_cst: the state before wake's
   * look at the sleepers (set_state); release: every input before it */
  uint32_t open = R_OPEN;
  if (atomic_compare_exchange_strong(&o->state, &open, R_DONE)) {
    wf_board_wake(o);
    if (*how == WF_BOARD_WAIT) *how = WF_BOARD_DONE;
    return WEFT_OK;
  }
  weft_status st = lock(b, &r->lock, deadline); /* diverted: free it */
  if (st != WEFT_OK) { /* the round can never give its slot back */
    wf_board_off(b, wf_now_ns() + 1000000000);
    return st;
  }
  if (atomic_load_explicit(&o->gen, memory_order_relaxed) == t->gen &&
      atomic_load_explicit(&o->state, memory_order_relaxed) == R_DIVERTED)
    free_round(b, o);
  unlock(&r->lock);
  return WEFT_OK;
}

/* How an arrival may write its input without the record's lock:
 * FAST_INLINE (the round is open for this generation with an equal
 * description and its inputs inline: the cell stays this generation's
 * until every member arrived at the next one, this member included, and a
 * divert meanwhile only makes the write useless) or FAST_POOLED (the same
 * with a pooled slot, which a divert gives back at once: so the writer
 * announces itself first (IN_WRITING in its arrival word) and looks again,
 * and a divert that sees it leaves the slot to the last writer: wrote);
 * 0: the lock path. */
enum { FAST_NO = 0, FAST_INLINE = 1, FAST_POOLED = 2 };
#define IN_WRITING 0x80000000u /* arrival word: writing into a pooled slot without the lock */
static int open_fast(const wf_board *b, record *r, round *o, uint32_t gen, const wf_board_desc *desc,
                     size_t part_len) {
  /* the generation first (acquire: open_round's description and data are
   * then visible), then the state: open for it, or not yet */
  if (atomic_load_explicit(&o->gen, memory_order_acquire) != gen ||
      atomic_load_explicit(&o->state, memory_order_acquire) != R_OPEN || desc->remote ||
      !same_desc(desc, &r->desc[gen & 1]))
    return FAST_NO;
  int32_t d = __atomic_load_n(&o->data, __ATOMIC_RELAXED); /* a divert may give a pooled slot back meanwhile */
  if (d == D_INLINE) return part_len <= INLINE ? FAST_INLINE : FAST_NO;
  return d >= 0 && d < (int32_t)NDATA && part_len <= b->part_bytes ? FAST_POOLED : FAST_NO;
}

/* Whether a member is writing into o's pooled slot without the lock
 * (record locked; seq_cst loads: after the divert's state store). */
static int writing(const wf_board *b, record *r, const round *o) {
  uint32_t gen = atomic_load_explicit(&o->gen, memory_order_relaxed);
  for (int k = 0; k < (int)o->n && k < b->nlocal; k++)
    if (atomic_load(&tline(b, r, gen, k)->in) == ((gen + 1) | IN_WRITING)) return 1;
  return 0;
}

/* A FAST_POOLED writer is done with the slot (its arrival word now says
 * in, or what it was if it backs out): if the round was diverted meanwhile,
 * the last such writer gives the slot back. */
static void wrote(wf_board *b, record *r, round *o, uint32_t gen, tree_line *me, uint32_t in, int64_t deadline) {
  atomic_store(&me->in, in); /* seq_cst: before the look at the state (as divert's, the other way round) */
  if (atomic_load(&o->state) == R_OPEN) return; /* a divert from now on sees this member done */
  if (lock(b, &r->lock, deadline) != WEFT_OK) return; /* the slot stays taken: no worse than a lost rank */
  if (atomic_load_explicit(&o->gen, memory_order_relaxed) == gen && o->release_late && !writing(b, r, o))
    release_data(b, o);
  unlock(&r->lock);
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
  /* one thread of this rank at a time per name (the in-flight set) */
  uint32_t gen = __atomic_fetch_add(&b->count[idx], 1, __ATOMIC_RELAXED);
  round *o = rnd(r, gen);
  tree_line *me = tline(b, r, gen, grank);
  t->rec = idx;
  t->gen = gen;
  uint32_t was = atomic_load_explicit(&me->in, memory_order_relaxed);
  int fast = desc && was != gen + 1 ? open_fast(b, r, o, gen, desc, part_len) : FAST_NO;
  /* a round not open yet whose inputs go inline or pooled, its lock held
   * (likely by its opener): wait for the opening rather than queue on the
   * lock (bounded) */
  int could = desc && was != gen + 1 && !desc->remote && desc_bytes(desc) <= b->part_bytes;
  for (int i = 0; !fast && could && i < 4096 && atomic_load_explicit(&r->lock, memory_order_relaxed); i++) {
    if (b->yield_after && i < 256) cpu_relax();
    else sched_yield();
    fast = open_fast(b, r, o, gen, desc, part_len);
  }
  if (fast == FAST_POOLED) { /* announce, then look again (see open_fast) */
    atomic_store(&me->in, (gen + 1) | IN_WRITING);
    if (atomic_load(&o->state) != R_OPEN) { /* diverted meanwhile: back out, the lock path sees it */
      wrote(b, r, o, gen, me, was, deadline);
      fast = FAST_NO;
    }
  }
  if (fast) {
    if (fast == FAST_INLINE) atomic_store_explicit(&me->in, gen + 1, memory_order_relaxed);
    if (part_len) put(b, *t, grank, part, part_len, skip);
    if (fast == FAST_POOLED) {
      if (part_len) SLOT_RELEASE(b, o->data);
      wrote(b, r, o, gen, me, gen + 1, deadline);
    }
    *how = WF_BOARD_WAIT;
    return arrived(b, r, o, t, grank, gsize, 0, deadline, how);
  }
  WF_CHECK(lock(b, &r->lock, deadline));
  if (atomic_load(&b->h->off)) { /* turned off meanwhile: the counts no longer matter */
    unlock(&r->lock);
    return WEFT_OK;
  }
  uint32_t st = atomic_load_explicit(&o->state, memory_order_relaxed);
  uint32_t og = atomic_load_explicit(&o->gen, memory_order_relaxed);
  if (atomic_load_explicit(&me->in, memory_order_relaxed) == gen + 1) {
    unlock(&r->lock);
    /* arrived twice at one generation: a bug; never guess */
    wf_board_off(b, deadline);
    return WEFT_OK;
  }
  if (st == R_DONE && og != gen && (o->data == D_INLINE || o->data == D_REMOTE) &&
      (o->claims ? atomic_load_explicit(&o->claimed, memory_order_acquire) == wf_board_all((int)o->n)
                 : all_came_next(r, gen)))
    st = R_FREE; /* an inline or remote round every member has read: left as it was, reused now */
  if (st == R_FREE) {
    open_round(b, r, o, gen, gsize, desc, deadline);
    st = atomic_load_explicit(&o->state, memory_order_relaxed);
  } else if (og != gen) {
    unlock(&r->lock);
    /* generations out of step: a bug or a rank that skipped; never guess */
    wf_board_off(b, deadline);
    return WEFT_OK;
  } else if (st == R_OPEN && (!desc || !same_desc(desc, &r->desc[gen & 1]) || part_len > capacity(b, o))) {
    divert(b, r, o);
    st = R_DIVERTED;
  }
  atomic_store_explicit(&me->in, gen + 1, memory_order_relaxed);
  if (st == R_OPEN) {
    *how = WF_BOARD_WAIT;
    if (is_big(o) && part_len) { /* copied outside the lock: the others arrive meanwhile */
      int32_t d = o->data; /* stays: writers > 0 holds the slot */
      o->writers++;
      unlock(&r->lock);
      wf_board_wake(o); /* it may have opened the round (set_state_quiet) */
      put(b, *t, grank, part, part_len, skip);
      SLOT_RELEASE(b, d);
      WF_CHECK(copied(b, r, o, deadline));
      return arrived(b, r, o, t, grank, gsize, 2, deadline, how);
    }
    if (o->data == D_REMOTE) { /* where the others read it: nothing is copied */
      remote_cell c = {(uint64_t)getpid(), (uint64_t)(uintptr_t)part, (uint64_t)part_len};
      memcpy(cell(b, *t, grank), &c, sizeof c);
    } else if (part_len) {
      put(b, *t, grank, part, part_len, skip);
    }
    if (part_len && o->data >= 0) SLOT_RELEASE(b, o->data);
  }
  unlock(&r->lock);
  wf_board_wake(o); /* it may have opened or diverted the round */
  return arrived(b, r, o, t, grank, gsize, 1, deadline, how);
}

int wf_board_state(const wf_board *b, wf_board_ticket t) {
  round *o = round_of(b, t);
  uint32_t st = atomic_load(&o->state);
  if (atomic_load_explicit(&o->gen, memory_order_relaxed) != t.gen) return WF_BOARD_SLOW; /* diverted and freed */
  return st == R_OPEN ? WF_BOARD_WAIT : st == R_DONE ? WF_BOARD_DONE : WF_BOARD_SLOW;
}

uint64_t wf_board_arrived(const wf_board *b, wf_board_ticket t) {
  uint64_t bits = 0;
  record *r = rec_at(b, t.rec);
  for (int k = 0; k < (int)round_of(b, t)->n && k < b->nlocal; k++)
    if (atomic_load_explicit(&tline(b, r, t.gen, k)->in, memory_order_relaxed) == t.gen + 1) bits |= 1ull << k;
  return bits;
}

weft_status wf_board_claim(wf_board *b, wf_board_ticket t, int grank, int64_t deadline) {
  round *o = round_of(b, t);
  /* a named inline round: every member has read it before g+2 opens (board.h).
   * One atomic on a line every member writes, saved per op (bench/NOTES.md,
   * "Unclaimed inline rounds") */
  if (!o->claims) return WEFT_OK;
  /* no lock but for the last pooled claim: acq_rel orders every member's
   * reads of the inputs before the last claim frees the slot (an inline
   * round is left as it is and reused by its next but one generation) */
  uint64_t all = wf_board_all((int)o->n); /* every member claims a DONE round */
  int32_t data = o->data;
  if (data >= 0) SLOT_RELEASE(b, data); /* this thread's reads of the inputs are done */
  /* seq_cst: against the claim waiters' sleepers count (as in set_state) */
  uint64_t bit = 1ull << grank, prev = atomic_fetch_or(&o->claimed, bit);
  if (data == D_REMOTE && (prev | bit) == all) wf_board_wake(o); /* members waiting for the claims */
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
    divert(b, r, o);
  unlock(&r->lock);
  return wf_board_state(b, t);
}

/* Waits until done(b, t, arg) or until (wf_now_ns) passes: spins (pausing;
 * yielding after a while, at once when the host is oversubscribed), reading
 * the clock now and then; after SPIN_NS sleeps once on t's round's futex
 * word (SLEEP_NS at most: callers notice other events). Returns done's last
 * value. Whoever makes done true bumps the word if anyone sleeps. */
int wf_board_wait_for(wf_board *b, wf_board_ticket t, int (*done)(const wf_board *, wf_board_ticket, const void *),
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
  return !wf_board_wait_for(b, t, not_open, NULL, until) && wf_now_ns() >= until;
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
      if (atomic_load_explicit(&rnd(r, k)->state, memory_order_relaxed) == R_OPEN) divert(b, r, rnd(r, k));
    unlock(&r->lock);
  }
}
