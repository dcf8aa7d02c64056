/* broadcast_cma.c - broadcast among the ranks of one host through cross-
 * memory attach: every rank reads the root's buffer directly
 * (process_vm_readv), one copy, all readers at once.
 *
 * The root sends every rank its buffer's address and waits, in the same
 * round, for every receiver's "done" token before it finishes (and its
 * buffer goes back to the caller). A receiver reads the whole buffer once
 * the address arrives, then sends the token. */
#include "algo/cma.h"
#include "util/err.h"

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_BROADCAST && wf_cma_usable(a); }

static weft_status cma_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank, root = a->root;
  size_t bytes = a->count * a->elem_size;
  if (p == 1 || bytes == 0) return WEFT_OK;
  wf_cma_sync y;
  WF_CHECK(wf_cma_setup(a, s, 0, &y, "broadcast cma"));
  if (r == root) {
    for (int d = 1; d < p; d++) { /* one round: the tokens come back in it */
      wf_cma_send_addr(s, &y, (r + d) % p, a->buf);
      wf_cma_recv_tok(s, &y, (r + d) % p);
    }
  } else {
    wf_cma_recv_addr(s, &y, root);
    wf_sched_cma_read(s, a->buf, wf_cma_peer(a, &y, root, 0), bytes);
    wf_sched_end_round(s);
    wf_cma_send_tok(s, &y, root);
  }
  wf_sched_end_round(s);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "broadcast cma: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_broadcast_cma = {
    .name = "cma",
    .coll = WF_COLL_BROADCAST,
    .supports = cma_supports,
    .build = cma_build,
};
