/* onehost.c - the one-host path's driver: collectives of one-host groups
 * negotiated through the board (see onehost.h for who does what, board.h
 * for the protocol). */
#include "engine/onehost_impl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/board.h"
#include "reduce/reduce.h"
#include "host/segment.h"
#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"
#include "util/time.h"

#define STOP_WAIT_NS 2000000000

/* r->fast: F_DRAIN is a remote round's request whose reads are done and
 * claimed, waiting until every member has read its input; F_SPLIT a split
 * round's request folding and copying out slices (board.h) */
enum { F_NONE = 0, F_PENDING = 1, F_CLAIMED = 2, F_DRAIN = 3, F_SPLIT = 4 };
/* The engine's scan leaves an F_SPLIT request this long (from its round's
 * DONE) to its waiter. */
#define SPLIT_SCAN_NS 1000000

static size_t large_param(const wf_settings *s) {
  int64_t b = s->fast_large_bytes;
  return b > 0 && (uint64_t)b <= WF_BOARD_MAX_LARGE ? (size_t)b : 0;
}

size_t wf_fast_board_bytes(const wf_settings *s, int nlocal) {
  int64_t b = s->fast_bytes;
  return b > 0 ? wf_board_bytes(nlocal, (size_t)b, large_param(s)) : 0;
}

size_t wf_fast_large_bytes(const wf_settings *s, int nlocal) {
  int64_t b = s->fast_bytes;
  return b > 0 ? wf_board_large_for(nlocal, (size_t)b, large_param(s)) : 0;
}

weft_status wf_fast_start(weft_world *w) {
  if (!(w->one = calloc(1, sizeof *w->one))) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory starting the engine");
  size_t n = 0;
  uint64_t large = 0;
  void *mem = w->host ? wf_host_board(w->host, &n, &large) : NULL;
  const wf_settings *s = &w->set;
  w->one->fast_on = s->fast != 0;
  w->one->fast_cma_bytes = s->fast_cma_bytes > 0 ? (size_t)s->fast_cma_bytes : 0;
  w->one->fast_split_own = s->fast_split_own != 0;
  w->one->fast_wait_ns = (int64_t)(s->fast_wait_seconds * 1e9);
  w->one->timeout_ns = wf_deadline_after(w->timeout_seconds) - wf_now_ns(); /* the same clipping */
  /* nothing diverts a round before it gives up: give up well before the
   * operation's deadline, so that the coordinator's timeout still applies */
  if (w->one->fast_wait_ns > w->one->timeout_ns / 4) w->one->fast_wait_ns = w->one->timeout_ns / 4;
  if (mem) w->one->board = wf_board_open(mem, n, wf_host_nlocal(w->host), (size_t)large);
  if (w->one->board)
    WF_DEBUG(WF_SUB_ENGINE, "one-host negotiation board: %zu bytes per allreduce input, %zu per other input, %s",
             wf_board_part_bytes(w->one->board), wf_board_large_bytes(w->one->board),
             w->one->fast_on ? "on" : "off on this rank (WEFT_FAST=0)");
  return WEFT_OK;
}

/* Closes the board (bounded wait for caller threads inside it). */
static void close_board(weft_world *w) {
  if (!w->one->board) return;
  /* tests read this line to see which path ops took */
  WF_INFO(WF_SUB_ENGINE,
          "one-host fast path: %llu completed in shared memory, %llu diverted to the coordinator, %llu read across "
          "processes%s",
          (unsigned long long)atomic_load(&w->one->fast_done), (unsigned long long)atomic_load(&w->one->fast_diverted),
          (unsigned long long)atomic_load(&w->one->fast_remote),
          wf_board_is_off(w->one->board) ? "; the board is off (a join, or generations found out of step)" : "");
  atomic_store(&w->one->board_closing, 1);
  int64_t end = wf_now_ns() + STOP_WAIT_NS;
  while (atomic_load(&w->one->board_users) > 0 && wf_now_ns() < end) sched_yield();
  wf_board_close(w->one->board);
  w->one->board = NULL;
}

void wf_fast_stop(weft_world *w) {
  if (!w->one) return;
  close_board(w);
  free(w->one->fast);
  free(w->one);
  w->one = NULL;
}

int64_t wf_fast_next_scan(weft_world *w, int64_t now) {
  int64_t f = atomic_load(&w->one->fast_next);
  /* a request listed since the last scan (seq_cst: against a caller that
   * read fast_next to see whether to wake this thread) */
  if (atomic_load(&w->one->fast_kick) && f > now + WF_FAST_SCAN_NS) f = now + WF_FAST_SCAN_NS;
  return f;
}

void wf_fast_scan_due(weft_world *w, int64_t now) {
  if (atomic_load_explicit(&w->one->fast_next, memory_order_relaxed) <= now || atomic_exchange(&w->one->fast_kick, 0))
    atomic_store(&w->one->fast_next, wf_fast_scan(w, now));
}

/* Enter/leave the board from a caller thread: finalize waits for leavers. */
static int enter(weft_world *w) {
  atomic_fetch_add(&w->one->board_users, 1);
  if (!atomic_load(&w->one->board_closing)) return 1;
  atomic_fetch_sub(&w->one->board_users, 1);
  return 0;
}
static void leave(weft_world *w) { atomic_fetch_sub(&w->one->board_users, 1); }

/* 1 if every member of g is this rank or on this host through shm. */
static int group_local(weft_world *w, weft_group *g) {
  int v = atomic_load_explicit(&g->fast_local, memory_order_relaxed);
  if (v) return v > 0;
  v = g->size <= WF_BOARD_MAX_MEMBERS ? 1 : -1;
  for (int i = 0; v > 0 && i < g->size; i++)
    if (g->ranks[i] != w->rank && wf_host_index_of(w->host, g->ranks[i]) < 0) v = -1;
  atomic_store_explicit(&g->fast_local, v, memory_order_relaxed);
  return v > 0;
}

/* The record a request uses. Unnamed barriers ("barrier.N", matched by call
 * order) share 64 records, N mod 64: a record per N would fill the table,
 * and one record would put several of a rank's pending barriers on the same
 * round once more than two are in flight. */
static const char *board_name(const weft_request *r, char *buf, size_t cap) {
  if (!r->auto_barrier) return r->msg.name;
  snprintf(buf, cap, "\001unnamed barrier %u", (unsigned)((r->auto_barrier - 1) % 64));
  return buf;
}

/* The board's lock deadline for a request's arrival and claim: the world's
 * timeout from when a lock turns out to be held (no clock read otherwise;
 * the request may have no deadline yet: wf_request_arm). */
static int64_t lock_within(const weft_world *w) { return w->one->timeout_ns > 0 ? -w->one->timeout_ns : -1; }

void wf_fast_visit(weft_world *w, weft_request *r) {
  weft_group *g = r->group;
  if (!w->one->board || wf_board_is_off(w->one->board) || !group_local(w, g) || !enter(w)) return;
  int how;
  wf_board_ticket t;
  char nb[32];
  wf_board_arrive(w->one->board, g->id, board_name(r, nb, sizeof nb), g->rank, g->size, NULL, NULL, 0,
                  (wf_board_span){0, 0}, lock_within(w),
                  &how, &t);
  leave(w);
}

void wf_fast_off(weft_world *w) {
  if (!w->one->board || !enter(w)) return;
  wf_board_off(w->one->board, wf_deadline_after(w->timeout_seconds));
  leave(w);
}

void wf_fast_list_locked(weft_world *w, weft_request *r) {
  if (w->one->nfast == w->one->fast_cap) {
    int cap = w->one->fast_cap ? 2 * w->one->fast_cap : 16;
    weft_request **a = realloc(w->one->fast, sizeof *a * (size_t)cap);
    if (a) {
      w->one->fast = a;
      w->one->fast_cap = cap;
    }
  }
  if (w->one->nfast < w->one->fast_cap) {
    w->one->fast[w->one->nfast++] = r;
    r->fast_listed = 1;
  } else {
    w->one->fast_lost = 1; /* out of memory: the engine scan cannot see it; waiters still complete it */
  }
}

void wf_fast_unlist_locked(weft_world *w, weft_request *r) {
  if (!r->fast_listed) return;
  r->fast_listed = 0;
  for (int i = 0; i < w->one->nfast; i++)
    if (w->one->fast[i] == r) {
      w->one->fast[i] = w->one->fast[--w->one->nfast];
      break;
    }
}

static void list_del(weft_world *w, weft_request *r) {
  pthread_mutex_lock(&w->mu);
  wf_fast_unlist_locked(w, r);
  pthread_mutex_unlock(&w->mu);
}

/* The members (world ranks) of r's remote round that have not claimed it. */
static void unclaimed(weft_world *w, weft_request *r, char *buf, size_t cap) {
  uint64_t c = wf_board_claimed(w->one->board, r->fast_t);
  size_t at = 0;
  buf[0] = '\0';
  for (int k = 0; k < r->fast_n && at < cap; k++)
    if (!(c >> k & 1)) {
      int n = snprintf(buf + at, cap - at, "%s%d", at ? ", " : "", r->group->ranks[k]);
      if (n < 0) break;
      at += (size_t)n;
    }
}

/* An F_DRAIN request: completes it (returns 1) once every member has read
 * its input. At its deadline, or when finalize closes the board, it gives
 * up on the round instead (abandons it), so that late readers fail rather
 * than read a buffer its owner got back. 0: not yet. */
static int drain(weft_world *w, weft_request *r) {
  if (atomic_load(&r->fast) != F_DRAIN) return 1; /* completed elsewhere (a failing world) */
  int all = wf_board_wait_claims(w->one->board, r->fast_t, r->fast_n, 0), closing = 0;
  if (!all) {
    closing = atomic_load(&w->one->board_closing) != 0;
    if (!closing && wf_now_ns() < r->deadline) return 0;
  }
  int expect = F_DRAIN;
  if (!atomic_compare_exchange_strong(&r->fast, &expect, F_CLAIMED)) return 1;
  weft_status s = r->fast_status;
  char why[WF_NAME_MAX + 256], who[160];
  why[0] = '\0';
  if (!all) {
    wf_board_abandon(w->one->board, r->fast_t);
    /* a claim may have landed since the look: then nobody reads any more
     * (and the abandon is harmless: every reader looks before its claim) */
    if (!wf_board_wait_claims(w->one->board, r->fast_t, r->fast_n, 0)) {
      unclaimed(w, r, who, sizeof who);
      s = closing ? WEFT_ERR_SHUTDOWN : WEFT_ERR_TIMEOUT;
      snprintf(why, sizeof why, "'%s': rank(s) %s did not finish reading this rank's input %s", r->msg.name, who,
               closing ? "before finalize" : "in time");
    }
  }
  char *msg = r->fast_msg;
  r->fast_msg = NULL;
  atomic_fetch_add_explicit(&w->one->fast_done, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&w->one->fast_remote, 1, memory_order_relaxed);
  r->algo = WF_FAST_ALGO;
  wf_request_complete(w, r, s, why[0] ? why : msg);
  free(msg);
  return 1;
}

/* An F_SPLIT request: one pass over its slices (wf_fast_split_pass) by
 * whichever thread holds r->split_busy; completes it (returns 1) once it
 * has every slice. At its deadline, or when finalize closes the board, it
 * gives up (the slices it misses were taken by a member that did not
 * finish them). Its claim goes in either way: it reads no more. 1 also if
 * it completed elsewhere; 0: not yet; -1: another thread of this process
 * is making a pass (no use waiting on the board for it). */
static int split(weft_world *w, weft_request *r) {
  if (atomic_load(&r->fast) != F_SPLIT) return 1;
  if (atomic_exchange(&r->split_busy, 1)) return -1;
  if (atomic_load(&r->fast) != F_SPLIT) { /* completed while we looked */
    atomic_store(&r->split_busy, 0);
    return 1;
  }
  int closing = atomic_load(&w->one->board_closing) != 0;
  int all = !closing && wf_fast_split_pass(w, r);
  if (!all && !closing && wf_now_ns() < r->deadline) {
    atomic_store(&r->split_busy, 0);
    return 0;
  }
  weft_status s = WEFT_OK;
  char why[WF_NAME_MAX + 160];
  why[0] = '\0';
  if (!all) {
    uint64_t busy;
    int taker;
    wf_board_slices_done(w->one->board, r->fast_t, r->fast_n, &busy, &taker);
    s = closing ? WEFT_ERR_SHUTDOWN : WEFT_ERR_TIMEOUT;
    if (taker >= 0 && taker < r->fast_n)
      snprintf(why, sizeof why, "'%s': rank %d took a slice of the sum and did not finish it %s", r->msg.name,
               r->group->ranks[taker], closing ? "before finalize" : "in time");
    else
      snprintf(why, sizeof why, "'%s': the sum's slices were not all folded %s", r->msg.name,
               closing ? "before finalize" : "in time");
  }
  /* bounded apart from the op's deadline (which may have passed): a
   * failing world's fail_all waits for this pass to end */
  weft_status c = wf_board_claim(w->one->board, r->fast_t, r->fast_rank, WF_BOARD_WITHIN(1.0));
  if (s == WEFT_OK && c != WEFT_OK) {
    s = c;
    snprintf(why, sizeof why, "%s", wf_err_msg());
  }
  atomic_store(&r->fast, F_CLAIMED);
  atomic_store(&r->split_busy, 0);
  atomic_fetch_add_explicit(&w->one->fast_done, 1, memory_order_relaxed);
  r->algo = WF_FAST_ALGO;
  wf_request_complete(w, r, s, why[0] ? why : NULL);
  return 1;
}

/* The board is entered. Acts on r's round if it is no longer open and this
 * thread wins r: completes it (DONE; a remote round's request first waits
 * in F_DRAIN for every member to read its input) or hands it to the engine
 * (diverted). Returns 1 if r is no longer pending. */
static int settle(weft_world *w, weft_request *r, int st) {
  if (st == WF_BOARD_WAIT) return 0;
  int expect = F_PENDING;
  if (st == WF_BOARD_DONE && r->fast_split) { /* straight to F_SPLIT: fail_all must always see it */
    /* before the CAS, which publishes it to the engine's scan (a loser's
     * store is as good: the same moment) */
    atomic_store_explicit(&r->split_t0, wf_now_ns(), memory_order_relaxed);
    if (!atomic_compare_exchange_strong(&r->fast, &expect, F_SPLIT)) return 1;
    /* its waiter, weft_test or the engine's scan goes on from here; the
     * engine scans when it next wakes (no wake-up: a core for the ranks) */
    if (split(w, r) != 1) atomic_store(&w->one->fast_kick, 1);
    return 1;
  }
  if (!atomic_compare_exchange_strong(&r->fast, &expect, F_CLAIMED)) return 1;
  if (st == WF_BOARD_DONE) { /* the completion takes r off the list, under the lock it takes anyway */
    int remote = wf_board_is_remote(w->one->board, r->fast_t); /* before the claim: a last claim may free the round */
    weft_status s = wf_fast_result(w, r);
    const char *msg = s == WEFT_OK ? NULL : strdup(wf_err_msg());
    weft_status c = wf_board_claim(w->one->board, r->fast_t, r->fast_rank, lock_within(w));
    if (s == WEFT_OK) s = c;
    if (remote) {
      if (s == WEFT_OK) wf_fast_own(w, r); /* the others' inputs are read: they may go on meanwhile */
      r->fast_status = s;
      r->fast_msg = s == WEFT_OK || msg ? (char *)msg : strdup(wf_err_msg());
      atomic_store(&r->fast, F_DRAIN);
      if (!drain(w, r)) atomic_store(&w->one->fast_kick, 1); /* the engine's scan completes it if nobody waits */
      return 1;
    }
    atomic_fetch_add_explicit(&w->one->fast_done, 1, memory_order_relaxed);
    r->algo = WF_FAST_ALGO;
    wf_request_complete(w, r, s, s == WEFT_OK ? NULL : msg ? msg : wf_err_msg());
    free((void *)msg);
  } else {
    atomic_fetch_add_explicit(&w->one->fast_diverted, 1, memory_order_relaxed);
    list_del(w, r);
    wf_engine_submit(w, r);
  }
  return 1;
}

int wf_fast_wants(weft_world *w, weft_request *r) {
  if (!w->one->board || wf_board_is_off(w->one->board)) return 0;
  return r->msg.coll == WF_COLL_JOIN || group_local(w, r->group);
}

int wf_fast_submit(weft_world *w, weft_request *r) {
  weft_group *g = r->group;
  if (r->msg.coll == WF_COLL_JOIN) {
    wf_fast_off(w);
    return 0;
  }
  if (!w->one->board || wf_board_is_off(w->one->board) || !group_local(w, g) || !enter(w)) {
    list_del(w, r);
    return 0;
  }
  wf_board_desc d;
  size_t bytes;
  const void *part;
  void *tmp;
  int ok = wf_fast_input(w, r, &d, &part, &bytes, &tmp);
  int how = WF_BOARD_SLOW;
  r->fast_split = ok ? d.split : WF_SPLIT_NONE;
  r->fast_n = g->size;
  r->fast_rank = g->rank;
  char nb[32];
  wf_board_span skip = ok ? wf_fast_unshared(r, &d, bytes) : (wf_board_span){0, 0};
  const char *name = board_name(r, nb, sizeof nb);
  uint64_t h = name == r->msg.name ? r->key_hash : wf_board_hash(g->id, name);
  weft_status st = wf_board_arrive_h(w->one->board, g->id, name, h, g->rank, g->size, ok ? &d : NULL, part, bytes, skip,
                                     lock_within(w), &how, &r->fast_t);
  free(tmp);
  if (st != WEFT_OK || how == WF_BOARD_SLOW) {
    list_del(w, r);
    leave(w);
    return 0; /* the caller hands it to the engine, which arms it */
  }
  /* a round that completes here, read and folded by this thread at once,
   * needs no deadline; any other may wait (before F_PENDING publishes r to
   * the engine's scan) */
  if (how != WF_BOARD_DONE || r->fast_split || (ok && d.remote)) {
    wf_request_arm(r);
    r->fast_t0 = r->deadline - w->one->timeout_ns; /* its submission time (near enough), without another clock read */
  } else {
    r->fast_t0 = INT64_MAX / 2; /* completed below: an engine scan meanwhile must not give up on it */
  }
  /* release: publishes the ticket and times to the engine's scan and to
   * fail_all (their CASes order the rest); not seq_cst, whose exchange
   * would wait for this arrival's stores to the board to drain
   * (bench/NOTES.md, "Barriers of an arrival") */
  atomic_store_explicit(&r->fast, F_PENDING, memory_order_release);
  if (how == WF_BOARD_DONE) {
    settle(w, r, WF_BOARD_DONE);
  } else {
    /* no wake-up (it would cost the waiting ranks a core): the engine scans
     * within WF_FAST_SCAN_NS (it reads the kick before it sleeps), then
     * every WF_FAST_SCAN_NS while any is pending. A remote round, where a
     * member that does not read soon holds up the others' completions,
     * wakes it only if no scan is due that soon (seq_cst, against the
     * engine's store of its next scan and its read of the kick): in a loop
     * of them, a wake-up per scan interval instead of one per op
     * (bench/NOTES.md, "Remote rounds") */
    atomic_store(&w->one->fast_kick, 1);
    if (ok && d.remote && atomic_load(&w->one->fast_next) > wf_now_ns() + WF_FAST_SCAN_NS) wf_engine_wake(w);
  }
  leave(w);
  return 1;
}

int wf_fast_busy(weft_request *r) {
  int f = atomic_load(&r->fast);
  return f == F_PENDING || f == F_DRAIN || f == F_SPLIT;
}

void wf_fast_progress(weft_request *r, int64_t deadline, int wait) {
  weft_world *w = r->world;
  if (!wf_fast_busy(r) || !enter(w)) return;
  int64_t give_up = r->fast_t0 + w->one->fast_wait_ns, until = deadline < give_up ? deadline : give_up;
  for (;;) {
    if (atomic_load(&r->fast) == F_DRAIN) { /* the others are reading this rank's input */
      while (!drain(w, r) && wait && wf_now_ns() < deadline)
        wf_board_wait_claims(w->one->board, r->fast_t, r->fast_n, deadline);
      break;
    }
    if (atomic_load(&r->fast) == F_SPLIT) { /* slices being folded */
      for (int v; (v = split(w, r)) != 1 && wait && wf_now_ns() < deadline;) {
        uint64_t have = atomic_load(&r->split_have);
        if (v < 0 || have == wf_board_all(r->fast_n)) /* the engine's scan is at it (finishing, if it has all) */
          sched_yield();
        else wf_board_wait_slices(w->one->board, r->fast_t, r->fast_n, r->fast_rank, have, deadline);
      }
      break;
    }
    if (atomic_load(&r->fast) != F_PENDING) break;
    if (settle(w, r, wf_board_state(w->one->board, r->fast_t))) {
      int f = atomic_load(&r->fast);
      if (wait && (f == F_DRAIN || f == F_SPLIT)) continue;
      break;
    }
    if (!wait) break;
    if (!wf_board_wait(w->one->board, r->fast_t, until)) continue;
    if (wf_now_ns() >= give_up && /* not every member came in time: the coordinator takes it from here */
        settle(w, r, wf_board_divert(w->one->board, r->fast_t, deadline)) &&
        (atomic_load(&r->fast) == F_DRAIN || atomic_load(&r->fast) == F_SPLIT))
      continue; /* it completed meanwhile: a remote or split round */
    break;
  }
  leave(w);
}

/* Takes a reference on every pending fast request (under w->mu). */
static int snapshot(weft_world *w, weft_request ***out) {
  pthread_mutex_lock(&w->mu);
  int n = w->one->nfast;
  weft_request **a = n ? malloc(sizeof *a * (size_t)n) : NULL;
  if (!a) n = 0;
  for (int i = 0; i < n; i++) {
    a[i] = w->one->fast[i];
    atomic_fetch_add(&a[i]->refs, 1);
  }
  pthread_mutex_unlock(&w->mu);
  *out = a;
  return n;
}

int64_t wf_fast_scan(weft_world *w, int64_t now) {
  if (!w->one->board) return INT64_MAX;
  weft_request **a;
  int n = snapshot(w, &a);
  for (int i = 0; i < n; i++) {
    weft_request *r = a[i];
    if (atomic_load(&r->fast) == F_DRAIN) drain(w, r); /* completes it at its deadline at the latest */
    if (atomic_load(&r->fast) == F_SPLIT &&
        (now - atomic_load_explicit(&r->split_t0, memory_order_relaxed) >= SPLIT_SCAN_NS || now >= r->deadline))
      split(w, r); /* nobody waits for it (or its waiter is slow): its slices are only its own to copy */
    if (atomic_load(&r->fast) == F_PENDING) {
      int st = wf_board_state(w->one->board, r->fast_t);
      if (st == WF_BOARD_WAIT && now - r->fast_t0 >= w->one->fast_wait_ns) {
        WF_DEBUG(WF_SUB_ENGINE, "'%s': not every local rank arrived within %g s; negotiating it through the coordinator",
                 r->msg.name, w->one->fast_wait_ns / 1e9);
        st = wf_board_divert(w->one->board, r->fast_t, wf_deadline_after(1.0));
      }
      settle(w, r, st);
    }
    wf_request_unref(r);
  }
  free(a);
  pthread_mutex_lock(&w->mu);
  int left = w->one->nfast;
  pthread_mutex_unlock(&w->mu);
  return left ? now + WF_FAST_SCAN_NS : INT64_MAX;
}

void wf_fast_fail_all(weft_world *w, weft_status st, const char *msg) {
  weft_request **a;
  int n = snapshot(w, &a);
  for (int i = 0; i < n; i++) {
    weft_request *r = a[i];
    /* a round every member completed before the failure (its waiter had
     * not looked yet) completes as it would have: its inputs are in the
     * shared slot and nobody else is needed. Not a split round (the others
     * fold slices of it) nor a remote one (the inputs are the others'). */
    if (w->one->board && atomic_load(&r->fast) == F_PENDING && !r->fast_split &&
        wf_board_state(w->one->board, r->fast_t) == WF_BOARD_DONE && !wf_board_is_remote(w->one->board, r->fast_t) &&
        settle(w, r, WF_BOARD_DONE)) {
      wf_request_unref(r);
      continue;
    }
    int expect = F_PENDING;
    if (atomic_compare_exchange_strong(&r->fast, &expect, F_CLAIMED)) {
      /* its input goes back to the caller: an open round is diverted, and
       * the others must not read a remote one any more */
      if (w->one->board && wf_board_divert(w->one->board, r->fast_t, wf_deadline_after(1.0)) == WF_BOARD_DONE) {
        if (wf_board_is_remote(w->one->board, r->fast_t)) wf_board_abandon(w->one->board, r->fast_t);
        /* it reads no more: the last claim frees the round's slot */
        wf_board_claim(w->one->board, r->fast_t, r->fast_rank, WF_BOARD_WITHIN(1.0));
      }
      wf_request_complete(w, r, st, msg); /* takes it off the list */
    } else if (expect == F_DRAIN && atomic_compare_exchange_strong(&r->fast, &expect, F_CLAIMED)) {
      wf_board_abandon(w->one->board, r->fast_t); /* its input goes back to the caller: late readers must fail */
      r->algo = WF_FAST_ALGO; /* its round ran there */
      wf_request_complete(w, r, st, msg);
    } else if (expect == F_SPLIT) {
      /* a pass in another thread writes its output: wait for it to end */
      int held = 0;
      while (atomic_load(&r->fast) == F_SPLIT && !(held = !atomic_exchange(&r->split_busy, 1))) sched_yield();
      if (held && atomic_load(&r->fast) == F_SPLIT) {
        wf_board_claim(w->one->board, r->fast_t, r->fast_rank, WF_BOARD_WITHIN(1.0)); /* it reads no more */
        atomic_store(&r->fast, F_CLAIMED);
        r->algo = WF_FAST_ALGO; /* its round ran there */
        wf_request_complete(w, r, st, msg);
      }
      if (held) atomic_store(&r->split_busy, 0);
    }
    wf_request_unref(r);
  }
  free(a);
}
