/* topo_info.c - the internal topology view of a live world (topo_info.h),
 * for weft-info --topology. Everything read here is set before the engine
 * thread starts and never changed while the world lives: the peer table,
 * the shared-memory transport handle and the world group's topology
 * (w->world_gs: not w->gs, which the engine reallocates as groups come). */
#include "engine/topo_info.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "host/segment.h"
#include "util/err.h"
#include "util/settings.h"

weft_status wf_world_topo_view(weft_world *w, wf_topo_view *v) {
  memset(v, 0, sizeof *v);
  if (!w || w->magic != WF_WORLD_MAGIC) return wf_err(WEFT_ERR_MISUSE, "topology view: not a live world handle");
  if (!w->world_gs) return wf_err(WEFT_ERR_INTERNAL, "topology view: the world group is not registered");
  int n = w->size;
  const wf_topo *t = &w->world_gs->topo;
  v->rank = w->rank;
  v->size = n;
  v->nhosts = t->nhosts;
  int *ints = malloc(sizeof(int) * (size_t)n * 4);
  v->host_name = calloc((size_t)(t->nhosts > 0 ? t->nhosts : 1), sizeof *v->host_name);
  if (!ints || !v->host_name) {
    free(ints);
    free(v->host_name);
    memset(v, 0, sizeof *v);
    return wf_err(WEFT_ERR_NO_MEMORY, "topology view: out of memory for %d ranks", n);
  }
  v->host_of = ints;
  v->local_rank = ints + n;
  int *thost = ints + 2 * n, *tpid = ints + 3 * n;
  for (int i = 0; i < n; i++) {
    /* world group rank i is world rank i */
    v->host_of[i] = thost[i] = t->host_of[i];
    tpid[i] = t->pid_of ? t->pid_of[i] : 0;
    v->local_rank[i] = w->peers[i].local_rank;
    if (t->host_of[i] >= 0 && t->host_of[i] < t->nhosts && !v->host_name[t->host_of[i]][0])
      memcpy(v->host_name[t->host_of[i]], w->peers[i].host, sizeof v->host_name[0]);
  }
  if (n == 1) v->local_rank[0] = 0; /* a world of one has no rendezvous */
  v->topo = (wf_topo){.nhosts = t->nhosts, .host_of = thost, .pid_of = tpid, .cma = t->cma, .rings = t->rings, .stage = t->stage};
  v->set = w->set;
  int mpi = !strcmp(w->set.transport, "mpi");
  v->cross_transport = mpi ? "mpi" : "tcp";
  v->local_transport = w->shm ? "shm" : v->cross_transport;
  if (w->host) {
    v->seg_nlocal = wf_host_nlocal(w->host);
    v->seg = *wf_host_layout(w->host);
    const int *numa = wf_host_numa(w->host);
    if (numa && (v->seg_numa = malloc(sizeof(int) * (size_t)v->seg_nlocal)))
      memcpy(v->seg_numa, numa, sizeof(int) * (size_t)v->seg_nlocal);
  }
  return WEFT_OK;
}

void wf_topo_view_free(wf_topo_view *v) {
  free(v->host_of);
  free(v->host_name);
  free(v->seg_numa);
  memset(v, 0, sizeof *v);
}
