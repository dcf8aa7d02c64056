/* cma_agree.h - the ranks of a host agree, at init, whether they may read
 * each other's memory (cross-memory attach), so that every rank of a group
 * makes the same algorithm choice (algo.h: wf_topo.cma). */
#ifndef WF_HOST_CMA_AGREE_H
#define WF_HOST_CMA_AGREE_H
#include "weft.h"
#include "wire/wire.h"

/* Collective among this host's ranks (peers[i].cross_rank tells who shares
 * the host) over the authenticated bootstrap sockets fds, before anything
 * else reads them; bounded by timeout_seconds. want: this rank allows it
 * (WEFT_CMA, not the MPI transport). *agreed = 1 when every rank of the host
 * wants it and could read every other's memory; 0 otherwise (also with no
 * peer on the host). */
weft_status wf_cma_agree(int rank, int size, const wf_peer_info *peers, const int *fds, int want,
                         double timeout_seconds, int *agreed);

#endif
