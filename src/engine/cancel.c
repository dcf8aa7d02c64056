/* cancel.c - weft_request_cancel's engine side: a caller asks (any thread,
 * under w->mu) to withdraw a request still negotiating; the engine thread
 * tells the group's coordinator (CANCEL, or directly when it is this rank),
 * which decides (negotiate/coord.h's wf_coord_cancel): the name fails with
 * WEFT_ERR_CANCELLED on every rank, or, if its response was already out,
 * the request runs and completes as usual. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/submit.h"
#include "util/err.h"
#include "util/log.h"

struct wf_cancel_ask {
  struct wf_cancel_ask *next;
  uint32_t group_id;
  char name[WF_NAME_MAX + 1];
};

weft_status wf_submit_cancel(weft_request *r) {
  weft_world *w = r->world;
  const char *name = r->msg.name;
  weft_status st = WEFT_OK;
  struct wf_cancel_ask *a = calloc(1, sizeof *a);
  if (!a) return wf_err(WEFT_ERR_NO_MEMORY, "weft_request_cancel: out of memory");
  pthread_mutex_lock(&w->mu);
  int state = atomic_load_explicit(&r->state, memory_order_acquire);
  if (state == WF_REQ_DONE)
    st = wf_err(WEFT_ERR_MISUSE, "weft_request_cancel: '%s' is already complete", name);
  else if (state == WF_REQ_RUNNING)
    st = wf_err(WEFT_ERR_MISUSE, "weft_request_cancel: '%s' is running (every rank agreed to it): it cannot be "
                "cancelled", name);
  else if (r->kids || r->parent || r->msg.coll == WF_COLL_JOIN)
    st = wf_err(WEFT_ERR_NOT_SUPPORTED, "weft_request_cancel: '%s': %s cannot be cancelled", name,
                r->msg.coll == WF_COLL_JOIN ? "a join" : "a grouped operation");
  else if (r->held)
    st = wf_err(WEFT_ERR_NOT_SUPPORTED, "weft_request_cancel: '%s' waits for the instances it depends on and has not "
                "been submitted for agreement yet: it cannot be cancelled", name);
  else if (atomic_load_explicit(&r->fast, memory_order_acquire))
    st = wf_err(WEFT_ERR_NOT_SUPPORTED, "weft_request_cancel: '%s' is on the one-host board (shared memory, no "
                "coordinator; WEFT_FAST=0 sends every operation through the coordinator): it cannot be cancelled",
                name);
  else if (w->fail_status != WEFT_OK)
    st = wf_err(w->fail_status, "%s", w->fail_msg);
  if (st == WEFT_OK) {
    a->group_id = r->group->id;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->next = w->cancels;
    w->cancels = a;
    a = NULL;
  }
  pthread_mutex_unlock(&w->mu);
  free(a);
  if (st == WEFT_OK) wf_engine_wake(w);
  return st;
}

void wf_cancel_progress(weft_world *w) {
  pthread_mutex_lock(&w->mu);
  struct wf_cancel_ask *list = w->cancels;
  w->cancels = NULL;
  pthread_mutex_unlock(&w->mu);
  /* oldest first: the list is newest first */
  struct wf_cancel_ask *rev = NULL;
  while (list) {
    struct wf_cancel_ask *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  for (struct wf_cancel_ask *a = rev, *next; a; a = next) {
    next = a->next;
    wf_gstate *gs = wf_gs_find(w, a->group_id);
    /* still negotiating here (its request went to the coordinator before:
     * the submissions were drained first, and frames keep their order) */
    if (gs && wf_strmap_get(&gs->table, a->name)) {
      WF_DEBUG(WF_SUB_COORD, "cancelling '%s' in group %u (coordinator rank %d)", a->name, gs->id, gs->coord_rank);
      if (gs->coord) {
        wf_coord_withdraw(gs->coord, gs->group->rank, a->name, 0, 0);
      } else {
        wf_cancel_msg m = {.group_id = gs->id, .reason = WF_CANCEL_ASKED};
        snprintf(m.name, sizeof m.name, "%s", a->name);
        wf_buf b = {0};
        if (wf_encode_cancel(&b, (uint32_t)w->rank, &m) == WEFT_OK) wf_engine_send_frame(w, gs->coord_rank, &b);
        wf_buf_free(&b);
      }
    }
    free(a);
  }
}

void wf_cancel_on_msg(weft_world *w, int peer, const wf_cancel_msg *m) {
  wf_gstate *gs = wf_gs_find(w, m->group_id);
  if (!gs) {
    /* not registered here yet (a keyed group has no creation barrier): its
     * request waits with the orphans, and is negotiated as usual */
    WF_WARN(WF_SUB_COORD, "rank %d cancelled '%s' in group %u before this rank registered the group: not cancelled",
            peer, m->name, m->group_id);
    return;
  }
  int gr = wf_group_index(gs->group, peer);
  if (!gs->coord || gr < 0) {
    wf_world_fail(w, WEFT_ERR_PROTOCOL, "rank %d cancelled '%s' in group %u, which rank %d does not coordinate", peer,
                  m->name, m->group_id, w->rank);
    wf_tcp_close(w->tcp, peer);
    return;
  }
  wf_coord_withdraw(gs->coord, gr, m->name, m->reason == WF_CANCEL_TIMEOUT, m->seconds);
}

/* ------------------------------------------------------------ own deadlines */
/* Requests with their own timeout (weft_op_options.timeout_seconds) still
 * negotiating: when one's deadline passes, the coordinator is told (a
 * withdrawal with reason TIMEOUT), or, with timeout_aborts, the world fails. */
static void timed_one(weft_world *w, wf_gstate *gs, weft_request *r, int64_t now) {
  if (r->timed_sent || !r->op_timeout || !r->deadline || now < r->deadline) return;
  r->timed_sent = 1;
  if (r->timeout_aborts) {
    wf_world_fail(w, WEFT_ERR_TIMEOUT, "operation '%s' timed out after %g s (timeout_aborts: the world is aborted; to "
                  "recover, call weft_finalize and weft_init again on every rank)", r->msg.name, r->op_timeout);
    return;
  }
  if (gs->coord) {
    wf_coord_withdraw(gs->coord, gs->group->rank, r->msg.name, 1, r->op_timeout);
    return;
  }
  wf_cancel_msg m = {.group_id = gs->id, .reason = WF_CANCEL_TIMEOUT, .seconds = r->op_timeout};
  snprintf(m.name, sizeof m.name, "%s", r->msg.name);
  wf_buf b = {0};
  if (wf_encode_cancel(&b, (uint32_t)w->rank, &m) == WEFT_OK) wf_engine_send_frame(w, gs->coord_rank, &b);
  wf_buf_free(&b);
}

int64_t wf_timed_progress(weft_world *w, int64_t now) {
  int64_t next = INT64_MAX;
  if (!w->ntimed) return next;
  int left = 0;
  for (int gi = 0; gi < w->ngs; gi++) {
    wf_gstate *gs = w->gs[gi];
    for (size_t i = 0; i < gs->table.cap; i++) {
      wf_strmap_entry *e = &gs->table.slots[i];
      if (!e->key || e->tomb) continue;
      weft_request *r = e->val;
      if (!r->op_timeout || r->timed_sent) continue;
      if (atomic_load_explicit(&r->state, memory_order_relaxed) != WF_REQ_NEGOTIATING) continue;
      timed_one(w, gs, r, now);
      if (!r->timed_sent) {
        left++;
        if (r->deadline < next) next = r->deadline;
      }
    }
  }
  w->ntimed = left;
  return next;
}

void wf_cancel_free(weft_world *w) {
  for (struct wf_cancel_ask *a = w->cancels, *next; a; a = next) {
    next = a->next;
    free(a);
  }
  w->cancels = NULL;
}
