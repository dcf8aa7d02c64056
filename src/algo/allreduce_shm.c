/* allreduce_shm.c - allreduce: rank r folds slice r of every chunk straight out of its peers'
 * staging slots (its own slice from its buffer), in rank order, so the bits
 * are those of "direct"; the result goes to its buffer and its slot, and
 * the ranks copy each other's reduced slices out. Up to 64 KiB every rank
 * folds the whole tensor from all slots (one flag round).
 * Runtime and synchronisation: shm_stage.c. */
#include "algo/shm_stage.h"

static int shm_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLREDUCE && wf_stage_supports(a); }

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

const wf_algo wf_algo_allreduce_shm = {
    .name = "shm",
    .coll = WF_COLL_ALLREDUCE,
    .supports = shm_supports,
    .cost = shm_cost,
    .prefer = shm_prefer,
    .build = wf_stage_build,
};
