/* remote.h - remote execution's core (design.md, "Remote execution"),
 * written against a two-function link so that it runs the same over the
 * world's connections (remote/api.c) and in one process (unit tests).
 *
 * One wf_remote per rank. Threads: caller threads start calls and wait;
 * the link delivers frames from any thread (the engine thread in a world),
 * which acts on them itself when it can (wf_remote_deliver), else puts them
 * in the inbox; a service thread acts on those, and on deadlines, idle
 * contexts, dead peers and ended bulk transfers, and never runs user code;
 * a worker thread runs the registered functions. Where the link has a way
 * that the receiver drains itself (poll, bells), the waiting threads (a
 * caller in weft_remote_wait or weft_remote_test, the idle worker, the
 * service thread) drain it and sleep on the bells instead of the condition
 * variables. Lock order: whatever the
 * link's deliver caller holds, then wf_remote.mu; the link's send is never
 * called with mu held. */
#ifndef WF_REMOTE_H
#define WF_REMOTE_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"
#include "wire/wire.h"

typedef struct wf_remote wf_remote;
typedef struct wf_rbulk wf_rbulk; /* one bulk transfer (bulk.c) */

typedef struct wf_remote_link {
  void *ctx;
  uint64_t max_payload; /* the largest frame payload a peer accepts (WEFT_MAX_MESSAGE_BYTES); 0: no limit */
  /* Sends one encoded frame (REMOTE_CALL/REPLY; taken, even on error) to
   * peer. Any thread; must not block long; never called with mu held. */
  weft_status (*send)(void *ctx, int peer, wf_buf *frame);
  /* 0: peer is fine; 1: calls to it cannot complete (the world failed, it
   * finalized); 2: it died or went silent (what it owned here is freed
   * after the grace); 3: calls cannot complete because some rank died (as
   * 1, but its calls fail as lost, naming that rank). Why in msg. Any
   * thread; never called with mu held. */
  int (*peer_lost)(void *ctx, int peer, char *msg, size_t len);
  /* The bulk data path (NULL: every tensor travels inline). Posts the
   * transfer of n bytes at data with peer under key (send: 1, else a
   * receive); when it ends (or fails) the link calls wf_remote_bulk_done(tok,
   * ...) once, from any thread but never with mu held. Returns an error
   * (and never calls wf_remote_bulk_done) when it cannot post. Never called
   * with mu held. */
  weft_status (*bulk)(void *ctx, int peer, int send, uint64_t key, void *data, size_t n, wf_rbulk *tok);
  uint64_t bulk_min;    /* tensors of at least this many bytes (> 0) take the bulk path, between distinct ranks */
  /* A way for frames that the receiver's threads drain themselves (NULL,
   * all four: none; frames then come only through wf_remote_deliver from
   * the link's own thread). poll: delivers the frames waiting there
   * (through wf_remote_deliver, on this thread) and returns how many, or
   * -1 when another thread drains it now (look again soon, do not sleep);
   * it takes no lock of the caller's, never with mu held. bell, sleep, ring:
   * this rank's event words (WF_RLINK_WORK: frames for the worker, jobs;
   * WF_RLINK_DONE: replies, completions), which the link rings for the
   * frames it has for this rank: read the word, sleep while it is still
   * `seen` (at most ns; no mu), ring it (any thread, mu held or not: no
   * lock). */
  int (*poll)(void *ctx);
  uint32_t (*bell)(void *ctx, int which);
  void (*sleep)(void *ctx, int which, uint32_t seen, int64_t ns);
  void (*ring)(void *ctx, int which);
  /* The worker runs a function (on 1) or no longer (0); NULL: not told. No lock. */
  void (*busy)(void *ctx, int on);
} wf_remote_link;

enum { WF_RLINK_WORK = 0, WF_RLINK_DONE = 1 };

/* The link: tok's transfer ended with st (msg: why, when st != WEFT_OK). */
void wf_remote_bulk_done(wf_rbulk *tok, weft_status st, const char *msg);

/* grace: seconds after a peer is lost before the objects it owned here
 * are freed. default_timeout: a call's deadline when it sets none. */
weft_status wf_remote_new(int rank, int size, const wf_remote_link *link, double default_timeout, double grace,
                          wf_remote **out);
/* Stops the threads, fails pending calls with WEFT_ERR_SHUTDOWN, frees
 * everything. Call handles must be freed before (they point to r). */
void wf_remote_free(wf_remote *r);
/* A frame from peer (type REMOTE_CALL or REMOTE_REPLY; payload p, n bytes,
 * copied). Any thread; it may hold the link's locks (the link is not called
 * here). A malformed one is dropped and returns
 * WEFT_ERR_PROTOCOL with the reason in err. */
weft_status wf_remote_deliver(wf_remote *r, int peer, uint8_t type, const uint8_t *p, size_t n, char *err,
                              size_t errlen);

/* The public operations on one rank's core (api.c maps the world to it). */
weft_status wf_remote_register(wf_remote *r, const char *name, int n_in, int n_out, weft_remote_fn fn, void *ctx);
weft_status wf_remote_id_new(wf_remote *r, weft_remote_id *out);
weft_status wf_remote_ctx_op(wf_remote *r, int task, int op, uint64_t ctx, double idle, uint64_t *out_ctx);
weft_status wf_remote_execute(wf_remote *r, int task, uint64_t ctx, const char *name, int n_in,
                              const weft_remote_input *inputs, int n_out, const weft_remote_id *outputs, int n_meta,
                              const weft_remote_options *opt, weft_remote_call **call);
weft_status wf_remote_put(wf_remote *r, int task, uint64_t ctx, const weft_tensor *t, weft_remote_id id,
                          const weft_remote_options *opt, weft_remote_call **call);
weft_status wf_remote_fetch(wf_remote *r, int task, uint64_t ctx, weft_remote_id id, const weft_remote_options *opt,
                            weft_remote_call **call);
weft_status wf_remote_delete(wf_remote *r, int task, uint64_t ctx, int n, const weft_remote_id *ids,
                             const weft_remote_options *opt, weft_remote_call **call);
void wf_remote_stats(wf_remote *r, weft_remote_stats *out);
/* Bulk transfers (for tests): inputs staged for BULK_GO, objects held for a
 * fetch's BULK_GO, transfers posted and not ended. */
void wf_remote_bulk_counts(wf_remote *r, int *staged, int *held, int *moving);

#endif
