/* mp_shm.c - the staged shared-memory algorithms (coll_shm.c of
 * src/algo) through the whole library, run with whatever WEFT_ALGO_<COLL>
 * and WEFT_SHM_STAGE_BYTES the test's environment sets:
 *  - allreduce of every dtype x op at counts that cross chunk and slot
 *    boundaries (small staging regions make many chunks), checked bit for
 *    bit against the left fold in rank order, ((x_0 op x_1) op x_2) ...,
 *    computed here in the dtype's arithmetic (average: that fold, then as
 *    the library defines it: integers divided by n exactly, truncating;
 *    floats times 1/n as the library scales, Horovod's rule: float64 in
 *    double, float32 and 16-bit floats times (float)(1/n) in float32,
 *    rounded to the type; bit for bit);
 *  - reducescatter (uneven blocks), allgather (uneven rows, a rank with
 *    none), broadcast from every root;
 *  - a burst of mixed collectives submitted at once and waited for together
 *    (fused allreduces, a staged collective right after another, so a rank
 *    reuses its staging slots while its peers may still read them);
 *  - with WEFT_ALGO_<COLL> set, that every operation of the collective ran
 *    the forced algorithm (weft_request_algorithm): a staged algorithm that
 *    declined would fall back to direct, whose bits pass the same checks.
 *    With the world's staging regions, shm takes every case here but one, a
 *    known decline: an alltoall whose blocks are all empty (staging needs
 *    the largest block), which must then not have run shm. The tests that
 *    force run with WEFT_FAST=0 (small operations would take the one-host
 *    fast path instead).
 * With --digest FILE, rank 0 writes one line per case (name and a hash of
 * its result): shm_vs_direct.sh compares a run with the staged algorithms
 * against one with direct, bit for bit, average included.
 *
 * --leave instead: a rank finalizes in the middle of a staged allreduce (see
 * run_leave).
 *
 * Usage (under weftrun -np N): mp_shm [--digest FILE] [--large COUNT] [--leave] */
#include "mp_harness.c"

static uint64_t g_seed = 23;
static size_t g_large = 70001;
static FILE *g_digest;
#include "mp_fold_ref.c"

static uint64_t digest_of(const void *p, size_t bytes) {
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

static void digest(const char *name, const void *p, size_t bytes) {
  if (g_digest) fprintf(g_digest, "%s %016llx\n", name, (unsigned long long)digest_of(p, bytes));
}


static const weft_dtype k_dtypes[] = {WEFT_DTYPE_UINT8,   WEFT_DTYPE_INT8,    WEFT_DTYPE_UINT16,  WEFT_DTYPE_INT16,
                                      WEFT_DTYPE_INT32,   WEFT_DTYPE_INT64,   WEFT_DTYPE_FLOAT16, WEFT_DTYPE_BFLOAT16,
                                      WEFT_DTYPE_FLOAT32, WEFT_DTYPE_FLOAT64, WEFT_DTYPE_BOOL};
static const weft_reduce_op k_ops[] = {WEFT_OP_SUM, WEFT_OP_MIN, WEFT_OP_MAX, WEFT_OP_PRODUCT, WEFT_OP_AVERAGE};

static void shm_after(weft_request *req, const unsigned char *buf, size_t bytes, const char *name) {
  digest(name, buf, bytes);
  mp_check_algo(req, "ALLREDUCE", NULL, name);
}

static void run_allreduce(weft_dtype t, weft_reduce_op op, size_t n) { fold_allreduce_case(t, op, n, shm_after); }

/* Reducescatter of n rows: rank r gets rows [first, first + rows). */
static void run_reducescatter(weft_dtype t, weft_reduce_op op, size_t n) {
  char name[96];
  snprintf(name, sizeof name, "rs.%s.%s.%zu", weft_dtype_name(t), weft_reduce_op_name(op), n);
  mp_case("%s", name);
  size_t es = mp_esize(t), p = (size_t)mp_size, r = (size_t)mp_rank;
  size_t rows = n / p + (r < n % p), first = r * (n / p) + (r < n % p ? r : n % p);
  unsigned char *in = mp_alloc(n * es);
  for (size_t i = 0; i < n; i++) put_input(t, in, i, mp_rank, i);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor ti = {t, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_reducescatter(mp_group, name, &ti, NULL, op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 1 || (size_t)out.shape[0] != rows) {
      mp_fail("%s: output is not %zu rows", name, rows);
    } else {
      check_fold(t, op, out.data, first, rows, name);
      if (mp_rank == 0) digest(name, out.data, rows * es);
    }
    mp_check_algo(req, "REDUCESCATTER", NULL, name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

/* Allgather: rank r has base + 5r rows of 3 elements, the last rank none. */
static weft_request *submit_allgather(weft_dtype t, size_t base, const char *name, void **in) {
  size_t mine = mp_rank == mp_size - 1 && mp_size > 1 ? 0 : base + 5 * (size_t)mp_rank;
  *in = mp_alloc(mine * 3 * mp_esize(t));
  mp_fill(t, *in, 0, mine * 3, mp_rank, 0, g_seed);
  int64_t shape[2] = {(int64_t)mine, 3};
  weft_tensor tt = {t, 2, shape, *in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_allgather(mp_group, name, &tt, NULL, &req), &req, name);
  return req;
}

static void check_allgather(weft_request *req, weft_dtype t, size_t base, const char *name) {
  if (!mp_wait_ok(req, name)) return;
  mp_check_algo(req, "ALLGATHER", NULL, name);
  size_t total = 0;
  for (int r = 0; r < mp_size; r++) total += r == mp_size - 1 && mp_size > 1 ? 0 : base + 5 * (size_t)r;
  weft_tensor out;
  if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 2 || (size_t)out.shape[0] != total) {
    mp_fail("%s: output is not %zu rows", name, total);
    return;
  }
  size_t at = 0;
  for (int r = 0; r < mp_size; r++) {
    size_t rows = r == mp_size - 1 && mp_size > 1 ? 0 : base + 5 * (size_t)r;
    mp_check_fill(t, out.data, at, rows * 3, r, 0, g_seed, name);
    at += rows * 3;
  }
}

static weft_request *submit_broadcast(weft_dtype t, size_t n, int root, const char *name, void **buf) {
  *buf = mp_alloc(n * mp_esize(t));
  if (mp_rank == root) mp_fill(t, *buf, 0, n, root, 0, g_seed);
  else memset(*buf, 0x5A, n * mp_esize(t));
  int64_t shape[1] = {(int64_t)n};
  weft_tensor tt = {t, 1, shape, *buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_broadcast(mp_group, name, &tt, root, NULL, &req), &req, name);
  return req;
}

/* An alltoall of empty blocks (rows of 5 elements, none sent): an empty
 * output. The staged algorithm declines it (no largest block to chunk by). */
static void run_alltoall_empty(void) {
  mp_case("alltoall, every block empty");
  int64_t *splits = mp_alloc(sizeof(int64_t) * (size_t)mp_size), shape[2] = {2, 5};
  for (int j = 0; j < mp_size; j++) splits[j] = 0;
  int32_t in[10] = {0};
  weft_tensor t = {WEFT_DTYPE_INT32, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_alltoall(mp_group, "a2a.empty", &t, splits, NULL, &req), &req, "a2a.empty");
  if (mp_wait_ok(req, "a2a.empty")) {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 2 || out.shape[0] != 0 || out.shape[1] != 5)
      mp_fail("a2a.empty: the output is not 0 x 5");
    mp_check_algo(req, "ALLTOALL", "every block is empty: staging chunks by the largest block", "a2a.empty");
  }
  weft_request_free(req);
  free(splits);
  mp_case_end();
}

/* Many collectives of every kind submitted at once, then waited for. */
#define BURST 24
static void run_burst(int round) {
  mp_case("burst %d: %d mixed collectives submitted together", round, BURST);
  weft_request *req[BURST];
  void *mem[BURST];
  size_t n[BURST];
  char name[BURST][64];
  for (int k = 0; k < BURST; k++) {
    n[k] = 1 + (size_t)(mp_hash(99, (uint64_t)k, (uint64_t)round) % g_large);
    snprintf(name[k], sizeof name[k], "burst.%d.%d", round, k);
    switch (k % 4) {
      case 0:
      case 1: { /* consecutive allreduces of one dtype and op: fused */
        float *b = mem[k] = mp_alloc(n[k] * 4);
        for (size_t i = 0; i < n[k]; i++) put_input(WEFT_DTYPE_FLOAT32, b, i, mp_rank, i + (size_t)k);
        int64_t shape[1] = {(int64_t)n[k]};
        weft_tensor tt = {WEFT_DTYPE_FLOAT32, 1, shape, b, WEFT_DEVICE_CPU, 0, NULL};
        req[k] = NULL;
        mp_submitted(weft_allreduce(mp_group, name[k], &tt, &tt, WEFT_OP_SUM, NULL, &req[k]), &req[k], name[k]);
        break;
      }
      case 2: req[k] = submit_allgather(WEFT_DTYPE_INT32, n[k] / 16, name[k], &mem[k]); break;
      default: req[k] = submit_broadcast(WEFT_DTYPE_FLOAT64, n[k], k % mp_size, name[k], &mem[k]); break;
    }
  }
  for (int k = 0; k < BURST; k++) {
    switch (k % 4) {
      case 0:
      case 1:
        if (mp_wait_ok(req[k], name[k])) {
          unsigned char want[4];
          const float *b = mem[k];
          for (size_t i = 0; i < n[k]; i++) {
            unsigned char x[4];
            put_input(WEFT_DTYPE_FLOAT32, want, 0, 0, i + (size_t)k);
            for (int r = 1; r < mp_size; r++) {
              put_input(WEFT_DTYPE_FLOAT32, x, 0, r, i + (size_t)k);
              combine(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, want, x);
            }
            if (memcmp(&b[i], want, 4)) {
              mp_fail("%s: element %zu is not the rank-order sum", name[k], i);
              break;
            }
          }
          mp_check_algo(req[k], "ALLREDUCE", NULL, name[k]);
        }
        break;
      case 2: check_allgather(req[k], WEFT_DTYPE_INT32, n[k] / 16, name[k]); break;
      default:
        if (mp_wait_ok(req[k], name[k])) {
          mp_check_fill(WEFT_DTYPE_FLOAT64, mem[k], 0, n[k], k % mp_size, 0, g_seed, name[k]);
          mp_check_algo(req[k], "BROADCAST", NULL, name[k]);
        }
        break;
    }
    weft_request_free(req[k]);
    free(mem[k]);
  }
  mp_case_end();
}

/* --leave: every rank submits a 128 MiB allreduce, then rank 1 finalizes
 * 10 ms later, in the middle of it (its part fails with SHUTDOWN). The others must not wait for it until
 * their timeout: within 10 s they fail naming rank 1 (or succeed, had rank 1
 * finished its part first). */
static int run_leave(void) {
  size_t n = (size_t)32 << 20;
  float *buf = mp_alloc(n * 4);
  for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
  mp_case("ready");
  if (!mp_same_everywhere("leave.ready", 1)) mp_fatal("sync failed");
  mp_case_end();
  int64_t shape[1] = {(int64_t)n};
  weft_tensor tt = {WEFT_DTYPE_FLOAT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, "leave.big", &tt, &tt, WEFT_OP_SUM, NULL, &req), &req, "leave.big");
  if (mp_rank == 1) {
    mp_case("rank 1 finalizes with the allreduce in flight");
    mp_sleep_ms(10);
    weft_world *w = mp_world;
    mp_world = NULL;
    weft_status st = weft_finalize(w);
    if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL) mp_fail("weft_finalize: %s", weft_status_string(st));
    st = weft_wait(req, 5.0);
    if (st == WEFT_IN_PROGRESS) mp_fail("the allreduce is still pending after finalize");
    weft_request_free(req);
    mp_case_end();
    free(buf);
    int nf = atomic_load(&mp_failures);
    mp_say("%s rank %d: %d failure(s)", nf ? "FAILED" : "DONE", mp_rank, nf);
    return nf ? 1 : 0;
  }
  mp_case("rank %d: the allreduce ends within 10 s of rank 1 leaving", mp_rank);
  double t0 = mp_now();
  weft_status st = weft_wait(req, 10.0);
  if (st == WEFT_IN_PROGRESS) mp_fail("still pending %.1f s after rank 1 left", mp_now() - t0);
  else if (st != WEFT_OK && !mp_contains(weft_request_error(req), "rank 1"))
    mp_fail("failed with \"%s\", which does not name rank 1", weft_request_error(req));
  else
    mp_say("INFO rank %d: %s after %.2f s: %s", mp_rank, weft_status_string(st), mp_now() - t0,
           st == WEFT_OK ? "completed" : weft_request_error(req));
  for (size_t i = 0; st == WEFT_OK && i < n; i++) /* completed: rank 1's part was in, the whole sum */
    if (buf[i] != (float)mp_size) {
      mp_fail("completed, but element %zu is %g, not %d", i, buf[i], mp_size);
      break;
    }
  weft_request_free(req);
  mp_case_end();
  if (st != WEFT_IN_PROGRESS) free(buf); /* else the engine may still write into it: leaked, the test failed anyway */
  mp_case("weft_finalize");
  weft_world *w = mp_world;
  mp_world = NULL;
  st = weft_finalize(w);
  if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL) mp_fail("weft_finalize: %s", weft_status_string(st));
  mp_case_end();
  int nf = atomic_load(&mp_failures);
  mp_say("%s rank %d: %d failure(s)", nf ? "FAILED" : "DONE", mp_rank, nf);
  return nf ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *dfile = NULL;
  int leave = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--digest") && i + 1 < argc) dfile = argv[++i];
    else if (!strcmp(argv[i], "--large") && i + 1 < argc) g_large = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--leave")) leave = 1;
    else {
      fprintf(stderr, "usage: mp_shm [--digest FILE] [--large COUNT] [--leave]\n");
      return 2;
    }
  }
  mp_setup();
  if (leave) return mp_size < 2 ? mp_teardown() : run_leave();
  if (dfile && mp_rank == 0 && !(g_digest = fopen(dfile, "w"))) mp_fatal("cannot write %s", dfile);
  const size_t counts[] = {1, 3, 4097, 16385, g_large};
  for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++)
    for (size_t o = 0; o < sizeof k_ops / sizeof k_ops[0]; o++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        if (k_dtypes[d] != WEFT_DTYPE_BOOL || k_ops[o] != WEFT_OP_AVERAGE) /* not defined */
          run_allreduce(k_dtypes[d], k_ops[o], counts[c]);
  for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d += 3)
    for (size_t o = 0; o < sizeof k_ops / sizeof k_ops[0]; o++)
      if (k_dtypes[d] != WEFT_DTYPE_BOOL || k_ops[o] != WEFT_OP_AVERAGE) run_reducescatter(k_dtypes[d], k_ops[o], g_large + o);
  const size_t ag_base[] = {0, 1, 1000, g_large / 8};
  for (size_t k = 0; k < sizeof ag_base / sizeof ag_base[0]; k++) {
    char name[64];
    void *in;
    snprintf(name, sizeof name, "ag.%zu", ag_base[k]);
    mp_case("%s", name);
    weft_request *req = submit_allgather(k % 2 ? WEFT_DTYPE_UINT8 : WEFT_DTYPE_FLOAT32, ag_base[k], name, &in);
    check_allgather(req, k % 2 ? WEFT_DTYPE_UINT8 : WEFT_DTYPE_FLOAT32, ag_base[k], name);
    weft_request_free(req);
    free(in);
    mp_case_end();
  }
  const size_t bc_n[] = {1, 1000, g_large};
  for (size_t k = 0; k < sizeof bc_n / sizeof bc_n[0]; k++)
    for (int root = 0; root < mp_size; root++) {
      char name[64];
      void *buf;
      snprintf(name, sizeof name, "bc.%zu.%d", bc_n[k], root);
      mp_case("%s", name);
      weft_request *req = submit_broadcast(WEFT_DTYPE_INT16, bc_n[k], root, name, &buf);
      if (mp_wait_ok(req, name)) {
        mp_check_fill(WEFT_DTYPE_INT16, buf, 0, bc_n[k], root, 0, g_seed, name);
        mp_check_algo(req, "BROADCAST", NULL, name);
      }
      weft_request_free(req);
      free(buf);
      mp_case_end();
    }
  run_alltoall_empty();
  for (int r = 0; r < 3; r++) run_burst(r);
  if (g_digest) fclose(g_digest);
  return mp_teardown();
}
