/* feat_fuse_gather.c - fusion of allgathers and reducescatters, and the
 * grouped allgather / reducescatter, must not change a single result bit.
 *
 * The same workload runs in two worlds one after the other: "fused" (the
 * default WEFT_FUSION_THRESHOLD) and "unfused" (WEFT_FUSION_THRESHOLD=0).
 * Workload, submitted at once in runs the coordinator can fuse: NT
 * allgathers (2-d, uneven first dimensions per rank including 0 rows,
 * float32/float64/int32/float16 runs) and NT reducescatters (random float
 * values, sum/average/min/max, prescale/postscale runs, uneven row splits),
 * then one weft_grouped_allgather and one weft_grouped_reducescatter.
 * Checks: every allgather output equals the concatenation of every rank's
 * input (exact: the inputs are regenerated here from the shared seeds);
 * every reducescatter output of "fused" equals "unfused" bit for bit and
 * (sum/min/max of exactly representable values) a reference; the grouped
 * ops' outputs likewise.
 *
 * --probe N: one world, N float32 allgathers and N reducescatters submitted
 * at once, checked; the driver (features.sh fusion-gather) counts the
 * engine's "run allgather" / "run reducescatter" debug lines to prove they
 * were fused (and are not with WEFT_FUSION_THRESHOLD=0). */
#include "feat_common.h"

#define NT 48
#define MAXROW 5

typedef struct job {
  int kind;       /* 0 allgather, 1 reducescatter */
  weft_dtype dt;
  weft_reduce_op op;
  double pre, post;
  int64_t dim0, row; /* allgather: this rank's dim0 */
  void *in;
  void *saved[2];    /* output of each world */
  size_t out_bytes[2];
} job;

static job g_j[2 * NT + 8];
static int g_n;

static const weft_dtype k_ag_dts[] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_FLOAT64, WEFT_DTYPE_INT32, WEFT_DTYPE_FLOAT16};
static const weft_reduce_op k_ops[] = {WEFT_OP_SUM, WEFT_OP_AVERAGE, WEFT_OP_MIN, WEFT_OP_MAX};

static int64_t ag_rows(int t, int rank) { return (int64_t)(feat_hash((uint64_t)t, (uint64_t)rank, 11) % 4); }
static double in_val(int t, int rank, int64_t i, int integer) {
  uint64_t h = feat_hash((uint64_t)t * 131 + (uint64_t)rank, (uint64_t)i, 21);
  return integer ? (double)(h % 17) : feat_unit(h) * 4.0 - 2.0;
}

static void make_layout(int probe_n) {
  g_n = 0;
  int nt = probe_n ? probe_n : NT;
  for (int t = 0; t < nt; t++) { /* allgathers, in runs of 6 per dtype */
    job *j = &g_j[g_n++];
    j->kind = 0;
    j->dt = probe_n ? WEFT_DTYPE_FLOAT32 : k_ag_dts[(t / 6) % 4];
    j->row = 1 + t % MAXROW;
    j->dim0 = ag_rows(t, feat_rank);
  }
  for (int t = 0; t < nt; t++) { /* reducescatters, in runs of 8 per (op, scales) */
    job *j = &g_j[g_n++];
    j->kind = 1;
    int run = probe_n ? 0 : t / 8;
    j->dt = run % 3 == 2 ? WEFT_DTYPE_FLOAT64 : WEFT_DTYPE_FLOAT32;
    j->op = k_ops[run % 4];
    j->pre = run == 1 ? 0.5 : 1.0;
    j->post = run == 3 ? 3.0 : 1.0;
    j->row = 1 + t % 3;
    j->dim0 = (int64_t)(feat_hash((uint64_t)t, 99, 3) % (uint64_t)(3 * feat_size + 2)); /* uneven splits, maybe 0 */
  }
}

static void fill_inputs(int integer) {
  for (int t = 0; t < g_n; t++) {
    job *j = &g_j[t];
    size_t n = (size_t)(j->dim0 * j->row), es = feat_esize(j->dt);
    j->in = feat_alloc(n * es);
    for (size_t i = 0; i < n; i++) feat_put(j->dt, j->in, i, in_val(t, feat_rank, (int64_t)i, integer || j->kind == 0));
  }
}

static void name_of(int t, char *out, size_t n) { snprintf(out, n, "fg.%s.%d", g_j[t].kind ? "rs" : "ag", t); }

/* Checks an allgather output exactly against every rank's regenerated input. */
static void check_ag(int t, const weft_tensor *out, const char *run) {
  job *j = &g_j[t];
  int64_t at = 0, rows = 0;
  for (int r = 0; r < feat_size; r++) rows += ag_rows(t, r);
  if (out->ndim != 2 || out->shape[0] != rows || out->shape[1] != j->row) {
    feat_fail("%s: allgather %d: output shape wrong", run, t);
    return;
  }
  for (int r = 0; r < feat_size; r++)
    for (int64_t i = 0; i < ag_rows(t, r) * j->row; i++, at++) {
      double want = in_val(t, r, i, 1);
      if (j->dt == WEFT_DTYPE_FLOAT16) want = feat_f16_to_f32(feat_f32_to_f16((float)want));
      if (feat_get(j->dt, out->data, (size_t)at) != want) {
        feat_fail("%s: allgather %d: element %lld (from rank %d) wrong", run, t, (long long)at, r);
        return;
      }
    }
}

/* Checks a reducescatter output of integer-valued inputs against a reference. */
static void check_rs(int t, const weft_tensor *out, const char *run) {
  job *j = &g_j[t];
  int64_t first = 0, mine = j->dim0 / feat_size + (feat_rank < j->dim0 % feat_size);
  for (int r = 0; r < feat_rank; r++) first += j->dim0 / feat_size + (r < j->dim0 % feat_size);
  if (out->shape[0] != mine) {
    feat_fail("%s: reducescatter %d: %lld rows, want %lld", run, t, (long long)out->shape[0], (long long)mine);
    return;
  }
  if (j->op == WEFT_OP_AVERAGE) return; /* compared bit for bit only */
  for (int64_t i = 0; i < mine * j->row; i++) {
    double acc = 0;
    for (int r = 0; r < feat_size; r++) {
      double v = in_val(t, r, first * j->row + i, 1) * j->pre;
      acc = r == 0 ? v : j->op == WEFT_OP_SUM ? acc + v : j->op == WEFT_OP_MIN ? (v < acc ? v : acc) : (v > acc ? v : acc);
    }
    if (feat_get(j->dt, out->data, (size_t)i) != acc * j->post) {
      feat_fail("%s: reducescatter %d: [%lld] = %g, want %g", run, t, (long long)i, feat_get(j->dt, out->data, (size_t)i),
                acc * j->post);
      return;
    }
  }
}

static void keep(int t, int world, const weft_tensor *out) {
  size_t n = (size_t)feat_esize(g_j[t].dt);
  for (int d = 0; d < out->ndim; d++) n *= (size_t)out->shape[d];
  g_j[t].saved[world] = feat_alloc(n ? n : 1);
  if (n) memcpy(g_j[t].saved[world], out->data, n);
  g_j[t].out_bytes[world] = n;
}

static weft_tensor desc(job *j, int64_t *shape) {
  shape[0] = j->dim0;
  shape[1] = j->row;
  weft_tensor x = {j->dt, 2, shape, j->in, WEFT_DEVICE_CPU, 0, NULL};
  return x;
}

static void run_world(int world, const char *run, const char *threshold, int probe_n, int integer) {
  if (threshold) setenv("WEFT_FUSION_THRESHOLD", threshold, 1);
  else unsetenv("WEFT_FUSION_THRESHOLD");
  fprintf(stderr, "=== world %s\n", run);
  feat_setup();
  feat_case("%s world: %d allgathers and reducescatters at once", run, g_n);
  fill_inputs(integer);
  weft_group *g = weft_world_group(feat_world);
  weft_request *req[2 * NT + 8];
  int64_t shapes[2 * NT + 8][2];
  for (int t = 0; t < g_n; t++) {
    char name[64];
    name_of(t, name, sizeof name);
    job *j = &g_j[t];
    weft_tensor in = desc(j, shapes[t]);
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.prescale = j->kind ? j->pre : 1.0;
    o.postscale = j->kind ? j->post : 1.0;
    req[t] = NULL;
    if (j->kind == 0) feat_submitted(weft_allgather(g, name, &in, &o, &req[t]), &req[t], name);
    else feat_submitted(weft_reducescatter(g, name, &in, NULL, j->op, &o, &req[t]), &req[t], name);
  }
  for (int t = 0; t < g_n; t++) {
    char name[64];
    name_of(t, name, sizeof name);
    if (!feat_wait_ok(req[t], name)) continue;
    weft_tensor out;
    weft_request_output(req[t], &out);
    if (g_j[t].kind == 0) check_ag(t, &out, run);
    else if (integer || probe_n) check_rs(t, &out, run);
    keep(t, world, &out);
    weft_request_free(req[t]);
  }
  feat_case_end();
  if (!probe_n) { /* grouped: the first 6 allgathers (one dtype) and 8 reducescatters (one run) as units */
    feat_case("%s world: grouped allgather and reducescatter", run);
    weft_tensor ins[8];
    int64_t sh[8][2];
    weft_request *ga = NULL, *gr = NULL;
    for (int i = 0; i < 6; i++) ins[i] = desc(&g_j[i], sh[i]);
    feat_submitted(weft_grouped_allgather(g, "fg.gag", 6, ins, NULL, &ga), &ga, "grouped allgather");
    for (int i = 0; i < 8; i++) ins[i] = desc(&g_j[NT + i], sh[i]);
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.prescale = g_j[NT].pre;
    o.postscale = g_j[NT].post;
    feat_submitted(weft_grouped_reducescatter(g, "fg.grs", 8, ins, NULL, g_j[NT].op, &o, &gr), &gr,
                   "grouped reducescatter");
    if (feat_wait_ok(ga, "grouped allgather"))
      for (int i = 0; i < 6; i++) {
        weft_tensor out;
        if (weft_request_output_at(ga, i, &out) != WEFT_OK) feat_fail("output_at(%d): %s", i, weft_last_error());
        else check_ag(i, &out, run);
      }
    if (feat_wait_ok(gr, "grouped reducescatter"))
      for (int i = 0; i < 8; i++) {
        weft_tensor out;
        if (weft_request_output_at(gr, i, &out) != WEFT_OK) {
          feat_fail("output_at(%d): %s", i, weft_last_error());
          continue;
        }
        size_t n = g_j[NT + i].out_bytes[world];
        if (n && memcmp(out.data, g_j[NT + i].saved[world], n))
          feat_fail("grouped reducescatter %d differs from the single one", i);
      }
    weft_tensor x;
    if (weft_request_output_at(ga, 6, &x) != WEFT_ERR_INVALID_ARGUMENT) feat_fail("output_at(6) of 6 accepted");
    /* grouped ops never take the fast path: an algorithm of the registry
     * (every tensor's, or "mixed") */
    for (int k = 0; k < 2; k++) {
      const char *a = weft_request_algorithm(k ? gr : ga);
      if (!a[0] || !strcmp(a, "board")) feat_fail("grouped op %d: weft_request_algorithm is '%s'", k, a);
    }
    weft_request_free(ga);
    weft_request_free(gr);
    feat_case_end();
  }
  for (int t = 0; t < g_n; t++) free(g_j[t].in);
  feat_leave();
}

int main(int argc, char **argv) {
  int probe_n = 0, integer = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--probe") && i + 1 < argc) probe_n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--integer")) integer = 1;
    else {
      fprintf(stderr, "usage: feat_fuse_gather [--integer] | --probe N\n");
      return 2;
    }
  }
  if (probe_n < 0 || probe_n > NT) return 2;
  /* the layout needs this rank and the size before the first world exists */
  feat_rank = getenv("WEFT_RANK") ? atoi(getenv("WEFT_RANK")) : 0;
  feat_size = getenv("WEFT_SIZE") ? atoi(getenv("WEFT_SIZE")) : 1;
  if (feat_size < 1 || feat_rank < 0 || feat_rank >= feat_size) return 2;
  make_layout(probe_n);
  if (probe_n) {
    run_world(0, "probe", getenv("WEFT_FUSION_THRESHOLD"), probe_n, 1);
  } else {
    run_world(0, "fused", NULL, 0, integer);
    run_world(1, "unfused", "0", 0, integer);
    feat_case("fused vs unfused, bit for bit");
    for (int t = 0; t < g_n; t++)
      if (g_j[t].out_bytes[0] != g_j[t].out_bytes[1] || memcmp(g_j[t].saved[0], g_j[t].saved[1], g_j[t].out_bytes[0]))
        feat_fail("%s %d: the fused output differs from the unfused one", g_j[t].kind ? "reducescatter" : "allgather", t);
    feat_case_end();
  }
  for (int t = 0; t < g_n; t++)
    for (int k = 0; k < 2; k++) free(g_j[t].saved[k]);
  int n = atomic_load(&feat_failures);
  feat_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", feat_rank, n);
  return n ? 1 : 0;
}
