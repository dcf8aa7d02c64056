/* p2p.h - point-to-point transfers (weft_send / weft_recv) in the engine,
 * matched by the receiver without the coordinator (engine/p2p.c has the
 * protocol). Callers use wf_p2p_submit; the rest is the engine thread's. */
#ifndef WF_ENGINE_P2P_H
#define WF_ENGINE_P2P_H
#include <stdint.h>

#include "engine/engine.h"

/* Bytes sent inline (eager) to one peer and not yet acknowledged: beyond
 * this a send waits for the receiver's clear-to-send (the receiver buffers
 * at most this much early data per peer; the same 32 MiB as TCP's cap on
 * early data, transport/tcp.c). */
#define WF_P2P_EAGER_CREDIT (32u << 20)

typedef struct wf_p2p wf_p2p;

/* State for a world of size ranks; NULL: out of memory. */
wf_p2p *wf_p2p_new(int size);
/* Frees what is left (after the engine stopped). NULL: no-op. */
void wf_p2p_free(wf_p2p *p);

/* The group id of remote execution's bulk transfers (src/remote/bulk.c):
 * above the 24 bits of every process set's id (api/group.c), so no weft_recv
 * of the application ever matches one. */
#define WF_REMOTE_GROUP_ID 0x1000000u

/* Any thread: the request of a transfer of tensor t (described, checked)
 * with world rank peer (-1: any source; a receive) under key in group g
 * (dir WF_P2P_REQ_SEND or WF_P2P_REQ_RECV): weft_send/weft_recv's, and
 * remote execution's bulk transfers. A completion callback in o runs with
 * p2p's lock held: it must not post another transfer. WEFT_OK and *out, or
 * the error. */
weft_status wf_p2p_post(weft_group *g, int dir, int peer, uint64_t key, const weft_tensor *t,
                        const weft_op_options *o, weft_request **out);

/* Any thread: queues r (weft_send/weft_recv's request, described) for the
 * engine. WEFT_OK and *out = r, or the world's failure (r freed). */
weft_status wf_p2p_submit(weft_request *r, weft_request **out);

/* The fast path (p2p_fast.c): small messages between ranks of one host go
 * through the pair's mailbox in the host segment (host/mailbox.h), written
 * by the sender's thread and matched by the receiver's. */
/* The engine looks at the mailboxes this often while a receive is posted
 * or a fast send is not complete (for requests nobody waits for). */
#define WF_P2P_SCAN_NS 1000000
/* Engine start, after the segment exists (no segment: no fast path), and
 * engine stop, before it is unmapped. */
weft_status wf_p2p_fast_attach(weft_world *w);
void wf_p2p_fast_detach(weft_world *w);
/* Caller thread, r described (wf_p2p_submit's input): 1 if the fast path
 * took r (pending: the caller holds it as *out), 0 if r must go to
 * wf_p2p_submit. A send takes the mailbox when its bytes fit a slot, it
 * has no callback, the peer is on this host, no earlier send to that peer
 * is still on the engine's path (so it cannot overtake one), and the ring
 * has a free slot (else it takes the engine's path: backpressure there). A
 * receive is always posted here when the world has mailboxes (so receives
 * keep their post order whichever path their message took). */
int wf_p2p_fast_send(weft_request *r);
int wf_p2p_fast_recv(weft_request *r);
/* Caller thread: progresses r (r->p2p_fast) until it completes or deadline
 * passes (wait = 0: one look): spins, yielding when the host's ranks
 * outnumber its cores, then sleeps on this rank's mailbox bell (1 ms at
 * most per sleep). Nothing on the engine thread (a callback). */
void wf_p2p_fast_progress(weft_request *r, int64_t deadline, int wait);

/* Engine thread. */
/* A p2p request taken from the submission queue. */
void wf_p2p_start(weft_world *w, weft_request *r);
/* A P2P_SEND from peer (data: its inline bytes, or NULL; copied). */
void wf_p2p_on_send(weft_world *w, int peer, const wf_p2p_send_msg *m);
/* A P2P_REPLY from peer. */
void wf_p2p_on_reply(weft_world *w, int peer, const wf_p2p_reply_msg *m);
/* Completes transfers the transports finished. */
void wf_p2p_progress(weft_world *w);
/* 1 while data moves through the transports (the engine waits on the
 * shared-memory segment then, which does not wake epoll). */
int wf_p2p_moving(weft_world *w);
/* The earliest deadline of a pending operation (INT64_MAX: none); past it,
 * wf_p2p_check_deadlines fails the world naming the operation. */
int64_t wf_p2p_next_deadline(weft_world *w);
void wf_p2p_check_deadlines(weft_world *w, int64_t now);
/* peer finalized (its BYE, handled in order after everything it sent):
 * what still needs it fails, and so do later transfers with it. */
void wf_p2p_peer_departed(weft_world *w, int peer);
/* The world failed: every pending operation completes with st/msg. */
void wf_p2p_fail_all(weft_world *w, weft_status st, const char *msg);

#endif
