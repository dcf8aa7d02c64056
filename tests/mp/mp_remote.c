/* mp_remote.c - remote execution (weft_remote_*) between ranks of a world.
 *
 * Default mode (np 2, 3): a context asked of rank 1 before it serves (it
 *  waits in rank 1's engine); every rank registers the functions, then calls its
 * neighbour (rank + 1 mod size), so every rank is caller and callee at once:
 *  - the callee's checks in TFRT's order (context, program, result count,
 *    argument count, device), each while every later one would fail too;
 *  - chained calls on a pending output (slow(x) -> h, add(h, y) -> z and a
 *    fetch of z, all issued before slow ends) against 2x + y computed here;
 *  - metadata for only the last 2 of 3 outputs;
 *  - fetch of add(a, b) on 1M float32 put from here equals a + b;
 *  - delete naming every unknown id; a context collected after its idle time (1 s);
 *  - np 3: rank 2 fetches, from rank 1, an id rank 0 puts there only later;
 *  - at the end every rank's store is empty.
 * --kill-callee (np 2, 3; supervised): rank 1 dies by SIGKILL inside a call;
 *  every other rank's pending call to it fails within 10 s naming rank 1.
 * --kill-caller (np 2, 3; supervised): the last rank puts objects on rank 0
 *  and dies; rank 0 frees them after the grace, keeps the others' objects. */
#include "mp_harness.c"
#include "mp_remote_util.c"

static weft_status fn_add(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  size_t n = mp_numel(in[0].ndim, in[0].shape);
  for (size_t i = 0; i < n; i++) o[i] = ((const float *)in[0].data)[i] + ((const float *)in[1].data)[i];
  return WEFT_OK;
}

static weft_status fn_slow(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  mp_sleep_ms(500);
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  size_t n = mp_numel(in[0].ndim, in[0].shape);
  for (size_t i = 0; i < n; i++) o[i] = 2 * ((const float *)in[0].data)[i];
  return WEFT_OK;
}

static weft_status fn_split(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)in;
  void *p;
  int64_t s0[1] = {5}, s2[3] = {2, 3, 4};
  if (weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, 1, s0, &p) ||
      weft_remote_result_alloc(out, 1, WEFT_DTYPE_INT8, 0, NULL, &p) ||
      weft_remote_result_alloc(out, 2, WEFT_DTYPE_FLOAT64, 3, s2, &p))
    return WEFT_ERR_INVALID_ARGUMENT;
  return WEFT_OK;
}

static weft_status fn_die(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)in, (void)out;
  mp_sleep_ms(300); /* the callers' calls are pending by now */
  mp_die_by_sigkill();
  return WEFT_OK;
}


/* Waits for a call (bounded); returns its status, its error in err. */
static weft_status done(weft_remote_call *c, char *err, size_t len) {
  weft_status st = weft_remote_wait(c, MP_WAIT_SECONDS);
  if (st == WEFT_IN_PROGRESS) mp_fatal("a remote call is not complete after %.0f s", MP_WAIT_SECONDS);
  snprintf(err, len, "%s", weft_remote_call_error(c));
  weft_remote_call_free(c);
  return st;
}

static weft_tensor vec(float *data, const int64_t *shape) {
  return (weft_tensor){WEFT_DTYPE_FLOAT32, 1, shape, data, WEFT_DEVICE_CPU, 0, NULL};
}

static void put(int task, uint64_t ctx, weft_remote_id id, float *data, const int64_t *shape) {
  weft_tensor t = vec(data, shape);
  weft_remote_call *c;
  char err[2048];
  must(weft_remote_put(mp_world, task, ctx, &t, id, NULL, &c), "put");
  weft_status st = done(c, err, sizeof err);
  if (st != WEFT_OK) mp_fail("put on rank %d: %s", task, err);
}

/* Fetches id and compares it with ref (n floats, bit for bit). */
static void fetch_check(int task, uint64_t ctx, weft_remote_id id, const float *ref, size_t n, const char *what) {
  weft_remote_call *c;
  must(weft_remote_fetch(mp_world, task, ctx, id, NULL, &c), "fetch");
  weft_status st = weft_remote_wait(c, MP_WAIT_SECONDS);
  weft_tensor t;
  if (st != WEFT_OK) mp_fail("%s: fetch: %s: %s", what, weft_status_string(st), weft_remote_call_error(c));
  else if (weft_remote_call_output(c, &t) != WEFT_OK || t.dtype != WEFT_DTYPE_FLOAT32 || t.ndim != 1 ||
           (size_t)t.shape[0] != n)
    mp_fail("%s: fetched tensor has dtype %d ndim %d", what, (int)t.dtype, t.ndim);
  else if (memcmp(t.data, ref, n * sizeof *ref) != 0)
    mp_fail("%s: fetched data differ from the reference", what);
  weft_remote_call_free(c);
}

static weft_status exec(int task, uint64_t ctx, const char *name, int n_in, const weft_remote_input *in, int n_out,
                        const weft_remote_id *out, int device, char *err, size_t len) {
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  o.device = device;
  weft_remote_call *c;
  must(weft_remote_execute(mp_world, task, ctx, name, n_in, in, n_out, out, 0, &o, &c), name);
  return done(c, err, len);
}

static void register_all(void) {
  must(weft_remote_register(mp_world, "add", 2, 1, fn_add, NULL), "register add");
  must(weft_remote_register(mp_world, "slow", 1, 1, fn_slow, NULL), "register slow");
  must(weft_remote_register(mp_world, "split", 0, 3, fn_split, NULL), "register split");
  must(weft_remote_register(mp_world, "die", 1, 1, fn_die, NULL), "register die");
}

static void check_order(int task, uint64_t ctx) {
  mp_case("checks in TFRT's order on rank %d", task);
  char err[2048], want[128];
  int64_t sh[1] = {3};
  float a[3] = {1, 2, 3};
  weft_tensor t = vec(a, sh);
  weft_remote_input three[3] = {{.tensor = &t}, {.tensor = &t}, {.tensor = &t}}, two[2] = {{.tensor = &t}, {.tensor = &t}};
  weft_remote_id o2[2] = {new_id(), new_id()}, o1[1] = {new_id()};
  weft_status st = exec(task, ctx + 1000, "nope", 3, three, 2, o2, 0, err, sizeof err);
  snprintf(want, sizeof want, "context %llu not found on rank %d", (unsigned long long)ctx + 1000, task);
  if (st != WEFT_ERR_NOT_FOUND || !mp_contains(err, want)) mp_fail("context: %s: %s", weft_status_string(st), err);
  st = exec(task, ctx, "nope", 3, three, 2, o2, 0, err, sizeof err);
  if (st != WEFT_ERR_NOT_FOUND || !mp_contains(err, "can't find program: nope"))
    mp_fail("program: %s: %s", weft_status_string(st), err);
  st = exec(task, ctx, "add", 3, three, 2, o2, 0, err, sizeof err);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !mp_contains(err, "result count"))
    mp_fail("result count: %s: %s", weft_status_string(st), err);
  st = exec(task, ctx, "add", 3, three, 1, o1, 0, err, sizeof err);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !mp_contains(err, "expected 2 arguments, got 3"))
    mp_fail("argument count: %s: %s", weft_status_string(st), err);
  st = exec(task, ctx, "add", 2, two, 1, o1, 0, err, sizeof err);
  if (st != WEFT_ERR_NOT_FOUND || !mp_contains(err, "can't find device"))
    mp_fail("device: %s: %s", weft_status_string(st), err);
  mp_case_end();
}

static void chained(int task, uint64_t ctx) {
  mp_case("chained calls on a pending output on rank %d", task);
  enum { n = 1000 };
  static float x[n], y[n], ref[n];
  int64_t sh[1] = {n};
  for (int i = 0; i < n; i++) {
    x[i] = (float)(mp_hash((uint64_t)mp_rank, (uint64_t)i, 1) % 1000) / 8;
    y[i] = (float)(mp_hash((uint64_t)mp_rank, (uint64_t)i, 2) % 1000) / 8;
    ref[i] = 2 * x[i] + y[i];
  }
  weft_remote_id ix = new_id(), iy = new_id(), ih = new_id(), iz = new_id();
  put(task, ctx, ix, x, sh);
  put(task, ctx, iy, y, sh);
  weft_remote_input in1[1] = {{.id = ix}}, in2[2] = {{.id = ih}, {.id = iy}};
  weft_remote_call *c1, *c2;
  double t0 = mp_now();
  must(weft_remote_execute(mp_world, task, ctx, "slow", 1, in1, 1, &ih, 0, NULL, &c1), "slow");
  must(weft_remote_execute(mp_world, task, ctx, "add", 2, in2, 1, &iz, 0, NULL, &c2), "add");
  if (weft_remote_test(c1) != WEFT_IN_PROGRESS && mp_now() - t0 < 0.4)
    mp_fail("slow completed at once");
  fetch_check(task, ctx, iz, ref, n, "z = slow(x) + y"); /* issued before slow ends */
  char err[2048];
  if (done(c1, err, sizeof err) != WEFT_OK) mp_fail("slow: %s", err);
  if (done(c2, err, sizeof err) != WEFT_OK) mp_fail("add: %s", err);
  weft_remote_id del[4] = {ix, iy, ih, iz};
  weft_remote_call *d;
  must(weft_remote_delete(mp_world, task, ctx, 4, del, NULL, &d), "delete");
  if (done(d, err, sizeof err) != WEFT_OK) mp_fail("delete: %s", err);
  mp_case_end();
}

static void metadata(int task, uint64_t ctx) {
  mp_case("metadata of the last 2 of 3 outputs from rank %d", task);
  weft_remote_id o[3] = {new_id(), new_id(), new_id()};
  weft_remote_call *c;
  must(weft_remote_execute(mp_world, task, ctx, "split", 0, NULL, 3, o, 2, NULL, &c), "split");
  weft_tensor m0, m1, m2;
  if (weft_remote_wait(c, MP_WAIT_SECONDS) != WEFT_OK) mp_fail("split: %s", weft_remote_call_error(c));
  else if (weft_remote_call_meta(c, 0, &m0) != WEFT_OK || weft_remote_call_meta(c, 1, &m1) != WEFT_OK)
    mp_fail("no metadata");
  else if (m0.dtype != WEFT_DTYPE_INT8 || m0.ndim != 0 || m1.dtype != WEFT_DTYPE_FLOAT64 || m1.ndim != 3 ||
           m1.shape[0] != 2 || m1.shape[1] != 3 || m1.shape[2] != 4)
    mp_fail("metadata: (%d, %d-d) and (%d, %d-d), want outputs 1 and 2's", (int)m0.dtype, m0.ndim, (int)m1.dtype,
            m1.ndim);
  else if (weft_remote_call_meta(c, 2, &m2) != WEFT_ERR_INVALID_ARGUMENT)
    mp_fail("metadata for a third output");
  weft_remote_call_free(c);
  mp_case_end();
}

static void big_add(int task, uint64_t ctx) {
  mp_case("fetch of add(a, b) on 1M float32 on rank %d equals a + b", task);
  size_t n = 1u << 20;
  float *a = mp_alloc(n * 4), *b = mp_alloc(n * 4), *ref = mp_alloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(int64_t)(mp_hash((uint64_t)mp_rank, i, 3) % 2001 - 1000) / 16;
    b[i] = (float)(int64_t)(mp_hash((uint64_t)mp_rank, i, 4) % 2001 - 1000) / 16;
    ref[i] = a[i] + b[i];
  }
  int64_t sh[1] = {(int64_t)n};
  weft_remote_id ia = new_id(), ib = new_id(), ic = new_id();
  put(task, ctx, ia, a, sh);
  put(task, ctx, ib, b, sh);
  weft_remote_input in[2] = {{.id = ia}, {.id = ib}};
  char err[2048];
  if (exec(task, ctx, "add", 2, in, 1, &ic, WEFT_DEVICE_CPU, err, sizeof err) != WEFT_OK) mp_fail("add: %s", err);
  fetch_check(task, ctx, ic, ref, n, "a + b");
  free(a), free(b), free(ref);
  mp_case_end();

  mp_case("delete names every unknown id on rank %d", task);
  weft_remote_id ids[4] = {ia, {mp_rank, 9999991}, ib, {mp_rank, 9999992}};
  weft_remote_call *d;
  must(weft_remote_delete(mp_world, task, ctx, 4, ids, NULL, &d), "delete");
  char want[128];
  snprintf(want, sizeof want, "2 unknown ids: {%d, 9999991}, {%d, 9999992}", mp_rank, mp_rank);
  weft_status st = done(d, err, sizeof err);
  if (st != WEFT_ERR_NOT_FOUND || !mp_contains(err, want)) mp_fail("delete: %s: %s", weft_status_string(st), err);
  must(weft_remote_delete(mp_world, task, ctx, 1, &ic, NULL, &d), "delete");
  if (done(d, err, sizeof err) != WEFT_OK) mp_fail("delete of a known id: %s", err);
  mp_case_end();
}

static void idle(int task) {
  mp_case("a context on rank %d collected after 1 s idle", task);
  uint64_t c;
  must(weft_remote_context_create(mp_world, task, 1.0, &c), "context");
  if (weft_remote_keepalive(mp_world, task, c) != WEFT_OK) mp_fail("keepalive: %s", weft_last_error());
  mp_sleep_ms(2500);
  weft_status st = weft_remote_keepalive(mp_world, task, c);
  if (st != WEFT_ERR_NOT_FOUND || !mp_contains(weft_last_error(), "collected"))
    mp_fail("after 2.5 s idle: %s: %s", weft_status_string(st), weft_last_error());
  mp_case_end();
}

static int run_default(void) {
  mp_setup();
  /* rank 1 serves only 0.5 s after rank 0 asks it for a context: the frames
   * wait in rank 1's engine until its first weft_remote_* call */
  if (mp_rank == 1) mp_sleep_ms(500);
  register_all();
  uint64_t early = 0;
  if (mp_rank == 0) {
    mp_case("a call that reaches rank 1 before it serves waits for it");
    double t0 = mp_now();
    if (weft_remote_context_create(mp_world, 1 % mp_size, 0, &early) != WEFT_OK)
      mp_fail("context: %s", weft_last_error());
    else mp_say("INFO rank 0: the early context came after %.2f s", mp_now() - t0);
    mp_case_end();
  }
  if (!mp_same_everywhere("remote.registered", 1)) mp_fatal("sync failed");
  if (mp_rank == 0 && early) must(weft_remote_context_close(mp_world, 1 % mp_size, early), "close the early context");
  int task = (mp_rank + 1) % mp_size;
  uint64_t ctx;
  mp_case("context on rank %d", task);
  must(weft_remote_context_create(mp_world, task, 0, &ctx), "context");
  mp_case_end();
  check_order(task, ctx);
  chained(task, ctx);
  metadata(task, ctx);
  big_add(task, ctx);
  idle(task);
  mp_case("a call to this rank itself");
  {
    uint64_t own;
    must(weft_remote_context_create(mp_world, mp_rank, 0, &own), "context on this rank");
    enum { n = 7 };
    float a[n], b[n], ref[n];
    int64_t sh[1] = {n};
    for (int i = 0; i < n; i++) a[i] = (float)(i * mp_rank), b[i] = 0.5f * (float)i, ref[i] = a[i] + b[i];
    weft_tensor tb = vec(b, sh);
    weft_remote_id ia = new_id(), ic = new_id();
    put(mp_rank, own, ia, a, sh);
    weft_remote_input in[2] = {{.id = ia}, {.tensor = &tb}};
    char err[2048];
    if (exec(mp_rank, own, "add", 2, in, 1, &ic, WEFT_DEVICE_CPU, err, sizeof err) != WEFT_OK) mp_fail("add: %s", err);
    fetch_check(mp_rank, own, ic, ref, n, "a + b on this rank");
    must(weft_remote_context_close(mp_world, mp_rank, own), "close");
  }
  mp_case_end();
  if (mp_size >= 3) {
    mp_case("rank 2 fetches from rank 1 an id rank 0 puts there later");
    uint64_t local = 0, all[8] = {0};
    uint64_t shared_ctx = 0;
    if (mp_rank == 0) {
      weft_remote_id id = new_id();
      local = id.local;
      shared_ctx = ctx; /* rank 0's context on rank 1 */
    }
    uint64_t ctxs[8] = {0};
    if (!mp_allgather_u64("remote.late.id", local, all) || !mp_allgather_u64("remote.late.ctx", shared_ctx, ctxs))
      mp_fatal("allgather failed");
    float v[4] = {4, 3, 2, 1};
    int64_t sh[1] = {4};
    weft_remote_id late = {0, all[0]};
    weft_remote_call *f = NULL;
    if (mp_rank == 2) must(weft_remote_fetch(mp_world, 1, ctxs[0], late, NULL, &f), "fetch");
    if (!mp_same_everywhere("remote.late.asked", 1)) mp_fatal("sync failed");
    if (mp_rank == 2 && weft_remote_test(f) != WEFT_IN_PROGRESS) mp_fail("the fetch completed before the put");
    if (!mp_same_everywhere("remote.late.checked", 1)) mp_fatal("sync failed");
    if (mp_rank == 0) put(1, ctx, late, v, sh);
    if (mp_rank == 2) {
      weft_tensor t;
      if (weft_remote_wait(f, MP_WAIT_SECONDS) != WEFT_OK) mp_fail("fetch: %s", weft_remote_call_error(f));
      else if (weft_remote_call_output(f, &t) != WEFT_OK || memcmp(t.data, v, sizeof v) != 0) mp_fail("fetched data");
      weft_remote_call_free(f);
    }
    mp_case_end();
  }
  mp_case("close; every store empty");
  if (!mp_same_everywhere("remote.before.close", 1)) mp_fatal("sync failed");
  must(weft_remote_context_close(mp_world, task, ctx), "close");
  if (!mp_same_everywhere("remote.closed", 1)) mp_fatal("sync failed");
  weft_remote_stats s;
  must(weft_remote_stats_get(mp_world, &s), "stats");
  if (s.objects || s.contexts || s.calls_pending)
    mp_fail("%lld objects, %lld contexts, %lld calls left", (long long)s.objects, (long long)s.contexts,
            (long long)s.calls_pending);
  mp_case_end();
  return mp_teardown();
}

static int finish_survivor(void) {
  mp_finalize_within(3.0);
  return mp_exit_status();
}

static int run_kill_callee(void) {
  mp_setup();
  register_all();
  if (!mp_same_everywhere("remote.registered", 1)) mp_fatal("sync failed");
  if (mp_rank == 1) {
    mp_case("rank 1: dies by SIGKILL inside a call");
    for (;;) mp_sleep_ms(1000); /* the call's worker thread kills the process */
  }
  mp_case("a call to rank 1 fails naming it when rank 1 dies mid-call");
  uint64_t ctx;
  must(weft_remote_context_create(mp_world, 1, 0, &ctx), "context");
  float x[2] = {1, 2};
  int64_t sh[1] = {2};
  weft_tensor t = vec(x, sh);
  weft_remote_input in[1] = {{.tensor = &t}};
  weft_remote_id o = new_id();
  weft_remote_call *c;
  double t0 = mp_now();
  must(weft_remote_execute(mp_world, 1, ctx, "die", 1, in, 1, &o, 0, NULL, &c), "call"); /* (a second one waits) */
  weft_status st = weft_remote_wait(c, 12);
  mp_expect_lost(st, weft_remote_call_error(c), t0, 10, "rank 1", "the call");
  weft_remote_call_free(c);
  mp_case_end();
  return finish_survivor();
}

static int run_kill_caller(void) {
  mp_setup();
  register_all();
  int dying = mp_size - 1;
  uint64_t ctx;
  float x[2] = {1, 2};
  int64_t sh[1] = {2};
  if (mp_rank != 0) {
    must(weft_remote_context_create(mp_world, 0, 0, &ctx), "context");
    for (int i = 0; i < 3; i++) put(0, ctx, new_id(), x, sh);
  }
  if (!mp_same_everywhere("remote.put", 1)) mp_fatal("sync failed");
  weft_remote_stats s0, s1;
  must(weft_remote_stats_get(mp_world, &s0), "stats");
  if (!mp_same_everywhere("remote.counted", 1)) mp_fatal("sync failed");
  if (mp_rank == dying) {
    mp_case("rank %d: dies by SIGKILL with objects on rank 0", mp_rank);
    mp_die_by_sigkill();
  }
  mp_case("rank 0 frees the dead caller's objects after the grace, keeps the others'");
  if (mp_rank == 0) {
    double t0 = mp_now();
    do {
      mp_sleep_ms(100);
      must(weft_remote_stats_get(mp_world, &s1), "stats");
    } while (s1.orphans_freed == 0 && mp_now() - t0 < 10);
    if (s1.orphans_freed != 3 || s1.objects != s0.objects - 3 || s1.contexts != s0.contexts - 1)
      mp_fail("freed %lld (want 3), objects %lld (were %lld), contexts %lld (were %lld)", (long long)s1.orphans_freed,
              (long long)s1.objects, (long long)s0.objects, (long long)s1.contexts, (long long)s0.contexts);
    else mp_say("INFO rank 0: rank %d's 3 objects freed after %.2f s", dying, mp_now() - t0);
  }
  mp_case_end();
  return finish_survivor();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--kill-callee")) return mp_supervised(run_kill_callee);
  if (argc > 1 && !strcmp(argv[1], "--kill-caller")) return mp_supervised(run_kill_caller);
  return run_default();
}
