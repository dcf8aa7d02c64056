/* allreduce_cma.c - allreduce among the ranks of one host through cross-
 * memory attach: every rank reduces its 1/p slice straight out of the
 * peers' buffers, then reads the other reduced slices straight from their
 * owners (process_vm_readv: one copy, no help from the peer).
 *
 * Round 0: every rank sends every peer its buffer's address (its input is in
 * place: the engine copied it there before the schedule). Then rank r folds
 * slice r chunk by chunk (WF_CMA_CHUNK_BYTES, so each chunk is reduced
 * while in cache): the peers' pieces are read and combined in rank order,
 * ((x_0 op x_1) op x_2) ..., the left fold of "direct", so both give the
 * same bits and the automatic switch between them by size changes nothing;
 * the result goes into slice r of r's own buffer.
 * Round 1: "slice reduced" tokens between all pairs. Then rank r reads
 * every slice j from its owner j into its own buffer.
 * Round 2: "done reading" tokens: a rank finishes (its buffer goes back to
 * the caller) only when no peer reads it any more.
 *
 * Each region has one writer at a time and is read only when final: slice
 * r of rank j's buffer is j's input to r's fold until r's token arrives,
 * only then does j overwrite it; slice r of r's buffer is written by r's
 * fold before its token, and read by the others after. Every step writes
 * only the rank's own memory. Each rank reads 2(p-1)/p of the tensor from
 * its peers; a descheduled peer stalls nobody's copying. */
#include <stdlib.h>

#include "algo/cma.h"
#include "util/err.h"

static void block_of(size_t count, int p, int b, size_t *off, size_t *n) {
  size_t q = count / (size_t)p, r = count % (size_t)p, ub = (size_t)b;
  *n = q + (ub < r ? 1 : 0);
  *off = q * ub + (ub < r ? ub : r);
}

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLREDUCE && wf_cma_usable(a); }

static weft_status cma_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  if (p <= 1 || a->count == 0) return WEFT_OK;
  size_t es = a->elem_size, moff, mn;
  block_of(a->count, p, r, &moff, &mn);
  size_t maxblk = a->count / (size_t)p + (a->count % (size_t)p ? 1 : 0);
  size_t chunk = wf_cma_chunk(es, maxblk);
  wf_cma_sync y;
  WF_CHECK(wf_cma_setup(a, s, 2 * chunk * es, &y, "allreduce cma"));
  char *buf = a->buf;
  for (int d = 1; d < p; d++) {
    int j = (r + d) % p;
    wf_cma_send_addr(s, &y, j, buf);
    wf_cma_recv_addr(s, &y, j);
  }
  if (mn) {
    wf_mem *src = malloc(sizeof *src * (size_t)p);
    if (!src) return wf_err(WEFT_ERR_NO_MEMORY, "allreduce cma: no memory for %d operands", p);
    for (int i = 0; i < p; i++) src[i] = i == r ? wf_mem_local(buf + moff * es) : wf_cma_peer(a, &y, i, moff * es);
    wf_sched_cma_fold(s, buf + moff * es, src, p, mn, y.tmp, chunk);
    free(src);
  }
  wf_sched_end_round(s);
  for (int d = 1; d < p; d++) {
    int j = (r + d) % p;
    size_t joff, jn;
    wf_cma_send_tok(s, &y, j);
    wf_cma_recv_tok(s, &y, j);
    block_of(a->count, p, j, &joff, &jn);
    wf_sched_cma_read(s, buf + joff * es, wf_cma_peer(a, &y, j, joff * es), jn * es);
  }
  return wf_cma_finish(s, &y, r, p, "allreduce");
}

const wf_algo wf_algo_allreduce_cma = {
    .name = "cma",
    .coll = WF_COLL_ALLREDUCE,
    .supports = cma_supports,
    .build = cma_build,
};
