/* devstage.h - device tensors staged through host memory, in stream order
 * (devstage.c, devpool.c; Horovod's PushHorovodOperationCudaOnCPU is the
 * model).
 *
 * Memory: one bounded pool of chunk buffers per world and device kind
 * (WEFT_DEVICE_POOL_BYTES in slots of WEFT_DEVICE_CHUNK_BYTES, at least one
 * slot), pinned, made on first use, reused, freed at finalize: no device
 * operation allocates or frees pinned memory (a CUDA free synchronises the
 * whole device). Copies run on the world's staging stream of the tensor's
 * device (the pipeline's copies up on a second one), queued by the engine
 * thread after setting that device current.
 *
 * A request's life with a device input:
 *  1. submission (caller thread, wf_devstage_in): an event recorded on the
 *     producer's stream (ready). Nothing is copied yet; the request keeps
 *     the caller's device pointers.
 *  2. the gate (engine, wf_devstage_ready): a response starts only when
 *     every request of it has its ready event complete (polled soon again,
 *     wf_devstage_next, while one has not).
 *  3. allreduce and broadcast (fused and grouped too) run chunk by chunk
 *     (the pipeline, wf_devpipe_*): the response's tensors, concatenated,
 *     are cut into chunks of the chunk size (the same on every rank: the
 *     setting is agreed, the response is the same), chunk k goes into
 *     pool slot k mod S: the copies down of the next S chunks are queued
 *     ahead on the staging stream, the host collective runs on chunk k once
 *     its copies are done, then its copies up are queued on the device's
 *     second (up) stream, the staging stream is made to wait for them, and
 *     the copy down of chunk k + S into the same slot follows there. So the
 *     copy down of chunk k+1, the host collective of chunk k and the copy
 *     up of chunk k-1 overlap. A slot passes between devices only idle.
 *     Allgather, alltoall and reducescatter copy the input down through the
 *     pool into ordinary memory when the response starts
 *     (wf_devstage_bounce_in), run the host collective, and copy the
 *     result up through the pool (wf_devstage_upload).
 *  4. after the last copy up an event (done) is recorded; the request
 *     completes when the engine sees it complete (wf_devstage_poll), or at
 *     once when a consumer stream was given (that stream waits on done).
 *  5. completion (wf_devstage_detach): the caller's descriptors are
 *     restored; the staging is released once its events complete.
 * Exhaustion: a response that finds every slot taken (other groups'
 * pipelines) uses one ordinary-memory chunk buffer of its own (freed when
 * its copies are done) rather than wait; pinned memory that cannot be had
 * at all makes the pool ordinary memory (a warning; copies still correct).
 * Waits on the engine thread poll events, bounded by the operation's
 * deadline: on expiry the world fails naming the tensor and the rank.
 * A failing device call fails that request with the backend's message,
 * naming the tensor. Submission touches only the caller's stream: a
 * submission racing weft_finalize never reaches the staging streams. */
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

/* Engine thread, when r's response starts (allgather, alltoall,
 * reducescatter): copies r's device input into host memory through the
 * pool (blocking, until deadline at most); r's host view from then on.
 * An error names the step (the caller names tensor and rank). */
weft_status wf_devstage_bounce_in(weft_world *w, weft_request *r, int64_t deadline);
/* Engine thread: a host result of bytes for staged r (allgather, alltoall,
 * reducescatter): ordinary memory owned by the staging (wf_alloc_result). */
weft_status wf_devstage_host_result(weft_request *r, size_t bytes);

/* Engine thread: 1 when r's response may start (no staging, or its ready
 * event complete), else 0 (after a failure: the world failed). */
int wf_devstage_ready(weft_world *w, weft_request *r);
/* Engine thread, for a request whose host collective succeeded: the copy
 * up (gathers; the pipeline's are queued already). 1: taken (completes later, from wf_devstage_poll). 0: complete it
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
/* The pipeline of an allreduce or broadcast response with a device tensor
 * (engine thread; devpool.c). */
struct wf_dpipe;
/* 1 when x's response runs through the pipeline (the same on every rank:
 * all agree on each tensor's device kind). */
int wf_devpipe_wants(const wf_exec *x);
/* Takes pool slots, queues the first copies down. *out is set even on
 * failure (free it with wf_devpipe_end). */
weft_status wf_devpipe_begin(weft_world *w, wf_gstate *gs, struct wf_dpipe **out);
size_t wf_devpipe_chunks(const struct wf_dpipe *p);
/* The elements of dtype in one chunk of w's pipelines (the agreed
 * WEFT_DEVICE_CHUNK_BYTES): the same on every rank. */
size_t wf_devpipe_chunk_elems(const weft_world *w, weft_dtype dtype);
/* The current chunk: 1 when its input is in host memory (*buf, *count: the
 * host collective's buffer, prescaled), 0 not yet (looked at again soon),
 * -1 failed or timed out (the world failed, naming tensor and rank). */
int wf_devpipe_chunk(weft_world *w, struct wf_dpipe *p, void **buf, size_t *count);
/* The current chunk's collective is done: post-scales it, queues its copies
 * up and the next copies down. 1: more chunks, 0: that was the last, -1:
 * failed (the world failed). */
int wf_devpipe_chunk_done(weft_world *w, struct wf_dpipe *p);
/* Records each device tensor's done event after its last copy, gives the
 * slots back, frees p. */
void wf_devpipe_end(weft_world *w, struct wf_dpipe *p);

/* The request's device result (wf_request_unref). */
void wf_devstage_free_result(weft_request *r);

#endif
