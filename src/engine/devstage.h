/* devstage.h - device tensors staged through pinned host memory, in stream
 * order (devstage.c; Horovod's PushHorovodOperationCudaOnCPU is the model).
 *
 * A request's life with a device input:
 *  1. submission (caller thread, wf_devstage_in): an event recorded on the
 *     producer's stream (the ready event), the world's staging stream for
 *     the device made to wait on it, the copy down into a pinned host buffer
 *     queued there, then an event recorded after it (down). The request's
 *     host view (in.data, out.data) is the pinned buffer from then on: the
 *     negotiation, fusion and the algorithms see host memory only.
 *  2. execution (engine thread): a response starts only when every
 *     request of it has its copy down done (wf_devstage_ready); the
 *     engine polls again soon (wf_devstage_next) while one has not.
 *  3. after the host collective (wf_devstage_upload): the copy up into the
 *     device output queued on the staging stream, the event recorded again
 *     (up); the request completes when the engine sees up complete
 *     (wf_devstage_poll), or at once when a consumer stream was given (that
 *     stream is made to wait on up).
 *  4. completion (wf_devstage_detach, from wf_request_complete_many): the
 *     caller's descriptors are restored; the pinned buffers and the event
 *     are released once the event completes (a retired list, polled).
 * A failing device call fails that request with the backend's message,
 * naming the tensor; the world goes on. Nothing here waits on a device,
 * except wf_devstage_stop (bounded) and the backend's own frees. */
#ifndef WF_ENGINE_DEVSTAGE_H
#define WF_ENGINE_DEVSTAGE_H
#include <stdint.h>

#include "engine/engine.h"

/* The world's staging state (wf_world_new / wf_world_free). NULL: out of
 * memory. */
struct wf_dstage_world *wf_devstage_world_new(void);
void wf_devstage_world_free(struct wf_dstage_world *dw);

/* Caller thread, before submission: stages r's device input (r->in.device
 * >= 0, checked). WEFT_OK, or an error naming the tensor (nothing staged). */
weft_status wf_devstage_in(weft_request *r);
/* A staged request that was not submitted after all (caller thread). */
void wf_devstage_discard(weft_request *r);

/* Engine thread: a host result of bytes for staged r (allgather, alltoall,
 * reducescatter): pinned, owned by the staging (wf_alloc_result). */
weft_status wf_devstage_host_result(weft_request *r, size_t bytes);

/* Engine thread: 1 when r may be read (no staging, its copy down done, or
 * failed: the failure is kept for its completion), else 0. */
int wf_devstage_ready(weft_world *w, weft_request *r);
/* Engine thread, for a request whose host collective succeeded: queues the
 * copy up. 1: taken (completes later, from wf_devstage_poll). 0: complete it
 * now with *st and *msg, which may have become a failure (msg lives until the
 * completion). */
int wf_devstage_upload(weft_world *w, weft_request *r, weft_status *st, const char **msg);
/* At completion (engine thread, under nothing): restores r's descriptors
 * and retires its staging. No-op without one. */
void wf_devstage_detach(weft_world *w, weft_request *r);
/* Engine loop: completes the uploads that are done, releases retired
 * staging whose event completed. */
void wf_devstage_poll(weft_world *w);
/* When the engine should look again (INT64_MAX: nothing pending). */
int64_t wf_devstage_next(weft_world *w, int64_t now);
/* 1 once any device tensor was submitted in this world (any thread). */
int wf_devstage_used(weft_world *w);
/* Engine stop (engine thread, after every request in the engine failed):
 * waits a bounded time for uploads and retired copies, fails what is left
 * with WEFT_ERR_SHUTDOWN, releases everything, destroys the streams. */
void wf_devstage_stop(weft_world *w);
/* The request's device result (wf_request_unref). */
void wf_devstage_free_result(weft_request *r);

#endif
