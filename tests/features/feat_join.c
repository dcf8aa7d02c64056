/* feat_join.c - weft_join with uneven numbers of steps per rank.
 *
 * Rank r runs r + 2 steps, then joins. Each step submits at once, in the
 * world group: int32 sum, two float32 sums (fusable), float64 average with
 * prescale 3 and postscale 0.5, int32 average, float32 min, int64 max,
 * float64 and int32 products, and a barrier. In step s the ranks q < s - 1
 * have joined: they take part with the identity of each op, and an average
 * still divides by the full world size. Every result is checked exactly
 * against a reference computed here from the active ranks' inputs (values
 * are small integers, so every partial result is exact).
 *
 * In step 2 only rank 0 has joined: the active ranks also submit an
 * allgather, a broadcast, an alltoall and a reducescatter; each must fail on
 * every active rank with a message saying that rank 0 has joined.
 *
 * The last rank submits one more allreduce, of a lower priority than the
 * join, just before it joins: the coordinator may take both in one batch,
 * and the others must still take part in it (the join's response comes
 * after it, whatever the priorities).
 *
 * weft_request_last_joined() must be size - 1 (the rank with the most
 * steps) on every rank. Afterwards the job keeps working: an allreduce, an
 * allgather and a broadcast on all ranks, then a second join that every
 * rank enters at once (last_joined then agrees across ranks), then one more
 * allreduce. */
#include "feat_common.h"

typedef struct spec {
  const char *name;
  weft_dtype dt;
  weft_reduce_op op;
  int64_t count;
  double pre, post;
} spec;

static const spec k_specs[] = {
    {"sum_i32", WEFT_DTYPE_INT32, WEFT_OP_SUM, 37, 1, 1},
    {"sum_f32a", WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 100, 1, 1},
    {"sum_f32b", WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 57, 1, 1},
    {"avg_f64", WEFT_DTYPE_FLOAT64, WEFT_OP_AVERAGE, 33, 3, 0.5},
    {"avg_i32", WEFT_DTYPE_INT32, WEFT_OP_AVERAGE, 21, 1, 1},
    {"min_f32", WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, 19, 1, 1},
    {"max_i64", WEFT_DTYPE_INT64, WEFT_OP_MAX, 23, 1, 1},
    {"prod_f64", WEFT_DTYPE_FLOAT64, WEFT_OP_PRODUCT, 17, 1, 1},
    {"prod_i32", WEFT_DTYPE_INT32, WEFT_OP_PRODUCT, 13, 1, 1},
};
#define NSPEC (sizeof k_specs / sizeof k_specs[0])

/* Rank q's input element j of spec k in step s: small integers. */
static int64_t value(int q, int k, int s, int64_t j) {
  const spec *p = &k_specs[k];
  uint64_t h = feat_hash((uint64_t)q, (uint64_t)(k * 100000 + s * 1000) + (uint64_t)j, 4242);
  if (p->op == WEFT_OP_PRODUCT) {
    static const int f[4] = {1, 2, -1, 3};
    return f[h & 3u];
  }
  return (int64_t)(h % 201u) - 100;
}

static int active(int q, int s) { return q + 2 > s; }

/* Expected element j of spec k in step s. */
static double expected(int k, int s, int64_t j) {
  const spec *p = &k_specs[k];
  int n = feat_size;
  int first = 1;
  double acc = 0;
  int64_t iacc = 0;
  for (int q = 0; q < n; q++) {
    if (!active(q, s)) continue; /* the identity */
    int64_t v = value(q, k, s, j);
    double x = (double)v * p->pre;
    if (first) {
      acc = x;
      iacc = v;
      first = 0;
    } else if (p->op == WEFT_OP_MIN) {
      acc = x < acc ? x : acc;
    } else if (p->op == WEFT_OP_MAX) {
      acc = x > acc ? x : acc;
    } else if (p->op == WEFT_OP_PRODUCT) {
      acc *= x;
      iacc *= v;
    } else {
      acc += x;
      iacc += v;
    }
  }
  if (p->dt == WEFT_DTYPE_INT32 && p->op == WEFT_OP_AVERAGE) return (double)(iacc / n); /* truncates */
  double f = p->post;
  if (p->op == WEFT_OP_AVERAGE) f /= n;
  double r = acc * f;
  return p->dt == WEFT_DTYPE_FLOAT32 ? (double)(float)r : r;
}

static void step(int s) {
  feat_case("step %d (%d rank(s) have joined)", s, s > 1 ? s - 1 : 0);
  weft_group *g = weft_world_group(feat_world);
  weft_request *req[NSPEC];
  void *buf[NSPEC];
  int64_t shape[NSPEC];
  for (size_t k = 0; k < NSPEC; k++) {
    const spec *p = &k_specs[k];
    shape[k] = p->count;
    buf[k] = feat_alloc((size_t)p->count * feat_esize(p->dt));
    for (int64_t j = 0; j < p->count; j++) feat_put(p->dt, buf[k], (size_t)j, (double)value(feat_rank, (int)k, s, j));
    char name[64];
    snprintf(name, sizeof name, "%s.%d", p->name, s);
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.prescale = p->pre;
    o.postscale = p->post;
    weft_tensor t = feat_tensor(p->dt, &shape[k], buf[k]);
    req[k] = NULL;
    feat_submitted(weft_allreduce(g, name, &t, &t, p->op, &o, &req[k]), &req[k], name);
  }
  char bname[32];
  snprintf(bname, sizeof bname, "bar.%d", s);
  weft_request *bar = NULL;
  feat_submitted(weft_barrier(g, bname, NULL, &bar), &bar, bname);
  for (size_t k = 0; k < NSPEC; k++) {
    const spec *p = &k_specs[k];
    if (feat_wait_ok(req[k], p->name)) {
      for (int64_t j = 0; j < p->count; j++) {
        double want = expected((int)k, s, j);
        double got = p->dt == WEFT_DTYPE_INT64 ? (double)((int64_t *)buf[k])[j] : feat_get(p->dt, buf[k], (size_t)j);
        if (got != want) {
          feat_fail("%s.%d element %lld: got %.17g, expected %.17g", p->name, s, (long long)j, got, want);
          break;
        }
      }
    }
    weft_request_free(req[k]);
    free(buf[k]);
  }
  feat_wait_ok(bar, bname);
  weft_request_free(bar);
  feat_case_end();
}

/* Step 2: rank 0 has joined; data-moving collectives other than allreduce
 * must fail on every active rank, naming rank 0. */
static void forbidden(void) {
  feat_case("allgather/broadcast/alltoall/reducescatter while rank 0 has joined");
  weft_group *g = weft_world_group(feat_world);
  int64_t rows = 2 * feat_size, shape2[2] = {rows, 3};
  float *in = feat_alloc(sizeof(float) * (size_t)rows * 3);
  float *rs_out = feat_alloc(sizeof(float) * 6);
  int64_t rs_shape[2] = {2, 3};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 2, shape2, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor to = {WEFT_DTYPE_FLOAT32, 2, rs_shape, rs_out, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r[4] = {NULL, NULL, NULL, NULL};
  const char *what[4] = {"allgather", "broadcast", "alltoall", "reducescatter"};
  feat_submitted(weft_allgather(g, "ag.joined", &t, NULL, &r[0]), &r[0], what[0]);
  feat_submitted(weft_broadcast(g, "bc.joined", &t, feat_size - 1, NULL, &r[1]), &r[1], what[1]);
  feat_submitted(weft_alltoall(g, "a2a.joined", &t, NULL, NULL, &r[2]), &r[2], what[2]);
  feat_submitted(weft_reducescatter(g, "rs.joined", &t, &to, WEFT_OP_SUM, NULL, &r[3]), &r[3], what[3]);
  for (int i = 0; i < 4; i++) {
    weft_status st = feat_wait(r[i], what[i]);
    const char *msg = weft_request_error(r[i]);
    if (st >= 0) feat_fail("%s succeeded while rank 0 has joined", what[i]);
    else if (!strstr(msg, "join") || !(strstr(msg, "rank(s) 0") || strstr(msg, "rank 0")))
      feat_fail("%s failed (%s) but the message does not say that rank 0 has joined: \"%s\"", what[i],
                weft_status_string(st), msg);
    weft_request_free(r[i]);
  }
  free(in);
  free(rs_out);
  feat_case_end();
}

static int do_join(const char *what) {
  weft_request *j = NULL;
  feat_submitted(weft_join(weft_world_group(feat_world), NULL, &j), &j, what);
  int last = -2;
  if (feat_wait_ok(j, what)) {
    weft_status st = weft_request_last_joined(j, &last);
    if (st != WEFT_OK) feat_fail("weft_request_last_joined: %s: %s", weft_status_string(st), weft_last_error());
  }
  weft_request_free(j);
  return last;
}

/* After the join: the job works normally. */
static void after(void) {
  feat_case("after the join: allreduce, allgather, broadcast, a second join");
  weft_group *g = weft_world_group(feat_world);
  int64_t one = 1;
  int32_t v = feat_rank + 1, ag = feat_rank * 3, bc = feat_rank == 0 ? 77 : 0;
  weft_tensor tv = feat_tensor(WEFT_DTYPE_INT32, &one, &v), ta = feat_tensor(WEFT_DTYPE_INT32, &one, &ag),
              tb = feat_tensor(WEFT_DTYPE_INT32, &one, &bc);
  weft_request *r1 = NULL, *r2 = NULL, *r3 = NULL;
  feat_submitted(weft_allreduce(g, "after.sum", &tv, &tv, WEFT_OP_SUM, NULL, &r1), &r1, "after.sum");
  feat_submitted(weft_allgather(g, "after.ag", &ta, NULL, &r2), &r2, "after.ag");
  feat_submitted(weft_broadcast(g, "after.bc", &tb, 0, NULL, &r3), &r3, "after.bc");
  if (feat_wait_ok(r1, "after.sum") && v != feat_size * (feat_size + 1) / 2) feat_fail("after.sum = %d", v);
  if (feat_wait_ok(r2, "after.ag")) {
    weft_tensor out;
    weft_request_output(r2, &out);
    for (int q = 0; q < feat_size; q++)
      if (((int32_t *)out.data)[q] != q * 3) feat_fail("after.ag[%d] = %d", q, ((int32_t *)out.data)[q]);
  }
  if (feat_wait_ok(r3, "after.bc") && bc != 77) feat_fail("after.bc = %d", bc);
  weft_request_free(r1);
  weft_request_free(r2);
  weft_request_free(r3);
  /* everyone joins at once: any rank may be last, but all must agree */
  int last = do_join("second join");
  if (last < 0 || last >= feat_size) feat_fail("second join: last_joined %d", last);
  int32_t lo = last, hi = last;
  weft_tensor tl = feat_tensor(WEFT_DTYPE_INT32, &one, &lo), th = feat_tensor(WEFT_DTYPE_INT32, &one, &hi);
  feat_submitted(weft_allreduce(g, "last.min", &tl, &tl, WEFT_OP_MIN, NULL, &r1), &r1, "last.min");
  feat_submitted(weft_allreduce(g, "last.max", &th, &th, WEFT_OP_MAX, NULL, &r2), &r2, "last.max");
  feat_wait_ok(r1, "last.min");
  feat_wait_ok(r2, "last.max");
  if (lo != hi) feat_fail("second join: ranks disagree on last_joined (%d .. %d)", lo, hi);
  weft_request_free(r1);
  weft_request_free(r2);
  feat_case_end();
}

int main(void) {
  feat_setup();
  int steps = feat_rank + 2;
  for (int s = 0; s < steps; s++) {
    step(s);
    if (s == 2) forbidden();
  }
  feat_case("first join (rank %d joins after %d steps)", feat_rank, steps);
  weft_request *late = NULL;
  int32_t lv = feat_rank + 1;
  int64_t one = 1;
  weft_tensor tl = feat_tensor(WEFT_DTYPE_INT32, &one, &lv);
  if (feat_rank == feat_size - 1) { /* the others have joined: they stand in with 0 */
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.priority = -5;
    feat_submitted(weft_allreduce(weft_world_group(feat_world), "late", &tl, &tl, WEFT_OP_SUM, &o, &late), &late,
                   "late");
  }
  int last = do_join("join");
  if (late && feat_wait_ok(late, "late") && lv != feat_size)
    feat_fail("late: %d, expected %d (the joined ranks add 0)", lv, feat_size);
  weft_request_free(late);
  if (last != feat_size - 1) feat_fail("weft_request_last_joined = %d, expected %d (the rank with the most steps)", last, feat_size - 1);
  feat_case_end();
  after();
  return feat_teardown();
}
