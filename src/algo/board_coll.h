/* board_coll.h - the board-slot algorithms: a rank's result of a collective
 * from a DONE round of the one-host board (negotiate/board.h), where every
 * member's input sits in the round's slot (or, in a remote round, stays in
 * the member's memory and is read across processes).
 *
 * The board negotiates; these functions only move and fold data, so they
 * see the round through a wf_slot view and never the board itself.
 * Reductions fold with wf_fold (reduce/reduce.h) in group-rank order and
 * then average/postscale as the executor does after the `direct` algorithm:
 * the same bits by construction. Outputs are the caller's (the one-host
 * driver allocates them as the executor would). */
#ifndef WF_ALGO_BOARD_COLL_H
#define WF_ALGO_BOARD_COLL_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

/* A DONE round as this rank sees it. */
typedef struct wf_slot {
  int n, me;              /* members, this rank's index among them */
  const void *const *part;/* [n] member k's input in the slot (unused in a remote round) */
  const void *own;        /* this rank's input, as submitted */
  int remote;             /* inputs stay with their owners: read them with read() */
  /* Remote rounds: len bytes of member k's input from byte off into dst;
   * an error names the member. */
  weft_status (*read)(void *ctx, int k, size_t off, void *dst, size_t len);
  void *ctx;
} wf_slot;

/* What to compute, for wf_slot_result. */
typedef struct wf_slot_args {
  wf_coll coll;
  weft_dtype dtype;
  weft_reduce_op op;
  double postscale;
  int root;               /* broadcast */
  size_t count;           /* elements of each member's input */
  size_t dim0;            /* rows of the input (reducescatter, allgather, alltoall) */
  int own_rows;           /* reducescatter: this rank's own rows are folded from its own input */
  int skip_own;           /* allgather, alltoall: leave this rank's own block (copied later) */
  void *out;              /* allreduce: the output; broadcast: the buffer (written off the root);
                             allgather: n * count elements; alltoall: count elements;
                             reducescatter: this rank's rows */
} wf_slot_args;

/* len bytes of member k's input from byte off on, into dst: this rank's own
 * input, the slot, or a read across processes. */
weft_status wf_slot_get(const wf_slot *s, int k, size_t off, void *dst, size_t len);
/* dst = the fold in member order of elements [off, off + count) of every
 * member's input (own: this rank's from its own input, not the slot), then
 * average/postscale over n members. */
void wf_slot_fold(const wf_slot *s, weft_dtype t, weft_reduce_op op, double postscale, void *dst, size_t off,
                  size_t count, int own);
/* This rank's result of a->coll into a->out. */
weft_status wf_slot_result(const wf_slot *s, const wf_slot_args *a);

/* Rows of dim0 scattered over n ranks: rank i gets wf_rs_rows (the first
 * dim0 % n one more), starting at wf_rs_first. */
size_t wf_rs_rows(size_t dim0, int n, int i);
size_t wf_rs_first(size_t dim0, int n, int i);

#endif
