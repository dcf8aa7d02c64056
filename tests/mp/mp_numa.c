/* mp_numa.c - the node-aware staged pattern ("numa", algo/shm_numa.c)
 * through the whole library, on a NUMA layout the test's environment
 * declares (WEFT_NUMA_NODES, e.g. 0,1,0,1: two nodes, ranks interleaved),
 * with the one-host board off (WEFT_FAST=0) so every size reaches the
 * selection table:
 *  - allreduce of integer and float dtypes (sum, product, max) at sizes
 *    below and above the pattern's 64 KiB, several chunks included, bit for
 *    bit against the left fold in rank order computed here, element by
 *    element in the dtype's arithmetic (integers wrap; floats round at
 *    every step, so another order would show);
 *  - broadcast from every root and allgather (uneven rows, a rank with
 *    none), byte for byte;
 *  - a burst of allreduces submitted together (fused: the tensors staged
 *    where they lie);
 *  - which algorithm ran (weft_request_algorithm): MP_NUMA_EXPECT names it
 *    for allreduces, broadcasts and allgathers of at least 64 KiB ("numa"
 *    with a layout of several nodes, "shm" without one or with
 *    WEFT_NUMA_NODES=off); smaller ones must run "shm".
 * Usage (under weftrun -np N, MP_NUMA_EXPECT set): mp_numa [--large COUNT] */
#include "mp_harness.c"

#define NUMA_MIN_BYTES ((size_t)64 << 10) /* algo/select.c's WF_SEL_NUMA_MIN_BYTES */

static const char *g_expect;
static size_t g_large = 300007;
static const uint64_t g_seed = 41;

#include "mp_fold_ref.c"

/* The algorithm that must have run a collective of `bytes` per rank. */
static const char *expected(size_t bytes) { return bytes >= NUMA_MIN_BYTES ? g_expect : "shm"; }

static int check_ran(weft_request *req, const char *want, const char *what) {
  const char *ran = weft_request_algorithm(req);
  if (!ran || strcmp(ran, want)) return mp_fail("%s: ran '%s', expected '%s'", what, ran ? ran : "(none)", want);
  return 1;
}

static void numa_after(weft_request *req, const unsigned char *buf, size_t bytes, const char *name) {
  (void)buf;
  check_ran(req, expected(bytes), name);
}

static void run_allreduce(weft_dtype t, weft_reduce_op op, size_t n) { fold_allreduce_case(t, op, n, numa_after); }

static void run_broadcast(size_t n, int root) {
  char name[64];
  snprintf(name, sizeof name, "bc.%zu.%d", n, root);
  mp_case("%s", name);
  int16_t *buf = mp_alloc(n * 2);
  if (mp_rank == root) mp_fill(WEFT_DTYPE_INT16, buf, 0, n, root, 0, g_seed);
  else memset(buf, 0x5A, n * 2);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor tt = {WEFT_DTYPE_INT16, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_broadcast(mp_group, name, &tt, root, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    mp_check_fill(WEFT_DTYPE_INT16, buf, 0, n, root, 0, g_seed, name);
    check_ran(req, expected(n * 2), name);
  }
  weft_request_free(req);
  free(buf);
  mp_case_end();
}

/* Allgather: rank r has base + 1000 r rows (the last rank none). */
static void run_allgather(size_t base) {
  char name[64];
  snprintf(name, sizeof name, "ag.%zu", base);
  mp_case("%s", name);
  size_t total = 0, mine = 0;
  for (int r = 0; r < mp_size; r++) {
    size_t rows = r == mp_size - 1 ? 0 : base + 1000 * (size_t)r;
    total += rows;
    if (r == mp_rank) mine = rows;
  }
  int32_t *in = mp_alloc(mine * 4 + 4);
  mp_fill(WEFT_DTYPE_INT32, in, 0, mine, mp_rank, 0, g_seed);
  int64_t shape[1] = {(int64_t)mine};
  weft_tensor tt = {WEFT_DTYPE_INT32, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_allgather(mp_group, name, &tt, NULL, &req), &req, name);
  weft_tensor out;
  if (mp_wait_ok(req, name)) {
    if (weft_request_output(req, &out) != WEFT_OK || (size_t)out.shape[0] != total) {
      mp_fail("%s: output is not %zu rows", name, total);
    } else {
      size_t at = 0;
      for (int r = 0; r < mp_size; r++) {
        size_t rows = r == mp_size - 1 ? 0 : base + 1000 * (size_t)r;
        mp_check_fill(WEFT_DTYPE_INT32, out.data, at, rows, r, 0, g_seed, name);
        at += rows;
      }
    }
    check_ran(req, expected(total * 4), name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

/* Allreduces of one dtype submitted together (the coordinator fuses them;
 * staging takes the tensors where they lie). */
#define BURST 8
static void run_burst(void) {
  mp_case("burst of %d float32 allreduces", BURST);
  weft_request *req[BURST];
  float *buf[BURST];
  size_t n[BURST];
  char name[BURST][32];
  for (int k = 0; k < BURST; k++) {
    n[k] = 1 + (size_t)(mp_hash(7, (uint64_t)k, 0) % (g_large / 4));
    snprintf(name[k], sizeof name[k], "burst.%d", k);
    buf[k] = mp_alloc(n[k] * 4);
    for (size_t i = 0; i < n[k]; i++) put_input(WEFT_DTYPE_FLOAT32, buf[k], i, mp_rank, i + (size_t)k * g_large);
    int64_t shape[1] = {(int64_t)n[k]};
    weft_tensor tt = {WEFT_DTYPE_FLOAT32, 1, shape, buf[k], WEFT_DEVICE_CPU, 0, NULL};
    req[k] = NULL;
    mp_submitted(weft_allreduce(mp_group, name[k], &tt, &tt, WEFT_OP_SUM, NULL, &req[k]), &req[k], name[k]);
  }
  for (int k = 0; k < BURST; k++) {
    if (mp_wait_ok(req[k], name[k])) {
      check_fold(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, (const unsigned char *)buf[k], (size_t)k * g_large, n[k], name[k]);
      const char *ran = weft_request_algorithm(req[k]);
      if (!ran || (strcmp(ran, g_expect) && strcmp(ran, "shm"))) /* fused or alone: either size class */
        mp_fail("%s: ran '%s'", name[k], ran ? ran : "(none)");
    }
    weft_request_free(req[k]);
    free(buf[k]);
  }
  mp_case_end();
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--large") && i + 1 < argc) g_large = (size_t)strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: mp_numa [--large COUNT]\n");
      return 2;
    }
  }
  g_expect = getenv("MP_NUMA_EXPECT");
  if (!g_expect || !*g_expect) {
    fprintf(stderr, "mp_numa: set MP_NUMA_EXPECT (numa or shm)\n");
    return 2;
  }
  mp_setup();
  static const struct {
    weft_dtype t;
    weft_reduce_op op;
  } k_cases[] = {{WEFT_DTYPE_INT32, WEFT_OP_SUM}, {WEFT_DTYPE_INT64, WEFT_OP_PRODUCT}, {WEFT_DTYPE_UINT8, WEFT_OP_MAX},
                 {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM}, {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM}};
  const size_t counts[] = {1, 1001, 16383, 16384, 70001, g_large};
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      run_allreduce(k_cases[k].t, k_cases[k].op, counts[c]);
  const size_t bc[] = {1000, 40000, g_large};
  for (size_t k = 0; k < sizeof bc / sizeof bc[0]; k++)
    for (int root = 0; root < mp_size; root++) run_broadcast(bc[k], root);
  const size_t ag[] = {10, 3000, g_large / 8};
  for (size_t k = 0; k < sizeof ag / sizeof ag[0]; k++) run_allgather(ag[k]);
  run_burst();
  return mp_teardown();
}
