/* board_rounds.c - the one-host board's remote and split rounds (board.h):
 * what members read and publish of a DONE round beyond its inputs. The
 * layout and the round state machine are board.c's (board_impl.h). */
#include <stdatomic.h>
#include <string.h>

#include "negotiate/board_impl.h"

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
  return wf_board_wait_for(b, t, all_claimed, &gsize, until);
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
  wf_board_wake(o);
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
  wf_board_wait_for(b, t, slices_moved, &a, until);
}

void *wf_board_part_mut(const wf_board *b, wf_board_ticket t, int k) { return (void *)(uintptr_t)wf_board_part(b, t, k); }

int wf_board_abandoned(const wf_board *b, wf_board_ticket t) { return atomic_load(&round_of(b, t)->gone) != 0; }
