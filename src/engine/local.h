/* local.h - the engine's use of the host layer (engine lifecycle only,
 * before the engine thread runs or after it stopped): the host's shared
 * segment and the ring transport over it, the host's agreement on
 * cross-memory attach, and the staging regions handed to the world group. */
#ifndef WF_ENGINE_LOCAL_H
#define WF_ENGINE_LOCAL_H
#include "engine/engine.h"

/* Shared memory for the ranks on this host (WEFT_TRANSPORT auto or shm;
 * none with tcp or mpi): w->host, the segment, and w->shm, the ring
 * transport over it. Uses the blocking bootstrap sockets, before TCP takes
 * them. When every local rank fails alike (no space in /dev/shm, ...) the
 * world goes on without shared memory (auto) or fails (shm). */
weft_status wf_local_attach(weft_world *w, int *fds);
/* The transport, then the segment. Idempotent. */
void wf_local_detach(weft_world *w);
/* Same-host ranks agree on cross-memory attach (sets w->cma_ok). */
weft_status wf_local_cma(weft_world *w, const int *fds);

/* The NUMA node of each of the nlocal local ranks local[] (world ranks,
 * ascending; nlocal entries malloc'd, -1: unknown), for the segment's
 * placement (host/numa.h): WEFT_NUMA_NODES's layout, else each rank's CPU
 * affinity; NULL with "off", a bad layout (warned about) or no memory.
 * *machine: this machine's node count. */
int *wf_local_numa_nodes(const weft_world *w, const int *local, int nlocal, int *machine);

/* Bytes of each local rank's staging region for a segment of nlocal ranks
 * (WEFT_SHM_STAGE_BYTES, shrunk so that all regions stay within 256 MiB;
 * 0: none). Only the segment creator's value counts. */
size_t wf_stage_bytes(const wf_settings *s, int nlocal);
/* After the shared-memory transport and the world group's state exist: if
 * every rank of the world is local and the segment has staging regions,
 * gives the world group's topology its staging view (the only group that
 * may use it) and makes the shared-memory wait watch its flags. WEFT_OK
 * also when staging does not apply. */
weft_status wf_stage_attach(weft_world *w);
/* Before the world group's state goes (the engine thread has stopped, no
 * collective runs). Idempotent. */
void wf_stage_detach(weft_world *w);

#endif
