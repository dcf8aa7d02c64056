/* submit.c - the submission interface (submit.h): what callers hand the
 * engine (requests, grouped ops, groups, an abort) and what they learn of
 * the world's failure. Everything here runs on caller threads and touches
 * only the state shared under w->mu. */
#include "engine/submit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/devstage.h"
#include "engine/onehost.h"
#include "util/err.h"
#include "util/strmap.h"

#define INVALID(...) wf_err(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

void wf_engine_queue_locked(weft_world *w, weft_request *r) {
  r->next = NULL;
  if (w->q_tail) w->q_tail->next = r;
  else w->q_head = r;
  w->q_tail = r;
}

void wf_engine_submit(weft_world *w, weft_request *r) {
  wf_request_arm(r);
  pthread_mutex_lock(&w->mu);
  wf_engine_queue_locked(w, r);
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
}

/* Does r carry a device tensor to stage (devstage.h)? */
static int on_device(const weft_request *r) {
  return r->in.device >= 0 && r->msg.coll != WF_COLL_BARRIER && r->msg.coll != WF_COLL_JOIN;
}

/* Registers the name and enqueues, under one lock; on failure frees r. */
weft_status wf_submit(weft_request *r, weft_request **out) {
  weft_world *w = r->world;
  if (on_device(r)) { /* the copy down is queued before anything can read r's host view */
    weft_status st = wf_devstage_in(r);
    if (st != WEFT_OK) {
      free(r->msg.splits);
      free(r->deps);
      free(r);
      return st;
    }
  }
  int held = r->ndeps > 0; /* waits for its instances (instance.c); then the engine path */
  int fast = !held && wf_fast_wants(w, r); /* one-host fast path: register here, visit the board below */
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
  } else if (held) {
    atomic_store_explicit(&r->name_held, 1, memory_order_relaxed);
    wf_inst_hold_locked(w, r);
  } else {
    atomic_store_explicit(&r->name_held, 1, memory_order_relaxed);
    wf_engine_queue_locked(w, r); /* under the same lock (wf_engine_submit's work) */
  }
  if (st == WEFT_OK && r->inst_key) wf_inst_submitted_locked(w, r);
  pthread_mutex_unlock(&w->mu);
  if (st != WEFT_OK) {
    wf_devstage_discard(r);
    free(r->msg.splits);
    free(r->deps);
    free(r);
    return st;
  }
  *out = r;
  if (!fast) wf_engine_wake(w);
  else if (!wf_fast_submit(w, r)) wf_engine_submit(w, r);
  return WEFT_OK;
}

/* A grouped op that was not submitted after all: frees it, returns st. */
static weft_status free_grouped(weft_status st, weft_request *parent, weft_request **kids, int n) {
  for (int i = 0; i < n; i++) {
    wf_devstage_discard(kids[i]);
    free(kids[i]->msg.splits);
    free(kids[i]);
  }
  free(kids);
  free(parent);
  return st;
}

/* Enqueues a grouped op: kids[0..n) (built and checked) under one lock,
 * so the engine sees them in one drain and they reach the coordinator in
 * one batch; parent completes with the last. The parent keeps a reference
 * on each child (weft_request_output_at). On failure frees everything. */
weft_status wf_submit_grouped(const char *fn, weft_group *g, weft_request *parent, weft_request **kids, int n,
                              weft_request **req) {
  weft_world *w = g->world;
  weft_status st = WEFT_OK;
  for (int i = 0; i < n && st == WEFT_OK; i++)
    if (on_device(kids[i])) st = wf_devstage_in(kids[i]);
  if (st != WEFT_OK) return free_grouped(st, parent, kids, n);
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
  if (st != WEFT_OK) return free_grouped(st, parent, kids, n);
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

/* ------------------------------------------------------------- groups */
weft_status wf_group_register(weft_world *w, weft_group *g, const char *members, uint32_t (*id_of)(const char *, intptr_t)) {
  weft_status st = WEFT_OK;
  pthread_mutex_lock(&w->mu);
  intptr_t count = (intptr_t)wf_strmap_get(&w->group_counts, members) + 1;
  if (w->fail_status != WEFT_OK) {
    st = wf_err(w->fail_status, "%s", w->fail_msg);
  } else if (wf_strmap_put(&w->group_counts, members, (void *)count)) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "weft_group_create: out of memory");
  } else {
    g->id = id_of(members, count);
    g->next = w->new_groups;
    w->new_groups = g;
  }
  pthread_mutex_unlock(&w->mu);
  if (st == WEFT_OK) wf_engine_wake(w);
  return st;
}

weft_status wf_group_register_id(weft_world *w, weft_group *g, uint32_t id) {
  weft_status st = WEFT_OK;
  pthread_mutex_lock(&w->mu);
  if (w->fail_status != WEFT_OK) {
    st = wf_err(w->fail_status, "%s", w->fail_msg);
  } else {
    g->id = id;
    g->next = w->new_groups;
    w->new_groups = g;
  }
  pthread_mutex_unlock(&w->mu);
  if (st == WEFT_OK) wf_engine_wake(w);
  return st;
}

void wf_group_unregister(weft_world *w, weft_group *g) {
  pthread_mutex_lock(&w->mu);
  g->magic = 0; /* the engine frees it */
  g->dead_next = w->dead_groups;
  w->dead_groups = g;
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
}

/* ------------------------------------------------------------- the world */
void wf_world_abort(weft_world *w, const char *reason) {
  pthread_mutex_lock(&w->mu);
  int first = w->fail_status == WEFT_OK;
  if (first) {
    w->fail_status = WEFT_ERR_ABORTED;
    snprintf(w->fail_msg, sizeof w->fail_msg, "aborted: %s", reason);
    snprintf(w->abort_reason, sizeof w->abort_reason, "%s", reason);
    w->abort_send = 1;
  }
  pthread_mutex_unlock(&w->mu);
  wf_engine_wake(w);
}

weft_status wf_world_status(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  weft_status st = w->fail_status;
  if (st != WEFT_OK) wf_err(st, "%s", w->fail_msg);
  pthread_mutex_unlock(&w->mu);
  return st;
}
