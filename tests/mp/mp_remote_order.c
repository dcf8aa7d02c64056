/* mp_remote_order.c - the order of one caller's remote frames across the two
 * ways they take between ranks of one host: the remote rings of the host
 * segment (small frames) and the engine's path (frames larger than a ring
 * slot, a full ring, WEFT_REMOTE_MAILBOX=0). Every rank calls its neighbour
 * (rank + 1 mod size), so each rank has exactly one caller:
 *  - N calls of "rec" issued without waiting, each with one int64 tensor
 *    whose first element is the call's number; every 5th one is 4800 bytes
 *    (over a slot, inline in its frame: the engine's path), the others 8
 *    (a slot). The callee runs jobs one at a time in the order their frames
 *    arrive and records the numbers: afterwards each callee checks that it
 *    saw 0..N-1 in order;
 *  - put of a 4800-byte tensor (engine's path) immediately followed by a
 *    delete of its id (a slot), neither waited for in between: the delete
 *    must find the object (were it acted on first: "unknown id").
 *  - first, rank 0 -> rank 1 before rank 1 serves (its first weft_remote_*
 *    call comes 0.6 s later, so nothing drains its rings meanwhile): a
 *    context create (another thread; it waits), then a put of 8 bytes (a
 *    slot), a put of 4800 bytes (the engine's path: held by rank 1's
 *    engine) and a delete of both (the engine's path, behind it): rank 1
 *    must act on the ring's frames first (the context is id 1 on a fresh
 *    core), so all succeed.
 * remote_paths.sh runs it and reads which way the frames went. */
#include "mp_harness.c"
#include "mp_remote_util.c"

enum { N = 400, BIG = 600 /* int64: 4800 bytes */, PUTS = 40 };

static int64_t g_seen[N];
static int g_nseen, g_overflow;

static weft_status fn_rec(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)out;
  int64_t v = in[0].ndim == 1 && in[0].shape[0] > 0 ? ((const int64_t *)in[0].data)[0] : -1;
  if (g_nseen < N) g_seen[g_nseen++] = v; /* the worker thread only */
  else g_overflow = 1;
  return WEFT_OK;
}

static void *create_ctx(void *arg) {
  uint64_t *ctx = arg;
  if (weft_remote_context_create(mp_world, 1, 0, ctx) != WEFT_OK) *ctx = 0;
  return NULL;
}

static void early(void) {
  if (mp_rank == 1) mp_sleep_ms(600); /* then registers: its core drains its rings only from then on */
  if (mp_rank != 0) return;
  mp_case("frames to rank 1 before it serves, through its ring and its engine, acted on in the order sent");
  uint64_t ctx = 0;
  pthread_t th;
  if (pthread_create(&th, NULL, create_ctx, &ctx)) mp_fatal("pthread_create");
  weft_remote_stats st = {0};
  double t0 = mp_now();
  do { /* its CTX_CREATE is on its way before the puts */
    mp_sleep_ms(5);
    must(weft_remote_stats_get(mp_world, &st), "stats");
  } while (st.calls_pending < 1 && mp_now() - t0 < 5);
  mp_sleep_ms(50);
  static int64_t small[1] = {7}, big[BIG];
  int64_t s1[1] = {1}, sb[1] = {BIG};
  weft_tensor ts = {WEFT_DTYPE_INT64, 1, s1, small, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor tb = {WEFT_DTYPE_INT64, 1, sb, big, WEFT_DEVICE_CPU, 0, NULL};
  weft_remote_id ids[2] = {new_id(), new_id()};
  weft_remote_call *c[3];
  must(weft_remote_put(mp_world, 1, 1, &ts, ids[0], NULL, &c[0]), "put small");
  must(weft_remote_put(mp_world, 1, 1, &tb, ids[1], NULL, &c[1]), "put big");
  must(weft_remote_delete(mp_world, 1, 1, 2, ids, NULL, &c[2]), "delete");
  pthread_join(th, NULL);
  if (ctx != 1) mp_fail("the context on rank 1 has id %llu (a fresh core's first is 1)", (unsigned long long)ctx);
  const char *what[3] = {"put of 8 bytes", "put of 4800 bytes", "delete of both"};
  for (int i = 0; i < 3; i++) {
    weft_status s = weft_remote_wait(c[i], MP_WAIT_SECONDS);
    if (s != WEFT_OK) mp_fail("%s: %s: %s", what[i], weft_status_string(s), weft_remote_call_error(c[i]));
    weft_remote_call_free(c[i]);
  }
  if (ctx) must(weft_remote_context_close(mp_world, 1, ctx), "close");
  mp_case_end();
}

static void calls(int task, uint64_t ctx) {
  mp_case("%d calls to rank %d, every 5th over a ring slot, issued before any is waited for", N, task);
  static int64_t data[N][BIG];
  static int64_t shapes[N][1];
  static weft_tensor t[N];
  static weft_remote_call *c[N];
  for (int i = 0; i < N; i++) {
    shapes[i][0] = i % 5 == 3 ? BIG : 1;
    data[i][0] = i;
    for (int k = 1; k < shapes[i][0]; k++) data[i][k] = (int64_t)mp_hash((uint64_t)mp_rank, (uint64_t)i, k);
    t[i] = (weft_tensor){WEFT_DTYPE_INT64, 1, shapes[i], data[i], WEFT_DEVICE_CPU, 0, NULL};
    weft_remote_input in[1] = {{.tensor = &t[i]}};
    must(weft_remote_execute(mp_world, task, ctx, "rec", 1, in, 0, NULL, 0, NULL, &c[i]), "execute rec");
  }
  for (int i = 0; i < N; i++) {
    weft_status st = weft_remote_wait(c[i], MP_WAIT_SECONDS);
    if (st != WEFT_OK) mp_fail("call %d: %s: %s", i, weft_status_string(st), weft_remote_call_error(c[i]));
    weft_remote_call_free(c[i]);
  }
  mp_case_end();
}

static void put_delete(int task, uint64_t ctx) {
  mp_case("%d puts over a ring slot, each followed at once by a delete of its id", PUTS);
  static int64_t big[BIG];
  int64_t sh[1] = {BIG};
  for (int k = 0; k < BIG; k++) big[k] = k;
  weft_tensor t = {WEFT_DTYPE_INT64, 1, sh, big, WEFT_DEVICE_CPU, 0, NULL};
  for (int i = 0; i < PUTS; i++) {
    weft_remote_id id = new_id();
    weft_remote_call *p, *d;
    must(weft_remote_put(mp_world, task, ctx, &t, id, NULL, &p), "put");
    must(weft_remote_delete(mp_world, task, ctx, 1, &id, NULL, &d), "delete");
    weft_status sp = weft_remote_wait(p, MP_WAIT_SECONDS), sd = weft_remote_wait(d, MP_WAIT_SECONDS);
    if (sp != WEFT_OK) mp_fail("put %d: %s: %s", i, weft_status_string(sp), weft_remote_call_error(p));
    if (sd != WEFT_OK) mp_fail("delete %d after its put: %s: %s", i, weft_status_string(sd), weft_remote_call_error(d));
    weft_remote_call_free(p);
    weft_remote_call_free(d);
  }
  mp_case_end();
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  mp_setup();
  if (mp_rank == 0) must(weft_remote_register(mp_world, "rec", 1, 0, fn_rec, NULL), "register rec");
  early();
  if (mp_rank != 0) must(weft_remote_register(mp_world, "rec", 1, 0, fn_rec, NULL), "register rec");
  if (!mp_same_everywhere("order.registered", 1)) mp_fatal("sync failed");
  int task = (mp_rank + 1) % mp_size;
  uint64_t ctx;
  must(weft_remote_context_create(mp_world, task, 0, &ctx), "context");
  calls(task, ctx);
  put_delete(task, ctx);
  must(weft_remote_context_close(mp_world, task, ctx), "close");
  if (!mp_same_everywhere("order.done", 1)) mp_fatal("sync failed");
  mp_case("rank %d ran its caller's %d calls in the order they were made", mp_rank, N);
  if (g_nseen != N || g_overflow) mp_fail("it ran %d calls (overflow %d), want %d", g_nseen, g_overflow, N);
  for (int i = 0; i < g_nseen; i++)
    if (g_seen[i] != i) {
      mp_fail("its call %d was number %lld (call %d came %s)", i, (long long)g_seen[i], i,
              i % 5 == 3 ? "over a slot" : "in a slot");
      break;
    }
  mp_case_end();
  return mp_teardown();
}
