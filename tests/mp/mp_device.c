/* mp_device.c - device tensors on the `sim` accelerator (src/device/sim.h),
 * staged through pinned host memory in stream order (engine/devstage.h).
 *
 * Every input is written by a sim "kernel" on the rank's own stream, after a
 * delay, right before submission, over stale values written earlier: a
 * collective that reads the input before the producer's queued work is
 * done reads the stale values. Every result is read back through the sim's
 * own path (wf_sim_read, ordered with nothing) as soon as the request
 * completes: one that completes before its copy up is done reads the stale
 * values the output held. References are computed here: integer values in
 * [-8, 8] (exact in every dtype, so sums are exact in any order).
 *
 * Cases: every collective (allreduce in place and out of place, broadcast,
 * allgather with ranks' row counts differing, alltoall, reducescatter into
 * a device output and library-allocated) x float32, float64, int32,
 * float16, bfloat16 x counts 0, 1, odd, large; grouped allreduce,
 * allgather and reducescatter; fusion (many tensors in flight at once); a
 * process set; library outputs from an allocator; consumer_stream
 * completion (a kernel on the consumer stream reads the result); a CPU
 * tensor on one rank where the others have device tensors (a mismatch
 * naming both ranks); input and output on different devices in one op; a
 * host pointer and a wild pointer marked as device memory; and, after
 * weft_finalize, no staging left behind (the sim's counts). Device index:
 * the rank's local index mod 2 (ranks need not agree on it, only on the
 * kind). Links weft_internal for the sim's test API.
 *
 * With --device cuda (tests/gpu: a real GPU) the same suite runs on CUDA
 * tensors: device memory is filled and read back with the backend's copies
 * (the dlopen'ed runtime; no CUDA header), the producer's work is an
 * asynchronous host-to-device copy on the rank's stream queued right before
 * submission over stale values, and the consumer reads with a copy queued
 * on the consumer stream. The sim-only cases (its leak counters, a CUDA
 * tensor where CUDA is missing, --pool's allocation count) are left out;
 * without a usable CUDA runtime it exits 77 (skipped) before joining the
 * job (--probe: only that check).
 *
 * --pool (run with a small WEFT_DEVICE_POOL_BYTES and WEFT_DEVICE_CHUNK_BYTES,
 * tests/mp/CMakeLists.txt): the large counts are many chunks and several
 * times the pool, so allreduce and broadcast run chunk by chunk through it
 * and the gathers copy through it; more cases then: large fused and grouped
 * allreduces, a host tensor and device tensors in flight together, a
 * process set's large allreduce running while the world's takes every slot
 * (an overflow buffer), and the bound: the sim's count of pinned
 * allocations is at most the pool's slots and does not grow after the
 * first operation, however many run; last, a rank that has joined takes
 * part in large device allreduces (chunk by chunk, as the others). */
#include <unistd.h>

#include "device/device.h"
#include "device/sim.h"
#include "mp_harness.c"

static wf_device *g_dev;
static wf_dev_stream *g_stream, *g_consumer, *g_helper;
static int g_kind = WEFT_DEVICE_KIND_SIM; /* or WEFT_DEVICE_KIND_CUDA (--device cuda) */
#define IS_SIM (g_kind == WEFT_DEVICE_KIND_SIM)
static void *g_pending[4096]; /* CUDA: host sources of copies queued on g_stream, freed by stream_sync */
static int g_npending;
static int g_index;    /* this rank's sim device */
static size_t g_large = 100003;
static atomic_long g_user_allocs; /* from dev_alloc, not yet freed */
static int g_pool;                /* --pool */

static const weft_dtype k_dtypes[] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_FLOAT64, WEFT_DTYPE_INT32, WEFT_DTYPE_FLOAT16,
                                      WEFT_DTYPE_BFLOAT16};

/* ------------------------------------------------------------ device helpers */
static void *dev_new(size_t bytes) {
  void *p = NULL;
  g_dev->ops->set_device(g_dev, g_index);
  if (g_dev->ops->mem_alloc(g_dev, bytes, &p) != WEFT_OK) mp_fatal("sim mem_alloc: %s", weft_last_error());
  return p;
}
static void dev_free(void *p) { g_dev->ops->mem_free(g_dev, p); }
static void stream_sync(wf_dev_stream *s);
/* A copy queued on stream s (CUDA). */
static void dev_copy(void *dst, const void *src, size_t n, wf_copy_dir dir, wf_dev_stream *s) {
  if (n && g_dev->ops->copy(g_dev, dst, src, n, dir, s) != WEFT_OK) mp_fatal("copy: %s", weft_last_error());
}
/* Synchronous access: the sim's own path, or a copy on a private stream. */
static void dev_put(void *d, const void *h, size_t n) {
  if (!IS_SIM) {
    dev_copy(d, h, n, WF_COPY_H2D, g_helper);
    stream_sync(g_helper);
  } else if (n && wf_sim_write(g_dev, d, h, n) != WEFT_OK) {
    mp_fatal("wf_sim_write: %s", weft_last_error());
  }
}
static void dev_get(void *h, const void *d, size_t n) {
  if (!IS_SIM) {
    dev_copy(h, d, n, WF_COPY_D2H, g_helper);
    stream_sync(g_helper);
  } else if (n && wf_sim_read(g_dev, h, d, n) != WEFT_OK) {
    mp_fatal("wf_sim_read: %s", weft_last_error());
  }
}

/* Waits (bounded) until the work queued on stream so far is done. */
static void stream_sync(wf_dev_stream *s) {
  wf_dev_event *e = NULL;
  if (g_dev->ops->event_create(g_dev, &e) != WEFT_OK || g_dev->ops->event_record(g_dev, e, s) != WEFT_OK)
    mp_fatal("event: %s", weft_last_error());
  double end = mp_now() + 20;
  while (g_dev->ops->event_query(g_dev, e) == WEFT_IN_PROGRESS) {
    if (mp_now() > end) mp_fatal("a sim stream did not drain in 20 s");
    mp_sleep_ms(1);
  }
  g_dev->ops->event_destroy(g_dev, e);
  if (s == g_stream) { /* the copies queued there are done: their sources go */
    for (int i = 0; i < g_npending; i++) free(g_pending[i]);
    g_npending = 0;
  }
}

/* A kernel writing bytes into device memory after a delay. */
typedef struct {
  void *dst;
  void *src; /* owned: freed by the kernel */
  size_t len;
} write_job;
static void write_kernel(void *arg) {
  write_job *j = arg;
  usleep(3000); /* longer than the staging stream's own random delays */
  if (j->len) wf_sim_write(g_dev, j->dst, j->src, j->len);
  free(j->src);
  free(j);
}

/* Device memory holding host[0..n): stale values now, the real ones written
 * by a kernel on g_stream (queued, not yet run). */
static void produce(void *d, const void *host, size_t n) {
  unsigned char *stale = mp_alloc(n);
  memset(stale, 0x3c, n);
  dev_put(d, stale, n);
  write_job *j = malloc(sizeof *j);
  if (!j) mp_fatal("out of memory");
  j->dst = d;
  j->src = stale;
  memcpy(stale, host, n);
  j->len = n;
  if (!IS_SIM) { /* the producer's work: a copy queued on its stream */
    free(j);
    if (g_npending == (int)(sizeof g_pending / sizeof *g_pending)) stream_sync(g_stream);
    g_pending[g_npending++] = stale;
    dev_copy(d, stale, n, WF_COPY_H2D, g_stream);
    return;
  }
  if (wf_sim_launch(g_dev, g_stream, write_kernel, j) != WEFT_OK) mp_fatal("wf_sim_launch: %s", weft_last_error());
}

/* ------------------------------------------------------------ values */
static int64_t val(int rank, size_t i, uint64_t seed) { return (int64_t)(mp_hash((uint64_t)rank, i, seed) % 17) - 8; }
static void put(weft_dtype t, void *buf, size_t i, int64_t v) {
  if (mp_is_float(t)) mp_set_f(t, buf, i, (double)v);
  else mp_set_i(t, buf, i, v);
}
static int64_t get(weft_dtype t, const void *buf, size_t i) {
  return mp_is_float(t) ? (int64_t)mp_get_f(t, buf, i) : mp_get_i(t, buf, i);
}
static void fill(weft_dtype t, void *buf, size_t n, int rank, size_t from, uint64_t seed) {
  for (size_t i = 0; i < n; i++) put(t, buf, i, val(rank, from + i, seed));
}
/* Reads n elements of device d and compares with want[0..n) (as int64). */
static int check(weft_dtype t, const void *d, const int64_t *want, size_t n, const char *what) {
  size_t es = mp_esize(t);
  unsigned char *h = mp_alloc(n * es);
  dev_get(h, d, n * es);
  int ok = 1;
  for (size_t i = 0; i < n && ok; i++)
    if (get(t, h, i) != want[i])
      ok = mp_fail("%s: element %zu of %zu is %lld, expected %lld", what, i, n, (long long)get(t, h, i),
                   (long long)want[i]);
  free(h);
  return ok;
}

static weft_tensor dtensor(weft_dtype t, int64_t *shape, void *data) {
  return (weft_tensor){t, 1, shape, data, g_index, g_kind, g_stream};
}

/* 1 if device memory d still holds host[0..n) (an out-of-place input). */
static int check_input_kept(weft_dtype t, const void *d, const void *host, size_t n) {
  size_t es = mp_esize(t);
  unsigned char *h = mp_alloc(n * es);
  dev_get(h, d, n * es);
  int ok = memcmp(h, host, n * es) == 0 || mp_fail("the input was modified by an out-of-place allreduce");
  free(h);
  return ok;
}

/* ------------------------------------------------------------ the collectives */
static void *dev_alloc(size_t bytes, void *ctx) {
  (void)ctx;
  atomic_fetch_add(&g_user_allocs, 1);
  void *p = NULL;
  if (g_dev->ops->mem_alloc(g_dev, bytes, &p) != WEFT_OK) return NULL; /* the engine made the device current */
  return p;
}

/* One collective coll on count, dtype t; returns 1 if it passed. */
static int run_one(weft_group *g, const char *coll, weft_dtype t, size_t count, int variant, uint64_t seed) {
  int n = weft_group_size(g), me = weft_group_rank(g);
  size_t es = mp_esize(t);
  char name[128];
  snprintf(name, sizeof name, "%s.%s.%zu.%d.%llu", coll, weft_dtype_name(t), count, variant, (unsigned long long)seed);
  mp_case("%s", name);
  weft_request *req = NULL;
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  int ok = 1;
  size_t nin = count, nout = count;
  int64_t *want = NULL;
  if (!strcmp(coll, "allgather")) nin = count ? count + (size_t)me : 0;
  if (!strcmp(coll, "alltoall")) nin = nout = count * (size_t)n;
  size_t dim0 = count * (size_t)n + (count ? 1 : 0); /* reducescatter: uneven */
  size_t rs_off = 0;
  if (!strcmp(coll, "reducescatter")) {
    nin = dim0;
    for (int i = 0; i < me; i++) rs_off += dim0 / (size_t)n + ((size_t)i < dim0 % (size_t)n);
    nout = dim0 / (size_t)n + ((size_t)me < dim0 % (size_t)n);
  }
  if (!strcmp(coll, "allgather")) {
    nout = 0;
    for (int r = 0; r < n; r++) nout += count ? count + (size_t)r : 0;
  }
  int grank = mp_rank; /* values by world rank of each group member */
  int *wr = mp_alloc(sizeof(int) * (size_t)n);
  for (int r = 0; r < n; r++) wr[r] = g == mp_group ? r : (r == 0 ? 0 : r + 1); /* the process set: all but rank 1 */
  unsigned char *hin = mp_alloc(nin * es);
  fill(t, hin, nin, grank, 0, seed);
  void *din = dev_new(nin * es), *dout = NULL;
  int64_t shape_in[1] = {(int64_t)nin}, shape_out[1] = {(int64_t)nout};
  weft_tensor tin = dtensor(t, shape_in, din);
  want = mp_alloc(sizeof(int64_t) * (nout + 1));
  produce(din, hin, nin * es);
  weft_status st;
  if (!strcmp(coll, "allreduce")) {
    dout = variant ? dev_new(nout * es) : din; /* 1: out of place */
    if (variant) {
      unsigned char *stale = mp_alloc(nout * es);
      memset(stale, 0x5a, nout * es);
      dev_put(dout, stale, nout * es);
      free(stale);
    }
    weft_tensor tout = dtensor(t, shape_out, dout);
    for (size_t i = 0; i < nout; i++) {
      want[i] = 0;
      for (int r = 0; r < n; r++) want[i] += val(wr[r], i, seed);
    }
    st = weft_allreduce(g, name, &tin, &tout, WEFT_OP_SUM, NULL, &req);
  } else if (!strcmp(coll, "broadcast")) {
    int root = n - 1;
    for (size_t i = 0; i < nout; i++) want[i] = val(wr[root], i, seed);
    st = weft_broadcast(g, name, &tin, root, NULL, &req);
    dout = din;
  } else if (!strcmp(coll, "allgather")) {
    size_t k = 0;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < (count ? count + (size_t)r : 0); i++) want[k++] = val(wr[r], i, seed);
    if (variant) {
      opt.alloc = dev_alloc;
    }
    st = weft_allgather(g, name, &tin, &opt, &req);
  } else if (!strcmp(coll, "alltoall")) {
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) want[(size_t)r * count + i] = val(wr[r], (size_t)me * count + i, seed);
    st = weft_alltoall(g, name, &tin, NULL, NULL, &req);
  } else { /* reducescatter; variant 1: into a device output */
    for (size_t i = 0; i < nout; i++) {
      want[i] = 0;
      for (int r = 0; r < n; r++) want[i] += val(wr[r], rs_off + i, seed);
    }
    weft_tensor tout = {0};
    if (variant) {
      dout = dev_new(nout * es);
      tout = dtensor(t, shape_out, dout);
    }
    st = weft_reducescatter(g, name, &tin, variant ? &tout : NULL, WEFT_OP_SUM, NULL, &req);
  }
  mp_submitted(st, &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK) ok = mp_fail("weft_request_output: %s", weft_last_error());
    else if (out.device != g_index || out.device_kind != g_kind)
      ok = mp_fail("output reported on device %d kind %d", out.device, out.device_kind);
    else if (!dout && (size_t)mp_numel(out.ndim, out.shape) != nout)
      ok = mp_fail("output has %zu elements, expected %zu", mp_numel(out.ndim, out.shape), nout);
    else if (dout && !strcmp(coll, "reducescatter") && out.data != dout)
      ok = mp_fail("reducescatter into the caller's tensor reports output %p, not the tensor %p", out.data, dout);
    else {
      void *res = dout ? dout : out.data;
      ok = check(t, res, want, nout, name);
      if (ok && !strcmp(coll, "allreduce") && variant) ok = check_input_kept(t, din, hin, nin);
      if (!strcmp(coll, "allgather") && variant) {
        dev_free(out.data); /* the allocator's: ours */
        atomic_fetch_sub(&g_user_allocs, 1);
      }
    }
  } else {
    ok = 0;
  }
  stream_sync(g_stream);
  weft_request_free(req);
  if (dout && dout != din) dev_free(dout);
  dev_free(din);
  free(hin);
  free(want);
  free(wr);
  mp_case_end();
  return ok;
}

/* n tensors in flight at once (fusion), or one grouped op of n. */
static void many(const char *coll, int grouped, int n, size_t count, uint64_t seed) {
  weft_dtype t = WEFT_DTYPE_FLOAT32;
  size_t es = 4;
  int nr = mp_size;
  mp_case("%s %s x%d", grouped ? "grouped" : "fused", coll, n);
  void **din = calloc((size_t)n, sizeof *din);
  unsigned char *h = mp_alloc(count * (size_t)nr * es);
  int64_t shape[1] = {(int64_t)count}, rshape[1] = {(int64_t)(count * (size_t)nr)};
  weft_tensor *ts = calloc((size_t)n, sizeof *ts);
  weft_request **reqs = calloc((size_t)n, sizeof *reqs), *greq = NULL;
  int rs = !strcmp(coll, "reducescatter");
  size_t nin = rs ? count * (size_t)nr : count;
  for (int k = 0; k < n; k++) {
    fill(t, h, nin, mp_rank, 0, seed + (uint64_t)k);
    din[k] = dev_new(nin * es);
    produce(din[k], h, nin * es);
    ts[k] = dtensor(t, rs ? rshape : shape, din[k]);
  }
  char name[96];
  snprintf(name, sizeof name, "%s.%s.%d", grouped ? "grp" : "fuse", coll, n);
  weft_status st = WEFT_OK;
  if (grouped && !strcmp(coll, "allreduce"))
    st = weft_grouped_allreduce(mp_group, name, n, ts, ts, WEFT_OP_SUM, NULL, &greq);
  else if (grouped && !strcmp(coll, "allgather"))
    st = weft_grouped_allgather(mp_group, name, n, ts, NULL, &greq);
  else if (grouped)
    st = weft_grouped_reducescatter(mp_group, name, n, ts, NULL, WEFT_OP_SUM, NULL, &greq);
  if (grouped) mp_submitted(st, &greq, name);
  for (int k = 0; !grouped && k < n; k++) {
    char nk[112];
    snprintf(nk, sizeof nk, "%s.%d", name, k);
    st = weft_allreduce(mp_group, nk, &ts[k], &ts[k], WEFT_OP_SUM, NULL, &reqs[k]);
    mp_submitted(st, &reqs[k], nk);
  }
  int64_t *want = mp_alloc(sizeof(int64_t) * (count * (size_t)nr + 1));
  if (grouped) mp_wait_ok(greq, name);
  for (int k = 0; k < n; k++) {
    if (!grouped) mp_wait_ok(reqs[k], name);
    uint64_t sd = seed + (uint64_t)k;
    weft_tensor out;
    const void *res = din[k];
    size_t m = count;
    if (!strcmp(coll, "allreduce")) {
      for (size_t i = 0; i < count; i++) {
        want[i] = 0;
        for (int r = 0; r < nr; r++) want[i] += val(r, i, sd);
      }
    } else if (!strcmp(coll, "allgather")) {
      m = count * (size_t)nr;
      for (int r = 0; r < nr; r++)
        for (size_t i = 0; i < count; i++) want[(size_t)r * count + i] = val(r, i, sd);
      if (weft_request_output_at(greq, k, &out) != WEFT_OK) mp_fail("output %d: %s", k, weft_last_error());
      res = out.data;
    } else {
      for (size_t i = 0; i < count; i++) {
        want[i] = 0;
        for (int r = 0; r < nr; r++) want[i] += val(r, (size_t)mp_rank * count + i, sd);
      }
      if (weft_request_output_at(greq, k, &out) != WEFT_OK) mp_fail("output %d: %s", k, weft_last_error());
      res = out.data;
    }
    check(t, res, want, m, name);
    if (!grouped) weft_request_free(reqs[k]);
  }
  stream_sync(g_stream);
  if (greq) weft_request_free(greq);
  for (int k = 0; k < n; k++) dev_free(din[k]);
  free(din);
  free(h);
  free(ts);
  free(reqs);
  free(want);
  mp_case_end();
}

/* consumer_stream: the request completes once the copy up is queued; a
 * kernel on the consumer stream then reads the result. */
typedef struct {
  const void *src;
  void *dst;
  size_t len;
} read_job;
static void read_kernel(void *arg) {
  read_job *j = arg;
  wf_sim_read(g_dev, j->dst, j->src, j->len);
}
static void consumer_case(size_t count) {
  mp_case("consumer_stream %zu", count);
  weft_dtype t = WEFT_DTYPE_INT32;
  int32_t *h = mp_alloc(count * 4), *back = mp_alloc(count * 4);
  fill(t, h, count, mp_rank, 0, 77);
  void *d = dev_new(count * 4);
  produce(d, h, count * 4);
  int64_t shape[1] = {(int64_t)count};
  weft_tensor x = dtensor(t, shape, d);
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.consumer_stream = g_consumer;
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, "consumer", &x, &x, WEFT_OP_SUM, &opt, &req), &req, "consumer");
  if (mp_wait_ok(req, "consumer")) {
    read_job j = {d, back, count * 4};
    if (IS_SIM) wf_sim_launch(g_dev, g_consumer, read_kernel, &j);
    else dev_copy(back, d, count * 4, WF_COPY_D2H, g_consumer);
    stream_sync(g_consumer);
    for (size_t i = 0; i < count; i++) {
      int64_t w = 0;
      for (int r = 0; r < mp_size; r++) w += val(r, i, 77);
      if (back[i] != w) {
        mp_fail("consumer kernel read element %zu = %d, expected %lld", i, back[i], (long long)w);
        break;
      }
    }
  }
  stream_sync(g_stream);
  weft_request_free(req);
  dev_free(d);
  free(h);
  free(back);
  mp_case_end();
}

/* Errors: local misuse at once; a CPU/device mismatch across ranks. */
static void error_cases(void) {
  int64_t shape[1] = {8};
  float host[8] = {0};
  void *d = dev_new(32);
  weft_request *req = NULL;
  weft_tensor x = dtensor(WEFT_DTYPE_FLOAT32, shape, d), h = {WEFT_DTYPE_FLOAT32, 1, shape, host, WEFT_DEVICE_CPU,
                                                               0, NULL};
  mp_case("device/host in one op");
  weft_status st = weft_allreduce(mp_group, "mixed", &x, &h, WEFT_OP_SUM, NULL, &req);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "host memory") ||
      !strstr(weft_last_error(), IS_SIM ? "sim:" : "cuda:"))
    mp_fail("input on the device, output on host: %s: %s", weft_status_string(st), weft_last_error());
  mp_case_end();
  mp_case("host pointer marked device");
  weft_tensor bad = dtensor(WEFT_DTYPE_FLOAT32, shape, host);
  st = weft_allreduce(mp_group, "bad", &bad, &bad, WEFT_OP_SUM, NULL, &req);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "'bad'"))
    mp_fail("a host pointer as device memory: %s: %s", weft_status_string(st), weft_last_error());
  bad.data = (void *)(uintptr_t)0x10;
  st = weft_allreduce(mp_group, "bad", &bad, &bad, WEFT_OP_SUM, NULL, &req);
  if (st != WEFT_ERR_INVALID_ARGUMENT) mp_fail("a wild pointer: %s: %s", weft_status_string(st), weft_last_error());
  bad = dtensor(WEFT_DTYPE_FLOAT32, shape, d);
  bad.device_kind = WEFT_DEVICE_KIND_CUDA;
  st = IS_SIM ? weft_allreduce(mp_group, "cuda", &bad, &bad, WEFT_OP_SUM, NULL, &req) : WEFT_ERR_NOT_SUPPORTED;
  if (!IS_SIM) {
    /* sim memory marked CUDA: the sim's case only */
  } else if (st == WEFT_OK) {
    weft_wait(req, 0); /* CUDA loaded here (a GPU machine): not this case */
    weft_request_free(req);
  } else if (!strstr(weft_last_error(), "'cuda'")) {
    mp_fail("a CUDA tensor: %s: %s", weft_status_string(st), weft_last_error());
  }
  mp_case_end();
  if (mp_size > 1) {
    mp_case("device kind mismatch across ranks");
    weft_tensor mine = mp_rank == 0 ? h : x;
    if (mp_rank != 0) produce(d, host, 32);
    mp_submitted(weft_allreduce(mp_group, "kinds", &mine, &mine, WEFT_OP_SUM, NULL, &req), &req, "kinds");
    st = mp_wait(req, "kinds");
    const char *e = weft_request_error(req);
    if (st != WEFT_ERR_MISMATCH || !strstr(e, "mismatched devices") || !strstr(e, "rank 0") || !strstr(e, "rank 1"))
      mp_fail("expected a device mismatch naming ranks 0 and 1: %s: %s", weft_status_string(st), e);
    weft_request_free(req);
    mp_case_end();
  }
  stream_sync(g_stream);
  dev_free(d);
}

/* --pool: a host tensor and two device tensors allreduced at once (the
 * coordinator may fuse them: host and device pieces in one chunk). */
static void mixed_case(size_t count, uint64_t seed) {
  mp_case("host and device tensors in flight together %zu", count);
  weft_dtype t = WEFT_DTYPE_FLOAT32;
  float *h = mp_alloc(count * 4), *hd = mp_alloc(count * 4);
  void *d[2];
  weft_request *req[3] = {0};
  int64_t shape[1] = {(int64_t)count};
  for (int k = 0; k < 2; k++) {
    fill(t, hd, count, mp_rank, 0, seed + (uint64_t)k);
    d[k] = dev_new(count * 4);
    produce(d[k], hd, count * 4);
  }
  fill(t, h, count, mp_rank, 0, seed + 2);
  weft_tensor th = {t, 1, shape, h, WEFT_DEVICE_CPU, 0, NULL};
  for (int k = 0; k < 3; k++) {
    char nm[64];
    snprintf(nm, sizeof nm, "mixed.%zu.%d", count, k);
    weft_tensor td = dtensor(t, shape, k < 2 ? d[k] : NULL);
    weft_tensor *x = k < 2 ? &td : &th;
    mp_submitted(weft_allreduce(mp_group, nm, x, x, WEFT_OP_SUM, NULL, &req[k]), &req[k], nm);
  }
  int64_t *want = mp_alloc(sizeof(int64_t) * count);
  for (int k = 0; k < 3; k++) {
    if (!mp_wait_ok(req[k], "mixed")) continue;
    for (size_t i = 0; i < count; i++) {
      want[i] = 0;
      for (int r = 0; r < mp_size; r++) want[i] += val(r, i, seed + (uint64_t)k);
    }
    if (k < 2) {
      check(t, d[k], want, count, "mixed device");
    } else {
      for (size_t i = 0; i < count; i++)
        if ((int64_t)h[i] != want[i]) {
          mp_fail("mixed host: element %zu is %g, expected %lld", i, h[i], (long long)want[i]);
          break;
        }
    }
    weft_request_free(req[k]);
  }
  stream_sync(g_stream);
  dev_free(d[0]);
  dev_free(d[1]);
  free(h);
  free(hd);
  free(want);
  mp_case_end();
}

/* --pool: a large allreduce on g submitted with the world's own, so that
 * one of them finds the pool's slots taken (world: every rank; g: all but
 * rank 1). */
static void concurrent_case(weft_group *g, size_t count, uint64_t seed) {
  mp_case("world and process set at once %zu", count);
  weft_dtype t = WEFT_DTYPE_INT32;
  int32_t *hw = mp_alloc(count * 4), *hg = mp_alloc(count * 4);
  fill(t, hw, count, mp_rank, 0, seed);
  fill(t, hg, count, mp_rank, 0, seed + 1);
  void *dw = dev_new(count * 4), *dg = g ? dev_new(count * 4) : NULL;
  produce(dw, hw, count * 4);
  if (g) produce(dg, hg, count * 4);
  int64_t shape[1] = {(int64_t)count};
  weft_tensor tw = dtensor(t, shape, dw), tg = dtensor(t, shape, dg);
  weft_request *rw = NULL, *rg = NULL;
  mp_submitted(weft_allreduce(mp_group, "conc.world", &tw, &tw, WEFT_OP_SUM, NULL, &rw), &rw, "conc.world");
  if (g) mp_submitted(weft_allreduce(g, "conc.set", &tg, &tg, WEFT_OP_SUM, NULL, &rg), &rg, "conc.set");
  int64_t *want = mp_alloc(sizeof(int64_t) * count);
  if (mp_wait_ok(rw, "conc.world")) {
    for (size_t i = 0; i < count; i++) {
      want[i] = 0;
      for (int r = 0; r < mp_size; r++) want[i] += val(r, i, seed);
    }
    check(t, dw, want, count, "conc.world");
  }
  if (g && mp_wait_ok(rg, "conc.set")) {
    for (size_t i = 0; i < count; i++) {
      want[i] = 0;
      for (int r = 0; r < mp_size; r++)
        if (r != 1) want[i] += val(r, i, seed + 1);
    }
    check(t, dg, want, count, "conc.set");
  }
  stream_sync(g_stream);
  weft_request_free(rw);
  if (rg) weft_request_free(rg);
  dev_free(dw);
  if (dg) dev_free(dg);
  free(hw);
  free(hg);
  free(want);
  mp_case_end();
}

/* The sim's pinned allocations so far. */
/* --pool: the last rank joins (weft_join) while the others run device
 * allreduces of many chunks (sum, and max in int32 with two in flight,
 * fused): it takes part with the identity, chunk by chunk in host memory as
 * the others run theirs through the pipeline (the response says the tensor
 * is staged). Then the others join; the last to join is one of them. */
static void join_case(size_t count, uint64_t seed) {
  mp_case("a joined rank in device allreduces %zu", count);
  int last = mp_size - 1;
  weft_request *jr = NULL;
  if (mp_rank == last) mp_submitted(weft_join(mp_group, NULL, &jr), &jr, "join");
  if (mp_rank != last) {
    static const struct { weft_dtype t; weft_reduce_op op; } k[3] = {
        {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM}, {WEFT_DTYPE_INT32, WEFT_OP_MAX}, {WEFT_DTYPE_INT32, WEFT_OP_SUM}};
    void *d[3];
    weft_request *req[3] = {0};
    int64_t shape[1] = {(int64_t)count};
    int64_t *want = mp_alloc(sizeof(int64_t) * count);
    unsigned char *h = mp_alloc(count * 4);
    for (int j = 0; j < 3; j++) {
      char nm[64];
      snprintf(nm, sizeof nm, "joined.%zu.%d", count, j);
      fill(k[j].t, h, count, mp_rank, 0, seed + (uint64_t)j);
      d[j] = dev_new(count * 4);
      produce(d[j], h, count * 4);
      weft_tensor td = dtensor(k[j].t, shape, d[j]);
      mp_submitted(weft_allreduce(mp_group, nm, &td, &td, k[j].op, NULL, &req[j]), &req[j], nm);
    }
    for (int j = 0; j < 3; j++) {
      if (!mp_wait_ok(req[j], "joined")) continue;
      for (size_t i = 0; i < count; i++) {
        want[i] = k[j].op == WEFT_OP_MAX ? INT64_MIN : 0;
        for (int r = 0; r < mp_size; r++) {
          if (r == last) continue; /* joined: the identity */
          int64_t v = val(r, i, seed + (uint64_t)j);
          want[i] = k[j].op == WEFT_OP_MAX ? (v > want[i] ? v : want[i]) : want[i] + v;
        }
      }
      check(k[j].t, d[j], want, count, "allreduce beside a joined rank");
      weft_request_free(req[j]);
    }
    stream_sync(g_stream);
    for (int j = 0; j < 3; j++) dev_free(d[j]);
    free(want);
    free(h);
    mp_submitted(weft_join(mp_group, NULL, &jr), &jr, "join");
  }
  int lj = -1;
  if (mp_wait_ok(jr, "join") && (weft_request_last_joined(jr, &lj) != WEFT_OK || lj < 0 || lj == last))
    mp_fail("the last rank to join is %d (rank %d joined first)", lj, last);
  weft_request_free(jr);
  mp_case_end();
}

static long pinned_made(void) {
  wf_sim_stats s = {0};
  wf_sim_stats_get(g_dev, &s);
  return s.host_allocs;
}

int main(int argc, char **argv) {
  int probe = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--large") && i + 1 < argc) g_large = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const char *k = argv[++i];
      if (strcmp(k, "sim") && strcmp(k, "cuda")) {
        fprintf(stderr, "mp_device: --device %s (sim or cuda)\n", k);
        return 2;
      }
      g_kind = strcmp(k, "cuda") ? WEFT_DEVICE_KIND_SIM : WEFT_DEVICE_KIND_CUDA;
    }
    else if (!strcmp(argv[i], "--probe")) probe = 1;
    else if (!strcmp(argv[i], "--pool")) g_pool = 1;
  }
  if (g_pool && !IS_SIM) {
    fprintf(stderr, "mp_device: --pool counts the sim's allocations (--device sim)\n");
    return 2;
  }
  int ndev = 2;
  if (!IS_SIM) { /* no usable CUDA here: skipped, before joining (every rank alike) */
    if (weft_device_available(WEFT_DEVICE_KIND_CUDA, &ndev) != WEFT_OK) {
      printf("SKIP: no usable CUDA: %s\n", weft_last_error());
      return 77;
    }
    if (probe) {
      printf("CUDA: %d device(s)\n", ndev);
      return 0;
    }
  }
  mp_setup();
  if (wf_device_get(IS_SIM ? WF_DEVICE_SIM : WF_DEVICE_CUDA, &g_dev) != WEFT_OK)
    mp_fatal("device: %s", weft_last_error());
  g_index = weft_local_rank(mp_world) % ndev;
  if (IS_SIM) wf_sim_set_seed(g_dev, 1000 + (unsigned long long)mp_rank);
  g_dev->ops->set_device(g_dev, g_index);
  if (g_dev->ops->stream_create(g_dev, &g_stream) != WEFT_OK || g_dev->ops->stream_create(g_dev, &g_consumer) ||
      g_dev->ops->stream_create(g_dev, &g_helper))
    mp_fatal("stream_create: %s", weft_last_error());
  const char *colls[] = {"allreduce", "broadcast", "allgather", "alltoall", "reducescatter"};
  size_t counts[] = {0, 1, 37, g_large};
  uint64_t seed = 1;
  long pinned_warm = -1; /* pinned allocations after the first operation */
  if (g_pool) {
    run_one(mp_group, "allreduce", WEFT_DTYPE_FLOAT32, g_large, 0, seed++);
    pinned_warm = pinned_made();
  }
  for (size_t c = 0; c < sizeof colls / sizeof *colls; c++)
    for (size_t k = 0; k < sizeof k_dtypes / sizeof *k_dtypes; k++)
      for (size_t z = 0; z < sizeof counts / sizeof *counts; z++) {
        int variants = !strcmp(colls[c], "broadcast") || !strcmp(colls[c], "alltoall") ? 1 : 2;
        for (int v = 0; v < variants; v++) run_one(mp_group, colls[c], k_dtypes[k], counts[z], v, seed++);
      }
  many("allreduce", 0, 24, 33, 500);
  many("allreduce", 1, 5, 1001, 600);
  many("allgather", 1, 4, 17, 700);
  many("reducescatter", 1, 3, 9, 800);
  consumer_case(4099);
  if (g_pool) {
    many("allreduce", 0, 6, g_large / 3 + 1, 1500);
    many("allreduce", 1, 4, g_large / 2 + 3, 1600);
    many("reducescatter", 1, 3, g_large / 4 + 1, 1700);
    mixed_case(g_large / 2 + 5, 1800);
    consumer_case(g_large);
  }
  /* a process set: every rank but rank 1 */
  if (mp_size >= 3) {
    int *m = mp_alloc(sizeof(int) * (size_t)mp_size), nm = 0;
    for (int r = 0; r < mp_size; r++)
      if (r != 1) m[nm++] = r;
    weft_group *g = NULL;
    if (mp_rank != 1) {
      if (weft_group_create(mp_world, m, nm, &g) != WEFT_OK) mp_fatal("group: %s", weft_last_error());
      run_one(g, "allreduce", WEFT_DTYPE_FLOAT32, 1001, 1, 900);
      run_one(g, "allgather", WEFT_DTYPE_BFLOAT16, 7, 0, 901);
      if (g_pool) {
        run_one(g, "allreduce", WEFT_DTYPE_BFLOAT16, g_large, 1, 902);
        run_one(g, "broadcast", WEFT_DTYPE_FLOAT16, g_large, 0, 903);
        run_one(g, "alltoall", WEFT_DTYPE_FLOAT64, g_large / 3, 0, 904);
      }
    }
    if (g_pool) concurrent_case(g, g_large, 950); /* rank 1: the world's only */
    if (g) weft_group_destroy(g);
    free(m);
  }
  if (g_pool) {
    mp_case("pinned allocations bounded");
    long slots = 0, made = pinned_made();
    const char *pb = getenv("WEFT_DEVICE_POOL_BYTES"), *cb = getenv("WEFT_DEVICE_CHUNK_BYTES");
    if (pb && cb && atol(cb) > 0) slots = atol(pb) / atol(cb);
    if (slots < 1) slots = 1;
    if (made != pinned_warm || made > slots || made < 1)
      mp_fail("%ld pinned allocations after every operation, %ld after the first (the pool has %ld slots)", made,
              pinned_warm, slots);
    mp_case_end();
    if (mp_size >= 2) join_case(g_large, 2000);
  }
  error_cases();
  stream_sync(g_stream);
  stream_sync(g_consumer);
  g_dev->ops->stream_destroy(g_dev, g_stream);
  g_dev->ops->stream_destroy(g_dev, g_consumer);
  g_dev->ops->stream_destroy(g_dev, g_helper);
  int rc = mp_teardown();
  if (!IS_SIM) {
    if (!rc) mp_say("PASS rank %d: cuda", mp_rank);
    return rc;
  }
  /* nothing of weft's staging left behind: pinned buffers, events, streams,
   * device outputs (ours are freed, the allocator's counted) */
  mp_case("no leak after finalize");
  wf_sim_stats s = {0};
  double end = mp_now() + 10;
  do {
    wf_sim_stats_get(g_dev, &s);
    if (!s.outstanding && !s.events) break;
    mp_sleep_ms(5);
  } while (mp_now() < end);
  if (s.allocations || s.pinned || s.streams || s.events || s.outstanding || atomic_load(&g_user_allocs)) {
    rc = 1;
    mp_fail("sim after finalize: %ld allocations, %ld pinned, %ld streams, %ld events, %ld queued; %ld "
            "of the allocator's outputs unfreed", s.allocations, s.pinned, s.streams, s.events,
            s.outstanding, (long)atomic_load(&g_user_allocs));
  }
  mp_case_end();
  if (!rc) mp_say("PASS rank %d: no leak", mp_rank);
  return rc;
}
