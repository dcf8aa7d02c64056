/* serve.c - the callee: acts on REMOTE_CALL frames (service thread, mu
 * held) and runs registered functions (worker thread, mu released while
 * user code runs).
 *
 * EXECUTE is checked in TFRT's RemoteExecute order before anything runs:
 * context, program, result count, argument count, device (then weft's own:
 * output ids not taken). Its outputs become placeholders at once, so a
 * later call (or fetch) may name them while it runs: such a job waits
 * (jobs.waiting) until every input is produced, fails when one fails, and
 * is dropped at the caller's deadline. An input id nobody has produced or
 * announced yet is a placeholder too (another caller's put may be on its
 * way). Jobs whose inputs are ready run one at a time, in order, on the
 * worker thread. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/remote_impl.h"
#include "util/time.h"

struct weft_remote_result {
  int n_out;
  int *made;
  weft_dtype *dtype;
  int *ndim;
  int64_t (*shape)[WEFT_MAX_DIMS];
  void **data;
  size_t *nbytes;
  char error[1024];
};

static void reply(wf_remote *r, int peer, const wf_remote_msg *call, uint64_t ctx, weft_status st, const char *fmt,
                  ...) __attribute__((format(printf, 6, 7)));
static void reply(wf_remote *r, int peer, const wf_remote_msg *call, uint64_t ctx, weft_status st, const char *fmt,
                  ...) {
  char msg[WF_ERRMSG_MAX + 1] = "";
  if (st != WEFT_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!msg[0]) snprintf(msg, sizeof msg, "%s", weft_status_string(st));
  }
  wf_remote_msg m = {.call_id = call->call_id, .op = call->op, .ctx = ctx, .status = st,
                     .error = st != WEFT_OK ? msg : NULL};
  wf_buf b = {0};
  if (wf_encode_remote_reply(&b, (uint32_t)r->rank, &m) == WEFT_OK) wf_remote_out_locked(r, peer, &b);
  else wf_buf_free(&b);
}

static void ctx_missing(wf_remote *r, int peer, const wf_remote_msg *m) {
  const char *why = "";
  int n = r->ncollected < 64 ? r->ncollected : 64;
  for (int i = 0; i < n; i++)
    if (r->collected_ids[i] == m->ctx) why = " (collected: unused for longer than its idle time)";
  reply(r, peer, m, m->ctx, WEFT_ERR_NOT_FOUND, "context %llu not found on rank %d%s", (unsigned long long)m->ctx,
        r->rank, why);
}

static void job_free(wf_remote *r, wf_rjob *j) {
  for (uint32_t i = 0; j->ins && i < j->msg.n_in; i++) {
    wf_robj *o = j->ins[i];
    if (!o) continue;
    if (j->msg.in[i].is_inline && o->refs == 1) wf_bulk_keep(r, &o->data, o->nbytes); /* a sent input's memory */
    wf_robj_unref(o);
  }
  for (uint32_t i = 0; j->outs && i < j->msg.n_out; i++)
    if (j->outs[i]) wf_robj_unref(j->outs[i]);
  free(j->ins);
  free(j->outs);
  wf_remote_msg_free(&j->msg);
  free(j->payload);
  free(j);
}

static void set_failed(wf_robj *o, const char *why) {
  if (o->state != WF_OBJ_PENDING) return;
  o->state = WF_OBJ_FAILED;
  free(o->error);
  o->error = strdup(why);
}

/* A job ends without running: its outputs fail, the caller is told (reply_too). */
static void job_fail(wf_remote *r, wf_rjob *j, int reply_too, weft_status st, const char *why) {
  for (uint32_t i = 0; j->outs && i < j->msg.n_out; i++)
    if (j->outs[i]) set_failed(j->outs[i], why);
  if (reply_too) reply(r, j->peer, &j->msg, j->ctx, st, "%s", why);
  job_free(r, j);
}

static void tensor_meta(const wf_robj *o, wf_remote_tensor *t, int with_data) {
  memset(t, 0, sizeof *t);
  t->dtype = (uint8_t)o->dtype;
  t->ndim = (uint8_t)o->ndim;
  t->device = WEFT_DEVICE_CPU;
  memcpy(t->shape, o->shape, sizeof t->shape);
  if (with_data) {
    t->nbytes = o->nbytes;
    t->data = o->data;
  }
}

static void fetch_reply(wf_remote *r, wf_rjob *j) {
  wf_robj *o = j->ins[0];
  char id[48];
  wf_oid_str(o->id, id, sizeof id);
  if (o->state == WF_OBJ_FAILED) {
    reply(r, j->peer, &j->msg, j->ctx, WEFT_ERR_NOT_FOUND, "object %s failed: %s", id, o->error);
    return;
  }
  wf_remote_msg m = {.call_id = j->msg.call_id, .op = WF_ROP_FETCH, .ctx = j->ctx, .has_tensor = WF_RT_INLINE};
  tensor_meta(o, &m.tensor, 1);
  wf_buf b = {0};
  wf_rbulk *t = NULL;
  if (wf_bulk_on(r, j->peer, o->nbytes)) { /* the metadata now, the bytes at the caller's BULK_GO (bulk.c) */
    m.has_tensor = WF_RT_BULK;
    if (!(t = wf_bulk_new(r, WF_RB_FETCH_SEND, j->peer, j->msg.call_id, 0, o->nbytes)) ||
        wf_encode_remote_reply(&b, (uint32_t)r->rank, &m) != WEFT_OK) {
      free(t);
      wf_buf_free(&b);
      reply(r, j->peer, &j->msg, j->ctx, WEFT_ERR_NO_MEMORY, "object %s (%zu bytes) cannot be sent", id, o->nbytes);
      return;
    }
    t->buf = o->data;
    t->user_mem = 1; /* the object's */
    t->obj = o;
    o->refs++;
    t->next = r->holds;
    r->holds = t;
    wf_remote_out_locked(r, j->peer, &b);
  } else if (r->link.max_payload > 256 && j->peer != r->rank && o->nbytes > r->link.max_payload - 256) {
    reply(r, j->peer, &j->msg, j->ctx, WEFT_ERR_INVALID_ARGUMENT,
          "object %s is %zu bytes, over WEFT_MAX_MESSAGE_BYTES (%llu): tensors travel inline", id, o->nbytes,
          (unsigned long long)r->link.max_payload);
  } else if (wf_encode_remote_reply(&b, (uint32_t)r->rank, &m) == WEFT_OK) {
    wf_remote_out_locked(r, j->peer, &b);
  } else {
    wf_buf_free(&b);
    reply(r, j->peer, &j->msg, j->ctx, WEFT_ERR_NO_MEMORY, "object %s (%zu bytes) cannot be sent", id, o->nbytes);
  }
}

void wf_serve_recheck(wf_remote *r) {
  int woke = 0;
  wf_rjob **pp = &r->waiting;
  while (*pp) {
    wf_rjob *j = *pp;
    const wf_robj *bad = NULL;
    int pending = 0;
    for (uint32_t i = 0; i < j->msg.n_in && !bad; i++) {
      if (j->ins[i]->state == WF_OBJ_FAILED) bad = j->ins[i];
      else if (j->ins[i]->state == WF_OBJ_PENDING) pending = 1;
    }
    if (!bad && pending) {
      pp = &j->next;
      continue;
    }
    *pp = j->next;
    j->next = NULL;
    if (bad && j->msg.op == WF_ROP_EXECUTE) {
      char id[48], why[WF_ERRMSG_MAX / 2];
      wf_oid_str(bad->id, id, sizeof id);
      snprintf(why, sizeof why, "input %s failed: %s", id, bad->error ? bad->error : "?");
      job_fail(r, j, 1, WEFT_ERR_NOT_FOUND, why);
    } else if (j->msg.op == WF_ROP_FETCH) {
      fetch_reply(r, j);
      job_free(r, j);
    } else {
      if (r->ready_tail) r->ready_tail->next = j;
      else r->ready_head = j;
      r->ready_tail = j;
      woke = 1;
    }
  }
  if (woke) wf_remote_kick_work(r);
}

/* The object an input id names, or a new placeholder for it (a reference for the job). */
static wf_robj *input_obj(wf_rctx *c, wf_remote_oid id) {
  wf_robj *o = wf_robj_find(c, id);
  if (!o && (o = wf_robj_add(c, id))) o->implicit = 1;
  if (o) o->refs++;
  return o;
}

static int device_bad(wf_remote *r, int peer, const wf_remote_msg *m) {
  if (m->device != WEFT_DEVICE_CPU) {
    reply(r, peer, m, m->ctx, WEFT_ERR_NOT_FOUND,
          "can't find device: %d on rank %d (its store holds host memory: WEFT_DEVICE_CPU)", (int)m->device, r->rank);
    return 1;
  }
  for (uint32_t i = 0; i < m->n_in; i++)
    if (m->in[i].is_inline && m->in[i].t.device != WEFT_DEVICE_CPU) {
      reply(r, peer, m, m->ctx, WEFT_ERR_NOT_FOUND, "can't find device: %d for input %u on rank %d",
            (int)m->in[i].t.device, i, r->rank);
      return 1;
    }
  return 0;
}

/* An output id that may be (re)defined: new, or a placeholder no one produces. */
static int output_taken(wf_remote *r, int peer, const wf_remote_msg *m, wf_rctx *c) {
  for (uint32_t i = 0; i < m->n_out; i++) {
    const wf_robj *o = wf_robj_find(c, m->out[i]);
    int dup = 0;
    for (uint32_t k = 0; k < i; k++)
      dup |= m->out[k].owner == m->out[i].owner && m->out[k].local == m->out[i].local;
    if ((o && !o->implicit) || dup) {
      char id[48];
      wf_oid_str(m->out[i], id, sizeof id);
      reply(r, peer, m, m->ctx, WEFT_ERR_INVALID_ARGUMENT, "output %s %s on rank %d", id,
            dup ? "is named twice" : "exists already", r->rank);
      return 1;
    }
  }
  return 0;
}

static wf_robj *inline_obj(const wf_remote_tensor *t) {
  wf_robj *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->refs = 1;
  o->state = WF_OBJ_READY;
  o->dtype = (weft_dtype)t->dtype;
  o->ndim = t->ndim;
  memcpy(o->shape, t->shape, sizeof o->shape);
  o->nbytes = (size_t)t->nbytes;
  if (o->nbytes && !(o->data = malloc(o->nbytes))) {
    free(o);
    return NULL;
  }
  if (o->nbytes) memcpy(o->data, t->data, o->nbytes);
  return o;
}

/* A bulk input's object: PENDING until its bytes arrive (a reference for the
 * job), and its receive (*t, to post with the others once the call is taken). */
static wf_robj *bulk_obj(wf_remote *r, int peer, const wf_remote_msg *m, uint32_t i, wf_rbulk **t) {
  const wf_remote_tensor *w = &m->in[i].t;
  wf_robj *o = calloc(1, sizeof *o);
  *t = o && r->link.bulk ? wf_bulk_new(r, WF_RB_ARG_RECV, peer, m->call_id, i, (size_t)w->nbytes) : NULL;
  if (!*t || !((*t)->buf = wf_bulk_buf(r, (size_t)w->nbytes, &(*t)->cap))) {
    free(*t);
    free(o);
    *t = NULL;
    return NULL;
  }
  o->refs = 2; /* the job's, the receive's */
  o->state = WF_OBJ_PENDING;
  o->dtype = (weft_dtype)w->dtype;
  o->ndim = w->ndim;
  memcpy(o->shape, w->shape, sizeof o->shape);
  o->nbytes = (size_t)w->nbytes;
  (*t)->obj = o;
  return o;
}

/* The call is taken: its bulk inputs' receives are posted, then BULK_GO asks for the bytes. */
static void bulk_commit(wf_remote *r, int peer, const wf_remote_msg *m, wf_rbulk *list) {
  if (!list) return;
  for (wf_rbulk *t, *next = list; (t = next);) {
    next = t->next;
    wf_bulk_post_locked(r, t);
  }
  wf_remote_msg go = {.call_id = m->call_id, .op = WF_ROP_BULK_GO, .ctx = m->ctx};
  wf_buf b = {0};
  if (wf_encode_remote_reply(&b, (uint32_t)r->rank, &go) == WEFT_OK) wf_remote_out_locked(r, peer, &b);
  else wf_buf_free(&b);
}

void wf_serve_bulk_done(wf_remote *r, wf_rbulk *t) {
  wf_robj *o = t->obj;
  if (t->st == WEFT_OK && o->state == WF_OBJ_PENDING) {
    o->state = WF_OBJ_READY;
    o->data = t->buf;
    t->buf = NULL;
  } else if (t->st != WEFT_OK) {
    char why[WF_ERRMSG_MAX / 2 + 64];
    snprintf(why, sizeof why, "its bytes did not arrive from rank %d: %s", t->peer, t->msg);
    set_failed(o, why);
  }
  if (t->op == WF_ROP_PUT) {
    wf_remote_msg m = {.call_id = t->call_id, .op = WF_ROP_PUT};
    if (o->state == WF_OBJ_READY) reply(r, t->peer, &m, t->ctx, WEFT_OK, " ");
    else reply(r, t->peer, &m, t->ctx, t->st != WEFT_OK ? t->st : WEFT_ERR_NOT_FOUND, "%s",
               o->error ? o->error : "deleted before its bytes arrived");
  }
  wf_bulk_free(t); /* its reference on o */
  wf_serve_recheck(r);
}

static void serve_execute(wf_remote *r, int peer, uint8_t *payload, wf_remote_msg *m, wf_rctx *c) {
  const wf_rfn *fn = NULL;
  for (const wf_rfn *f = r->fns; f && !fn; f = f->next)
    if (!strcmp(f->name, m->name)) fn = f;
  if (!fn) {
    reply(r, peer, m, m->ctx, WEFT_ERR_NOT_FOUND, "can't find program: %s", m->name);
    goto drop;
  }
  if ((uint32_t)fn->n_out != m->n_out) {
    reply(r, peer, m, m->ctx, WEFT_ERR_INVALID_ARGUMENT, "result count: %s has %d results, got %u output ids",
          m->name, fn->n_out, m->n_out);
    goto drop;
  }
  if ((uint32_t)fn->n_in != m->n_in) {
    reply(r, peer, m, m->ctx, WEFT_ERR_INVALID_ARGUMENT, "argument count: %s expected %d arguments, got %u", m->name,
          fn->n_in, m->n_in);
    goto drop;
  }
  if (device_bad(r, peer, m) || output_taken(r, peer, m, c)) goto drop;
  wf_rjob *j = calloc(1, sizeof *j);
  if (!j || (m->n_in && !(j->ins = calloc(m->n_in, sizeof *j->ins))) ||
      (m->n_out && !(j->outs = calloc(m->n_out, sizeof *j->outs)))) {
    if (j) free(j->ins), free(j);
    reply(r, peer, m, m->ctx, WEFT_ERR_NO_MEMORY, "out of memory on rank %d", r->rank);
    goto drop;
  }
  j->peer = peer;
  j->payload = payload;
  j->msg = *m;
  j->ctx = m->ctx;
  j->fn = fn;
  j->deadline = wf_remote_deadline(m->timeout);
  int oom = 0;
  wf_rbulk *bulk = NULL;
  for (uint32_t i = 0; i < m->n_in; i++) {
    wf_rbulk *t = NULL;
    j->ins[i] = m->in[i].is_inline == WF_RT_BULK ? bulk_obj(r, peer, m, i, &t)
                : m->in[i].is_inline             ? inline_obj(&m->in[i].t)
                                                 : input_obj(c, m->in[i].id);
    if (t) t->next = bulk, bulk = t;
    oom |= !j->ins[i];
  }
  for (uint32_t i = 0; i < m->n_out && !oom; i++) {
    wf_robj *o = wf_robj_find(c, m->out[i]);
    if (!o) o = wf_robj_add(c, m->out[i]);
    if (!o) oom = 1;
    else {
      o->implicit = 0;
      o->refs++;
      j->outs[i] = o;
    }
  }
  if (oom) {
    for (wf_rbulk *t; (t = bulk);) bulk = t->next, wf_bulk_free(t);
    job_fail(r, j, 1, WEFT_ERR_NO_MEMORY, "out of memory (or no bulk path)");
    return;
  }
  bulk_commit(r, peer, m, bulk);
  j->next = r->waiting;
  r->waiting = j;
  wf_serve_recheck(r);
  return;
drop:
  wf_remote_msg_free(m);
  free(payload);
}

static void serve_put(wf_remote *r, int peer, const wf_remote_msg *m, wf_rctx *c) {
  if (m->n_in != 1 || !m->in[0].is_inline || m->n_out != 1) {
    reply(r, peer, m, m->ctx, WEFT_ERR_INVALID_ARGUMENT, "put: one tensor and one id expected");
    return;
  }
  if (device_bad(r, peer, m) || output_taken(r, peer, m, c)) return;
  if (m->in[0].is_inline == WF_RT_BULK) { /* the object waits for its bytes; so does the reply */
    wf_rbulk *t = NULL;
    wf_robj *src = bulk_obj(r, peer, m, 0, &t);
    wf_robj *o = src ? wf_robj_find(c, m->out[0]) : NULL;
    if (src && !o) o = wf_robj_add(c, m->out[0]);
    if (!o) {
      wf_bulk_free(t);
      if (src) free(src);
      reply(r, peer, m, m->ctx, WEFT_ERR_NO_MEMORY, "out of memory (or no bulk path) on rank %d", r->rank);
      return;
    }
    free(src); /* (its metadata goes to the store's object, which the receive fills) */
    o->implicit = 0;
    o->dtype = (weft_dtype)m->in[0].t.dtype;
    o->ndim = m->in[0].t.ndim;
    memcpy(o->shape, m->in[0].t.shape, sizeof o->shape);
    o->nbytes = (size_t)m->in[0].t.nbytes;
    o->refs++;
    t->obj = o;
    t->op = WF_ROP_PUT;
    t->ctx = m->ctx;
    bulk_commit(r, peer, m, t);
    wf_serve_recheck(r);
    return;
  }
  wf_robj *src = inline_obj(&m->in[0].t);
  wf_robj *o = wf_robj_find(c, m->out[0]);
  if (!o) o = wf_robj_add(c, m->out[0]);
  if (!src || !o) {
    if (src) wf_robj_unref(src);
    reply(r, peer, m, m->ctx, WEFT_ERR_NO_MEMORY, "out of memory on rank %d", r->rank);
    return;
  }
  o->implicit = 0;
  o->state = WF_OBJ_READY;
  o->dtype = src->dtype;
  o->ndim = src->ndim;
  memcpy(o->shape, src->shape, sizeof o->shape);
  o->nbytes = src->nbytes;
  o->data = src->data;
  src->data = NULL;
  wf_robj_unref(src);
  reply(r, peer, m, m->ctx, WEFT_OK, " ");
  wf_serve_recheck(r);
}

static void serve_fetch(wf_remote *r, int peer, uint8_t *payload, wf_remote_msg *m, wf_rctx *c) {
  wf_rjob *j = calloc(1, sizeof *j);
  if (m->n_in != 1 || m->in[0].is_inline || !j || !(j->ins = calloc(1, sizeof *j->ins)) ||
      !(j->ins[0] = input_obj(c, m->in[0].id))) {
    reply(r, peer, m, m->ctx, j ? WEFT_ERR_INVALID_ARGUMENT : WEFT_ERR_NO_MEMORY, "fetch: one id expected");
    if (j) free(j->ins), free(j);
    wf_remote_msg_free(m);
    free(payload);
    return;
  }
  j->peer = peer;
  j->payload = payload;
  j->msg = *m;
  j->ctx = m->ctx;
  j->deadline = wf_remote_deadline(m->timeout);
  j->next = r->waiting;
  r->waiting = j;
  wf_serve_recheck(r);
}

static void serve_delete(wf_remote *r, int peer, const wf_remote_msg *m, wf_rctx *c) {
  char unknown[WF_ERRMSG_MAX - 64] = "";
  size_t len = 0;
  uint32_t nunknown = 0;
  for (uint32_t i = 0; i < m->n_in; i++) {
    wf_robj *o = m->in[i].is_inline ? NULL : wf_robj_find(c, m->in[i].id);
    if (o && !o->implicit) {
      wf_robj_unlist(c, o);
      continue;
    }
    char id[48];
    if (m->in[i].is_inline) snprintf(id, sizeof id, "(input %u is a tensor)", i);
    else wf_oid_str(m->in[i].id, id, sizeof id);
    if (len + strlen(id) + 32 < sizeof unknown)
      len += (size_t)snprintf(unknown + len, sizeof unknown - len, "%s%s", nunknown ? ", " : "", id);
    else if (len + 8 < sizeof unknown && !strstr(unknown, "..."))
      len += (size_t)snprintf(unknown + len, sizeof unknown - len, ", ...");
    nunknown++;
  }
  wf_serve_recheck(r);
  if (nunknown)
    reply(r, peer, m, m->ctx, WEFT_ERR_NOT_FOUND, "%u unknown id%s: %s", nunknown, nunknown == 1 ? "" : "s", unknown);
  else reply(r, peer, m, m->ctx, WEFT_OK, " ");
}

/* CANCEL: the caller gave up; a job not started yet is dropped. */
static void serve_cancel(wf_remote *r, int peer, const wf_remote_msg *m) {
  wf_rjob **lists[2] = {&r->waiting, &r->ready_head};
  for (int l = 0; l < 2; l++)
    for (wf_rjob **pp = lists[l], *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
      if ((*pp)->peer == peer && (*pp)->msg.call_id == m->call_id) {
        wf_rjob *j = *pp;
        *pp = j->next;
        if (l == 1 && r->ready_tail == j) r->ready_tail = prev;
        char why[64];
        snprintf(why, sizeof why, "cancelled by rank %d", peer);
        job_fail(r, j, 0, WEFT_ERR_CANCELLED, why);
        wf_serve_recheck(r);
        return;
      }
}

void wf_serve_call(wf_remote *r, int peer, uint8_t *payload, wf_remote_msg *m) {
  int64_t now = wf_now_ns();
  if (m->op == WF_ROP_BULK_GO || m->op == WF_ROP_BULK_DROP) { /* a fetch's caller is ready for its bytes, or not */
    wf_bulk_go(r, peer, m->call_id, 1, m->op == WF_ROP_BULK_GO);
    goto drop;
  }
  if (m->op == WF_ROP_CANCEL) {
    serve_cancel(r, peer, m);
    goto drop;
  }
  if (m->op == WF_ROP_CTX_CREATE) {
    wf_rctx *c = calloc(1, sizeof *c);
    if (!c) {
      reply(r, peer, m, 0, WEFT_ERR_NO_MEMORY, "out of memory on rank %d", r->rank);
      goto drop;
    }
    c->id = r->next_ctx++;
    c->creator = peer;
    c->idle = m->idle;
    c->last_used = now;
    c->next = r->ctxs;
    r->ctxs = c;
    reply(r, peer, m, c->id, WEFT_OK, " ");
    goto drop;
  }
  wf_rctx *c = wf_rctx_find(r, m->ctx); /* check 1: the context */
  if (!c) {
    ctx_missing(r, peer, m);
    goto drop;
  }
  c->last_used = now;
  switch (m->op) {
    case WF_ROP_CTX_CLOSE:
      wf_rctx_drop(r, c, 0);
      reply(r, peer, m, m->ctx, WEFT_OK, " ");
      break;
    case WF_ROP_KEEPALIVE:
      reply(r, peer, m, m->ctx, WEFT_OK, " ");
      break;
    case WF_ROP_EXECUTE:
      serve_execute(r, peer, payload, m, c); /* takes payload and m */
      return;
    case WF_ROP_PUT:
      serve_put(r, peer, m, c);
      break;
    case WF_ROP_FETCH:
      serve_fetch(r, peer, payload, m, c); /* takes payload and m */
      return;
    case WF_ROP_DELETE:
      serve_delete(r, peer, m, c);
      break;
    default:
      break;
  }
drop:
  wf_remote_msg_free(m);
  free(payload);
}

/* Jobs past their caller's deadline go (the caller has failed the call already). */
void wf_serve_tick(wf_remote *r, int64_t now) {
  for (wf_rjob **pp = &r->waiting; *pp;) {
    wf_rjob *j = *pp;
    if (j->deadline > now) {
      pp = &j->next;
      continue;
    }
    *pp = j->next;
    job_fail(r, j, 0, WEFT_ERR_TIMEOUT, "its inputs were not produced within the caller's deadline");
  }
  /* placeholders that nobody produces and nobody waits for any more */
  for (wf_rctx *c = r->ctxs; c; c = c->next)
    for (wf_robj *o = c->objs, *next; o; o = next) {
      next = o->next;
      if (o->implicit && o->refs == 1) wf_robj_unlist(c, o);
    }
}

void wf_serve_drop_peer(wf_remote *r, int peer) {
  wf_rjob **lists[2] = {&r->waiting, &r->ready_head};
  char why[64];
  snprintf(why, sizeof why, "rank %d, its caller, is gone", peer);
  for (int l = 0; l < 2; l++)
    for (wf_rjob **pp = lists[l]; *pp;) {
      wf_rjob *j = *pp;
      if (j->peer != peer) {
        pp = &j->next;
        continue;
      }
      *pp = j->next;
      job_fail(r, j, 0, WEFT_ERR_PEER_LOST, why);
    }
  r->ready_tail = NULL;
  for (wf_rjob *j = r->ready_head; j; j = j->next) r->ready_tail = j;
  wf_serve_recheck(r);
}

void wf_serve_free_all(wf_remote *r) {
  while (r->waiting) {
    wf_rjob *j = r->waiting;
    r->waiting = j->next;
    job_fail(r, j, 0, WEFT_ERR_SHUTDOWN, "shut down");
  }
  while (r->ready_head) {
    wf_rjob *j = r->ready_head;
    r->ready_head = j->next;
    job_fail(r, j, 0, WEFT_ERR_SHUTDOWN, "shut down");
  }
  r->ready_tail = NULL;
  while (r->ctxs) wf_rctx_drop(r, r->ctxs, 0);
}

/* ---- the worker thread */

weft_status weft_remote_result_alloc(weft_remote_result *out, int i, weft_dtype dtype, int ndim, const int64_t *shape,
                                     void **data) {
  if (!out || i < 0 || i >= out->n_out || !data)
    return WEFT_ERR_INVALID_ARGUMENT;
  if (out->made[i] || (unsigned)dtype >= WEFT_DTYPE_COUNT_ || ndim < 0 || ndim > WEFT_MAX_DIMS || (ndim && !shape))
    return WEFT_ERR_INVALID_ARGUMENT;
  size_t b = weft_dtype_size(dtype);
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && b > (SIZE_MAX >> 1) / (size_t)shape[d])) return WEFT_ERR_INVALID_ARGUMENT;
    b *= (size_t)shape[d];
  }
  void *p = calloc(1, b ? b : 1);
  if (!p) return WEFT_ERR_NO_MEMORY;
  out->made[i] = 1;
  out->dtype[i] = dtype;
  out->ndim[i] = ndim;
  if (ndim) memcpy(out->shape[i], shape, (size_t)ndim * sizeof *shape);
  out->data[i] = p;
  out->nbytes[i] = b;
  *data = p;
  return WEFT_OK;
}

weft_status weft_remote_result_fail(weft_remote_result *out, const char *message) {
  if (!out || !message) return WEFT_ERR_INVALID_ARGUMENT;
  snprintf(out->error, sizeof out->error, "%s", message);
  return WEFT_OK;
}

static void finish_execute(wf_remote *r, wf_rjob *j, weft_status st, weft_remote_result *res) {
  char why[WF_ERRMSG_MAX / 2];
  uint32_t n = j->msg.n_out;
  if (st == WEFT_OK)
    for (uint32_t i = 0; i < n; i++)
      if (!res->made[i]) {
        st = WEFT_ERR_INVALID_ARGUMENT;
        snprintf(res->error, sizeof res->error, "it did not produce output %u", i);
        break;
      }
  if (st != WEFT_OK) {
    snprintf(why, sizeof why, "%s on rank %d failed (%s): %s", j->msg.name, r->rank, weft_status_string(st),
             res->error[0] ? res->error : "no message");
    job_fail(r, j, 1, st, why);
    return;
  }
  wf_remote_tensor *metas = j->msg.n_meta ? calloc(j->msg.n_meta, sizeof *metas) : NULL;
  for (uint32_t i = 0; i < n; i++) {
    wf_robj *o = j->outs[i];
    if (o->state == WF_OBJ_PENDING) { /* (a deleted output has failed already: its result goes) */
      o->state = WF_OBJ_READY;
      o->dtype = res->dtype[i];
      o->ndim = res->ndim[i];
      memcpy(o->shape, res->shape[i], sizeof o->shape);
      o->nbytes = res->nbytes[i];
      o->data = res->data[i];
      res->data[i] = NULL;
    }
    uint32_t k = n - j->msg.n_meta;
    if (metas && i >= k) {
      metas[i - k] = (wf_remote_tensor){.dtype = (uint8_t)res->dtype[i], .ndim = (uint8_t)res->ndim[i],
                                        .device = WEFT_DEVICE_CPU};
      memcpy(metas[i - k].shape, res->shape[i], sizeof metas[i - k].shape);
    }
  }
  if (j->msg.n_meta && !metas) {
    job_fail(r, j, 1, WEFT_ERR_NO_MEMORY, "out of memory");
    return;
  }
  wf_remote_msg m = {.call_id = j->msg.call_id, .op = WF_ROP_EXECUTE, .ctx = j->ctx, .n_metas = j->msg.n_meta,
                     .metas = metas};
  wf_buf b = {0};
  if (wf_encode_remote_reply(&b, (uint32_t)r->rank, &m) == WEFT_OK) wf_remote_out_locked(r, j->peer, &b);
  else wf_buf_free(&b);
  free(metas);
  job_free(r, j);
}

static void run_job(wf_remote *r, wf_rjob *j) {
  uint32_t n_in = j->msg.n_in, n_out = j->msg.n_out;
  weft_remote_result res = {.n_out = (int)n_out};
  weft_tensor *ins = calloc(n_in ? n_in : 1, sizeof *ins);
  res.made = calloc(n_out + 1, sizeof *res.made);
  res.dtype = calloc(n_out + 1, sizeof *res.dtype);
  res.ndim = calloc(n_out + 1, sizeof *res.ndim);
  res.shape = calloc(n_out + 1, sizeof *res.shape);
  res.data = calloc(n_out + 1, sizeof *res.data);
  res.nbytes = calloc(n_out + 1, sizeof *res.nbytes);
  weft_status st;
  if (!ins || !res.made || !res.dtype || !res.ndim || !res.shape || !res.data || !res.nbytes) {
    st = WEFT_ERR_NO_MEMORY;
  } else {
    for (uint32_t i = 0; i < n_in; i++) { /* READY objects: their fields no longer change */
      const wf_robj *o = j->ins[i];
      ins[i] = (weft_tensor){.dtype = o->dtype, .ndim = o->ndim, .shape = o->shape, .data = o->data,
                             .device = WEFT_DEVICE_CPU};
    }
    st = j->fn->fn(j->fn->ctx, (int)n_in, ins, &res);
  }
  pthread_mutex_lock(&r->mu);
  finish_execute(r, j, st, &res);
  wf_serve_recheck(r);
  pthread_mutex_unlock(&r->mu);
  for (uint32_t i = 0; res.data && i < n_out; i++) free(res.data[i]);
  free(ins);
  free(res.made), free(res.dtype), free(res.ndim), free(res.shape), free(res.data), free(res.nbytes);
}

void *wf_serve_worker(void *arg) {
  wf_remote *r = arg;
  int64_t idle_since = 0;
  pthread_mutex_lock(&r->mu);
  while (!r->stopping) {
    wf_rjob *j = r->ready_head;
    if (!j) {
      /* just after a job the next one usually follows within microseconds
       * (a caller's next call), and a futex sleep and wake-up cost more than
       * that on a VM: look again for a moment, handing the core over */
      int64_t now = wf_now_ns();
      if (!idle_since) idle_since = now;
      if (r->link.sleep) {
        /* calls may come through the link's own way, which this thread
         * drains while idle (so it runs them without another thread's
         * wake-up); then it sleeps on the WORK bell, which they ring */
        uint32_t seen = r->link.bell(r->link.ctx, WF_RLINK_WORK);
        pthread_mutex_unlock(&r->mu);
        int got = wf_remote_poll(r);
        if (got < 0 || (!got && now - idle_since < WF_REMOTE_SPIN_NS)) {
          sched_yield();
        } else if (!got) {
          r->link.sleep(r->link.ctx, WF_RLINK_WORK, seen, WF_REMOTE_TICK_NS * 5);
          idle_since = 0;
        }
        pthread_mutex_lock(&r->mu);
      } else if (now - idle_since < WF_REMOTE_SPIN_NS) {
        pthread_mutex_unlock(&r->mu);
        sched_yield();
        pthread_mutex_lock(&r->mu);
      } else {
        pthread_cond_wait(&r->work_cv, &r->mu);
        idle_since = 0;
      }
      continue;
    }
    idle_since = 0;
    r->ready_head = j->next;
    if (!r->ready_head) r->ready_tail = NULL;
    j->next = NULL;
    r->running = 1; /* the service thread takes the link's own way meanwhile */
    if (r->link.busy) r->link.busy(r->link.ctx, 1);
    pthread_mutex_unlock(&r->mu);
    run_job(r, j);
    pthread_mutex_lock(&r->mu);
    r->running = 0;
    if (r->link.busy && !r->abandoned) r->link.busy(r->link.ctx, 0); /* (abandoned: the world may be gone) */
    if (r->stopping) break; /* finalize may have left this core behind: the link is gone */
    pthread_mutex_unlock(&r->mu);
    wf_remote_flush(r);
    pthread_mutex_lock(&r->mu);
  }
  wf_remote_worker_exit(r); /* unlocks */
  return NULL;
}
