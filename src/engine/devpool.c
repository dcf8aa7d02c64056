/* devpool.c - the world's bounded pool of pinned chunk buffers for device
 * staging (one pool per device kind, made on first use, reused, freed at
 * finalize: no per-operation pinned allocation, whose CUDA free would
 * synchronise the device), the chunked copies through it, and the
 * chunk-by-chunk pipeline of allreduce and broadcast (devstage.h has the
 * design). Engine thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/devstage_impl.h"
#include "reduce/reduce.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

#define WAIT_NS (20 * 1000L) /* a blocking wait on the engine thread polls this often */
#define MIN_CHUNK 64
#define MAX_SLOTS 4096

static size_t chunk_bytes(const weft_world *w) {
  int64_t c = w->set.device_chunk_bytes;
  return c < MIN_CHUNK ? MIN_CHUNK : (size_t)c;
}

/* ------------------------------------------------------------- slots */
/* Makes p's slots on first use (index current). Pinned memory that cannot
 * be had becomes ordinary memory (copies then synchronous on CUDA, still
 * correct), with a warning. */
static weft_status pool_make(weft_world *w, wf_dpool *p, wf_device *d, int index) {
  if (p->made) return WEFT_OK;
  size_t chunk = chunk_bytes(w), n = w->set.device_pool_bytes > 0 ? (size_t)w->set.device_pool_bytes / chunk : 0;
  if (n < 1) n = 1;
  if (n > MAX_SLOTS) n = MAX_SLOTS;
  p->slots = calloc(n, sizeof *p->slots);
  if (!p->slots) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory making the device staging pool");
  p->dev = d;
  p->chunk = chunk;
  p->nslots = (int)n;
  p->alloc_index = index;
  p->made = 1;
  int heap = 0;
  for (size_t i = 0; i < n; i++) {
    wf_dslot *sl = &p->slots[i];
    if (d->ops->host_alloc(d, chunk, &sl->buf) != WEFT_OK) {
      sl->buf = malloc(chunk);
      sl->heap = 1;
      heap++;
      if (!sl->buf) {
        p->nslots = (int)i;
        if (!i) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory making the device staging pool (%zu bytes)", chunk);
        break;
      }
    }
  }
  if (heap)
    WF_WARN(WF_SUB_ENGINE, "%s staging pool: %d of its %d chunk buffers are ordinary memory (pinned memory ran out: %s)",
            d->ops->name, heap, p->nslots, wf_err_msg());
  return WEFT_OK;
}

/* 1 when every copy counted on sl is done (then nothing counts), 0 while
 * one runs, -1 when one failed (the message has the backend's text). */
static int slot_idle(wf_device *d, wf_dslot *sl) {
  for (int i = 0; i < WF_DS_MAX_INDEX; i++) {
    if (!(sl->used & (1u << i))) continue;
    d->ops->set_device(d, i); /* the event's device current before the call (CUDA: no stray context) */
    weft_status st = d->ops->event_query(d, sl->ev[i]);
    if (st == WEFT_IN_PROGRESS) return 0;
    if (st != WEFT_OK) return -1;
  }
  sl->used = 0;
  return 1;
}

/* Counts the copies queued on stream (device index, current) so far on sl. */
static weft_status slot_record(wf_device *d, wf_dslot *sl, int index, wf_dev_stream *stream) {
  if (!sl->ev[index]) WF_CHECK(d->ops->event_create(d, &sl->ev[index]));
  WF_CHECK(d->ops->event_record(d, sl->ev[index], stream));
  sl->used |= 1u << index;
  return WEFT_OK;
}

static void slot_destroy(wf_device *d, wf_dslot *sl) {
  for (int i = 0; i < WF_DS_MAX_INDEX; i++) {
    if (sl->ev[i]) d->ops->event_destroy(d, sl->ev[i]);
    if (sl->ev_up[i]) d->ops->event_destroy(d, sl->ev_up[i]);
  }
  if (sl->heap) free(sl->buf);
  else if (sl->buf) d->ops->host_free(d, sl->buf);
}

/* Takes up to want free slots of p (at least one: when none is free, an
 * overflow slot of ordinary memory, so that nothing waits for another
 * group's pipeline). Returns how many; 0: out of memory. */
static int slots_take(wf_dpool *p, size_t want, wf_dslot **out) {
  int n = 0;
  for (int i = 0; i < p->nslots && (size_t)n < want; i++)
    if (!p->slots[i].held) {
      p->slots[i].held = 1;
      out[n++] = &p->slots[i];
    }
  if (n || !want) return n;
  wf_dslot *o = calloc(1, sizeof *o);
  if (o) o->buf = malloc(p->chunk);
  if (!o || !o->buf) {
    free(o);
    return 0;
  }
  o->heap = o->overflow = o->held = 1;
  out[0] = o;
  return 1;
}

static void slots_give(wf_dpool *p, wf_dslot **sl, int n) {
  for (int i = 0; i < n; i++) {
    sl[i]->held = 0;
    if (sl[i]->overflow) { /* freed once its copies are done (wf_dpool_poll) */
      sl[i]->next = p->overflow;
      p->overflow = sl[i];
    }
  }
}

/* Waits until sl is idle, deadline at most (engine thread, polling). */
static weft_status wait_idle(wf_device *d, wf_dslot *sl, int64_t deadline) {
  for (;;) {
    int rc = slot_idle(d, sl);
    if (rc > 0) return WEFT_OK;
    if (rc < 0) return WEFT_ERR_INTERNAL; /* the message is the backend's */
    if (wf_now_ns() >= deadline)
      return wf_err(WEFT_ERR_TIMEOUT, "a copy between device and host memory did not complete within the "
                                      "operation's timeout");
    struct timespec ts = {0, WAIT_NS};
    nanosleep(&ts, NULL);
  }
}

/* ------------------------------------------------------------- moves */
weft_status wf_dpool_move(weft_world *w, wf_dstage *s, void *dptr, void *hbuf, size_t bytes, wf_copy_dir dir,
                          int64_t deadline) {
  if (!bytes) return WEFT_OK;
  wf_dpool *p = &w->dstage->pools[s->bk];
  wf_device *d = s->dev;
  wf_dev_stream *stream = NULL;
  WF_CHECK(wf_ds_stream(w, d, s->bk, s->index, &stream)); /* the device is current */
  WF_CHECK(pool_make(w, p, d, s->index));
  size_t chunk = p->chunk, nch = (bytes + chunk - 1) / chunk;
  wf_dslot **sl = malloc(sizeof *sl * (size_t)(p->nslots ? p->nslots : 1));
  int ns = sl ? slots_take(p, nch, sl) : 0;
  if (!ns) {
    free(sl);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory staging %zu bytes", bytes);
  }
  char *dv = dptr, *hv = hbuf;
  weft_status st = WEFT_OK;
#define LEN(j) ((j) + 1 < nch ? chunk : bytes - (j) * chunk)
  if (dir == WF_COPY_D2H) {
    /* chunk j queued into slot j % ns once chunk j - ns left it */
    for (size_t j = 0; j < nch + (size_t)ns && st == WEFT_OK; j++) {
      if (j >= (size_t)ns) {
        size_t q = j - (size_t)ns;
        wf_dslot *x = sl[q % (size_t)ns];
        if ((st = wait_idle(d, x, deadline)) == WEFT_OK) memcpy(hv + q * chunk, x->buf, LEN(q));
      }
      if (j < nch && st == WEFT_OK) {
        wf_dslot *x = sl[j % (size_t)ns];
        /* device writes follow this stream's earlier users of the slot; others' must be done */
        if (x->used & ~(1u << s->index)) st = wait_idle(d, x, deadline);
        if (st == WEFT_OK) st = d->ops->copy(d, x->buf, dv + j * chunk, LEN(j), WF_COPY_D2H, stream);
        if (st == WEFT_OK) st = slot_record(d, x, s->index, stream);
      }
    }
  } else {
    for (size_t j = 0; j < nch && st == WEFT_OK; j++) {
      wf_dslot *x = sl[j % (size_t)ns];
      if ((st = wait_idle(d, x, deadline)) != WEFT_OK) break; /* the host writes it */
      memcpy(x->buf, hv + j * chunk, LEN(j));
      if ((st = d->ops->copy(d, dv + j * chunk, x->buf, LEN(j), WF_COPY_H2D, stream)) == WEFT_OK)
        st = slot_record(d, x, s->index, stream);
    }
  }
#undef LEN
  slots_give(p, sl, ns);
  free(sl);
  return st;
}

int wf_dpool_poll(weft_world *w) {
  int left = 0;
  for (int k = 0; k < WF_DEVICE_KINDS; k++) {
    wf_dpool *p = &w->dstage->pools[k];
    wf_dslot **pp = &p->overflow;
    while (*pp) {
      wf_dslot *o = *pp;
      if (slot_idle(p->dev, o) == 0) {
        pp = &o->next;
        left = 1;
        continue;
      }
      *pp = o->next;
      slot_destroy(p->dev, o);
      free(o);
    }
  }
  return left;
}

void wf_dpool_free_all(weft_world *w, int64_t end) {
  for (int k = 0; k < WF_DEVICE_KINDS; k++) {
    wf_dpool *p = &w->dstage->pools[k];
    if (!p->made) continue;
    while (wf_dpool_poll(w) && wf_now_ns() < end) {
      struct timespec ts = {0, WAIT_NS};
      nanosleep(&ts, NULL);
    }
    int old = 0;
    p->dev->ops->get_device(p->dev, &old);
    p->dev->ops->set_device(p->dev, p->alloc_index);
    for (int i = 0; i < p->nslots; i++) {
      wait_idle(p->dev, &p->slots[i], end); /* past end: the backend defers or waits */
      slot_destroy(p->dev, &p->slots[i]);
    }
    while (p->overflow) {
      wf_dslot *o = p->overflow;
      p->overflow = o->next;
      slot_destroy(p->dev, o);
      free(o);
    }
    p->dev->ops->set_device(p->dev, old);
    free(p->slots);
    memset(p, 0, sizeof *p);
  }
}

/* ------------------------------------------------------------- pipeline */
typedef struct dpiece {
  weft_request *r;
  size_t at, n;  /* its elements in the response's concatenation */
  int down, up;  /* this rank's input goes down; the result comes up */
} dpiece;

struct wf_dpipe {
  wf_dpool *pool;
  wf_device *dev;
  wf_dslot **sl;
  int ns;
  dpiece *pc;
  uint32_t npc;
  weft_request **reqs; /* the response's requests (the executor's), nreq */
  uint32_t nreq;
  weft_request *one;
  size_t es, total, celems, nchunks, k, queued;
  weft_dtype dtype;
  weft_reduce_op op;
  double prescale, postscale;
  int coll, n;
  int64_t deadline;
  int failed;
};

int wf_devpipe_wants(const wf_exec *x) {
  if (x->req->msg.coll != WF_COLL_ALLREDUCE && x->req->msg.coll != WF_COLL_BROADCAST) return 0;
  for (uint32_t i = 0; i < x->nfused; i++)
    if ((x->fused ? x->fused[i] : x->req)->dstage) return 1;
  return 0;
}

size_t wf_devpipe_chunks(const struct wf_dpipe *p) { return p->nchunks; }

size_t wf_devpipe_chunk_elems(const weft_world *w, weft_dtype dtype) {
  return chunk_bytes(w) / weft_dtype_size(dtype);
}

weft_status wf_devpipe_begin(weft_world *w, wf_gstate *gs, struct wf_dpipe **out) {
  wf_exec *x = &gs->exec;
  const wf_request_msg *m = &x->req->msg;
  wf_dstage *s0 = NULL;
  const weft_request *q0 = NULL;
  *out = NULL;
  struct wf_dpipe *p = calloc(1, sizeof *p);
  if (!p || !(p->pc = calloc(x->nfused, sizeof *p->pc))) {
    free(p);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  p->coll = m->coll;
  p->dtype = (weft_dtype)m->dtype;
  p->op = (weft_reduce_op)m->reduce_op;
  p->prescale = m->prescale;
  p->postscale = m->postscale;
  p->n = gs->group->size;
  p->es = weft_dtype_size(p->dtype);
  p->deadline = x->deadline;
  p->one = x->req;
  p->reqs = x->fused ? x->fused : &p->one;
  p->nreq = x->nfused;
  int root = p->coll == WF_COLL_BROADCAST && m->root == gs->group->rank;
  for (uint32_t i = 0; i < x->nfused; i++) {
    weft_request *q = x->fused ? x->fused[i] : x->req;
    size_t k = (size_t)wf_elems(q->msg.shape, 0, q->msg.ndim);
    if (q->dstage && !s0) {
      s0 = q->dstage;
      q0 = q;
    }
    if (q->dstage && q->dstage->bk != s0->bk) {
      free(p->pc);
      free(p);
      return wf_err(WEFT_ERR_NOT_SUPPORTED, "tensors '%s' and '%s' are on devices of different kinds in one fused "
                    "response", q0->msg.name, q->msg.name);
    }
    if (!k) continue;
    p->pc[p->npc++] = (dpiece){q, p->total, k, p->coll == WF_COLL_ALLREDUCE || root,
                                p->coll == WF_COLL_ALLREDUCE || !root};
    p->total += k;
  }
  *out = p;
  p->dev = s0->dev;
  p->pool = &w->dstage->pools[s0->bk];
  wf_dev_stream *stream = NULL;
  WF_CHECK(wf_ds_stream(w, s0->dev, s0->bk, s0->index, &stream)); /* makes the device current */
  WF_CHECK(pool_make(w, p->pool, s0->dev, s0->index));
  p->celems = p->pool->chunk / p->es;
  p->nchunks = (p->total + p->celems - 1) / p->celems;
  if (!p->nchunks) return WEFT_OK;
  p->sl = malloc(sizeof *p->sl * (size_t)(p->pool->nslots ? p->pool->nslots : 1));
  p->ns = p->sl ? slots_take(p->pool, p->nchunks, p->sl) : 0;
  if (!p->ns) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory taking staging buffers");
  return WEFT_OK;
}

/* The part of piece c in chunk k: [*lo, *hi) of the concatenation. */
static int overlap(const struct wf_dpipe *p, const dpiece *c, size_t k, size_t *lo, size_t *hi) {
  size_t a = k * p->celems, b = a + p->celems;
  if (b > p->total) b = p->total;
  *lo = c->at > a ? c->at : a;
  *hi = c->at + c->n < b ? c->at + c->n : b;
  return *lo < *hi;
}

/* Names the failing tensor and this rank; the world fails (the other
 * ranks are in the collective). */
static int pipe_fail(weft_world *w, struct wf_dpipe *p, const dpiece *c, weft_status st, const char *what) {
  char why[512];
  snprintf(why, sizeof why, "%s", wf_err_msg());
  p->failed = 1;
  wf_world_fail(w, st == WEFT_OK ? WEFT_ERR_INTERNAL : st, "'%s': rank %d: %s: %s", c->r->msg.name, w->rank, what,
                why);
  return -1;
}

/* Queues the copies down of chunk k into its slot (1), or not yet: the
 * slot's earlier users on other streams are still running (0); -1 failed. */
static int queue_down(weft_world *w, struct wf_dpipe *p, size_t k) {
  wf_dslot *sl = p->sl[k % (size_t)p->ns];
  uint32_t idx = 0;
  size_t lo, hi;
  const dpiece *first = NULL;
  for (uint32_t i = 0; i < p->npc; i++)
    if (p->pc[i].down && p->pc[i].r->dstage && overlap(p, &p->pc[i], k, &lo, &hi)) {
      idx |= 1u << p->pc[i].r->dstage->index;
      if (!first) first = &p->pc[i];
    }
  if (idx) {
    /* device writes into the slot follow its earlier users: on one stream
     * by the stream's order, across streams once they are done */
    int single = !(idx & (idx - 1));
    if (!single || (sl->used & ~idx)) {
      int rc = slot_idle(p->dev, sl);
      if (rc < 0) return pipe_fail(w, p, first, WEFT_ERR_INTERNAL, "a copy through the staging pool failed");
      if (!rc) return 0;
    }
  }
  for (uint32_t i = 0; i < p->npc; i++) {
    dpiece *c = &p->pc[i];
    wf_dstage *s = c->r->dstage;
    if (!c->down || !s || !overlap(p, c, k, &lo, &hi)) continue;
    wf_dev_stream *stream = NULL;
    weft_status st = wf_ds_stream(w, s->dev, s->bk, s->index, &stream);
    if (st == WEFT_OK)
      st = s->dev->ops->copy(s->dev, (char *)sl->buf + (lo - k * p->celems) * p->es,
                             (const char *)c->r->in.data + (lo - c->at) * p->es, (hi - lo) * p->es, WF_COPY_D2H,
                             stream);
    if (st == WEFT_OK) st = slot_record(s->dev, sl, s->index, stream);
    if (st != WEFT_OK) return pipe_fail(w, p, c, st, "copying its device input down");
  }
  p->queued++;
  return 1;
}

int wf_devpipe_chunk(weft_world *w, struct wf_dpipe *p, void **buf, size_t *count) {
  if (p->failed) return -1;
  while (p->queued < p->nchunks && p->queued < p->k + (size_t)p->ns) {
    int rc = queue_down(w, p, p->queued);
    if (rc < 0) return -1;
    if (!rc) break;
  }
  wf_dslot *sl = p->sl[p->k % (size_t)p->ns];
  int rc = p->queued > p->k ? slot_idle(p->dev, sl) : 0;
  size_t lo, hi;
  const dpiece *c = &p->pc[0];
  for (uint32_t i = 0; i < p->npc; i++) /* the tensor to name: the first in this chunk */
    if (overlap(p, &p->pc[i], p->k, &lo, &hi)) {
      c = &p->pc[i];
      break;
    }
  if (rc < 0) return pipe_fail(w, p, c, WEFT_ERR_INTERNAL, "copying its device input down failed");
  if (!rc) {
    if (wf_now_ns() < p->deadline) return 0;
    wf_err(WEFT_ERR_TIMEOUT, "chunk %zu of %zu was not in host memory within the operation's timeout (the copy "
                             "down or the device is stuck)", p->k, p->nchunks);
    return pipe_fail(w, p, c, WEFT_ERR_TIMEOUT, "its device input did not reach host memory");
  }
  size_t base = p->k * p->celems, cnt = p->total - base < p->celems ? p->total - base : p->celems;
  for (uint32_t i = 0; i < p->npc; i++) { /* host tensors fused with device ones */
    const dpiece *h = &p->pc[i];
    if (h->down && !h->r->dstage && overlap(p, h, p->k, &lo, &hi))
      memcpy((char *)sl->buf + (lo - base) * p->es, (const char *)h->r->in.data + (lo - h->at) * p->es,
             (hi - lo) * p->es);
  }
  if (p->coll == WF_COLL_ALLREDUCE && p->prescale != 1.0) wf_scale_copy(p->dtype, sl->buf, sl->buf, cnt, p->prescale);
  *buf = sl->buf;
  *count = cnt;
  return 1;
}

/* The copies up of chunk k run on the up stream, beside the copies down of
 * later chunks on the staging stream; the staging stream then waits for
 * them (the slot's next copy down, its ev and the done events follow). */
int wf_devpipe_chunk_done(weft_world *w, struct wf_dpipe *p) {
  wf_dslot *sl = p->sl[p->k % (size_t)p->ns];
  size_t base = p->k * p->celems, cnt = p->total - base < p->celems ? p->total - base : p->celems, lo, hi;
  if (p->coll == WF_COLL_ALLREDUCE) wf_post_scale(p->dtype, p->op, p->postscale, sl->buf, cnt, p->n);
  uint32_t idx = 0;
  const dpiece *named[WF_DS_MAX_INDEX] = {0};
  for (uint32_t i = 0; i < p->npc; i++) {
    dpiece *c = &p->pc[i];
    if (!c->up || !overlap(p, c, p->k, &lo, &hi)) continue;
    wf_dstage *s = c->r->dstage;
    const char *src = (const char *)sl->buf + (lo - base) * p->es;
    char *dst = (char *)(p->coll == WF_COLL_BROADCAST ? c->r->in.data : c->r->out.data) + (lo - c->at) * p->es;
    if (!s) {
      memcpy(dst, src, (hi - lo) * p->es);
      continue;
    }
    wf_dev_stream *up = NULL;
    weft_status st = wf_ds_up_stream(w, s->dev, s->bk, s->index, &up);
    if (st == WEFT_OK) st = s->dev->ops->copy(s->dev, dst, src, (hi - lo) * p->es, WF_COPY_H2D, up);
    if (st != WEFT_OK) return pipe_fail(w, p, c, st, "copying its result up");
    idx |= 1u << s->index;
    if (!named[s->index]) named[s->index] = c;
  }
  for (int i = 0; i < WF_DS_MAX_INDEX; i++) {
    if (!(idx & (1u << i))) continue;
    wf_dstage *s = named[i]->r->dstage;
    wf_dev_stream *up = NULL, *stream = NULL;
    weft_status st = wf_ds_up_stream(w, s->dev, s->bk, i, &up);
    if (st == WEFT_OK) st = wf_ds_stream(w, s->dev, s->bk, i, &stream);
    if (st == WEFT_OK && !sl->ev_up[i]) st = s->dev->ops->event_create(s->dev, &sl->ev_up[i]);
    if (st == WEFT_OK) st = s->dev->ops->event_record(s->dev, sl->ev_up[i], up);
    if (st == WEFT_OK) st = s->dev->ops->stream_wait_event(s->dev, stream, sl->ev_up[i]);
    if (st == WEFT_OK) st = slot_record(s->dev, sl, i, stream);
    if (st != WEFT_OK) return pipe_fail(w, p, named[i], st, "ordering its copies up before the slot's reuse");
  }
  p->k++;
  return p->k < p->nchunks;
}

void wf_devpipe_end(weft_world *w, struct wf_dpipe *p) {
  /* each device tensor's done event: after everything queued for it */
  for (uint32_t i = 0; i < p->nreq; i++) {
    wf_dstage *s = p->reqs[i]->dstage;
    if (!s || s->piped) continue;
    s->piped = 1;
    wf_dev_stream *stream = NULL;
    weft_status st = wf_ds_stream(w, s->dev, s->bk, s->index, &stream);
    if (st == WEFT_OK && !s->done) st = s->dev->ops->event_create(s->dev, &s->done);
    if (st == WEFT_OK) st = s->dev->ops->event_record(s->dev, s->done, stream);
    if (st != WEFT_OK) wf_ds_fail(s, p->reqs[i], st, "recording the copy-up event");
  }
  if (p->sl) slots_give(p->pool, p->sl, p->ns);
  free(p->sl);
  free(p->pc);
  free(p);
}
