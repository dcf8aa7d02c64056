/* alltoall_cma.c - alltoallv among the ranks of one host: large blocks
 * move by cross-memory attach, small ones as messages, in one round.
 *
 * A block from rank j to rank r has the same size in j's send counts and
 * r's receive counts, so both sides agree, per pair, how it moves:
 *  - small (< WF_ALLTOALL_CMA_PAIR_BYTES): j sends it, r receives it into
 *    place (round 0);
 *  - large: j sends r the block's address (round 0); r reads the block
 *    straight from j's input with process_vm_readv, then sends j a "done"
 *    token (round 1), which j waits for before it finishes (and the caller
 *    may reuse its input).
 * Without large blocks the schedule is one round of direct sends, at most
 * one message per pair, which is no slower than pairwise's p-1 rounds on one
 * host. Every rank must choose the same algorithm, so the choice may not
 * depend on a rank's own row of the split matrix: the selection table
 * (select.c) takes this algorithm for every alltoall of 2 ranks or more on
 * one host with cross-memory attach, whatever the sizes, after the staged
 * one ("shm"), which takes those it can run. */
#include "algo/cma.h"
#include "util/err.h"

/* Blocks of at least this many bytes are read directly. */
#define WF_ALLTOALL_CMA_PAIR_BYTES ((size_t)32 << 10)

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLTOALL && wf_cma_usable(a); }

static weft_status cma_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  const char *in = a->in;
  char *out = a->out;
  /* send_counts[r] == recv_counts[r]: checked by the registry (validate) */
  wf_cma_sync y;
  WF_CHECK(wf_cma_setup(a, s, 0, &y, "alltoall cma"));
  int reads = 0, read_by = 0;
  for (int d = 1; d < p; d++) {
    int to = (r + d) % p, from = (r - d + p) % p;
    size_t sb = a->send_counts[to] * es, rb = a->recv_counts[from] * es;
    const char *sp = in + a->send_displs[to] * es;
    if (sb >= WF_ALLTOALL_CMA_PAIR_BYTES) {
      wf_cma_send_addr(s, &y, to, sp);
      read_by++;
    } else {
      wf_sched_send(s, to, sp, sb);
    }
    if (rb >= WF_ALLTOALL_CMA_PAIR_BYTES) {
      wf_cma_recv_addr(s, &y, from);
      reads++;
    } else {
      wf_sched_recv(s, from, out + a->recv_displs[from] * es, rb);
    }
  }
  wf_sched_copy(s, out + a->recv_displs[r] * es, in + a->send_displs[r] * es, a->recv_counts[r] * es);
  for (int d = 1; d < p && reads; d++) {
    int from = (r - d + p) % p;
    size_t rb = a->recv_counts[from] * es;
    if (rb >= WF_ALLTOALL_CMA_PAIR_BYTES)
      wf_sched_cma_read(s, out + a->recv_displs[from] * es, wf_cma_peer(a, &y, from, 0), rb);
  }
  wf_sched_end_round(s);
  for (int d = 1; d < p && (reads || read_by); d++) {
    int to = (r + d) % p, from = (r - d + p) % p;
    if (a->recv_counts[from] * es >= WF_ALLTOALL_CMA_PAIR_BYTES) wf_cma_send_tok(s, &y, from);
    if (a->send_counts[to] * es >= WF_ALLTOALL_CMA_PAIR_BYTES) wf_cma_recv_tok(s, &y, to);
  }
  wf_sched_end_round(s);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "alltoall cma: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_alltoall_cma = {
    .name = "cma",
    .coll = WF_COLL_ALLTOALL,
    .supports = cma_supports,
    .build = cma_build,
};
