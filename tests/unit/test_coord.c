/* test_coord.c - the coordinator's output side (negotiate/coord_take.c):
 *  - a lone ready tensor is not held because some unrelated tensor waits
 *    for a rank (its own first request is not "a burst arriving");
 *  - a burst's first tensor, ready while the others still get requests, is
 *    held and then fused with them as soon as they complete;
 *  - a hold ends by itself (HOLD_GAP_NS after the last request) even if the
 *    others never complete, and wf_coord_next_deadline says when;
 *  - WEFT_FUSION_PACK_MAX_BYTES: large tensors are not fused, unless the
 *    members reduce allreduces in place (wf_coord_set_unpacked_allreduce);
 *  - grouped ops (coord_unit.c): a grouped op's ready tensors are held
 *    until every tensor of it is in, then published together in order
 *    (one fused response); an error (a mismatch) goes out at once and
 *    counts; ranks that disagree on the op's size get "mismatched grouped
 *    ops"; a unit left holding only errors is dropped after the timeout;
 *  - the stall report and the timeout name the ranks that have not
 *    submitted a tensor, not those that joined (they stand in for it);
 *    WEFT_STALL_CHECK_DISABLE turns off the stall shutdown too;
 *  - permute (validate.c): a perm that is no permutation (out of range, a
 *    rank twice) is an error naming the rank and the entries, even from a
 *    peer that skipped the API's check; perms that differ name both ranks
 *    and the first differing index; agreed, the response carries the perm.
 * Time is the test's own (wf_coord_set_clock): it steps a clock the
 * coordinator reads instead of sleeping, so every check of a time window
 * runs, to the nanosecond, however slow or loaded the machine is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord.h"
#include "negotiate/coord_impl.h" /* units: how many the coordinator keeps */
#include "unit_check.h"


#define GAP_NS HOLD_GAP_NS
#define THRESHOLD ((uint64_t)128 << 20)

/* The coordinators' clock: moves only when a test moves it. */
static int64_t g_now = 1000000000;
static int64_t test_clock(void *ctx) {
  (void)ctx;
  return g_now;
}

/* The settings the coordinators below are made with (the world's, in weft):
 * the defaults, changed by a test and put back (reset_settings). */
static wf_settings g_set;
static void reset_settings(void) { g_set = *wf_settings_default(); }

/* A coordinator of size ranks on the test's clock. */
static wf_coord *make_on_clock(int size, double timeout) {
  wf_coord *c = NULL;
  CHECK(wf_coord_create_with(size, NULL, timeout, &g_set, &c) == WEFT_OK && c, "wf_coord_create");
  if (c) wf_coord_set_clock(c, test_clock, NULL);
  return c;
}

/* rank's allreduce request for name (unit: its grouped op's size, or 0). */
static void add_unit(wf_coord *c, int rank, const char *name, int64_t elems, uint32_t unit) {
  wf_request_msg m;
  memset(&m, 0, sizeof m);
  m.coll = WF_COLL_ALLREDUCE;
  m.dtype = WEFT_DTYPE_FLOAT32;
  m.reduce_op = WEFT_OP_SUM;
  m.ndim = 1;
  m.root = -1;
  m.device = WEFT_DEVICE_CPU;
  m.prescale = m.postscale = 1.0;
  m.shape[0] = elems;
  m.unit = unit;
  snprintf(m.name, sizeof m.name, "%s", name);
  wf_coord_add(c, rank, &m);
}

static void add(wf_coord *c, int rank, const char *name, int64_t elems) { add_unit(c, rank, name, elems, 0); }

/* Takes the ready responses: how many, and their names joined by '+'
 * (responses separated by ' '). */
static size_t take(wf_coord *c, char *names, size_t cap) {
  wf_response_msg *r;
  size_t n = wf_coord_take(c, THRESHOLD, &r), k = 0;
  names[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    for (uint32_t j = 0; j < r[i].nnames && k < cap; j++)
      k += (size_t)snprintf(names + k, cap - k, "%s%s", j ? "+" : (i ? " " : ""), r[i].names[j]);
    wf_response_msg_free(&r[i]);
  }
  free(r);
  return n;
}

static wf_coord *make(void) { return make_on_clock(2, 30.0); }

static void test_lone(void) {
  wf_coord *c = make();
  char got[256];
  add(c, 0, "pending", 4); /* rank 1 never submits it here */
  g_now += 2 * GAP_NS;     /* its request is old news */
  add(c, 0, "x", 4);
  add(c, 1, "x", 4);
  size_t n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "x"), "lone tensor beside an old pending one: %zu responses '%s' (held?)", n, got);
  wf_coord_destroy(c);
}

/* A burst of a and b: rank 0 submits both, rank 1 only a so far (a is
 * ready alone while b just got a request). Returns when b's request came. */
static int64_t start_burst(wf_coord *c) {
  add(c, 0, "a", 4);
  g_now += 10;
  add(c, 0, "b", 4);
  int64_t t_b = g_now;
  g_now += 10;
  add(c, 1, "a", 4);
  return t_b;
}

static void test_burst(void) {
  wf_coord *c = make();
  char got[256];
  int64_t t_b = start_burst(c);
  size_t n = take(c, got, sizeof got);
  CHECK(n == 0, "a burst's first tensor was not held: %zu responses '%s' %lld ns after b's request", n, got,
        (long long)(g_now - t_b));
  int64_t d = wf_coord_next_deadline(c);
  CHECK(d == t_b + GAP_NS, "holding, but the next deadline is %lld ns after b's request, not %lld", (long long)(d - t_b),
        (long long)GAP_NS);
  g_now = t_b + GAP_NS - 1; /* the last nanosecond of the hold */
  n = take(c, got, sizeof got);
  CHECK(n == 0, "the hold ended 1 ns early: %zu responses '%s'", n, got);
  add(c, 1, "b", 4); /* the burst is complete: the hold ends at once */
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "a+b"), "completed burst: %zu responses '%s' (expected one, a+b)", n, got);
  wf_coord_destroy(c);
}

static void test_hold_ends(void) {
  wf_coord *c = make();
  char got[256];
  int64_t t_b = start_burst(c);
  size_t n = take(c, got, sizeof got);
  CHECK(n == 0, "a burst's first tensor was not held: %zu responses '%s'", n, got);
  g_now = t_b + GAP_NS - 1;
  n = take(c, got, sizeof got);
  CHECK(n == 0, "the hold ended 1 ns early: %zu responses '%s'", n, got);
  g_now = t_b + GAP_NS;
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "a"), "the hold did not end without b: %zu responses '%s'", n, got);
  wf_coord_destroy(c);
}

/* Requests that keep arriving (each for a new tensor that waits for rank 1)
 * extend the hold, up to HOLD_MAX_NS after the first response became ready. */
static void test_hold_max(void) {
  wf_coord *c = make();
  char got[256];
  start_burst(c);
  int64_t t_ready = g_now; /* a became ready at the last request of start_burst */
  size_t n = 0;
  for (int i = 0; g_now + GAP_NS / 2 < t_ready + HOLD_MAX_NS; i++) {
    g_now += GAP_NS / 2;
    char nm[16];
    snprintf(nm, sizeof nm, "more.%d", i);
    add(c, 0, nm, 4);
    n = take(c, got, sizeof got);
    CHECK(n == 0, "the hold ended %lld ns after a was ready while requests still arrived: '%s'",
          (long long)(g_now - t_ready), got);
    if (n) break;
  }
  g_now = t_ready + HOLD_MAX_NS - 1;
  n = take(c, got, sizeof got);
  CHECK(n == 0, "the hold ended 1 ns before HOLD_MAX_NS: '%s'", got);
  g_now = t_ready + HOLD_MAX_NS;
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "a"), "the hold did not end at HOLD_MAX_NS: %zu responses '%s'", n, got);
  wf_coord_destroy(c);
}

/* Two tensors of 2 MiB each, ready together. */
static size_t two_large(wf_coord *c, char *got, size_t cap) {
  add(c, 0, "l1", 1 << 19);
  add(c, 0, "l2", 1 << 19);
  add(c, 1, "l1", 1 << 19);
  add(c, 1, "l2", 1 << 19);
  return take(c, got, cap);
}

static void test_pack_max(void) {
  char got[256];
  wf_coord *c = make();
  size_t n = two_large(c, got, sizeof got);
  CHECK(n == 2 && !strcmp(got, "l1 l2"), "2 MiB tensors where fusing packs: %zu responses '%s' (expected alone)", n,
        got);
  wf_coord_destroy(c);
  c = make();
  wf_coord_set_unpacked_allreduce(c);
  n = two_large(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "l1+l2"), "2 MiB tensors fused in place: %zu responses '%s' (expected fused)", n, got);
  wf_coord_destroy(c);
  g_set.fusion_pack_max_bytes = 0; /* no limit */
  c = make();
  n = two_large(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "l1+l2"), "WEFT_FUSION_PACK_MAX_BYTES=0: %zu responses '%s' (expected fused)", n, got);
  wf_coord_destroy(c);
  reset_settings();
}

/* The error response's message (empty if none or not an error). */
static void take_error(wf_coord *c, char *err, size_t cap) {
  wf_response_msg *r;
  size_t n = wf_coord_take(c, THRESHOLD, &r);
  err[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (r[i].type == WF_RESP_ERROR && r[i].error) snprintf(err, cap, "%s", r[i].error);
    wf_response_msg_free(&r[i]);
  }
  free(r);
}

static void test_units(void) {
  char got[256];
  wf_coord *c = make();
  /* g.1 and g.2 ready on both ranks (they came first: say, from the cache),
   * g.0 not yet: nothing goes out */
  for (int r = 0; r < 2; r++) {
    add_unit(c, r, "g.1", 4, 3);
    add_unit(c, r, "g.2", 4, 3);
  }
  size_t n = take(c, got, sizeof got);
  CHECK(n == 0, "grouped op: %zu responses '%s' published before its tensor g.0 arrived", n, got);
  add_unit(c, 0, "g.0", 4, 3);
  n = take(c, got, sizeof got);
  CHECK(n == 0, "grouped op: %zu responses '%s' published before g.0 was ready", n, got);
  add_unit(c, 1, "g.0", 4, 3);
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "g.0+g.1+g.2"), "grouped op: %zu responses '%s', expected g.0+g.1+g.2", n, got);
  CHECK(c->units.len == 0, "grouped op: %zu units kept after publishing", c->units.len);
  /* an error goes out at once; the rest when in */
  add_unit(c, 0, "h.1", 4, 2);
  add_unit(c, 1, "h.1", 8, 2);
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "h.1"), "grouped op with a mismatch: %zu responses '%s', expected h.1's error", n, got);
  add_unit(c, 0, "h.0", 4, 2);
  add_unit(c, 1, "h.0", 4, 2);
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "h.0"), "grouped op after a mismatch: %zu responses '%s', expected h.0", n, got);
  /* ranks disagree on the op's size: an error naming both */
  char err[512];
  add_unit(c, 0, "u.0", 4, 2);
  add_unit(c, 1, "u.0", 4, 3);
  take_error(c, err, sizeof err);
  CHECK(strstr(err, "mismatched grouped ops") && strstr(err, "rank 0 submitted it in a grouped op of 2 tensors") &&
            strstr(err, "rank 1 in a grouped op of 3 tensors"),
        "grouped ops of 2 and 3 tensors: error '%s'", err);
  add_unit(c, 0, "v.0", 4, 0);
  add_unit(c, 1, "v.0", 4, 2);
  take_error(c, err, sizeof err);
  CHECK(strstr(err, "rank 0 submitted it as a tensor of its own, rank 1 in a grouped op of 2 tensors"),
        "a tensor of its own and a grouped op's: error '%s'", err);
  wf_coord_destroy(c);
  /* a failed op leaves a partial unit behind (ranks disagreed: 2 and 3
   * tensors; w.2 times out); the next op of that name, agreed, still runs
   * whole (a review found it held forever: its tensors counted into the
   * leftover unit) */
  c = make_on_clock(2, 0.05);
  add_unit(c, 0, "w.0", 4, 2);
  add_unit(c, 0, "w.1", 4, 2);
  for (int i = 0; i < 3; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "w.%d", i);
    add_unit(c, 1, nm, 4, 3);
  }
  take_error(c, err, sizeof err);
  g_now += 80000000;
  wf_coord_check_timeouts(c, g_now); /* w.2: rank 0 never sends it */
  take(c, got, sizeof got);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 3; i++) {
      char nm[16];
      snprintf(nm, sizeof nm, "w.%d", i);
      add_unit(c, r, nm, 4, 3);
    }
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "w.0+w.1+w.2"), "grouped op after a failed one of its name: %zu responses '%s'", n, got);
  /* a unit whose other tensors never come goes out as it is after the
   * timeout, with no table entry left to time out (nothing held forever) */
  add_unit(c, 0, "x.0", 4, 2);
  add_unit(c, 1, "x.0", 4, 2);
  n = take(c, got, sizeof got);
  CHECK(n == 0, "x.0 published without x.1: '%s'", got);
  CHECK(wf_coord_next_deadline(c) != INT64_MAX, "no deadline while a unit holds a response");
  g_now += 49000000; /* not yet idle for the timeout (0.05 s) */
  wf_coord_check_timeouts(c, g_now);
  n = take(c, got, sizeof got);
  CHECK(n == 0, "a unit published after 49 ms idle, before the timeout: '%s'", got);
  g_now += 31000000;
  wf_coord_check_timeouts(c, g_now);
  n = take(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "x.0"), "a unit idle past the timeout: %zu responses '%s', expected x.0", n, got);
  CHECK(c->units.len == 0, "%zu units kept past the timeout", c->units.len);
  wf_coord_destroy(c);
}

static char g_report[1024];
static void on_stall(void *ctx, const char *report, const uint8_t *submitted) {
  (void)ctx;
  (void)submitted;
  snprintf(g_report, sizeof g_report, "%s", report);
}

/* 3 ranks; rank 2 joined, rank 0 submitted "t", rank 1 not: the report and
 * the timeout name rank 1 alone. */
static void test_stall_joined(void) {
  g_set.stall_check_seconds = 0.02;
  wf_coord *c = make_on_clock(3, 0.2);
  wf_coord_set_stall_handler(c, on_stall, NULL);
  wf_request_msg j;
  memset(&j, 0, sizeof j);
  j.coll = WF_COLL_JOIN;
  j.root = -1;
  j.prescale = j.postscale = 1.0;
  snprintf(j.name, sizeof j.name, "weft.join");
  wf_coord_add(c, 2, &j);
  add(c, 0, "t", 4);
  g_now += 10000000; /* before the first report is due (0.02 s) */
  g_report[0] = '\0';
  wf_coord_check_timeouts(c, g_now);
  CHECK(!g_report[0], "a stall report 10 ms after the request, before the 20 ms check: '%s'", g_report);
  g_now += 30000000;
  wf_coord_check_timeouts(c, g_now);
  CHECK(strstr(g_report, "waiting for rank(s) 1 to submit"), "stall report with rank 2 joined: '%s'", g_report);
  g_now += 200000000;
  wf_coord_check_timeouts(c, g_now);
  char err[512];
  take_error(c, err, sizeof err);
  CHECK(strstr(err, "waiting for rank(s) 1 to submit"), "timeout with rank 2 joined: '%s'", err);
  wf_coord_destroy(c);
  reset_settings();
  /* disabled: no stall shutdown either (the timeout stays the operation's) */
  g_set.stall_check_disable = 1;
  g_set.stall_shutdown_seconds = 0.01;
  c = make_on_clock(2, 30.0);
  add(c, 0, "s", 4);
  g_now += 30000000;
  wf_coord_check_timeouts(c, g_now);
  take_error(c, err, sizeof err);
  CHECK(!err[0], "WEFT_STALL_CHECK_DISABLE=1 with a stall shutdown: '%s'", err);
  wf_coord_destroy(c);
  reset_settings();
}

/* rank's permute request for name with perm (3 entries). */
static void add_permute(wf_coord *c, int rank, const char *name, const int64_t *perm) {
  wf_request_msg m;
  memset(&m, 0, sizeof m);
  m.coll = WF_COLL_PERMUTE;
  m.dtype = WEFT_DTYPE_INT32;
  m.ndim = 1;
  m.root = -1;
  m.device = WEFT_DEVICE_CPU;
  m.prescale = m.postscale = 1.0;
  m.shape[0] = 5;
  m.nsplits = 3;
  m.splits = (int64_t *)perm;
  snprintf(m.name, sizeof m.name, "%s", name);
  wf_coord_add(c, rank, &m);
}

static void test_permute(void) {
  static const int64_t cycle[3] = {1, 2, 0}, twice[3] = {0, 0, 2}, range[3] = {0, 3, 1}, swap[3] = {1, 0, 2};
  char err[512];
  const int64_t *bad[2] = {twice, range};
  const char *want[2] = {"tensor 'p.bad': rank 1 passed no permutation of 0..2: perm[0] and perm[1] are both 0",
                         "tensor 'p.bad': rank 1 passed no permutation of 0..2: perm[1] = 3 is out of range"};
  for (int k = 0; k < 2; k++) {
    wf_coord *c = make_on_clock(3, 30.0);
    add_permute(c, 0, "p.bad", cycle);
    add_permute(c, 1, "p.bad", bad[k]);
    add_permute(c, 2, "p.bad", cycle);
    take_error(c, err, sizeof err);
    CHECK(strstr(err, want[k]), "permute, rank 1 no permutation: error '%s', expected '%s'", err, want[k]);
    wf_coord_destroy(c);
  }
  wf_coord *c = make_on_clock(3, 30.0);
  add_permute(c, 0, "p.mis", cycle);
  add_permute(c, 1, "p.mis", cycle);
  add_permute(c, 2, "p.mis", swap);
  take_error(c, err, sizeof err);
  CHECK(strstr(err, "tensor 'p.mis': mismatched permutations: rank 0 has perm[1] = 2, rank 2 has perm[1] = 0 (the first "
                    "difference)"),
        "permute, perms differ: error '%s'", err);
  for (int r = 0; r < 3; r++) add_permute(c, r, "p.ok", cycle);
  wf_response_msg *resp;
  size_t n = wf_coord_take(c, THRESHOLD, &resp);
  CHECK(n == 1 && resp[0].type == WF_RESP_OK && resp[0].nsizes == 3 && resp[0].sizes[0] == 1 && resp[0].sizes[1] == 2 &&
            resp[0].sizes[2] == 0,
        "permute agreed: %zu responses, the first %s with %u sizes", n,
        n && resp[0].type == WF_RESP_OK ? "OK" : "not OK", n ? resp[0].nsizes : 0);
  for (size_t i = 0; i < n; i++) wf_response_msg_free(&resp[i]);
  free(resp);
  wf_coord_destroy(c);
}

int main(void) {
  reset_settings(); /* the defaults: the hold is for the default, event-driven coordinator */
  test_lone();
  test_burst();
  test_hold_ends();
  test_hold_max();
  test_pack_max();
  test_units();
  test_stall_joined();
  test_permute();
  return unit_result("test_coord");
}
