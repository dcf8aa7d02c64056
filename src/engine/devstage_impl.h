/* devstage_impl.h - internals shared by devstage.c (a request's staging:
 * submission, the gate, the copy up, the lists) and devpool.c (the world's
 * bounded pool of pinned chunk buffers, chunked copies and the allreduce /
 * broadcast pipeline). Engine layer only; devstage.h has the design. */
#ifndef WF_ENGINE_DEVSTAGE_IMPL_H
#define WF_ENGINE_DEVSTAGE_IMPL_H
#include <pthread.h>
#include <stdint.h>

#include "device/device.h"
#include "engine/devstage.h"

#define WF_DS_MAX_INDEX 16 /* devices per kind with a staging stream */

/* One chunk buffer of a pool. Its device-side users are copies queued on
 * staging streams; ev[i] is recorded on device i's staging stream after
 * the latest ones (copies up on the up stream included: the staging stream
 * waits for them first), used: the devices whose ev counts. The host may touch buf only
 * once every counted ev completed (wf_dslot_idle). */
typedef struct wf_dslot {
  void *buf;
  int heap;                          /* ordinary memory: pinned memory ran out */
  int overflow;                      /* not the pool's: made because none was free, freed once idle */
  int held;                          /* taken by a pipeline or a move */
  wf_dev_event *ev[WF_DS_MAX_INDEX]; /* made on first use on that device, recorded on its staging stream */
  wf_dev_event *ev_up[WF_DS_MAX_INDEX]; /* after the pipeline's copies up (up stream); the staging stream waits on it */
  uint32_t used;                     /* bit i: ev[i] was recorded by the latest use */
  struct wf_dslot *next;             /* a pool's released overflow slots */
} wf_dslot;

/* The world's pool for one device kind: made on first use (nslots buffers
 * of chunk bytes), kept until wf_devstage_stop. */
typedef struct wf_dpool {
  wf_device *dev;
  int made, nslots, alloc_index;
  size_t chunk;
  wf_dslot *slots;
  wf_dslot *overflow; /* released, still busy */
} wf_dpool;

typedef struct wf_dstage {
  struct wf_dstage *next;     /* uploading or retired list */
  weft_request *req;          /* uploading: the request it completes */
  wf_device *dev;
  int kind, index;            /* WEFT_DEVICE_KIND_CUDA / _SIM, device index */
  int bk;                     /* the backend kind (wf_device_kind): its pool */
  wf_dev_event *ready;        /* recorded on the producer's stream at submission */
  wf_dev_event *done;         /* recorded after its last copy (engine), NULL before */
  void *host;                 /* heap: the input copied down (allgather, alltoall, reducescatter) */
  void *host_out;             /* heap: their host result */
  void *user_in, *user_out;   /* the caller's device pointers */
  int ready_done, restored, bounced, piped;
  weft_status st;             /* a failed device step (WEFT_OK: none) */
  char msg[512];
} wf_dstage;

struct wf_dstage_world {
  pthread_mutex_t mu;         /* streams */
  wf_dev_stream *streams[WF_DEVICE_KINDS][WF_DS_MAX_INDEX];    /* copies down, moves; done events */
  wf_dev_stream *up_streams[WF_DEVICE_KINDS][WF_DS_MAX_INDEX]; /* the pipeline's copies up */
  wf_device *sdev[WF_DEVICE_KINDS][WF_DS_MAX_INDEX];
  wf_dpool pools[WF_DEVICE_KINDS]; /* by backend kind, engine thread only */
  _Atomic int used;           /* relaxed: only skips the executor's look when 0 */
  wf_dstage *uploading;       /* engine thread only */
  wf_dstage *retired;         /* engine thread only */
  int pipes_waiting;          /* executing pipelines waiting for a chunk (engine thread) */
};

/* devstage.c: the world's staging stream of device (bk, index), made on
 * first use; makes index current. */
weft_status wf_ds_stream(weft_world *w, wf_device *d, int bk, int index, wf_dev_stream **out);
/* Its second stream, for the pipeline's copies up (so that they run beside
 * the copies down), made on first use; makes index current. */
weft_status wf_ds_up_stream(weft_world *w, wf_device *d, int bk, int index, wf_dev_stream **out);
/* Records a failed step of s (the first one) with the thread's message. */
weft_status wf_ds_fail(wf_dstage *s, const weft_request *r, weft_status st, const char *step);

/* devpool.c */
/* Copies bytes between s's device memory dptr and host memory hbuf through
 * the pool, chunk by chunk, on s's staging stream. D2H returns once hbuf
 * holds the data; H2D once the last copy is queued (s->done recorded after
 * it). Waits (polling the copies' events) until deadline at most: then
 * WEFT_ERR_TIMEOUT. Engine thread. */
weft_status wf_dpool_move(weft_world *w, wf_dstage *s, void *dptr, void *hbuf, size_t bytes, wf_copy_dir dir,
                          int64_t deadline);
/* Frees released overflow slots whose copies are done; 1 while some remain. */
int wf_dpool_poll(weft_world *w);
/* Stop: waits until end for the slots' copies, frees every pool. */
void wf_dpool_free_all(weft_world *w, int64_t end);

#endif
