/* permute_direct.c - permute (TensorFlow's CollectivePermute, weft_permute):
 * rank r sends its whole tensor to perm[r] and receives the tensor of the
 * rank q with perm[q] == r. One round: the send and the receive are in
 * flight together, so every cycle of the permutation moves at once and no
 * pair waits on another; a fixed point (perm[r] == r) is a local copy. The
 * executor gives the endpoints (send_to, recv_from) from the agreed
 * permutation; zero elements move nothing. */
#include "algo/algo.h"
#include "util/err.h"

static int permute_supports(const wf_coll_args *a) { return a->coll == WF_COLL_PERMUTE && a->size >= 1; }

static weft_status permute_build(const wf_coll_args *a, wf_sched *s) {
  size_t bytes = a->count * a->elem_size;
  if (!bytes) return WEFT_OK;
  if (a->send_to == a->rank) {
    wf_sched_copy(s, a->out, a->in, bytes);
  } else {
    wf_sched_send(s, a->send_to, a->in, bytes);
    wf_sched_recv(s, a->recv_from, a->out, bytes);
  }
  wf_sched_end_round(s);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "permute direct: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_permute_direct = {
    .name = "direct",
    .coll = WF_COLL_PERMUTE,
    .supports = permute_supports,
    .build = permute_build,
};
