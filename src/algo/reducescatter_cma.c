/* reducescatter_cma.c - reduce-scatter among the ranks of one host through
 * cross-memory attach: rank r folds block r straight out of every peer's
 * input (process_vm_readv) into its output, chunk by chunk while in cache.
 *
 * Round 0: every rank sends every peer the address of its input (read-
 * only, prescaled by the engine if asked). Then rank r folds block r in
 * rank order, ((x_0 op x_1) op x_2) ..., the order of "direct", so both
 * give the same bits. Round 1: "done" tokens between all pairs: nobody
 * finishes (and lets the caller reuse its input) while a peer still reads
 * it. */
#include <stdlib.h>

#include "algo/cma.h"
#include "util/err.h"

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_REDUCESCATTER && wf_cma_usable(a); }

static weft_status cma_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size, n = a->counts[r], off = a->displs[r] * es;
  const char *in = a->in;
  if (p == 1) {
    wf_sched_copy(s, a->out, in + off, n * es);
    return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "reducescatter cma: no memory for the schedule") : WEFT_OK;
  }
  size_t maxblk = 0;
  for (int i = 0; i < p; i++)
    if (a->counts[i] > maxblk) maxblk = a->counts[i];
  if (maxblk == 0) return WEFT_OK; /* nothing anywhere: every rank agrees */
  size_t chunk = wf_cma_chunk(es, n ? n : 1);
  wf_cma_sync y;
  WF_CHECK(wf_cma_setup(a, s, 2 * chunk * es, &y, "reducescatter cma"));
  for (int d = 1; d < p; d++) {
    int j = (r + d) % p;
    wf_cma_send_addr(s, &y, j, in);
    wf_cma_recv_addr(s, &y, j);
  }
  if (n) {
    wf_mem *src = malloc(sizeof *src * (size_t)p);
    if (!src) return wf_err(WEFT_ERR_NO_MEMORY, "reducescatter cma: no memory for %d operands", p);
    for (int i = 0; i < p; i++) src[i] = i == r ? wf_mem_local(in + off) : wf_cma_peer(a, &y, i, off);
    wf_sched_cma_fold(s, a->out, src, p, n, y.tmp, chunk);
    free(src);
  }
  return wf_cma_finish(s, &y, r, p, "reducescatter");
}

const wf_algo wf_algo_reducescatter_cma = {
    .name = "cma",
    .coll = WF_COLL_REDUCESCATTER,
    .supports = cma_supports,
    .build = cma_build,
};
