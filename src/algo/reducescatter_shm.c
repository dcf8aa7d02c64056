/* reducescatter_shm.c - reducescatter: each rank copies the pieces of the other
 * ranks' blocks into its staging slot; rank r folds its block's pieces
 * straight out of every slot, in rank order (the bits of "direct"), into
 * its output.
 * Runtime and synchronisation: shm_stage.c. */
#include "algo/shm_stage.h"

static int shm_supports(const wf_coll_args *a) { return a->coll == WF_COLL_REDUCESCATTER && wf_stage_supports(a); }

/* Claims every size it supports: measured on 2 cores against direct, ring,
 * tree, chain and cma from 16 KiB up (docs/design.md). */
static int shm_prefer(const wf_coll_args *a) {
  (void)a;
  return 20;
}

/* Chosen by its claim only (see prefer). */
static double shm_cost(const wf_coll_args *a) {
  (void)a;
  return 1.0;
}

const wf_algo wf_algo_reducescatter_shm = {
    .name = "shm",
    .coll = WF_COLL_REDUCESCATTER,
    .supports = shm_supports,
    .cost = shm_cost,
    .prefer = shm_prefer,
    .build = wf_stage_build,
};
