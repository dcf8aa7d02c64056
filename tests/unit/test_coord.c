/* test_coord.c - the coordinator's output side (negotiate/coord_take.c):
 *  - a lone ready tensor is not held because some unrelated tensor waits
 *    for a rank (its own first request is not "a burst arriving");
 *  - a burst's first tensor, ready while the others still get requests, is
 *    held and then fused with them as soon as they complete;
 *  - a hold ends by itself (HOLD_GAP_NS after the last request) even if the
 *    others never complete, and wf_coord_next_deadline says when;
 *  - WEFT_FUSION_PACK_MAX_BYTES: large tensors are not fused, unless the
 *    members reduce allreduces in place (wf_coord_set_unpacked_allreduce).
 * The hold is a time window: a check that needs the window open accepts a
 * response published because the machine was slow past it (sanitizers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "negotiate/coord.h"
#include "unit_check.h"
#include "util/time.h"


#define GAP_NS 100000 /* HOLD_GAP_NS of coord_impl.h */
#define THRESHOLD ((uint64_t)128 << 20)

static void add(wf_coord *c, int rank, const char *name, int64_t elems) {
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
  snprintf(m.name, sizeof m.name, "%s", name);
  wf_coord_add(c, rank, &m);
}

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

static wf_coord *make(void) {
  wf_coord *c = NULL;
  CHECK(wf_coord_create(2, NULL, 30.0, &c) == WEFT_OK && c, "wf_coord_create");
  return c;
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

static void test_lone(void) {
  wf_coord *c = make();
  char got[256];
  add(c, 0, "pending", 4); /* rank 1 never submits it here */
  sleep_ns(2 * GAP_NS);    /* its request is old news */
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
  add(c, 0, "b", 4);
  int64_t t_b = wf_now_ns();
  add(c, 1, "a", 4);
  return t_b;
}

static void test_burst(void) {
  wf_coord *c = make();
  char got[256];
  int64_t t_b = start_burst(c);
  size_t n = take(c, got, sizeof got);
  int64_t dt = wf_now_ns() - t_b;
  CHECK(n == 0 || dt >= GAP_NS, "a burst's first tensor was not held: '%s' after %lld ns", got, (long long)dt);
  if (n == 0) {
    int64_t d = wf_coord_next_deadline(c);
    CHECK(d <= t_b + GAP_NS + 1000000, "holding, but the next deadline is %lld ns away", (long long)(d - wf_now_ns()));
    add(c, 1, "b", 4); /* the burst is complete: the hold ends at once */
    n = take(c, got, sizeof got);
    CHECK(n == 1 && !strcmp(got, "a+b"), "completed burst: %zu responses '%s' (expected one, a+b)", n, got);
  }
  wf_coord_destroy(c);
}

static void test_hold_ends(void) {
  wf_coord *c = make();
  char got[256];
  start_burst(c);
  size_t n = take(c, got, sizeof got);
  if (n == 0) {
    int64_t end = wf_now_ns() + 2000000000LL;
    while (n == 0 && wf_now_ns() < end) {
      sleep_ns(GAP_NS / 4);
      n = take(c, got, sizeof got);
    }
  }
  CHECK(n == 1 && !strcmp(got, "a"), "the hold did not end without b: %zu responses '%s'", n, got);
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
  setenv("WEFT_FUSION_PACK_MAX_BYTES", "0", 1); /* no limit */
  c = make();
  n = two_large(c, got, sizeof got);
  CHECK(n == 1 && !strcmp(got, "l1+l2"), "WEFT_FUSION_PACK_MAX_BYTES=0: %zu responses '%s' (expected fused)", n, got);
  wf_coord_destroy(c);
  unsetenv("WEFT_FUSION_PACK_MAX_BYTES");
}

int main(void) {
  unsetenv("WEFT_CYCLE_TIME_US"); /* the hold is for the default, event-driven coordinator */
  unsetenv("WEFT_CYCLE_TIME_MS");
  unsetenv("WEFT_FUSION_PACK_MAX_BYTES");
  test_lone();
  test_burst();
  test_hold_ends();
  test_pack_max();
  return unit_result("test_coord");
}
