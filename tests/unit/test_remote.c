/* test_remote.c - remote execution's core (src/remote/) over an in-process
 * link: three ranks' cores in one process, frames handed straight to the
 * receiver's deliver. Covers the callee's checks in TFRT's order (each
 * check's error while every later check would fail too, and nothing runs),
 * the registry, put/fetch/execute against references computed here,
 * placeholders (chained calls on a pending output, a fetch before its put),
 * metadata of only the last k outputs, delete naming every unknown id,
 * contexts (close, idle collection, keep-alive), deadlines, cancellation,
 * a function's failure, a dead callee and a dead caller. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote/remote.h"
#include "unit_check.h"

#define N 3
static wf_remote *g_r[N];
static atomic_int g_lost[N];      /* 2: the rank died (every rank sees it) */
static int g_rank_of[N] = {0, 1, 2};

static weft_status link_send(void *ctx, int peer, wf_buf *frame) {
  int src = *(int *)ctx;
  weft_status st = WEFT_OK;
  if (!atomic_load(&g_lost[peer]) && !atomic_load(&g_lost[src])) {
    char err[256];
    st = wf_remote_deliver(g_r[peer], src, frame->data[5], frame->data + WF_FRAME_HDR_SIZE,
                           frame->len - WF_FRAME_HDR_SIZE, err, sizeof err);
    CHECK(st == WEFT_OK, "deliver: %s", err);
  }
  wf_buf_free(frame);
  return st;
}

static int link_lost(void *ctx, int peer, char *msg, size_t len) {
  (void)ctx;
  int l = atomic_load(&g_lost[peer]);
  if (l) snprintf(msg, len, "rank %d died (test)", peer);
  return l;
}

/* ---- functions */
static atomic_int g_runs;        /* calls of any function */
static pthread_t g_test_thread;
static atomic_int g_on_test_thread;
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static int g_gate_open = 1;

static void gate(int open) {
  pthread_mutex_lock(&g_gate_mu);
  g_gate_open = open;
  pthread_cond_broadcast(&g_gate_cv);
  pthread_mutex_unlock(&g_gate_mu);
}

static size_t elems(const weft_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

static void note_run(void) {
  atomic_fetch_add(&g_runs, 1);
  if (pthread_equal(pthread_self(), g_test_thread)) atomic_store(&g_on_test_thread, 1);
}

/* out = a + b (float32, same shape) */
static weft_status fn_add(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  note_run();
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  const float *a = in[0].data, *b = in[1].data;
  for (size_t i = 0; i < elems(&in[0]); i++) o[i] = a[i] + b[i];
  return WEFT_OK;
}

/* waits for the gate, then out = 2 * x */
static weft_status fn_slow(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  pthread_mutex_lock(&g_gate_mu);
  while (!g_gate_open) pthread_cond_wait(&g_gate_cv, &g_gate_mu);
  pthread_mutex_unlock(&g_gate_mu);
  note_run();
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o);
  if (st != WEFT_OK) return st;
  for (size_t i = 0; i < elems(&in[0]); i++) o[i] = 2 * ((const float *)in[0].data)[i];
  return WEFT_OK;
}

/* three outputs of different kinds: x * 3 (float32), the element count (int64 scalar), a 2x3 float64 ramp */
static weft_status fn_split(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  note_run();
  float *o0;
  int64_t *o1;
  double *o2;
  int64_t sh2[2] = {2, 3};
  if (weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, in[0].ndim, in[0].shape, (void **)&o0) ||
      weft_remote_result_alloc(out, 1, WEFT_DTYPE_INT64, 0, NULL, (void **)&o1) ||
      weft_remote_result_alloc(out, 2, WEFT_DTYPE_FLOAT64, 2, sh2, (void **)&o2))
    return WEFT_ERR_INVALID_ARGUMENT;
  for (size_t i = 0; i < elems(&in[0]); i++) o0[i] = 3 * ((const float *)in[0].data)[i];
  *o1 = (int64_t)elems(&in[0]);
  for (int i = 0; i < 6; i++) o2[i] = i * 0.5;
  return WEFT_OK;
}

/* out = a then b (float32, 1-d) */
static weft_status fn_concat(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  note_run();
  int64_t n[1] = {in[0].shape[0] + in[1].shape[0]};
  float *o;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT32, 1, n, (void **)&o);
  if (st != WEFT_OK) return st;
  memcpy(o, in[0].data, (size_t)in[0].shape[0] * 4);
  memcpy(o + in[0].shape[0], in[1].data, (size_t)in[1].shape[0] * 4);
  return WEFT_OK;
}

static weft_status fn_fail(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)in;
  note_run();
  weft_remote_result_fail(out, "the input was negative");
  return WEFT_ERR_INVALID_ARGUMENT;
}

/* ---- helpers */
static weft_remote_id new_id(int rank) {
  weft_remote_id id;
  CHECK(wf_remote_id_new(g_r[rank], &id) == WEFT_OK, "id");
  return id;
}

static weft_status finish(weft_remote_call *c, char *err, size_t len) {
  weft_status st = weft_remote_wait(c, 10);
  snprintf(err, len, "%s", weft_remote_call_error(c));
  weft_remote_call_free(c);
  return st;
}

static weft_tensor vec(float *data, const int64_t *shape) {
  return (weft_tensor){.dtype = WEFT_DTYPE_FLOAT32, .ndim = 1, .shape = shape, .data = data, .device = WEFT_DEVICE_CPU};
}

static void put(int from, int task, uint64_t ctx, weft_remote_id id, float *data, const int64_t *shape) {
  weft_tensor t = vec(data, shape);
  weft_remote_call *c;
  char err[1024];
  CHECK(wf_remote_put(g_r[from], task, ctx, &t, id, NULL, &c) == WEFT_OK, "put");
  weft_status st = finish(c, err, sizeof err);
  CHECK(st == WEFT_OK, "put: %s", err);
}

/* fetches id from task into out (n floats); returns the status */
static weft_status fetch(int from, int task, uint64_t ctx, weft_remote_id id, float *out, size_t n, double timeout) {
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  o.timeout_seconds = timeout;
  weft_remote_call *c;
  CHECK(wf_remote_fetch(g_r[from], task, ctx, id, &o, &c) == WEFT_OK, "fetch");
  weft_status st = weft_remote_wait(c, 10);
  if (st == WEFT_OK) {
    weft_tensor t;
    CHECK(weft_remote_call_output(c, &t) == WEFT_OK, "output");
    CHECK(t.dtype == WEFT_DTYPE_FLOAT32 && elems(&t) == n, "fetched %zu elements of dtype %d, want %zu float32",
          elems(&t), (int)t.dtype, n);
    if (elems(&t) == n) memcpy(out, t.data, n * sizeof *out);
  }
  weft_remote_call_free(c);
  return st;
}

static weft_status exec(int from, int task, uint64_t ctx, const char *name, int n_in, const weft_remote_input *in,
                        int n_out, const weft_remote_id *out, int device, char *err, size_t len) {
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  o.device = device;
  weft_remote_call *c;
  weft_status st = wf_remote_execute(g_r[from], task, ctx, name, n_in, in, n_out, out, 0, &o, &c);
  if (st != WEFT_OK) return snprintf(err, len, "submit failed"), st;
  return finish(c, err, len);
}

static int64_t objects(int rank) {
  weft_remote_stats s;
  wf_remote_stats(g_r[rank], &s);
  return s.objects;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---- tests */

/* Each check fails while every later one would fail too: the error is the
 * earliest check's, and nothing ran or was stored. */
static void test_check_order(uint64_t ctx) {
  char err[1024];
  int64_t sh[1] = {4};
  float a[4] = {1, 2, 3, 4};
  weft_tensor t = vec(a, sh);
  weft_remote_input three[3] = {{.tensor = &t}, {.tensor = &t}, {.tensor = &t}};
  weft_remote_input two[2] = {{.tensor = &t}, {.tensor = &t}};
  weft_remote_id outs2[2] = {new_id(0), new_id(0)}, outs1[1] = {new_id(0)};
  int runs = atomic_load(&g_runs);
  int64_t objs = objects(1);
  /* 1 context: unknown context, unknown program, wrong counts, bad device */
  weft_status st = exec(0, 1, 999, "nope", 3, three, 2, outs2, 0, err, sizeof err);
  CHECK(st == WEFT_ERR_NOT_FOUND && strstr(err, "context 999 not found on rank 1"), "context check: %d %s", st, err);
  /* 2 program */
  st = exec(0, 1, ctx, "nope", 3, three, 2, outs2, 0, err, sizeof err);
  CHECK(st == WEFT_ERR_NOT_FOUND && strstr(err, "can't find program: nope"), "program check: %d %s", st, err);
  CHECK(strstr(err, "execute 'nope' on rank 1"), "the error names the call and the callee: %s", err);
  /* 3 result count ("add" has 1 result) */
  st = exec(0, 1, ctx, "add", 3, three, 2, outs2, 0, err, sizeof err);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(err, "result count: add has 1 results, got 2 output ids"),
        "result count check: %d %s", st, err);
  /* 4 argument count */
  st = exec(0, 1, ctx, "add", 3, three, 1, outs1, 0, err, sizeof err);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(err, "expected 2 arguments, got 3"), "argument check: %d %s", st,
        err);
  /* 5 device */
  st = exec(0, 1, ctx, "add", 2, two, 1, outs1, 0, err, sizeof err);
  CHECK(st == WEFT_ERR_NOT_FOUND && strstr(err, "can't find device: 0 on rank 1"), "device check: %d %s", st, err);
  CHECK(atomic_load(&g_runs) == runs, "a call that failed a check ran its function");
  CHECK(objects(1) == objs, "a call that failed a check stored objects (%lld, was %lld)", (long long)objects(1),
        (long long)objs);
  /* and with every check passing it runs */
  st = exec(0, 1, ctx, "add", 2, two, 1, outs1, WEFT_DEVICE_CPU, err, sizeof err);
  CHECK(st == WEFT_OK && atomic_load(&g_runs) == runs + 1, "a good call: %d %s", st, err);
  /* an output id taken already */
  st = exec(0, 1, ctx, "add", 2, two, 1, outs1, WEFT_DEVICE_CPU, err, sizeof err);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(err, "exists already"), "output taken: %d %s", st, err);
}

static void test_register(void) {
  CHECK(wf_remote_register(g_r[1], "add", 2, 1, fn_add, NULL) == WEFT_ERR_INVALID_ARGUMENT, "a duplicate was accepted");
  CHECK(strstr(weft_last_error(), "'add' is registered already on rank 1"), "%s", weft_last_error());
  CHECK(wf_remote_register(g_r[1], "", 2, 1, fn_add, NULL) == WEFT_ERR_INVALID_ARGUMENT, "an empty name");
  CHECK(wf_remote_register(g_r[1], "x", -1, 1, fn_add, NULL) == WEFT_ERR_INVALID_ARGUMENT, "n_in -1");
}

/* put, execute, fetch; the result against a sum computed here */
static void test_put_exec_fetch(uint64_t ctx) {
  char err[1024];
  int64_t sh[1] = {5};
  float a[5] = {1, -2, 3.5f, 1e6f, 0}, b[5] = {0.25f, 2, -3.5f, 1, 7}, ref[5], got[5] = {0};
  for (int i = 0; i < 5; i++) ref[i] = a[i] + b[i];
  weft_remote_id ia = new_id(0), ib = new_id(0), ic = new_id(0);
  put(0, 1, ctx, ia, a, sh);
  put(0, 1, ctx, ib, b, sh);
  weft_remote_input in[2] = {{.id = ia}, {.id = ib}};
  weft_status st = exec(0, 1, ctx, "add", 2, in, 1, &ic, WEFT_DEVICE_CPU, err, sizeof err);
  CHECK(st == WEFT_OK, "add: %s", err);
  CHECK(fetch(0, 1, ctx, ic, got, 5, 5) == WEFT_OK && !memcmp(got, ref, sizeof ref), "fetch differs from a + b");
  /* an input that is the caller's own tensor, inline */
  weft_tensor tb = vec(b, sh);
  weft_remote_input mixed[2] = {{.id = ia}, {.tensor = &tb}};
  weft_remote_id id2 = new_id(0);
  st = exec(0, 1, ctx, "add", 2, mixed, 1, &id2, WEFT_DEVICE_CPU, err, sizeof err);
  memset(got, 0, sizeof got);
  CHECK(st == WEFT_OK && fetch(0, 1, ctx, id2, got, 5, 5) == WEFT_OK && !memcmp(got, ref, sizeof ref),
        "inline input: %s", err);
  CHECK(!atomic_load(&g_on_test_thread), "a function ran on the caller's thread");
}

/* fetch through the caller's allocator: the memory is the allocator's, and
 * the caller's after the call is freed; NULL from it fails the fetch. */
static int g_allocs;
static void *test_alloc(size_t bytes, void *ctx) {
  g_allocs++;
  return ctx ? malloc(bytes ? bytes : 1) : NULL;
}

static void test_fetch_alloc(uint64_t ctx) {
  int64_t sh[1] = {3};
  float x[3] = {5, 6, 7};
  weft_remote_id id = new_id(0);
  put(0, 1, ctx, id, x, sh);
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  o.alloc = test_alloc;
  o.alloc_ctx = &o;
  weft_remote_call *c;
  g_allocs = 0;
  CHECK(wf_remote_fetch(g_r[0], 1, ctx, id, &o, &c) == WEFT_OK, "fetch");
  weft_tensor t = {0};
  CHECK(weft_remote_wait(c, 10) == WEFT_OK && weft_remote_call_output(c, &t) == WEFT_OK, "fetch: %s",
        weft_remote_call_error(c));
  weft_remote_call_free(c);
  CHECK(g_allocs == 1 && t.data && !memcmp(t.data, x, sizeof x), "%d allocations, data %s", g_allocs,
        t.data ? "differ" : "NULL");
  free(t.data); /* the caller's */
  o.alloc_ctx = NULL;
  CHECK(wf_remote_fetch(g_r[0], 1, ctx, id, &o, &c) == WEFT_OK, "fetch");
  CHECK(weft_remote_wait(c, 10) == WEFT_ERR_NO_MEMORY && strstr(weft_remote_call_error(c), "allocator"),
        "an allocator returning NULL: %s", weft_remote_call_error(c));
  weft_remote_call_free(c);
}

/* Messages over the link's cap (1 MiB here): a put refused at the caller,
 * a fetch of a larger object refused by the callee, nothing sent whole. */
static void test_size_cap(uint64_t ctx) {
  size_t n = (1 << 20) / 4 + 1;
  float *big = calloc(n, sizeof *big);
  int64_t sh[1] = {(int64_t)n}, half[1] = {(int64_t)n / 2 + 1};
  weft_tensor t = vec(big, sh), h = vec(big, half);
  weft_remote_call *c = NULL;
  weft_remote_id id = new_id(0), a = new_id(0), s = new_id(0);
  CHECK(wf_remote_put(g_r[0], 1, ctx, &t, id, NULL, &c) == WEFT_ERR_INVALID_ARGUMENT && !c, "a put over the cap");
  CHECK(strstr(weft_last_error(), "over WEFT_MAX_MESSAGE_BYTES"), "%s", weft_last_error());
  /* two halves fit; their sum on the callee does not come back whole */
  put(0, 1, ctx, a, big, half);
  weft_remote_input in[2] = {{.id = a}, {.tensor = &h}};
  char err[1024];
  CHECK(exec(0, 1, ctx, "concat", 2, in, 1, &s, WEFT_DEVICE_CPU, err, sizeof err) == WEFT_OK, "concat: %s", err);
  CHECK(wf_remote_fetch(g_r[0], 1, ctx, s, NULL, &c) == WEFT_OK, "fetch");
  CHECK(weft_remote_wait(c, 10) == WEFT_ERR_INVALID_ARGUMENT && strstr(weft_remote_call_error(c), "over WEFT_MAX_MESSAGE_BYTES"),
        "a fetch over the cap: %s", weft_remote_call_error(c));
  weft_remote_call_free(c);
  free(big);
}

/* Chained calls on a pending output, and a fetch before the put it waits for. */
static void test_placeholders(uint64_t ctx) {
  char err[1024];
  int64_t sh[1] = {3};
  float x[3] = {1, 2, 3}, y[3] = {10, 20, 30}, got[3] = {0}, ref[3];
  for (int i = 0; i < 3; i++) ref[i] = 2 * x[i] + y[i];
  weft_remote_id ix = new_id(0), iy = new_id(0), ih = new_id(0), iz = new_id(0);
  put(0, 1, ctx, ix, x, sh);
  put(0, 1, ctx, iy, y, sh);
  gate(0);
  weft_remote_call *c1, *c2;
  weft_remote_input in1[1] = {{.id = ix}}, in2[2] = {{.id = ih}, {.id = iy}};
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "slow", 1, in1, 1, &ih, 0, NULL, &c1) == WEFT_OK, "slow");
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "add", 2, in2, 1, &iz, 0, NULL, &c2) == WEFT_OK, "add on h");
  sleep_s(0.2);
  CHECK(weft_remote_test(c1) == WEFT_IN_PROGRESS && weft_remote_test(c2) == WEFT_IN_PROGRESS,
        "calls completed while the gate was shut");
  gate(1);
  CHECK(finish(c1, err, sizeof err) == WEFT_OK, "slow: %s", err);
  CHECK(finish(c2, err, sizeof err) == WEFT_OK, "add on a pending output: %s", err);
  CHECK(fetch(0, 1, ctx, iz, got, 3, 5) == WEFT_OK && !memcmp(got, ref, sizeof ref), "chained result differs");
  /* rank 2 fetches an id rank 0 has not put yet: it waits for it */
  weft_remote_id late = new_id(0);
  weft_remote_call *f;
  CHECK(wf_remote_fetch(g_r[2], 1, ctx, late, NULL, &f) == WEFT_OK, "fetch");
  sleep_s(0.1);
  CHECK(weft_remote_test(f) == WEFT_IN_PROGRESS, "a fetch of an id not produced completed");
  put(0, 1, ctx, late, y, sh);
  CHECK(weft_remote_wait(f, 5) == WEFT_OK, "the fetch did not complete after the put: %s", weft_remote_call_error(f));
  weft_tensor t;
  CHECK(weft_remote_call_output(f, &t) == WEFT_OK && !memcmp(t.data, y, sizeof y), "fetched data");
  weft_remote_call_free(f);
}

/* Metadata for the last n_meta outputs only. */
static void test_metadata(uint64_t ctx) {
  int64_t sh[1] = {4};
  float x[4] = {1, 2, 3, 4};
  weft_tensor t = vec(x, sh);
  weft_remote_input in[1] = {{.tensor = &t}};
  for (int k = 0; k <= 3; k++) {
    weft_remote_id outs[3] = {new_id(0), new_id(0), new_id(0)};
    weft_remote_call *c;
    CHECK(wf_remote_execute(g_r[0], 1, ctx, "split", 1, in, 3, outs, k, NULL, &c) == WEFT_OK, "split");
    CHECK(weft_remote_wait(c, 10) == WEFT_OK, "split k=%d: %s", k, weft_remote_call_error(c));
    weft_tensor m;
    /* expected metadata of outputs 0..2 */
    const int dt[3] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_INT64, WEFT_DTYPE_FLOAT64};
    const int nd[3] = {1, 0, 2};
    const int64_t shp[3][2] = {{4, 0}, {0, 0}, {2, 3}};
    for (int i = 0; i < k; i++) {
      int o = 3 - k + i;
      CHECK(weft_remote_call_meta(c, i, &m) == WEFT_OK, "meta %d of %d", i, k);
      CHECK((int)m.dtype == dt[o] && m.ndim == nd[o] && !m.data, "k=%d meta %d: dtype %d ndim %d, want output %d's", k, i,
            (int)m.dtype, m.ndim, o);
      for (int d = 0; d < nd[o] && m.ndim == nd[o]; d++) CHECK(m.shape[d] == shp[o][d], "k=%d meta %d shape", k, i);
    }
    CHECK(weft_remote_call_meta(c, k, &m) == WEFT_ERR_INVALID_ARGUMENT, "metadata beyond the last %d outputs", k);
    weft_remote_call_free(c);
    /* every output is stored, with or without metadata */
    float got[4];
    CHECK(fetch(0, 1, ctx, outs[0], got, 4, 5) == WEFT_OK && got[3] == 12, "output 0 of split (k=%d)", k);
  }
}

static void test_delete(uint64_t ctx) {
  int64_t sh[1] = {2};
  float x[2] = {1, 2};
  weft_remote_id a = new_id(0), b = new_id(0);
  put(0, 1, ctx, a, x, sh);
  put(0, 1, ctx, b, x, sh);
  int64_t before = objects(1);
  weft_remote_id ids[4] = {a, {0, 777777}, b, {2, 888888}};
  weft_remote_call *c;
  char err[1024];
  CHECK(wf_remote_delete(g_r[0], 1, ctx, 4, ids, NULL, &c) == WEFT_OK, "delete");
  weft_status st = finish(c, err, sizeof err);
  CHECK(st == WEFT_ERR_NOT_FOUND && strstr(err, "2 unknown ids: {0, 777777}, {2, 888888}"), "delete: %d %s", st, err);
  CHECK(objects(1) == before - 2, "the known ids were not deleted: %lld objects, were %lld", (long long)objects(1),
        (long long)before);
  /* all known: OK */
  weft_remote_id d = new_id(0);
  put(0, 1, ctx, d, x, sh);
  CHECK(wf_remote_delete(g_r[0], 1, ctx, 1, &d, NULL, &c) == WEFT_OK, "delete");
  CHECK(finish(c, err, sizeof err) == WEFT_OK, "delete of a known id: %s", err);
}

static void test_contexts(void) {
  uint64_t c1, c2, c3;
  int64_t sh[1] = {2};
  float x[2] = {1, 2}, got[2];
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0.3, &c1) == WEFT_OK, "create");
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0.6, &c2) == WEFT_OK, "create");
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0, &c3) == WEFT_OK, "create");
  CHECK(c1 != c2 && c2 != c3 && c1 && c2 && c3, "context ids %llu %llu %llu", (unsigned long long)c1,
        (unsigned long long)c2, (unsigned long long)c3);
  weft_remote_id a = new_id(0), b = new_id(0);
  put(0, 1, c1, a, x, sh);
  put(0, 1, c3, b, x, sh);
  weft_remote_stats s0;
  wf_remote_stats(g_r[1], &s0);
  /* c2 kept alive, c1 left idle */
  for (int i = 0; i < 12; i++) { /* 1.2 s: twice its idle time */
    CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_KEEPALIVE, c2, 0, NULL) == WEFT_OK, "keepalive %d", i);
    sleep_s(0.1);
  }
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CLOSE, c2, 0, NULL) == WEFT_OK, "close c2, kept alive");
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_KEEPALIVE, c1, 0, NULL) == WEFT_ERR_NOT_FOUND, "c1 was not collected");
  CHECK(strstr(weft_last_error(), "collected"), "the error says it was collected: %s", weft_last_error());
  CHECK(fetch(0, 1, c1, a, got, 2, 2) == WEFT_ERR_NOT_FOUND, "a fetch in a collected context");
  weft_remote_stats s1;
  wf_remote_stats(g_r[1], &s1);
  CHECK(s1.collected == s0.collected + 1 && s1.objects == s0.objects - 1 && s1.contexts == s0.contexts - 2, "collected %lld (was %lld), objects %lld (was %lld)",
        (long long)s1.collected, (long long)s0.collected, (long long)s1.objects, (long long)s0.objects);
  CHECK(fetch(0, 1, c3, b, got, 2, 2) == WEFT_OK && got[1] == 2, "a context without idle time was collected");
  /* close */
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CLOSE, c3, 0, NULL) == WEFT_OK, "close");
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CLOSE, c3, 0, NULL) == WEFT_ERR_NOT_FOUND, "close twice");
  wf_remote_stats(g_r[1], &s1);
  CHECK(s1.objects == s0.objects - 2, "close freed nothing: %lld objects", (long long)s1.objects);
}

/* A call's own deadline, cancellation of a waiting call, a function's failure. */
static void test_deadline_cancel_fail(uint64_t ctx) {
  char err[1024];
  int64_t sh[1] = {2};
  float x[2] = {1, 2};
  weft_tensor t = vec(x, sh);
  weft_remote_input in[1] = {{.tensor = &t}};
  gate(0);
  weft_remote_options o = WEFT_REMOTE_OPTIONS_INIT;
  o.timeout_seconds = 0.3;
  weft_remote_id h = new_id(0), z = new_id(0);
  weft_remote_call *c, *w;
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "slow", 1, in, 1, &h, 0, &o, &c) == WEFT_OK, "slow");
  weft_status st = weft_remote_wait(c, 10);
  CHECK(st == WEFT_ERR_TIMEOUT && strstr(weft_remote_call_error(c), "deadline"), "deadline: %d %s", st,
        weft_remote_call_error(c));
  weft_remote_call_free(c);
  /* a call waiting for h, cancelled: it never runs */
  weft_remote_input in2[2] = {{.id = h}, {.tensor = &t}};
  int runs = atomic_load(&g_runs);
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "add", 2, in2, 1, &z, 0, NULL, &w) == WEFT_OK, "add on h");
  sleep_s(0.1);
  CHECK(weft_remote_cancel(w) == WEFT_OK, "cancel");
  CHECK(weft_remote_wait(w, 1) == WEFT_ERR_CANCELLED && strstr(weft_remote_call_error(w), "cancelled by rank 0"),
        "cancelled: %s", weft_remote_call_error(w));
  CHECK(weft_remote_cancel(w) == WEFT_ERR_MISUSE, "cancel of a complete call");
  weft_remote_call_free(w);
  /* a round trip behind the CANCEL (one ordered stream to the callee): the
   * callee has acted on it before slow can end */
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_KEEPALIVE, ctx, 0, NULL) == WEFT_OK, "keepalive");
  gate(1);
  for (int i = 0; i < 100 && atomic_load(&g_runs) < runs + 1; i++) sleep_s(0.05); /* the timed-out slow ends */
  sleep_s(0.3);
  CHECK(atomic_load(&g_runs) == runs + 1, "the cancelled call ran (%d runs, want %d)", atomic_load(&g_runs), runs + 1);
  /* failure: the error, and a call chained on the failed output fails naming it */
  weft_remote_id f = new_id(0), g = new_id(0);
  st = exec(0, 1, ctx, "fail", 1, in, 1, &f, WEFT_DEVICE_CPU, err, sizeof err);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(err, "the input was negative"), "fail: %d %s", st, err);
  weft_remote_input in3[2] = {{.id = f}, {.tensor = &t}};
  st = exec(0, 1, ctx, "add", 2, in3, 1, &g, WEFT_DEVICE_CPU, err, sizeof err);
  char fid[64];
  snprintf(fid, sizeof fid, "input {0, %llu} failed", (unsigned long long)f.local);
  CHECK(st != WEFT_OK && strstr(err, fid), "chained on a failure: %d %s", st, err);
}

/* The callee dies mid-call: the call fails naming it. The caller (rank 2)
 * dies: after the grace its objects on rank 1 are freed, rank 0's stay. */
static void test_deaths(uint64_t ctx) {
  int64_t sh[1] = {2};
  float x[2] = {1, 2};
  uint64_t ctx2;
  CHECK(wf_remote_ctx_op(g_r[2], 1, WF_ROP_CTX_CREATE, 0, 0, &ctx2) == WEFT_OK, "rank 2's context");
  weft_remote_id a = new_id(2), b = new_id(2), k = new_id(0);
  put(2, 1, ctx, a, x, sh);  /* in rank 0's context */
  put(2, 1, ctx2, b, x, sh); /* in its own */
  put(0, 1, ctx, k, x, sh);
  weft_remote_stats s0, s1;
  wf_remote_stats(g_r[1], &s0);
  atomic_store(&g_lost[2], 2);
  sleep_s(0.1);
  wf_remote_stats(g_r[1], &s1);
  CHECK(s1.objects == s0.objects, "freed before the grace");
  for (int i = 0; i < 100 && s1.orphans_freed == s0.orphans_freed; i++) {
    sleep_s(0.05);
    wf_remote_stats(g_r[1], &s1);
  }
  CHECK(s1.orphans_freed == s0.orphans_freed + 2 && s1.objects == s0.objects - 2 && s1.contexts == s0.contexts - 1,
        "rank 2's objects: freed %lld (was %lld), objects %lld (was %lld), contexts %lld (was %lld)",
        (long long)s1.orphans_freed, (long long)s0.orphans_freed, (long long)s1.objects, (long long)s0.objects,
        (long long)s1.contexts, (long long)s0.contexts);
  float got[2];
  CHECK(fetch(0, 1, ctx, k, got, 2, 5) == WEFT_OK, "rank 0's object went with rank 2's");
  /* the callee dies while running a call */
  gate(0);
  weft_tensor t = vec(x, sh);
  weft_remote_input in[1] = {{.tensor = &t}};
  weft_remote_id h = new_id(0);
  weft_remote_call *c;
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "slow", 1, in, 1, &h, 0, NULL, &c) == WEFT_OK, "slow");
  sleep_s(0.1);
  atomic_store(&g_lost[1], 2);
  weft_status st = weft_remote_wait(c, 5);
  CHECK(st == WEFT_ERR_PEER_LOST && strstr(weft_remote_call_error(c), "rank 1"), "callee died: %d %s", st,
        weft_remote_call_error(c));
  weft_remote_call_free(c);
  gate(1);
}

/* Fresh cores for ranks 0 and 1, nobody lost, "slow" on rank 1; returns
 * rank 0's context there. */
static uint64_t fresh_pair(void) {
  for (int i = 0; i < N; i++) atomic_store(&g_lost[i], 0);
  for (int i = 0; i < 2; i++) {
    wf_remote_link link = {.ctx = &g_rank_of[i], .max_payload = 1 << 20, .send = link_send, .peer_lost = link_lost};
    CHECK(wf_remote_new(i, N, &link, 30, 0.4, &g_r[i]) == WEFT_OK, "new");
  }
  CHECK(wf_remote_register(g_r[1], "slow", 1, 1, fn_slow, NULL) == WEFT_OK, "register");
  uint64_t ctx;
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0, &ctx) == WEFT_OK, "context");
  return ctx;
}

/* Closes the gate and calls "slow" on rank 1 from rank 0 (it runs until
 * gate(1)). */
static weft_remote_call *start_slow(uint64_t ctx, float *x, const int64_t *sh) {
  weft_tensor t = vec(x, sh);
  weft_remote_input in[1] = {{.tensor = &t}};
  weft_remote_id o = new_id(0);
  weft_remote_call *c;
  gate(0);
  CHECK(wf_remote_execute(g_r[0], 1, ctx, "slow", 1, in, 1, &o, 0, NULL, &c) == WEFT_OK, "slow");
  return c;
}

/* Finalize while a function never returns: wf_remote_free gives up after
 * its bound instead of hanging; the core is freed when the function ends
 * (LeakSanitizer would see it otherwise). Fresh cores, nobody lost. */
static void test_free_bounded(void) {
  uint64_t ctx = fresh_pair();
  int64_t sh[1] = {1};
  float x[1] = {1};
  weft_remote_call *c = start_slow(ctx, x, sh);
  sleep_s(0.2);
  atomic_store(&g_lost[1], 2); /* rank 0 sends nothing more to it */
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  wf_remote_free(g_r[1]);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double dt = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  CHECK(dt > 9 && dt < 20, "wf_remote_free with a function still running returned after %.1f s", dt);
  g_r[1] = NULL;
  gate(1);
  sleep_s(0.3); /* the function ends; its thread frees the core */
  CHECK(weft_remote_wait(c, 5) == WEFT_ERR_PEER_LOST, "the call to the freed rank");
  weft_remote_call_free(c);
  wf_remote_free(g_r[0]);
}

/* The world failed because some other rank was lost (the link says 3 for
 * a live peer): a call to the peer fails as lost, naming what the link
 * says, and what the peer owns is kept past the grace (only a dead rank's
 * objects go). Fresh cores. */
static void test_lost_elsewhere(void) {
  uint64_t ctx = fresh_pair();
  int64_t sh[1] = {1};
  float x[1] = {1};
  put(0, 1, ctx, new_id(0), x, sh);
  weft_remote_stats s0, s1;
  wf_remote_stats(g_r[1], &s0);
  weft_remote_call *c = start_slow(ctx, x, sh);
  sleep_s(0.1);
  atomic_store(&g_lost[1], 3);
  atomic_store(&g_lost[0], 3);
  weft_status st = weft_remote_wait(c, 5);
  CHECK(st == WEFT_ERR_PEER_LOST && strstr(weft_remote_call_error(c), "rank 1"), "lost elsewhere: %d %s", st,
        weft_remote_call_error(c));
  weft_remote_call_free(c);
  sleep_s(0.8); /* twice the grace */
  wf_remote_stats(g_r[1], &s1);
  CHECK(s1.orphans_freed == s0.orphans_freed && s1.objects >= s0.objects,
        "a live rank's objects were freed as a dead one's: freed %lld (was %lld), objects %lld (was %lld)",
        (long long)s1.orphans_freed, (long long)s0.orphans_freed, (long long)s1.objects, (long long)s0.objects);
  gate(1);
  for (int i = 0; i < 2; i++) wf_remote_free(g_r[i]);
}

int main(void) {
  g_test_thread = pthread_self();
  for (int i = 0; i < N; i++) {
    wf_remote_link link = {.ctx = &g_rank_of[i], .max_payload = 1 << 20, .send = link_send, .peer_lost = link_lost};
    CHECK(wf_remote_new(i, N, &link, 30, 0.4, &g_r[i]) == WEFT_OK, "new");
  }
  CHECK(wf_remote_register(g_r[1], "add", 2, 1, fn_add, NULL) == WEFT_OK, "register");
  CHECK(wf_remote_register(g_r[1], "slow", 1, 1, fn_slow, NULL) == WEFT_OK, "register");
  CHECK(wf_remote_register(g_r[1], "split", 1, 3, fn_split, NULL) == WEFT_OK, "register");
  CHECK(wf_remote_register(g_r[1], "fail", 1, 1, fn_fail, NULL) == WEFT_OK, "register");
  CHECK(wf_remote_register(g_r[1], "concat", 2, 1, fn_concat, NULL) == WEFT_OK, "register");
  uint64_t ctx = 0;
  CHECK(wf_remote_ctx_op(g_r[0], 1, WF_ROP_CTX_CREATE, 0, 0, &ctx) == WEFT_OK, "context: %s", weft_last_error());
  test_check_order(ctx);
  test_register();
  test_put_exec_fetch(ctx);
  test_placeholders(ctx);
  test_fetch_alloc(ctx);
  test_size_cap(ctx);
  test_metadata(ctx);
  test_delete(ctx);
  test_contexts();
  test_deadline_cancel_fail(ctx);
  test_deaths(ctx);
  for (int i = 0; i < N; i++) wf_remote_free(g_r[i]);
  test_free_bounded();
  test_lost_elsewhere();
  return unit_result("test_remote");
}
