/* mp_lifecycle.c - a world's life in one process, several times over:
 *  1. init, a checked collective, finalize; then init again (with an
 *     explicit weft_config) and again: every world works;
 *  2. finalize with requests still in flight (names no other rank submits,
 *     one of them already detached by weft_request_free), first on the
 *     coordinator, then on the last rank: it returns within 2 s, its
 *     requests report WEFT_ERR_SHUTDOWN with a message; the other ranks'
 *     pending requests fail naming the departed rank, and they finalize
 *     within 2 s too; every callback ran exactly once with its request's
 *     status, and every request can be freed after finalize;
 *  3. abort: one rank calls weft_abort while the others wait on a collective
 *     it never joins; they fail with WEFT_ERR_ABORTED naming the reason,
 *     later submissions fail too, weft_async_error reports it, finalize is
 *     prompt, and a new world works afterwards.
 * On one rank: 1 and 3 (the abort on the only rank: sticky, its async
 * error, a prompt finalize, a new world after); 2 needs requests another
 * rank never matches, so it is not run, and a NOTE line says so.
 *
 * Usage (under weftrun -np N): mp_lifecycle [--abort-no-pause] */
#include "mp_harness.c"

static void join(int cycle, const weft_config *cfg) {
  mp_case("cycle %d: weft_init%s", cycle, cfg ? " (explicit config)" : "");
  int old_rank = mp_rank, old_size = mp_size;
  weft_status st = weft_init(cfg, &mp_world);
  if (st != WEFT_OK || !mp_world) {
    mp_world = NULL;
    mp_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
  }
  mp_rank = weft_rank(mp_world);
  mp_size = weft_size(mp_world);
  mp_group = weft_world_group(mp_world);
  if (old_rank >= 0 && (mp_rank != old_rank || mp_size != old_size))
    mp_fail("rank/size changed from %d/%d to %d/%d", old_rank, old_size, mp_rank, mp_size);
  if (weft_async_error(mp_world) != WEFT_OK) mp_fail("a new world reports an async error: %s", weft_last_error());
  mp_case_end();
}

/* A checked allreduce whose values depend on the cycle (so a stale world
 * or stale data would show). */
static void collective(int cycle) {
  mp_case("cycle %d: allreduce in this world", cycle);
  int64_t v[5];
  for (int i = 0; i < 5; i++) v[i] = (int64_t)(cycle * 1000 + mp_rank * 10 + i);
  int64_t shape[1] = {5};
  weft_tensor t = {WEFT_DTYPE_INT64, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  char name[32];
  snprintf(name, sizeof name, "cycle.%d", cycle);
  mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req), &req, name);
  if (mp_wait_ok(req, name))
    for (int i = 0; i < 5; i++) {
      int64_t want = (int64_t)mp_size * (cycle * 1000 + i) + 10LL * mp_size * (mp_size - 1) / 2;
      if (v[i] != want) mp_fail("element %d is %lld, expected %lld", i, (long long)v[i], (long long)want);
    }
  weft_request_free(req);
  mp_case_end();
}

static void leave(int cycle, double limit) {
  mp_case("cycle %d: weft_finalize within %.0f s", cycle, limit);
  double t0 = mp_now();
  weft_status st = weft_finalize(mp_world);
  double dt = mp_now() - t0;
  mp_world = NULL;
  mp_group = NULL;
  if (st != WEFT_OK) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  if (dt > limit) mp_fail("weft_finalize took %.2f s", dt);
  mp_case_end();
}

/* ------------------------------------------------------------- in flight */
typedef struct cb_slot {
  atomic_int calls;
  atomic_int status;
} cb_slot;

static void count_cb(weft_request *req, weft_status status, void *user) {
  (void)req;
  cb_slot *s = user;
  atomic_store(&s->status, (int)status);
  atomic_fetch_add(&s->calls, 1);
}

/* Finalize with requests in flight. Ranks finalize one after another, not
 * at once: a rank that leaves fails the others' pending negotiations with an
 * error naming it (they can never complete), which would otherwise race with
 * each rank's own WEFT_ERR_SHUTDOWN. So `first` finalizes while everyone
 * else still runs: its requests must report WEFT_ERR_SHUTDOWN. The others
 * wait until their pending requests fail naming `first`, then finalize. */
static void finalize_in_flight(int cycle, int first) {
  enum { N = 3 };
  static float bufs[N + 1][1024];
  static cb_slot slots[N];
  memset(slots, 0, sizeof slots);
  mp_case("cycle %d: finalize with %d requests in flight, rank %d first", cycle, N + 1, first);
  weft_request *reqs[N];
  int64_t shape[1] = {1024};
  for (int i = 0; i < N; i++) {
    char name[64];
    /* A name no other rank submits: it stays in negotiation. */
    snprintf(name, sizeof name, "never.r%d.%d", mp_rank, i);
    weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, bufs[i], WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options opt = WEFT_OP_OPTIONS_INIT;
    opt.callback = count_cb;
    opt.user_data = &slots[i];
    weft_status st = i == 1 ? weft_broadcast(mp_group, name, &t, 0, &opt, &reqs[i])
                            : weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, &opt, &reqs[i]);
    mp_submitted(st, &reqs[i], name);
  }
  /* One more, detached at once: finalize must release it (ASan: no leak). */
  {
    weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, bufs[N], WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    char name[64];
    snprintf(name, sizeof name, "never.r%d.detached", mp_rank);
    mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req), &req, name);
    if (weft_request_free(req) != WEFT_OK) mp_fail("weft_request_free of a pending request failed");
  }
  /* Every rank has its pending requests queued before anyone finalizes: the
   * barrier goes through the coordinator behind them (a callback keeps it
   * off the one-host fast path, which would not order it after them). */
  weft_request *sync = NULL;
  static cb_slot sync_slot;
  weft_op_options sync_opt = WEFT_OP_OPTIONS_INIT;
  sync_opt.callback = count_cb;
  sync_opt.user_data = &sync_slot;
  mp_submitted(weft_barrier(mp_group, "inflight.sync", &sync_opt, &sync), &sync, "inflight.sync");
  mp_wait_ok(sync, "inflight.sync");
  weft_request_free(sync);

  char departed[32];
  snprintf(departed, sizeof departed, "rank %d", first);
  weft_status want = WEFT_ERR_SHUTDOWN;
  if (mp_rank == first) {
    for (int i = 0; i < N; i++)
      if (weft_test(reqs[i]) != WEFT_IN_PROGRESS) mp_fail("request %d is not pending before finalize", i);
  } else {
    /* Rank `first` leaves: our pending requests fail, naming it. */
    weft_status st = weft_wait(reqs[0], 10.0);
    if (st == WEFT_IN_PROGRESS || st >= 0)
      mp_fail("pending request: %s 10 s after %s finalized, expected an error naming it", weft_status_string(st),
              departed);
    else if (!mp_contains(weft_request_error(reqs[0]), departed))
      mp_fail("pending request failed with \"%s\", which does not name %s", weft_request_error(reqs[0]), departed);
    want = st;
  }

  double t0 = mp_now();
  weft_status st = weft_finalize(mp_world);
  double dt = mp_now() - t0;
  mp_world = NULL;
  mp_group = NULL;
  if (st != WEFT_OK && mp_rank == first) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  if (dt > 2.0) mp_fail("weft_finalize with requests in flight took %.2f s", dt);
  for (int i = 0; i < N; i++) {
    /* Others: every request failed like the first, or at the latest with
     * WEFT_ERR_SHUTDOWN when this rank finalized. */
    st = weft_wait(reqs[i], 1.0);
    if (st != want && !(mp_rank != first && st == WEFT_ERR_SHUTDOWN))
      mp_fail("request %d after finalize: %s, expected %s", i, weft_status_string(st), weft_status_string(want));
    else if (!weft_request_error(reqs[i])[0])
      mp_fail("request %d: %s without a message", i, weft_status_string(st));
    if (weft_test(reqs[i]) != st) mp_fail("request %d: weft_test disagrees with weft_wait", i);
    /* The callback runs on the engine thread around completion. */
    double end = mp_now() + 2.0;
    while (atomic_load(&slots[i].calls) == 0 && mp_now() < end) mp_sleep_ms(1);
    if (atomic_load(&slots[i].calls) != 1)
      mp_fail("request %d: callback ran %d times", i, atomic_load(&slots[i].calls));
    else if (atomic_load(&slots[i].status) != (int)st)
      mp_fail("request %d: callback status %d, request status %d", i, atomic_load(&slots[i].status), (int)st);
    if (weft_request_free(reqs[i]) != WEFT_OK) mp_fail("request %d: weft_request_free after finalize failed", i);
  }
  mp_case_end();
}

/* ------------------------------------------------------------- abort */
/* --abort-no-pause: finalize right after the abort (reproduces the race of a
 * departure against an abort in flight). */
static int g_abort_no_pause;

static void abort_world(int cycle) {
  static const char reason[] = "lifecycle test abort";
  int aborter = mp_size - 1;
  if (mp_size >= 2) mp_case("cycle %d: weft_abort on rank %d reaches every rank", cycle, aborter);
  else mp_case("cycle %d: weft_abort on the only rank: sticky, reported, then finalize", cycle);
  int32_t v[16] = {0};
  int64_t shape[1] = {16};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  if (mp_rank != aborter) {
    mp_submitted(weft_allreduce(mp_group, "abort.pending", &t, &t, WEFT_OP_SUM, NULL, &req), &req, "abort.pending");
    weft_status st = weft_wait(req, 10.0);
    if (st != WEFT_ERR_ABORTED)
      mp_fail("pending allreduce: %s (\"%s\"), expected WEFT_ERR_ABORTED within 10 s", weft_status_string(st),
              weft_request_error(req));
    else if (!mp_contains(weft_request_error(req), reason))
      mp_fail("message \"%s\" does not carry the reason \"%s\"", weft_request_error(req), reason);
    weft_request_free(req);
  } else {
    mp_sleep_ms(200);
    weft_status st = weft_abort(mp_world, reason);
    if (st != WEFT_OK) mp_fail("weft_abort: %s", weft_status_string(st));
    if (weft_abort(mp_world, "again") != WEFT_OK) mp_fail("a second weft_abort is not WEFT_OK (idempotent)");
  }
  /* Sticky: a later collective fails here, at submission or completion. */
  req = NULL;
  weft_status st = weft_allreduce(mp_group, "abort.after", &t, &t, WEFT_OP_SUM, NULL, &req);
  if (st == WEFT_OK) {
    st = weft_wait(req, 10.0);
    weft_request_free(req);
  }
  if (st != WEFT_ERR_ABORTED)
    mp_fail("a collective after the abort: %s, expected WEFT_ERR_ABORTED", weft_status_string(st));
  st = weft_async_error(mp_world);
  if (st != WEFT_ERR_ABORTED)
    mp_fail("weft_async_error: %s, expected WEFT_ERR_ABORTED", weft_status_string(st));
  else if (!mp_contains(weft_last_error(), reason))
    mp_fail("weft_async_error's message \"%s\" lacks the reason", weft_last_error());
  mp_case_end();
  /* Let the abort reach every rank before anyone leaves: a rank that
   * finalizes at once races its departure against the abort still on its
   * way to the others (see g_abort_no_pause). */
  if (!g_abort_no_pause) mp_sleep_ms(500);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--abort-no-pause")) g_abort_no_pause = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int cycle = 0;
  join(++cycle, NULL);
  collective(cycle);
  leave(cycle, 5.0);

  weft_config cfg = WEFT_CONFIG_INIT;
  cfg.timeout_seconds = 30;
  join(++cycle, &cfg);
  collective(cycle);
  leave(cycle, 5.0);

  if (mp_size >= 2) {
    join(++cycle, NULL);
    finalize_in_flight(cycle, 0); /* the coordinator first */
    join(++cycle, NULL);
    finalize_in_flight(cycle, mp_size - 1);
  } else {
    mp_say("NOTE rank 0: finalize with requests in flight is not checked on one rank (nothing stays pending)");
  }

  join(++cycle, NULL);
  collective(cycle);
  abort_world(cycle);
  leave(cycle, 2.0);

  join(++cycle, NULL);
  collective(cycle);
  return mp_teardown();
}
