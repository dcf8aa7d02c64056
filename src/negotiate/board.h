/* board.h - the one-host negotiation board: how the ranks of a group whose
 * members all share this host agree that a small collective is ready, in
 * shared memory, without a round trip to the coordinator (onehost.c uses it;
 * docs/design.md section 3, "The one-host path").
 *
 * The board lives in the job's shared segment (wf_shm_board) and is zero
 * when created, which is a valid empty board. It holds:
 *   - a table of records, one per (group, tensor name) ever submitted here,
 *     never removed (when it is full, new names simply take the coordinator
 *     path, on every rank alike: "full" never goes back), each with its own
 *     lock (a futex word: spin briefly, then sleep; every wait bounded), its
 *     two rounds and room for their inputs up to 64 bytes per member,
 *   - a pool of data slots for larger inputs (up to wf_board_part_bytes),
 *   - a few large slots for inputs up to wf_board_large_bytes; these are
 *     copied in outside the record's lock (the others arrive meanwhile),
 *     and the round is DONE when every member arrived and finished copying,
 *   - a board lock for inserting records and for the pool, and the off flag.
 *
 * Generations: a record counts, per group rank, how many times that rank
 * submitted the name; a rank's g-th submission is generation g, and
 * generation g uses round g % 2 of the record. EVERY submission of a
 * named collective in such a group visits the board (eligible or not), so
 * the ranks' counts stay aligned and generation g means the same operation
 * on every rank. Two rounds suffice: a rank submits generation g+1 only
 * after its generation g completed, so g-1's round is free before anyone
 * arrives at g+1 (checked: by the claims, or for unclaimed inline rounds by
 * every member's arrival at g; a round found still in use turns the board
 * off).
 *
 * A round is OPEN while eligible arrivals with equal descriptions gather
 * (the first opens it under the record's lock; later ones with inline or
 * pooled inputs copy in without it); every arrival then climbs the round's
 * arrival tree (board.c), whose last climber alone decides: DONE when every
 * member arrived (each then reads all inputs, folds them
 * itself, or its slices of a split round, and claims, but for a named
 * inline round: see wf_board_claim; the last claim frees the round);
 * DIVERTED as soon as
 * any arrival is not eligible or differs, or a waiter gives up: then every
 * arrival of that generation, earlier and later, takes the coordinator path,
 * which validates and reports exactly as without the board. Once turned off
 * (a join, a protocol error) the board stays off: every OPEN round is
 * diverted and nobody visits again. */
#ifndef WF_ENGINE_BOARD_H
#define WF_ENGINE_BOARD_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

#define WF_BOARD_MAX_MEMBERS 64
#define WF_BOARD_MAX_LARGE ((size_t)64 << 20) /* largest input of a large slot */

/* The group-rank bits of a group of gsize members (arrivals, claims,
 * slices). */
static inline uint64_t wf_board_all(int gsize) { return gsize >= 64 ? ~0ull : (1ull << gsize) - 1; }

typedef struct wf_board wf_board;

/* What must be equal on every rank for a round to complete here. */
typedef struct wf_board_desc {
  uint8_t coll, dtype, ndim, op;
  uint8_t remote;   /* inputs stay in the members' memory, read by cross-memory attach (see below) */
  uint8_t split;    /* allreduce folded slice by slice, each slice once (see below): WF_SPLIT_* */
  uint8_t ordered;  /* the record serves several operations in call order (unnamed barriers): see claims below */
  int32_t root;     /* broadcast: group rank; else -1 */
  double prescale, postscale;
  int64_t shape[WEFT_MAX_DIMS];
} wf_board_desc;

/* Bytes [off, off + len) of a member's input. */
typedef struct wf_board_span {
  size_t off, len;
} wf_board_span;

/* Where a rank's arrival went: record, round and generation. steps: the
 * exchanges on shared lines (record lock, arrival-tree nodes) the arrival
 * took; depth: for the generation's last arrival (which decided the round),
 * the longest chain of serialised exchanges of the whole generation, else
 * 0 (both for tests: they grow as log2 of the members, see board.c). */
typedef struct wf_board_ticket {
  uint32_t rec, gen;
  uint16_t steps, depth;
} wf_board_ticket;

enum {
  WF_BOARD_SLOW = 0, /* take the coordinator path (diverted, off, table full) */
  WF_BOARD_WAIT = 1, /* arrived; wait for the others (wf_board_state) */
  WF_BOARD_DONE = 2  /* arrived last: the round is done */
};

/* Bytes the creator reserves for a board of nlocal ranks whose inputs may be
 * up to part_bytes each in the pool and up to large_bytes in the large
 * slots (0: none). 0 if out of range. */
size_t wf_board_bytes(int nlocal, size_t part_bytes, size_t large_bytes);
/* The large slots' input size such a board really has (0: none): large_bytes
 * rounded up to a page, at most max(32 MiB / nlocal, 2 MiB) (so the default
 * 2 MiB never shrinks with the members), 0 unless above the pooled slots'
 * size. The board has as many large slots (2 to 4) as 64 MiB holds, at
 * least two: the large slots take at most max(64 MiB, nlocal x 4 MiB). The
 * creator hands this to every rank's wf_board_open. */
size_t wf_board_large_for(int nlocal, size_t part_bytes, size_t large_bytes);

/* The board's size as a formula in the members n (for weft-info): its
 * records, pooled slots and large slots. Writes at most len bytes. */
void wf_board_formula(char *buf, size_t len);

/* Opens the board in mem (bytes long, the same on every local rank); the
 * geometry is derived from bytes, nlocal and large_bytes (the creator's,
 * which the segment carries), so every rank finds the same. NULL (no
 * board) if it does not fit. */
wf_board *wf_board_open(void *mem, size_t bytes, int nlocal, size_t large_bytes);
void wf_board_close(wf_board *b);

/* Largest input a pooled data slot holds per member; the largest input of
 * any slot (a large one, if there are). */
size_t wf_board_part_bytes(const wf_board *b);
size_t wf_board_large_bytes(const wf_board *b);

/* Arrives for (group, name) as group rank grank of gsize. desc NULL: not
 * eligible (divert). part: this rank's input (part_len bytes, at most
 * wf_board_large_bytes), copied in, except the bytes skip spans, which no
 * other member reads (an alltoall's own block, a reducescatter's own rows, a
 * WF_SPLIT_OWN round's own slice: wf_fast_unshared; len 0: all of it). Bounded by deadline (ns, wf_now_ns,
 * or WF_BOARD_WITHIN(s): s seconds for each lock from when it turns out to be
 * held): WEFT_ERR_TIMEOUT if a lock cannot be had (a peer died holding it).
 * *how gets WF_BOARD_SLOW/WAIT/DONE; *t the ticket for WAIT and DONE. */
weft_status wf_board_arrive(wf_board *b, uint32_t group, const char *name, int grank, int gsize,
                            const wf_board_desc *desc, const void *part, size_t part_len, wf_board_span skip,
                            int64_t deadline, int *how, wf_board_ticket *t);

/* The same with hash = wf_board_hash(group, name), computed by the caller:
 * wf_str_hash of "<group>/<name>", the in-flight key's (weft_request's
 * key_hash). */
weft_status wf_board_arrive_h(wf_board *b, uint32_t group, const char *name, uint64_t hash, int grank, int gsize,
                              const wf_board_desc *desc, const void *part, size_t part_len, wf_board_span skip,
                              int64_t deadline, int *how, wf_board_ticket *t);
uint64_t wf_board_hash(uint32_t group, const char *name);

/* The round's state for ticket t, without the lock: WF_BOARD_WAIT (still
 * open), WF_BOARD_DONE (every input is there) or WF_BOARD_SLOW (diverted).
 * DONE is read with acquire order: the inputs are then readable. */
int wf_board_state(const wf_board *b, wf_board_ticket t);

/* Member k's input in a DONE round (valid until this rank claims). */
const void *wf_board_part(const wf_board *b, wf_board_ticket t, int k);

/* Claims a DONE round after reading it; the last member's claim frees it.
 * An inline round of a record that serves one name needs no claim (it
 * returns at once): a member arrives at generation g+1 only after its
 * generation g completed (the in-flight set), so once every member arrived
 * at g+1 every member has read g. (Every submission visits the board before
 * the engine can see it, grouped ops' children too: no generation completes
 * through the coordinator before every member's visit, but for an error
 * that does not wait for every member.) Generation g+2 reuses g's round only
 * then (g+1's round DONE, or freed after every member arrived); else (g+1
 * ended in an error on the coordinator path without some member) the board
 * turns off. An ordered record (desc.ordered) gives no such order: its
 * rounds are claimed, and an unclaimed one found at g+2 turns the board off.
 * deadline bounds the record lock that the last pooled claim takes: an
 * absolute time (wf_now_ns), or WF_BOARD_WITHIN(s), s seconds from when the
 * lock turns out to be held (an inline round's claim takes no lock: no
 * clock read for it). */
#define WF_BOARD_WITHIN(s) (-(int64_t)((s) * 1e9))
weft_status wf_board_claim(wf_board *b, wf_board_ticket t, int grank, int64_t deadline);

/* Remote rounds (desc->remote): nothing is copied in; each arrival
 * publishes its process id and its input's address and length, and the
 * members read each other's inputs with process_vm_readv (one copy instead
 * of two). A member's input must stay valid until every member has read
 * it: a member completes only once every member claimed (or gives up, and
 * marks the round abandoned, so a late reader fails instead of returning
 * what may already be overwritten). */
int wf_board_is_remote(const wf_board *b, wf_board_ticket t);
/* Member k's published input in a DONE remote round. */
void wf_board_remote(const wf_board *b, wf_board_ticket t, int k, int *pid, uint64_t *addr, uint64_t *len);
/* Group-rank bits of the members that claimed t's round. */
uint64_t wf_board_claimed(const wf_board *b, wf_board_ticket t);
/* Waits until every member (of gsize) claimed t's round or until
 * (wf_now_ns) passes, like wf_board_wait. Returns 1 if every member claimed. */
int wf_board_wait_claims(wf_board *b, wf_board_ticket t, int gsize, int64_t until);
/* A member gives up waiting for the claims (its input goes back to its
 * caller); 1 if somebody gave up on t's round. */
void wf_board_abandon(wf_board *b, wf_board_ticket t);
int wf_board_abandoned(const wf_board *b, wf_board_ticket t);

/* Split rounds (desc->split, an allreduce in a data slot): slice s of the
 * result (elements [count*s/n, count*(s+1)/n), wf_board_slice) is folded
 * once into member s's part of the slot (where slice s of member s's input
 * was: nobody else reads that), and every member copies every slice out
 * (the folder writes it to its own output as it goes). WF_SPLIT_ANY: by
 * whichever member takes it first, so a member that does not come back
 * soon (descheduled, stopped: the host's ranks outnumber its cores) holds
 * nobody up: the others fold its slice. WF_SPLIT_OWN (when the cores
 * suffice): by member s, from its own input, whose slice s is never copied
 * in; a quarter less memory traffic on 2 ranks. Slice s's state is a word
 * in member s's inline cell, reset when the round opens. */
enum { WF_SPLIT_NONE = 0, WF_SPLIT_ANY = 1, WF_SPLIT_OWN = 2 };
static inline void wf_board_slice(size_t count, int n, int s, size_t *lo, size_t *hi) {
  *lo = count * (size_t)s / (size_t)n;
  *hi = count * (size_t)(s + 1) / (size_t)n;
}
/* The split kind (WF_SPLIT_*) of t's round. */
int wf_board_split_kind(const wf_board *b, wf_board_ticket t);
/* 1 if the caller (group rank grank) took slice s and must fold it, then
 * call wf_board_slice_done; 0 if somebody else has it. */
int wf_board_slice_take(wf_board *b, wf_board_ticket t, int s, int grank);
void wf_board_slice_done(wf_board *b, wf_board_ticket t, int s);
/* Bits of the slices (of gsize) folded so far, and of those somebody has
 * taken but not finished; *taker (may be NULL) gets the group rank that took
 * the lowest such slice, or -1. */
uint64_t wf_board_slices_done(const wf_board *b, wf_board_ticket t, int gsize, uint64_t *busy, int *taker);
/* Waits until a slice outside have is folded, or one that group rank grank
 * may take is free (in a WF_SPLIT_OWN round only its own), or until
 * (wf_now_ns) passes, like wf_board_wait. */
void wf_board_wait_slices(wf_board *b, wf_board_ticket t, int gsize, int grank, uint64_t have, int64_t until);
/* Member k's part of t's slot, to write a folded slice into. */
void *wf_board_part_mut(const wf_board *b, wf_board_ticket t, int k);

/* Diverts t's round if it is still open (a waiter gives up). Returns the
 * round's state afterwards (WF_BOARD_SLOW or WF_BOARD_DONE). */
int wf_board_divert(wf_board *b, wf_board_ticket t, int64_t deadline);

/* Waits until t's round leaves OPEN or until (wf_now_ns) passes: spins,
 * yielding, then sleeps on the round's futex word (20 ms at most, so
 * callers notice other events). Returns 1 if until has passed. */
int wf_board_wait(wf_board *b, wf_board_ticket t, int64_t until);

/* Turns the board off for good (every rank sees it): diverts every open
 * round. Best effort if the lock cannot be had by deadline (absolute, or
 * WF_BOARD_WITHIN: for the whole sweep). */
void wf_board_off(wf_board *b, int64_t deadline);
int wf_board_is_off(const wf_board *b);
/* 1 if the host's ranks outnumber its cores (waiters yield at once). */
int wf_board_oversubscribed(const wf_board *b);

/* Which group ranks arrived in t's round (for stall messages). */
uint64_t wf_board_arrived(const wf_board *b, wf_board_ticket t);

#endif
