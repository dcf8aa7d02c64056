/* mp_fast_lost.c - the cases of mp_fast (included by mp_fast.c, like
 * mp_fast_ref.c and mp_fast_colls.c) in which a rank does not come or goes
 * away: stall | stall-poll (a rank never submits: the stall shutdown names
 * it), kill | stop | stopsplit | killdone (a rank SIGKILLs or SIGSTOPs
 * itself: the others fail naming it, or complete what it had joined),
 * finalize (with fast requests pending) and deadline (a fast request nobody
 * else submits fails by its operation's deadline). What each case checks:
 * mp_fast.c's header. */

static void case_stall(int poll, const char *dir) {
  char flag[1024];
  snprintf(flag, sizeof flag, "%s/released", dir);
  if (mp_size != 3) mp_fatal("run stall with 3 ranks");
  mp_case("stall: rank 2 never submits 'stuck' (%s)", poll ? "the others poll weft_test" : "rank 0 waits");
  if (mp_rank == 2) {
    double end = mp_now() + 40;
    while (access(flag, F_OK) != 0) {
      if (mp_now() > end) mp_fatal("%s never appeared", flag);
      mp_sleep_ms(10);
    }
  } else {
    int32_t v = 1;
    int64_t one[1] = {1};
    weft_tensor t = {WEFT_DTYPE_INT32, 1, one, &v, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    double t0 = mp_now();
    mp_submitted(weft_allreduce(mp_group, "stuck", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "stuck");
    weft_status st;
    if (poll || mp_rank == 1) {
      while ((st = weft_test(r)) == WEFT_IN_PROGRESS && mp_now() - t0 < 30) mp_sleep_ms(20);
    } else {
      st = mp_wait(r, "stuck");
    }
    double dt = mp_now() - t0;
    const char *msg = weft_request_error(r);
    mp_say("INFO rank %d: 'stuck' completed after %.2f s: %s %s", mp_rank, dt, weft_status_string(st), msg);
    if (st != WEFT_ERR_TIMEOUT) mp_fail("expected WEFT_ERR_TIMEOUT, got %s (%s)", weft_status_string(st), msg);
    else if (!strstr(msg, "stuck") || !strstr(msg, "rank(s) 2"))
      mp_fail("the message should name 'stuck' and rank(s) 2: %s", msg);
    if (dt < 1.5 || dt > 8.0) mp_fail("the stall shutdown took %.2f s (WEFT_STALL_SHUTDOWN_SECONDS=2)", dt);
    weft_request_free(r);
    g_div_min++;
    if (mp_rank == 0) {
      FILE *f = fopen(flag, "w");
      if (!f) mp_fatal("cannot create %s", flag);
      fclose(f);
    }
  }
  mp_case_end();
  mp_case("the job works after the stall");
  barrier_wait(mp_group, "st.sync");
  for (int i = 0; i < 5; i++)
    ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT32, WEFT_OP_SUM, 3, (uint64_t)i, "after");
  expect(3, 6);
  mp_case_end();
}

/* ---- kill: the weft rank runs in a child; the process weftrun started
 * waits for it, so weftrun does not stop the survivors when the killer dies
 * (see mp_fault.c). */
static int g_pipe = -1;

static int supervise(pid_t child, int rfd) {
  char note = 0;
  ssize_t n;
  do n = read(rfd, &note, 1);
  while (n < 0 && errno == EINTR);
  int ws = 0;
  while (waitpid(child, &ws, WUNTRACED) < 0)
    if (errno != EINTR) return 1;
  if (WIFSTOPPED(ws)) { /* stop K: the others must cope alone; then it goes */
    if (n != 1 || note != 'S') {
      printf("FAIL: the weft rank stopped unplanned\n");
      kill(child, SIGKILL);
      waitpid(child, &ws, 0);
      return 1;
    }
    sleep(10);
    kill(child, SIGKILL);
    while (waitpid(child, &ws, 0) < 0)
      if (errno != EINTR) return 1;
    return 0;
  }
  if (WIFSIGNALED(ws)) {
    if (WTERMSIG(ws) == SIGKILL && n == 1 && note == 'K') return 0;
    if (n == 1 && note == 'F') {
      printf("FAIL: the rank to be killed saw its own collective fail first\n");
      return 1;
    }
    printf("FAIL: the weft rank died of signal %d unplanned\n", WTERMSIG(ws));
    return 1;
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

/* Waits for r (or takes the submission's failure): must fail naming dead
 * within 15 s of t0. */
static void expect_death(weft_status sub, weft_request *r, double t0, const char *dead, const char *what) {
  weft_status st = sub;
  const char *msg = weft_last_error();
  if (sub == WEFT_OK) {
    st = weft_wait(r, 20.0);
    msg = weft_request_error(r);
  }
  double dt = mp_now() - t0;
  mp_say("INFO rank %d: %s: %s after %.2f s: %s", mp_rank, what, weft_status_string(st), dt, msg);
  if (st >= 0) mp_fail("%s: %s, expected a failure naming %s", what, weft_status_string(st), dead);
  else if (!mp_contains(msg, dead)) mp_fail("%s: the message does not name %s: %s", what, dead, msg);
  if (dt > 15.0) mp_fail("%s: the failure came after %.2f s", what, dt);
  if (r) weft_request_free(r);
}

/* stopsplit: rank K submits a 512 KiB allreduce (a split round) first and
 * stops; the others arrive 200 ms later and must complete it at once, with
 * K's input in the sum: they fold K's slice themselves (board.h), nobody
 * waits for K. Their next op then fails naming K (its heartbeats stopped). */
static void split_stopped(int killer, const char *dead) {
  enum { N = 1 << 17 }; /* int32: 512 KiB */
  int32_t *v = mp_alloc(sizeof(int32_t) * N);
  for (size_t i = 0; i < N; i++) v[i] = mp_rank * 7 + (int32_t)(i % 1000);
  int64_t shape[1] = {N};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  if (mp_rank != killer) mp_sleep_ms(200);
  double t0 = mp_now(); /* the last to arrive makes its first pass inside the submission */
  weft_status st = weft_allreduce(mp_group, "k.sum", &t, &t, WEFT_OP_SUM, NULL, &r);
  if (mp_rank == killer) {
    char k = 'S';
    if (write(g_pipe, &k, 1) != 1) perror("write");
    raise(SIGSTOP);
    _exit(3); /* never resumed: the supervisor kills it */
  }
  mp_case("stopsplit: rank %d stopped after arriving at a split allreduce", killer);
  if (st == WEFT_OK) st = weft_wait(r, 3.0);
  double dt = mp_now() - t0;
  if (st != WEFT_OK) mp_fail("k.sum: %s after %.2f s: %s", weft_status_string(st), dt, r ? weft_request_error(r) : "");
  else if (dt > 2.0) mp_fail("k.sum took %.2f s: somebody waited for the stopped rank", dt);
  int64_t ranks7 = 7LL * mp_size * (mp_size - 1) / 2;
  for (size_t i = 0; st == WEFT_OK && i < N; i++)
    if (v[i] != (int32_t)(ranks7 + (int64_t)mp_size * (int64_t)(i % 1000))) {
      mp_fail("k.sum[%zu] = %d, expected %lld", i, v[i], (long long)(ranks7 + (int64_t)mp_size * (int64_t)(i % 1000)));
      break;
    }
  if (r) weft_request_free(r);
  free(v);
  mp_case_end();
  mp_case("stopsplit: the next op fails naming rank %d", killer);
  r = NULL;
  t0 = mp_now();
  st = weft_barrier(mp_group, "k.after", NULL, &r);
  expect_death(st, st == WEFT_OK ? r : NULL, t0, dead, "k.after");
  mp_case_end();
}

/* killdone: a round every member completed needs nobody any more, so a
 * failing world completes it as it would have (wf_fast_fail_all), even when
 * the waiter first looks after the failure. The others may not divert while
 * they wait for K (fast.sh: WEFT_FAST_WAIT_SECONDS=5), and K dies only once
 * its own request completed, whoever arrived last. */
static void done_then_killed(int killer, const char *dead) {
  int32_t v[16];
  for (int i = 0; i < 16; i++) v[i] = mp_rank * 100 + i;
  int64_t shape[1] = {16};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  if (mp_rank == killer) mp_sleep_ms(100); /* usually the last to arrive */
  weft_status st = weft_allreduce(mp_group, "k.done", &t, &t, WEFT_OP_SUM, NULL, &r);
  if (mp_rank == killer) {
    if (st == WEFT_OK) st = weft_wait(r, 20.0);
    char k = st == WEFT_OK ? 'K' : 'F';
    if (write(g_pipe, &k, 1) != 1) perror("write");
    raise(SIGKILL);
    _exit(3);
  }
  mp_case("killdone: rank %d completes an allreduce and dies before this rank looks", killer);
  if (st == WEFT_OK) {
    mp_sleep_ms(500); /* this rank's engine sees the death meanwhile */
    st = weft_wait(r, 20.0);
  }
  if (st != WEFT_OK) mp_fail("k.done: %s: %s", weft_status_string(st), r ? weft_request_error(r) : weft_last_error());
  for (int i = 0; st == WEFT_OK && i < 16; i++) {
    int32_t want = 100 * mp_size * (mp_size - 1) / 2 + mp_size * i;
    if (v[i] != want) {
      mp_fail("k.done[%d] = %d, expected %d", i, v[i], want);
      break;
    }
  }
  if (r) weft_request_free(r);
  mp_case_end();
  mp_case("killdone: the next op fails naming rank %d", killer);
  r = NULL;
  double t0 = mp_now();
  st = weft_barrier(mp_group, "k.after", NULL, &r);
  expect_death(st, st == WEFT_OK ? r : NULL, t0, dead, "k.after");
  mp_case_end();
}

enum { LOST_ALLGATHER, LOST_SPLIT, LOST_DONE };

/* kill K / stop K (sig SIGKILL / SIGSTOP, LOST_ALLGATHER): see the top of
 * the file; stopsplit K (LOST_SPLIT): split_stopped; killdone K
 * (LOST_DONE): done_then_killed. */
static int case_lost(int killer, int sig, int mode) {
  const char *how = mode == LOST_SPLIT  ? "stopsplit"
                    : mode == LOST_DONE ? "killdone"
                    : sig == SIGKILL    ? "kill"
                                        : "stop";
  mp_setup();
  if (mp_size < 2) mp_fatal("%s needs 2 ranks or more", how);
  if (killer < 0 || killer >= mp_size) killer = mp_size - 1;
  char dead[32];
  snprintf(dead, sizeof dead, "rank %d", killer);
  mp_case("%s: warm-up", how);
  ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 16, 1, "k.warm");
  barrier_wait(mp_group, "k.sync");
  mp_case_end();
  if (mode == LOST_SPLIT) {
    split_stopped(killer, dead);
    goto teardown;
  }
  if (mode == LOST_DONE) {
    done_then_killed(killer, dead);
    goto teardown;
  }
  /* A 1 MiB allgather (a remote round where the host's cores suffice: its
   * inputs read across processes): rank K submits it first and dies or
   * stops before anyone arrived (so before reading or claiming); the others
   * come 200 ms later and must fail naming it, not hang.
   *  - kill: at submission when its loss is known by then (usual: its
   *    connections close), else in the round (its input cannot be read);
   *  - stop: its input is still there (a stopped process's memory), so they
   *    read it, claim, and wait for its claim, which never comes; its
   *    heartbeats stop too, and the world's failure must end the wait
   *    (WEFT_HEARTBEAT_TIMEOUT=5). The supervisor kills it 10 s later. */
  enum { AG_ROWS = 1 << 18 };
  int32_t *ag = mp_alloc(sizeof(int32_t) * AG_ROWS);
  for (size_t i = 0; i < AG_ROWS; i++) ag[i] = mp_rank * 7 + (int32_t)i;
  int64_t ag_shape[1] = {AG_ROWS};
  weft_tensor agt = {WEFT_DTYPE_INT32, 1, ag_shape, ag, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *agr = NULL;
  if (mp_rank != killer) mp_sleep_ms(200);
  double ag0 = mp_now();
  weft_status agst = weft_allgather(mp_group, "k.ag", &agt, NULL, &agr);
  if (mp_rank == killer) {
    char k = sig == SIGKILL ? 'K' : 'S';
    if (write(g_pipe, &k, 1) != 1) perror("write");
    raise(sig);
    _exit(3); /* a stopped rank is never resumed: the supervisor kills it */
  }
  mp_case("%s: rank %d is lost right after submitting a large allgather", how, killer);
  expect_death(agst, agst == WEFT_OK ? agr : NULL, ag0, dead, "k.ag");
  free(ag);
  mp_case_end();
  if (sig == SIGKILL) {
    mp_case("kill: rank %d dies while this rank waits on a fast allreduce", killer);
    int32_t v[4] = {1, 2, 3, 4};
    int64_t s4[1] = {4};
    weft_tensor t = {WEFT_DTYPE_INT32, 1, s4, v, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    double t0 = mp_now();
    weft_status st = weft_allreduce(mp_group, "k.x", &t, &t, WEFT_OP_SUM, NULL, &r);
    expect_death(st, st == WEFT_OK ? r : NULL, t0, dead, "k.x");
    r = NULL;
    t0 = mp_now();
    st = weft_allreduce(mp_group, "k.y", &t, &t, WEFT_OP_SUM, NULL, &r);
    expect_death(st, st == WEFT_OK ? r : NULL, t0, dead, "k.y (after)");
    mp_case_end();
  }
teardown:
  mp_case("%s: finalize, nothing left in /dev/shm", how);
  mp_finalize_within(5.0);
  const char *job = getenv("WEFT_JOB_ID");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "ls /dev/shm 2>/dev/null | grep -F 'weft-%s-'", job ? job : "?");
  if (job && *job && system(cmd) == 0) mp_fail("files of job %s are left in /dev/shm (listed above)", job);
  mp_case_end();
  return mp_exit_status();
}

/* Finalize with fast requests pending: rank 0 keeps one nobody else
 * submits (WEFT_ERR_SHUTDOWN afterwards, the handle still valid), rank 1
 * detaches one; a short weft_wait on a pending fast request returns
 * WEFT_IN_PROGRESS and leaves it pending. */
static int case_finalize(void) {
  mp_case("finalize with fast requests pending");
  static int32_t v[4];
  int64_t s4[1] = {4};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, s4, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *h = NULL, *r = NULL;
  barrier_wait(mp_group, "fin.sync");
  double t0 = mp_now();
  if (mp_rank != 0) mp_sleep_ms(500);
  arop a = {{WEFT_DTYPE_INT32, WEFT_OP_SUM, 1, 1, 3}, 5, {0}, NULL, NULL, NULL, ""};
  ar_submit(&a, mp_group, mp_rank, 0, "fin.ok");
  for (int i = 0; mp_rank == 0 && i < 5; i++) { /* the others are 0.5 s late */
    weft_status st = weft_wait(a.req, 0.01);
    if (st == WEFT_IN_PROGRESS) continue;
    if (st != WEFT_OK || mp_now() - t0 < 0.45)
      mp_fail("weft_wait(0.01) on a pending request: %s", weft_status_string(st));
    break;
  }
  ar_finish(&a, mp_size, NULL);
  if (mp_rank == 0) mp_submitted(weft_allreduce(mp_group, "fin.x", &t, &t, WEFT_OP_SUM, NULL, &h), &h, "fin.x");
  if (mp_rank == 1) {
    mp_submitted(weft_allreduce(mp_group, "fin.y", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "fin.y");
    weft_request_free(r);
  }
  double f0 = mp_now();
  weft_world *w = mp_world;
  mp_world = NULL;
  weft_status st = weft_finalize(w);
  if (st != WEFT_OK) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  if (mp_now() - f0 > 3.0) mp_fail("weft_finalize took %.2f s", mp_now() - f0);
  if (h && (st = weft_test(h)) != WEFT_ERR_SHUTDOWN)
    mp_fail("fin.x after finalize: %s (%s), expected WEFT_ERR_SHUTDOWN", weft_status_string(st), weft_request_error(h));
  if (h) weft_request_free(h);
  mp_case_end();
  mp_say("FASTEXPECT rank %d: done=2-2 diverted=0--1", mp_rank);
  return mp_exit_status();
}

/* WEFT_TIMEOUT_SECONDS=2 with WEFT_FAST_WAIT_SECONDS=30: rank 1 never
 * submits 'lonely'; rank 0's weft_wait(-1) still ends by the operation's
 * deadline with WEFT_ERR_TIMEOUT (DIR/released then lets rank 1 go on). */
static void case_deadline(const char *dir) {
  char flag[1024];
  snprintf(flag, sizeof flag, "%s/released", dir);
  mp_case("deadline: a fast request nobody else submits fails by its operation's deadline");
  if (mp_rank == 0) {
    int32_t v = 1;
    int64_t one[1] = {1};
    weft_tensor t = {WEFT_DTYPE_INT32, 1, one, &v, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    double t0 = mp_now();
    mp_submitted(weft_allreduce(mp_group, "lonely", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "lonely");
    weft_status st = weft_wait(r, -1);
    double dt = mp_now() - t0;
    mp_say("INFO rank 0: 'lonely' ended after %.2f s: %s %s", dt, weft_status_string(st), weft_request_error(r));
    if (st != WEFT_ERR_TIMEOUT || dt > 8.0)
      mp_fail("'lonely': %s after %.2f s, expected WEFT_ERR_TIMEOUT within 8 s (WEFT_TIMEOUT_SECONDS=2)",
              weft_status_string(st), dt);
    weft_request_free(r);
    FILE *f = fopen(flag, "w");
    if (!f) mp_fatal("cannot create %s", flag);
    fclose(f);
  } else {
    double end = mp_now() + 40;
    while (access(flag, F_OK) != 0) {
      if (mp_now() > end) mp_fatal("%s never appeared", flag);
      mp_sleep_ms(10);
    }
  }
  barrier_wait(mp_group, "dl.after");
  expect(0, 1);
  mp_case_end();
}
