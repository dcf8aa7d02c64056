/* board_impl.h - the one-host board's layout in shared memory, shared by
 * board.c (records, locks, the round state machine, the arrival tree) and
 * board_rounds.c (remote and split rounds); nothing else includes it. */
#ifndef WF_NEGOTIATE_BOARD_IMPL_H
#define WF_NEGOTIATE_BOARD_IMPL_H
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "negotiate/board.h"

#define NREC 1024u       /* records (names) per board */
#define NDATA 256u       /* pooled data slots, for inputs over INLINE bytes (a multiple of 64) */
#define NBIG 4u          /* large slots at most, for inputs over the pooled slots' size; index NDATA + k */
/* The large slots: as many (2 .. NBIG) as LARGE_BUDGET holds, at least two
 * (back-to-back large operations alternate: one's slot is freed by its last
 * reader while the next one opens); a member's input in one at most
 * max(LARGE_BUDGET / (2 nlocal), LARGE_PER_RANK), so the size the board
 * takes does not fall below LARGE_PER_RANK with the members (no cliff), and
 * the slots take at most max(LARGE_BUDGET, 2 x nlocal x LARGE_PER_RANK)
 * bytes: linear in the members (wf_board_large_for). */
#define LARGE_BUDGET ((size_t)64 << 20)
#define LARGE_PER_RANK ((size_t)2 << 20)
#define PROBES 64u       /* linear probing limit: a longer chain counts as full */
#define INLINE 64u       /* inputs up to this size live in the record itself */
#define CELL 128u        /* a member's cell in a round: its inline input, then its line of the arrival tree */
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
  alignas(64) uint32_t n;    /* members (the group's size), set when the round opens */
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
  /* then 2 x nlocal x CELL bytes: each round's cells (tree_line) */
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
  uint32_t nbig;                 /* large slots (nbig()) */
  int nlocal;
  int yield_after; /* spins before each yield: 0 when the host's ranks outnumber its cores */
  uint32_t *count; /* this process's submissions per record (private) */
};

static inline size_t rup(size_t x, size_t a) { return (x + a - 1) / a * a; }
static inline size_t rec_head(void) { return rup(sizeof(record), 128); }
static inline record *rec_at(const wf_board *b, uint32_t i) { return (record *)(b->recs + b->rec_stride * i); }
static inline round *rnd(record *r, uint32_t k) { return k & 1 ? &r->r1 : &r->r0; }

#ifdef WF_TSAN
/* The first byte of data slot d (pooled or large): the slot's name for TSan. */
static inline const uint8_t *slot_base(const wf_board *b, int32_t d) {
  return d >= (int32_t)NDATA ? b->big + (size_t)(d - (int32_t)NDATA) * b->big_slot : b->data + (size_t)d * b->slot_bytes;
}
#endif

static inline round *round_of(const wf_board *b, wf_board_ticket t) { return rnd(rec_at(b, t.rec), t.gen); }

/* Member k's inline cell of t's round: its input (inline rounds) or where
 * its input is (remote rounds). */
static inline uint8_t *cell_of(const wf_board *b, record *r, uint32_t gen, int k) {
  return (uint8_t *)r + rec_head() + ((size_t)(gen & 1) * (size_t)b->nlocal + (size_t)k) * CELL;
}

/* The second line of member k's cell: node k of the round's arrival tree
 * (nodes 1 .. n-1; see climb) and member k's arrival word. */
typedef struct tree_line {
  _Atomic uint64_t node; /* (gen + 1) << 32 | clock << 8 | arrivals at this node in that generation */
  _Atomic uint32_t in;   /* gen + 1 once member k arrived at generation gen */
} tree_line;
_Static_assert(INLINE + sizeof(tree_line) <= CELL, "a tree line fits a cell");
static inline tree_line *tline(const wf_board *b, record *r, uint32_t gen, int k) {
  return (tree_line *)(void *)(cell_of(b, r, gen, k) + INLINE);
}

static inline uint8_t *cell(const wf_board *b, wf_board_ticket t, int k) { return cell_of(b, rec_at(b, t.rec), t.gen, k); }

typedef struct remote_cell {
  uint64_t pid, addr, len;
} remote_cell;
_Static_assert(sizeof(remote_cell) <= INLINE, "a remote cell fits a member's inline cell");

/* A split round's slice s: 0 free, else taken ((taker + 1) << 2 | 1) or
 * folded (2), at the start of member s's inline cell. */
static inline _Atomic uint64_t *slice_word_of(const wf_board *b, record *r, uint32_t gen, int s) {
  return (_Atomic uint64_t *)(void *)cell_of(b, r, gen, s);
}
static inline _Atomic uint64_t *slice_word(const wf_board *b, wf_board_ticket t, int s) {
  return slice_word_of(b, rec_at(b, t.rec), t.gen, s);
}
_Static_assert(INLINE % sizeof(uint64_t) == 0, "a slice word is aligned in its cell");

/* Publishes a round's state change to its sleepers (board.c). */
void wf_board_wake(round *o);
/* Waits until done(b, t, arg) or until (wf_now_ns) passes (board.c):
 * spins, yields, then sleeps on t's round's futex word; returns done's last
 * value. */
int wf_board_wait_for(wf_board *b, wf_board_ticket t, int (*done)(const wf_board *, wf_board_ticket, const void *),
                      const void *arg, int64_t until);

#endif
