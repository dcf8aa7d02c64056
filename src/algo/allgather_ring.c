/* allgather_ring.c - ring allgatherv: in p-1 rounds every rank forwards to
 * its right neighbour the block it received in the previous round (its own
 * first), receiving straight into place, so there is no scratch and no
 * reduction. Per-rank counts may differ and may be 0: both sides know every
 * count, so an empty block is skipped consistently. Blocks are not cut into
 * segments: nothing is reduced, so a segment would only add rounds.
 *
 * Subdivisions (WEFT_RING_SUBDIVS = S, as the ring allreduce: algo.h):
 * every rank's block is cut into S parts and part i travels ring i (rotated,
 * odd ones reversed); the rings share rounds, so a rank sends both ways.
 * The (sender, receiver) pair's messages go in (step, ring) order on both
 * sides. */
#include "algo/algo.h"
#include "util/err.h"


static int mod(int x, int p) { return ((x % p) + p) % p; }

/* Part i of n elements cut into s parts: the first n % s get one more. */
static void part_of(size_t n, int s, int i, size_t *off, size_t *len) {
  size_t q = n / (size_t)s, r = n % (size_t)s, ui = (size_t)i;
  *len = q + (ui < r ? 1 : 0);
  *off = q * ui + (ui < r ? ui : r);
}

static int ag_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLGATHER && a->size >= 1; }

static weft_status ag_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank, nr = wf_ring_subdivs(a);
  size_t es = a->elem_size;
  char *out = a->out;
  const char *in = a->in;
  int pos[WF_RING_MAX_SUBDIVS], right[WF_RING_MAX_SUBDIVS], left[WF_RING_MAX_SUBDIVS];
  for (int i = 0; i < nr; i++) wf_ring_place(p, nr, i, r, &pos[i], &right[i], &left[i]);
  for (int k = 0; k < p - 1; k++) {
    for (int i = 0; i < nr; i++) {
      int sb = wf_ring_rank_at(p, nr, i, mod(pos[i] - k, p)), rb = wf_ring_rank_at(p, nr, i, mod(pos[i] - k - 1, p));
      size_t so, sn, ro, rn;
      part_of(a->counts[sb], nr, i, &so, &sn);
      part_of(a->counts[rb], nr, i, &ro, &rn);
      /* our own block goes out from in: the copy into out runs after this
       * round's transfers, and in may alias it anyway */
      if (sn) wf_sched_send(s, right[i], (k == 0 ? in : out + a->displs[sb] * es) + so * es, sn * es);
      if (rn) wf_sched_recv(s, left[i], out + (a->displs[rb] + ro) * es, rn * es);
    }
    if (k == 0 && a->counts[r]) wf_sched_copy(s, out + a->displs[r] * es, in, a->counts[r] * es);
    wf_sched_end_round(s);
  }
  if (p == 1 && a->counts[r]) {
    wf_sched_copy(s, out + a->displs[r] * es, in, a->counts[r] * es);
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allgather ring: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allgather_ring = {
    .name = "ring",
    .coll = WF_COLL_ALLGATHER,
    .supports = ag_supports,
    .build = ag_build,
};
