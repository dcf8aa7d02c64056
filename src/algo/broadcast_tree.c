/* broadcast_tree.c - binomial tree broadcast for small messages: ceil(log2 p)
 * rounds, the set of ranks holding the data doubling each round. Ranks are
 * renumbered relative to the root (v = rank - root mod p); in the round of
 * mask m (largest first), every v that is a multiple of 2m sends to v + m.
 * A rank receives in the round of its lowest set bit and sends in every later
 * round, so sender and receiver place each message in the same round. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

static int tree_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_BROADCAST && a->size >= 1 && a->root >= 0 && a->root < a->size;
}

static weft_status tree_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size;
  if (p == 1 || a->count == 0) return WEFT_OK; /* the data is already in place */
  size_t bytes = a->count * a->elem_size;
  int v = ((a->rank - a->root) % p + p) % p;
  int top = 1;
  while (top < p) top *= 2;
  for (int m = top / 2; m >= 1; m /= 2) {
    if (v % (2 * m) == 0 && v + m < p)
      wf_sched_send(s, (v + m + a->root) % p, a->buf, bytes);
    else if (v % (2 * m) == m)
      wf_sched_recv(s, (v - m + a->root) % p, a->buf, bytes);
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "broadcast tree: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_broadcast_tree = {
    .name = "tree",
    .coll = WF_COLL_BROADCAST,
    .supports = tree_supports,
    .build = tree_build,
};
