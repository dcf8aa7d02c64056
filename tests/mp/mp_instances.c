/* mp_instances.c - instances and dependencies (weft_op_options.instance_key,
 * depends_on; weft.h). Cases (2 or more ranks; WEFT_TIMEOUT_SECONDS short):
 *  - an instance sums right, and a tensor literally named "instance 42"
 *    in flight beside instance 42 is another operation; a name and an
 *    instance key together, a name starting with byte 0x01, an instance in
 *    flight twice and a dependency on itself are rejected locally;
 *  - agreement: the last rank disagrees on dtype, shape, broadcast root or
 *    collective: WEFT_ERR_MISMATCH on every rank, "instance N: mismatched
 *    ...";
 *  - order: rank 0 submits "after" (depending on instance 10) before
 *    instance 10, which it submits only 0.5 s later, while the others submit
 *    both at once: "after" is still pending then (it was not started), and
 *    on rank 0 it completes after instance 10; both sum right;
 *  - a failed dependency: instance 21 depends on instance 20, which
 *    mismatches: 21 fails on every rank with 20's status, naming it;
 *  - a missing dependency: instance 31 depends on instance 30, which no rank
 *    submits: TIMEOUT after its own 1 s, naming instance 30 and "never";
 *  - a dependency already complete: starts at once. Then the world is
 *    healthy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.c"

static weft_op_options inst(uint64_t key, const uint64_t *deps, int nd) {
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.instance_key = key;
  o.depends_on = deps;
  o.n_depends = nd;
  return o;
}

/* An allreduce (sum) of 4 ones of dtype t; name or instance key. */
static weft_status sum_submit(const char *name, const weft_op_options *o, weft_dtype t, int64_t n, void *buf,
                              weft_request **r) {
  weft_tensor x = {t, 1, &n, buf, WEFT_DEVICE_CPU, 0, NULL};
  return weft_allreduce(mp_group, name, &x, &x, WEFT_OP_SUM, o, r);
}

static int sum_right(const float *x, const char *what) {
  for (int i = 0; i < 4; i++)
    if (x[i] != (float)mp_size) return mp_fail("%s: element %d is %g, want %d", what, i, x[i], mp_size);
  return 1;
}

static void expect(weft_request *r, weft_status want, const char *text, const char *what) {
  weft_status st = mp_wait(r, what);
  if (st != want || !strstr(weft_request_error(r), text))
    mp_fail("%s: %s \"%s\", want %s with \"%s\"", what, weft_status_string(st), weft_request_error(r),
            weft_status_string(want), text);
  weft_request_free(r);
}

static void barrier(const char *name) {
  weft_request *r = NULL;
  mp_submitted(weft_barrier(mp_group, name, NULL, &r), &r, name);
  if (mp_wait_ok(r, name)) weft_request_free(r);
}

static void basics(void) {
  mp_case("an instance sums right; a tensor named 'instance 42' is another operation; local misuse");
  float a[4] = {1, 1, 1, 1}, b[4] = {1, 1, 1, 1}, c[4];
  weft_op_options o = inst(42, NULL, 0);
  weft_request *ra = NULL, *rb = NULL, *rc = NULL;
  mp_submitted(sum_submit(NULL, &o, WEFT_DTYPE_FLOAT32, 4, a, &ra), &ra, "instance 42");
  mp_submitted(sum_submit("instance 42", NULL, WEFT_DTYPE_FLOAT32, 4, b, &rb), &rb, "named 'instance 42'");
  weft_status st = sum_submit(NULL, &o, WEFT_DTYPE_FLOAT32, 4, c, &rc);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "instance 42 is already in use"))
    mp_fail("instance 42 twice in flight: %s \"%s\"", weft_status_string(st), weft_last_error());
  st = sum_submit("x", &o, WEFT_DTYPE_FLOAT32, 4, c, &rc);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "not both"))
    mp_fail("a name and an instance key: %s \"%s\"", weft_status_string(st), weft_last_error());
  st = sum_submit("\001instance 42", NULL, WEFT_DTYPE_FLOAT32, 4, c, &rc);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "reserved"))
    mp_fail("a name starting with 0x01: %s \"%s\"", weft_status_string(st), weft_last_error());
  uint64_t self = 43;
  weft_op_options os = inst(43, &self, 1);
  st = sum_submit(NULL, &os, WEFT_DTYPE_FLOAT32, 4, c, &rc);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "depends on itself"))
    mp_fail("a dependency on itself: %s \"%s\"", weft_status_string(st), weft_last_error());
  if (mp_wait_ok(ra, "instance 42")) sum_right(a, "instance 42");
  if (mp_wait_ok(rb, "named 'instance 42'")) sum_right(b, "named 'instance 42'");
  weft_request_free(ra);
  weft_request_free(rb);
  /* a dependency already complete here: starts at once */
  uint64_t d42 = 42;
  weft_op_options od = inst(44, &d42, 1);
  float x[4] = {1, 1, 1, 1};
  weft_request *r = NULL;
  mp_submitted(sum_submit(NULL, &od, WEFT_DTYPE_FLOAT32, 4, x, &r), &r, "instance 44");
  if (mp_wait_ok(r, "instance 44")) sum_right(x, "instance 44");
  weft_request_free(r);
  mp_case_end();
}

static void mismatches(void) {
  mp_case("instances disagree (dtype, shape, root, collective): MISMATCH naming the instance");
  int odd = mp_rank == mp_size - 1;
  double buf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  weft_request *r = NULL;
  weft_op_options o = inst(1001, NULL, 0);
  mp_submitted(sum_submit(NULL, &o, odd ? WEFT_DTYPE_FLOAT64 : WEFT_DTYPE_FLOAT32, 4, buf, &r), &r, "1001");
  expect(r, WEFT_ERR_MISMATCH, "instance 1001: mismatched dtypes", "dtype");
  o = inst(1002, NULL, 0);
  mp_submitted(sum_submit(NULL, &o, WEFT_DTYPE_FLOAT32, odd ? 3 : 4, buf, &r), &r, "1002");
  expect(r, WEFT_ERR_MISMATCH, "instance 1002: mismatched", "shape");
  o = inst(1003, NULL, 0);
  int64_t n = 4;
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &n, buf, WEFT_DEVICE_CPU, 0, NULL};
  mp_submitted(weft_broadcast(mp_group, NULL, &t, odd ? 1 : 0, &o, &r), &r, "1003");
  expect(r, WEFT_ERR_MISMATCH, "instance 1003: mismatched broadcast root", "root");
  o = inst(1004, NULL, 0);
  if (odd) mp_submitted(weft_allgather(mp_group, NULL, &t, &o, &r), &r, "1004");
  else mp_submitted(sum_submit(NULL, &o, WEFT_DTYPE_FLOAT32, 4, buf, &r), &r, "1004");
  expect(r, WEFT_ERR_MISMATCH, "instance 1004: mismatched operations", "collective");
  mp_case_end();
}

static atomic_int order_seq;
static atomic_int done_at[2]; /* written by the callbacks (engine thread), which run after the waits may return */
static void on_done(weft_request *r, weft_status st, void *ud) {
  (void)r, (void)st;
  atomic_store(&done_at[(intptr_t)ud], atomic_fetch_add(&order_seq, 1) + 1);
}

static void order(void) {
  mp_case("a dependent does not start before its instance completed here");
  float a[4] = {1, 1, 1, 1}, b[4] = {1, 1, 1, 1};
  uint64_t d10 = 10;
  weft_op_options o10 = inst(10, NULL, 0), oa = inst(0, &d10, 1);
  o10.callback = oa.callback = on_done;
  o10.user_data = (void *)(intptr_t)0;
  oa.user_data = (void *)(intptr_t)1;
  weft_request *r10 = NULL, *ra = NULL;
  mp_submitted(sum_submit("after", &oa, WEFT_DTYPE_FLOAT32, 4, b, &ra), &ra, "after");
  if (mp_rank == 0) {
    mp_sleep_ms(500); /* every other rank submitted both: without the dependency "after" would complete now */
    if (weft_test(ra) != WEFT_IN_PROGRESS)
      mp_fail("'after' is %s before instance 10 was submitted here", weft_status_string(weft_test(ra)));
  }
  mp_submitted(sum_submit(NULL, &o10, WEFT_DTYPE_FLOAT32, 4, a, &r10), &r10, "instance 10");
  if (mp_wait_ok(r10, "instance 10")) sum_right(a, "instance 10");
  if (mp_wait_ok(ra, "after")) sum_right(b, "after");
  for (int i = 0; i < 5000 && !(atomic_load(&done_at[0]) && atomic_load(&done_at[1])); i++) mp_sleep_ms(1);
  int d0 = atomic_load(&done_at[0]), d1 = atomic_load(&done_at[1]);
  if (!(d0 && d1 > d0)) mp_fail("completion order: instance 10 #%d, 'after' #%d", d0, d1);
  weft_request_free(r10);
  weft_request_free(ra);
  mp_case_end();
}

static void failed_dep(void) {
  mp_case("a failed dependency fails the dependent, naming it");
  int odd = mp_rank == mp_size - 1;
  double buf[4] = {1, 1, 1, 1};
  float x[4] = {1, 1, 1, 1};
  uint64_t d20 = 20;
  weft_op_options o20 = inst(20, NULL, 0), o21 = inst(21, &d20, 1);
  weft_request *r20 = NULL, *r21 = NULL;
  mp_submitted(sum_submit(NULL, &o21, WEFT_DTYPE_FLOAT32, 4, x, &r21), &r21, "instance 21");
  mp_submitted(sum_submit(NULL, &o20, odd ? WEFT_DTYPE_FLOAT64 : WEFT_DTYPE_FLOAT32, 4, buf, &r20), &r20, "20");
  expect(r20, WEFT_ERR_MISMATCH, "instance 20: mismatched dtypes", "instance 20");
  expect(r21, WEFT_ERR_MISMATCH, "instance 21: depends on instance 20, which failed", "instance 21");
  mp_case_end();
}

static void missing_dep(void) {
  mp_case("a dependency never submitted: the dependent times out at its deadline, naming it");
  float x[4] = {1, 1, 1, 1};
  uint64_t d30 = 30;
  weft_op_options o31 = inst(31, &d30, 1);
  o31.timeout_seconds = 1.0;
  weft_request *r = NULL;
  double t0 = mp_now();
  mp_submitted(sum_submit(NULL, &o31, WEFT_DTYPE_FLOAT32, 4, x, &r), &r, "instance 31");
  expect(r, WEFT_ERR_TIMEOUT, "waiting for instance 30, which it depends on, to complete (no operation", "31");
  double dt = mp_now() - t0;
  if (dt < 0.9 || dt > 8) mp_fail("instance 31 timed out after %.2f s, want about 1 s", dt);
  mp_case_end();
}

static void missing_dep_aborts(void) {
  mp_case("--aborts: a dependency's timeout with timeout_aborts fails the world");
  float x[4] = {1, 1, 1, 1};
  uint64_t d50 = 50;
  weft_op_options o = inst(51, &d50, 1);
  o.timeout_seconds = 0.5;
  o.timeout_aborts = 1;
  weft_request *r = NULL;
  mp_submitted(sum_submit(NULL, &o, WEFT_DTYPE_FLOAT32, 4, x, &r), &r, "instance 51");
  expect(r, WEFT_ERR_TIMEOUT, "instance 51: timed out after 0.5 s", "instance 51");
  weft_status st = weft_async_error(mp_world);
  if (st != WEFT_ERR_TIMEOUT || !strstr(weft_last_error(), "timeout_aborts: the world is aborted") ||
      !strstr(weft_last_error(), "waiting for instance 50"))
    mp_fail("the world: %s \"%s\", want TIMEOUT naming instance 50 and timeout_aborts", weft_status_string(st),
            weft_last_error());
  mp_case_end();
}

int main(int argc, char **argv) {
  mp_setup();
  if (argc > 1 && !strcmp(argv[1], "--aborts")) {
    missing_dep_aborts();
    return mp_teardown();
  }
  if (mp_size < 2) mp_fatal("mp_instances needs 2 or more ranks");
  basics();
  barrier("b1");
  mismatches();
  barrier("b2");
  order();
  barrier("b3");
  failed_dep();
  barrier("b4");
  missing_dep();
  mp_case("the world after it all");
  float x[4] = {1, 1, 1, 1};
  weft_request *r = NULL;
  mp_submitted(sum_submit("final", NULL, WEFT_DTYPE_FLOAT32, 4, x, &r), &r, "final");
  if (mp_wait_ok(r, "final")) sum_right(x, "final");
  weft_request_free(r);
  if (weft_async_error(mp_world) != WEFT_OK) mp_fail("the world failed: %s", weft_last_error());
  mp_case_end();
  return mp_teardown();
}
