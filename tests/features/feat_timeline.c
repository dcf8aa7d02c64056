/* feat_timeline.c - produces the timelines that features.sh validates with
 * timeline_check.py, and checks the timeline API's statuses.
 *
 * Run with WEFT_TIMELINE=DIR/env.%r.json and WEFT_TIMELINE_MARK_CYCLES=1.
 *  1. under the environment's timeline: allreduce tl.ar (float32 x 1000),
 *     allgather tl.ag (float32 10x3), broadcast tl.bc (int32 x 7), barrier
 *     tl.bar, reducescatter tl.rs (float32 x 4*size), alltoall tl.a2a
 *     (int32 x 2*size), one at a time; two fusable allreduces tl.f1/tl.f2
 *     together; with 2+ ranks tl.bad, whose shape differs on the last rank
 *     (its lane must end with an error); with 3+ ranks allreduce tl.set in
 *     the process set {1, 2}, whose coordinator is rank 1 (its readiness
 *     marks must name ranks 1 and 2 by their world ranks);
 *  2. weft_timeline_start while one is being written: WEFT_ERR_MISUSE;
 *     weft_timeline_stop twice: WEFT_OK both times (idempotent);
 *  3. started at run time: DIR/rt.%r.json without cycle marks, rt.ar;
 *  4. DIR/r0only.json (no %r): only rank 0 writes it; r0.ar;
 *  5. a path in a missing directory fails (WEFT_ERR_SYSTEM) and the job goes
 *     on; NULL path: WEFT_ERR_INVALID_ARGUMENT; NULL world: WEFT_ERR_MISUSE;
 *  6. DIR/fin.%r.json started and left running: weft_finalize must close it
 *     (valid JSON).
 * After starting a timeline at run time the ranks pass a barrier before the
 * next operation: a request that reaches rank 0 before its timeline starts
 * cannot have its "rank N ready" mark recorded. */
#include "feat_common.h"

static void run_op(int kind, const char *name) {
  weft_group *g = weft_world_group(feat_world);
  weft_request *r = NULL;
  int n = feat_size;
  float f[1000];
  int32_t i32[64];
  for (int j = 0; j < 1000; j++) f[j] = (float)(feat_rank + j);
  for (int j = 0; j < 64; j++) i32[j] = feat_rank * 100 + j;
  int64_t s1000 = 1000, s7 = 7, s_ag[2] = {10, 3}, s_rs = 4 * n, s_rs_out = 4, s_a2a = 2 * n;
  switch (kind) {
    case 0: {
      weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &s1000, f);
      feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
      break;
    }
    case 1: {
      weft_tensor t = {WEFT_DTYPE_FLOAT32, 2, s_ag, f, WEFT_DEVICE_CPU, 0, NULL};
      feat_submitted(weft_allgather(g, name, &t, NULL, &r), &r, name);
      break;
    }
    case 2: {
      weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &s7, i32);
      feat_submitted(weft_broadcast(g, name, &t, 0, NULL, &r), &r, name);
      break;
    }
    case 3: feat_submitted(weft_barrier(g, name, NULL, &r), &r, name); break;
    case 4: {
      static float out[4];
      weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &s_rs, f), o = feat_tensor(WEFT_DTYPE_FLOAT32, &s_rs_out, out);
      feat_submitted(weft_reducescatter(g, name, &t, &o, WEFT_OP_SUM, NULL, &r), &r, name);
      break;
    }
    case 5: {
      weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &s_a2a, i32);
      feat_submitted(weft_alltoall(g, name, &t, NULL, NULL, &r), &r, name);
      break;
    }
    default: feat_fatal("bad op kind %d", kind);
  }
  feat_wait_ok(r, name);
  weft_request_free(r);
}

static void fused_pair(const char *a, const char *b) {
  weft_group *g = weft_world_group(feat_world);
  int64_t n1 = 100, n2 = 50;
  float x[100], y[50];
  for (int j = 0; j < 100; j++) x[j] = (float)j;
  for (int j = 0; j < 50; j++) y[j] = (float)j;
  weft_tensor t1 = feat_tensor(WEFT_DTYPE_FLOAT32, &n1, x), t2 = feat_tensor(WEFT_DTYPE_FLOAT32, &n2, y);
  weft_request *r1 = NULL, *r2 = NULL;
  feat_submitted(weft_allreduce(g, a, &t1, &t1, WEFT_OP_SUM, NULL, &r1), &r1, a);
  feat_submitted(weft_allreduce(g, b, &t2, &t2, WEFT_OP_SUM, NULL, &r2), &r2, b);
  if (feat_wait_ok(r1, a) && x[7] != (float)(7 * feat_size)) feat_fail("%s: %g", a, x[7]);
  if (feat_wait_ok(r2, b) && y[7] != (float)(7 * feat_size)) feat_fail("%s: %g", b, y[7]);
  weft_request_free(r1);
  weft_request_free(r2);
}

static void mismatched(const char *name) {
  int64_t n = feat_rank == feat_size - 1 ? 9 : 8;
  float x[9] = {0};
  weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &n, x);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(weft_world_group(feat_world), name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
  weft_status st = feat_wait(r, name);
  if (st != WEFT_ERR_MISMATCH) feat_fail("%s: expected WEFT_ERR_MISMATCH, got %s", name, weft_status_string(st));
  weft_request_free(r);
}

/* tl.set: an allreduce in the process set {1, 2} (its members only). */
static void set_op(void) {
  static const int members[2] = {1, 2};
  if (feat_rank != 1 && feat_rank != 2) return;
  weft_group *g = NULL;
  weft_status st = weft_group_create(feat_world, members, 2, &g);
  if (st != WEFT_OK) {
    feat_fail("weft_group_create {1, 2}: %s (%s)", weft_status_string(st), weft_last_error());
    return;
  }
  int64_t n = 4;
  float x[4] = {1, 2, 3, 4};
  weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &n, x);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(g, "tl.set", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "tl.set");
  if (feat_wait_ok(r, "tl.set") && x[3] != 8.0f) feat_fail("tl.set: %g, expected 8", x[3]);
  weft_request_free(r);
  st = weft_group_destroy(g);
  if (st != WEFT_OK) feat_fail("weft_group_destroy: %s (%s)", weft_status_string(st), weft_last_error());
}

static void expect_status(weft_status got, weft_status want, const char *what) {
  if (got != want)
    feat_fail("%s: got %s, expected %s (%s)", what, weft_status_string(got), weft_status_string(want), weft_last_error());
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: feat_timeline DIR (run with WEFT_TIMELINE=DIR/env.%%r.json)\n");
    return 2;
  }
  const char *dir = argv[1];
  char path[1024];
  feat_setup();

  feat_case("operations under the environment's timeline");
  static const char *const names[6] = {"tl.ar", "tl.ag", "tl.bc", "tl.bar", "tl.rs", "tl.a2a"};
  for (int k = 0; k < 6; k++) run_op(k, names[k]);
  fused_pair("tl.f1", "tl.f2");
  if (feat_size > 1) mismatched("tl.bad");
  if (feat_size > 2) set_op();
  feat_case_end();

  feat_case("start while running; stop twice");
  snprintf(path, sizeof path, "%s/second.%%r.json", dir);
  expect_status(weft_timeline_start(feat_world, path, 0), WEFT_ERR_MISUSE, "start while a timeline is written");
  expect_status(weft_timeline_stop(feat_world), WEFT_OK, "stop");
  expect_status(weft_timeline_stop(feat_world), WEFT_OK, "stop again");
  feat_case_end();

  feat_case("a timeline started at run time");
  snprintf(path, sizeof path, "%s/rt.%%r.json", dir);
  expect_status(weft_timeline_start(feat_world, path, 0), WEFT_OK, "start rt");
  feat_barrier("rt.sync"); /* every rank records the requests that follow */
  run_op(0, "rt.ar");
  expect_status(weft_timeline_stop(feat_world), WEFT_OK, "stop rt");
  feat_case_end();

  feat_case("a path without %%r: rank 0 only");
  snprintf(path, sizeof path, "%s/r0only.json", dir);
  expect_status(weft_timeline_start(feat_world, path, 1), WEFT_OK, "start r0only");
  feat_barrier("r0only.sync"); /* every rank records the requests that follow */
  run_op(0, "r0.ar");
  expect_status(weft_timeline_stop(feat_world), WEFT_OK, "stop r0only");
  feat_case_end();

  feat_case("bad paths and handles");
  snprintf(path, sizeof path, "%s/no/such/dir/x.%%r.json", dir);
  weft_status st = weft_timeline_start(feat_world, path, 0);
  if (st >= 0) feat_fail("a path in a missing directory: got %s", weft_status_string(st));
  else if (!*weft_last_error()) feat_fail("a path in a missing directory: no message");
  expect_status(weft_timeline_start(feat_world, NULL, 0), WEFT_ERR_INVALID_ARGUMENT, "NULL path");
  expect_status(weft_timeline_start(NULL, path, 0), WEFT_ERR_MISUSE, "NULL world");
  expect_status(weft_timeline_stop(NULL), WEFT_ERR_MISUSE, "stop NULL world");
  run_op(0, "after.bad.path");
  feat_case_end();

  feat_case("a timeline left running is closed by weft_finalize");
  snprintf(path, sizeof path, "%s/fin.%%r.json", dir);
  expect_status(weft_timeline_start(feat_world, path, 0), WEFT_OK, "start fin");
  feat_barrier("fin.sync"); /* every rank records the requests that follow */
  run_op(0, "fin.ar");
  feat_case_end();
  return feat_teardown();
}
