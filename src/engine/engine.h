/* engine.h - the world and the background engine thread (the engine's own
 * interface; api/ uses engine/submit.h, requests are engine/request.h's).
 *
 * Threads: any number of caller threads submit requests (api/) and wait on
 * them; one engine thread per world owns every socket, the local tensor
 * table, the coordinator state (rank 0) and the executing collective.
 * The world's state is split by owner (the sections of struct weft_world):
 * what is fixed at init; what is shared with callers under world->mu (the
 * submission queue, the in-flight name set, the world's failure state);
 * what only the engine thread touches; and the one-host path's state,
 * opaque here (engine/onehost_impl.h). Request completion is published with
 * a release store of req->state and a broadcast of world->done_cv. */
#ifndef WF_ENGINE_H
#define WF_ENGINE_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "algo/board_coll.h"
#include "engine/request.h"
#include "algo/sched.h"
#include "engine/timeline.h"
#include "negotiate/coord.h"
#include "transport/mux.h"
#include "transport/shm.h"
#include "transport/tcp.h"
#include "util/strmap.h"
#include "weft.h"
#include "wire/wire.h"

#define WF_WORLD_MAGIC 0x776f726cu   /* "worl" */
#define WF_MAX_ORPHANS 4096          /* requests held for groups not created here yet */
#define WF_MAX_BATCH 4096            /* requests or responses in one frame (larger batches are split) */

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
  struct wf_dpipe *dpipe;    /* device tensors' allreduce/broadcast, chunk by chunk (devstage.h) */
  int chunk_wait;            /* the pipeline's next chunk is not in host memory yet */
  size_t hchunk, hchunk_at;  /* a joined rank's part in a staged allreduce: the pipeline's chunk (elements) and
                                where its next chunk starts; it runs chunk by chunk in host memory as the others
                                run theirs through the device pipeline (0: not chunked) */
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
  int dev_wait;              /* the next response waits for a device tensor's copy down (devstage.h) */
} wf_gstate;

/* A control message received, waiting for the engine to act on it. */
typedef struct wf_inbox {
  struct wf_inbox *next;
  int peer;
  uint8_t type;
  wf_requests_msg reqs;      /* WF_MSG_REQUESTS */
  wf_responses_msg resps;    /* WF_MSG_RESPONSES */
  wf_cache_refs_msg refs;    /* WF_MSG_CACHED, WF_MSG_RESEND */
  wf_cancel_msg cancel;      /* WF_MSG_CANCEL */
  char reason[512];          /* WF_MSG_ABORT */
  wf_p2p_send_msg p2p_send;  /* WF_MSG_P2P_SEND (its inline bytes in p2p_data) */
  uint8_t *p2p_data;
  wf_p2p_reply_msg p2p_reply; /* WF_MSG_P2P_REPLY */
  wf_group_msg group;        /* WF_MSG_GROUP_JOIN, WF_MSG_GROUP_REPLY */
  wf_step_msg step;          /* WF_MSG_STEP_REQ, WF_MSG_STEP_REPLY */
} wf_inbox;

struct weft_world {
  /* fixed at init (weft_init, before the engine starts); read-only after */
  uint32_t magic;
  int rank, size, local_rank, local_size, cross_rank, cross_size;
  wf_peer_info *peers;       /* size entries */
  wf_timeline tl;            /* Chrome-trace timeline (off unless started) */
  weft_group world_group;
  weft_group remote_group;   /* the world's ranks under WF_REMOTE_GROUP_ID: remote execution's bulk transfers (p2p.h) */
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
  _Atomic int waiters;       /* threads blocked on done_cv (atomic: wf_request_complete's unlocked path reads it) */
  struct wf_rwait *rwaits;   /* groups this rank asks the leader about (resolve.c) */
  struct wf_keyed *keyed;    /* keyed groups this rank resolved or resolves (api/group.c) */
  struct wf_cancel_ask *cancels; /* weft_request_cancel: for the engine to pass on (cancel.c) */
  weft_request *held;        /* waiting for the instances they depend on (instance.c), linked by next */
  wf_strmap instances;       /* "<instance key>" -> its latest submission's record (instance.c) */
  struct wf_step_seq *step_seqs;   /* step sequences known here, by (group, graph key) (steps.c) */
  struct wf_step_wait *step_waits; /* weft_step_next/refresh asking the group leader (steps.c) */

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
  int cma_ok;                /* every rank of this host may read the others' memory (host/cma_agree.c) */
  int *departed;             /* per rank: sent BYE */
  int fail_relayed;          /* the world's failure was passed on to the peers */
  int64_t later_at;          /* wf_world_fail_later: when (0: none) */
  weft_status later_st;
  char later_msg[1024];
  int64_t next_hb_check;
  int64_t last_busy;         /* engine thread: when the last event arrived (idle spin) */
  int local_more;            /* a collective's local steps stopped for time: loop again without waiting */
  struct wf_resolver *leader; /* rank 0: the group leader (negotiate/resolve.h), made at the first JOIN */
  int ntimed;                /* requests with their own timeout still negotiating (cancel.c), at most */
  int64_t timed_next;        /* the earliest of their deadlines (INT64_MAX: none) */
  struct wf_step_pend *step_pend; /* group leader: STEP_REQs for a group not registered yet (steps.c) */

  /* the one-host path's own state (engine/onehost.c; opaque here) */
  struct wf_onehost *one;
  /* point-to-point transfers (engine/p2p.c; engine thread; opaque here) */
  struct wf_p2p *p2p;
  /* remote execution's frame rings between ranks of this host (engine/rmbox.c; any thread; NULL: none) */
  struct wf_rmbox *rmbox;
  uint64_t incarnation;      /* random per weft_init, never 0: told to peers (HELLO) and in P2P_SEND */
  /* device tensors' staging (engine/devstage.c; opaque here) */
  struct wf_dstage_world *dstage;
  uint64_t generation;       /* elastic mode: the world's generation (weft_generation); 0 otherwise */
  /* the layer above that exchanges its own frames (engine/ext.h: remote
   * execution). Under mu: the hook (set once), frames held until it attaches,
   * frames to send. gone: per peer, 1 BYE, 2 lost (engine thread writes). */
  void *ext_ctx;
  const struct wf_ext_ops *ext_ops;
  struct wf_ext_frame *ext_early, *ext_early_tail;
  int ext_nearly;
  size_t ext_early_bytes;
  struct wf_ext_frame *ext_out, *ext_out_tail;
  _Atomic unsigned char *gone;
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

/* Timeline phase names: "NEGOTIATE_ALLREDUCE" / "ALLREDUCE" ... */
const char *wf_phase_negotiate(int coll);
const char *wf_phase_run(int coll);

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
/* Frees a received message not acted on, and everything its decoder made. */
void wf_inbox_free(wf_inbox *m);
void wf_engine_on_error(void *ctx, int peer, weft_status st, const char *msg);
void wf_engine_process_inbox(weft_world *w);

/* resolve.c: groups resolved through the leader, engine side (engine
 * thread): sends the JOINs callers queued and runs the leader's deadlines;
 * the earliest time it needs the loop (0: now, INT64_MAX: never); a JOIN
 * (rank 0 only) or a REPLY (from rank 0 only) received; the world's
 * failure completes every wait; the leader goes when the engine stops. */
void wf_resolve_progress(weft_world *w, int64_t now);
int64_t wf_resolve_next(weft_world *w);
void wf_resolve_on_join(weft_world *w, int peer, const wf_group_msg *m);
void wf_resolve_on_reply(weft_world *w, int peer, const wf_group_msg *m);
void wf_resolve_fail_all(weft_world *w, weft_status st, const char *msg);
void wf_resolve_peer_departed(weft_world *w, int peer);

/* cancel.c (engine thread): passes the callers' cancellations to the
 * coordinators; a CANCEL received (this rank coordinates the group); the
 * world's list freed. */
void wf_cancel_progress(weft_world *w);
void wf_cancel_on_msg(weft_world *w, int peer, const wf_cancel_msg *m);
void wf_cancel_free(weft_world *w);
/* Requests with their own timeout (engine thread): passes on those whose
 * deadline passed; returns the next such deadline (INT64_MAX: none). Scans
 * only while some are known (w->ntimed, counted as they are drained). */
int64_t wf_timed_progress(weft_world *w, int64_t now);
void wf_resolve_stop(weft_world *w);

/* instance.c: instances and dependencies (weft_op_options.instance_key,
 * depends_on). Under w->mu (any thread): r (an instance) was submitted /
 * completed; r (with dependencies) waits in w->held. Engine thread: starts
 * the held requests whose dependencies completed, fails those whose
 * dependency failed or whose deadline passed; the earliest held deadline
 * (INT64_MAX: none); the world's failure fails them all; the records go
 * with the world. */
void wf_inst_submitted_locked(weft_world *w, weft_request *r);
void wf_inst_completed_locked(weft_world *w, weft_request *r);
void wf_inst_hold_locked(weft_world *w, weft_request *r);
void wf_inst_progress(weft_world *w, int64_t now);
int64_t wf_inst_next(weft_world *w);
void wf_inst_fail_all(weft_world *w, weft_status st, const char *msg);
void wf_inst_free(weft_world *w);

/* steps.c: step sequences (weft_step_*), engine side (engine thread): sends
 * the callers' STEP_REQs and answers the pending ones; the earliest time it
 * needs the loop; a STEP_REQ (this rank leads the group) or a STEP_REPLY
 * received; a leader that left, the world's failure complete the waits;
 * the lists go with the world. */
void wf_steps_progress(weft_world *w, int64_t now);
int64_t wf_steps_next(weft_world *w);
void wf_steps_on_req(weft_world *w, int peer, const wf_step_msg *m);
void wf_steps_on_reply(weft_world *w, int peer, const wf_step_msg *m);
void wf_steps_peer_departed(weft_world *w, int peer);
void wf_steps_fail_all(weft_world *w, weft_status st, const char *msg);
void wf_steps_free(weft_world *w);

#endif
