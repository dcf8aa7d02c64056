/* request.c - the whole life of a request: memory (a per-thread cache),
 * construction, arming its deadline, completion (publication, callback,
 * the grouped op's parent), its name's hold on the in-flight set, waiting,
 * detaching, and release. Callers reach it through engine/submit.h; the
 * engine thread completes requests here. */
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/devstage.h"
#include "engine/engine.h"
#include "engine/onehost.h"
#include "engine/p2p.h"
#include "engine/submit.h"
#include "util/copy.h"
#include "util/err.h"
#include "util/time.h"

/* ------------------------------------------------------------- memory */
/* A freed request's memory is kept for the thread's next request, up to
 * CACHE_MAX per thread: a request (about 1.4 KiB) is beyond glibc's
 * per-thread cache, and a small collective on one host otherwise spends a
 * large share of its instructions in malloc and free (bench/NOTES.md,
 * "Request memory"). Sanitizer builds keep
 * nothing, so that every use after free is still caught. A thread's cache
 * is freed when it exits (pthread key destructor; from then on its frees go
 * straight to free); the main thread's stays reachable until the process
 * ends (exit runs no key destructors). The library is linked -z nodelete,
 * so no destructor outlives its code. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define WF_NO_REQ_CACHE 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(WF_NO_REQ_CACHE)
#define CACHE_MAX 0
#else
#define CACHE_MAX 4
#endif

static _Thread_local weft_request *tl_cache; /* linked through next */
static _Thread_local int tl_ncache, tl_keyed, tl_exiting;
static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void free_cache(void *unused) {
  (void)unused;
  tl_exiting = 1; /* another key's destructor may still free requests */
  while (tl_cache) {
    weft_request *r = tl_cache;
    tl_cache = r->next;
    free(r);
  }
  tl_ncache = 0;
}

static void make_key(void) { g_key_ok = pthread_key_create(&g_key, free_cache) == 0; }

/* wf_request_new skips the name and the key: the last member of msg, and
 * the member after it */
_Static_assert(sizeof(wf_request_msg) - offsetof(wf_request_msg, name) < sizeof(((wf_request_msg *)0)->name) + 8 &&
                   offsetof(weft_request, key) == offsetof(weft_request, msg) + sizeof(wf_request_msg) &&
                   offsetof(weft_request, in) - offsetof(weft_request, key) < sizeof(((weft_request *)0)->key) + 8,
               "msg.name and key are adjacent in weft_request");

void wf_request_arm(weft_request *r) {
  if (!r->deadline) r->deadline = wf_deadline_after(r->op_timeout > 0 ? r->op_timeout : r->world->timeout_seconds);
}

weft_request *wf_request_new(void) {
  weft_request *r = tl_cache;
  if (!r) return calloc(1, sizeof *r);
  tl_cache = r->next;
  tl_ncache--;
  /* zero all but the name and key (half a KiB; the submission writes both),
   * through libc's memset: an inlined string store starts slowly */
  wf_zero(r, offsetof(weft_request, msg.name));
  wf_zero(&r->in, sizeof *r - offsetof(weft_request, in));
  r->msg.name[0] = r->key[0] = '\0';
  return r;
}

void wf_request_release(weft_request *r) {
  if (tl_ncache >= CACHE_MAX || tl_exiting) {
    free(r);
    return;
  }
  if (!tl_keyed) { /* once per thread: have its exit free the cache */
    pthread_once(&g_once, make_key);
    if (!g_key_ok || pthread_setspecific(g_key, &tl_cache) != 0) {
      free(r);
      return;
    }
    tl_keyed = 1;
  }
  r->next = tl_cache;
  tl_cache = r;
  tl_ncache++;
}

/* ------------------------------------------------------------- names */
void wf_request_names_locked(weft_world *w, weft_request *r) {
  if (atomic_load_explicit(&r->name_held, memory_order_relaxed)) {
    wf_strmap_del_val_h(&w->inflight, r->key, r->key_hash, r); /* the key's own pointer: no strcmp */
    atomic_store_explicit(&r->name_held, 0, memory_order_relaxed);
  }
  for (int i = 0; i < r->nkids; i++)
    if (r->kids[i]) wf_request_names_locked(w, r->kids[i]);
}

/* Does r (or a grouped op's child) still hold its name? Relaxed: name_held
 * changes only under w->mu, and a stale 1 only costs the lock. Once nothing
 * is held the world is not touched, so a handle seen complete may be tested
 * and freed after weft_finalize (which gives every name up). */
static int any_held(weft_request *r) {
  if (atomic_load_explicit(&r->name_held, memory_order_relaxed)) return 1;
  for (int i = 0; i < r->nkids; i++)
    if (r->kids[i] && any_held(r->kids[i])) return 1;
  return 0;
}

void wf_request_observed(weft_request *r) {
  if (!any_held(r)) return;
  weft_world *w = r->world;
  pthread_mutex_lock(&w->mu);
  wf_request_names_locked(w, r);
  pthread_mutex_unlock(&w->mu);
}

/* ------------------------------------------------------------- construction */
/* r->key = "<group id>/<name>" (name: len bytes, already in r->msg.name)
 * and its hash, once: the in-flight set and the board use both. */
static void set_key(weft_request *r, uint32_t id, size_t len) {
  char digits[10];
  int nd = 0;
  do digits[nd++] = (char)('0' + id % 10); while ((id /= 10) && nd < 10);
  char *k = r->key;
  while (nd) *k++ = digits[--nd];
  *k++ = '/';
  memcpy(k, r->msg.name, len + 1); /* at most 10 + 1 + 255 + 1 bytes: fits */
  r->key_hash = wf_str_hash_n(r->key, (size_t)(k - r->key) + len);
}

static inline weft_request *make(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                                 const weft_op_options *o, int keyed) {
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
  if (keyed) set_key(r, g->id, len);
  if (in) {
    r->in = *in;
    r->msg.dtype = (uint8_t)in->dtype;
    r->msg.ndim = (uint8_t)in->ndim;
    for (int d = 0; d < in->ndim; d++) r->msg.shape[d] = r->in_shape[d] = in->shape[d];
    r->in.shape = r->in_shape;
    r->msg.device = wf_submit_device_code(in); /* kind and index: the ranks compare both */
  }
  if (o) {
    r->callback = o->callback;
    r->user_data = o->user_data;
    r->alloc = o->alloc;
    r->alloc_ctx = o->alloc_ctx;
    if (o->struct_size >= offsetof(weft_op_options, consumer_stream) + sizeof(void *))
      r->consumer_stream = o->consumer_stream;
    if (o->struct_size >= offsetof(weft_op_options, timeout_aborts) + sizeof(int) && o->timeout_seconds > 0) {
      r->op_timeout = o->timeout_seconds;
      r->timeout_aborts = o->timeout_aborts != 0;
    }
    if (o->struct_size >= offsetof(weft_op_options, n_depends) + sizeof(int)) { /* checked by api/ops.c */
      r->inst_key = o->instance_key;
      if (o->n_depends > 0) {
        if (!(r->deps = malloc(sizeof(uint64_t) * (size_t)o->n_depends))) {
          wf_request_release(r);
          return NULL;
        }
        memcpy(r->deps, o->depends_on, sizeof(uint64_t) * (size_t)o->n_depends);
        r->ndeps = o->n_depends;
      }
    }
  }
  /* no deadline yet (wf_request_arm): a fast round that completes at
   * arrival never needs one, and a clock read is a noticeable part of a
   * small op's cost. Not CLOCK_MONOTONIC_COARSE, though cheaper: on a VM it
   * can lag CLOCK_MONOTONIC by more than its own resolution, so deadlines
   * would fire early (bench/NOTES.md, "Lean submission", "Tried and not
   * taken") */
  return r;
}

weft_request *wf_request_make(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                              const weft_op_options *o) {
  return make(g, coll, name, in, o, 1);
}

weft_request *wf_request_make_unkeyed(weft_group *g, wf_coll coll, const char *name, const weft_tensor *in,
                                      const weft_op_options *o) {
  return make(g, coll, name, in, o, 0);
}

/* ------------------------------------------------------------- completion */
void wf_request_unref(weft_request *r) {
  if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  /* most are NULL: no call for them (this runs once per op) */
  if (r->msg.splits) free(r->msg.splits);
  if (r->error) free(r->error);
  if (r->result_owned) free(r->result);
  if (r->result_dev) wf_devstage_free_result(r);
  if (r->dstage) wf_devstage_discard(r); /* never submitted */
  if (r->recv_splits) free(r->recv_splits);
  if (r->child_error) free(r->child_error);
  if (r->fast_msg) free(r->fast_msg);
  if (r->deps) free(r->deps);
  for (int i = 0; i < r->nkids; i++) wf_request_unref(r->kids[i]); /* grouped op: the parent's references */
  if (r->kids) free(r->kids);
  atomic_store_explicit(&r->magic, WF_REQ_FREED, memory_order_relaxed);
  wf_request_release(r);
}

/* After publication: the callback, the engine's reference, and (grouped op)
 * the parent, which completes with its last child carrying the first error. */
static void complete_rest(weft_world *w, weft_request *r) {
  weft_status st = r->status;
  if (r->callback) {
    r->callback(r, st, r->user_data);
    wf_request_observed(r); /* the callback saw it complete */
  }
  weft_request *parent = r->parent;
  if (parent && st != WEFT_OK && parent->child_status == WEFT_OK) {
    parent->child_status = st;
    parent->child_error = r->error ? strdup(r->error) : NULL;
  }
  wf_request_unref(r);
  if (parent && atomic_fetch_sub_explicit(&parent->remaining, 1, memory_order_acq_rel) == 1) {
    char *m = parent->child_error;
    parent->child_error = NULL;
    wf_request_complete(w, parent, parent->child_status, m);
    free(m);
  }
}

void wf_request_complete_many(weft_world *w, weft_request **rs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (rs[i]->dstage) wf_devstage_detach(w, rs[i]); /* the caller's descriptors back; staging retires */
    if (rs[i]->error) wf_name_pretty(rs[i]->error); /* "instance 42: ..." (no mark: one strchr) */
  }
  pthread_mutex_lock(&w->mu);
  for (uint32_t i = 0; i < n; i++) {
    /* a detached request's name goes now: nobody will see it complete */
    if (atomic_load_explicit(&rs[i]->magic, memory_order_relaxed) == WF_REQ_FREED) wf_request_names_locked(w, rs[i]);
    wf_fast_unlist_locked(w, rs[i]);
    if (rs[i]->inst_key) wf_inst_completed_locked(w, rs[i]); /* before DONE: its dependents see it then */
    /* release: the result fields become visible to a thread that reads
     * state == DONE with acquire (weft_test / weft_wait) */
    atomic_store_explicit(&rs[i]->state, WF_REQ_DONE, memory_order_release);
  }
  /* one wake-up for the whole batch (none when nobody sleeps): a woken
   * waiter does not contend with the engine for the lock request by request */
  if (w->waiters) pthread_cond_broadcast(&w->done_cv);
  int held = w->held != NULL;
  pthread_mutex_unlock(&w->mu);
  if (held) wf_engine_wake(w); /* operations waiting for an instance: the engine looks again */
  for (uint32_t i = 0; i < n; i++) complete_rest(w, rs[i]);
}

/* A point-to-point request over the mailboxes with no callback, parent or
 * instance key holds nothing under w->mu (no name, not on the fast list):
 * published without the lock, which a waiter on done_cv takes only when it
 * counts itself in w->waiters before it looks at the state (seq_cst on both
 * sides: it sees DONE, or this sees it and wakes it under the lock). */
static int unlocked_ok(const weft_request *r) {
  return r->p2p_fast && !r->callback && !r->parent && !r->inst_key && !r->dstage && !r->nkids;
}

void wf_request_complete(weft_world *w, weft_request *r, weft_status st, const char *msg) {
  r->status = st;
  if (st != WEFT_OK && msg) r->error = strdup(msg);
  if (!unlocked_ok(r)) {
    wf_request_complete_many(w, &r, 1);
    return;
  }
  if (r->error) wf_name_pretty(r->error);
  atomic_store(&r->state, WF_REQ_DONE);
  if (atomic_load(&w->waiters)) {
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->done_cv);
    pthread_mutex_unlock(&w->mu);
  }
  wf_request_unref(r); /* the engine's reference */
}

uint64_t wf_request_bytes(const weft_request *r) {
  uint64_t b = weft_dtype_size((weft_dtype)r->msg.dtype);
  for (int d = 0; d < r->msg.ndim; d++) b *= (uint64_t)r->msg.shape[d];
  return r->msg.coll == WF_COLL_BARRIER || r->msg.coll == WF_COLL_JOIN ? 0 : b;
}

/* ------------------------------------------------------------- waiting */
/* wf_request_wait polls this long before it sleeps on the condition variable. */
#define WAIT_SPIN_NS (50 * 1000LL)

int wf_request_live(const weft_request *r) {
  return r && atomic_load_explicit(&((weft_request *)r)->magic, memory_order_relaxed) == WF_REQ_MAGIC;
}

int wf_request_done(const weft_request *r) {
  /* acquire: pairs with the engine's release store in wf_request_complete */
  return atomic_load_explicit(&((weft_request *)r)->state, memory_order_acquire) == WF_REQ_DONE;
}

static int done(weft_request *r) { return wf_request_done(r); }

int wf_request_poll(weft_request *r) {
  if (!done(r) && r->p2p_fast) wf_p2p_fast_progress(r, 0, 0); /* a mailbox transfer: matched here */
  else if (!done(r)) wf_fast_progress(r, 0, 0); /* a one-host request completes in the caller */
  return done(r);
}

int wf_world_wait_once(weft_world *w, int64_t deadline) {
  int64_t left = deadline - wf_now_ns();
  if (left <= 0) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = ts.tv_nsec + left;
  ts.tv_sec += ns / WF_NS_PER_SEC;
  ts.tv_nsec = ns % WF_NS_PER_SEC;
  w->waiters++;
  pthread_cond_timedwait(&w->done_cv, &w->mu, &ts);
  w->waiters--;
  return 1;
}

int wf_request_wait(weft_request *r, double timeout_seconds) {
  if (done(r)) return 1;
  if (wf_fast_busy(r)) /* one-host fast path: wait on the board, complete it here */
    wf_fast_progress(r, timeout_seconds >= 0 ? wf_deadline_after(timeout_seconds) : r->deadline, 1);
  if (r->p2p_fast) /* a mailbox transfer: progressed here, waiting on the rank's bell */
    wf_p2p_fast_progress(r, timeout_seconds >= 0 ? wf_deadline_after(timeout_seconds) : r->deadline, 1);
  if (done(r)) return 1;
  /* Spin a little (WAIT_SPIN_NS): small collectives complete in tens of
   * microseconds, and a futex sleep/wake costs about as much on a VM. Yield
   * so oversubscribed ranks and the engine thread run. */
  int64_t spin_end = 0;
  for (int i = 0;; i++) {
    if (done(r)) return 1;
    if (i < 16) continue;
    if (!spin_end) spin_end = wf_now_ns() + WAIT_SPIN_NS;
    else if ((i & 7) == 0 && wf_now_ns() >= spin_end) break;
    sched_yield();
  }
  weft_world *w = r->world;
  int64_t deadline;
  if (timeout_seconds >= 0) {
    deadline = wf_deadline_after(timeout_seconds);
  } else {
    /* The engine fails every operation by its deadline (plus the time to
     * notice a silent peer); waiting past that would be a bug, not a hang. */
    wf_request_arm(r); /* armed on the paths that wait: this guards the rest (a fast round settled elsewhere) */
    deadline = r->deadline + (int64_t)((w->hb_timeout + 5.0) * 1e9);
  }
  pthread_mutex_lock(&w->mu);
  w->waiters++; /* before looking (seq_cst): see wf_request_complete's unlocked path */
  while (!done(r))
    if (!wf_world_wait_once(w, deadline)) break;
  w->waiters--;
  pthread_mutex_unlock(&w->mu);
  return done(r);
}

int wf_request_detach(weft_request *r) {
  /* Under w->mu, which completion holds while it decides whether the name
   * goes with a detached request: either this sees it done and frees the
   * name, or the completion sees it detached and does. */
  if (done(r)) {
    wf_request_observed(r);
    return 1;
  }
  weft_world *w = r->world; /* pending: the world is alive (finalize completes every request first) */
  uint32_t expect = WF_REQ_MAGIC;
  int ok = 1;
  pthread_mutex_lock(&w->mu);
  if (done(r)) wf_request_names_locked(w, r);
  else ok = atomic_compare_exchange_strong(&r->magic, &expect, WF_REQ_FREED);
  pthread_mutex_unlock(&w->mu);
  return ok;
}
