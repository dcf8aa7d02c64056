/* mp_remote_bulk.c - remote execution's data path for large tensors
 * (remote/bulk.c): tensors of at least 64 KiB travel as point-to-point
 * transfers, not inline in their frame.
 *
 * Default mode (np 2, 3): every rank calls its neighbour (rank + 1 mod
 * size), so every rank sends and receives bulk bytes at once. For uint8
 * tensors of 0, 64 KiB - 1, 64 KiB, 64 KiB + 1, 1 MiB + 3 and 64 MiB
 * bytes (the last over WEFT_MAX_MESSAGE_BYTES: it cannot go inline): put
 * p; inc(tensor inline) -> x; inc(x) -> y issued while x is pending; fetch
 * p and y (y through an allocator) against the data and data + 2 computed
 * here; delete; the same for 64 MiB with this rank itself (inline, no
 * frame: over WEFT_MAX_MESSAGE_BYTES too); the stores end empty.
 * --kill-callee (np 2; supervised): rank 1 dies by SIGKILL while rank 0
 *  puts and fetches 64 MiB tensors in a loop: the call in flight fails
 *  within 10 s naming rank 1. */
#include "mp_harness.c"
#include "mp_remote_util.c"

#define BULK_MIN 65536
#define BIG ((size_t)64 << 20)

static weft_status fn_inc(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  uint8_t *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_UINT8, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  size_t n = mp_numel(in[0].ndim, in[0].shape);
  const uint8_t *x = in[0].data;
  for (size_t i = 0; i < n; i++) o[i] = (uint8_t)(x[i] + 1);
  return WEFT_OK;
}


static size_t g_alloc_calls;
static void *my_alloc(size_t bytes, void *ctx) {
  (void)ctx;
  g_alloc_calls++;
  return malloc(bytes ? bytes : 1);
}

/* Waits for c; 0 and the fetched tensor (fetch) or a failure. */
static int finish(weft_remote_call *c, const char *what, size_t n, weft_tensor *out) {
  weft_status st = weft_remote_wait(c, MP_WAIT_SECONDS);
  if (st != WEFT_OK) return mp_fail("%s (%zu bytes): %s: %s", what, n, weft_status_string(st), weft_remote_call_error(c));
  if (out && weft_remote_call_output(c, out) != WEFT_OK) return mp_fail("%s: no output", what);
  return 0;
}

static void check_bytes(const weft_tensor *t, const uint8_t *data, size_t n, int add, const char *what) {
  if (t->dtype != WEFT_DTYPE_UINT8 || t->ndim != 1 || (size_t)t->shape[0] != n) {
    mp_fail("%s: fetched dtype %d ndim %d shape %lld, want uint8 [%zu]", what, (int)t->dtype, t->ndim,
            t->ndim ? (long long)t->shape[0] : -1LL, n);
    return;
  }
  const uint8_t *got = t->data;
  for (size_t i = 0; i < n; i++)
    if (got[i] != (uint8_t)(data[i] + add)) {
      mp_fail("%s: byte %zu of %zu is %u, want %u", what, i, n, got[i], (uint8_t)(data[i] + add));
      return;
    }
}

static void one_size(int task, uint64_t ctx, size_t n, int k) {
  mp_case("%zu bytes to rank %d: put, inc inline, inc on the pending output, fetch", n, task);
  uint8_t *data = mp_alloc(n ? n : 1);
  for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(mp_hash((uint64_t)mp_rank, i, (uint64_t)k) & 0xff);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {WEFT_DTYPE_UINT8, 1, shape, data, WEFT_DEVICE_CPU, 0, NULL};
  weft_remote_id p = new_id(), x = new_id(), y = new_id();
  weft_remote_input in_t[1] = {{.tensor = &t}}, in_x[1] = {{.id = x}};
  weft_remote_call *cp, *cx, *cy, *fp, *fy, *cd;
  must(weft_remote_put(mp_world, task, ctx, &t, p, NULL, &cp), "put");
  must(weft_remote_execute(mp_world, task, ctx, "inc", 1, in_t, 1, &x, 0, NULL, &cx), "inc inline");
  must(weft_remote_execute(mp_world, task, ctx, "inc", 1, in_x, 1, &y, 0, NULL, &cy), "inc chained");
  weft_remote_options ao = WEFT_REMOTE_OPTIONS_INIT;
  ao.alloc = my_alloc;
  must(weft_remote_fetch(mp_world, task, ctx, p, NULL, &fp), "fetch p");
  size_t allocs = g_alloc_calls;
  must(weft_remote_fetch(mp_world, task, ctx, y, &ao, &fy), "fetch y");
  weft_tensor tp, ty;
  if (!finish(cp, "put", n, NULL) && !finish(cx, "inc inline", n, NULL) && !finish(cy, "inc chained", n, NULL)) {
    if (!finish(fp, "fetch p", n, &tp)) check_bytes(&tp, data, n, 0, "fetch p");
    if (!finish(fy, "fetch y", n, &ty)) {
      check_bytes(&ty, data, n, 2, "fetch y");
      if (g_alloc_calls != allocs + 1) mp_fail("the allocator was called %zu times, want 1", g_alloc_calls - allocs);
      free(ty.data);
    }
  }
  weft_remote_call_free(cp), weft_remote_call_free(cx), weft_remote_call_free(cy);
  weft_remote_call_free(fp), weft_remote_call_free(fy);
  weft_remote_id ids[3] = {p, x, y};
  must(weft_remote_delete(mp_world, task, ctx, 3, ids, NULL, &cd), "delete");
  finish(cd, "delete", n, NULL);
  weft_remote_call_free(cd);
  free(data);
  mp_case_end();
}

static int run_default(void) {
  mp_setup();
  must(weft_remote_register(mp_world, "inc", 1, 1, fn_inc, NULL), "register inc");
  if (!mp_same_everywhere("remote.registered", 1)) mp_fatal("sync failed");
  int task = (mp_rank + 1) % mp_size;
  uint64_t ctx;
  must(weft_remote_context_create(mp_world, task, 0, &ctx), "context");
  const size_t sizes[] = {0, BULK_MIN - 1, BULK_MIN, BULK_MIN + 1, ((size_t)1 << 20) + 3, BIG};
  for (int k = 0; k < (int)(sizeof sizes / sizeof *sizes); k++) one_size(task, ctx, sizes[k], k);
  must(weft_remote_context_close(mp_world, task, ctx), "close");
  uint64_t self;
  must(weft_remote_context_create(mp_world, mp_rank, 0, &self), "context on this rank");
  one_size(mp_rank, self, BIG, 99);
  must(weft_remote_context_close(mp_world, mp_rank, self), "close");
  if (!mp_same_everywhere("remote.done", 1)) mp_fatal("sync failed");
  mp_case("the store is empty and nothing is pending");
  weft_remote_stats s;
  must(weft_remote_stats_get(mp_world, &s), "stats");
  if (s.objects || s.contexts || s.calls_pending)
    mp_fail("objects %lld contexts %lld calls %lld", (long long)s.objects, (long long)s.contexts,
            (long long)s.calls_pending);
  mp_case_end();
  return mp_teardown();
}

static int run_kill_callee(void) {
  mp_setup();
  must(weft_remote_register(mp_world, "inc", 1, 1, fn_inc, NULL), "register inc");
  if (!mp_same_everywhere("remote.registered", 1)) mp_fatal("sync failed");
  if (mp_rank == 1) {
    mp_case("rank 1: dies by SIGKILL while 64 MiB tensors come and go");
    mp_sleep_ms(700);
    mp_die_by_sigkill();
  }
  mp_case("a 64 MiB put or fetch to rank 1 fails naming it when rank 1 dies");
  uint64_t ctx;
  must(weft_remote_context_create(mp_world, 1, 0, &ctx), "context");
  uint8_t *data = mp_alloc(BIG);
  memset(data, 7, BIG);
  int64_t shape[1] = {(int64_t)BIG};
  weft_tensor t = {WEFT_DTYPE_UINT8, 1, shape, data, WEFT_DEVICE_CPU, 0, NULL};
  double t0 = mp_now(), tk = 0;
  int calls = 0;
  weft_status st = WEFT_OK;
  char msg[2048] = "";
  while (st == WEFT_OK && mp_now() - t0 < 30) {
    weft_remote_id id = new_id();
    weft_remote_call *c;
    tk = mp_now();
    st = weft_remote_put(mp_world, 1, ctx, &t, id, NULL, &c);
    if (st == WEFT_OK) {
      st = weft_remote_wait(c, 12);
      snprintf(msg, sizeof msg, "%s", weft_remote_call_error(c));
      weft_remote_call_free(c);
    } else {
      snprintf(msg, sizeof msg, "%s", weft_last_error());
    }
    calls++;
    if (st != WEFT_OK) break;
    tk = mp_now();
    if ((st = weft_remote_fetch(mp_world, 1, ctx, id, NULL, &c)) == WEFT_OK) {
      st = weft_remote_wait(c, 12);
      snprintf(msg, sizeof msg, "%s", weft_remote_call_error(c));
      weft_remote_call_free(c);
    }
    calls++;
  }
  char what[64];
  snprintf(what, sizeof what, "call %d (the last)", calls);
  mp_expect_lost(st, msg, tk, 10, "rank 1", what);
  free(data);
  mp_case_end();
  mp_finalize_within(3.0);
  return mp_exit_status();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--kill-callee")) return mp_supervised(run_kill_callee);
  return run_default();
}
