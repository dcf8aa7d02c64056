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

/* Below this the transport's tree/chain are as fast. With two ranks they
 * are always at least as fast (measured on 2 cores): the chain's copies,
 * into the ring by the root and out of it by the receiver, run on both
 * cores at once, while here the receiver alone copies (128 MiB: ~6 GB/s
 * against ~3.5). With more ranks the chain's middle ranks copy twice, the
 * readers here once, all at the same time. */
#define WF_BROADCAST_CMA_MIN_BYTES ((size_t)64 << 10)

static int cma_supports(const wf_coll_args *a) { return a->coll == WF_COLL_BROADCAST && wf_cma_usable(a); }

static int cma_prefer(const wf_coll_args *a) {
  return a->size > 2 && a->count >= WF_BROADCAST_CMA_MIN_BYTES / a->elem_size ? 10 : 0;
}

/* Chosen by its claim (prefer) only, never by the cost models of the
 * transport's algorithms: the claim's threshold was measured. */
static double cma_cost(const wf_coll_args *a) {
  (void)a;
  return 1.0;
}

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
    .cost = cma_cost,
    .prefer = cma_prefer,
    .build = cma_build,
};
