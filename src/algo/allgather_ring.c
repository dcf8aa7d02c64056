/* allgather_ring.c - ring allgatherv: in p-1 rounds every rank forwards to
 * its right neighbour the block it received in the previous round (its own
 * first), receiving straight into place, so there is no scratch and no
 * reduction. Per-rank counts may differ and may be 0: both sides know every
 * count, so an empty block is skipped consistently. Blocks are not cut into
 * segments: nothing is reduced, so a segment would only add rounds. */
#include "algo/algo.h"
#include "util/err.h"


static int mod(int x, int p) { return ((x % p) + p) % p; }

static int ag_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLGATHER && a->size >= 1; }

static weft_status ag_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  char *out = a->out;
  const char *in = a->in;
  int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int k = 0; k < p - 1; k++) {
    int sb = mod(r - k, p), rb = mod(r - k - 1, p);
    /* our own block goes out from in: the copy into out runs after this
     * round's transfers, and in may alias it anyway */
    if (a->counts[sb]) wf_sched_send(s, right, k == 0 ? in : out + a->displs[sb] * es, a->counts[sb] * es);
    if (a->counts[rb]) wf_sched_recv(s, left, out + a->displs[rb] * es, a->counts[rb] * es);
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
