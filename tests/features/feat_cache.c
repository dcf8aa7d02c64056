/* feat_cache.c - the response cache under churn: every result must be
 * right whatever the cache holds, evicts or resolves late.
 *
 * Each step submits, without waiting in between, a step-dependent subset of
 * NAMES tensors (allreduce, allgather, broadcast, reducescatter by name),
 * with descriptions that change every few steps on every rank alike (shape,
 * dtype, op, root, prescale, priority) and allgather row counts that differ
 * per rank; ranks sleep different short times between submissions so their
 * requests reach the coordinator in different frames and orders. Run with
 * WEFT_CACHE_CAPACITY=1 or 3 the coordinator keeps evicting entries that
 * members still name (the RESEND path); with the default, most requests are
 * cache hits; with 0 the cache is off. Every output is checked against a
 * reference computed here (small integers: exact in every dtype used).
 *
 * Last, a cached allreduce whose shape changes on the last rank only must
 * fail with WEFT_ERR_MISMATCH on every rank (feat_mismatch covers the other
 * fields), and then work again. */
#include "feat_common.h"

#define NAMES 12
#define STEPS 40

typedef struct op {
  char name[32];
  int kind; /* 0 allreduce, 1 allgather, 2 broadcast, 3 reducescatter */
  weft_dtype dt;
  weft_reduce_op rop;
  int64_t dim0, row;
  int root;
  double pre;
  void *in, *out;
  weft_request *req;
} op;

static const weft_dtype k_dts[] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_INT32, WEFT_DTYPE_FLOAT64, WEFT_DTYPE_INT64};

static double val(int rank, int name, int64_t i) { return (double)((rank + 1) * 3 + name + (i % 7)); }

/* The description of name k at step s (same on every rank; era = s / 4). */
static void describe(op *o, int k, int s, int size) {
  uint64_t h = feat_hash((uint64_t)k, (uint64_t)(s / 4), 77);
  snprintf(o->name, sizeof o->name, "cache.%d", k);
  o->kind = k % 4;
  o->dt = k_dts[h % 4];
  o->rop = (h >> 8) % 2 ? WEFT_OP_SUM : WEFT_OP_MAX;
  o->dim0 = 1 + (int64_t)((h >> 16) % 5);
  o->row = 1 + (int64_t)((h >> 24) % 3);
  o->root = (int)((h >> 32) % (uint64_t)size);
  o->pre = (h >> 40) % 2 ? 2.0 : 1.0;
  if (o->kind == 1) o->dim0 += feat_rank; /* allgather: rows differ per rank */
}

static int64_t rows_of(int64_t dim0, int size, int r) { return dim0 / size + (r < dim0 % size); }

static void submit(op *o, int k, int s) {
  weft_group *g = weft_world_group(feat_world);
  size_t es = feat_esize(o->dt);
  int64_t n = o->dim0 * o->row, shape[2] = {o->dim0, o->row};
  o->in = feat_alloc((size_t)n * es);
  for (int64_t i = 0; i < n; i++) feat_put(o->dt, o->in, (size_t)i, val(feat_rank, k, i));
  weft_tensor in = {o->dt, 2, shape, o->in, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.priority = (int)(feat_hash((uint64_t)k, (uint64_t)(s / 4), 5) % 3);
  o->req = NULL;
  o->out = NULL;
  switch (o->kind) {
    case 0:
      opt.prescale = o->pre;
      feat_submitted(weft_allreduce(g, o->name, &in, &in, o->rop, &opt, &o->req), &o->req, o->name);
      break;
    case 1: feat_submitted(weft_allgather(g, o->name, &in, &opt, &o->req), &o->req, o->name); break;
    case 2: feat_submitted(weft_broadcast(g, o->name, &in, o->root, &opt, &o->req), &o->req, o->name); break;
    default:
      opt.prescale = o->pre;
      feat_submitted(weft_reducescatter(g, o->name, &in, NULL, o->rop, &opt, &o->req), &o->req, o->name);
      break;
  }
}

/* Reduction of element i of name k over ranks. */
static double reduced(const op *o, int k, int64_t i) {
  double acc = 0;
  for (int r = 0; r < feat_size; r++) {
    double v = val(r, k, i) * o->pre;
    acc = r == 0 ? v : o->rop == WEFT_OP_SUM ? acc + v : (v > acc ? v : acc);
  }
  return acc;
}

static void check(op *o, int k, int s) {
  if (feat_wait(o->req, o->name) != WEFT_OK) {
    feat_fail("step %d '%s': %s", s, o->name, weft_request_error(o->req));
    goto done;
  }
  weft_tensor out;
  weft_request_output(o->req, &out);
  if (o->kind == 0 || o->kind == 2) {
    for (int64_t i = 0; i < o->dim0 * o->row; i++) {
      double want = o->kind == 0 ? reduced(o, k, i) : val(o->root, k, i);
      double got = feat_get(o->dt, o->in, (size_t)i);
      if (got != want) {
        feat_fail("step %d '%s' (%s) [%lld] = %g, want %g", s, o->name, o->kind ? "broadcast" : "allreduce",
                  (long long)i, got, want);
        break;
      }
    }
  } else if (o->kind == 1) {
    int64_t base = o->dim0 - feat_rank, at = 0, rows = 0;
    for (int r = 0; r < feat_size; r++) rows += base + r;
    if (out.ndim != 2 || out.shape[0] != rows || out.shape[1] != o->row) {
      feat_fail("step %d '%s': allgather output shape wrong", s, o->name);
      goto done;
    }
    for (int r = 0; r < feat_size; r++)
      for (int64_t i = 0; i < (base + r) * o->row; i++, at++)
        if (feat_get(o->dt, out.data, (size_t)at) != val(r, k, i)) {
          feat_fail("step %d '%s': allgather [%lld] from rank %d wrong", s, o->name, (long long)at, r);
          goto done;
        }
  } else {
    int64_t first = 0;
    for (int r = 0; r < feat_rank; r++) first += rows_of(o->dim0, feat_size, r);
    int64_t mine = rows_of(o->dim0, feat_size, feat_rank);
    if (out.ndim != 2 || out.shape[0] != mine) {
      feat_fail("step %d '%s': reducescatter output shape wrong", s, o->name);
      goto done;
    }
    for (int64_t i = 0; i < mine * o->row; i++)
      if (feat_get(o->dt, out.data, (size_t)i) != reduced(o, k, first * o->row + i)) {
        feat_fail("step %d '%s': reducescatter [%lld] wrong", s, o->name, (long long)i);
        break;
      }
  }
done:
  weft_request_free(o->req);
  free(o->in);
}

static void mismatch_case(void) {
  feat_case("cached allreduce whose shape changes on the last rank");
  weft_group *g = weft_world_group(feat_world);
  for (int s = 0; s < 6; s++) {
    int changed = s == 4 && feat_rank == feat_size - 1;
    int64_t n = changed ? 5 : 4;
    float buf[5] = {1, 2, 3, 4, 5};
    weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &n, buf);
    weft_request *r = NULL;
    feat_submitted(weft_allreduce(g, "cache.shape", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "cache.shape");
    weft_status st = feat_wait(r, "cache.shape");
    if (s == 4) {
      const char *m = weft_request_error(r);
      if (st != WEFT_ERR_MISMATCH || !strstr(m, "cache.shape") || !strstr(m, "[4]") || !strstr(m, "[5]"))
        feat_fail("step 4: %s '%s', want WEFT_ERR_MISMATCH naming the tensor and both shapes", weft_status_string(st),
                  m);
    } else if (st != WEFT_OK || buf[3] != 4.0f * (float)feat_size) {
      feat_fail("step %d: %s (%s), buf[3] = %g", s, weft_status_string(st), weft_request_error(r), buf[3]);
    }
    weft_request_free(r);
  }
  feat_case_end();
}

int main(void) {
  feat_setup();
  feat_case("cache churn (%d names, %d steps, WEFT_CACHE_CAPACITY=%s)", NAMES, STEPS,
            getenv("WEFT_CACHE_CAPACITY") ? getenv("WEFT_CACHE_CAPACITY") : "default");
  op ops[NAMES];
  int live[NAMES];
  for (int s = 0; s < STEPS; s++) {
    int n = 0;
    for (int k = 0; k < NAMES; k++) {
      if (feat_hash((uint64_t)k, (uint64_t)s, 3) % 4 == 0) continue; /* a quarter sit this step out */
      describe(&ops[k], k, s, feat_size);
      submit(&ops[k], k, s);
      live[n++] = k;
      if (feat_hash((uint64_t)feat_rank, (uint64_t)(s * NAMES + k), 9) % 3 == 0) feat_sleep_ms(1);
    }
    for (int i = 0; i < n; i++) check(&ops[live[i]], live[i], s);
  }
  feat_case_end();
  mismatch_case();
  return feat_teardown();
}
