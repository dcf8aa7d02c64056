/* mp_cancel.c - weft_request_cancel (weft.h), run with WEFT_FAST=0 (every
 * operation through the coordinator) and a short WEFT_TIMEOUT_SECONDS.
 * Cases, each followed by a check that the world is healthy:
 *  - ranks 0 .. n-2 submit allreduce "c1"; after a barrier rank 0 cancels
 *    it: every one of them gets WEFT_ERR_CANCELLED "tensor 'c1': cancelled
 *    by rank 0"; then the last rank submits "c1" and gets the same at once
 *    (not a timeout); then every rank reuses "c1" and it sums right (not
 *    on one rank, where an operation completes as it is submitted);
 *  - the last rank cancels an allreduce "c2" every rank submitted, with the
 *    others possibly already agreed: either all get CANCELLED naming it, or
 *    all complete with the right sum (the race the contract allows), and the
 *    ranks agree on which;
 *  - weft_op_options.timeout_seconds (0.5 s) while the last rank submits
 *    late: TIMEOUT naming it on the others, well before the world's 30 s;
 *    the same for it when it submits; then reuse;
 *  - --aborts (own run): timeout_aborts fails the world on every rank;
 *  - cancelling a completed request and one twice (MISUSE), a NULL handle
 *    (MISUSE); a join cannot be cancelled (NOT_SUPPORTED). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.c"

static weft_request *submit_sum(const char *name, float *x, int64_t *n) {
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, n, x, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
  return r;
}

static void barrier(const char *name) {
  weft_request *r = NULL;
  mp_submitted(weft_barrier(mp_group, name, NULL, &r), &r, name);
  if (mp_wait_ok(r, name)) weft_request_free(r);
}

/* Every rank sums name: each element is the world size. */
static void sum_ok(const char *name) {
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_request *r = submit_sum(name, x, &n);
  if (!mp_wait_ok(r, name)) return;
  for (int i = 0; i < 4; i++)
    if (x[i] != (float)mp_size) mp_fail("%s: element %d is %g, want %d", name, i, x[i], mp_size);
  weft_request_free(r);
}

static void expect_cancelled(weft_request *r, const char *name, int by) {
  weft_status st = mp_wait(r, name); /* a timeout would be TIMEOUT, not CANCELLED */
  char want[128];
  snprintf(want, sizeof want, "tensor '%s': cancelled by rank %d", name, by);
  if (st != WEFT_ERR_CANCELLED || !strstr(weft_request_error(r), want))
    mp_fail("%s: %s (%s), want CANCELLED \"%s\"", name, weft_status_string(st), weft_request_error(r), want);
  weft_request_free(r);
}

static void cancel_before_all(void) {
  if (mp_size == 1) return; /* one rank: its operation completes as it is submitted */
  mp_case("cancel before every rank submitted; the late rank gets it too; then reuse");
  int last = mp_size - 1;
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_request *r = NULL;
  if (mp_rank != last) r = submit_sum("c1", x, &n);
  barrier("c1.submitted");
  if (mp_rank == 0) {
    weft_status st = weft_request_cancel(r);
    if (st != WEFT_OK) mp_fail("cancel c1: %s: %s", weft_status_string(st), weft_last_error());
  }
  if (r) expect_cancelled(r, "c1", 0);
  barrier("c1.cancelled");
  if (mp_rank == last) {
    r = submit_sum("c1", x, &n);
    expect_cancelled(r, "c1", 0);
  }
  barrier("c1.late");
  sum_ok("c1"); /* the name again: a new negotiation */
  mp_case_end();
}

static void cancel_racing(void) {
  mp_case("cancel racing with the agreement");
  int last = mp_size - 1;
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_request *r = submit_sum("c2", x, &n);
  if (mp_rank == last) {
    weft_status st = weft_request_cancel(r);
    /* done or running already: MISUSE; else asked */
    if (st != WEFT_OK && st != WEFT_ERR_MISUSE) mp_fail("cancel c2: %s: %s", weft_status_string(st), weft_last_error());
  }
  weft_status st = mp_wait(r, "c2");
  int cancelled = st == WEFT_ERR_CANCELLED;
  if (cancelled) {
    char want[64];
    snprintf(want, sizeof want, "cancelled by rank %d", last);
    if (!strstr(weft_request_error(r), want)) mp_fail("c2: \"%s\" lacks \"%s\"", weft_request_error(r), want);
  } else if (st != WEFT_OK || x[0] != (float)mp_size) {
    mp_fail("c2: %s (%s), x %g", weft_status_string(st), weft_request_error(r), x[0]);
  }
  weft_request_free(r);
  /* every rank saw the same outcome */
  int64_t one = 1;
  float c = (float)cancelled;
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &one, &c, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *q = NULL;
  mp_submitted(weft_allreduce(mp_group, "c2.outcome", &t, &t, WEFT_OP_SUM, NULL, &q), &q, "c2.outcome");
  if (mp_wait_ok(q, "c2.outcome")) {
    if (c != 0 && c != (float)mp_size) mp_fail("ranks disagree on c2: %g of %d cancelled", c, mp_size);
    weft_request_free(q);
  }
  sum_ok("c2");
  mp_case_end();
}

/* weft_op_options.timeout_seconds: the last rank submits late */
static void own_deadline(void) {
  if (mp_size == 1) return;
  mp_case("an operation's own timeout; the late rank gets it too; then reuse");
  int last = mp_size - 1;
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &n, x, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.timeout_seconds = 0.5;
  char want[96];
  snprintf(want, sizeof want, "waiting for rank(s) %d to submit it", last);
  if (mp_rank != last) {
    weft_request *r = NULL;
    double t0 = mp_now();
    mp_submitted(weft_allreduce(mp_group, "t1", &t, &t, WEFT_OP_SUM, &o, &r), &r, "t1");
    weft_status st = mp_wait(r, "t1");
    const char *msg = weft_request_error(r);
    if (st != WEFT_ERR_TIMEOUT || !strstr(msg, "tensor 't1': timed out after 0.5 s (the timeout of rank ") ||
        !strstr(msg, want))
      mp_fail("t1: %s (%s)", weft_status_string(st), msg);
    if (mp_now() - t0 > 20) mp_fail("t1 took %.1f s: not its own 0.5 s timeout", mp_now() - t0);
    weft_request_free(r);
  }
  barrier("t1.timed_out");
  if (mp_rank == last) {
    weft_request *r = submit_sum("t1", x, &n);
    weft_status st = mp_wait(r, "t1 late");
    if (st != WEFT_ERR_TIMEOUT || !strstr(weft_request_error(r), want))
      mp_fail("t1 late: %s (%s)", weft_status_string(st), weft_request_error(r));
    weft_request_free(r);
  }
  barrier("t1.late");
  sum_ok("t1");
  mp_case_end();
}

/* --aborts: rank 0's operation has timeout_aborts; the others never submit
 * it: every rank's world fails with TIMEOUT, the message saying how to
 * recover. */
static void own_deadline_aborts(void) {
  mp_case("an operation's own timeout with timeout_aborts");
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &n, x, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.timeout_seconds = 0.5;
  o.timeout_aborts = 1;
  weft_request *r = NULL;
  if (mp_rank == 0) mp_submitted(weft_allreduce(mp_group, "ta", &t, &t, WEFT_OP_SUM, &o, &r), &r, "ta");
  else mp_submitted(weft_barrier(mp_group, "never", NULL, &r), &r, "never");
  weft_status st = weft_wait(r, 25.0);
  const char *msg = weft_request_error(r);
  if (st != WEFT_ERR_TIMEOUT || !strstr(msg, "operation 'ta' timed out after 0.5 s (timeout_aborts") ||
      !strstr(msg, "weft_finalize and weft_init"))
    mp_fail("%s: %s (%s)", mp_rank == 0 ? "ta" : "never", weft_status_string(st), msg);
  if (weft_async_error(mp_world) != WEFT_ERR_TIMEOUT) mp_fail("the world did not fail with TIMEOUT");
  weft_request_free(r);
  mp_case_end();
}

static void misuse(void) {
  mp_case("what cannot be cancelled");
  int64_t n = 4;
  float x[4] = {1, 1, 1, 1};
  weft_request *r = submit_sum("c3", x, &n);
  if (mp_wait_ok(r, "c3")) {
    weft_status st = weft_request_cancel(r);
    if (st != WEFT_ERR_MISUSE || !strstr(weft_last_error(), "already complete"))
      mp_fail("cancel a complete request: %s: %s", weft_status_string(st), weft_last_error());
    weft_request_free(r);
  }
  if (weft_request_cancel(NULL) != WEFT_ERR_MISUSE) mp_fail("cancel NULL: not MISUSE");
  weft_request *j = NULL;
  mp_submitted(weft_join(mp_group, NULL, &j), &j, "join");
  weft_status st = weft_request_cancel(j);
  if (st != WEFT_ERR_NOT_SUPPORTED && st != WEFT_ERR_MISUSE) /* MISUSE: every rank joined already */
    mp_fail("cancel a join: %s: %s", weft_status_string(st), weft_last_error());
  if (mp_wait_ok(j, "join")) weft_request_free(j);
  mp_case_end();
}

int main(int argc, char **argv) {
  mp_setup();
  if (argc > 1 && !strcmp(argv[1], "--aborts")) {
    own_deadline_aborts();
    return mp_teardown();
  }
  cancel_before_all();
  own_deadline();
  cancel_racing();
  misuse();
  mp_case("the world after it all");
  sum_ok("after");
  if (weft_async_error(mp_world) != WEFT_OK) mp_fail("the world failed: %s", weft_last_error());
  mp_case_end();
  return mp_teardown();
}
