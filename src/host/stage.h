/* stage.h - attaches the shared-memory staging algorithms (algo/shm_stage.h)
 * to a world whose ranks are all on this host. Engine lifecycle only. */
#ifndef WF_ENGINE_STAGE_H
#define WF_ENGINE_STAGE_H
#include "engine/engine.h"

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
