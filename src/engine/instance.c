/* instance.c - instances (weft_op_options.instance_key: an operation
 * identified by a number instead of a name, seed 004's instance_key) and
 * their dependencies (depends_on: an operation starts on this rank only
 * once the instances it follows completed here).
 *
 * An instance travels as the reserved name "\x01instance <key>" (api/ops.c),
 * so matching, validation, the in-flight set, cancellation and the board
 * treat it as any name; util/err.c's wf_name_pretty turns the reserved name
 * back into "instance 42" in messages. This file keeps, per instance key,
 * the record of its latest submission on this rank (pending, OK or failed,
 * with the error), updated under w->mu at submission (api/, any thread) and
 * completion (engine thread or a one-host caller). A request with
 * dependencies is registered in flight at submission but waits in w->held
 * instead of the engine's queue; the engine thread looks at the held list
 * on every pass (a completion of an instance wakes it) and queues, fails or
 * times out each one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/onehost.h"
#include "util/err.h"

enum { INST_PENDING, INST_OK, INST_FAILED };

typedef struct wf_inst_rec {
  const weft_request *latest; /* its latest submission here (identity only, never dereferenced) */
  int state;                  /* INST_* */
  weft_status st;             /* FAILED: its status */
  char msg[512];              /* FAILED: its error */
} wf_inst_rec;

static void key_str(uint64_t key, char out[24]) { snprintf(out, 24, "%" PRIu64, key); }

void wf_inst_submitted_locked(weft_world *w, weft_request *r) {
  char k[24];
  key_str(r->inst_key, k);
  wf_inst_rec *rec = wf_strmap_get(&w->instances, k);
  if (!rec) {
    if (!(rec = calloc(1, sizeof *rec))) return; /* out of memory: its dependents wait for their deadline */
    if (wf_strmap_put(&w->instances, k, rec)) {
      free(rec);
      return;
    }
  }
  rec->latest = r;
  rec->state = INST_PENDING;
  rec->msg[0] = '\0';
}

void wf_inst_completed_locked(weft_world *w, weft_request *r) {
  char k[24];
  key_str(r->inst_key, k);
  wf_inst_rec *rec = wf_strmap_get(&w->instances, k);
  if (!rec || rec->latest != r) return; /* a later submission of the key is the one that counts */
  rec->state = r->status == WEFT_OK ? INST_OK : INST_FAILED;
  rec->st = r->status;
  snprintf(rec->msg, sizeof rec->msg, "%s", r->error ? r->error : weft_status_string(r->status));
}

void wf_inst_hold_locked(weft_world *w, weft_request *r) {
  r->held = 1;
  r->next = w->held;
  w->held = r;
}

/* What r waits for: 0 when every dependency completed OK; 1 while one is
 * pending or unknown (*dep: the first such, *never: it was never
 * submitted here); -1 when one failed (*dep, *rec: its record). */
static int deps_state(weft_world *w, const weft_request *r, uint64_t *dep, int *never, wf_inst_rec **failed) {
  int wait = 0;
  for (int i = 0; i < r->ndeps; i++) {
    char k[24];
    key_str(r->deps[i], k);
    wf_inst_rec *rec = wf_strmap_get(&w->instances, k);
    if (rec && rec->state == INST_FAILED) {
      *dep = r->deps[i];
      *failed = rec;
      return -1;
    }
    if ((!rec || rec->state == INST_PENDING) && !wait) {
      wait = 1;
      *dep = r->deps[i];
      *never = !rec;
    }
  }
  return wait;
}

void wf_inst_progress(weft_world *w, int64_t now) {
  weft_request *go = NULL, *bad = NULL; /* bad: r->error and r->status set */
  pthread_mutex_lock(&w->mu);
  for (weft_request **p = &w->held; *p;) {
    weft_request *r = *p;
    uint64_t dep = 0;
    int never = 0;
    wf_inst_rec *rec = NULL;
    int s = deps_state(w, r, &dep, &never, &rec);
    char msg[1024];
    if (s == 1 && now < r->deadline) {
      p = &r->next;
      continue;
    }
    if (s < 0) {
      r->status = rec->st;
      snprintf(msg, sizeof msg, "tensor '%s': depends on instance %" PRIu64 ", which failed on rank %d: %s",
               r->msg.name, dep, w->rank, rec->msg);
    } else if (s > 0) {
      r->status = WEFT_ERR_TIMEOUT;
      snprintf(msg, sizeof msg, "tensor '%s': timed out after %g s on rank %d waiting for instance %" PRIu64
               ", which it depends on, to complete (%s); it was never started", r->msg.name,
               r->op_timeout > 0 ? r->op_timeout : w->timeout_seconds, w->rank, dep,
               never ? "no operation with that instance key was submitted on this rank"
                     : "it was submitted on this rank and is still pending");
    }
    *p = r->next;
    r->held = 0;
    if (s > 0 && r->timeout_aborts) r->timed_sent = 1; /* marks it for the world's failure below */
    if (s == 0) {
      r->next = go;
      go = r;
    } else {
      r->error = strdup(msg);
      r->next = bad;
      bad = r;
    }
  }
  pthread_mutex_unlock(&w->mu);
  /* oldest first: the held list is newest first, and so the lists built from it are oldest first */
  /* every submission visits the board once, started or not: its counts stay in step */
  for (weft_request *r = go; r; r = r->next) wf_fast_visit(w, r);
  for (weft_request *r = bad; r; r = r->next) wf_fast_visit(w, r);
  if (go) {
    pthread_mutex_lock(&w->mu);
    for (weft_request *r = go, *next; r; r = next) {
      next = r->next;
      wf_engine_queue_locked(w, r);
    }
    pthread_mutex_unlock(&w->mu);
  }
  for (weft_request *r = bad, *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    if (r->timed_sent) { /* timeout_aborts: its timeout fails the world, as cancel.c's */
      if (r->error) wf_name_pretty(r->error);
      wf_world_fail(w, WEFT_ERR_TIMEOUT, "%s (timeout_aborts: the world is aborted; to recover, call weft_finalize and "
                    "weft_init again on every rank)", r->error ? r->error : "an operation's dependency timed out");
    }
    wf_request_complete_many(w, &r, 1);
  }
}

int64_t wf_inst_next(weft_world *w) {
  int64_t d = INT64_MAX;
  pthread_mutex_lock(&w->mu);
  for (weft_request *r = w->held; r; r = r->next)
    if (r->deadline < d) d = r->deadline;
  pthread_mutex_unlock(&w->mu);
  return d;
}

void wf_inst_fail_all(weft_world *w, weft_status st, const char *msg) {
  pthread_mutex_lock(&w->mu);
  weft_request *list = w->held;
  w->held = NULL;
  for (weft_request *r = list; r; r = r->next) r->held = 0;
  pthread_mutex_unlock(&w->mu);
  for (weft_request *r = list, *next; r; r = next) {
    next = r->next;
    r->next = NULL;
    wf_request_complete(w, r, st, msg);
  }
}

void wf_inst_free(weft_world *w) {
  for (size_t i = 0; i < w->instances.cap; i++) {
    wf_strmap_entry *e = &w->instances.slots[i];
    if (e->key && !e->tomb) free(e->val);
  }
  wf_strmap_free(&w->instances);
}
