/* coll_shm.c - the staged shared-memory algorithms ("shm"), one descriptor
 * per collective; the runtime and synchronisation are in shm_stage.c.
 *   allreduce      rank r folds slice r of every chunk straight out of its
 *                  peers' staging slots (its own slice from its buffer), in
 *                  rank order, so the bits are those of "direct"; the result
 *                  goes to its buffer and its slot, and the ranks copy each
 *                  other's reduced slices out. Up to 64 KiB every rank folds
 *                  the whole tensor from all slots (one flag round).
 *   reducescatter  each rank copies the pieces of the other ranks' blocks
 *                  into its slot; rank r folds its block's pieces straight
 *                  out of every slot, in rank order, into its output.
 *   allgather      each rank copies its block into its slot, chunk by
 *                  chunk, and every rank copies the others' chunks out.
 *   broadcast      the root copies the tensor into its slots, chunk by
 *                  chunk; every other rank copies each chunk out as it lands.
 *   alltoall       each rank copies a piece of every block it sends into its
 *                  slot (its own block straight to its output), and every
 *                  rank copies its pieces out of the others' slots. The
 *                  chunk count follows the largest block of the whole split
 *                  matrix, which every rank knows (block_max), so uneven
 *                  splits run too.
 * The allreduce also runs fused tensors where they lie (wf_seg), unpacked.
 * The selection table (select.c) takes each at every size it supports, on
 * one host with staging attached, ahead of direct, ring, tree, chain and cma
 * (see bench/NOTES.md and docs/design.md). */
#include "algo/shm_stage.h"

static int shm_supports(const wf_coll_args *a) {
  return (a->coll == WF_COLL_ALLREDUCE || a->coll == WF_COLL_REDUCESCATTER || a->coll == WF_COLL_ALLGATHER ||
          a->coll == WF_COLL_BROADCAST || a->coll == WF_COLL_ALLTOALL) &&
         wf_stage_supports(a);
}

#define SHM_ALGO(var, c)                                                                                             \
  const wf_algo var = {                                                                                              \
      .name = "shm", .coll = c, .supports = shm_supports, .build = wf_stage_build,                                  \
      .segments = (c) == WF_COLL_ALLREDUCE}

SHM_ALGO(wf_algo_allreduce_shm, WF_COLL_ALLREDUCE);
SHM_ALGO(wf_algo_reducescatter_shm, WF_COLL_REDUCESCATTER);
SHM_ALGO(wf_algo_allgather_shm, WF_COLL_ALLGATHER);
SHM_ALGO(wf_algo_broadcast_shm, WF_COLL_BROADCAST);
SHM_ALGO(wf_algo_alltoall_shm, WF_COLL_ALLTOALL);
