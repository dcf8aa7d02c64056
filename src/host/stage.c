/* stage.c - the engine's side of the staging algorithms (algo/shm_stage.h):
 * builds this rank's view of the host's staging regions from the shared
 * segment and hands it to the world group, the only group allowed to use
 * them (groups run concurrently; a collective of another group could
 * otherwise overwrite a region still being read). Every local rank decides
 * alike: the segment exists on all or none, its staging size is the
 * creator's, and the world's ranks are all local or not. */
#include "host/stage.h"

#include <stdlib.h>

#include "algo/shm_stage.h"
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
  w->world_gs->topo.stage = g;
  /* the coordinator may fuse allreduces of any size when the executor will
   * run them in place (fuse.c): staging, unless another algorithm is forced */
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = w->world_gs->group->rank, .size = w->world_gs->group->size, .count = (size_t)1 << 20,
                    .topo = &w->world_gs->topo, .set = &w->set};
  if (w->world_gs->coord && wf_algo_takes_segments(&a, w->set.algo[WF_COLL_ALLREDUCE]))
    wf_coord_set_unpacked_allreduce(w->world_gs->coord);
  wf_shm_set_poll(w->shm, wf_stage_ready, g);
  WF_INFO(WF_SUB_SHM, "staging regions: %d ranks x %zu KiB", n, bytes >> 10);
  return WEFT_OK;
}

void wf_stage_detach(weft_world *w) {
  if (!w->world_gs || !w->world_gs->topo.stage) return;
  if (w->shm) wf_shm_set_poll(w->shm, NULL, NULL);
  wf_stage_leave(w->world_gs->topo.stage); /* peers still waiting for this rank stop */
  wf_stage_destroy(w->world_gs->topo.stage);
  w->world_gs->topo.stage = NULL;
}
