/* submit.h - the engine's submission interface: all that api/ calls. A
 * caller hands the engine requests (alone or as a grouped op), registers
 * and unregisters groups, aborts the world and asks for its failure; the
 * requests' own life is request.h's. Any thread. */
#ifndef WF_ENGINE_SUBMIT_H
#define WF_ENGINE_SUBMIT_H
#include <stdint.h>

#include "bootstrap/mpi_boot.h"
#include "engine/engine.h"
#include "engine/request.h"

/* A world of size ranks, this one rank, with the settings resolved at init
 * and the operation timeout (<= 0: the settings'); mpic: the MPI
 * communicator it bootstrapped from, or NULL ([mpi]; the world owns it, and
 * closes it also on failure). NULL: out of memory. The caller fills in what
 * the rendezvous found (peers, local and cross ranks), then starts the
 * engine (wf_engine_start). */
weft_world *wf_world_new(int rank, int size, const wf_settings *set, double timeout_seconds, wf_mpi_comm *mpic);
/* Stops the engine (wf_engine_stop) and frees everything; the handles of
 * requests seen complete stay usable. NULL is a no-op. */
void wf_world_free(weft_world *w);

/* A device tensor's checks at submission (t->device >= 0; bytes: its
 * size): a known kind and index, the backend loads (else
 * WEFT_ERR_NOT_SUPPORTED with its reason), data is memory of that device
 * when bytes > 0 (else WEFT_ERR_INVALID_ARGUMENT; never touches it). fn,
 * name and what ("input") name it in the message. */
weft_status wf_submit_check_device(const char *fn, const char *name, const char *what, const weft_tensor *t,
                                   size_t bytes);
/* "host memory", "cuda:0", "sim:1": where t lives (messages). */
const char *wf_submit_device_str(const weft_tensor *t, char *buf, size_t len);
/* This process's device kinds for the rendezvous (weft_locality's
 * device_kinds: wf_device_kinds_present). */
uint32_t wf_submit_device_kinds(void);
/* t's device as the wire has it (WF_DEVICE_CODE). */
int32_t wf_submit_device_code(const weft_tensor *t);
/* weft_device_available (engine/devavail.c): whether a WEFT_DEVICE_KIND_*'s
 * backend loads and sees a device; *count (may be NULL) gets how many. */
weft_status wf_submit_device_available(int device_kind, int *count);

/* Registers r's name in flight and hands it to the one-host path or the
 * engine, under one lock (r from wf_request_make, described): WEFT_OK and
 * *out = r, or an error (the world failed or is finalizing, the name is in
 * use) after freeing r. */
weft_status wf_submit(weft_request *r, weft_request **out);
/* Under w->mu: one wait on the world's completion signal (done_cv), at most
 * until deadline (wf_now_ns time); 0, without waiting, once it has passed.
 * The caller loops on its own condition. */
int wf_world_wait_once(weft_world *w, int64_t deadline);
/* A grouped op: the children kids[0..n) (built and checked) are registered
 * and queued under one lock, so the engine sees them in one drain and they
 * reach the coordinator in one batch; parent completes with the last and
 * keeps a reference on each (weft_request_output_at). fn names the API
 * call in errors. On failure frees everything. */
weft_status wf_submit_grouped(const char *fn, weft_group *g, weft_request *parent, weft_request **kids, int n,
                              weft_request **req);
/* Registers g (its members' key, e.g. "0,2,5,"): id_of(key, count) gives
 * its id from the number of groups created with those members so far; the
 * engine registers it on its next pass. WEFT_OK, NO_MEMORY or the world's
 * failure. */
weft_status wf_group_register(weft_world *w, weft_group *g, const char *members,
                              uint32_t (*id_of)(const char *, intptr_t));
/* A keyed group as this rank knows it (weft_group_resolve), in the world's
 * list under mu; freed with the world (its group by the engine). */
enum { WF_KEYED_RESOLVING, WF_KEYED_DONE, WF_KEYED_FAILED };
typedef struct wf_keyed {
  struct wf_keyed *next;
  int32_t key, size, device;
  int state;            /* WF_KEYED_* */
  weft_group *group;    /* DONE */
  weft_status st;       /* FAILED: the answer every later call gets */
  char msg[1024];
} wf_keyed;
/* Registers g under the id the group leader gave it (a keyed group). */
weft_status wf_group_register_id(weft_world *w, weft_group *g, uint32_t id);
/* Asks the group leader (world rank 0 for a keyed group, the lowest member
 * for a listed one) about join (GROUP_JOIN, copied) and
 * waits for its answer (blocking; bounded by twice the timeout plus the
 * heartbeat timeout). WEFT_OK and *reply (owned by the caller:
 * wf_group_msg_free) with the members; or the leader's error (its message
 * set, *reply holding it), or the world's failure. Any thread but the
 * engine's. */
weft_status wf_resolve_wait(weft_world *w, const wf_group_msg *join, wf_group_msg *reply);
/* weft_request_cancel: WEFT_OK when the engine will ask r's coordinator to
 * withdraw it (r then completes CANCELLED, or as usual when its collective
 * was agreed first); MISUSE when r is complete or running; NOT_SUPPORTED
 * for a grouped op, a join or an operation on the one-host board. */
weft_status wf_submit_cancel(weft_request *r);
/* Step sequences (engine/steps.c; any thread but the engine's): g's
 * current step id of graph key key, cached, else (refresh: always) from
 * the group's leader (blocking, bounded by the timeout plus the heartbeat
 * timeout); retiring id advances this rank's copy when id is the current
 * one (NOT_FOUND: no sequence here; INVALID_ARGUMENT: another id). */
weft_status wf_step_get(weft_group *g, int64_t key, int refresh, int64_t *id);
weft_status wf_step_retire(weft_group *g, int64_t key, int64_t id);
/* g goes: the engine forgets and frees it. */
void wf_group_unregister(weft_world *w, weft_group *g);
/* weft_abort: fails the world (sticky, ABORTED) and has the engine tell
 * the peers. */
void wf_world_abort(weft_world *w, const char *reason);
/* The world's failure (WEFT_OK while healthy), with its message set. */
weft_status wf_world_status(weft_world *w);

#endif
