/* request.h - a request (one submitted collective, or a grouped op's parent)
 * and a group handle, and the request's whole life (engine/request.c): made
 * by a caller, armed, submitted (submit.h), completed by the engine thread or
 * the one-host path, observed by its caller, released.
 *
 * Threads: the submitting thread writes what was asked before submission;
 * after it, the engine (or the one-host path) writes the result and
 * publishes it with a release store of state = WF_REQ_DONE. */
#ifndef WF_ENGINE_REQUEST_H
#define WF_ENGINE_REQUEST_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "negotiate/board.h"
#include "weft.h"
#include "wire/wire.h"

#define WF_REQ_MAGIC 0x72657175u     /* "requ" */
#define WF_REQ_FREED 0xdeadbeefu
#define WF_GROUP_MAGIC 0x67727570u   /* "grup" */

enum { WF_P2P_REQ_SEND = 1, WF_P2P_REQ_RECV = 2 };
enum wf_req_state { WF_REQ_QUEUED = 0, WF_REQ_NEGOTIATING = 1, WF_REQ_RUNNING = 2, WF_REQ_DONE = 3 };

struct weft_group {
  uint32_t magic;
  uint32_t id;        /* 0: the world group; else derived from the members (groups.c) */
  weft_world *world;
  int size, rank;     /* this rank's index in the group, -1 if not a member */
  int *ranks;         /* group rank -> world rank, ascending */
  int keyed;          /* made by weft_group_resolve: lives as long as the world */
  _Atomic uint64_t barrier_count; /* unnamed barriers so far */
  _Atomic int fast_local; /* every member on this host: 0 unknown, 1 yes, -1 no (engine/onehost.c) */
  struct weft_group *next; /* registration list (new_groups; reversed by the engine) */
  struct weft_group *dead_next; /* removal list (dead_groups): its own link, as a group may be on both at once */
};

struct weft_request {
  _Atomic uint32_t magic;
  _Atomic int state;         /* wf_req_state; WF_REQ_DONE published with release */
  _Atomic int refs;          /* user + engine */
  weft_world *world;
  weft_group *group;
  struct weft_request *next; /* submission queue / engine lists */

  /* what was asked (immutable after submission) */
  wf_request_msg msg;        /* the wire description (name, coll, dtype, shape, ...) */
  char key[WF_NAME_MAX + 16];/* "<group id>/<name>": the in-flight set's key */
  weft_tensor in, out;       /* descriptors; shapes point into in_shape/out_shape */
  uint64_t key_hash;         /* wf_str_hash(key), also the board's record hash (wf_board_hash) */
  int64_t in_shape[WEFT_MAX_DIMS], out_shape[WEFT_MAX_DIMS];
  weft_done_fn callback;
  void *user_data;
  weft_alloc_fn alloc;
  void *alloc_ctx;
  int64_t deadline;          /* wf_now_ns() deadline of the whole operation; 0 until armed (wf_request_arm) */
  double op_timeout;         /* weft_op_options.timeout_seconds (0: the world's) */
  int timeout_aborts;        /* weft_op_options.timeout_aborts */
  int timed_sent;            /* engine: its own deadline was passed on (cancel.c) */
  _Atomic int name_held;     /* its key is in w->inflight: from submission until the caller has seen it
                                complete (wf_request_observed) or, detached, until it completes; under w->mu,
                                read without it only to skip the lock when 0 */

  /* result (written by the engine before state = DONE) */
  weft_status status;
  char *error;               /* malloc'd message or NULL */
  const char *algo;          /* the algorithm that ran it (static name; NULL: none), weft_request_algorithm */
  void *result;              /* allgather/alltoall/reducescatter output data */
  int result_owned;          /* the request frees result */
  int phantom;               /* made by the engine for a joined rank's part: freed, never completed;
                                2: the others stage the allreduce (run it chunk by chunk) */
  struct weft_request *parent; /* grouped op: the request the user holds */
  struct weft_request **kids;  /* grouped op (parent): its children, one reference each (weft_request_output_at) */
  int nkids;
  _Atomic int remaining;     /* grouped op (parent): children not yet complete */
  weft_status child_status;  /* grouped op (parent): the first child's error */
  char *child_error;
  int last_joined;           /* join: the rank that joined last */
  int alloc_failed;          /* the caller's allocator returned NULL: ran into a
                                private buffer, then failed with NO_MEMORY */
  int64_t result_shape[WEFT_MAX_DIMS];
  int result_ndim;
  int64_t *recv_splits;      /* alltoall: group size entries */
  int nrecv_splits;

  /* device tensors (engine/devstage.c) */
  struct wf_dstage *dstage;  /* its staging through pinned host memory: from submission until completion */
  void *consumer_stream;     /* weft_op_options.consumer_stream */
  struct wf_device *result_dev; /* result is device memory from this backend, freed with the request */

  /* point-to-point (engine/p2p.c): what was asked, and (recv) who sent it */
  int p2p;                   /* 0, WF_P2P_REQ_SEND or WF_P2P_REQ_RECV */
  int p2p_peer;              /* the peer's world rank; a recv from any source: -1 until matched */
  uint64_t p2p_key;
  int p2p_fast;              /* 1: a send in a mailbox; 2: a recv posted by its caller (p2p_fast.c) */
  int p2p_li;                /* fast send: the receiver's local index */

  /* one-host fast path (engine/onehost.c) */
  _Atomic int fast;          /* 0: not on the board; 1: pending there; 2: claimed; 3: draining; 4: split (onehost.c) */
  int fast_listed;           /* in w->fast, the engine's scan list (under w->mu) */
  weft_status fast_status;   /* remote round (F_DRAIN): this rank's outcome, kept until the others read */
  char *fast_msg;            /* its message (malloc'd) or NULL */
  int fast_n, fast_rank;     /* group size and rank at submission */
  uint64_t auto_barrier;     /* an unnamed barrier: 1 + its number in the group; else 0 */
  wf_board_ticket fast_t;
  int64_t fast_t0;           /* when it arrived */
  int fast_split;            /* its round's split kind (WF_SPLIT_*, board.h; not NONE: F_SPLIT after DONE) */
  _Atomic int split_busy;    /* a thread is in its split pass (onehost.c) */
  _Atomic uint64_t split_have; /* slices copied out so far (written by the split_busy holder) */
  _Atomic int64_t split_t0;  /* when its split round was seen DONE */

  /* instances and dependencies (engine/instance.c) */
  uint64_t inst_key;         /* weft_op_options.instance_key (0: a named operation) */
  uint64_t *deps;            /* weft_op_options.depends_on (malloc'd copy) */
  int ndeps;
  int held;                  /* in w->held, waiting for its dependencies (under w->mu) */
};

/* A request of collective coll named name on group g (checked: 1..
 * WF_NAME_MAX bytes), with in's description (may be NULL) and the options'
 * scales, priority, callback and allocator (o may be NULL): two references
 * (the caller's and the engine's), not yet armed. NULL: out of memory. */
weft_request *wf_request_make(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                              const weft_op_options *o);
/* The same without the "<group id>/<name>" key and its hash (empty), for a
 * request that never enters the in-flight set or the board (point-to-point). */
weft_request *wf_request_make_unkeyed(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                                      const weft_op_options *o);
/* Completes r (engine thread): records status and message, publishes, runs
 * the callback, drops the engine's reference. The name stays in the
 * in-flight set until the caller has seen the completion (weft_test or
 * weft_wait returned it, the callback returned, weft_request_free): a rank
 * whose operation completed at once in shared memory cannot reuse the name
 * before a rank whose did not, so every rank's duplicate check agrees. A
 * detached request (freed while pending) gives its name up here. */
void wf_request_complete(weft_world *w, weft_request *r, weft_status st, const char *msg);
/* Completes n requests (engine thread) whose status and error (malloc'd or
 * NULL) are set: published under one lock with one broadcast, then as above. */
void wf_request_complete_many(weft_world *w, weft_request **rs, uint32_t n);
/* The caller has seen r complete (any thread; takes w->mu unless there is
 * nothing to do): r's name, and a grouped op's children's, leave the
 * in-flight set. Idempotent. */
void wf_request_observed(weft_request *r);
/* wf_request_observed's work, w->mu held. */
void wf_request_names_locked(weft_world *w, weft_request *r);
/* Drops one reference; frees at zero. */
void wf_request_unref(weft_request *r);
/* A zeroed request's memory (NULL: out of memory), and its return once the
 * last reference is gone; kept per thread for the next one (request.c). */
weft_request *wf_request_new(void);
/* Sets r's deadline (now + the world's timeout) unless it has one. Every
 * path that may wait arms the request before anything reads the deadline:
 * the engine's queue (wf_engine_submit, the direct submissions), grouped
 * ops, and the fast path once a round does not complete at arrival. A fast
 * round that completes at arrival never reads the clock for it. */
void wf_request_arm(weft_request *r);
void wf_request_release(weft_request *r);

/* Bytes of a request's input (for the timeline). */
uint64_t wf_request_bytes(const weft_request *r);
/* 1 if r is a live handle (not freed). Any thread. */
int wf_request_live(const weft_request *r);
/* 1 once r is complete (acquire: its results are visible). */
int wf_request_done(const weft_request *r);
/* One look: progresses a one-host request in the caller; 1 if done. */
int wf_request_poll(weft_request *r);
/* Waits until r completes or timeout_seconds pass (< 0: r's deadline plus
 * the time to notice a silent peer): spins briefly, then sleeps on the
 * world's condition variable. 1 if done. */
int wf_request_wait(weft_request *r, double timeout_seconds);
/* The caller drops its handle: a complete request gives its name up; a
 * pending one is detached (its name goes when it completes). 0 if r was
 * already detached. */
int wf_request_detach(weft_request *r);

#endif
