/* ops.c - the collective entry points: validate arguments (local misuse is
 * rejected here, at once, with a message), copy the descriptors into a new
 * request, register its name as in flight, and hand it to the engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "negotiate/onehost.h"
#include "util/err.h"
#include "util/strmap.h"
#include "util/time.h"

#define INVALID(...) wf_err(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static weft_status check_group(const char *fn, weft_group *g) {
  if (!g || g->magic != WF_GROUP_MAGIC || !g->world || g->world->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "%s: not a live group handle", fn);
  if (g->rank < 0) return INVALID("%s: this rank is not a member of group %u", fn, g->id);
  return WEFT_OK;
}

static weft_status check_name(const char *fn, const char *name) {
  if (!name) return INVALID("%s: name is NULL", fn);
  size_t n = strlen(name);
  if (n == 0 || n > WF_NAME_MAX) return INVALID("%s: name must be 1..%d bytes, got %zu", fn, WF_NAME_MAX, n);
  return WEFT_OK;
}

/* Checks a tensor descriptor; *elems gets its element count. */
static weft_status check_tensor(const char *fn, const char *name, const char *what, const weft_tensor *t,
                                size_t *elems) {
  if (!t) return INVALID("%s('%s'): %s tensor is NULL", fn, name, what);
  if ((unsigned)t->dtype >= WEFT_DTYPE_COUNT_)
    return INVALID("%s('%s'): %s tensor has unknown dtype %d", fn, name, what, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > WEFT_MAX_DIMS)
    return INVALID("%s('%s'): %s tensor has %d dimensions (0..%d allowed)", fn, name, what, t->ndim, WEFT_MAX_DIMS);
  if (t->ndim > 0 && !t->shape) return INVALID("%s('%s'): %s tensor has ndim %d but shape is NULL", fn, name, what, t->ndim);
  size_t n = 1, es = weft_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return INVALID("%s('%s'): %s tensor has negative dimension %d (%lld)", fn, name, what, d,
                     (long long)t->shape[d]);
    /* no division: this runs for every tensor of every op */
    size_t b;
    if (__builtin_mul_overflow(n, (size_t)t->shape[d], &n) || __builtin_mul_overflow(n, es, &b) || b > SIZE_MAX / 4)
      return INVALID("%s('%s'): %s tensor is too large", fn, name, what);
  }
  if (n > 0 && !t->data) return INVALID("%s('%s'): %s tensor has %zu elements but data is NULL", fn, name, what, n);
  if (t->device != WEFT_DEVICE_CPU)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "%s('%s'): %s tensor is on device %d; this build supports host memory only",
                  fn, name, what, t->device);
  *elems = n;
  return WEFT_OK;
}

static weft_status check_opts(const char *fn, const char *name, const weft_op_options *o) {
  if (!o) return WEFT_OK;
  if (o->struct_size < offsetof(weft_op_options, alloc_ctx) + sizeof(void *))
    return INVALID("%s('%s'): options struct_size %zu is too small (use WEFT_OP_OPTIONS_INIT)", fn, name,
                   o->struct_size);
  if (!isfinite(o->prescale) || !isfinite(o->postscale))
    return INVALID("%s('%s'): prescale/postscale must be finite (got %g, %g)", fn, name, o->prescale, o->postscale);
  return WEFT_OK;
}

static weft_request *new_request(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                                 const weft_op_options *o) {
  weft_request *r = wf_request_new();
  if (!r) return NULL;
  atomic_init(&r->magic, WF_REQ_MAGIC);
  atomic_init(&r->state, WF_REQ_QUEUED);
  atomic_init(&r->refs, 2);
  r->world = g->world;
  r->group = g;
  r->msg.group_id = g->id;
  r->msg.coll = (uint8_t)coll;
  r->msg.root = -1;
  r->msg.device = WEFT_DEVICE_CPU;
  r->msg.prescale = o ? o->prescale : 1.0;
  r->msg.postscale = o ? o->postscale : 1.0;
  r->msg.priority = o ? o->priority : 0;
  /* no snprintf: this runs once per tensor (names are checked: 1..WF_NAME_MAX bytes) */
  size_t len = strlen(name);
  memcpy(r->msg.name, name, len);
  r->msg.name[len] = '\0';
  char digits[10];
  int nd = 0;
  uint32_t id = g->id;
  do digits[nd++] = (char)('0' + id % 10); while ((id /= 10) && nd < 10);
  char *k = r->key; /* "<group id>/<name>" */
  while (nd) *k++ = digits[--nd];
  *k++ = '/';
  memcpy(k, r->msg.name, len + 1); /* at most 10 + 1 + 255 + 1 bytes: fits */
  r->key_hash = wf_str_hash_n(r->key, (size_t)(k - r->key) + len); /* once: the in-flight set and the board */
  if (in) {
    r->in = *in;
    r->msg.dtype = (uint8_t)in->dtype;
    r->msg.ndim = (uint8_t)in->ndim;
    for (int d = 0; d < in->ndim; d++) r->msg.shape[d] = r->in_shape[d] = in->shape[d];
    r->in.shape = r->in_shape;
    r->msg.device = in->device;
  }
  if (o) {
    r->callback = o->callback;
    r->user_data = o->user_data;
    r->alloc = o->alloc;
    r->alloc_ctx = o->alloc_ctx;
  }
  /* no deadline yet (wf_request_arm): a fast round that completes at
   * arrival never needs one, and a clock read is 5% of an 8-byte
   * allreduce's cycles (not CLOCK_MONOTONIC_COARSE, though a fifth of the
   * cost: on this kind of VM it lags by 5 ms on average, up to 17, past its
   * 4 ms resolution) */
  return r;
}

/* Registers the name and enqueues, under one lock; on failure frees r. */
static weft_status submit(weft_request *r, weft_request **out) {
  weft_world *w = r->world;
  int fast = wf_fast_wants(w, r); /* one-host fast path: register here, visit the board below */
  if (!fast) wf_request_arm(r); /* before the engine can see it */
  pthread_mutex_lock(&w->mu);
  weft_status st = WEFT_OK;
  int rc = 0;
  if (w->fail_status != WEFT_OK) {
    st = wf_err(w->fail_status, "%s", w->fail_msg);
  } else if (w->stopping) {
    st = wf_err(WEFT_ERR_SHUTDOWN, "the world is being finalized");
  } else if ((rc = wf_strmap_insert_h(&w->inflight, r->key, r->key_hash, r, 1)) != 0) {
    /* the key lives in r, which leaves the set before it is freed (seen complete, or detached and completed) */
    st = rc > 0 ? INVALID("%s: a tensor named '%s' is already in use on rank %d (submitted, and its request not yet "
                          "waited on, tested complete or freed)", wf_coll_name(r->msg.coll), r->msg.name, w->rank)
                : wf_err(WEFT_ERR_NO_MEMORY, "out of memory registering '%s'", r->msg.name);
  } else if (fast) {
    atomic_store_explicit(&r->name_held, 1, memory_order_relaxed);
    if (r->msg.coll != WF_COLL_JOIN) wf_fast_list_locked(w, r); /* the engine's scan sees it */
  } else {
    atomic_store_explicit(&r->name_held, 1, memory_order_relaxed);
    wf_engine_queue_locked(w, r); /* under the same lock (wf_engine_submit's work) */
  }
  pthread_mutex_unlock(&w->mu);
  if (st != WEFT_OK) {
    free(r->msg.splits);
    free(r);
    return st;
  }
  *out = r;
  if (!fast) wf_engine_wake(w);
  else if (!wf_fast_submit(w, r)) wf_engine_submit(w, r);
  return WEFT_OK;
}

#define BEGIN(fn)                                                              \
  wf_err_clear();                                                              \
  if (!req) return INVALID(fn ": req is NULL");                                \
  *req = NULL;                                                                 \
  WF_CHECK(check_group(fn, g))

/* Checks an allreduce and builds its request (not yet submitted). */
static weft_status make_allreduce(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                                  weft_reduce_op op, const weft_op_options *opt, weft_request **rp) {
  size_t n, m;
  WF_CHECK(check_name("weft_allreduce", name));
  WF_CHECK(check_tensor("weft_allreduce", name, "input", in, &n));
  WF_CHECK(check_tensor("weft_allreduce", name, "output", out, &m));
  WF_CHECK(check_opts("weft_allreduce", name, opt));
  if ((unsigned)op >= WEFT_OP_COUNT_) return INVALID("weft_allreduce('%s'): unknown reduce op %d", name, (int)op);
  if (in->dtype != out->dtype)
    return INVALID("weft_allreduce('%s'): input is %s but output is %s", name, weft_dtype_name(in->dtype),
                   weft_dtype_name(out->dtype));
  int same = in->ndim == out->ndim;
  for (int d = 0; same && d < in->ndim; d++) same = in->shape[d] == out->shape[d];
  if (!same) return INVALID("weft_allreduce('%s'): input and output shapes differ", name);
  if (in->dtype == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE)
    return INVALID("weft_allreduce('%s'): average is not defined for bool tensors", name);
  if (n && in->data != out->data) {
    const char *a = in->data, *b = out->data;
    size_t bytes = n * weft_dtype_size(in->dtype);
    if (a < b + bytes && b < a + bytes)
      return INVALID("weft_allreduce('%s'): input and output overlap without being the same buffer", name);
  }
  weft_request *r = new_request(g, WF_COLL_ALLREDUCE, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->out = *out;
  r->out.shape = r->in_shape;
  r->msg.reduce_op = (uint8_t)op;
  *rp = r;
  return WEFT_OK;
}

weft_status weft_allreduce(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                           weft_reduce_op op, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_allreduce");
  weft_request *r = NULL;
  WF_CHECK(make_allreduce(g, name, in, out, op, opt, &r));
  return submit(r, req);
}

/* Checks an allgather and builds its request (not yet submitted). */
static weft_status make_allgather(weft_group *g, const char *name, const weft_tensor *in, const weft_op_options *opt,
                                  weft_request **rp) {
  size_t n;
  WF_CHECK(check_name("weft_allgather", name));
  WF_CHECK(check_tensor("weft_allgather", name, "input", in, &n));
  WF_CHECK(check_opts("weft_allgather", name, opt));
  weft_request *r = new_request(g, WF_COLL_ALLGATHER, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  *rp = r;
  return WEFT_OK;
}

weft_status weft_allgather(weft_group *g, const char *name, const weft_tensor *in, const weft_op_options *opt,
                           weft_request **req) {
  BEGIN("weft_allgather");
  weft_request *r = NULL;
  WF_CHECK(make_allgather(g, name, in, opt, &r));
  return submit(r, req);
}

weft_status weft_broadcast(weft_group *g, const char *name, const weft_tensor *inout, int root,
                           const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_broadcast");
  size_t n;
  WF_CHECK(check_name("weft_broadcast", name));
  WF_CHECK(check_tensor("weft_broadcast", name, "input", inout, &n));
  WF_CHECK(check_opts("weft_broadcast", name, opt));
  if (root < 0 || root >= g->size)
    return INVALID("weft_broadcast('%s'): root %d is not a rank of the group (size %d)", name, root, g->size);
  weft_request *r = new_request(g, WF_COLL_BROADCAST, name, inout, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->msg.root = root;
  return submit(r, req);
}

weft_status weft_alltoall(weft_group *g, const char *name, const weft_tensor *in, const int64_t *splits,
                          const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_alltoall");
  size_t n;
  WF_CHECK(check_name("weft_alltoall", name));
  WF_CHECK(check_tensor("weft_alltoall", name, "input", in, &n));
  WF_CHECK(check_opts("weft_alltoall", name, opt));
  int size = g->size;
  int64_t dim0 = in->ndim ? in->shape[0] : 1;
  if (splits) {
    int64_t sum = 0;
    for (int j = 0; j < size; j++) {
      if (splits[j] < 0)
        return INVALID("weft_alltoall('%s'): splits[%d] is negative (%lld)", name, j, (long long)splits[j]);
      sum += splits[j];
      if (sum > dim0) break;
    }
    if (sum > dim0)
      return INVALID("weft_alltoall('%s'): splits sum to more than the first dimension (%lld)", name, (long long)dim0);
  } else if (in->ndim && dim0 % size) {
    return INVALID("weft_alltoall('%s'): without splits the first dimension (%lld) must divide by the group size %d",
                   name, (long long)dim0, size);
  }
  weft_request *r = new_request(g, WF_COLL_ALLTOALL, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->msg.nsplits = (uint32_t)size;
  r->msg.splits = malloc(sizeof(int64_t) * (size_t)size);
  if (!r->msg.splits) {
    free(r);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  for (int j = 0; j < size; j++) r->msg.splits[j] = splits ? splits[j] : (in->ndim ? dim0 / size : 0);
  return submit(r, req);
}

/* Checks a reducescatter and builds its request (not yet submitted). */
static weft_status make_reducescatter(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                                      weft_reduce_op op, const weft_op_options *opt, weft_request **rp) {
  size_t n, m = 0;
  WF_CHECK(check_name("weft_reducescatter", name));
  WF_CHECK(check_tensor("weft_reducescatter", name, "input", in, &n));
  WF_CHECK(check_opts("weft_reducescatter", name, opt));
  if ((unsigned)op >= WEFT_OP_COUNT_) return INVALID("weft_reducescatter('%s'): unknown reduce op %d", name, (int)op);
  if (in->dtype == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE)
    return INVALID("weft_reducescatter('%s'): average is not defined for bool tensors", name);
  weft_request *r = NULL;
  if (out && out->data && in->ndim > 0) {
    WF_CHECK(check_tensor("weft_reducescatter", name, "output", out, &m));
    int64_t rows = in->shape[0] / g->size + (g->rank < in->shape[0] % g->size);
    int ok = out->dtype == in->dtype && out->ndim == in->ndim && out->shape[0] == rows;
    for (int d = 1; ok && d < in->ndim; d++) ok = out->shape[d] == in->shape[d];
    if (!ok)
      return INVALID("weft_reducescatter('%s'): output must be %s with this rank's %lld rows and the input's other "
                     "dimensions", name, weft_dtype_name(in->dtype), (long long)rows);
  }
  if (out && out->data && n) {
    const char *a = in->data, *b = out->data;
    size_t ib = n * weft_dtype_size(in->dtype), ob = (size_t)m * weft_dtype_size(in->dtype);
    if (a < b + ob && b < a + ib)
      return INVALID("weft_reducescatter('%s'): the output overlaps the input (the input is read while the output is "
                     "written)", name);
  }
  r = new_request(g, WF_COLL_REDUCESCATTER, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  if (out && out->data && in->ndim > 0) {
    r->out = *out;
    for (int d = 0; d < out->ndim; d++) r->out_shape[d] = out->shape[d];
    r->out.shape = r->out_shape;
  }
  r->msg.reduce_op = (uint8_t)op;
  *rp = r;
  return WEFT_OK;
}

weft_status weft_reducescatter(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                               weft_reduce_op op, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_reducescatter");
  weft_request *r = NULL;
  WF_CHECK(make_reducescatter(g, name, in, out, op, opt, &r));
  return submit(r, req);
}

weft_status weft_barrier(weft_group *g, const char *name, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_barrier");
  char auto_name[64];
  uint64_t nth = 0;
  if (!name) {
    pthread_mutex_lock(&g->world->mu);
    nth = g->barrier_count++;
    snprintf(auto_name, sizeof auto_name, "barrier.%llu", (unsigned long long)nth); /* per group */
    pthread_mutex_unlock(&g->world->mu);
    name = auto_name;
  }
  WF_CHECK(check_name("weft_barrier", name));
  WF_CHECK(check_opts("weft_barrier", name, opt));
  weft_request *r = new_request(g, WF_COLL_BARRIER, name, NULL, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  if (name == auto_name) r->auto_barrier = nth + 1;
  return submit(r, req);
}

weft_status weft_join(weft_group *g, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_join");
  WF_CHECK(check_opts("weft_join", "weft.join", opt));
  weft_request *r = new_request(g, WF_COLL_JOIN, "weft.join", NULL, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->last_joined = -1;
  return submit(r, req);
}

/* Enqueues a grouped op: kids[0..n) (built and checked) under one lock,
 * so the engine sees them in one drain and they reach the coordinator in
 * one batch; parent completes with the last. The parent keeps a reference
 * on each child (weft_request_output_at). On failure frees everything. */
static weft_status submit_grouped(const char *fn, weft_group *g, weft_request *parent, weft_request **kids, int n,
                                  weft_request **req) {
  weft_world *w = g->world;
  weft_status st = WEFT_OK;
  wf_request_arm(parent);
  for (int i = 0; i < n; i++) {
    kids[i]->deadline = parent->deadline; /* armed: the engine reads them */
    kids[i]->parent = parent;
    kids[i]->msg.unit = (uint32_t)n; /* the coordinator publishes the children together */
    atomic_store_explicit(&kids[i]->refs, 2, memory_order_relaxed); /* the engine's and the parent's */
  }
  atomic_store_explicit(&parent->remaining, n, memory_order_relaxed);
  /* before the children are queued: the engine may complete the parent (and
   * run its callback, which may read outputs) before this returns */
  parent->kids = kids;
  parent->nkids = n;
  pthread_mutex_lock(&w->mu);
  if (w->fail_status != WEFT_OK) st = wf_err(w->fail_status, "%s", w->fail_msg);
  else if (w->stopping) st = wf_err(WEFT_ERR_SHUTDOWN, "the world is being finalized");
  int put = 0;
  for (; st == WEFT_OK && put < n; put++) {
    int rc = wf_strmap_insert_h(&w->inflight, kids[put]->key, kids[put]->key_hash, kids[put], 1); /* key borrowed: see submit */
    if (rc > 0)
      st = INVALID("%s: a tensor named '%s' is already in use on rank %d (submitted, and its request not yet waited "
                   "on, tested complete or freed)", fn, kids[put]->msg.name, w->rank);
    else if (rc < 0) st = wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
    if (rc) break;
    atomic_store_explicit(&kids[put]->name_held, 1, memory_order_relaxed);
  }
  if (st != WEFT_OK)
    for (int i = 0; i < put; i++) wf_strmap_del_val_h(&w->inflight, kids[i]->key, kids[i]->key_hash, kids[i]);
  pthread_mutex_unlock(&w->mu);
  if (st != WEFT_OK) {
    for (int i = 0; i < n; i++) {
      free(kids[i]->msg.splits);
      free(kids[i]);
    }
    free(kids);
    free(parent);
    return st;
  }
  /* each child visits the one-host board (keeping its counts in step)
   * before the engine can see it, as every submission does: a generation
   * may complete on another rank only after this rank's visit (board.h,
   * unclaimed inline rounds) */
  for (int i = 0; i < n; i++) wf_fast_visit(w, kids[i]);
  pthread_mutex_lock(&w->mu);
  for (int i = 0; i < n; i++) wf_engine_queue_locked(w, kids[i]); /* one lock: the engine sees them in one drain */
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
  *req = parent;
  return WEFT_OK;
}

/* Checks a grouped op's common arguments and allocates its parent and child
 * array. */
static weft_status begin_grouped(const char *fn, weft_group *g, wf_coll coll, const char *name, int n,
                                 const void *ins, const weft_op_options *opt, weft_request **parent,
                                 weft_request ***kids) {
  WF_CHECK(check_name(fn, name));
  if (n < 1 || n > 65536) return INVALID("%s('%s'): n must be 1..65536, got %d", fn, name, n);
  if (!ins) return INVALID("%s('%s'): the tensor array is NULL", fn, name);
  if (strlen(name) + 7 > WF_NAME_MAX) return INVALID("%s('%s'): name too long for a group", fn, name);
  WF_CHECK(check_opts(fn, name, opt));
  *parent = new_request(g, coll, name, NULL, opt);
  *kids = calloc((size_t)n, sizeof **kids);
  if (!*parent || !*kids) {
    free(*parent);
    free(*kids);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  return WEFT_OK;
}

/* Frees a grouped op that failed before submission. */
static weft_status abandon_grouped(weft_status st, weft_request *parent, weft_request **kids, int n) {
  for (int i = 0; i < n; i++)
    if (kids[i]) {
      free(kids[i]->msg.splits);
      free(kids[i]);
    }
  free(kids);
  free(parent);
  return st;
}

/* The options a child of a grouped op gets: the parent's, without its
 * callback (it runs once, for the whole group). */
static weft_op_options child_options(const weft_op_options *opt) {
  weft_op_options o = opt ? *opt : (weft_op_options)WEFT_OP_OPTIONS_INIT;
  o.struct_size = sizeof o;
  o.callback = NULL;
  o.user_data = NULL;
  return o;
}

weft_status weft_grouped_allreduce(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                   const weft_tensor *outs, weft_reduce_op op, const weft_op_options *opt,
                                   weft_request **req) {
  BEGIN("weft_grouped_allreduce");
  if (!outs && ins) return INVALID("weft_grouped_allreduce('%s'): outs is NULL", name ? name : "");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_allreduce", g, WF_COLL_ALLREDUCE, name, n, ins, opt, &parent, &kids));
  /* every tensor checked, and its child request built, before anything is
   * enqueued: the group goes in whole or not at all */
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_allreduce(g, cname, &ins[i], &outs[i], op, &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return submit_grouped("weft_grouped_allreduce", g, parent, kids, n, req);
}

weft_status weft_grouped_allgather(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                   const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_grouped_allgather");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_allgather", g, WF_COLL_ALLGATHER, name, n, ins, opt, &parent, &kids));
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_allgather(g, cname, &ins[i], &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return submit_grouped("weft_grouped_allgather", g, parent, kids, n, req);
}

weft_status weft_grouped_reducescatter(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                       const weft_tensor *outs, weft_reduce_op op, const weft_op_options *opt,
                                       weft_request **req) {
  BEGIN("weft_grouped_reducescatter");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_reducescatter", g, WF_COLL_REDUCESCATTER, name, n, ins, opt, &parent, &kids));
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_reducescatter(g, cname, &ins[i], outs ? &outs[i] : NULL, op, &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return submit_grouped("weft_grouped_reducescatter", g, parent, kids, n, req);
}

weft_status weft_request_output_at(weft_request *req, int i, weft_tensor *out) {
  wf_err_clear();
  if (!req || atomic_load_explicit(&req->magic, memory_order_relaxed) != WF_REQ_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "weft_request_output_at: not a live request handle");
  if (i < 0 || i >= req->nkids)
    return INVALID("weft_request_output_at('%s'): index %d out of range (the request has %d tensors)", req->msg.name,
                   i, req->nkids);
  return weft_request_output(req->kids[i], out);
}
