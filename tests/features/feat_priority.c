/* feat_priority.c - among operations that become ready in the same
 * coordinator batch, the higher weft_op_options.priority runs first.
 *
 * Run with WEFT_CYCLE_TIME_US=1000000 (the coordinator publishes at most
 * once a second, so everything that becomes ready within a cycle is one
 * batch) and WEFT_FUSION_THRESHOLD=0 (every tensor its own collective, so
 * the order of completion callbacks - which run on the engine thread in
 * execution order - is the execution order).
 *
 * Each case first runs a warm-up allreduce: its publication starts a cycle,
 * so the case's tensors, which become ready within the next 300 ms, are
 * held and published together.
 *   1. rank 0 submits A (priority 0) then B (priority 10) at once; the other
 *      ranks submit A, wait 100 ms, then B: A is ready well before B, yet B
 *      must run first, on every rank.
 *   2. the same with equal priorities: A runs first (the readiness order is
 *      kept among equals), which shows case 1's order came from priority.
 *   3. eight operations (allreduce, broadcast, allgather) with priorities
 *      3, -5, 7, 0, 7, 100, -5, 2 submitted at once: they complete in
 *      non-increasing priority order.
 *   4. ranks disagree on a priority (rank 0 says 0, the others 10): the
 *      execution order is still the same on every rank (compared with an
 *      allgather of each rank's order). */
#include "feat_common.h"

#define MAX_OPS 16

static atomic_int g_order[MAX_OPS];
static atomic_int g_done;

static void on_done(weft_request *req, weft_status st, void *user) {
  (void)req;
  (void)st;
  int pos = atomic_fetch_add(&g_done, 1);
  if (pos < MAX_OPS) atomic_store(&g_order[pos], (int)(intptr_t)user);
}

static void reset_order(void) {
  atomic_store(&g_done, 0);
  for (int i = 0; i < MAX_OPS; i++) atomic_store(&g_order[i], -1);
}

/* Callbacks run after the request is published: wait for all n of them. */
static void wait_callbacks(int n) {
  double end = feat_now() + FEAT_WAIT_SECONDS;
  while (atomic_load(&g_done) < n) {
    if (feat_now() > end) feat_fatal("only %d of %d completion callbacks ran", atomic_load(&g_done), n);
    feat_sleep_ms(1);
  }
}

static void warm_up(int k) {
  char name[64];
  snprintf(name, sizeof name, "warmup.%d", k);
  int64_t n = 1;
  int32_t x = 1;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &n, &x);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(weft_world_group(feat_world), name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
  if (feat_wait(r, name) != WEFT_OK || x != feat_size) feat_fail("warm-up: %s, sum %d", weft_request_error(r), x);
  weft_request_free(r);
}

/* An allreduce of one float whose completion callback records id. */
static weft_request *submit_ar(const char *name, int prio, int id, int64_t *shape, float *x) {
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.priority = prio;
  o.callback = on_done;
  o.user_data = (void *)(intptr_t)id;
  weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, shape, x);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(weft_world_group(feat_world), name, &t, &t, WEFT_OP_SUM, &o, &r), &r, name);
  return r;
}

/* Cases 1 and 2: A (priority pa) ready 100 ms before B (priority pb). */
static void two(int k, int pa, int pb, int b_first) {
  feat_case("A (priority %d) ready 100 ms before B (priority %d): %s runs first", pa, pb, b_first ? "B" : "A");
  reset_order();
  warm_up(k);
  int64_t one = 1;
  float a = 1, b = 2;
  char na[32], nb[32];
  snprintf(na, sizeof na, "A.%d", k);
  snprintf(nb, sizeof nb, "B.%d", k);
  if (feat_rank != 0) feat_sleep_ms(50);
  weft_request *ra = submit_ar(na, pa, 0, &one, &a);
  if (feat_rank != 0) feat_sleep_ms(100);
  weft_request *rb = submit_ar(nb, pb, 1, &one, &b);
  feat_wait_ok(ra, na);
  feat_wait_ok(rb, nb);
  wait_callbacks(2);
  if (a != (float)feat_size || b != (float)(2 * feat_size)) feat_fail("sums: A %g B %g", a, b);
  int first = atomic_load(&g_order[0]), second = atomic_load(&g_order[1]);
  int want_first = b_first ? 1 : 0;
  if (first != want_first || second != 1 - want_first)
    feat_fail("completion order %s, %s; expected %s first", first ? "B" : "A", second ? "B" : "A",
              want_first ? "B" : "A");
  weft_request_free(ra);
  weft_request_free(rb);
  feat_case_end();
}

/* Case 3: mixed operations and priorities submitted at once. */
static void many(int k) {
  static const int prio[8] = {3, -5, 7, 0, 7, 100, -5, 2};
  feat_case("eight operations with priorities 3,-5,7,0,7,100,-5,2 complete in priority order");
  reset_order();
  warm_up(k);
  weft_group *g = weft_world_group(feat_world);
  weft_request *req[8];
  int64_t one = 1;
  float vals[8];
  int32_t bc[4];
  int64_t bshape = 4;
  float ag = (float)feat_rank;
  for (int i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "many.%d.%d", k, i);
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.priority = prio[i];
    o.callback = on_done;
    o.user_data = (void *)(intptr_t)i;
    req[i] = NULL;
    if (i == 5) { /* the top priority is a broadcast */
      for (int j = 0; j < 4; j++) bc[j] = feat_rank == 0 ? 40 + j : -1;
      weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &bshape, bc);
      feat_submitted(weft_broadcast(g, name, &t, 0, &o, &req[i]), &req[i], name);
    } else if (i == 1) { /* a low one is an allgather */
      weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &one, &ag);
      feat_submitted(weft_allgather(g, name, &t, &o, &req[i]), &req[i], name);
    } else {
      vals[i] = (float)i;
      weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &one, &vals[i]);
      feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, &o, &req[i]), &req[i], name);
    }
  }
  for (int i = 0; i < 8; i++) feat_wait_ok(req[i], "many");
  wait_callbacks(8);
  char seq[128];
  size_t n = 0;
  for (int i = 0; i < 8; i++) n += (size_t)snprintf(seq + n, sizeof seq - n, "%s%d", i ? "," : "", prio[atomic_load(&g_order[i])]);
  for (int i = 1; i < 8; i++)
    if (prio[atomic_load(&g_order[i])] > prio[atomic_load(&g_order[i - 1])]) {
      feat_fail("completion order by priority: %s (not non-increasing)", seq);
      break;
    }
  for (int i = 0; i < 8; i++)
    if (i != 1 && i != 5 && vals[i] != (float)(i * feat_size)) feat_fail("many.%d: sum %g", i, vals[i]);
  for (int j = 0; j < 4; j++)
    if (bc[j] != 40 + j) feat_fail("broadcast element %d: %d", j, bc[j]);
  weft_tensor out;
  if (weft_request_output(req[1], &out) != WEFT_OK || out.shape[0] != feat_size)
    feat_fail("allgather output: %s", weft_last_error());
  else
    for (int r = 0; r < feat_size; r++)
      if (((float *)out.data)[r] != (float)r) feat_fail("allgather element %d: %g", r, ((float *)out.data)[r]);
  for (int i = 0; i < 8; i++) weft_request_free(req[i]);
  feat_case_end();
}

/* Case 4: disagreeing priorities; every rank must execute the same order. */
static void disagree(int k) {
  feat_case("ranks disagree on B's priority: every rank runs the same order");
  reset_order();
  warm_up(k);
  int64_t one = 1;
  float x[4] = {1, 2, 3, 4};
  weft_request *r[4];
  for (int i = 0; i < 4; i++) {
    char name[32];
    snprintf(name, sizeof name, "dis.%d.%d", k, i);
    int p = i == 2 ? (feat_rank == 0 ? 0 : 10) : i;
    r[i] = submit_ar(name, p, i, &one, &x[i]);
  }
  for (int i = 0; i < 4; i++) feat_wait_ok(r[i], "disagree");
  wait_callbacks(4);
  int32_t mine[4], lo[4], hi[4];
  for (int i = 0; i < 4; i++) mine[i] = lo[i] = hi[i] = atomic_load(&g_order[i]);
  int64_t four = 4;
  weft_tensor tl = feat_tensor(WEFT_DTYPE_INT32, &four, lo), th = feat_tensor(WEFT_DTYPE_INT32, &four, hi);
  weft_request *a = NULL, *b = NULL;
  feat_submitted(weft_allreduce(weft_world_group(feat_world), "dis.min", &tl, &tl, WEFT_OP_MIN, NULL, &a), &a, "min");
  feat_submitted(weft_allreduce(weft_world_group(feat_world), "dis.max", &th, &th, WEFT_OP_MAX, NULL, &b), &b, "max");
  feat_wait_ok(a, "order min");
  feat_wait_ok(b, "order max");
  for (int i = 0; i < 4; i++)
    if (lo[i] != hi[i]) {
      feat_fail("position %d: ranks executed different tensors (%d .. %d; here %d)", i, lo[i], hi[i], mine[i]);
      break;
    }
  weft_request_free(a);
  weft_request_free(b);
  for (int i = 0; i < 4; i++) weft_request_free(r[i]);
  feat_case_end();
}

int main(void) {
  feat_setup();
  two(0, 0, 10, 1);
  two(1, 0, 0, 0);
  many(2);
  disagree(3);
  return feat_teardown();
}
