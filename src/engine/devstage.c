/* devstage.c - device tensors staged through host memory in stream order
 * (devstage.h has the life of a staged request): the checks and the ready
 * event at submission, the executor's gate, the gathers' copies down and
 * up (through the pool, devpool.c), the engine's lists of uploads and
 * retired staging, the world's staging streams. */
#include "engine/devstage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "engine/devstage_impl.h"
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
#define MAX_INDEX WF_DS_MAX_INDEX

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
/* ------------------------------------------------------------- world */
struct wf_dstage_world *wf_devstage_world_new(void) {
  struct wf_dstage_world *dw = calloc(1, sizeof *dw);
  if (dw) pthread_mutex_init(&dw->mu, NULL);
  return dw;
}

static void destroy_streams(struct wf_dstage_world *dw) {
  for (int k = 0; k < WF_DEVICE_KINDS; k++)
    for (int i = 0; i < MAX_INDEX; i++)
      for (int u = 0; u < 2; u++) {
        wf_dev_stream **sp = u ? &dw->up_streams[k][i] : &dw->streams[k][i];
        if (!*sp) continue;
        wf_device *d = dw->sdev[k][i];
        int old = 0;
        d->ops->get_device(d, &old);
        d->ops->set_device(d, i);
        d->ops->stream_destroy(d, *sp); /* queued work completes first (bounded) */
        d->ops->set_device(d, old);
        *sp = NULL;
      }
}

void wf_devstage_world_free(struct wf_dstage_world *dw) {
  if (!dw) return;
  destroy_streams(dw);
  pthread_mutex_destroy(&dw->mu);
  free(dw);
}

int wf_devstage_used(weft_world *w) { return atomic_load_explicit(&w->dstage->used, memory_order_relaxed); }

static weft_status ds_stream(weft_world *w, wf_device *d, int bk, int index, int up, wf_dev_stream **out) {
  struct wf_dstage_world *dw = w->dstage;
  weft_status st = d->ops->set_device(d, index); /* before any device call on this thread */
  if (st != WEFT_OK) return st;
  pthread_mutex_lock(&dw->mu);
  wf_dev_stream **sp = up ? &dw->up_streams[bk][index] : &dw->streams[bk][index];
  if (!*sp) {
    st = d->ops->stream_create(d, sp);
    if (st == WEFT_OK) dw->sdev[bk][index] = d;
  }
  *out = *sp;
  pthread_mutex_unlock(&dw->mu);
  return st;
}

weft_status wf_ds_stream(weft_world *w, wf_device *d, int bk, int index, wf_dev_stream **out) {
  return ds_stream(w, d, bk, index, 0, out);
}

weft_status wf_ds_up_stream(weft_world *w, wf_device *d, int bk, int index, wf_dev_stream **out) {
  return ds_stream(w, d, bk, index, 1, out);
}

/* ------------------------------------------------------------- release */
static void release(wf_dstage *s) {
  wf_device *d = s->dev;
  if (s->ready) d->ops->event_destroy(d, s->ready); /* pending: it goes when it completes */
  if (s->done) d->ops->event_destroy(d, s->done);
  free(s->host); /* ordinary memory, never a copy's: the pool's buffers are */
  free(s->host_out);
  free(s);
}

/* 1 while copies queued for s may still run. */
static int pending(wf_dstage *s) {
  wf_dev_event *e = s->done ? s->done : s->ready;
  if (!e) return 0;
  s->dev->ops->set_device(s->dev, s->index); /* before any device call on the engine thread */
  return s->dev->ops->event_query(s->dev, e) == WEFT_IN_PROGRESS;
}

static void retire(weft_world *w, wf_dstage *s) {
  if (!pending(s)) {
    release(s);
    return;
  }
  s->next = w->dstage->retired;
  w->dstage->retired = s;
}

weft_status wf_ds_fail(wf_dstage *s, const weft_request *r, weft_status st, const char *step) {
  if (st != WEFT_OK && s->st == WEFT_OK) {
    s->st = st;
    snprintf(s->msg, sizeof s->msg, "tensor '%s' on %s:%d: %s: %s", r->msg.name,
             s->kind == WEFT_DEVICE_KIND_SIM ? "sim" : "cuda", s->index, step, wf_err_msg());
  }
  return st;
}
#define fail wf_ds_fail

/* ------------------------------------------------------------- submission */
static size_t in_bytes(const weft_request *r) {
  return (size_t)wf_elems(r->msg.shape, 0, r->msg.ndim) * weft_dtype_size((weft_dtype)r->msg.dtype);
}

weft_status wf_devstage_in(weft_request *r) {
  weft_world *w = r->world;
  wf_dstage *s = calloc(1, sizeof *s);
  if (!s) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory staging '%s'", r->msg.name);
  s->kind = public_kind(&r->in);
  s->bk = (int)backend_kind(s->kind);
  s->index = r->in.device;
  s->user_in = r->in.data;
  s->user_out = r->out.data;
  weft_status st = wf_device_get(backend_kind(s->kind), &s->dev); /* checked at submission: loads */
  if (st != WEFT_OK) {
    free(s);
    return st;
  }
  /* Only the ready event, on the caller's own stream: the copies are the
   * engine's, on the world's staging stream, when the response runs. */
  const wf_device_ops *o = s->dev->ops;
  int old = 0;
  o->get_device(s->dev, &old);
  if ((st = o->set_device(s->dev, s->index)) != WEFT_OK) {
    fail(s, r, st, "making the device current");
  } else {
    if (fail(s, r, o->event_create(s->dev, &s->ready), "creating an event") == WEFT_OK)
      fail(s, r, o->event_record(s->dev, s->ready, (wf_dev_stream *)r->in.stream),
           "recording the ready event on the producer's stream");
    o->set_device(s->dev, old); /* the caller's current device is its own */
  }
  if (s->st != WEFT_OK) {
    st = wf_err(s->st, "%s: %s", wf_coll_name(r->msg.coll), s->msg);
    release(s);
    return st;
  }
  atomic_store_explicit(&w->dstage->used, 1, memory_order_relaxed);
  r->dstage = s;
  return WEFT_OK;
}

void wf_devstage_discard(weft_request *r) {
  if (!r->dstage) return;
  release(r->dstage);
  r->dstage = NULL;
}

/* ------------------------------------------------------------- the gate */
int wf_devstage_ready(weft_world *w, weft_request *r) {
  wf_dstage *s = r ? r->dstage : NULL;
  if (!s || s->ready_done) return 1;
  weft_status st = s->dev->ops->set_device(s->dev, s->index); /* before any device call on this thread */
  if (st == WEFT_OK) st = s->dev->ops->event_query(s->dev, s->ready);
  if (st == WEFT_OK) {
    s->ready_done = 1;
    return 1;
  }
  if (st == WEFT_IN_PROGRESS && wf_now_ns() < r->deadline) return 0;
  /* The other ranks would wait in the collective for this rank: the world
   * fails instead, naming the tensor and this rank. */
  if (st == WEFT_IN_PROGRESS) {
    wf_world_fail(w, WEFT_ERR_TIMEOUT, "'%s': rank %d's device input was not ready within the operation's timeout "
                  "(the producer's stream is stuck)", r->msg.name, w->rank);
  } else {
    char why[512];
    snprintf(why, sizeof why, "%s", wf_err_msg());
    wf_world_fail(w, st, "'%s': rank %d's producer stream failed: %s", r->msg.name, w->rank, why);
  }
  return 0;
}

/* ------------------------------------------------------------- copy down (gathers) */
weft_status wf_devstage_bounce_in(weft_world *w, weft_request *r, int64_t deadline) {
  wf_dstage *s = r->dstage;
  size_t bytes = in_bytes(r);
  s->host = malloc(bytes ? bytes : 1);
  if (!s->host) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory staging '%s' (%zu bytes)", r->msg.name, bytes);
  weft_status st = wf_dpool_move(w, s, s->user_in, s->host, bytes, WF_COPY_D2H, deadline);
  if (st != WEFT_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", wf_err_msg());
    return wf_err(st, "copying its device input to host memory: %s", why);
  }
  s->bounced = 1;
  r->in.data = s->host; /* the host view: the algorithms see host memory only */
  if (r->msg.coll == WF_COLL_REDUCESCATTER) r->out.data = NULL; /* a host result (wf_devstage_host_result) */
  return WEFT_OK;
}

weft_status wf_devstage_host_result(weft_request *r, size_t bytes) {
  wf_dstage *s = r->dstage;
  r->result = NULL;
  r->result_owned = 0;
  free(s->host_out); /* not reached: one result per request */
  s->host_out = malloc(bytes ? bytes : 1);
  if (!s->host_out) return WEFT_ERR_NO_MEMORY;
  r->result = s->host_out;
  return WEFT_OK;
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

/* Copies a gathered result up through the pool (allgather, alltoall,
 * reducescatter; allreduce and broadcast were copied up chunk by chunk). */
static weft_status stage_up(weft_world *w, wf_dstage *s, weft_request *r) {
  const wf_device_ops *o = s->dev->ops;
  const void *src = s->host_out;
  size_t bytes = result_bytes(r);
  void *dst;
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
  WF_CHECK(fail(s, r, wf_dpool_move(w, s, dst, (void *)src, bytes, WF_COPY_H2D, r->deadline), "copying up"));
  wf_dev_stream *stream = NULL;
  WF_CHECK(fail(s, r, wf_ds_stream(w, s->dev, s->bk, s->index, &stream), "making the staging stream"));
  if (!s->done) WF_CHECK(fail(s, r, o->event_create(s->dev, &s->done), "creating an event"));
  return fail(s, r, o->event_record(s->dev, s->done, stream), "recording the copy-up event");
}

int wf_devstage_upload(weft_world *w, weft_request *r, weft_status *st, const char **msg) {
  wf_dstage *s = r->dstage;
  if (!s) return 0;
  if (s->st == WEFT_OK && !s->piped) stage_up(w, s, r);
  if (s->st == WEFT_OK && r->consumer_stream) {
    if (fail(s, r, s->dev->ops->set_device(s->dev, s->index), "making the device current") == WEFT_OK)
      fail(s, r, s->dev->ops->stream_wait_event(s->dev, (wf_dev_stream *)r->consumer_stream, s->done),
           "making the consumer stream wait for the copy up");
  }
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
  if (!dw->uploading && !dw->retired && !wf_dpool_poll(w)) return;
  int64_t now = wf_now_ns();
  wf_dstage *up = dw->uploading, *keep = NULL;
  dw->uploading = NULL;
  while (up) {
    wf_dstage *s = up;
    up = s->next;
    weft_status st = s->dev->ops->set_device(s->dev, s->index);
    if (st == WEFT_OK) st = s->dev->ops->event_query(s->dev, s->done);
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
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    if (gs->dev_wait && gs->resps_pos < gs->nresps) return now + POLL_NS;
    if (gs->exec.active && gs->exec.chunk_wait) return now + POLL_NS; /* a pipeline's next chunk */
  }
  int over = 0;
  for (int k = 0; k < WF_DEVICE_KINDS; k++) over |= dw->pools[k].overflow != NULL;
  return dw->retired || over ? now + RETIRED_POLL_NS : INT64_MAX;
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
  wf_dpool_free_all(w, end);
  destroy_streams(dw);
}

void wf_devstage_free_result(weft_request *r) {
  if (r->result_dev && r->result) r->result_dev->ops->mem_free(r->result_dev, r->result);
  r->result_dev = NULL;
}
