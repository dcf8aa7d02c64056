/* engine.h - the world, its requests, and the background engine thread.
 *
 * Threads: any number of caller threads submit requests (api/) and wait on
 * them; one engine thread per world owns every socket, the local tensor
 * table, the coordinator state (rank 0) and the executing collective.
 * Shared between them, under world->mu: the submission queue, the in-flight
 * name set, the world's failure state. Request completion is published with
 * a release store of req->state and a broadcast of world->done_cv. */
#ifndef WF_ENGINE_H
#define WF_ENGINE_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "algo/board_coll.h"
#include "algo/sched.h"
#include "negotiate/board.h"
#include "engine/timeline.h"
#include "negotiate/coord.h"
#include "transport/mux.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "util/strmap.h"
#include "weft.h"
#include "wire/wire.h"

#define WF_WORLD_MAGIC 0x776f726cu   /* "worl" */
#define WF_REQ_MAGIC 0x72657175u     /* "requ" */
#define WF_REQ_FREED 0xdeadbeefu
#define WF_GROUP_MAGIC 0x67727570u   /* "grup" */
#define WF_MAX_ORPHANS 4096          /* requests held for groups not created here yet */
#define WF_MAX_BATCH 4096            /* requests or responses in one frame (larger batches are split) */

enum wf_req_state { WF_REQ_QUEUED = 0, WF_REQ_NEGOTIATING = 1, WF_REQ_RUNNING = 2, WF_REQ_DONE = 3 };

struct weft_group {
  uint32_t magic;
  uint32_t id;        /* 0: the world group; else derived from the members (groups.c) */
  weft_world *world;
  int size, rank;     /* this rank's index in the group, -1 if not a member */
  int *ranks;         /* group rank -> world rank, ascending */
  uint64_t barrier_count; /* unnamed barriers so far (under world->mu) */
  _Atomic int fast_local; /* every member on this host: 0 unknown, 1 yes, -1 no (fast.c) */
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
  _Atomic int name_held;     /* its key is in w->inflight: from submission until the caller has seen it
                                complete (wf_request_observed) or, detached, until it completes; under w->mu,
                                read without it only to skip the lock when 0 */

  /* result (written by the engine before state = DONE) */
  weft_status status;
  char *error;               /* malloc'd message or NULL */
  const char *algo;          /* the algorithm that ran it (static name; NULL: none), weft_request_algorithm */
  void *result;              /* allgather/alltoall/reducescatter output data */
  int result_owned;          /* the request frees result */
  int phantom;               /* made by the engine for a joined rank's part: freed, never completed */
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

  /* one-host fast path (fast.c) */
  _Atomic int fast;          /* 0: not on the board; 1: pending there; 2: claimed; 3: draining; 4: split (fast.c) */
  int fast_listed;           /* in w->fast, the engine's scan list (under w->mu) */
  weft_status fast_status;   /* remote round (F_DRAIN): this rank's outcome, kept until the others read */
  char *fast_msg;            /* its message (malloc'd) or NULL */
  int fast_n, fast_rank;     /* group size and rank at submission */
  uint64_t auto_barrier;     /* an unnamed barrier: 1 + its number in the group; else 0 */
  wf_board_ticket fast_t;
  int64_t fast_t0;           /* when it arrived */
  int fast_split;            /* its round's split kind (WF_SPLIT_*, board.h; not NONE: F_SPLIT after DONE) */
  _Atomic int split_busy;    /* a thread is in its split pass (fast.c) */
  _Atomic uint64_t split_have; /* slices copied out so far (written by the split_busy holder) */
  _Atomic int64_t split_t0;  /* when its split round was seen DONE */
};

/* The collective a group is executing (one at a time per group, in the
 * group's response order; groups run concurrently so that two groups whose
 * members overlap can never wait for each other). */
typedef struct wf_exec {
  int active;
  uint64_t seq;
  uint64_t tag;              /* transport tag: group id and seq */
  weft_request *req;         /* the first (or only) request of the response */
  weft_request **fused;      /* all requests of a fused response (nfused > 1), else NULL */
  uint32_t nfused;
  wf_response_msg resp;
  wf_sched sched;
  size_t round;              /* current round */
  size_t round_first;        /* first step of the current round; in its local phase, the next local step */
  size_t local_done;         /* how much of that local step is done (wf_sched_cursor) */
  int pending;               /* transfers of this round not yet complete */
  uint32_t *send_idx, *recv_idx; /* per world rank: messages so far in this collective */
  void *tmp;                 /* engine-owned temporary (e.g. prescaled input) */
  size_t *arrays;            /* counts, displs, send/recv counts and displs: 6 x group size */
  struct wf_seg *segs;       /* fused allreduce without packing: its tensors' outputs (algo.h) */
  int segmented;             /* the fused allreduce runs on segs */
  const char *algo;
  int64_t deadline;
} wf_exec;

/* Engine-side state of one group (the world group or a process set). */
typedef struct wf_gstate {
  weft_world *world;
  weft_group *group;
  uint32_t id;
  int coord_rank;            /* world rank of the group's coordinator: its first member */
  wf_coord *coord;           /* on the coordinator only */
  wf_strmap table;           /* name -> request submitted here, not yet executed */
  wf_response_msg *resps;    /* responses received, not yet executed (seq order) */
  size_t nresps, resps_cap, resps_pos;
  uint64_t next_seq;         /* next response seq to execute */
  wf_exec exec;
  void *fusion_buf;          /* persistent fusion buffer */
  size_t fusion_cap;
  int64_t next_publish;      /* cycle time: when the coordinator publishes next */
  int coord_gone;            /* the coordinator finalized: nothing new can be negotiated */
  wf_topo topo;              /* members' hosts and pids (algorithms' view) */
  int *topo_arrays;          /* host_of and pid_of: 2 x group size */
  struct wf_mcache *mcache;  /* response cache, member side (negotiate/cache.h); NULL on the coordinator or off */
} wf_gstate;

/* A control message received, waiting for the engine to act on it. */
typedef struct wf_inbox {
  struct wf_inbox *next;
  int peer;
  uint8_t type;
  wf_requests_msg reqs;      /* WF_MSG_REQUESTS */
  wf_responses_msg resps;    /* WF_MSG_RESPONSES */
  wf_cache_refs_msg refs;    /* WF_MSG_CACHED, WF_MSG_RESEND */
  char reason[512];          /* WF_MSG_ABORT */
} wf_inbox;

struct weft_world {
  uint32_t magic;
  int rank, size, local_rank, local_size, cross_rank, cross_size;
  wf_peer_info *peers;       /* size entries */
  wf_timeline tl;            /* Chrome-trace timeline (off unless started) */
  weft_group world_group;
  wf_settings set;           /* resolved once in weft_init (settings.h); read-only after */
  double timeout_seconds;
  double hb_interval, hb_timeout;

  /* shared with callers, under mu */
  pthread_mutex_t mu;
  weft_request *q_head, *q_tail; /* submitted, not yet seen by the engine */
  wf_strmap inflight;        /* "<group id>/<name>" -> request, for duplicate detection */
  weft_group *new_groups;    /* created, not yet seen by the engine */
  weft_group *dead_groups;   /* destroyed, for the engine to forget and free */
  wf_strmap group_counts;    /* member list -> groups created with it (ids) */
  weft_status fail_status;   /* sticky: WEFT_OK while healthy */
  char fail_msg[1024];
  int stopping;
  int abort_send;            /* weft_abort: the engine tells the peers */
  char abort_reason[512];
  pthread_cond_t done_cv;    /* broadcast on a completion when someone waits */
  int waiters;               /* threads blocked on done_cv */

  /* engine thread only */
  pthread_t thread;
  int thread_started;
  int epfd, evfd;
  _Atomic int wake_pending;  /* an eventfd write is outstanding */
  wf_tcp *tcp;
  struct wf_host *host;      /* the host's shared segment (host/segment.h); NULL: no local peers, or WEFT_TRANSPORT=tcp */
  wf_shm *shm;               /* the ring transport over it (NULL with it) */
  wf_mux mux;                /* data: shm for local peers, else tcp */
  wf_transport *tr;          /* &mux.base */
  wf_gstate **gs;            /* groups this rank is a member of; gs[0]: the world */
  wf_gstate *world_gs;       /* gs[0], set before the engine starts: stable while the engine may grow gs */
  int ngs;
  wf_inbox *in_head, *in_tail;
  wf_inbox *orphans;         /* requests for a group not registered here yet */
  int norphans;              /* requests held in orphans (capped: WF_MAX_ORPHANS) */
  uint64_t fusion_threshold; /* WEFT_FUSION_THRESHOLD */
  int64_t cycle_ns;          /* WEFT_CYCLE_TIME_US: hold responses this long to fuse more */
  int cma_ok;                /* every rank of this host may read the others' memory (cma_agree.c) */
  int *departed;             /* per rank: sent BYE */
  int fail_relayed;          /* the world's failure was passed on to the peers */
  int64_t later_at;          /* wf_world_fail_later: when (0: none) */
  weft_status later_st;
  char later_msg[1024];
  int64_t next_hb_check;
  int64_t last_busy;         /* engine thread: when the last event arrived (idle spin) */
  int local_more;            /* a collective's local steps stopped for time: loop again without waiting */

  /* one-host fast path (fast.c) */
  struct wf_board *board;    /* NULL: none (no local peers, or WEFT_FAST_BYTES=0 on the host's first rank) */
  int fast_on;               /* WEFT_FAST on this rank */
  size_t fast_ar_bytes;      /* WEFT_FAST_ALLREDUCE_BYTES */
  size_t fast_cma_bytes;     /* WEFT_FAST_CMA_BYTES (0: never) */
  size_t fast_split_bytes;   /* WEFT_FAST_SPLIT_BYTES (0: never) */
  int fast_split_own;        /* WEFT_FAST_SPLIT_OWN */
  int64_t fast_wait_ns;      /* WEFT_FAST_WAIT_SECONDS */
  int64_t timeout_ns;        /* timeout_seconds as wf_deadline_after adds it */
  _Atomic int board_users, board_closing; /* caller threads inside the board; finalize under way */
  weft_request **fast;       /* pending fast requests (under mu) */
  int nfast, fast_cap, fast_lost;
  _Atomic int fast_kick;     /* a request was added: scan soon */
  _Atomic uint64_t fast_done, fast_diverted; /* requests completed on the board / handed to the engine after arriving */
  _Atomic uint64_t fast_remote;              /* of fast_done: remote rounds (read across processes) */
  _Atomic int64_t fast_next; /* next scan (written by the engine thread; callers read it: fast.c) */
};

/* Engine lifecycle (world.c calls these). */
weft_status wf_engine_start(weft_world *w, int *fds);
/* Stops the thread: fails what is in flight with WEFT_ERR_SHUTDOWN, says
 * BYE to peers, flushes (bounded), closes. Idempotent. */
void wf_engine_stop(weft_world *w);

/* Submission (any thread). Takes the engine's reference; fails fast if the
 * world has failed. The name must already be registered in w->inflight. */
void wf_engine_submit(weft_world *w, weft_request *r);
/* wf_engine_submit's queueing, for a caller that holds w->mu (and wakes the
 * engine after unlocking); r must be armed (wf_request_arm). */
void wf_engine_queue_locked(weft_world *w, weft_request *r);
/* Wakes the engine thread (any thread). */
void wf_engine_wake(weft_world *w);

/* Marks the world failed (sticky) with status and message; engine thread or
 * caller thread. Pending work is failed by the engine thread. */
void wf_world_fail(weft_world *w, weft_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fails the world after a short grace unless something else fails it
 * first (engine thread): for consequences (a peer left) that should not
 * hide their cause (the rank whose death made it leave). */
void wf_world_fail_later(weft_world *w, weft_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

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

/* Timeline phase names: "NEGOTIATE_ALLREDUCE" / "ALLREDUCE" ... */
const char *wf_phase_negotiate(int coll);
const char *wf_phase_run(int coll);
/* Bytes of a request's input (for the timeline). */
uint64_t wf_request_bytes(const weft_request *r);

/* Executor (exec.c, engine thread). */
/* Starts executing the next response if idle; progresses the current one. */
void wf_exec_progress(weft_world *w);
/* peer said goodbye: fails the world if a group's executing collective
 * still needs data from peer. */
void wf_exec_peer_departed(weft_world *w, int peer);
/* Output helpers shared by exec.c and the one-host path (onehost_input.c):
 * the product of shape[from..ndim); an output of bytes through
 * the request's allocator (a NULL from it sets alloc_failed and falls back to
 * malloc, so the rank can still take part) or malloc; the result's shape, the
 * request's with dim0 rows. */
int64_t wf_elems(const int64_t *shape, int from, int ndim);
weft_status wf_alloc_result(weft_request *r, size_t bytes);
void wf_set_result_shape(weft_request *r, int64_t dim0);
/* Fails every group's executing collective (if any) with st/msg. */
void wf_exec_abort(weft_world *w, weft_status st, const char *msg);
/* The earliest deadline of an executing collective (INT64_MAX if none);
 * *name gets its tensor name. */
int64_t wf_exec_deadline(weft_world *w, const char **name);

/* Groups (groups.c, engine thread unless noted). */
wf_gstate *wf_gs_find(weft_world *w, uint32_t id);
/* Registers g with the engine: its state, and its coordinator if this rank
 * is g's first member. */
weft_status wf_gs_add(weft_world *w, weft_group *g);
/* Init, before the engine owns fds: same-host ranks agree on cross-memory
 * attach (sets w->cma_ok). */
weft_status wf_cma_agree(weft_world *w, const int *fds);
/* Forgets g's state and frees g. */
void wf_gs_remove(weft_world *w, wf_gstate *gs);
/* g's index of world rank r, or -1. Any thread. */
int wf_group_index(const weft_group *g, int r);
/* Responses received for gs (takes their arrays). */
void wf_gs_queue_responses(wf_gstate *gs, wf_response_msg *resps, uint32_t n);

/* Sends an encoded frame (taken) to peer, or handles it locally when peer
 * is this rank (engine thread). */
void wf_engine_send_frame(weft_world *w, int peer, wf_buf *frame);
/* Control messages to one peer, split into frames the receiver accepts
 * (engine thread): requests in full; cache references (CACHED or RESEND). */
void wf_engine_send_requests(weft_world *w, int peer, const wf_request_msg *reqs, uint32_t n);
void wf_engine_send_refs(weft_world *w, int peer, wf_msg_type type, const wf_cache_ref *refs, uint32_t n);
/* An ABORT frame with reason to every live peer. */
void wf_engine_send_abort(weft_world *w, const char *reason);
/* 1 once the world has failed (any thread). */
int wf_world_failed(weft_world *w);

/* inbox.c: the transport's control callbacks (they decode into the inbox)
 * and the engine loop's pass over the inbox. */
void wf_engine_on_ctrl(void *ctx, int peer, const wf_frame_hdr *h, const uint8_t *p, size_t n);
void wf_engine_on_error(void *ctx, int peer, weft_status st, const char *msg);
void wf_engine_process_inbox(weft_world *w);

#endif
