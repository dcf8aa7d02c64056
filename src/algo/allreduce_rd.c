/* allreduce_rd.c - recursive doubling allreduce for small messages: log2(p)
 * rounds, each exchanging the whole buffer with the partner at distance
 * 2^i, so latency (not bandwidth) dominates. For a size that is not a power
 * of two, the first 2*rem ranks pair up: even ones fold their data into the
 * odd neighbour before and get the result back after (MPICH's scheme).
 *
 * Same bits everywhere: the two partners of a round hold partial values A
 * (lower rank) and B; both compute A op B with A as the first operand,
 * because some ops are not bitwise commutative (NaN payloads, min/max of
 * +0 and -0). The upper partner therefore reduces into its receive scratch
 * and copies the result back. The scratch is as large as the tensor, which
 * is why this algorithm declines very large tensors. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

/* Largest tensor this algorithm runs: it needs a scratch of the same size. */
#define WF_RD_MAX_BYTES ((size_t)64 << 20)

static int rd_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_ALLREDUCE && a->size >= 1 && a->count <= WF_RD_MAX_BYTES / a->elem_size;
}

static int pow2_floor(int p) {
  int q = 1;
  while (q <= p / 2) q *= 2;
  return q;
}

static weft_status rd_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  if (p == 1 || a->count == 0) return WEFT_OK; /* nothing to combine */
  size_t bytes = a->count * a->elem_size;
  char *buf = a->buf;
  char *tmp = wf_sched_scratch(s, bytes);
  if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "allreduce rd: no memory for a %zu-byte scratch", bytes);
  int pof2 = pow2_floor(p), rem = p - pof2;

  /* Fold in: ranks 0, 2, .., 2rem-2 hand their data to the next odd rank
   * and sit out the doubling rounds. */
  int vrank; /* rank among the pof2 participants, -1 if folded out */
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      wf_sched_send(s, r + 1, buf, bytes);
      vrank = -1;
    } else {
      wf_sched_recv(s, r - 1, tmp, bytes);
      wf_sched_reduce(s, buf, tmp, a->count); /* only this rank computes it */
      vrank = r / 2;
    }
    wf_sched_end_round(s);
  } else {
    vrank = r - rem;
  }

  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask *= 2) {
      int vpeer = vrank ^ mask;
      int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      wf_sched_send(s, peer, buf, bytes);
      wf_sched_recv(s, peer, tmp, bytes);
      if (vrank < vpeer) {
        wf_sched_reduce(s, buf, tmp, a->count); /* buf = ours op theirs */
      } else {
        wf_sched_reduce(s, tmp, buf, a->count); /* tmp = theirs op ours */
        wf_sched_copy(s, buf, tmp, bytes);
      }
      wf_sched_end_round(s);
    }
  }

  /* Fold out: the odd ranks return the result to their even neighbour. */
  if (r < 2 * rem) {
    if (r % 2 == 0)
      wf_sched_recv(s, r + 1, buf, bytes);
    else
      wf_sched_send(s, r - 1, buf, bytes);
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allreduce rd: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allreduce_rd = {
    .name = "rd",
    .coll = WF_COLL_ALLREDUCE,
    .supports = rd_supports,
    .build = rd_build,
};
