/* devstage.c - device tensors staged through pinned host memory in stream
 * order (devstage.h has the life of a staged request): the checks at
 * submission, the copy down on the caller's thread, the executor's gate,
 * the copy up and the engine's lists of uploads and retired staging. */
#include "engine/devstage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/time.h"

/* How soon the engine looks again while device work is pending: a copy of a
 * small tensor takes microseconds on a GPU. */
#define POLL_NS (50 * 1000LL)
/* Staging retired with its last copy still running (only memory to give
 * back, nobody waits for it) is looked at this often. */
#define RETIRED_POLL_NS (10 * 1000 * 1000LL)
/* weft_finalize waits this long for copies in flight. */
#define STOP_NS (1000 * 1000 * 1000LL)
#define MAX_INDEX 16 /* devices per kind with a staging stream */

typedef struct wf_dstage {
  struct wf_dstage *next;     /* uploading or retired list */
  weft_request *req;          /* uploading: the request it completes */
  wf_device *dev;
  int kind, index;            /* WEFT_DEVICE_KIND_CUDA / _SIM, device index */
  wf_dev_stream *stream;      /* the world's staging stream of the device */
  wf_dev_event *ev;           /* recorded after the copy down, then after the copy up */
  void *host;                 /* pinned: the input (allreduce, broadcast: the result too) */
  void *host_out;             /* pinned: allgather/alltoall/reducescatter host result */
  int host_out_heap;          /* host_out is malloc'd (pinned memory ran out) */
  void *user_in, *user_out;   /* the caller's device pointers */
  int down_done, restored;
  weft_status st;             /* a failed device step (WEFT_OK: none) */
  char msg[512];
} wf_dstage;

struct wf_dstage_world {
  pthread_mutex_t mu;         /* streams (made by caller threads) */
  wf_dev_stream *streams[3][MAX_INDEX];
  wf_device *sdev[3][MAX_INDEX];
  _Atomic int used;           /* relaxed: only skips the executor's look when 0 */
  wf_dstage *uploading;       /* engine thread only */
  wf_dstage *retired;         /* engine thread only */
};

static wf_device_kind backend_kind(int kind) { return kind == WEFT_DEVICE_KIND_SIM ? WF_DEVICE_SIM : WF_DEVICE_CUDA; }
static int public_kind(const weft_tensor *t) {
  return t->device_kind == WEFT_DEVICE_KIND_AUTO ? WEFT_DEVICE_KIND_CUDA : t->device_kind;
}

uint32_t wf_submit_device_kinds(void) { return wf_device_kinds_present() & WF_DEVICE_KINDS_MASK; }

int32_t wf_submit_device_code(const weft_tensor *t) {
  return t->device < 0 ? WEFT_DEVICE_CPU : WF_DEVICE_CODE(public_kind(t), t->device);
}

const char *wf_submit_device_str(const weft_tensor *t, char *buf, size_t len) {
  if (t->device < 0) snprintf(buf, len, "host memory");
  else snprintf(buf, len, "%s:%d", public_kind(t) == WEFT_DEVICE_KIND_SIM ? "sim" : "cuda", t->device);
  return buf;
}

weft_status wf_submit_check_device(const char *fn, const char *name, const char *what, const weft_tensor *t,
                                   size_t bytes) {
  int kind = public_kind(t);
  if (kind != WEFT_DEVICE_KIND_CUDA && kind != WEFT_DEVICE_KIND_SIM)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s('%s'): %s tensor has unknown device_kind %d", fn, name, what,
                  t->device_kind);
  if (t->device >= MAX_INDEX)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s('%s'): %s tensor is on device %d (at most %d per kind)", fn, name,
                  what, t->device, MAX_INDEX - 1);
  wf_device *d = NULL;
  char where[48];
  wf_submit_device_str(t, where, sizeof where);
  if (wf_device_get(backend_kind(kind), &d) != WEFT_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", wf_err_msg());
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "%s('%s'): %s tensor is on %s, which cannot be used: %s", fn, name, what,
                  where, why);
  }
  if (!bytes) return WEFT_OK;
  char whatn[320];
  snprintf(whatn, sizeof whatn, "%s('%s'): %s tensor on %s", fn, name, what, where);
  weft_status st = wf_device_check_ptr(d, t->data, bytes, whatn);
  if (st != WEFT_OK) return st;
  wf_dev_ptr p;
  if ((st = d->ops->pointer(d, t->data, &p)) != WEFT_OK) return st;
  if (p.device != t->device)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: its data %p is memory of device %d, not %d", whatn, t->data,
                  p.device, t->device);
  return WEFT_OK;
}

/* ------------------------------------------------------------- world */
struct wf_dstage_world *wf_devstage_world_new(void) {
  struct wf_dstage_world *dw = calloc(1, sizeof *dw);
  if (dw) pthread_mutex_init(&dw->mu, NULL);
  return dw;
}

static void destroy_streams(struct wf_dstage_world *dw) {
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < MAX_INDEX; i++)
      if (dw->streams[k][i]) {
        wf_device *d = dw->sdev[k][i];
        int old = 0;
        d->ops->get_device(d, &old);
        d->ops->set_device(d, i);
        d->ops->stream_destroy(d, dw->streams[k][i]); /* queued work completes first (bounded) */
        d->ops->set_device(d, old);
        dw->streams[k][i] = NULL;
      }
}

void wf_devstage_world_free(struct wf_dstage_world *dw) {
  if (!dw) return;
  destroy_streams(dw);
  pthread_mutex_destroy(&dw->mu);
  free(dw);
}

int wf_devstage_used(weft_world *w) { return atomic_load_explicit(&w->dstage->used, memory_order_relaxed); }

/* The world's staging stream of s's device (made on first use; the device
 * is current). */
static weft_status staging_stream(struct wf_dstage_world *dw, wf_dstage *s) {
  weft_status st = WEFT_OK;
  pthread_mutex_lock(&dw->mu);
  wf_dev_stream **sp = &dw->streams[s->kind][s->index];
  if (!*sp) {
    st = s->dev->ops->stream_create(s->dev, sp);
    if (st == WEFT_OK) dw->sdev[s->kind][s->index] = s->dev;
  }
  s->stream = *sp;
  pthread_mutex_unlock(&dw->mu);
  return st;
}

/* ------------------------------------------------------------- release */
/* Gives s's host result back (pinned, or malloc'd when pinned memory ran out). */
static void free_host_out(wf_dstage *s) {
  if (s->host_out && s->host_out_heap) free(s->host_out);
  else if (s->host_out) s->dev->ops->host_free(s->dev, s->host_out);
  s->host_out = NULL;
  s->host_out_heap = 0;
}

static void release(wf_dstage *s) {
  wf_device *d = s->dev;
  if (s->ev) d->ops->event_destroy(d, s->ev);
  if (s->host) d->ops->host_free(d, s->host); /* complete: the event was (stop: the backend defers or waits) */
  free_host_out(s);
  free(s);
}

/* 1 while s's last recorded event has not completed. */
static int pending(wf_dstage *s) { return s->ev && s->dev->ops->event_query(s->dev, s->ev) == WEFT_IN_PROGRESS; }

static void retire(weft_world *w, wf_dstage *s) {
  if (!pending(s)) {
    release(s);
    return;
  }
  s->next = w->dstage->retired;
  w->dstage->retired = s;
}

/* Records a failed step of s (the first one) with the backend's message. */
static weft_status fail(wf_dstage *s, const weft_request *r, weft_status st, const char *step) {
  if (s->st == WEFT_OK) {
    s->st = st;
    snprintf(s->msg, sizeof s->msg, "tensor '%s' on %s:%d: %s: %s", r->msg.name,
             s->kind == WEFT_DEVICE_KIND_SIM ? "sim" : "cuda", s->index, step, wf_err_msg());
  }
  return st;
}

/* ------------------------------------------------------------- copy down */
static size_t in_bytes(const weft_request *r) {
  return (size_t)wf_elems(r->msg.shape, 0, r->msg.ndim) * weft_dtype_size((weft_dtype)r->msg.dtype);
}

/* The steps of wf_devstage_in, the device current. */
static weft_status stage_down(weft_world *w, weft_request *r, wf_dstage *s) {
  const wf_device_ops *o = s->dev->ops;
  size_t bytes = in_bytes(r);
  wf_dev_event *ready = NULL;
  WF_CHECK(fail(s, r, staging_stream(w->dstage, s), "creating the staging stream"));
  WF_CHECK(fail(s, r, o->host_alloc(s->dev, bytes, &s->host), "allocating pinned host memory"));
  WF_CHECK(fail(s, r, o->event_create(s->dev, &ready), "creating an event"));
  /* nothing is read before the producer's queued work is done */
  weft_status st = o->event_record(s->dev, ready, (wf_dev_stream *)r->in.stream);
  if (st != WEFT_OK) fail(s, r, st, "recording the ready event on the producer's stream");
  else if ((st = o->stream_wait_event(s->dev, s->stream, ready)) != WEFT_OK)
    fail(s, r, st, "making the staging stream wait for the producer");
  o->event_destroy(s->dev, ready); /* pending: it goes when it completes */
  if (st != WEFT_OK) return st;
  if (bytes) WF_CHECK(fail(s, r, o->copy(s->dev, s->host, s->user_in, bytes, WF_COPY_D2H, s->stream), "copying down"));
  WF_CHECK(fail(s, r, o->event_create(s->dev, &s->ev), "creating an event"));
  return fail(s, r, o->event_record(s->dev, s->ev, s->stream), "recording the copy-down event");
}

weft_status wf_devstage_in(weft_request *r) {
  weft_world *w = r->world;
  wf_dstage *s = calloc(1, sizeof *s);
  if (!s) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory staging '%s'", r->msg.name);
  s->kind = public_kind(&r->in);
  s->index = r->in.device;
  s->user_in = r->in.data;
  s->user_out = r->out.data;
  weft_status st = wf_device_get(backend_kind(s->kind), &s->dev); /* checked at submission: loads */
  if (st != WEFT_OK) {
    free(s);
    return st;
  }
  atomic_store_explicit(&w->dstage->used, 1, memory_order_relaxed);
  int old = 0;
  s->dev->ops->get_device(s->dev, &old);
  if ((st = s->dev->ops->set_device(s->dev, s->index)) == WEFT_OK) {
    st = stage_down(w, r, s);
    s->dev->ops->set_device(s->dev, old); /* the caller's current device is its own */
  } else {
    fail(s, r, st, "making the device current");
  }
  if (st != WEFT_OK) {
    st = wf_err(st, "%s: %s", wf_coll_name(r->msg.coll), s->msg);
    release(s); /* the backend defers freeing memory a queued copy uses */
    return st;
  }
  /* the host view from here on: every later stage sees host memory */
  r->in.data = s->host;
  if (r->msg.coll == WF_COLL_ALLREDUCE) r->out.data = s->host; /* in place on the host */
  else if (r->msg.coll == WF_COLL_REDUCESCATTER) r->out.data = NULL; /* a host result (wf_devstage_host_result) */
  r->dstage = s;
  return WEFT_OK;
}

void wf_devstage_discard(weft_request *r) {
  if (!r->dstage) return;
  release(r->dstage);
  r->dstage = NULL;
}

weft_status wf_devstage_host_result(weft_request *r, size_t bytes) {
  wf_dstage *s = r->dstage;
  r->result = NULL;
  r->result_owned = 0;
  free_host_out(s); /* not reached: one result per request */
  s->dev->ops->set_device(s->dev, s->index);
  if (s->dev->ops->host_alloc(s->dev, bytes, &s->host_out) != WEFT_OK) {
    /* pinned memory ran out: ordinary memory (a slower copy up), so that
     * this rank still takes part and nothing fails for it */
    s->host_out = bytes ? malloc(bytes) : NULL;
    if (bytes && !s->host_out) return WEFT_ERR_NO_MEMORY;
    s->host_out_heap = 1;
  }
  r->result = s->host_out;
  return WEFT_OK;
}

/* ------------------------------------------------------------- the gate */
int wf_devstage_ready(weft_world *w, weft_request *r) {
  wf_dstage *s = r ? r->dstage : NULL;
  if (!s || s->down_done) return 1;
  weft_status st = s->dev->ops->event_query(s->dev, s->ev);
  if (st == WEFT_OK) {
    s->down_done = 1;
    return 1;
  }
  if (st == WEFT_IN_PROGRESS && wf_now_ns() < r->deadline) return 0;
  /* The other ranks would run the collective with whatever this rank's
   * pinned buffer holds (a copy may still be writing it): their results
   * would be wrong without an error. The world fails instead, naming the
   * tensor and this rank; the request completes with it, and its staging
   * is released once the copy's event completes. */
  if (st == WEFT_IN_PROGRESS) {
    wf_world_fail(w, WEFT_ERR_TIMEOUT, "'%s': rank %d's device input did not reach host memory within the "
                  "operation's timeout (the producer's stream or the copy down is stuck)", r->msg.name, w->rank);
  } else {
    char why[512];
    snprintf(why, sizeof why, "%s", wf_err_msg());
    wf_world_fail(w, st, "'%s': copying rank %d's device input to host memory failed: %s", r->msg.name, w->rank,
                  why);
  }
  return 0;
}

/* ------------------------------------------------------------- copy up */
static size_t result_bytes(const weft_request *r) {
  return (size_t)wf_elems(r->result_shape, 0, r->result_ndim) * weft_dtype_size((weft_dtype)r->msg.dtype);
}

/* Restores the caller's descriptors (the host view's pointers go). */
static void restore(weft_request *r, wf_dstage *s) {
  if (s->restored) return;
  s->restored = 1;
  r->in.data = s->user_in;
  if (r->msg.coll == WF_COLL_ALLREDUCE || r->msg.coll == WF_COLL_REDUCESCATTER) r->out.data = s->user_out;
  if (r->result && r->result == s->host_out) r->result = NULL; /* never report staging memory */
}

/* Queues the copy up of r's result; the device is current. */
static weft_status stage_up(wf_dstage *s, weft_request *r) {
  const wf_device_ops *o = s->dev->ops;
  const void *src = s->host;
  void *dst;
  size_t bytes;
  int gathered = r->msg.coll == WF_COLL_ALLGATHER || r->msg.coll == WF_COLL_ALLTOALL ||
                 r->msg.coll == WF_COLL_REDUCESCATTER;
  if (!gathered) {
    bytes = in_bytes(r);
    dst = r->msg.coll == WF_COLL_BROADCAST ? s->user_in : s->user_out;
  } else {
    src = s->host_out;
    bytes = result_bytes(r);
    restore(r, s); /* r->result: the host result goes */
    if (s->user_out) {
      dst = s->user_out; /* reducescatter into the caller's tensor: its output, as on the host path */
      r->result = dst;
    } else if (r->alloc) {
      dst = r->alloc(bytes, r->alloc_ctx);
      r->result = dst; /* the caller's, even on failure (to free it) */
      if (!dst && bytes) {
        wf_err(WEFT_ERR_NO_MEMORY, "the output allocator returned NULL for %zu bytes", bytes);
        return fail(s, r, WEFT_ERR_NO_MEMORY, "allocating the output");
      }
      if (bytes) {
        char what[300];
        snprintf(what, sizeof what, "the output allocator's memory for '%s'", r->msg.name);
        WF_CHECK(fail(s, r, wf_device_check_ptr(s->dev, dst, bytes, what), "checking the allocator's output"));
      }
    } else {
      WF_CHECK(fail(s, r, o->mem_alloc(s->dev, bytes, &dst), "allocating the output"));
      r->result = dst;
      r->result_dev = s->dev;
    }
    r->result_owned = 0;
  }
  if (bytes) WF_CHECK(fail(s, r, o->copy(s->dev, dst, src, bytes, WF_COPY_H2D, s->stream), "copying up"));
  WF_CHECK(fail(s, r, o->event_record(s->dev, s->ev, s->stream), "recording the copy-up event"));
  if (r->consumer_stream)
    WF_CHECK(fail(s, r, o->stream_wait_event(s->dev, (wf_dev_stream *)r->consumer_stream, s->ev),
                  "making the consumer stream wait for the copy up"));
  return WEFT_OK;
}

int wf_devstage_upload(weft_world *w, weft_request *r, weft_status *st, const char **msg) {
  wf_dstage *s = r->dstage;
  if (!s) return 0;
  if (s->st == WEFT_OK && s->dev->ops->set_device(s->dev, s->index) != WEFT_OK)
    fail(s, r, WEFT_ERR_INTERNAL, "making the device current");
  if (s->st == WEFT_OK) stage_up(s, r);
  if (s->st != WEFT_OK) {
    *st = s->st;
    *msg = s->msg;
    return 0;
  }
  restore(r, s);
  if (r->consumer_stream) return 0; /* complete now; the staging retires when the copy is done */
  s->req = r;
  s->next = w->dstage->uploading;
  w->dstage->uploading = s;
  return 1;
}

void wf_devstage_detach(weft_world *w, weft_request *r) {
  wf_dstage *s = r->dstage;
  if (!s) return;
  restore(r, s);
  r->dstage = NULL;
  retire(w, s);
}

/* Completes an upload with st (its staging retires). */
static void upload_done(weft_world *w, wf_dstage *s, weft_status st) {
  weft_request *r = s->req;
  s->req = NULL;
  wf_request_complete(w, r, st, st == WEFT_OK ? NULL : s->msg);
}

void wf_devstage_poll(weft_world *w) {
  struct wf_dstage_world *dw = w->dstage;
  if (!dw->uploading && !dw->retired) return;
  int64_t now = wf_now_ns();
  wf_dstage *up = dw->uploading, *keep = NULL;
  dw->uploading = NULL;
  while (up) {
    wf_dstage *s = up;
    up = s->next;
    weft_status st = s->dev->ops->event_query(s->dev, s->ev);
    if (st == WEFT_IN_PROGRESS && now < s->req->deadline) {
      s->next = keep;
      keep = s;
      continue;
    }
    if (st == WEFT_IN_PROGRESS) {
      wf_err(WEFT_ERR_TIMEOUT, "the copy up did not complete within the operation's timeout");
      fail(s, s->req, WEFT_ERR_TIMEOUT, "waiting for the copy up");
    } else if (st != WEFT_OK) {
      fail(s, s->req, st, "copying up");
    }
    upload_done(w, s, s->st);
  }
  /* completions above retire into dw->retired; keep the rest pending */
  for (wf_dstage *s = keep, *n; s; s = n) {
    n = s->next;
    s->next = dw->uploading;
    dw->uploading = s;
  }
  wf_dstage *ret = dw->retired, *left = NULL;
  dw->retired = NULL;
  for (wf_dstage *s = ret, *n; s; s = n) {
    n = s->next;
    if (pending(s)) {
      s->next = left;
      left = s;
    } else {
      release(s);
    }
  }
  dw->retired = left;
}

int64_t wf_devstage_next(weft_world *w, int64_t now) {
  struct wf_dstage_world *dw = w->dstage;
  if (dw->uploading) return now + POLL_NS;
  for (int gi = 0; gi < w->ngs; gi++)
    if (w->gs[gi]->dev_wait && w->gs[gi]->resps_pos < w->gs[gi]->nresps) return now + POLL_NS;
  return dw->retired ? now + RETIRED_POLL_NS : INT64_MAX;
}

void wf_devstage_stop(weft_world *w) {
  struct wf_dstage_world *dw = w->dstage;
  int64_t end = wf_now_ns() + STOP_NS;
  for (;;) {
    wf_devstage_poll(w);
    if ((!dw->uploading && !dw->retired) || wf_now_ns() >= end) break;
    struct timespec ts = {0, POLL_NS};
    nanosleep(&ts, NULL);
  }
  while (dw->uploading) {
    wf_dstage *s = dw->uploading;
    dw->uploading = s->next;
    snprintf(s->msg, sizeof s->msg, "weft_finalize was called while tensor '%s' was being copied to the device",
             s->req->msg.name);
    upload_done(w, s, WEFT_ERR_SHUTDOWN);
  }
  while (dw->retired) {
    wf_dstage *s = dw->retired;
    dw->retired = s->next;
    release(s);
  }
  destroy_streams(dw);
}

void wf_devstage_free_result(weft_request *r) {
  if (r->result_dev && r->result) r->result_dev->ops->mem_free(r->result_dev, r->result);
  r->result_dev = NULL;
}
