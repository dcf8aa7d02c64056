/* mp_fault.c - a rank dies by SIGKILL in the middle of a large allreduce;
 * the survivors must not hang: the allreduce (or, if it finished before the
 * kill, the next collective) fails within 10 s of its submission with a
 * message naming the dead rank ("rank K"), weft_async_error reports it, a
 * later collective fails too instead of blocking, finalize returns within
 * 2 s, and the survivors exit 0.
 *
 * Usage (under weftrun -np N, N >= 2): mp_fault [--killer K] [--mib M]
 * (default: rank 1 dies during a 64 MiB float32 allreduce).
 *
 * weftrun stops the whole job as soon as one of its ranks dies, which would
 * cut the survivors short before their verdict. So every rank forks first:
 * the weft rank runs in the child, and the process weftrun started only
 * waits for it. The killer's parent exits 0 when its child died of SIGKILL
 * after announcing it (through a pipe); every other outcome passes the
 * child's failure on. The survivors' verdicts thus decide the job's exit
 * status, and the library sees a real SIGKILLed peer. */
#include "mp_harness.c"

static int g_killer = 1;
static size_t g_mib = 64;

/* Submits the large allreduce every rank submits. */
static weft_status big_allreduce(float *buf, size_t n, weft_request **req) {
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  *req = NULL;
  return weft_allreduce(mp_group, "fault.big", &t, &t, WEFT_OP_SUM, NULL, req);
}

/* Waits for req, which must fail naming the dead rank within `bound`
 * seconds of t0. Returns 1 if it did; *completed says it succeeded instead. */
static int expect_peer_failure(weft_request *req, double t0, double bound, const char *dead, int *completed) {
  weft_status st = weft_wait(req, bound + 2.0);
  double dt = mp_now() - t0;
  *completed = st == WEFT_OK;
  if (st == WEFT_OK) return 0;
  if (st == WEFT_IN_PROGRESS) return mp_fail("no error %.1f s after the kill: hung", dt);
  if (st > 0) return mp_fail("weft_wait returned %d", (int)st);
  const char *msg = weft_request_error(req);
  mp_say("INFO rank %d: failed after %.2f s with %s: %s", mp_rank, dt, weft_status_string(st), msg);
  if (dt > bound) mp_fail("the error came %.2f s after submission (bound %.0f s)", dt, bound);
  if (!mp_contains(msg, dead)) mp_fail("message \"%s\" does not name %s", msg, dead);
  return 1;
}

static int run_rank(void) {
  mp_setup();
  if (mp_size < 2) {
    mp_case("fault test");
    mp_fail("needs at least 2 ranks");
    return mp_teardown();
  }
  if (g_killer < 0 || g_killer >= mp_size) g_killer = mp_size - 1;
  char dead[32];
  snprintf(dead, sizeof dead, "rank %d", g_killer);

  /* Warm-up: every connection is up and the job is healthy. */
  mp_case("warm-up allreduce");
  if (!mp_same_everywhere("fault.warmup", 0x5eed)) mp_fatal("warm-up failed");
  mp_case_end();

  size_t n = g_mib * 1024 * 1024 / 4;
  float *buf = mp_alloc(n * 4);
  for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
  /* Everyone is ready: the allreduce starts at about the same time on every
   * rank, so the kill lands in its middle. */
  mp_case("ready");
  if (!mp_same_everywhere("fault.ready", 0x600d)) mp_fatal("sync before the allreduce failed");

  if (mp_rank == g_killer) {
    mp_case("rank %d: SIGKILL during a %zu MiB allreduce", mp_rank, g_mib);
    weft_request *req;
    weft_status st = big_allreduce(buf, n, &req);
    if (st != WEFT_OK) mp_fatal("submitting fault.big: %s", weft_status_string(st));
    mp_sleep_ms(50);
    mp_say("INFO rank %d: raising SIGKILL", mp_rank);
    mp_die_by_sigkill();
  }

  mp_case("survivor: %zu MiB allreduce fails naming %s within 10 s", g_mib, dead);
  double t0 = mp_now();
  weft_request *req;
  weft_status st = big_allreduce(buf, n, &req);
  int completed = 0, failed = 0;
  if (st == WEFT_OK) {
    failed = expect_peer_failure(req, t0, 10.0, dead, &completed);
    weft_request_free(req);
  } else if (!mp_contains(weft_last_error(), dead)) {
    /* Rejected at submission: fine if the death was already known. */
    mp_fail("submission rejected (%s) with \"%s\", which does not name %s", weft_status_string(st), weft_last_error(),
            dead);
  } else {
    mp_say("INFO rank %d: submission rejected, the death was already known: %s", mp_rank, weft_last_error());
    failed = 1;
  }
  if (completed) {
    /* The allreduce beat the kill: then it has the whole sum (every rank
     * gave 1.0), and the next collective cannot complete. */
    for (size_t i = 0; i < n; i++)
      if (buf[i] != (float)mp_size) {
        mp_fail("the allreduce completed, but element %zu is %g, not %d", i, buf[i], mp_size);
        break;
      }
    mp_say("INFO rank %d: the allreduce completed before the kill; checking the next collective", mp_rank);
    weft_request *next = NULL;
    st = weft_barrier(mp_group, "fault.next", NULL, &next);
    if (st == WEFT_OK) {
      failed = expect_peer_failure(next, t0, 10.0, dead, &completed);
      if (completed) mp_fail("a barrier with a dead rank completed");
      weft_request_free(next);
    } else if (!mp_contains(weft_last_error(), dead)) {
      mp_fail("barrier rejected with \"%s\", which does not name %s", weft_last_error(), dead);
    } else {
      failed = 1;
    }
  }
  (void)failed;
  mp_case_end();

  mp_case("survivor: the world reports the failure and stays failed");
  st = weft_async_error(mp_world);
  if (st >= 0)
    mp_fail("weft_async_error is %s after a peer died", weft_status_string(st));
  else if (!mp_contains(weft_last_error(), dead))
    mp_fail("weft_async_error's message \"%s\" does not name %s", weft_last_error(), dead);
  weft_request *later = NULL;
  st = weft_barrier(mp_group, "fault.later", NULL, &later);
  if (st == WEFT_OK) {
    st = weft_wait(later, 10.0);
    if (st >= 0) mp_fail("a barrier after the failure: %s, expected an error within 10 s", weft_status_string(st));
    weft_request_free(later);
  }
  mp_case_end();

  free(buf);
  mp_case("survivor: weft_finalize within 2 s with a dead peer");
  mp_finalize_within(2.0);
  mp_case_end();
  return mp_exit_status();
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--killer"))
      g_killer = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mib"))
      g_mib = strtoull(argv[i + 1], NULL, 0);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return mp_supervised(run_rank);
}
