/* feat_fusion.c - tensor fusion must not change a single result bit.
 *
 * One process per rank runs the same workload in three worlds one after the
 * other (init, work, finalize; the fusion threshold is read at init):
 *   "fused"   - the default WEFT_FUSION_THRESHOLD (128 MiB),
 *   "small"   - WEFT_FUSION_THRESHOLD=16384 (fusion buffers split at the
 *               threshold; a mix of fused and single responses),
 *   "unfused" - WEFT_FUSION_THRESHOLD=0 (fusion off).
 * The workload: --tensors allreduces (default 100) of 0..5000 elements each,
 * submitted at once, in runs of the same (dtype, op, prescale, postscale) so
 * that the coordinator can fuse them, with float32/float64/float16/bfloat16/
 * int32/int64 and sum/average/min/max/product, prescale and postscale,
 * in place and out of place. The layout is the same on every rank (shared
 * seed); the values come from a per-rank seeded PRNG.
 *
 * Checks: every output of "fused" and "small" equals the "unfused" one bit
 * for bit (memcmp); every output matches a reference computed here from all
 * ranks' inputs (exactly with --values integer, where every partial result
 * is representable so no reduction order can matter; within rounding bounds
 * with --values random). With --values random on 3+ ranks a bit difference
 * means the fused buffer was reduced in a different order than the unfused
 * tensors (float addition is not associative): reported, never tolerated.
 *
 * With --tl DIR each world writes DIR/fusion_<run>.<rank>.json; the driver
 * (features.sh) then proves that fusion happened in "fused" (ALLREDUCE
 * phases of several tensors open at once) and never in "unfused".
 *
 * --probe N instead runs one world with N float32 sum allreduces of 1000
 * integer-valued elements submitted at once and checks their sums exactly
 * (the driver counts the engine's "run allreduce" debug lines to see
 * whether they were fused: the HOROVOD_FUSION_THRESHOLD alias test). */
#include "feat_common.h"

#define MAX_TENSORS 1000
#define MAX_COUNT 5000

typedef struct cfg {
  weft_dtype dt;
  weft_reduce_op op;
  double pre, post;
} cfg;

static const cfg k_cfgs[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1.0, 1.0},     {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 1.0, 1.0},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_AVERAGE, 1.0, 1.0}, {WEFT_DTYPE_FLOAT64, WEFT_OP_AVERAGE, 0.5, 3.0},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 0.25, 1.5},    {WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, 1.0, 1.0},
    {WEFT_DTYPE_FLOAT64, WEFT_OP_MAX, 1.0, 1.0},     {WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, 1.0, 1.0},
    {WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 1.0, 1.0},     {WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 1.0, 1.0},
    {WEFT_DTYPE_INT32, WEFT_OP_SUM, 1.0, 1.0},       {WEFT_DTYPE_INT64, WEFT_OP_MAX, 1.0, 1.0},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_AVERAGE, 2.0, 0.5}, {WEFT_DTYPE_FLOAT64, WEFT_OP_PRODUCT, 1.0, 1.0},
};
#define NCFG (sizeof k_cfgs / sizeof k_cfgs[0])

typedef struct tensor {
  int cfg;
  int64_t count;
  int inplace;
  void *in, *out;          /* this run's buffers */
  void *saved[3];          /* outputs of each run */
} tensor;

static tensor g_t[MAX_TENSORS];
static int g_n = 100;
static int g_integer = 1;
static const uint64_t k_layout_seed = 20240611;
static const uint64_t k_value_seed = 777;

/* Element j of rank r's input of tensor i, as the dtype stores it. */
static void input_value(int r, int i, int64_t j, void *dst, size_t at) {
  const cfg *c = &k_cfgs[g_t[i].cfg];
  uint64_t h = feat_hash((uint64_t)r, (uint64_t)i * 65536u + (uint64_t)j, k_value_seed);
  double u = feat_unit(h);
  switch (c->dt) {
    case WEFT_DTYPE_INT32: ((int32_t *)dst)[at] = (int32_t)(h % 2000001u) - 1000000; return;
    case WEFT_DTYPE_INT64: ((int64_t *)dst)[at] = (int64_t)h; return;
    case WEFT_DTYPE_FLOAT16:
    case WEFT_DTYPE_BFLOAT16: {
      double v = g_integer ? (double)((int)(h % 61u) - 30) : u * 60.0 - 30.0;
      feat_put(c->dt, dst, at, v);
      return;
    }
    default: break;
  }
  double v;
  if (c->op == WEFT_OP_PRODUCT) {
    static const double k_small[4] = {-2.0, -1.0, 1.0, 2.0};
    v = g_integer ? k_small[h & 3u] : 0.5 + 1.5 * u;
  } else {
    v = g_integer ? (double)((int64_t)(h % 2001u) - 1000) : u * 2000.0 - 1000.0;
  }
  feat_put(c->dt, dst, at, v);
}

/* The same rounding as the dtype: double -> element -> double. */
static double round_to(weft_dtype t, double v) {
  unsigned char tmp[8];
  feat_put(t, tmp, 0, v);
  return feat_get(t, tmp, 0);
}

/* x * f as the library scales (Horovod's rule): float64 in double; float32
 * and the 16-bit floats one float32 product x * (float)f, rounded to t. */
static double scaled(weft_dtype t, double x, double f) {
  if (t == WEFT_DTYPE_FLOAT64) return x * f;
  volatile float p = (float)x * (float)f; /* no excess precision */
  return round_to(t, p);
}

static double unit_roundoff(weft_dtype t) {
  switch (t) {
    case WEFT_DTYPE_FLOAT16: return 0x1p-11;
    case WEFT_DTYPE_BFLOAT16: return 0x1p-8;
    case WEFT_DTYPE_FLOAT32: return 0x1p-24;
    default: return 0x1p-53;
  }
}

/* Checks tensor i's output of this run against the reference computed from
 * every rank's input. Returns the number of wrong elements. */
static int check_reference(int i, const char *run) {
  const tensor *t = &g_t[i];
  const cfg *c = &k_cfgs[t->cfg];
  int bad = 0;
  for (int64_t j = 0; j < t->count; j++) {
    if (c->dt == WEFT_DTYPE_INT32 || c->dt == WEFT_DTYPE_INT64) {
      int64_t acc = c->op == WEFT_OP_MAX ? INT64_MIN : 0;
      for (int r = 0; r < feat_size; r++) {
        int64_t x;
        if (c->dt == WEFT_DTYPE_INT32) {
          int32_t v;
          input_value(r, i, j, &v, 0);
          x = v;
        } else {
          input_value(r, i, j, &x, 0);
        }
        acc = c->op == WEFT_OP_MAX ? (x > acc ? x : acc) : acc + x;
      }
      int64_t got = c->dt == WEFT_DTYPE_INT32 ? ((int32_t *)t->out)[j] : ((int64_t *)t->out)[j];
      if (got != acc && ++bad <= 3)
        feat_fail("%s: tensor %d (%s %s) element %lld: got %lld, expected %lld", run, i, weft_dtype_name(c->dt),
                  weft_reduce_op_name(c->op), (long long)j, (long long)got, (long long)acc);
      continue;
    }
    /* floats: each rank's prescaled input as the dtype stores it, combined
     * in double (exact for --values integer), then the postscale */
    double acc = 0, mag = 0;
    for (int r = 0; r < feat_size; r++) {
      unsigned char raw[8];
      input_value(r, i, j, raw, 0);
      double x = scaled(c->dt, feat_get(c->dt, raw, 0), c->pre);
      if (r == 0) acc = x;
      else if (c->op == WEFT_OP_MIN) acc = x < acc ? x : acc;
      else if (c->op == WEFT_OP_MAX) acc = x > acc ? x : acc;
      else if (c->op == WEFT_OP_PRODUCT) acc *= x;
      else acc += x;
      mag += fabs(x);
    }
    double f = c->post;
    if (c->op == WEFT_OP_AVERAGE) f /= feat_size;
    double expect = scaled(c->dt, round_to(c->dt, acc), f);
    double got = feat_get(c->dt, t->out, (size_t)j);
    double tol = 0;
    if (!g_integer && (c->op == WEFT_OP_SUM || c->op == WEFT_OP_AVERAGE))
      tol = (feat_size + 2) * unit_roundoff(c->dt) * mag * fabs(f);
    else if (!g_integer && c->op == WEFT_OP_PRODUCT)
      tol = (feat_size + 2) * unit_roundoff(c->dt) * fabs(expect);
    if (!(fabs(got - expect) <= tol) && ++bad <= 3)
      feat_fail("%s: tensor %d (%s %s pre %g post %g) element %lld: got %.17g, expected %.17g (tolerance %g)", run, i,
                weft_dtype_name(c->dt), weft_reduce_op_name(c->op), c->pre, c->post, (long long)j, got, expect, tol);
  }
  return bad;
}

/* Layout shared by every rank: runs of 1..16 tensors with the same config. */
static void make_layout(void) {
  int i = 0, run = 0;
  while (i < g_n) {
    uint64_t h = feat_hash(1000003, (uint64_t)run, k_layout_seed);
    int c = (int)(h % NCFG), len = 1 + (int)((h >> 20) % 16u);
    for (int k = 0; k < len && i < g_n; k++, i++) {
      uint64_t h2 = feat_hash(2000003, (uint64_t)i, k_layout_seed);
      g_t[i].cfg = c;
      /* empty tensors: now and then, and inside every run of 3 or more (a
       * fused response with an empty tensor between others) */
      int empty = h2 % 40u == 0 || (k == 1 && len >= 3);
      g_t[i].count = empty ? 0 : 1 + (int64_t)((h2 >> 8) % MAX_COUNT);
      g_t[i].inplace = (int)((h2 >> 40) & 1u);
    }
    run++;
  }
}

/* One world: submit every tensor at once, wait, check, save the outputs. */
static void run_world(int which, const char *run, const char *threshold, const char *tl_dir) {
  if (threshold) setenv("WEFT_FUSION_THRESHOLD", threshold, 1);
  else unsetenv("WEFT_FUSION_THRESHOLD");
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  feat_setup();
  feat_case("fusion run '%s' (threshold %s, %s values, %d tensors)", run, threshold ? threshold : "default",
            g_integer ? "integer" : "random", g_n);
  if (tl_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/fusion_%s.%%r.json", tl_dir, run);
    weft_status st = weft_timeline_start(feat_world, path, 0);
    if (st != WEFT_OK) feat_fail("weft_timeline_start(%s): %s: %s", path, weft_status_string(st), weft_last_error());
  }
  weft_group *g = weft_world_group(feat_world);
  weft_request *req[MAX_TENSORS];
  int64_t shapes[MAX_TENSORS];
  for (int i = 0; i < g_n; i++) {
    tensor *t = &g_t[i];
    const cfg *c = &k_cfgs[t->cfg];
    size_t es = feat_esize(c->dt);
    t->in = feat_alloc((size_t)t->count * es);
    t->out = t->inplace ? t->in : feat_alloc((size_t)t->count * es);
    for (int64_t j = 0; j < t->count; j++) input_value(feat_rank, i, j, t->in, (size_t)j);
  }
  for (int i = 0; i < g_n; i++) {
    tensor *t = &g_t[i];
    const cfg *c = &k_cfgs[t->cfg];
    char name[64];
    snprintf(name, sizeof name, "fuse.%d", i);
    shapes[i] = t->count;
    weft_tensor in = feat_tensor(c->dt, &shapes[i], t->in), out = feat_tensor(c->dt, &shapes[i], t->out);
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.prescale = c->pre;
    o.postscale = c->post;
    req[i] = NULL;
    feat_submitted(weft_allreduce(g, name, &in, &out, c->op, &o, &req[i]), &req[i], name);
  }
  for (int i = 0; i < g_n; i++) {
    char what[64];
    snprintf(what, sizeof what, "%s: tensor fuse.%d", run, i);
    feat_wait_ok(req[i], what);
    weft_request_free(req[i]);
  }
  int wrong = 0;
  for (int i = 0; i < g_n; i++) {
    tensor *t = &g_t[i];
    wrong += check_reference(i, run) > 0;
    t->saved[which] = t->out;
    if (!t->inplace) free(t->in);
    t->in = t->out = NULL;
  }
  if (wrong) feat_fail("%s: %d of %d tensors differ from the reference", run, wrong, g_n);
  if (tl_dir) {
    weft_status st = weft_timeline_stop(feat_world);
    if (st != WEFT_OK) feat_fail("weft_timeline_stop: %s: %s", weft_status_string(st), weft_last_error());
  }
  feat_case_end();
  feat_leave();
}

/* Bit-for-bit comparison of run a's outputs with run b's. */
static void compare_runs(int a, const char *na, int b, const char *nb) {
  feat_case("fusion bit-exactness: '%s' vs '%s' (%s values)", na, nb, g_integer ? "integer" : "random");
  int differ = 0;
  for (int i = 0; i < g_n; i++) {
    const tensor *t = &g_t[i];
    const cfg *c = &k_cfgs[t->cfg];
    size_t es = feat_esize(c->dt);
    if (!memcmp(t->saved[a], t->saved[b], (size_t)t->count * es)) continue;
    int64_t j, ndiff = 0;
    for (int64_t k = 0; k < t->count; k++) ndiff += memcmp((char *)t->saved[a] + k * es, (char *)t->saved[b] + k * es, es) != 0;
    for (j = 0; j < t->count && !memcmp((char *)t->saved[a] + j * es, (char *)t->saved[b] + j * es, es); j++) {
    }
    differ++;
    feat_fail("tensor fuse.%d (%s %s pre %g post %g, %lld elements): %lld elements differ; first at %lld: %s %.17g vs %s "
              "%.17g",
              i, weft_dtype_name(c->dt), weft_reduce_op_name(c->op), c->pre, c->post, (long long)t->count,
              (long long)ndiff, (long long)j, na, feat_get(c->dt, t->saved[a], (size_t)j), nb,
              feat_get(c->dt, t->saved[b], (size_t)j));
  }
  if (differ) feat_fail("%d of %d tensors are not bit-identical between '%s' and '%s'", differ, g_n, na, nb);
  feat_case_end();
}

/* --probe N: N fusable float32 sums, checked exactly. */
static int probe(int n) {
  feat_setup();
  feat_case("fusion probe: %d float32 sum allreduces submitted at once", n);
  weft_group *g = weft_world_group(feat_world);
  const int64_t count = 1000;
  float *buf = feat_alloc(sizeof(float) * (size_t)n * (size_t)count);
  weft_request **req = feat_alloc(sizeof *req * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int64_t j = 0; j < count; j++) buf[i * count + j] = (float)((feat_rank + 1) * (i + 1) + j % 7);
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "probe.%d", i);
    weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &count, buf + i * count);
    feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &req[i]), &req[i], name);
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    feat_wait_ok(req[i], "probe allreduce");
    weft_request_free(req[i]);
    for (int64_t j = 0; j < count; j++) {
      double expect = 0;
      for (int r = 0; r < feat_size; r++) expect += (double)((r + 1) * (i + 1) + j % 7);
      if (buf[i * count + j] != (float)expect && ++bad <= 3)
        feat_fail("probe.%d element %lld: got %g, expected %g", i, (long long)j, buf[i * count + j], expect);
    }
  }
  free(buf);
  free(req);
  feat_case_end();
  return feat_teardown();
}

int main(int argc, char **argv) {
  const char *tl_dir = NULL;
  int probe_n = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--values") && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "integer") && strcmp(v, "random")) {
        fprintf(stderr, "feat_fusion: --values integer|random\n");
        return 2;
      }
      g_integer = !strcmp(v, "integer");
    } else if (!strcmp(argv[i], "--tensors") && i + 1 < argc) {
      g_n = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--tl") && i + 1 < argc) {
      tl_dir = argv[++i];
    } else if (!strcmp(argv[i], "--probe") && i + 1 < argc) {
      probe_n = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: feat_fusion [--values integer|random] [--tensors N] [--tl DIR] | --probe N\n");
      return 2;
    }
  }
  if (probe_n > 0) return probe(probe_n);
  if (g_n < 1 || g_n > MAX_TENSORS) {
    fprintf(stderr, "feat_fusion: --tensors 1..%d\n", MAX_TENSORS);
    return 2;
  }
  make_layout();
  run_world(0, "fused", NULL, tl_dir);
  run_world(1, "small", "16384", tl_dir);
  run_world(2, "unfused", "0", tl_dir);
  compare_runs(0, "fused", 2, "unfused");
  compare_runs(1, "small", 2, "unfused");
  for (int i = 0; i < g_n; i++)
    for (int k = 0; k < 3; k++) free(g_t[i].saved[k]);
  int n = atomic_load(&feat_failures);
  feat_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", feat_rank, n);
  return n ? 1 : 0;
}
