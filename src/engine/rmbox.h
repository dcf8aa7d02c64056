/* rmbox.h - remote execution's frames between ranks of one host through the
 * host segment's remote rings (host/mailbox.h), in the threads that send
 * and wait: no engine thread, no socket. The layer above (remote/api.c)
 * sends every remote frame through wf_rmbox_send and drains the rings into
 * this rank from its waiting threads (wf_rmbox_drain), sleeping on this
 * rank's two bells.
 *
 * Order per ordered pair (i -> j) across the two ways (the ring and the
 * engine's path, taken by a frame too large for a slot, a full ring, a call
 * frame while j's worker is busy and nothing of j sleeps on its WORK bell,
 * or WEFT_REMOTE_MAILBOX=0): i puts a frame in the ring only once j has taken
 * every frame i sent it on the engine's path (j counts them in the ring's
 * control line), and j takes every frame of ring (i -> j) before it acts on
 * one of i's frames from the engine (wf_ext_on_frame drains the ring
 * first). So j sees i's frames in the order i sent them. */
#ifndef WF_ENGINE_RMBOX_H
#define WF_ENGINE_RMBOX_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

typedef struct wf_rmbox wf_rmbox; /* weft_world.rmbox */

enum { WF_RMBOX_BELL_WORK = 0, WF_RMBOX_BELL_DONE = 1 }; /* the bells, host/mailbox.h */

typedef weft_status (*wf_rmbox_deliver_fn)(void *ctx, int peer, uint8_t type, const uint8_t *p, size_t n, char *err,
                                           size_t errlen);

/* Engine start / stop: the rings when the world has a host segment with
 * them (else w->rmbox stays NULL and every frame takes the engine's path).
 * Detach logs the counts (a line tests read). */
weft_status wf_rmbox_attach(weft_world *w);
void wf_rmbox_detach(weft_world *w);

/* Sends a whole remote frame (taken) to peer (not this rank): through the
 * ring when peer is on this host and the ring may take it, else queued for
 * the engine (wf_ext_send). Any thread. */
weft_status wf_rmbox_send(weft_world *w, int peer, wf_buf *frame);

/* Delivers the frames waiting in the rings into this rank (from every local
 * peer, or only from `from` >= 0), in order, through fn; returns how many.
 * block: wait for another thread draining now (else return -1 then: that
 * one may have passed what the caller was woken for; look again soon). A
 * malformed frame fails the world (may_fail) or is logged and dropped;
 * frames of a peer that died are dropped. Any thread; takes no lock of the
 * world, so the caller may hold w->mu only with may_fail 0. */
int wf_rmbox_drain(weft_world *w, int from, int block, int may_fail, wf_rmbox_deliver_fn fn, void *ctx);

/* peer's frame from the engine's path was acted on: counted for peer's
 * order (after wf_rmbox_drain(w, peer, ...) and the delivery). */
void wf_rmbox_engine_seen(weft_world *w, int peer);

/* This rank's bells (WF_RMBOX_BELL_*: call frames and jobs, replies): the
 * word, sleeping while it is still `seen` (at most ns), ringing it. Any
 * thread; no lock. */
uint32_t wf_rmbox_bell(weft_world *w, int which);
void wf_rmbox_sleep(weft_world *w, int which, uint32_t seen, int64_t ns);
void wf_rmbox_ring(weft_world *w, int which);
/* This rank's worker runs a function (on 1) or no longer (0): senders then
 * send call frames on the engine's path unless a thread of this rank sleeps
 * on its WORK bell. Any thread; no lock. */
void wf_rmbox_busy(weft_world *w, int on);

#endif
