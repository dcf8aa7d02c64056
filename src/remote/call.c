/* call.c - the caller: starts remote operations (any thread), completes
 * them from REMOTE_REPLY frames, deadlines, cancellation and dead callees
 * (service thread), and the call handle's public functions. A call's
 * messages name the operation and the callee ("execute 'f' on rank 1:
 * can't find program: f"). */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote/remote_impl.h"
#include "util/err.h"
#include "util/time.h"

static void call_destroy(weft_remote_call *c) {
  if (c->out_owned) free(c->out.data);
  free(c->metas);
  free(c->meta_shapes);
  c->magic = 0;
  free(c);
}

static void unlink_call(wf_remote *r, weft_remote_call *c) {
  for (weft_remote_call **pp = &r->calls; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      c->next = NULL;
      return;
    }
}

/* Completes c (mu held): unlinks it; a detached one is freed. */
static void complete(wf_remote *r, weft_remote_call *c, weft_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void complete(wf_remote *r, weft_remote_call *c, weft_status st, const char *fmt, ...) {
  unlink_call(r, c);
  c->status = st;
  if (st != WEFT_OK) {
    char msg[WF_ERRMSG_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->error, sizeof c->error, "%s on rank %d: %s", c->what, c->peer, msg);
  }
  if (c->detached) call_destroy(c);
  wf_remote_kick_done(r);
}

static weft_status check_task(wf_remote *r, int task, const char *fn) {
  if (task < 0 || task >= r->size)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: task %d is not a rank of the world (0..%d)", fn, task, r->size - 1);
  return WEFT_OK;
}

static weft_status check_id(weft_remote_id id, const char *fn, const char *what) {
  if (id.local == 0 || id.owner < 0)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %s {%d, %llu} is not an id (local 0, or owner < 0)", fn, what,
                  (int)id.owner, (unsigned long long)id.local);
  return WEFT_OK;
}

static weft_status check_tensor(const weft_tensor *t, wf_remote_tensor *w, const char *fn, int i) {
  memset(w, 0, sizeof *w);
  if ((unsigned)t->dtype >= WEFT_DTYPE_COUNT_ || t->ndim < 0 || t->ndim > WEFT_MAX_DIMS || (t->ndim && !t->shape))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: tensor %d: bad dtype %d or ndim %d", fn, i, (int)t->dtype, t->ndim);
  w->dtype = (uint8_t)t->dtype;
  w->ndim = (uint8_t)t->ndim;
  w->device = t->device;
  uint64_t b = weft_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0 || (t->shape[d] && b > (UINT64_MAX >> 2) / (uint64_t)t->shape[d]))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: tensor %d: dimension %d is %lld", fn, i, d,
                    (long long)t->shape[d]);
    w->shape[d] = t->shape[d];
    b *= (uint64_t)t->shape[d];
  }
  if (b && !t->data) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: tensor %d: data is NULL", fn, i);
  if (t->device != WEFT_DEVICE_CPU)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "%s: tensor %d: only host tensors travel inline (device %d)", fn, i,
                  t->device);
  w->nbytes = b;
  w->data = t->data;
  return WEFT_OK;
}

/* Sends m as a new call (its call_id set here); *out the handle. */
static weft_status start(wf_remote *r, int task, wf_remote_msg *m, const weft_remote_options *opt, const char *what,
                         weft_remote_call **out) {
  *out = NULL;
  weft_remote_call *c = calloc(1, sizeof *c);
  if (!c) return wf_err(WEFT_ERR_NO_MEMORY, "remote: out of memory");
  c->magic = WF_RCALL_MAGIC;
  c->r = r;
  c->peer = task;
  c->op = m->op;
  c->status = WEFT_IN_PROGRESS;
  snprintf(c->what, sizeof c->what, "%s", what);
  double secs = opt && opt->timeout_seconds > 0 ? opt->timeout_seconds : r->default_timeout;
  c->deadline = wf_deadline_after(secs);
  m->timeout = secs;
  if (opt) {
    c->alloc = opt->alloc;
    c->alloc_ctx = opt->alloc_ctx;
  }
  c->n_meta = (int)m->n_meta;
  if (c->n_meta && (!(c->metas = calloc((size_t)c->n_meta, sizeof *c->metas)) ||
                    !(c->meta_shapes = calloc((size_t)c->n_meta * WEFT_MAX_DIMS, sizeof *c->meta_shapes)))) {
    call_destroy(c);
    return wf_err(WEFT_ERR_NO_MEMORY, "remote: out of memory");
  }
  /* large inputs: their bytes go apart (bulk.c), from a copy made now */
  wf_rbulk *staged = NULL;
  for (uint32_t i = 0; i < m->n_in; i++) {
    wf_remote_arg *a = &m->in[i];
    if (a->is_inline != WF_RT_INLINE || !wf_bulk_on(r, task, a->t.nbytes)) continue;
    wf_rbulk *t = wf_bulk_new(r, WF_RB_ARG_SEND, task, 0, i, (size_t)a->t.nbytes);
    if (!t || !(t->buf = wf_bulk_stage_buf(r, t->n, &t->cap))) {
      free(t);
      while (staged) {
        t = staged->next;
        wf_bulk_free(staged);
        staged = t;
      }
      call_destroy(c);
      return wf_err(WEFT_ERR_NO_MEMORY, "%s: no memory for a copy of input %u (%llu bytes)", what, i,
                    (unsigned long long)a->t.nbytes);
    }
    memcpy(t->buf, a->t.data, t->n);
    a->is_inline = WF_RT_BULK;
    t->next = staged;
    staged = t;
  }
  wf_buf b = {0};
  pthread_mutex_lock(&r->mu);
  if (r->stopping) {
    pthread_mutex_unlock(&r->mu);
    call_destroy(c);
    while (staged) {
      wf_rbulk *t = staged->next;
      wf_bulk_free(staged);
      staged = t;
    }
    return wf_err(WEFT_ERR_SHUTDOWN, "%s: the world is being finalized", what);
  }
  c->id = m->call_id = r->next_call++;
  weft_status st = wf_encode_remote_call(&b, (uint32_t)r->rank, m);
  if (st == WEFT_OK && r->link.max_payload && task != r->rank && b.len - WF_FRAME_HDR_SIZE > r->link.max_payload)
    st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: its message is %zu bytes, over WEFT_MAX_MESSAGE_BYTES (%llu): tensors "
                "travel inline", what, b.len - WF_FRAME_HDR_SIZE, (unsigned long long)r->link.max_payload);
  if (st != WEFT_OK) {
    pthread_mutex_unlock(&r->mu);
    wf_buf_free(&b);
    call_destroy(c);
    while (staged) {
      wf_rbulk *t = staged->next;
      wf_bulk_free(staged);
      staged = t;
    }
    return st;
  }
  c->next = r->calls;
  r->calls = c;
  while (staged) { /* until the callee's BULK_GO (or its reply: it took none) */
    wf_rbulk *t = staged->next;
    staged->call_id = c->id;
    staged->next = r->stage;
    r->stage = staged;
    staged = t;
  }
  pthread_mutex_unlock(&r->mu);
  /* outside mu (lock order); a frame sent after a later one of this thread cannot overtake it */
  r->link.send(r->link.ctx, task, &b);
  *out = c;
  return WEFT_OK;
}

weft_status wf_remote_execute(wf_remote *r, int task, uint64_t ctx, const char *name, int n_in,
                              const weft_remote_input *inputs, int n_out, const weft_remote_id *outputs, int n_meta,
                              const weft_remote_options *opt, weft_remote_call **call) {
  static const char *fn = "weft_remote_execute";
  if (!call) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: call is NULL", fn);
  *call = NULL;
  WF_CHECK(check_task(r, task, fn));
  size_t nl = name ? strnlen(name, WF_NAME_MAX + 1) : 0;
  if (nl < 1 || nl > WF_NAME_MAX) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: the name must be 1..%d bytes", fn, WF_NAME_MAX);
  if (n_in < 0 || n_in > WF_REMOTE_MAX_ARGS || n_out < 0 || n_out > WF_REMOTE_MAX_ARGS || (n_in && !inputs) ||
      (n_out && !outputs))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s('%s'): %d inputs, %d outputs (each 0..%d, arrays given)", fn, name,
                  n_in, n_out, WF_REMOTE_MAX_ARGS);
  if (n_meta < 0 || n_meta > n_out)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s('%s'): n_meta %d is not within 0..n_out (%d)", fn, name, n_meta,
                  n_out);
  if (opt && opt->struct_size < sizeof *opt)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: opt->struct_size: use WEFT_REMOTE_OPTIONS_INIT", fn);
  wf_remote_msg m = {.op = WF_ROP_EXECUTE, .ctx = ctx, .device = opt ? opt->device : WEFT_DEVICE_CPU,
                     .n_meta = (uint32_t)n_meta, .n_in = (uint32_t)n_in, .n_out = (uint32_t)n_out};
  if (m.device < WEFT_DEVICE_CPU) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: opt->device %d", fn, m.device);
  memcpy(m.name, name, nl);
  wf_remote_arg *in = calloc((size_t)n_in + 1, sizeof *in);
  wf_remote_oid *out = calloc((size_t)n_out + 1, sizeof *out);
  weft_status st = in && out ? WEFT_OK : wf_err(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  for (int i = 0; st == WEFT_OK && i < n_in; i++) {
    in[i].is_inline = inputs[i].tensor != NULL;
    if (in[i].is_inline) st = check_tensor(inputs[i].tensor, &in[i].t, fn, i);
    else if ((st = check_id(inputs[i].id, fn, "input")) == WEFT_OK)
      in[i].id = (wf_remote_oid){inputs[i].id.owner, inputs[i].id.local};
  }
  for (int i = 0; st == WEFT_OK && i < n_out; i++)
    if ((st = check_id(outputs[i], fn, "output")) == WEFT_OK) out[i] = (wf_remote_oid){outputs[i].owner, outputs[i].local};
  if (st == WEFT_OK) {
    char what[WF_NAME_MAX + 32];
    snprintf(what, sizeof what, "execute '%s'", name);
    m.in = in;
    m.out = out;
    st = start(r, task, &m, opt, what, call);
  }
  free(in);
  free(out);
  return st;
}

weft_status wf_remote_put(wf_remote *r, int task, uint64_t ctx, const weft_tensor *t, weft_remote_id id,
                          const weft_remote_options *opt, weft_remote_call **call) {
  static const char *fn = "weft_remote_put";
  if (!call || !t) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: call or tensor is NULL", fn);
  *call = NULL;
  WF_CHECK(check_task(r, task, fn));
  WF_CHECK(check_id(id, fn, "id"));
  wf_remote_arg in = {.is_inline = 1};
  WF_CHECK(check_tensor(t, &in.t, fn, 0));
  wf_remote_oid out = {id.owner, id.local};
  wf_remote_msg m = {.op = WF_ROP_PUT, .ctx = ctx, .device = WEFT_DEVICE_CPU, .n_in = 1, .in = &in, .n_out = 1,
                     .out = &out};
  char what[64];
  snprintf(what, sizeof what, "put {%d, %llu}", (int)id.owner, (unsigned long long)id.local);
  return start(r, task, &m, opt, what, call);
}

weft_status wf_remote_fetch(wf_remote *r, int task, uint64_t ctx, weft_remote_id id, const weft_remote_options *opt,
                            weft_remote_call **call) {
  static const char *fn = "weft_remote_fetch";
  if (!call) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: call is NULL", fn);
  *call = NULL;
  WF_CHECK(check_task(r, task, fn));
  WF_CHECK(check_id(id, fn, "id"));
  wf_remote_arg in = {.id = {id.owner, id.local}};
  wf_remote_msg m = {.op = WF_ROP_FETCH, .ctx = ctx, .device = WEFT_DEVICE_CPU, .n_in = 1, .in = &in};
  char what[64];
  snprintf(what, sizeof what, "fetch {%d, %llu}", (int)id.owner, (unsigned long long)id.local);
  return start(r, task, &m, opt, what, call);
}

weft_status wf_remote_delete(wf_remote *r, int task, uint64_t ctx, int n, const weft_remote_id *ids,
                             const weft_remote_options *opt, weft_remote_call **call) {
  static const char *fn = "weft_remote_delete";
  if (!call) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: call is NULL", fn);
  *call = NULL;
  WF_CHECK(check_task(r, task, fn));
  if (n < 0 || n > WF_REMOTE_MAX_ARGS || (n && !ids))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %d ids (0..%d)", fn, n, WF_REMOTE_MAX_ARGS);
  wf_remote_arg *in = calloc((size_t)n + 1, sizeof *in);
  if (!in) return wf_err(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  weft_status st = WEFT_OK;
  for (int i = 0; st == WEFT_OK && i < n; i++)
    if ((st = check_id(ids[i], fn, "id")) == WEFT_OK) in[i].id = (wf_remote_oid){ids[i].owner, ids[i].local};
  wf_remote_msg m = {.op = WF_ROP_DELETE, .ctx = ctx, .device = WEFT_DEVICE_CPU, .n_in = (uint32_t)n, .in = in};
  if (st == WEFT_OK) st = start(r, task, &m, opt, "delete", call);
  free(in);
  return st;
}

weft_status wf_remote_ctx_op(wf_remote *r, int task, int op, uint64_t ctx, double idle, uint64_t *out_ctx) {
  static const char *names[] = {"", "weft_remote_context_create", "weft_remote_context_close", "weft_remote_keepalive"};
  if (op == WF_ROP_CTX_CREATE && (!out_ctx || !(idle >= 0) || idle > 1e9))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: idle_seconds %g (>= 0) or ctx NULL", names[op], idle);
  WF_CHECK(check_task(r, task, names[op]));
  wf_remote_msg m = {.op = (uint8_t)op, .ctx = ctx, .idle = op == WF_ROP_CTX_CREATE ? idle : 0,
                     .device = WEFT_DEVICE_CPU};
  weft_remote_call *c;
  char what[64];
  snprintf(what, sizeof what, op == WF_ROP_CTX_CREATE ? "create a context" : "context %llu", (unsigned long long)ctx);
  WF_CHECK(start(r, task, &m, NULL, what, &c));
  weft_status st = weft_remote_wait(c, -1);
  if (st == WEFT_OK && out_ctx) *out_ctx = c->ctx;
  if (st != WEFT_OK) wf_err(st, "%s", c->error);
  weft_remote_call_free(c);
  return st;
}

/* ---- service thread side (mu held) */

static void send_bulk_ctl(wf_remote *r, int peer, uint64_t call_id, uint8_t op) {
  wf_remote_msg m = {.call_id = call_id, .op = op, .device = WEFT_DEVICE_CPU};
  wf_buf b = {0};
  if (wf_encode_remote_call(&b, (uint32_t)r->rank, &m) == WEFT_OK) wf_remote_out_locked(r, peer, &b);
  else wf_buf_free(&b);
}

/* A fetch's tensor comes apart: its memory, the receive (posted first), BULK_GO. */
static void fetch_bulk(wf_remote *r, int peer, weft_remote_call *c, const wf_remote_msg *m) {
  if (!r->link.bulk) {
    send_bulk_ctl(r, peer, m->call_id, WF_ROP_BULK_DROP);
    complete(r, c, WEFT_ERR_PROTOCOL, "its tensor comes apart, but this rank has no bulk path");
    return;
  }
  size_t nb = (size_t)m->tensor.nbytes;
  void *p = c->alloc ? c->alloc(nb, c->alloc_ctx) : malloc(nb ? nb : 1);
  wf_rbulk *t = p ? wf_bulk_new(r, WF_RB_FETCH_RECV, peer, c->id, 0, nb) : NULL;
  if (!t) {
    if (p && !c->alloc) free(p);
    send_bulk_ctl(r, peer, m->call_id, WF_ROP_BULK_DROP);
    complete(r, c, WEFT_ERR_NO_MEMORY, "no memory for %zu bytes%s", nb, c->alloc ? " (the allocator)" : "");
    return;
  }
  t->buf = p;
  t->user_mem = c->alloc != NULL;
  memcpy(c->out_shape, m->tensor.shape, sizeof c->out_shape);
  c->out = (weft_tensor){.dtype = (weft_dtype)m->tensor.dtype, .ndim = m->tensor.ndim, .shape = c->out_shape,
                         .device = WEFT_DEVICE_CPU};
  wf_bulk_post_locked(r, t);
  send_bulk_ctl(r, peer, m->call_id, WF_ROP_BULK_GO); /* flushed after the receive is posted */
}

void wf_call_bulk_done(wf_remote *r, wf_rbulk *t) {
  weft_remote_call *c = r->calls;
  while (c && !(c->id == t->call_id && c->peer == t->peer && c->op == WF_ROP_FETCH)) c = c->next;
  if (!c) { /* cancelled, timed out or failed meanwhile */
    wf_bulk_free(t);
    return;
  }
  if (t->st != WEFT_OK) {
    complete(r, c, t->st, "its %zu bytes did not arrive: %s", t->n, t->msg);
  } else {
    c->out.data = t->buf;
    c->out_owned = !t->user_mem;
    t->buf = NULL;
    complete(r, c, WEFT_OK, " ");
  }
  wf_bulk_free(t);
}

void wf_call_on_reply(wf_remote *r, int peer, wf_remote_msg *m) {
  if (m->op == WF_ROP_BULK_GO) { /* the callee posted its receives: send the inputs */
    wf_bulk_go(r, peer, m->call_id, 0, 1);
    return;
  }
  if (r->stage) wf_bulk_go(r, peer, m->call_id, 0, 0); /* its outcome: inputs it never asked for go */
  weft_remote_call *c = r->calls;
  while (c && !(c->id == m->call_id && c->peer == peer)) c = c->next;
  if (!c || c->op != m->op) { /* cancelled or timed out already (or a stray frame: dropped) */
    if (m->op == WF_ROP_FETCH && m->has_tensor == WF_RT_BULK) send_bulk_ctl(r, peer, m->call_id, WF_ROP_BULK_DROP);
    return;
  }
  if (m->status != WEFT_OK) {
    complete(r, c, (weft_status)m->status, "%s", m->error);
    return;
  }
  c->ctx = m->ctx;
  if (c->op == WF_ROP_EXECUTE) {
    if ((int)m->n_metas != c->n_meta) {
      complete(r, c, WEFT_ERR_PROTOCOL, "metadata for %u outputs, asked for %d", m->n_metas, c->n_meta);
      return;
    }
    for (int i = 0; i < c->n_meta; i++) {
      int64_t *sh = c->meta_shapes + (size_t)i * WEFT_MAX_DIMS;
      memcpy(sh, m->metas[i].shape, sizeof m->metas[i].shape);
      c->metas[i] = (weft_tensor){.dtype = (weft_dtype)m->metas[i].dtype, .ndim = m->metas[i].ndim, .shape = sh,
                                  .device = WEFT_DEVICE_CPU};
    }
  } else if (c->op == WF_ROP_FETCH) {
    if (!m->has_tensor) {
      complete(r, c, WEFT_ERR_PROTOCOL, "the reply has no tensor");
      return;
    }
    if (m->has_tensor == WF_RT_BULK) {
      fetch_bulk(r, peer, c, m);
      return;
    }
    size_t nb = (size_t)m->tensor.nbytes;
    void *p = c->alloc ? c->alloc(nb, c->alloc_ctx) : malloc(nb ? nb : 1);
    if (!p) {
      complete(r, c, WEFT_ERR_NO_MEMORY, "no memory for %zu bytes%s", nb, c->alloc ? " (the allocator)" : "");
      return;
    }
    if (nb) memcpy(p, m->tensor.data, nb);
    memcpy(c->out_shape, m->tensor.shape, sizeof c->out_shape);
    c->out = (weft_tensor){.dtype = (weft_dtype)m->tensor.dtype, .ndim = m->tensor.ndim, .shape = c->out_shape,
                           .data = p, .device = WEFT_DEVICE_CPU};
    c->out_owned = !c->alloc;
  }
  complete(r, c, WEFT_OK, " ");
}

static void send_cancel(wf_remote *r, weft_remote_call *c) {
  wf_remote_msg m = {.call_id = c->id, .op = WF_ROP_CANCEL, .device = WEFT_DEVICE_CPU};
  wf_buf b = {0};
  if (wf_encode_remote_call(&b, (uint32_t)r->rank, &m) == WEFT_OK) wf_remote_out_locked(r, c->peer, &b);
  else wf_buf_free(&b);
}

void wf_call_tick(wf_remote *r, int64_t now) {
  weft_remote_call *c = r->calls;
  while (c) {
    weft_remote_call *next = c->next;
    if (r->pstate[c->peer]) {
      complete(r, c, r->pstate[c->peer] >= 2 ? WEFT_ERR_PEER_LOST : WEFT_ERR_SHUTDOWN, "rank %d is gone: %s",
               c->peer, r->pmsg[c->peer]);
    } else if (now >= c->deadline) {
      send_cancel(r, c);
      complete(r, c, WEFT_ERR_TIMEOUT, "no answer within its deadline");
    }
    c = next;
  }
}

void wf_call_fail_all(wf_remote *r, weft_status st, const char *msg) {
  while (r->calls) complete(r, r->calls, st, "%s", msg);
}

/* ---- the handle's public functions */

static int call_ok(const weft_remote_call *c) { return c && c->magic == WF_RCALL_MAGIC; }

weft_status weft_remote_test(weft_remote_call *call) {
  if (!call_ok(call)) return wf_err(WEFT_ERR_MISUSE, "weft_remote_test: not a remote call handle");
  pthread_mutex_lock(&call->r->mu);
  weft_status st = call->status;
  pthread_mutex_unlock(&call->r->mu);
  if (st == WEFT_IN_PROGRESS && wf_remote_poll(call->r) > 0) { /* its reply may wait in the link's own way */
    pthread_mutex_lock(&call->r->mu);
    st = call->status;
    pthread_mutex_unlock(&call->r->mu);
  }
  return st;
}

weft_status weft_remote_wait(weft_remote_call *call, double timeout_seconds) {
  if (!call_ok(call)) return wf_err(WEFT_ERR_MISUSE, "weft_remote_wait: not a remote call handle");
  wf_remote *r = call->r;
  /* the call's own deadline always ends it (the service thread's tick), so
   * a negative timeout waits a little past it at most */
  int64_t until = timeout_seconds < 0 ? INT64_MAX : wf_deadline_after(timeout_seconds);
  int64_t spin_end = wf_now_ns() + WF_REMOTE_SPIN_NS;
  pthread_mutex_lock(&r->mu);
  while (call->status == WEFT_IN_PROGRESS) {
    int64_t now = wf_now_ns();
    if (now >= until) break;
    int64_t at = until - now > WF_REMOTE_TICK_NS * 5 ? now + WF_REMOTE_TICK_NS * 5 : until;
    if (r->link.sleep) {
      /* the reply may come through the link's own way, which this thread
       * drains: look (handing the core over), then sleep on the DONE bell,
       * which the reply and every completion ring */
      uint32_t seen = r->link.bell(r->link.ctx, WF_RLINK_DONE);
      pthread_mutex_unlock(&r->mu);
      int got = wf_remote_poll(r);
      if (got < 0 || (!got && now < spin_end)) sched_yield();
      else if (!got) r->link.sleep(r->link.ctx, WF_RLINK_DONE, seen, at - now);
      pthread_mutex_lock(&r->mu);
      continue;
    }
    if (now < spin_end) { /* a call on one host returns within tens of microseconds: look, handing the core over */
      pthread_mutex_unlock(&r->mu);
      sched_yield();
      pthread_mutex_lock(&r->mu);
      continue;
    }
    struct timespec ts = {.tv_sec = (time_t)(at / WF_NS_PER_SEC), .tv_nsec = (long)(at % WF_NS_PER_SEC)};
    pthread_cond_timedwait(&r->done_cv, &r->mu, &ts);
  }
  weft_status st = call->status;
  pthread_mutex_unlock(&r->mu);
  return st;
}

weft_status weft_remote_cancel(weft_remote_call *call) {
  if (!call_ok(call)) return wf_err(WEFT_ERR_MISUSE, "weft_remote_cancel: not a remote call handle");
  wf_remote *r = call->r;
  pthread_mutex_lock(&r->mu);
  if (call->status != WEFT_IN_PROGRESS) {
    pthread_mutex_unlock(&r->mu);
    return wf_err(WEFT_ERR_MISUSE, "weft_remote_cancel: %s on rank %d is complete: it cannot be cancelled",
                  call->what, call->peer);
  }
  send_cancel(r, call);
  complete(r, call, WEFT_ERR_CANCELLED, "cancelled by rank %d", r->rank);
  pthread_mutex_unlock(&r->mu);
  wf_remote_flush(r);
  return WEFT_OK;
}

const char *weft_remote_call_error(weft_remote_call *call) {
  if (!call_ok(call)) return "";
  pthread_mutex_lock(&call->r->mu);
  const char *e = call->status == WEFT_IN_PROGRESS ? "" : call->error;
  pthread_mutex_unlock(&call->r->mu);
  return e;
}

weft_status weft_remote_call_meta(weft_remote_call *call, int i, weft_tensor *meta) {
  if (!call_ok(call) || !meta) return wf_err(WEFT_ERR_MISUSE, "weft_remote_call_meta: bad handle or meta NULL");
  weft_status st = weft_remote_test(call);
  if (st != WEFT_OK) return wf_err(WEFT_ERR_MISUSE, "weft_remote_call_meta: the call is not complete and successful");
  if (call->op != WF_ROP_EXECUTE || i < 0 || i >= call->n_meta)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_call_meta: %d is not within the %d outputs with metadata", i,
                  call->op == WF_ROP_EXECUTE ? call->n_meta : 0);
  *meta = call->metas[i];
  return WEFT_OK;
}

weft_status weft_remote_call_output(weft_remote_call *call, weft_tensor *out) {
  if (!call_ok(call) || !out) return wf_err(WEFT_ERR_MISUSE, "weft_remote_call_output: bad handle or out NULL");
  if (call->op != WF_ROP_FETCH) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_remote_call_output: not a fetch");
  if (weft_remote_test(call) != WEFT_OK)
    return wf_err(WEFT_ERR_MISUSE, "weft_remote_call_output: the fetch is not complete and successful");
  *out = call->out;
  return WEFT_OK;
}

weft_status weft_remote_call_free(weft_remote_call *call) {
  if (!call) return WEFT_OK;
  if (!call_ok(call)) return wf_err(WEFT_ERR_MISUSE, "weft_remote_call_free: not a remote call handle");
  wf_remote *r = call->r;
  pthread_mutex_lock(&r->mu);
  if (call->status == WEFT_IN_PROGRESS) {
    send_cancel(r, call);
    call->detached = 1;
    complete(r, call, WEFT_ERR_CANCELLED, "freed while pending"); /* frees it */
    pthread_mutex_unlock(&r->mu);
    wf_remote_flush(r);
    return WEFT_OK;
  }
  pthread_mutex_unlock(&r->mu);
  call_destroy(call);
  return WEFT_OK;
}
