/* broadcast_shm.c - broadcast: the root copies the tensor into its staging slots,
 * chunk by chunk; every other rank copies each chunk out as it lands.
 * Runtime and synchronisation: shm_stage.c. */
#include "algo/shm_stage.h"

static int shm_supports(const wf_coll_args *a) { return a->coll == WF_COLL_BROADCAST && wf_stage_supports(a); }

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

const wf_algo wf_algo_broadcast_shm = {
    .name = "shm",
    .coll = WF_COLL_BROADCAST,
    .supports = shm_supports,
    .cost = shm_cost,
    .prefer = shm_prefer,
    .build = wf_stage_build,
};
