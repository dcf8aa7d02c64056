/* alltoall_pairwise.c - pairwise exchange alltoallv: in round k (1..p-1)
 * rank r sends its block for r + k and receives the block from r - k, so
 * each rank has exactly one send and one receive in flight, and the sender
 * and receiver of every message agree on its round. The block a rank keeps
 * for itself is a local copy. Zero-sized blocks are skipped on both sides
 * (the sender's send count is the receiver's receive count). */
#include "algo/algo.h"
#include "util/err.h"


static int a2a_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLTOALL && a->size >= 1; }

static weft_status a2a_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  const char *in = a->in;
  char *out = a->out;
  /* send_counts[r] == recv_counts[r]: checked by the registry (validate) */
  for (int k = 1; k < p; k++) {
    int to = (r + k) % p, from = (r - k + p) % p;
    if (a->send_counts[to]) wf_sched_send(s, to, in + a->send_displs[to] * es, a->send_counts[to] * es);
    if (a->recv_counts[from]) wf_sched_recv(s, from, out + a->recv_displs[from] * es, a->recv_counts[from] * es);
    /* the self copy touches neither this round's sources nor its targets */
    if (k == 1 && a->recv_counts[r])
      wf_sched_copy(s, out + a->recv_displs[r] * es, in + a->send_displs[r] * es, a->recv_counts[r] * es);
    wf_sched_end_round(s);
  }
  if (p == 1 && a->recv_counts[r]) {
    wf_sched_copy(s, out + a->recv_displs[r] * es, in + a->send_displs[r] * es, a->recv_counts[r] * es);
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "alltoall pairwise: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_alltoall_pairwise = {
    .name = "pairwise",
    .coll = WF_COLL_ALLTOALL,
    .supports = a2a_supports,
    .build = a2a_build,
};
