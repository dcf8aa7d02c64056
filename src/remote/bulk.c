/* bulk.c - the bulk data path: a large tensor's bytes (an execute or put
 * input, a fetched object) travel apart from their frame, over the link's
 * bulk transfers (in a world: point-to-point transfers, engine/p2p.h, so
 * shared memory or CMA on one host and TCP across hosts, with p2p's
 * rendezvous and the transports' flow control).
 *
 * The frame carries the tensor's metadata (kind WF_RT_BULK). The data's
 * receiver allocates, posts its receive, and only then sends BULK_GO (the
 * callee for inputs: a REMOTE_REPLY; the caller for a fetch: a
 * REMOTE_CALL); the sender posts its send when BULK_GO arrives. So no send
 * waits for a receive that may never be posted (a rejected call, a
 * cancelled fetch: the caller answers a fetch's metadata with BULK_DROP
 * then). Keys: the caller's call id and the input's index. A peer's death
 * fails the transfers (the world fails) and the calls name it (call.c).
 *
 * A transfer's end may come after the core was freed (finalize with
 * transfers posted): the hub, shared by the core and every posted
 * transfer, tells the end that it must free what it holds itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/remote_impl.h"
#include "util/err.h"

/* A staging buffer this large is kept for the next call's copy when its
 * transfer ends: a fresh one's first touch of every page (a fault each)
 * costs more than the copy. At most one, at most WF_BULK_SPARE_MAX. */
#define WF_BULK_SPARE_MIN ((size_t)1 << 20)
#define WF_BULK_SPARE_MAX ((size_t)256 << 20)
#define KEY(call_id, index) (((call_id) << 11) | (uint64_t)(index)) /* index < 2048 > WF_REMOTE_MAX_ARGS */

weft_status wf_bulk_init(wf_remote *r) {
  if (!r->link.bulk) return WEFT_OK;
  if (!(r->hub = calloc(1, sizeof *r->hub))) return WEFT_ERR_NO_MEMORY;
  pthread_mutex_init(&r->hub->mu, NULL);
  r->hub->r = r;
  r->hub->refs = 1;
  return WEFT_OK;
}

static void hub_unref(wf_rhub *h) { /* h->mu held; unlocks */
  int last = --h->refs == 0;
  pthread_mutex_unlock(&h->mu);
  if (last) {
    pthread_mutex_destroy(&h->mu);
    free(h);
  }
}

void wf_bulk_detach(wf_remote *r) {
  if (!r->hub) return;
  pthread_mutex_lock(&r->hub->mu); /* held until wf_bulk_release: ends wait, then free alone */
  r->hub->r = NULL;
}

void wf_bulk_release(wf_remote *r) {
  if (r->hub) hub_unref(r->hub);
  r->hub = NULL;
}

int wf_bulk_on(const wf_remote *r, int peer, uint64_t nbytes) {
  return r->link.bulk && peer != r->rank && nbytes >= (r->link.bulk_min ? r->link.bulk_min : 1);
}

wf_rbulk *wf_bulk_new(wf_remote *r, int kind, int peer, uint64_t call_id, uint32_t index, size_t n) {
  wf_rbulk *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->hub = r->hub;
  t->kind = kind;
  t->peer = peer;
  t->call_id = call_id;
  t->index = index;
  t->n = n;
  return t;
}

void *wf_bulk_buf(wf_remote *r, size_t n, size_t *cap) {
  for (int k = 0; k < 2; k++)
    if (r->spare[k] && r->spare_cap[k] >= n && r->spare_cap[k] / 2 <= n) {
      void *p = r->spare[k];
      *cap = r->spare_cap[k];
      r->spare[k] = NULL;
      r->spare_cap[k] = 0;
      return p;
    }
  *cap = n;
  return malloc(n ? n : 1);
}

void *wf_bulk_stage_buf(wf_remote *r, size_t n, size_t *cap) {
  pthread_mutex_lock(&r->mu);
  void *p = wf_bulk_buf(r, n, cap);
  pthread_mutex_unlock(&r->mu);
  return p;
}

void wf_bulk_keep(wf_remote *r, void **buf, size_t cap) {
  if (!*buf || !r->link.bulk || r->stopping || cap < WF_BULK_SPARE_MIN || cap > WF_BULK_SPARE_MAX) return;
  int k = r->spare_cap[0] <= r->spare_cap[1] ? 0 : 1; /* the smaller (or empty) slot goes */
  if (r->spare_cap[k] > cap) return;
  free(r->spare[k]);
  r->spare[k] = *buf;
  r->spare_cap[k] = cap;
  *buf = NULL;
}

/* An ARG_SEND's buffer after its transfer: kept as a spare, or freed. */
static void stage_done(wf_remote *r, wf_rbulk *t) {
  wf_bulk_keep(r, &t->buf, t->cap);
  wf_bulk_free(t);
}

void wf_bulk_free(wf_rbulk *t) {
  if (!t) return;
  if (!t->user_mem) free(t->buf);
  if (t->obj) wf_robj_unref(t->obj);
  free(t);
}

static void free_list(wf_rbulk *t) {
  for (wf_rbulk *next; t; t = next) {
    next = t->next;
    wf_bulk_free(t);
  }
}

void wf_bulk_post_locked(wf_remote *r, wf_rbulk *t) {
  t->next = NULL;
  if (r->post_tail) r->post_tail->next = t;
  else r->post_head = t;
  r->post_tail = t;
}

void wf_bulk_post_all(wf_remote *r, wf_rbulk *list) {
  for (wf_rbulk *t = list, *next; t; t = next) {
    next = t->next;
    pthread_mutex_lock(&r->mu);
    t->next = r->moving;
    r->moving = t;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&t->hub->mu);
    t->hub->refs++;
    pthread_mutex_unlock(&t->hub->mu);
    int send = t->kind == WF_RB_ARG_SEND || t->kind == WF_RB_FETCH_SEND;
    weft_status st = r->link.bulk(r->link.ctx, t->peer, send, KEY(t->call_id, t->index), t->buf, t->n, t);
    if (st != WEFT_OK) wf_remote_bulk_done(t, st, wf_err_msg());
  }
}

void wf_remote_bulk_done(wf_rbulk *t, weft_status st, const char *msg) {
  wf_rhub *h = t->hub;
  pthread_mutex_lock(&h->mu);
  wf_remote *r = h->r;
  if (!r) { /* the core is gone: nothing else refers to what t holds */
    wf_bulk_free(t);
    hub_unref(h);
    return;
  }
  pthread_mutex_lock(&r->mu);
  for (wf_rbulk **pp = &r->moving; *pp; pp = &(*pp)->next)
    if (*pp == t) {
      *pp = t->next;
      break;
    }
  t->st = st;
  if (st != WEFT_OK) snprintf(t->msg, sizeof t->msg, "%s", msg && msg[0] ? msg : weft_status_string(st));
  t->next = r->bdone;
  r->bdone = t;
  wf_remote_kick_svc(r);
  pthread_mutex_unlock(&r->mu);
  hub_unref(h);
}

/* Takes from *list the transfers of (peer, call_id). */
static wf_rbulk *take(wf_rbulk **list, int peer, uint64_t call_id) {
  wf_rbulk *got = NULL, **tail = &got;
  for (wf_rbulk **pp = list; *pp;) {
    wf_rbulk *t = *pp;
    if (t->peer != peer || t->call_id != call_id) {
      pp = &t->next;
      continue;
    }
    *pp = t->next;
    t->next = NULL;
    *tail = t;
    tail = &t->next;
  }
  return got;
}

/* callee 0: a REMOTE_REPLY for this rank's call (BULK_GO: send its inputs;
 * any other: the callee took none, they go). callee 1: a fetch's BULK_GO or
 * BULK_DROP from its caller. */
void wf_bulk_go(wf_remote *r, int peer, uint64_t call_id, int callee, int go) {
  wf_rbulk *t = take(callee ? &r->holds : &r->stage, peer, call_id);
  if (!go) {
    free_list(t);
    return;
  }
  for (wf_rbulk *next; t; t = next) {
    next = t->next;
    wf_bulk_post_locked(r, t);
  }
}

void wf_bulk_drop_peer(wf_remote *r, int peer) {
  wf_rbulk **lists[2] = {&r->stage, &r->holds};
  for (int l = 0; l < 2; l++)
    for (wf_rbulk **pp = lists[l]; *pp;) {
      wf_rbulk *t = *pp;
      if (t->peer != peer) {
        pp = &t->next;
        continue;
      }
      *pp = t->next;
      wf_bulk_free(t);
    }
}

void wf_bulk_tick(wf_remote *r) {
  while (r->bdone) {
    wf_rbulk *t = r->bdone;
    r->bdone = t->next;
    t->next = NULL;
    if (t->kind == WF_RB_ARG_RECV) wf_serve_bulk_done(r, t);
    else if (t->kind == WF_RB_FETCH_RECV) wf_call_bulk_done(r, t);
    else if (t->kind == WF_RB_ARG_SEND && t->st == WEFT_OK) stage_done(r, t);
    else wf_bulk_free(t); /* a send: its copy or its reference goes */
  }
}

void wf_bulk_free_all(wf_remote *r) {
  /* posted transfers (moving) end later: wf_remote_bulk_done frees them */
  wf_rbulk *lists[4] = {r->stage, r->holds, r->post_head, r->bdone};
  r->stage = r->holds = r->post_head = r->post_tail = r->bdone = NULL;
  for (int l = 0; l < 4; l++) free_list(lists[l]);
  r->moving = NULL;
  for (int k = 0; k < 2; k++) free(r->spare[k]), r->spare[k] = NULL;
}

void wf_remote_bulk_counts(wf_remote *r, int *staged, int *held, int *moving) {
  pthread_mutex_lock(&r->mu);
  wf_rbulk *lists[3] = {r->stage, r->holds, r->moving};
  int *outs[3] = {staged, held, moving};
  for (int l = 0; l < 3; l++) {
    *outs[l] = 0;
    for (wf_rbulk *t = lists[l]; t; t = t->next) (*outs[l])++;
  }
  pthread_mutex_unlock(&r->mu);
}
