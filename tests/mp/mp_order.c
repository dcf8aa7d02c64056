/* mp_order.c - negotiation under disorder and concurrency, and completion
 * callbacks:
 *  - opposite submission orders: even ranks submit 20 mixed tensors in one
 *    order and odd ranks in the reverse order, all before any wait;
 *  - 4 threads x 50 mixed collectives submitted concurrently (uniquely named,
 *    several in flight per thread, batch order reversed on odd ranks);
 *  - completion callbacks: each runs exactly once, on the engine thread, with
 *    the request's final status (also for a failed request), and a callback
 *    may free its own request.
 * Every result is checked against a reference. On one rank there is no
 * other order: the first case then checks only 20 mixed tensors in flight
 * at once (and says so), and the failing callback comes from a 0-d
 * allgather, which one rank gets wrong alone; the threads and callbacks are
 * the same.
 *
 * Usage (under weftrun -np N): mp_order [--seed S] */
#include "mp_harness.c"

static uint64_t g_seed = 11;

/* ----------------------------------------------------------- mixed ops */
/* One collective of a mixed workload, with what it needs to be checked. */
typedef struct mixed_op {
  int kind; /* 0 allreduce, 1 allgather, 2 broadcast, 3 alltoall, 4 reducescatter, 5 barrier */
  char name[64];
  uint64_t seed;
  int param;
  int64_t shape[2];
  int64_t splits[16];
  void *in, *out;
  weft_request *req;
} mixed_op;

#define MIXED_KINDS 6

/* Small integer inputs (sums over ranks are exact in every type used). */
static int64_t mixed_val(int r, size_t i, uint64_t seed) { return (int64_t)(mp_hash((uint64_t)r, i, seed) % 1000); }

static int64_t a2a_rows(int from, int to, int param) { return (from + to + param) % 3; }

static void mixed_submit(mixed_op *m, int kind, int param, const char *name, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->param = param;
  m->seed = seed;
  snprintf(m->name, sizeof m->name, "%s", name);
  weft_status st = WEFT_OK;
  switch (kind) {
    case 0: { /* int32 sum, count 1 + param */
      m->shape[0] = 1 + param;
      m->in = mp_alloc((size_t)m->shape[0] * 4);
      for (int64_t i = 0; i < m->shape[0]; i++)
        mp_set_i(WEFT_DTYPE_INT32, m->in, (size_t)i, mixed_val(mp_rank, (size_t)i, seed));
      weft_tensor t = {WEFT_DTYPE_INT32, 1, m->shape, m->in, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &m->req);
      break;
    }
    case 1: { /* float64 rows (rank + param) % 3, inner 2 */
      m->shape[0] = (mp_rank + param) % 3;
      m->shape[1] = 2;
      m->in = mp_alloc((size_t)m->shape[0] * 2 * 8);
      mp_fill(WEFT_DTYPE_FLOAT64, m->in, 0, (size_t)m->shape[0] * 2, mp_rank, 0, seed);
      weft_tensor t = {WEFT_DTYPE_FLOAT64, 2, m->shape, m->in, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_allgather(mp_group, name, &t, NULL, &m->req);
      break;
    }
    case 2: { /* uint8, root param % size, count 20 + param */
      m->shape[0] = 20 + param;
      m->in = mp_alloc((size_t)m->shape[0]);
      int root = param % mp_size;
      if (mp_rank == root)
        mp_fill(WEFT_DTYPE_UINT8, m->in, 0, (size_t)m->shape[0], root, 0, seed);
      else
        memset(m->in, 0xEE, (size_t)m->shape[0]);
      weft_tensor t = {WEFT_DTYPE_UINT8, 1, m->shape, m->in, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_broadcast(mp_group, name, &t, root, NULL, &m->req);
      break;
    }
    case 3: { /* int16 alltoall, uneven splits */
      int64_t rows = 0;
      for (int j = 0; j < mp_size; j++) rows += (m->splits[j] = a2a_rows(mp_rank, j, param));
      m->shape[0] = rows;
      m->in = mp_alloc((size_t)rows * 2);
      mp_fill(WEFT_DTYPE_INT16, m->in, 0, (size_t)rows, mp_rank, 0, seed);
      weft_tensor t = {WEFT_DTYPE_INT16, 1, m->shape, m->in, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_alltoall(mp_group, name, &t, m->splits, NULL, &m->req);
      break;
    }
    case 4: { /* float32 sum reducescatter, dim0 5 + param % 7 */
      int64_t dim0 = 5 + param % 7, base = dim0 / mp_size, extra = dim0 % mp_size;
      m->shape[0] = dim0;
      m->in = mp_alloc((size_t)dim0 * 4);
      for (int64_t i = 0; i < dim0; i++)
        mp_set_f(WEFT_DTYPE_FLOAT32, m->in, (size_t)i, (double)mixed_val(mp_rank, (size_t)i, seed));
      m->shape[1] = base + (mp_rank < extra); /* the output's rows */
      m->out = mp_alloc((size_t)m->shape[1] * 4);
      weft_tensor in = {WEFT_DTYPE_FLOAT32, 1, m->shape, m->in, WEFT_DEVICE_CPU, 0, NULL};
      weft_tensor out = {WEFT_DTYPE_FLOAT32, 1, &m->shape[1], m->out, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_reducescatter(mp_group, name, &in, &out, WEFT_OP_SUM, NULL, &m->req);
      break;
    }
    default: st = weft_barrier(mp_group, name, NULL, &m->req); break;
  }
  mp_submitted(st, &m->req, name);
}

/* Waits for and checks one mixed op; frees it. Returns 1 if correct. */
static int mixed_finish(mixed_op *m) {
  int ok = mp_wait_ok(m->req, m->name);
  weft_tensor out;
  if (ok && m->kind != 5 && weft_request_output(m->req, &out) != WEFT_OK)
    ok = mp_fail("%s: weft_request_output failed", m->name);
  if (ok) switch (m->kind) {
      case 0:
        for (int64_t i = 0; ok && i < m->shape[0]; i++) {
          int64_t want = 0;
          for (int r = 0; r < mp_size; r++) want += mixed_val(r, (size_t)i, m->seed);
          int64_t got = mp_get_i(WEFT_DTYPE_INT32, m->in, (size_t)i);
          if (got != want)
            ok = mp_fail("%s: element %lld is %lld, expected %lld", m->name, (long long)i, (long long)got,
                         (long long)want);
        }
        break;
      case 1: {
        size_t off = 0;
        int64_t total = 0;
        for (int r = 0; r < mp_size; r++) total += (r + m->param) % 3;
        if (out.ndim != 2 || out.shape[0] != total || out.shape[1] != 2)
          ok = mp_fail("%s: output shape wrong", m->name);
        for (int r = 0; ok && r < mp_size; r++) {
          size_t n = (size_t)((r + m->param) % 3) * 2;
          ok = mp_check_fill(WEFT_DTYPE_FLOAT64, out.data, off, n, r, 0, m->seed, m->name);
          off += n;
        }
        break;
      }
      case 2:
        ok = mp_check_fill(WEFT_DTYPE_UINT8, m->in, 0, (size_t)m->shape[0], m->param % mp_size, 0, m->seed, m->name);
        break;
      case 3: {
        size_t off = 0;
        for (int r = 0; ok && r < mp_size; r++) {
          int64_t first = 0;
          for (int k = 0; k < mp_rank; k++) first += a2a_rows(r, k, m->param);
          size_t n = (size_t)a2a_rows(r, mp_rank, m->param);
          ok = mp_check_fill(WEFT_DTYPE_INT16, out.data, off, n, r, (size_t)first, m->seed, m->name);
          off += n;
        }
        break;
      }
      case 4: {
        int64_t dim0 = m->shape[0], base = dim0 / mp_size, extra = dim0 % mp_size;
        int64_t first = mp_rank * base + (mp_rank < extra ? mp_rank : extra);
        for (int64_t k = 0; ok && k < m->shape[1]; k++) {
          double want = 0;
          for (int r = 0; r < mp_size; r++) want += (double)mixed_val(r, (size_t)(first + k), m->seed);
          double got = mp_get_f(WEFT_DTYPE_FLOAT32, m->out, (size_t)k);
          if (got != want) ok = mp_fail("%s: row %lld is %g, expected %g", m->name, (long long)(first + k), got, want);
        }
        break;
      }
      default: break;
    }
  weft_request_free(m->req);
  free(m->in);
  free(m->out);
  return ok;
}

/* ------------------------------------------------------------- orders */
static void test_opposite_orders(void) {
  enum { N = 20 };
  mixed_op ops[N];
  if (mp_size >= 2) mp_case("opposite submission orders: 20 tensors, reversed on odd ranks");
  else mp_case("20 mixed tensors submitted before any wait (one rank: no opposite order)");
  for (int s = 0; s < N; s++) {
    int k = mp_rank % 2 ? N - 1 - s : s;
    char name[64];
    snprintf(name, sizeof name, "order.%d", k);
    mixed_submit(&ops[k], k % MIXED_KINDS, k, name, g_seed * 31 + (uint64_t)k);
  }
  for (int k = 0; k < N; k++) mixed_finish(&ops[k]);
  mp_case_end();
}

/* ------------------------------------------------------------- threads */
enum { NTHREADS = 4, OPS_PER_THREAD = 50, BATCH = 5 };

static void *thread_main(void *arg) {
  int t = (int)(intptr_t)arg;
  mp_case("thread %d: %d mixed collectives, %d in flight", t, OPS_PER_THREAD, BATCH);
  mixed_op ops[BATCH];
  for (int b = 0; b < OPS_PER_THREAD; b += BATCH) {
    for (int s = 0; s < BATCH; s++) {
      /* Odd ranks submit each batch backwards. */
      int k = mp_rank % 2 ? BATCH - 1 - s : s, i = b + k;
      char name[64];
      snprintf(name, sizeof name, "t%d.op%d", t, i);
      mixed_submit(&ops[k], (t + i) % MIXED_KINDS, i, name, g_seed * 1000 + (uint64_t)(t * 100 + i));
    }
    for (int k = 0; k < BATCH; k++) mixed_finish(&ops[k]);
  }
  mp_case_end();
  return NULL;
}

static void test_threads(void) {
  pthread_t th[NTHREADS];
  for (int t = 0; t < NTHREADS; t++)
    if (pthread_create(&th[t], NULL, thread_main, (void *)(intptr_t)t) != 0) mp_fatal("pthread_create failed");
  for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
}

/* ------------------------------------------------------------- callbacks */
typedef struct cb_slot {
  atomic_int calls;
  atomic_int status;
  atomic_int on_caller_thread;
  atomic_int freed_self; /* this slot's callback frees the request */
} cb_slot;

static pthread_t g_main_thread;
static atomic_int g_freed_count;

static void count_cb(weft_request *req, weft_status status, void *user) {
  cb_slot *s = user;
  int freed_self = atomic_load(&s->freed_self);
  atomic_store(&s->status, (int)status);
  if (pthread_equal(pthread_self(), g_main_thread)) atomic_store(&s->on_caller_thread, 1);
  if (freed_self) {
    weft_status st = weft_request_free(req);
    if (st != WEFT_OK) atomic_store(&s->status, 1000 + (int)st);
    atomic_fetch_add(&g_freed_count, 1);
  }
  /* Last: the waiting thread polls this counter, then reads (and reuses)
   * the slot, so nothing here may touch the slot after it. */
  atomic_fetch_add(&s->calls, 1);
}

/* Polls until every slot has been called (bounded), then a little longer to
 * catch a second invocation. */
static void await_callbacks(cb_slot *slots, int n, const char *what) {
  double end = mp_now() + MP_WAIT_SECONDS;
  for (int i = 0; i < n; i++)
    while (atomic_load(&slots[i].calls) == 0) {
      if (mp_now() > end) mp_fatal("%s: callback %d never ran", what, i);
      mp_sleep_ms(1);
    }
  mp_sleep_ms(100);
  for (int i = 0; i < n; i++) {
    if (atomic_load(&slots[i].calls) != 1)
      mp_fail("%s: callback %d ran %d times", what, i, atomic_load(&slots[i].calls));
    if (atomic_load(&slots[i].on_caller_thread)) mp_fail("%s: callback %d ran on the submitting thread", what, i);
  }
}

static void test_callbacks(void) {
  enum { N = 24 };
  static cb_slot slots[N];
  static int32_t bufs[N][64];
  g_main_thread = pthread_self();

  /* Callbacks alongside waits: exactly once each, status OK. */
  mp_case("callbacks: %d allreduces, each callback exactly once", N);
  memset(slots, 0, sizeof slots);
  weft_request *reqs[N];
  for (int i = 0; i < N; i++) {
    for (int e = 0; e < 64; e++) bufs[i][e] = (int32_t)mixed_val(mp_rank, (size_t)e, (uint64_t)i);
    int64_t shape[1] = {1 + i};
    weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, bufs[i], WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options opt = WEFT_OP_OPTIONS_INIT;
    opt.callback = count_cb;
    opt.user_data = &slots[i];
    char name[32];
    snprintf(name, sizeof name, "cb.wait.%d", i);
    weft_status st = weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, &opt, &reqs[i]);
    mp_submitted(st, &reqs[i], name);
  }
  for (int i = 0; i < N; i++) mp_wait_ok(reqs[i], "cb.wait");
  await_callbacks(slots, N, "cb.wait");
  for (int i = 0; i < N; i++) {
    if (atomic_load(&slots[i].status) != WEFT_OK)
      mp_fail("callback %d got status %d", i, atomic_load(&slots[i].status));
    if (weft_test(reqs[i]) != WEFT_OK) mp_fail("weft_test after completion is not WEFT_OK");
    for (int e = 0; e < 1 + i; e++) {
      int64_t want = 0;
      for (int r = 0; r < mp_size; r++) want += mixed_val(r, (size_t)e, (uint64_t)i);
      if (bufs[i][e] != want) {
        mp_fail("cb.wait.%d element %d is %d, expected %lld", i, e, bufs[i][e], (long long)want);
        break;
      }
    }
    weft_request_free(reqs[i]);
  }
  mp_case_end();

  /* Fire and forget: the callback frees its own request; nobody waits. */
  mp_case("callbacks: %d allreduces freed by their own callback", N);
  memset(slots, 0, sizeof slots);
  atomic_store(&g_freed_count, 0);
  for (int i = 0; i < N; i++) {
    for (int e = 0; e < 64; e++) bufs[i][e] = (int32_t)mixed_val(mp_rank, (size_t)e, 500u + (uint64_t)i);
    atomic_store(&slots[i].freed_self, 1);
    int64_t shape[1] = {64};
    weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, bufs[i], WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options opt = WEFT_OP_OPTIONS_INIT;
    opt.callback = count_cb;
    opt.user_data = &slots[i];
    char name[32];
    snprintf(name, sizeof name, "cb.free.%d", i);
    weft_request *req = NULL;
    weft_status st = weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, &opt, &req);
    mp_submitted(st, &req, name);
  }
  await_callbacks(slots, N, "cb.free");
  for (int i = 0; i < N; i++) {
    if (atomic_load(&slots[i].status) != WEFT_OK)
      mp_fail("callback %d got status %d (>= 1000: weft_request_free in the callback failed)", i,
              atomic_load(&slots[i].status));
    for (int e = 0; e < 64; e++) {
      int64_t want = 0;
      for (int r = 0; r < mp_size; r++) want += mixed_val(r, (size_t)e, 500u + (uint64_t)i);
      if (bufs[i][e] != want) {
        mp_fail("cb.free.%d element %d is %d, expected %lld", i, e, bufs[i][e], (long long)want);
        break;
      }
    }
  }
  mp_case_end();

  /* A failing request calls back too, with its error status: ranks that
   * disagree on a dtype, or (one rank) a 0-d allgather. */
  {
    mp_case("callbacks: a mismatched %s calls back once with WEFT_ERR_MISMATCH",
            mp_size >= 2 ? "allreduce" : "allgather");
    memset(slots, 0, sizeof slots);
    int64_t shape[1] = {4};
    weft_tensor t = {mp_rank == 0 ? WEFT_DTYPE_FLOAT32 : WEFT_DTYPE_INT32, 1, shape, bufs[0], WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options opt = WEFT_OP_OPTIONS_INIT;
    opt.callback = count_cb;
    opt.user_data = &slots[0];
    weft_request *req = NULL;
    weft_status st;
    if (mp_size >= 2) {
      st = weft_allreduce(mp_group, "cb.mismatch", &t, &t, WEFT_OP_SUM, &opt, &req);
    } else {
      t.ndim = 0;
      st = weft_allgather(mp_group, "cb.mismatch", &t, &opt, &req);
    }
    mp_submitted(st, &req, "cb.mismatch");
    st = mp_wait(req, "cb.mismatch");
    if (st != WEFT_ERR_MISMATCH) mp_fail("wait returned %s, expected WEFT_ERR_MISMATCH", weft_status_string(st));
    await_callbacks(slots, 1, "cb.mismatch");
    if (atomic_load(&slots[0].status) != WEFT_ERR_MISMATCH)
      mp_fail("callback got status %d, expected WEFT_ERR_MISMATCH", atomic_load(&slots[0].status));
    weft_request_free(req);
    mp_case_end();
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 0);
  mp_setup();
  if (mp_size > 16) mp_fatal("this test supports at most 16 ranks");
  test_opposite_orders();
  test_threads();
  test_callbacks();
  return mp_teardown();
}
