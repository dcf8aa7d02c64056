/* allgather_cma.c - allgather(v) among the ranks of one host through cross-
 * memory attach: every rank reads each peer's block straight from the
 * peer's input into its own output (process_vm_readv), one copy per byte.
 *
 * Round 0: every rank sends every peer the address of its input block
 * (which may sit inside its own output: nobody writes that part). Then rank
 * r copies its own block into place and reads every other block. Round 1:
 * "done" tokens between all pairs: nobody finishes (and lets the caller
 * reuse its input) while a peer still reads it. Every step writes only the
 * rank's own output. */
#include "algo/cma.h"
#include "util/err.h"

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLGATHER && wf_cma_usable(a); }

static weft_status cma_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size, n = a->counts[r];
  char *out = a->out, *mine = out + a->displs[r] * es;
  if (p == 1) {
    wf_sched_copy(s, mine, a->in, n * es);
    return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allgather cma: no memory for the schedule") : WEFT_OK;
  }
  wf_cma_sync y;
  WF_CHECK(wf_cma_setup(a, s, 0, &y, "allgather cma"));
  for (int d = 1; d < p; d++) {
    int j = (r + d) % p;
    wf_cma_send_addr(s, &y, j, a->in);
    wf_cma_recv_addr(s, &y, j);
  }
  wf_sched_copy(s, mine, a->in, n * es);
  for (int d = 1; d < p; d++) {
    int j = (r + d) % p;
    wf_sched_cma_read(s, out + a->displs[j] * es, wf_cma_peer(a, &y, j, 0), a->counts[j] * es);
  }
  return wf_cma_finish(s, &y, r, p, "allgather");
}

const wf_algo wf_algo_allgather_cma = {
    .name = "cma",
    .coll = WF_COLL_ALLGATHER,
    .supports = cma_supports,
    .build = cma_build,
};
