/* topo_info.h - an internal view of a live world's layout for tools
 * (weft-info --topology): its hosts, every rank's host and local rank, the
 * transports between ranks of one host and of different hosts, the layout
 * of this rank's host segment, and the world group's topology exactly as the algorithms see it (wf_topo). Not
 * part of the public API (weft.h). */
#ifndef WF_API_TOPO_INFO_H
#define WF_API_TOPO_INFO_H
#include "algo/algo.h"
#include "host/segment.h"
#include "weft.h"
#include "wire/wire.h"

typedef struct wf_topo_view {
  int rank, size, nhosts;
  int *host_of;                   /* world rank -> host index (hosts in order of their lowest rank) */
  int *local_rank;                /* world rank -> rank among its host's ranks */
  char (*host_name)[WF_HOST_MAX + 1]; /* host index -> name */
  const char *local_transport;    /* between ranks of one host: "shm", "tcp" or "mpi" */
  const char *cross_transport;    /* between hosts: "tcp" or "mpi" */
  wf_topo topo;                   /* the world group's, as its algorithms get it (own copies) */
  wf_settings set;                /* the world's settings, resolved at init */
  int seg_nlocal;                 /* ranks sharing this rank's host segment (0: no segment) */
  wf_shm_layout seg;              /* its layout (host/segment.h), when seg_nlocal > 0 */
  int *seg_numa;                  /* its NUMA layout (wf_host_numa: node per local rank, -1 unknown), or NULL */
} wf_topo_view;

/* Fills *v (allocating its arrays) from a world that weft_init returned.
 * Reads only what the world fixed before its engine started; the caller
 * must not create or destroy groups meanwhile. */
weft_status wf_world_topo_view(weft_world *w, wf_topo_view *v);
void wf_topo_view_free(wf_topo_view *v);

#endif
