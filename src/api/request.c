/* request.c - request handles: test, wait (spin briefly, then block on the
 * world's condition variable, always with a deadline), results, free. */
#include <pthread.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "negotiate/onehost.h"
#include "util/copy.h"
#include "util/err.h"
#include "util/time.h"

/* ------------------------------------------------------------- memory */
/* A freed request's memory is kept for the thread's next request, up to
 * CACHE_MAX per thread: a request (about 1.4 KiB) is beyond glibc's
 * per-thread cache, and a small collective on one host otherwise spends a
 * sixth of its instructions in malloc and free. Sanitizer builds keep
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
  if (!r->deadline) r->deadline = wf_deadline_after(r->world->timeout_seconds);
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

/* ------------------------------------------------------------- handles */
/* weft_wait polls this long before it sleeps on the condition variable. */
#define WAIT_SPIN_NS (50 * 1000LL)

static int live(weft_request *r) {
  return r && atomic_load_explicit(&r->magic, memory_order_relaxed) == WF_REQ_MAGIC;
}

static int done(weft_request *r) {
  /* acquire: pairs with the engine's release store in wf_request_complete */
  return atomic_load_explicit(&r->state, memory_order_acquire) == WF_REQ_DONE;
}

weft_status weft_test(weft_request *r) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_test: not a live request handle");
  if (!done(r)) wf_fast_progress(r, 0, 0); /* a one-host fast request completes in the caller */
  if (!done(r)) return WEFT_IN_PROGRESS;
  wf_request_observed(r); /* the caller sees it complete: its name is free again */
  if (r->status != WEFT_OK) wf_err(r->status, "%s", r->error ? r->error : weft_status_string(r->status));
  return r->status;
}

weft_status weft_wait(weft_request *r, double timeout_seconds) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_wait: not a live request handle");
  if (done(r)) return weft_test(r);
  if (wf_fast_busy(r)) /* one-host fast path: wait on the board, complete it here */
    wf_fast_progress(r, timeout_seconds >= 0 ? wf_deadline_after(timeout_seconds) : r->deadline, 1);
  if (done(r)) return weft_test(r);
  /* Spin a little (WAIT_SPIN_NS): small collectives complete in tens of
   * microseconds, and a futex sleep/wake costs about as much on a VM. Yield
   * so oversubscribed ranks and the engine thread run. */
  int64_t spin_end = 0;
  for (int i = 0;; i++) {
    if (done(r)) return weft_test(r);
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
  while (!done(r)) {
    int64_t left = deadline - wf_now_ns();
    if (left <= 0) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + left;
    ts.tv_sec += ns / WF_NS_PER_SEC;
    ts.tv_nsec = ns % WF_NS_PER_SEC;
    w->waiters++;
    pthread_cond_timedwait(&w->done_cv, &w->mu, &ts);
    w->waiters--;
  }
  pthread_mutex_unlock(&w->mu);
  if (!done(r)) return WEFT_IN_PROGRESS;
  return weft_test(r);
}

const char *weft_request_error(weft_request *r) {
  if (!live(r) || !done(r) || !r->error) return "";
  return r->error;
}

const char *weft_request_algorithm(const weft_request *r) {
  weft_request *q = (weft_request *)r; /* live() and done() only read */
  if (!live(q) || !done(q)) return "";
  if (!q->kids) return q->algo ? q->algo : "";
  /* a grouped op: its children completed before it (their algo fields
   * were written before their completions, which came before its own) */
  const char *first = NULL;
  for (int i = 0; i < q->nkids; i++) {
    const char *a = q->kids[i] && q->kids[i]->algo ? q->kids[i]->algo : "";
    if (!first) first = a;
    else if (strcmp(first, a)) return "mixed";
  }
  return first ? first : "";
}

weft_status weft_request_output(weft_request *r, weft_tensor *out) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_output: not a live request handle");
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_output: out is NULL");
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_output: the request has not completed");
  memset(out, 0, sizeof *out);
  out->dtype = (weft_dtype)r->msg.dtype;
  out->device = WEFT_DEVICE_CPU;
  switch (r->msg.coll) {
    case WF_COLL_ALLREDUCE:
      *out = r->out;
      return r->status;
    case WF_COLL_BROADCAST:
      *out = r->in;
      return r->status;
    case WF_COLL_ALLGATHER:
    case WF_COLL_ALLTOALL:
    case WF_COLL_REDUCESCATTER:
      /* reported even on failure, so memory from the caller's allocator can be freed */
      out->data = r->result;
      out->ndim = r->result_ndim;
      out->shape = r->result_shape;
      return r->status;
    default:
      return r->status;
  }
}

weft_status weft_request_recv_splits(weft_request *r, const int64_t **splits, int *n) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_recv_splits: not a live request handle");
  if (!splits || !n) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_recv_splits: NULL output argument");
  if (r->msg.coll != WF_COLL_ALLTOALL)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_recv_splits: '%s' is not an alltoall", r->msg.name);
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_recv_splits: the request has not completed");
  *splits = r->recv_splits;
  *n = r->recv_splits ? r->nrecv_splits : 0;
  return r->status;
}

weft_status weft_request_free(weft_request *r) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_free: not a live request handle");
  /* The user's reference may be dropped once: a second free of a detached
   * (still pending) request must not steal the engine's reference. */
  /* Under w->mu, which completion holds while it decides whether the name
   * goes with a detached request: either this sees it done and frees the
   * name, or the completion sees it detached and does. */
  uint32_t expect = WF_REQ_MAGIC;
  int ok = 1;
  if (done(r)) {
    wf_request_observed(r);
  } else { /* pending: the world is alive (finalize completes every request first) */
    weft_world *w = r->world;
    pthread_mutex_lock(&w->mu);
    if (done(r)) wf_request_names_locked(w, r);
    else ok = atomic_compare_exchange_strong(&r->magic, &expect, WF_REQ_FREED);
    pthread_mutex_unlock(&w->mu);
  }
  if (!ok) return wf_err(WEFT_ERR_MISUSE, "weft_request_free: not a live request handle");
  wf_request_unref(r);
  return WEFT_OK;
}

weft_status weft_request_last_joined(weft_request *r, int *rank) {
  if (!live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_last_joined: not a live request handle");
  if (!rank) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_last_joined: rank is NULL");
  if (r->msg.coll != WF_COLL_JOIN)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "weft_request_last_joined: '%s' is not a join", r->msg.name);
  if (!done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_last_joined: the join has not completed");
  *rank = r->last_joined;
  return r->status;
}
