/* remote_impl.h - remote/'s private state: the core (core.c), the callee's
 * store and jobs (store.c, serve.c) and the caller's calls (call.c). Every
 * field below is under wf_remote.mu unless it says otherwise. */
#ifndef WF_REMOTE_IMPL_H
#define WF_REMOTE_IMPL_H
#include <pthread.h>

#include "remote/remote.h"

#define WF_RCALL_MAGIC 0x72636c6cu /* "rcll" */
#define WF_REMOTE_JOIN_SECONDS 10   /* finalize waits this long for a running function */
#define WF_REMOTE_TICK_NS 20000000LL /* the service thread looks at deadlines, idle contexts, peers this often */
#define WF_REMOTE_SPIN_NS 50000 /* a waiter (a caller, the idle worker) looks this long before it sleeps */

/* ---- callee: objects, contexts, jobs */
enum { WF_OBJ_PENDING = 0, WF_OBJ_READY = 1, WF_OBJ_FAILED = 2 };
typedef struct wf_robj {
  struct wf_robj *next;
  wf_remote_oid id;
  int state;
  int refs;               /* the store's (1 while listed) + running jobs' */
  int listed;
  int implicit;           /* a placeholder made by a lookup, no producer known yet */
  weft_dtype dtype;
  int ndim;
  int64_t shape[WEFT_MAX_DIMS];
  size_t nbytes;
  void *data;
  char *error;            /* FAILED: why */
} wf_robj;

typedef struct wf_rctx {
  struct wf_rctx *next;
  uint64_t id;
  int creator;
  double idle;            /* seconds; 0: never collected */
  int64_t last_used;
  wf_robj *objs;
} wf_rctx;

typedef struct wf_rjob {
  struct wf_rjob *next;
  int peer;
  uint8_t *payload;       /* the frame's bytes (msg points into them) */
  wf_remote_msg msg;
  int64_t deadline;       /* INT64_MAX: none */
  uint64_t ctx;
  wf_robj **ins;          /* EXECUTE and FETCH: the inputs' objects (a reference each) */
  wf_robj **outs;         /* EXECUTE: the outputs' placeholders (a reference each) */
  const struct wf_rfn *fn;
} wf_rjob;

typedef struct wf_rfn {
  struct wf_rfn *next;
  char name[WF_NAME_MAX + 1];
  int n_in, n_out;
  weft_remote_fn fn;
  void *ctx;
} wf_rfn;

/* ---- caller: calls in flight */
struct weft_remote_call {
  uint32_t magic;
  wf_remote *r;
  weft_remote_call *next; /* in r->calls while pending */
  int peer;
  uint64_t id;
  uint8_t op;
  char what[WF_NAME_MAX + 32]; /* "execute 'f'", "fetch {0, 3}" ... for messages */
  weft_status status;     /* WEFT_IN_PROGRESS while pending */
  char error[WF_ERRMSG_MAX + WF_NAME_MAX + 64];
  int64_t deadline;
  int detached;           /* freed by the caller while pending: the core frees it at completion */
  int n_meta;
  weft_tensor *metas;     /* n_meta; shapes in meta_shapes */
  int64_t *meta_shapes;   /* n_meta x WEFT_MAX_DIMS */
  weft_tensor out;        /* fetch */
  int64_t out_shape[WEFT_MAX_DIMS];
  int out_owned;          /* out.data is the call's */
  weft_alloc_fn alloc;
  void *alloc_ctx;
  uint64_t ctx;           /* CTX_CREATE: the new context */
};

/* ---- the bulk data path (bulk.c): a tensor's bytes apart from its frame.
 * The data's receiver posts its receive first, then tells the sender
 * (BULK_GO), so a send never waits for a receive that may not come. */
enum {
  WF_RB_ARG_SEND = 1,   /* caller: an execute/put input's bytes (a copy made at the call) */
  WF_RB_ARG_RECV = 2,   /* callee: into a new object (an input, or a put's object) */
  WF_RB_FETCH_SEND = 3, /* callee: a fetched object's bytes (a reference on it) */
  WF_RB_FETCH_RECV = 4  /* caller: into the fetch's memory */
};
typedef struct wf_rhub { /* outlives the core while transfers are posted: their ends find it gone */
  pthread_mutex_t mu;
  wf_remote *r;         /* NULL once the core is being freed */
  int refs;             /* the core, and each posted transfer */
} wf_rhub;
struct wf_rbulk {
  struct wf_rbulk *next;
  wf_rhub *hub;
  int kind, peer;
  uint64_t call_id;     /* the caller's call */
  uint32_t index;       /* ARG_*: the input */
  void *buf;
  size_t n, cap;        /* ARG_SEND: buf's size, cap >= n (a reused buffer) */
  int user_mem;         /* FETCH_RECV: buf from the call's allocator (never freed here) */
  wf_robj *obj;         /* ARG_RECV: the object it produces; FETCH_SEND: the object sent (a reference) */
  uint8_t op;           /* ARG_RECV of a put: WF_ROP_PUT (the reply waits for the bytes), else 0 */
  uint64_t ctx;
  weft_status st;
  char msg[WF_ERRMSG_MAX / 2];
};

/* a frame waiting for the service thread */
typedef struct wf_rframe {
  struct wf_rframe *next;
  int peer;
  uint8_t type;
  size_t n;
  uint8_t bytes[];
} wf_rframe;

/* a frame to send once mu is released */
typedef struct wf_rout {
  struct wf_rout *next;
  int peer;
  wf_buf frame;
} wf_rout;

struct wf_remote {
  int rank, size;
  wf_remote_link link;    /* fixed */
  double default_timeout, grace; /* fixed */
  pthread_mutex_t mu;
  pthread_cond_t svc_cv;  /* the service thread: frames in, or stop */
  pthread_cond_t work_cv; /* the worker: jobs ready, or stop */
  pthread_cond_t done_cv; /* calls completed */
  pthread_t svc, worker;
  int threads;
  int stopping;
  int worker_done;        /* the worker thread has left its loop */
  int abandoned;          /* wf_remote_free stopped waiting for it: the worker frees the core */
  int running;            /* the worker is inside a registered function */
  int svc_on_bell;        /* the service thread sleeps on the WORK bell (the worker runs), not on svc_cv */
  wf_rframe *in_head, *in_tail;
  wf_rout *out_head, *out_tail;
  wf_rfn *fns;
  wf_rctx *ctxs;
  uint64_t next_ctx;
  uint64_t collected_ids[64]; /* recently collected contexts, for the error message */
  int ncollected;
  wf_rjob *waiting;       /* jobs whose inputs are not all produced */
  wf_rjob *ready_head, *ready_tail;
  weft_remote_call *calls;
  uint64_t next_call;
  uint64_t next_local;
  int64_t *lost_at;       /* per peer: when it was seen lost (0: not), -1: its objects freed */
  int *pstate;            /* per peer: the link's peer_lost at the last tick (service thread only) */
  char (*pmsg)[512];      /* and why */
  int64_t orphans_freed, ncollected_total;
  /* bulk.c */
  wf_rhub *hub;
  wf_rbulk *stage;        /* caller: inputs' bytes waiting for BULK_GO */
  wf_rbulk *holds;        /* callee: fetched objects waiting for BULK_GO */
  wf_rbulk *post_head, *post_tail; /* to post (before the frames queued with them are sent) */
  wf_rbulk *moving;       /* posted */
  wf_rbulk *bdone;        /* ended, for the service thread */
  void *spare[2];         /* large buffers whose transfer ended, for the next ones (pages mapped already) */
  size_t spare_cap[2];
};

/* core.c */
void wf_remote_out_locked(wf_remote *r, int peer, wf_buf *frame); /* queue (takes the frame) */
void wf_remote_flush(wf_remote *r);                               /* sends the queue (mu not held) */
void wf_remote_worker_exit(wf_remote *r);                         /* the worker's last act (mu held; unlocks) */
int64_t wf_remote_deadline(double seconds);                       /* now + seconds (<= 0: INT64_MAX) */
/* The link's own way in (link.poll, mu not held): drains it here, sends
 * what that queued; how many frames came (0 without one; -1: another
 * thread drains it now, look again before sleeping). */
int wf_remote_poll(wf_remote *r);
/* Wake-ups (mu held): the worker (jobs ready, stop), the waiting callers
 * (completions), the service thread (frames queued, transfers ended). */
void wf_remote_kick_work(wf_remote *r);
void wf_remote_kick_done(wf_remote *r);
void wf_remote_kick_svc(wf_remote *r);

/* bulk.c (mu held unless said) */
weft_status wf_bulk_init(wf_remote *r);                 /* (no mu) */
void wf_bulk_detach(wf_remote *r);                      /* (no mu) finish_free's first act: ends find the core gone */
void wf_bulk_release(wf_remote *r);                     /* (no mu) finish_free's last act */
int wf_bulk_on(const wf_remote *r, int peer, uint64_t nbytes); /* 1: this tensor takes the bulk path */
wf_rbulk *wf_bulk_new(wf_remote *r, int kind, int peer, uint64_t call_id, uint32_t index, size_t n);
void wf_bulk_free(wf_rbulk *t);                         /* frees buf (unless user_mem), unrefs obj */
void *wf_bulk_buf(wf_remote *r, size_t n, size_t *cap); /* memory for a transfer (a spare, or new) */
void *wf_bulk_stage_buf(wf_remote *r, size_t n, size_t *cap); /* the same, mu not held */
void wf_bulk_keep(wf_remote *r, void **buf, size_t cap); /* a buffer done with: a spare (*buf NULL), or not */
void wf_bulk_post_locked(wf_remote *r, wf_rbulk *t);    /* posted at the next flush, before its frames */
void wf_bulk_post_all(wf_remote *r, wf_rbulk *list);    /* (no mu) posts a list taken from post_head */
void wf_bulk_go(wf_remote *r, int peer, uint64_t call_id, int callee, int go); /* BULK_GO / DROP / a reply */
void wf_bulk_drop_peer(wf_remote *r, int peer);         /* staged and held transfers for a lost peer */
void wf_bulk_tick(wf_remote *r);                        /* ended transfers */
void wf_bulk_free_all(wf_remote *r);

/* store.c (mu held) */
wf_rctx *wf_rctx_find(wf_remote *r, uint64_t id);
wf_robj *wf_robj_find(wf_rctx *c, wf_remote_oid id);
wf_robj *wf_robj_add(wf_rctx *c, wf_remote_oid id); /* a PENDING object with a reference for the store */
void wf_robj_unref(wf_robj *o);
void wf_robj_unlist(wf_rctx *c, wf_robj *o);
void wf_rctx_drop(wf_remote *r, wf_rctx *c, int collected); /* unlinks and frees c and its objects */
int64_t wf_remote_free_owned(wf_remote *r, int owner);         /* objects and contexts of a dead rank */
void wf_remote_collect_idle(wf_remote *r, int64_t now);
void wf_oid_str(wf_remote_oid id, char *buf, size_t len);     /* "{0, 7}" */

/* serve.c (mu held) */
void wf_serve_bulk_done(wf_remote *r, wf_rbulk *t); /* an ARG_RECV ended (takes t) */
void wf_serve_call(wf_remote *r, int peer, uint8_t *payload, wf_remote_msg *m); /* takes payload */
void wf_serve_tick(wf_remote *r, int64_t now);
void wf_serve_drop_peer(wf_remote *r, int peer);
void wf_serve_recheck(wf_remote *r); /* an object changed: start or fail waiting jobs */
void *wf_serve_worker(void *arg);
void wf_serve_free_all(wf_remote *r);

/* call.c (mu held) */
void wf_call_bulk_done(wf_remote *r, wf_rbulk *t); /* a FETCH_RECV ended (takes t) */
void wf_call_on_reply(wf_remote *r, int peer, wf_remote_msg *m);
void wf_call_tick(wf_remote *r, int64_t now);
void wf_call_fail_all(wf_remote *r, weft_status st, const char *msg);

#endif
