/* fault_peers.c - the fault matrix's peer failures, one rank program run
 * under weftrun (or by hand for the partition case): `fault_peers CASE
 * [options]`. Each case states its bound, measures the detection time
 * against a time stamp written by whoever caused the fault (all processes
 * share CLOCK_MONOTONIC), and writes PASS/FAIL/MEASURE lines to
 * $FAULT_DIR/verdict.<rank>, which fault_test.sh checks. T is the
 * heartbeat timeout + 1 s.
 *
 *  sigkill      (item 1)  np 3: rank 1 is SIGKILLed in a 64 MiB allreduce;
 *               survivors fail PEER_LOST naming "rank 1" within T; later
 *               work fails too; finalize < 1 s; no fd, thread, child or
 *               /dev/shm entry is left behind.
 *  sigstop      (item 2)  np 3: rank 0 SIGSTOPs rank 1 in a 64 MiB
 *               allreduce; survivors fail "unresponsive" (not "closed its
 *               connection") naming rank 1 within T. Then rank 1 gets
 *               SIGCONT and must fail within T too. --peers stay: the
 *               survivors keep their (failed) world open until rank 1
 *               has reported; --peers exit: they finalize first.
 *  coordkill    (item 3)  np 3: rank 0 is SIGKILLed while ranks 1 and 2
 *               negotiate two tensors it never submits; both fail naming
 *               rank 0 within T.
 *  inflight     (item 13) np 3: finalize with unmatched requests in flight
 *               returns < 1 s; they end WEFT_ERR_SHUTDOWN with a message;
 *               finalizing NULL or a foreign handle is WEFT_ERR_MISUSE.
 *  finalize_dead    (13)  np 3: rank 2 SIGKILLed in a 64 MiB allreduce; the
 *               others finalize at once: < 1 s.
 *  finalize_stopped (13)  np 3: rank 2 SIGSTOPped in a 64 MiB allreduce (the
 *               senders' buffers fill); the others finalize: < 1 s; rank 2,
 *               resumed, fails within T and finalizes < 1 s.
 *  abort        (item 13) np 3: rank 1 aborts while ranks 0 and 2 wait on
 *               work it never joins: every pending and later request fails
 *               WEFT_ERR_ABORTED "aborted" within T on every rank; a second
 *               abort changes nothing.
 *  loop         (item 15) every rank allreduces in a loop; --die kill|exit:
 *               rank 1 SIGKILLs itself / exits 3 after 0.3 s; the others
 *               exit 5 when their collective fails (weftrun must report
 *               the first failure, not theirs). Pid files: pid.<rank>;
 *               rank 0 writes the job id (jobid) for the /dev/shm check.
 *  partition    (item 11) np 2, run by hand in two network namespaces: the
 *               ranks allreduce in a loop until the script takes the link
 *               down (it writes t_down); both fail "unresponsive" naming
 *               the other within T. */
#include "fault_rank_util.h"

#define BIG_MIB 64

/* The large allreduce buffer: freed only after weft_finalize, since a
 * request that hung (a failed test) may still use it until then. */
static float *g_big;
static size_t g_big_n;

static void big_alloc(void) {
  g_big_n = (size_t)BIG_MIB * 1024 * 1024 / sizeof(float);
  g_big = malloc(g_big_n * sizeof(float));
  if (!g_big) fr_fatal("out of memory for the %d MiB buffer", BIG_MIB);
  for (size_t i = 0; i < g_big_n; i++) g_big[i] = 1.0f;
}

static weft_request *big_submit(const char *name) {
  int64_t shape[1] = {(int64_t)g_big_n};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, g_big, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &req);
  if (st != WEFT_OK) fr_fatal("submitting %s: %s: %s", name, weft_status_string(st), weft_last_error());
  return req;
}

static void barrier_ok(const char *name) {
  weft_request *req = NULL;
  weft_status st = weft_barrier(G, name, NULL, &req);
  if (st == WEFT_OK) st = fr_wait(req, 30, name);
  if (st != WEFT_OK)
    fr_fatal("barrier %s: %s: %s", name, weft_status_string(st), req ? weft_request_error(req) : weft_last_error());
  weft_request_free(req);
}

/* The outcome of an operation that must fail. */
typedef struct outcome {
  weft_status st;
  double t; /* fx_now() when it completed (or was rejected) */
  char msg[1024];
} outcome;

/* Waits for req (at most `limit` s), records its outcome, frees it. */
static outcome finish(weft_request *req, double limit, const char *what) {
  outcome o;
  o.st = fr_wait(req, limit, what);
  o.t = fx_now();
  snprintf(o.msg, sizeof o.msg, "%s", weft_request_error(req));
  weft_request_free(req);
  fx_info("%s ended %s after the wait: \"%s\"", what, weft_status_string(o.st), o.msg);
  return o;
}

/* A barrier submitted after a failure: rejected at once or failed within
 * 1 s, never completed. Returns its outcome. */
static outcome later_barrier(const char *name) {
  weft_request *req = NULL;
  double t0 = fx_now();
  weft_status st = weft_barrier(G, name, NULL, &req);
  outcome o = {st, fx_now(), ""};
  if (st == WEFT_OK) {
    o = finish(req, 5, name);
  } else {
    snprintf(o.msg, sizeof o.msg, "%s", weft_last_error());
  }
  if (o.st >= 0)
    fx_fail("%s after the failure: %s, expected an error", name, weft_status_string(o.st));
  else if (o.t - t0 > 1.0)
    fx_fail("%s after the failure took %.2f s to fail", name, o.t - t0);
  return o;
}

/* Checks the failure of a survivor: status, the rank named, the time. */
static void check_failure(const outcome *o, weft_status want, int dead, double t_event, const char *what) {
  if (o->st != want)
    fx_fail("%s: status %s, expected %s (\"%s\")", what, weft_status_string(o->st), weft_status_string(want), o->msg);
  if (!fx_names_rank(o->msg, dead)) fx_fail("%s: message \"%s\" does not name rank %d", what, o->msg, dead);
  fx_measure(ITEM, what, T, t_event >= 0 ? o->t - t_event : -1);
}

static void check_async(weft_status want, int dead) {
  weft_status st = weft_async_error(W);
  if (st != want)
    fx_fail("weft_async_error is %s, expected %s", weft_status_string(st), weft_status_string(want));
  else if (!fx_names_rank(weft_last_error(), dead))
    fx_fail("weft_async_error's message \"%s\" does not name rank %d", weft_last_error(), dead);
}

/* ------------------------------------------------------------ item 1 */
static int case_sigkill(void) {
  const int victim = 1;
  fr_maybe_fork_victim(victim);
  fx_threads_settle();
  int fds0 = fx_count_fds(), thr0 = fx_count_threads(), kids0 = fx_count_children();
  char shm0[16384];
  fx_shm_snapshot(shm0, sizeof shm0);
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  if (!fr_allreduce_ok("warmup", 1000)) fr_fatal("warm-up allreduce failed");
  big_alloc();
  barrier_ok("ready");
  if (R == victim) {
    weft_request *req = big_submit("big");
    (void)req;
    fx_sleep(0.05);
    fr_die("t_kill");
  }
  outcome o = finish(big_submit("big"), T + 10, "big allreduce");
  if (o.st == WEFT_OK) { /* the allreduce beat the kill: the next one cannot */
    fx_info("the allreduce completed before the kill; the next barrier must fail");
    weft_request *req = NULL;
    weft_status st = weft_barrier(G, "next", NULL, &req);
    if (st == WEFT_OK)
      o = finish(req, T + 10, "next barrier");
    else
      o = (outcome){st, fx_now(), ""}, snprintf(o.msg, sizeof o.msg, "%s", weft_last_error());
  }
  check_failure(&o, WEFT_ERR_PEER_LOST, victim, fx_get_num("t_kill", 10), "sigkill_detect");
  check_async(WEFT_ERR_PEER_LOST, victim);
  later_barrier("later");
  fr_finalize(1.0);
  free(g_big);
  int fds1 = fx_count_fds(), thr1 = fx_count_threads_after(thr0), kids1 = fx_count_children();
  char leaked[512];
  /* not more: rank 0 keeps its inherited listener (WEFT_LISTEN_FD), open before init, for a later init */
  if (fds1 > fds0) fx_fail("open fds: %d before weft_init, %d after weft_finalize", fds0, fds1);
  if (thr1 != thr0) fx_fail("threads: %d before weft_init, %d after weft_finalize", thr0, thr1);
  if (kids1 != kids0) fx_fail("child processes: %d before weft_init, %d after weft_finalize", kids0, kids1);
  if (fx_shm_new(shm0, leaked, sizeof leaked)) fx_fail("new /dev/shm entry after weft_finalize: %s", leaked);
  if (!fx_failures)
    fx_pass("survivor rank %d: failure named rank %d, no leaks (%d fds, %d threads)", R, victim, fds1, thr1);
  return fr_end();
}

/* ------------------------------------------------------------ item 2 */
static int case_sigstop(int peers_stay) {
  const int victim = 1;
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  uint64_t pids[64];
  if (N > 64 || !fr_exchange("pids", (uint64_t)getpid(), pids)) fr_fatal("pid exchange failed");
  if (!fr_allreduce_ok("warmup", 1000)) fr_fatal("warm-up allreduce failed");
  big_alloc();
  barrier_ok("ready");
  weft_request *req = big_submit("big");
  if (R == 0) {
    fx_sleep(0.05);
    double t = fx_now();
    if (kill((pid_t)pids[victim], SIGSTOP) != 0) fr_fatal("SIGSTOP: %s", strerror(errno));
    fx_put("t_stop", "%.9f", t);
  }
  if (R == victim) {
    /* Stopped somewhere in here; after SIGCONT the request (or the next
     * barrier, if the allreduce finished before the stop) must fail. */
    outcome o = finish(req, 60, "big allreduce (stopped rank)");
    if (o.st == WEFT_OK) {
      /* finished before the stop (fast transports): the barrier comes after
       * it, so that the stop lands between the two */
      fx_get_num("t_stop", 10);
      weft_request *b = NULL;
      weft_status st = weft_barrier(G, "next", NULL, &b);
      if (st == WEFT_OK)
        o = finish(b, 60, "next barrier (stopped rank)");
      else
        o = (outcome){st, fx_now(), ""}, snprintf(o.msg, sizeof o.msg, "%s", weft_last_error());
    }
    double t_cont = fx_get_num("t_cont", 5);
    if (o.st >= 0) fx_fail("the resumed rank's work ended %s, expected an error", weft_status_string(o.st));
    if (!o.msg[0]) fx_fail("the resumed rank's error has no message");
    fx_info("resumed rank: %s \"%s\"", weft_status_string(o.st), o.msg);
    fx_measure(ITEM, peers_stay ? "resumed_fails_peers_stay" : "resumed_fails_peers_exit", T,
               t_cont >= 0 ? o.t - t_cont : -1);
    fr_finalize(1.0);
    free(g_big);
    fx_put("resumed_done", "1");
    return fr_end();
  }
  outcome o = finish(req, T + 10, "big allreduce");
  if (o.st == WEFT_OK) {
    fx_info("the allreduce completed before the stop; the next barrier must fail");
    fx_get_num("t_stop", 10); /* the barrier starts after the stop */
    weft_request *b = NULL;
    weft_status st = weft_barrier(G, "next", NULL, &b);
    if (st == WEFT_OK)
      o = finish(b, T + 10, "next barrier");
    else
      o = (outcome){st, fx_now(), ""}, snprintf(o.msg, sizeof o.msg, "%s", weft_last_error());
  }
  check_failure(&o, WEFT_ERR_PEER_LOST, victim, fx_get_num("t_stop", 10), "sigstop_detect");
  if (!fx_has(o.msg, "unresponsive")) fx_fail("message \"%s\" does not say \"unresponsive\"", o.msg);
  if (fx_has(o.msg, "closed its connection")) fx_fail("message \"%s\" reports a closed connection", o.msg);
  char f[32];
  snprintf(f, sizeof f, "detected.%d", R);
  fx_put(f, "1");
  if (!peers_stay) fr_finalize(1.0);
  if (R == 0) { /* resume the victim once every survivor has its verdict */
    for (int r = 0; r < N; r++) {
      snprintf(f, sizeof f, "detected.%d", r);
      if (r != victim && fx_wait_file(f, T + 15) != 0) fx_fail("survivor rank %d never reported", r);
    }
    double t = fx_now();
    fx_put("t_cont", "%.9f", t);
    if (kill((pid_t)pids[victim], SIGCONT) != 0) fx_fail("SIGCONT: %s", strerror(errno));
  }
  if (peers_stay) { /* keep the failed world open until the victim reported */
    if (fx_wait_file("resumed_done", T + 30) != 0) fx_fail("the resumed rank never finished");
    fr_finalize(1.0);
  }
  free(g_big);
  if (!fx_failures) fx_pass("survivor rank %d: \"%s\"", R, o.msg);
  return fr_end();
}

/* ------------------------------------------------------------ item 3 */
static int case_coordkill(void) {
  const int victim = 0;
  fr_maybe_fork_victim(victim);
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  if (!fr_allreduce_ok("warmup", 1000)) fr_fatal("warm-up allreduce failed");
  barrier_ok("ready");
  if (R == victim) {
    fx_sleep(0.3); /* the workers' requests reach the coordinator */
    fr_die("t_kill");
  }
  float a[16] = {0};
  int64_t shape[1] = {16};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, a, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *ra = NULL, *rb = NULL;
  if (weft_allreduce(G, "neg.a", &t, &t, WEFT_OP_SUM, NULL, &ra) != WEFT_OK ||
      weft_allgather(G, "neg.b", &t, NULL, &rb) != WEFT_OK)
    fr_fatal("submit: %s", weft_last_error());
  double t_kill = fx_get_num("t_kill", 10);
  outcome oa = finish(ra, T + 10, "neg.a"), ob = finish(rb, T + 10, "neg.b");
  check_failure(&oa, WEFT_ERR_PEER_LOST, victim, t_kill, "coordkill_detect_a");
  check_failure(&ob, WEFT_ERR_PEER_LOST, victim, t_kill, "coordkill_detect_b");
  check_async(WEFT_ERR_PEER_LOST, victim);
  later_barrier("later");
  fr_finalize(1.0);
  if (!fx_failures) fx_pass("worker rank %d: \"%s\"", R, oa.msg);
  return fr_end();
}

/* ------------------------------------------------------------ item 13 */

/* The documented misuse answers: NULL and a foreign handle. A freed world
 * is undefined behaviour in C (weft.h rule 2) and is not tried. */
static void check_misuse(void) {
  static unsigned char foreign[1 << 16]; /* zeroes: larger than any world */
  if (weft_finalize(NULL) != WEFT_ERR_MISUSE) fx_fail("weft_finalize(NULL) is not WEFT_ERR_MISUSE");
  if (weft_finalize((weft_world *)foreign) != WEFT_ERR_MISUSE)
    fx_fail("weft_finalize(foreign handle) is not WEFT_ERR_MISUSE");
  if (weft_abort(NULL, "x") != WEFT_ERR_MISUSE) fx_fail("weft_abort(NULL) is not WEFT_ERR_MISUSE");
  if (weft_rank(NULL) != -1 || weft_size((weft_world *)foreign) != -1) fx_fail("weft_rank/size of a bad handle != -1");
}

static int case_inflight(void) {
  fr_join();
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  barrier_ok("ready");
  float a[8] = {0};
  int64_t shape[1] = {8};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, a, WEFT_DEVICE_CPU, 0, NULL};
  char name[32];
  snprintf(name, sizeof name, "inflight.%d", R); /* no other rank submits it */
  weft_request *req = NULL, *detached = NULL;
  if (weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &req) != WEFT_OK) fr_fatal("submit: %s", weft_last_error());
  snprintf(name, sizeof name, "detached.%d", R);
  if (weft_barrier(G, name, NULL, &detached) != WEFT_OK) fr_fatal("submit: %s", weft_last_error());
  weft_request_free(detached); /* completes (and is freed) in the background */
  /* The ranks leave one by one, the highest first: its requests are still
   * in flight when it finalizes, so they must end WEFT_ERR_SHUTDOWN. A rank
   * leaving later may find its request failed already because a rank that
   * left never submitted it (PEER_LOST naming that rank, "shut down"): the
   * contract too. */
  fx_sleep(0.1);
  char f[32];
  snprintf(f, sizeof f, "finalized.%d", R + 1);
  if (R + 1 < N && fx_wait_file(f, 10) != 0) fx_fail("rank %d never finalized", R + 1);
  fr_finalize(1.0);
  snprintf(f, sizeof f, "finalized.%d", R);
  fx_put(f, "1");
  weft_status st = weft_test(req);
  const char *msg = weft_request_error(req);
  int departed = 0;
  for (int r = R + 1; r < N; r++) departed |= fx_names_rank(msg, r);
  if (R + 1 < N && st == WEFT_ERR_PEER_LOST && departed && fx_has(msg, "shut down"))
    fx_info("the request failed when a higher rank left first: \"%s\"", msg);
  else if (st != WEFT_ERR_SHUTDOWN)
    fx_fail("a request in flight at finalize ended %s (\"%s\"), expected WEFT_ERR_SHUTDOWN", weft_status_string(st),
            msg);
  else if (!msg[0])
    fx_fail("the WEFT_ERR_SHUTDOWN request has no message");
  if (weft_request_free(req) != WEFT_OK) fx_fail("weft_request_free after finalize failed");
  check_misuse();
  if (!fx_failures) fx_pass("rank %d: in-flight request ended WEFT_ERR_SHUTDOWN, misuse detected", R);
  return fr_end();
}

static int case_finalize_dead(void) {
  const int victim = 2;
  fr_maybe_fork_victim(victim);
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  big_alloc();
  barrier_ok("ready");
  weft_request *req = big_submit("big");
  if (R == victim) {
    fx_sleep(0.05);
    fr_die("t_kill");
  }
  fx_get_num("t_kill", 10);
  if (weft_test(req) == WEFT_OK) { /* done before the death (fast transports): put other work in flight */
    weft_request_free(req);
    req = NULL;
    if (weft_barrier(G, "next", NULL, &req) != WEFT_OK) req = NULL;
  }
  fr_finalize(1.0); /* at once: the death may not even be noticed yet */
  weft_status st = req ? weft_test(req) : WEFT_ERR_SHUTDOWN;
  if (st >= 0) fx_fail("the allreduce with a dead rank ended %s", weft_status_string(st));
  weft_request_free(req);
  free(g_big);
  if (!fx_failures) fx_pass("rank %d: finalize with a dead peer and work in flight", R);
  return fr_end();
}

static int case_finalize_stopped(void) {
  const int victim = 2;
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  uint64_t pids[64];
  if (N > 64 || !fr_exchange("pids", (uint64_t)getpid(), pids)) fr_fatal("pid exchange failed");
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  big_alloc();
  barrier_ok("ready");
  weft_request *req = big_submit("big");
  if (R == 0) {
    fx_sleep(0.03);
    if (kill((pid_t)pids[victim], SIGSTOP) != 0) fr_fatal("SIGSTOP: %s", strerror(errno));
    fx_put("stopped", "1");
  }
  if (R == victim) {
    outcome o = finish(req, 60, "big allreduce (stopped rank)");
    double t_cont = fx_get_num("t_cont", 5);
    if (o.st >= 0 && o.st != WEFT_OK) fx_fail("unexpected status %s", weft_status_string(o.st));
    if (o.st == WEFT_OK) { /* the stop came after its part: the next barrier */
      weft_request *b = NULL;
      weft_status st = weft_barrier(G, "next", NULL, &b);
      if (st == WEFT_OK)
        o = finish(b, 60, "next barrier (stopped rank)");
      else
        o = (outcome){st, fx_now(), ""};
      if (o.st >= 0) fx_fail("a barrier with departed peers ended %s", weft_status_string(o.st));
    }
    fx_measure(ITEM, "resumed_fails", T, t_cont >= 0 ? o.t - t_cont : -1);
    fr_finalize(1.0);
    free(g_big);
    return fr_end();
  }
  if (fx_wait_file("stopped", 10) != 0) fr_fatal("rank 0 never stopped rank %d", victim);
  fx_sleep(0.2); /* the transfer stalls: rank 2 reads nothing */
  if (weft_test(req) == WEFT_OK) { /* done before the stop (fast transports): stall a barrier instead */
    weft_request_free(req);
    req = NULL;
    if (weft_barrier(G, "next", NULL, &req) != WEFT_OK) req = NULL;
    fx_sleep(0.2);
  }
  fr_finalize(1.0);
  weft_status st = weft_test(req);
  if (st == WEFT_OK || st == WEFT_IN_PROGRESS) fx_fail("the stalled allreduce ended %s", weft_status_string(st));
  weft_request_free(req);
  char f[32];
  snprintf(f, sizeof f, "finalized.%d", R);
  fx_put(f, "1");
  if (R == 0) {
    if (fx_wait_file("finalized.1", 10) != 0) fx_fail("rank 1 never finalized");
    fx_put("t_cont", "%.9f", fx_now());
    if (kill((pid_t)pids[victim], SIGCONT) != 0) fx_fail("SIGCONT: %s", strerror(errno));
  }
  free(g_big);
  if (!fx_failures) fx_pass("rank %d: finalize with a stopped peer and a stalled transfer", R);
  return fr_end();
}

static int case_abort(int then_exit) {
  const int aborter = 1;
  const char *reason = "fault-test abort reason";
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  barrier_ok("ready");
  float a[8] = {0};
  int64_t shape[1] = {8};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, a, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r1 = NULL, *r2 = NULL;
  if (R == aborter) {
    if (weft_allreduce(G, "abort.own", &t, &t, WEFT_OP_SUM, NULL, &r1) != WEFT_OK)
      fr_fatal("submit: %s", weft_last_error());
    fx_sleep(0.3); /* the others are negotiating work this rank never joins */
    double t_abort = fx_now();
    fx_put("t_abort", "%.9f", t_abort);
    if (weft_abort(W, reason) != WEFT_OK) fx_fail("weft_abort failed: %s", weft_last_error());
    if (weft_abort(W, "a second reason") != WEFT_OK) fx_fail("a second weft_abort failed: %s", weft_last_error());
    outcome o = finish(r1, T + 10, "abort.own");
    if (o.st != WEFT_ERR_ABORTED)
      fx_fail("own pending request ended %s, expected WEFT_ERR_ABORTED", weft_status_string(o.st));
    if (!fx_has(o.msg, "aborted") || !fx_has(o.msg, reason))
      fx_fail("own message \"%s\" lacks \"aborted: %s\"", o.msg, reason);
    fx_measure(ITEM, "abort_local", T, o.t - t_abort);
  } else {
    if (weft_barrier(G, "abort.wait", NULL, &r1) != WEFT_OK ||
        weft_allreduce(G, "abort.x", &t, &t, WEFT_OP_SUM, NULL, &r2) != WEFT_OK)
      fr_fatal("submit: %s", weft_last_error());
    outcome o1 = finish(r1, T + 10, "abort.wait"), o2 = finish(r2, T + 10, "abort.x");
    double t_abort = fx_get_num("t_abort", 10);
    const outcome *os[2] = {&o1, &o2};
    for (int k = 0; k < 2; k++) {
      if (os[k]->st != WEFT_ERR_ABORTED)
        fx_fail("pending request ended %s, expected WEFT_ERR_ABORTED", weft_status_string(os[k]->st));
      if (!fx_has(os[k]->msg, "aborted") || !fx_has(os[k]->msg, reason) || !fx_names_rank(os[k]->msg, aborter))
        fx_fail("message \"%s\" lacks \"aborted\", the reason or rank %d", os[k]->msg, aborter);
    }
    fx_measure(ITEM, "abort_remote", T, t_abort >= 0 ? (o1.t > o2.t ? o1.t : o2.t) - t_abort : -1);
    if (weft_abort(W, "a late local abort") != WEFT_OK) fx_fail("weft_abort after a remote abort failed");
  }
  /* sticky and idempotent: the first reason stays; later work fails */
  weft_status st = weft_async_error(W);
  if (st != WEFT_ERR_ABORTED || !fx_has(weft_last_error(), reason) || fx_has(weft_last_error(), "second reason") ||
      fx_has(weft_last_error(), "late local"))
    fx_fail("weft_async_error after abort: %s \"%s\"", weft_status_string(st), weft_last_error());
  outcome o = later_barrier("after.abort");
  if (o.st != WEFT_ERR_ABORTED) fx_fail("a request after the abort ended %s", weft_status_string(o.st));
  /* Nobody leaves before every rank has checked: a departure is a failure
   * of its own, and this case is about the abort alone. Unless then_exit:
   * every rank leaves as soon as it saw the abort, as a training script
   * would; the abort must still reach every rank first. */
  char f[32];
  snprintf(f, sizeof f, "checked.%d", R);
  fx_put(f, "1");
  for (int r = 0; r < N && !then_exit; r++) {
    snprintf(f, sizeof f, "checked.%d", r);
    if (fx_wait_file(f, T + 10) != 0) fx_fail("rank %d never finished its checks", r);
  }
  fr_finalize(1.0);
  check_misuse();
  if (!fx_failures) fx_pass("rank %d: abort reached every request", R);
  return fr_end();
}

/* ------------------------------------------------------------ item 15 */
static int case_loop(const char *die) {
  char f[32];
  snprintf(f, sizeof f, "pid.%d", R);
  fx_put(f, "%d", (int)getpid());
  if (R == 0) fx_put("jobid", "%s", getenv("WEFT_JOB_ID") ? getenv("WEFT_JOB_ID") : "");
  fr_join();
  double t0 = fx_now();
  for (int i = 0;; i++) {
    if (R == 1 && die && fx_now() - t0 > 0.3) {
      if (!strcmp(die, "kill")) raise(SIGKILL);
      if (!strcmp(die, "exit")) _exit(3);
    }
    char name[32];
    snprintf(name, sizeof name, "loop.%d", i);
    int64_t v[4096];
    for (int k = 0; k < 4096; k++) v[k] = k;
    int64_t shape[1] = {4096};
    weft_tensor t = {WEFT_DTYPE_INT64, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    weft_status st = weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &req);
    if (st == WEFT_OK) st = weft_wait(req, 30);
    if (st != WEFT_OK) {
      fx_info("loop %d ended %s: %s", i, weft_status_string(st), req ? weft_request_error(req) : weft_last_error());
      _exit(5); /* a later failure than the first: weftrun must not report it */
    }
    weft_request_free(req);
  }
}

/* ------------------------------------------------------------ item 11 */
static int case_partition(void) {
  fr_join();
  if (N != 2) fr_fatal("needs 2 ranks");
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  size_t n = 1 << 20;
  float *buf = malloc(n * sizeof *buf);
  if (!buf) fr_fatal("out of memory");
  for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
  char f[32];
  snprintf(f, sizeof f, "ready.%d", R);
  fx_put(f, "1");
  outcome o = {WEFT_OK, 0, ""};
  double end = fx_now() + 30;
  for (int i = 0; o.st == WEFT_OK && fx_now() < end; i++) {
    char name[32];
    snprintf(name, sizeof name, "part.%d", i);
    int64_t shape[1] = {(int64_t)n};
    weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    weft_status st = weft_allreduce(G, name, &t, &t, WEFT_OP_AVERAGE, NULL, &req);
    if (st != WEFT_OK) {
      o = (outcome){st, fx_now(), ""};
      snprintf(o.msg, sizeof o.msg, "%s", weft_last_error());
      break;
    }
    o = finish(req, T + 30, name);
  }
  int other = 1 - R;
  check_failure(&o, WEFT_ERR_PEER_LOST, other, fx_get_num("t_down", 5), "partition_detect");
  if (!fx_has(o.msg, "unresponsive")) fx_fail("message \"%s\" does not say \"unresponsive\"", o.msg);
  fr_finalize(1.0);
  free(buf);
  if (!fx_failures) fx_pass("rank %d: \"%s\"", R, o.msg);
  return fr_end();
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--now")) { /* for scripts: the shared clock */
    printf("%.9f\n", fx_now());
    return 0;
  }
  const char *c = argc >= 2 ? argv[1] : "";
  const char *opt = argc >= 4 ? argv[3] : NULL; /* --peers stay|exit, --die kill|exit, --then exit */
  if (!strcmp(c, "sigkill")) return fr_begin("1"), case_sigkill();
  if (!strcmp(c, "sigstop")) return fr_begin("2"), case_sigstop(!opt || !strcmp(opt, "stay"));
  if (!strcmp(c, "coordkill")) return fr_begin("3"), case_coordkill();
  if (!strcmp(c, "inflight")) return fr_begin("13"), case_inflight();
  if (!strcmp(c, "finalize_dead")) return fr_begin("13"), case_finalize_dead();
  if (!strcmp(c, "finalize_stopped")) return fr_begin("13"), case_finalize_stopped();
  if (!strcmp(c, "abort")) return fr_begin("13"), case_abort(opt && !strcmp(opt, "exit"));
  if (!strcmp(c, "loop")) return fr_begin("15"), case_loop(opt);
  if (!strcmp(c, "partition")) return fr_begin("11"), case_partition();
  fprintf(stderr, "usage: fault_peers --now | CASE [--peers stay|exit] [--die kill|exit]\n");
  return 2;
}
