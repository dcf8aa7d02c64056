/* local.c - the engine's use of the host layer: the host's shared segment
 * and the ring transport over it, the CMA agreement, and the staging
 * regions handed to the world group. Staging: this rank's view of the
 * host's staging regions is given to the world group, the only group
 * allowed to use them (groups run concurrently; a collective of another group could
 * otherwise overwrite a region still being read). Every local rank decides
 * alike: the segment exists on all or none, its staging size is the
 * creator's, and the world's ranks are all local or not. */
#include "engine/local.h"

#include <stdlib.h>

#include "algo/shm_stage.h"
#include "host/cma_agree.h"
#include "host/numa.h"
#include "engine/onehost.h"
#include "util/params.h"
#include <string.h>
#include "host/segment.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"

#define STAGE_TOTAL_MAX ((int64_t)256 << 20)

size_t wf_stage_bytes(const wf_settings *s, int nlocal) {
  int64_t b = s->shm_stage_bytes;
  if (b <= 0 || nlocal < 2) return 0;
  if (b > STAGE_TOTAL_MAX / nlocal) b = STAGE_TOTAL_MAX / nlocal;
  return (size_t)b;
}

static void wake_peers(void *ctx) { wf_shm_wake_peers(ctx); }

weft_status wf_stage_attach(weft_world *w) {
  if (!w->host || !w->shm || !w->world_gs || w->size < 2 || wf_host_nlocal(w->host) != w->size) return WEFT_OK;
  int n = w->size;
  void **regions = malloc(sizeof *regions * (size_t)n);
  if (!regions) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory attaching the staging regions");
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    regions[i] = wf_host_stage(w->host, i, &bytes);
    if (!regions[i]) { /* WEFT_SHM_STAGE_BYTES=0 on the segment's creator */
      free(regions);
      return WEFT_OK;
    }
  }
  wf_stage *g = NULL;
  weft_status st = wf_stage_create(n, wf_host_local_index(w->host), regions, bytes, wake_peers, w->shm, &g);
  free(regions);
  if (st != WEFT_OK || !g) return st; /* !g: regions too small to use */
  /* the node-aware pattern's plan, from the layout in the segment's header
   * (the creator's: every local rank has the same; local index == rank) */
  wf_stage_set_numa(g, wf_host_numa(w->host));
  w->world_gs->topo.stage = g;
  /* the coordinator may fuse allreduces of any size when the executor will
   * run them in place (fuse.c): staging, unless another algorithm is forced */
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = w->world_gs->group->rank, .size = w->world_gs->group->size, .count = (size_t)1 << 20,
                    .topo = &w->world_gs->topo, .set = &w->set};
  if (w->world_gs->coord && wf_algo_takes_segments(&a, w->set.algo[WF_COLL_ALLREDUCE]))
    wf_coord_set_unpacked_allreduce(w->world_gs->coord);
  wf_shm_set_poll(w->shm, wf_stage_ready, g);
  WF_INFO(WF_SUB_SHM, "staging regions: %d ranks x %zu KiB%s", n, bytes >> 10,
          wf_stage_numa(g) ? ", node-aware patterns (NUMA layout)" : "");
  return WEFT_OK;
}

void wf_stage_detach(weft_world *w) {
  if (!w->world_gs || !w->world_gs->topo.stage) return;
  if (w->shm) wf_shm_set_poll(w->shm, NULL, NULL);
  wf_stage_leave(w->world_gs->topo.stage); /* peers still waiting for this rank stop */
  wf_stage_destroy(w->world_gs->topo.stage);
  w->world_gs->topo.stage = NULL;
}

int *wf_local_numa_nodes(const weft_world *w, const int *local, int nlocal, int *machine) {
  const char *spec = wf_param_str("WEFT_NUMA_NODES");
  *machine = wf_numa_machine(NULL, WF_NUMA_MAX_NODES);
  if (spec && !strcmp(spec, "off")) return NULL;
  int *nodes = malloc(sizeof *nodes * (size_t)nlocal), *pids = malloc(sizeof *pids * (size_t)nlocal);
  char err[256];
  if (nodes && pids && spec && *spec && !wf_numa_parse_nodes(spec, nlocal, nodes, err, sizeof err)) {
    WF_WARN(WF_SUB_SHM, "%s: no NUMA placement", err);
    free(nodes);
    nodes = NULL;
  } else if (nodes && pids && !(spec && *spec)) {
    for (int i = 0; i < nlocal; i++) pids[i] = (int)w->peers[local[i]].pid;
    wf_numa_detect(pids, nlocal, nodes);
  } else if (!pids) {
    free(nodes);
    nodes = NULL;
  }
  free(pids);
  return nodes;
}

static void on_shm_error(void *ctx, int peer, weft_status st, const char *msg) {
  weft_world *w = ctx;
  wf_world_fail(w, st, "%s (shared memory, rank %d on %s)", msg, peer, w->peers[peer].host);
}

/* Shared memory for the ranks on this host (WEFT_TRANSPORT: auto, shm,
 * tcp). Uses the blocking bootstrap sockets, before TCP takes them. */
weft_status wf_local_attach(weft_world *w, int *fds) {
  const char *tp = w->set.transport; /* auto, shm, tcp or mpi (checked by wf_settings_resolve) */
  if (!strcmp(tp, "tcp") || !strcmp(tp, "mpi") /* [mpi] all data over MPI */ || w->size == 1) return WEFT_OK;
  int *local = malloc(sizeof(int) * (size_t)w->size), nlocal = 0;
  if (!local) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < w->size; i++) {
    if (w->peers[i].cross_rank == w->peers[w->rank].cross_rank) local[nlocal++] = i;
    else if (!strcmp(tp, "shm")) {
      free(local);
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "WEFT_TRANSPORT=shm, but rank %d is on another host (%s)", i,
                    w->peers[i].host);
    }
  }
  weft_status st = WEFT_OK;
  if (nlocal > 1) {
    wf_host_cfg hc = {.rank = w->rank,
                      .size = w->size,
                      .local_ranks = local,
                      .nlocal = nlocal,
                      .fds = fds,
                      .job_id = wf_param_str("WEFT_JOB_ID"),
                      .timeout_seconds = w->set.init_timeout_seconds,
                      .slot_bytes = w->set.shm_slot_bytes > 0 ? (size_t)w->set.shm_slot_bytes : 0,
                      .nslots = w->set.shm_slots > 0 ? (size_t)w->set.shm_slots : 0,
                      .board_bytes = wf_fast_board_bytes(&w->set, nlocal),
                      .board_param = wf_fast_large_bytes(&w->set, nlocal),
                      .stage_bytes = wf_stage_bytes(&w->set, nlocal)};
    int machine = 1;
    int *nodes = w->rank == local[0] ? wf_local_numa_nodes(w, local, nlocal, &machine) : NULL;
    hc.numa_nodes = nodes;
    st = wf_host_create(&hc, &w->host);
    free(nodes);
    /* do without shared memory only when every local rank failed the same
     * way and the sockets are clean: not after a timeout or a lost peer */
    if (st != WEFT_OK && st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_PEER_LOST && strcmp(tp, "shm")) {
      WF_WARN(WF_SUB_SHM, "shared memory is not available (%s); using TCP between local ranks", wf_err_msg());
      st = WEFT_OK;
    }
    if (w->host) {
      wf_shm_cfg cfg = {.rank = w->rank,
                        .size = w->size,
                        .copy_mode = !strcmp(w->set.shm_copy, "memcpy") ? WF_SHM_COPY_MEMCPY
                                     : !strcmp(w->set.shm_copy, "nt")   ? WF_SHM_COPY_NT
                                                                        : WF_SHM_COPY_AUTO,
                        .cb_ctx = w,
                        .on_error = on_shm_error};
      st = wf_shm_create(w->host, &cfg, &w->shm);
    }
  }
  free(local);
  return st;
}

void wf_local_detach(weft_world *w) {
  wf_shm_destroy(w->shm);
  w->shm = NULL;
  wf_host_destroy(w->host);
  w->host = NULL;
}

weft_status wf_local_cma(weft_world *w, const int *fds) {
  int want = w->set.cma != 0 && strcmp(w->set.transport, "mpi") != 0;
  return wf_cma_agree(w->rank, w->size, w->peers, fds, want, w->set.init_timeout_seconds, &w->cma_ok);
}
