/* mp_cma.c - the collectives at sizes around the thresholds of the
 * cross-memory attach algorithms (64 KiB to 2 MiB, by collective and world
 * size; 32 KiB per alltoall block), run
 * with whatever WEFT_ALGO_<COLL> the test's environment forces (cma,
 * direct, or automatic), checked against references computed here:
 *  - allreduce and reducescatter: inputs are floats with full mantissas
 *    (their sums round), so only the left fold in rank order,
 *    ((x_0 op x_1) op x_2) ..., gives the expected bits; it is computed here
 *    in the dtype's own arithmetic (float16/bfloat16: in float, rounded
 *    back after every step) and compared bit for bit. "direct" is defined
 *    by that order, so passing under both direct and cma means both give
 *    identical bits. Also integer wrap-around, min/max, in place and out of
 *    place, and several tensors submitted at once (fused);
 *  - allgather (uneven rows, one rank with none), broadcast from every root,
 *    alltoall (per pair: nothing, a small block, a large block): every
 *    element against the sender's deterministic payload;
 *  - with WEFT_ALGO_<COLL> set, that every operation of the collective ran
 *    the forced algorithm (weft_request_algorithm): the bits alone would
 *    not tell a forced cma from the fallback to direct. cma (one host,
 *    cross-memory attach allowed) and shm (staging regions of the whole
 *    world) take every case here: none may decline. The tests that force
 *    run with WEFT_FAST=0, so that small operations reach the algorithm
 *    instead of the one-host fast path;
 *  - with MP_CMA_EXPECT=auto (and nothing forced; run without shared memory,
 *    WEFT_TRANSPORT=tcp, where the cma rows apply), that the automatic choice
 *    took cma exactly from the measured thresholds on (predicted here as
 *    the cma rows of the selection table in src/algo/select.c take it:
 *    allreduce 2 MiB on 2 ranks, else 256 KiB; reducescatter 1 MiB /
 *    256 KiB of input; allgather 1 MiB of output; broadcast 64 KiB on 3+
 *    ranks; alltoall always) and nothing else took it: without this a cma
 *    that the table never chose passed on direct's bits. With
 *    MP_CMA_EXPECT=none (WEFT_CMA=0, a rank that cannot read the others, or
 *    the shared-memory rings present), that no operation ran cma. Fused tensors are not checked: what fused
 *    (and so the size the choice saw) depends on timing.
 *
 * Usage (under weftrun -np N): mp_cma [--large COUNT] [--seed S] */
#include "mp_harness.c"

static size_t g_large = 1000003;
static uint64_t g_seed = 11;

/* ------------------------------------------------------ the choice */
/* MP_CMA_EXPECT: 0 unset (no check of the automatic choice), 1 "auto" (cma
 * from the thresholds on), 2 "none" (never cma). */
static int g_expect;

/* req (complete, OK) of collective coll: the forced algorithm if one is
 * forced, else (MP_CMA_EXPECT) cma exactly when `claims` says the automatic
 * choice takes it. */
static void check_choice(weft_request *req, const char *coll, int claims, const char *what) {
  if (mp_forced_algo(coll)) {
    mp_check_algo(req, coll, NULL, what);
    return;
  }
  if (!g_expect) return;
  const char *ran = weft_request_algorithm(req);
  int want = g_expect == 1 && claims;
  if (!ran[0] || !strcmp(ran, "board"))
    mp_fail("%s: ran '%s': the automatic choice is checked with WEFT_FAST=0", what, ran);
  else if (want != !strcmp(ran, "cma"))
    mp_fail("%s: ran '%s'; %s", what, ran,
            want ? "cma claims this size" : g_expect == 2 ? "cma is off on this host" : "this size is below cma's claim");
}

/* The sizes from which the automatic choice takes the cma algorithms (as
 * the cma rows of src/algo/select.c's tables do; elements of es bytes). */
static int claims_allreduce(size_t n, size_t es) {
  return mp_size >= 2 && n >= (mp_size == 2 ? (size_t)2 << 20 : (size_t)256 << 10) / es;
}
static int claims_reducescatter(size_t total, size_t es) {
  return mp_size >= 2 && total >= (mp_size == 2 ? (size_t)1 << 20 : (size_t)256 << 10) / es;
}
static int claims_allgather(size_t total, size_t es) { return mp_size >= 2 && total >= ((size_t)1 << 20) / es; }
static int claims_broadcast(size_t n, size_t es) { return mp_size > 2 && n >= ((size_t)64 << 10) / es; }

/* ------------------------------------------------------------- reductions */
/* Inputs: floats with full mantissas in about [-1000, 1000] (exact in no
 * narrower type, so every sum rounds), integers over their full range. */
#define FOLD_SPAN 1000.0
#include "mp_fold_ref.c"

typedef struct red_case {
  weft_dtype dt;
  weft_reduce_op op;
} red_case;

static const red_case k_reds[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM},  {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM},   {WEFT_DTYPE_FLOAT16, WEFT_OP_SUM},
    {WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM}, {WEFT_DTYPE_INT32, WEFT_OP_SUM},     {WEFT_DTYPE_UINT8, WEFT_OP_MAX},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_MIN},  {WEFT_DTYPE_INT64, WEFT_OP_PRODUCT},
};

/* Element counts of a case: tiny, around 256 KiB and 2 MiB of the dtype
 * (the thresholds of allreduce), large. */
static size_t counts_of(weft_dtype t, size_t *c) {
  size_t k = 0, at = ((size_t)256 << 10) / mp_esize(t), at2 = ((size_t)2 << 20) / mp_esize(t);
  c[k++] = 0;
  c[k++] = 1;
  c[k++] = 7;
  c[k++] = at - 1;
  c[k++] = at;
  c[k++] = at + 1;
  c[k++] = at2 - 1;
  c[k++] = at2;
  c[k++] = g_large;
  return k;
}

static void run_allreduce(const red_case *rc, size_t n, int in_place) {
  mp_case("allreduce %s %s n=%zu %s", weft_dtype_name(rc->dt), weft_reduce_op_name(rc->op), n,
          in_place ? "in place" : "out of place");
  size_t es = mp_esize(rc->dt);
  unsigned char *in = mp_alloc(n * es), *out = in_place ? in : mp_alloc(n * es);
  for (size_t i = 0; i < n; i++) put_input(rc->dt, in, i, mp_rank, i);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor ti = {rc->dt, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL}, to = ti;
  to.data = out;
  char name[96];
  snprintf(name, sizeof name, "ar.%d.%d.%zu.%d", (int)rc->dt, (int)rc->op, n, in_place);
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &ti, &to, rc->op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    check_fold(rc->dt, rc->op, out, 0, n, name);
    check_choice(req, "ALLREDUCE", claims_allreduce(n, es), name);
  }
  weft_request_free(req);
  if (out != in) free(out);
  free(in);
  mp_case_end();
}

/* Several tensors at once: the engine may fuse them into one buffer. */
static void run_fused(void) {
  mp_case("allreduce fused float32 (4 tensors submitted together)");
  const size_t ns[4] = {5, 20000, 70001, 16384};
  float *buf[4];
  weft_request *req[4];
  for (int k = 0; k < 4; k++) {
    buf[k] = mp_alloc(ns[k] * 4);
    for (size_t i = 0; i < ns[k]; i++) put_input(WEFT_DTYPE_FLOAT32, buf[k], i, mp_rank, i);
  }
  for (int k = 0; k < 4; k++) {
    int64_t shape[1] = {(int64_t)ns[k]};
    weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, buf[k], WEFT_DEVICE_CPU, 0, NULL};
    char name[32];
    snprintf(name, sizeof name, "fused.%d", k);
    req[k] = NULL;
    mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req[k]), &req[k], name);
  }
  for (int k = 0; k < 4; k++) {
    if (mp_wait_ok(req[k], "fused")) {
      check_fold(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, buf[k], 0, ns[k], "fused");
      mp_check_algo(req[k], "ALLREDUCE", NULL, "fused");
      if (g_expect == 2) check_choice(req[k], "ALLREDUCE", 0, "fused"); /* whatever fused: never cma */
    }
    weft_request_free(req[k]);
    free(buf[k]);
  }
  mp_case_end();
}

/* Reducescatter of a 1-d tensor of n elements: rank r's block is rows
 * [first, first + rows) as the library splits dim 0. */
static void run_reducescatter(const red_case *rc, size_t n) {
  mp_case("reducescatter %s %s n=%zu", weft_dtype_name(rc->dt), weft_reduce_op_name(rc->op), n);
  size_t es = mp_esize(rc->dt), p = (size_t)mp_size, r = (size_t)mp_rank;
  size_t rows = n / p + (r < n % p), first = r * (n / p) + (r < n % p ? r : n % p);
  unsigned char *in = mp_alloc(n * es);
  for (size_t i = 0; i < n; i++) put_input(rc->dt, in, i, mp_rank, i);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor ti = {rc->dt, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  char name[96];
  snprintf(name, sizeof name, "rs.%d.%d.%zu", (int)rc->dt, (int)rc->op, n);
  weft_request *req = NULL;
  mp_submitted(weft_reducescatter(mp_group, name, &ti, NULL, rc->op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 1 || (size_t)out.shape[0] != rows)
      mp_fail("%s: output is not %zu rows", name, rows);
    else
      check_fold(rc->dt, rc->op, out.data, first, rows, name);
    check_choice(req, "REDUCESCATTER", claims_reducescatter(n, es), name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

/* --------------------------------------------------------- data movement */
/* Allgather: rank r has rows(r) rows of 3 float32 (the last rank none). */
static void run_allgather(size_t base) {
  mp_case("allgather rows %zu + 7r", base);
  const size_t inner = 3;
  size_t rows[64], total = 0, mine;
  for (int r = 0; r < mp_size; r++) total += rows[r] = r == mp_size - 1 && mp_size > 1 ? 0 : base + 7 * (size_t)r;
  mine = rows[mp_rank];
  float *in = mp_alloc(mine * inner * 4);
  mp_fill(WEFT_DTYPE_FLOAT32, in, 0, mine * inner, mp_rank, 0, g_seed);
  int64_t shape[2] = {(int64_t)mine, (int64_t)inner};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  char name[64];
  snprintf(name, sizeof name, "ag.%zu", base);
  weft_request *req = NULL;
  mp_submitted(weft_allgather(mp_group, name, &t, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 2 || (size_t)out.shape[0] != total) {
      mp_fail("%s: output is not %zu rows", name, total);
    } else {
      size_t at = 0;
      for (int r = 0; r < mp_size; r++) {
        mp_check_fill(WEFT_DTYPE_FLOAT32, out.data, at, rows[r] * inner, r, 0, g_seed, name);
        at += rows[r] * inner;
      }
    }
    check_choice(req, "ALLGATHER", claims_allgather(total * inner, 4), name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

static void run_broadcast(weft_dtype t, size_t n, int root) {
  mp_case("broadcast %s n=%zu root %d", weft_dtype_name(t), n, root);
  size_t es = mp_esize(t);
  unsigned char *buf = mp_alloc(n * es);
  if (mp_rank == root) mp_fill(t, buf, 0, n, root, 0, g_seed);
  else memset(buf, 0xA5, n * es);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor ti = {t, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  char name[64];
  snprintf(name, sizeof name, "bc.%d.%zu.%d", (int)t, n, root);
  weft_request *req = NULL;
  mp_submitted(weft_broadcast(mp_group, name, &ti, root, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    mp_check_fill(t, buf, 0, n, root, 0, g_seed, name);
    check_choice(req, "BROADCAST", claims_broadcast(n, es), name);
  }
  weft_request_free(req);
  free(buf);
  mp_case_end();
}

/* Rows rank i sends rank j: none, a small block or a large one (>= 32
 * KiB of float32), depending on the pair and the variant. */
static size_t a2a_rows(int i, int j, int variant) {
  switch ((i + 2 * j + variant) % 3) {
    case 0: return 0;
    case 1: return 100 + (size_t)i;
    default: return 8192 + 8 * (size_t)i + (size_t)j; /* 32 KiB and more */
  }
}

static void run_alltoall(int variant) {
  mp_case("alltoall variant %d", variant);
  int p = mp_size, me = mp_rank;
  int64_t splits[64];
  size_t rows_in = 0;
  for (int j = 0; j < p; j++) rows_in += (size_t)(splits[j] = (int64_t)a2a_rows(me, j, variant));
  rows_in += 3; /* unused trailing rows */
  float *in = mp_alloc(rows_in * 4);
  mp_fill(WEFT_DTYPE_FLOAT32, in, 0, rows_in, me, 0, g_seed);
  int64_t shape[1] = {(int64_t)rows_in};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  char name[64];
  snprintf(name, sizeof name, "a2a.%d", variant);
  weft_request *req = NULL;
  mp_submitted(weft_alltoall(mp_group, name, &t, splits, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    size_t want = 0;
    for (int i = 0; i < p; i++) want += a2a_rows(i, me, variant);
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 1 || (size_t)out.shape[0] != want) {
      mp_fail("%s: output is not %zu rows", name, want);
    } else {
      size_t at = 0;
      for (int i = 0; i < p; i++) {
        size_t off = 0; /* where rank i's block for me starts in its input */
        for (int j = 0; j < me; j++) off += a2a_rows(i, j, variant);
        size_t n = a2a_rows(i, me, variant);
        mp_check_fill(WEFT_DTYPE_FLOAT32, out.data, at, n, i, off, g_seed, name);
        at += n;
      }
    }
    check_choice(req, "ALLTOALL", mp_size >= 2, name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--large") && i + 1 < argc) g_large = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: mp_cma [--large COUNT] [--seed S]\n");
      return 2;
    }
  }
  const char *ex = getenv("MP_CMA_EXPECT");
  g_expect = !ex || !*ex ? 0 : !strcmp(ex, "auto") ? 1 : !strcmp(ex, "none") ? 2 : -1;
  mp_setup();
  if (g_expect < 0) mp_fatal("MP_CMA_EXPECT=%s: expected auto or none", ex);
  if (mp_size > 64) mp_fatal("at most 64 ranks");
  size_t c[9];
  for (size_t k = 0; k < sizeof k_reds / sizeof k_reds[0]; k++) {
    size_t nc = counts_of(k_reds[k].dt, c);
    for (size_t i = 0; i < nc; i++) run_allreduce(&k_reds[k], c[i], (int)(i % 2));
  }
  run_fused();
  for (size_t k = 0; k < 4; k++) {
    size_t nc = counts_of(k_reds[k].dt, c);
    for (size_t i = 0; i < nc; i++) run_reducescatter(&k_reds[k], c[i] + i); /* thresholds: total input */
  }
  /* allgather rows of 3 float32 (12 bytes): around 1 MiB of output */
  size_t mib = ((size_t)1 << 20) / 12 / (size_t)mp_size;
  const size_t ag_rows[] = {0, 3, 5461, mib - 3 * (size_t)mp_size, mib + 1, g_large / 3 / (size_t)mp_size};
  for (size_t k = 0; k < sizeof ag_rows / sizeof ag_rows[0]; k++) run_allgather(ag_rows[k]);
  const size_t bc_n[] = {100, 16383, 16384, 16385, g_large};
  for (size_t k = 0; k < sizeof bc_n / sizeof bc_n[0]; k++)
    for (int root = 0; root < mp_size; root++) run_broadcast(WEFT_DTYPE_FLOAT32, bc_n[k], root);
  run_broadcast(WEFT_DTYPE_UINT8, g_large + 1, mp_size - 1);
  for (int v = 0; v < 3; v++) run_alltoall(v);
  return mp_teardown();
}
