/* feat_mismatch.c - a tensor negotiated many times with the same
 * description (what a response cache would serve from its cache) that then
 * changes on one rank must still fail with WEFT_ERR_MISMATCH on every rank,
 * with a message naming the tensor and both values; the job goes on, and
 * the unchanged description works again right after.
 *
 * Cases (2+ ranks; the culprit is the last rank, then rank 0, the
 * coordinator): the shape, the dtype, the reduce op and the prescale of a
 * repeated allreduce change on one rank; a repeated broadcast's root
 * changes; and a mismatched tensor inside a batch of fusable allreduces
 * fails alone while the others of the batch are reduced correctly. */
#include "feat_common.h"

#define REPEATS 6

typedef struct variant {
  int64_t count;
  weft_dtype dt;
  weft_reduce_op op;
  double pre;
} variant;

/* One allreduce of name with v; values (rank+1)*(j+1) (small integers:
 * exact in every dtype used). Checks the result when expect_ok. */
static void one_allreduce(const char *name, variant v, int expect_ok, const char *needle1, const char *needle2) {
  weft_group *g = weft_world_group(feat_world);
  size_t es = feat_esize(v.dt);
  void *buf = feat_alloc((size_t)v.count * es);
  for (int64_t j = 0; j < v.count; j++) feat_put(v.dt, buf, (size_t)j, (double)((feat_rank + 1) * (j % 5 + 1)));
  weft_tensor t = feat_tensor(v.dt, &v.count, buf);
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.prescale = v.pre;
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(g, name, &t, &t, v.op, &o, &r), &r, name);
  weft_status st = feat_wait(r, name);
  const char *msg = weft_request_error(r);
  if (expect_ok) {
    if (st != WEFT_OK) {
      feat_fail("'%s' failed: %s: %s", name, weft_status_string(st), msg);
    } else {
      for (int64_t j = 0; j < v.count; j++) {
        double expect = v.op == WEFT_OP_MAX ? feat_size * (double)(j % 5 + 1) * v.pre : 0;
        if (v.op == WEFT_OP_SUM)
          for (int q = 0; q < feat_size; q++) expect += (q + 1) * (double)(j % 5 + 1) * v.pre;
        double got = feat_get(v.dt, buf, (size_t)j);
        if (got != expect) {
          feat_fail("'%s' element %lld: got %g, expected %g", name, (long long)j, got, expect);
          break;
        }
      }
    }
  } else {
    if (st != WEFT_ERR_MISMATCH)
      feat_fail("'%s' changed on one rank: expected WEFT_ERR_MISMATCH, got %s (%s)", name, weft_status_string(st), msg);
    else if (!strstr(msg, name) || (needle1 && !strstr(msg, needle1)) || (needle2 && !strstr(msg, needle2)))
      feat_fail("'%s': the mismatch message should name the tensor, '%s' and '%s': \"%s\"", name,
                needle1 ? needle1 : "", needle2 ? needle2 : "", msg);
  }
  weft_request_free(r);
  free(buf);
}

/* REPEATS identical rounds, one round where culprit uses bad, then good again. */
static void repeated(const char *what, const char *name, variant good, variant bad, int culprit, const char *n1,
                     const char *n2) {
  feat_case("%s changes on rank %d after %d identical rounds", what, culprit, REPEATS);
  for (int i = 0; i < REPEATS; i++) one_allreduce(name, good, 1, NULL, NULL);
  one_allreduce(name, feat_rank == culprit ? bad : good, 0, n1, n2);
  for (int i = 0; i < 2; i++) one_allreduce(name, good, 1, NULL, NULL);
  feat_case_end();
}

static void broadcast_root(int culprit) {
  feat_case("broadcast root changes on rank %d after %d identical rounds", culprit, REPEATS);
  weft_group *g = weft_world_group(feat_world);
  int64_t n = 16;
  int32_t buf[16];
  for (int i = 0; i < REPEATS + 3; i++) {
    int bad_round = i == REPEATS;
    int root = (bad_round && feat_rank == culprit) ? 1 : 0;
    for (int j = 0; j < n; j++) buf[j] = feat_rank * 100 + j;
    weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &n, buf);
    weft_request *r = NULL;
    feat_submitted(weft_broadcast(g, "bcast.param", &t, root, NULL, &r), &r, "bcast.param");
    weft_status st = feat_wait(r, "bcast.param");
    if (bad_round) {
      if (st != WEFT_ERR_MISMATCH)
        feat_fail("root changed on rank %d: expected WEFT_ERR_MISMATCH, got %s (%s)", culprit, weft_status_string(st),
                  weft_request_error(r));
      else if (!strstr(weft_request_error(r), "bcast.param") || !strstr(weft_request_error(r), "root"))
        feat_fail("the message should name the tensor and the root: \"%s\"", weft_request_error(r));
    } else if (st != WEFT_OK) {
      feat_fail("round %d: %s: %s", i, weft_status_string(st), weft_request_error(r));
    } else {
      for (int j = 0; j < n; j++)
        if (buf[j] != j) {
          feat_fail("round %d element %d: got %d, expected %d (root 0's value)", i, j, buf[j], j);
          break;
        }
    }
    weft_request_free(r);
  }
  feat_case_end();
}

/* 12 fusable float32 sums submitted at once, tensor 5's shape differs on the
 * culprit: only tensor 5 fails (everywhere), the rest are correct. */
static void batch(int culprit, int round) {
  feat_case("mismatch inside a fusable batch (culprit rank %d, round %d)", culprit, round);
  enum { N = 12 };
  weft_group *g = weft_world_group(feat_world);
  int64_t shapes[N];
  float *bufs[N];
  weft_request *req[N];
  for (int i = 0; i < N; i++) {
    shapes[i] = 100 + i + ((i == 5 && feat_rank == culprit) ? 1 : 0);
    bufs[i] = feat_alloc(sizeof(float) * (size_t)shapes[i]);
    for (int64_t j = 0; j < shapes[i]; j++) bufs[i][j] = (float)(feat_rank + i + j);
  }
  for (int i = 0; i < N; i++) {
    char name[64];
    snprintf(name, sizeof name, "batch.%d", i);
    weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &shapes[i], bufs[i]);
    feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &req[i]), &req[i], name);
  }
  for (int i = 0; i < N; i++) {
    weft_status st = feat_wait(req[i], "batch");
    if (i == 5) {
      if (st != WEFT_ERR_MISMATCH || !strstr(weft_request_error(req[i]), "batch.5"))
        feat_fail("batch.5: expected WEFT_ERR_MISMATCH naming it, got %s (%s)", weft_status_string(st),
                  weft_request_error(req[i]));
    } else if (st != WEFT_OK) {
      feat_fail("batch.%d: %s: %s", i, weft_status_string(st), weft_request_error(req[i]));
    } else {
      for (int64_t j = 0; j < shapes[i]; j++) {
        double expect = 0;
        for (int q = 0; q < feat_size; q++) expect += q + i + (double)j;
        if (bufs[i][j] != (float)expect) {
          feat_fail("batch.%d element %lld: got %g, expected %g", i, (long long)j, bufs[i][j], expect);
          break;
        }
      }
    }
    weft_request_free(req[i]);
    free(bufs[i]);
  }
  feat_case_end();
}

int main(void) {
  feat_setup();
  if (feat_size < 2) { /* a failure, not a pass: nothing would be checked */
    feat_say("FAIL rank %d: mismatches need 2 or more ranks (registered for one?)", feat_rank);
    feat_teardown();
    return 1;
  }
  int culprits[2] = {feat_size - 1, 0};
  for (int k = 0; k < 2; k++) {
    int c = culprits[k];
    char name[64];
    variant good = {64, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1.0};
    variant v = good;
    v.count = 65;
    snprintf(name, sizeof name, "grad.shape.%d", k);
    repeated("the shape", name, good, v, c, "[64]", "[65]");
    v = good;
    v.dt = WEFT_DTYPE_FLOAT64;
    snprintf(name, sizeof name, "grad.dtype.%d", k);
    repeated("the dtype", name, good, v, c, "float32", "float64");
    v = good;
    v.op = WEFT_OP_MAX;
    snprintf(name, sizeof name, "grad.op.%d", k);
    repeated("the reduce op", name, good, v, c, "sum", "max");
    v = good;
    v.pre = 0.5;
    snprintf(name, sizeof name, "grad.prescale.%d", k);
    repeated("the prescale", name, good, v, c, "0.5", NULL);
    broadcast_root(c);
    batch(c, k);
  }
  return feat_teardown();
}
