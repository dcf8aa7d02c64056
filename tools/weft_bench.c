/* weft_bench.c - weft-bench, an nccl-tests style benchmark of weft's
 * collectives. Run it under the launcher (`weftrun -np 4 weft-bench --op
 * allreduce -b 8 -e 64M`); only rank 0 prints. Per size: bytes, elements,
 * time per iteration (mean over iterations, max over ranks), algbw, busbw
 * (nccl-tests factors) and, with --check, the number of wrong elements.
 *
 * With --check every iteration fills the inputs with a pattern that depends
 * on (rank, element, iteration, tensor) and verifies every output element
 * against the exact value computed here independently. Pattern values are
 * integers chosen so that every sum, min, max and product is exactly
 * representable in the dtype, whatever order the library reduces in; only
 * a float average may differ from sum/n by rounding (the division is a
 * postscale), so it is compared within two units in the last place.
 *
 * With --device sim|cuda the tensors live in device memory (weft_bench_dev.c,
 * which uses weft's device backends; the rest uses only weft.h): filled and
 * verified through host copies outside the timed part. */
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "weft.h"
#include "weft_bench_dev.h"
#include "weft_bench_num.h"
#include "weft_bench_p2p.h"

enum { OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_ALLTOALL, OP_REDUCESCATTER, OP_SENDRECV, OP_PINGPONG,
       OP_PERMUTE, OP_COUNT };
static const char *const k_op_names[OP_COUNT] = {"allreduce", "allgather",     "broadcast", "alltoall",
                                                 "reducescatter", "sendrecv", "pingpong", "permute"};
#define MAX_SIZES 64
#define MAX_REPORTED 5 /* mismatches printed per rank and size */

typedef struct bench_args {
  int op;
  weft_dtype dtype;
  weft_reduce_op rop;
  size_t sizes[MAX_SIZES]; /* requested byte sizes */
  int nsizes;
  int iters, warmup, check, root, tensors, csv, out_of_place;
  const char *device; /* NULL or "cpu": host memory; "sim", "cuda" */
  double time_target; /* > 0: choose iters so one size runs about this long */
} bench_args;

/* Buffers of one of the --tensors K tensors. out is the allgather/alltoall
 * destination handed to the library by slot_alloc, the reducescatter output,
 * or the out-of-place allreduce output. */
typedef struct slot {
  void *in, *out;
  size_t out_cap; /* bytes */
  void *host_in, *host_out; /* --device: host copies for filling and checking */
} slot;

/* Shape of one size: what the tensors hold. */
typedef struct geom {
  size_t bytes;     /* reported size (nccl-tests convention) */
  size_t elems;     /* bytes / element size */
  size_t in_elems;  /* input tensor elements on every rank */
  size_t out_elems; /* output elements on every rank */
  size_t chunk;     /* elems / ranks (gather, alltoall, scatter blocks) */
} geom;

typedef struct bench {
  bench_args a;
  weft_world *world;
  weft_group *group;
  int rank, size;
  size_t esize;
  slot *slots;
  weft_request **reqs;
  char (*names)[96]; /* the tensors' names for the current size: formatted once, not in the timed loop */
  uint64_t wrong;  /* wrong elements seen by this rank for the current size */
  int reported;    /* mismatches printed for the current size */
  uint64_t seq;    /* iteration counter: makes every iteration's pattern distinct */
  int64_t lo, hi;  /* per-rank pattern range for this dtype and op */
  bench_dev *dev;  /* --device sim|cuda, else NULL */
} bench;

/* ------------------------------------------------------------------ small helpers */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ the check pattern */
/* Pattern range per rank: the dtype's whole exact range for data movement;
 * for reductions 1/size of it, so the sum of all ranks stays exact. */
static void pattern_range(bench *b) {
  int64_t lim = wb_exact_limit(b->a.dtype);
  int reduces = b->a.op == OP_ALLREDUCE || b->a.op == OP_REDUCESCATTER;
  if (reduces) lim /= b->size;
  if (b->a.dtype == WEFT_DTYPE_BOOL) lim = 1;
  b->hi = lim;
  b->lo = wb_is_signed(b->a.dtype) ? -lim : 0;
}

/* Per-(rank, iteration, tensor) seed; rank == size gives the rank-free seed
 * used by the product pattern. */
static uint64_t pat_seed(int rank, uint64_t it, int k) {
  return wb_mix64(wb_mix64(0x5eedull ^ (it << 20) ^ ((uint64_t)k << 48)) + (uint64_t)rank);
}

/* Value of element g of rank r's input. Product inputs are 1 except one
 * rank's 2 and (signed types) one rank's -1 per element, so |result| <= 2. */
static int64_t pat(const bench *b, uint64_t seed_r, uint64_t seed_any, int r, size_t g) {
  if (b->a.rop == WEFT_OP_PRODUCT && (b->a.op == OP_ALLREDUCE || b->a.op == OP_REDUCESCATTER) &&
      b->a.dtype != WEFT_DTYPE_BOOL) {
    uint64_t h = wb_mix64(seed_any + g);
    int64_t v = (uint64_t)r == h % (uint64_t)b->size ? 2 : 1;
    if (wb_is_signed(b->a.dtype) && (uint64_t)r == (h >> 32) % (uint64_t)b->size) v = -v;
    return v;
  }
  uint64_t h = wb_mix64(seed_r + g), span = (uint64_t)b->hi - (uint64_t)b->lo + 1; /* 0: all 2^64 */
  return span ? (int64_t)((uint64_t)b->lo + h % span) : (int64_t)h;
}

/* Expected result of reducing element g over all ranks. *avg_f receives the
 * exact float average (only meaningful for float dtypes with AVERAGE). */
static int64_t reduce_expect(const bench *b, const uint64_t *seeds, uint64_t seed_any, size_t g, double *avg_f) {
  int64_t acc = pat(b, seeds[0], seed_any, 0, g);
  for (int r = 1; r < b->size; r++) {
    int64_t v = pat(b, seeds[r], seed_any, r, g);
    switch (b->a.rop) {
    case WEFT_OP_MIN: acc = v < acc ? v : acc; break;
    case WEFT_OP_MAX: acc = v > acc ? v : acc; break;
    case WEFT_OP_PRODUCT: acc *= v; break;
    default: acc += v; break; /* sum, average */
    }
  }
  *avg_f = (double)acc / b->size;
  if (b->a.dtype == WEFT_DTYPE_BOOL) return acc != 0; /* or / and, as 0/1 */
  if (b->a.rop == WEFT_OP_AVERAGE) return acc / b->size; /* C truncates toward zero */
  return acc;
}

/* Fills every input of tensor k for iteration it. */
static void fill(bench *b, const geom *gm, int k, uint64_t it) {
  uint64_t seed = pat_seed(b->rank, it, k), seed_any = pat_seed(b->size, it, k);
  void *in = b->dev ? b->slots[k].host_in : b->slots[k].in;
  for (size_t g = 0; g < gm->in_elems; g++) wb_store(b->a.dtype, in, g, pat(b, seed, seed_any, b->rank, g));
  if (b->dev && bdev_put(b->dev, b->slots[k].in, in, gm->in_elems * b->esize))
    fprintf(stderr, "weft-bench: rank %d: filling device memory: %s\n", b->rank, weft_last_error());
}

static void report_wrong(bench *b, const geom *gm, int k, uint64_t it, size_t i, const char *got, const char *want) {
  b->wrong++;
  if (b->reported++ >= MAX_REPORTED) return;
  fprintf(stderr, "weft-bench: rank %d: %s %s size %zu tensor %d iteration %llu: output[%zu] = %s, expected %s\n",
          b->rank, k_op_names[b->a.op], weft_dtype_name(b->a.dtype), gm->bytes, k, (unsigned long long)it, i, got,
          want);
}

/* Verifies every element of tensor k's output (out, n elements). */
static void verify(bench *b, const geom *gm, int k, uint64_t it, const void *out, size_t n) {
  weft_dtype t = b->a.dtype;
  uint64_t seeds[b->size];
  for (int r = 0; r < b->size; r++) seeds[r] = pat_seed(r, it, k);
  uint64_t seed_any = pat_seed(b->size, it, k);
  int fl = wb_is_float(t), favg = fl && b->a.rop == WEFT_OP_AVERAGE;
  double tol = 2 * wb_float_eps(t);
  if (n != gm->out_elems) {
    fprintf(stderr, "weft-bench: rank %d: %s size %zu tensor %d: output has %zu elements, expected %zu\n", b->rank,
            k_op_names[b->a.op], gm->bytes, k, n, gm->out_elems);
    b->wrong += gm->out_elems;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t want;
    double want_avg = 0;
    size_t src, g;
    switch (b->a.op) {
    case OP_ALLREDUCE: want = reduce_expect(b, seeds, seed_any, i, &want_avg); break;
    case OP_REDUCESCATTER:
      want = reduce_expect(b, seeds, seed_any, (size_t)b->rank * gm->chunk + i, &want_avg);
      break;
    case OP_BROADCAST: want = pat(b, seeds[b->a.root], seed_any, b->a.root, i); break;
    case OP_PERMUTE: /* the shift r -> r + 1: the left neighbour's input */
      src = (size_t)((b->rank + b->size - 1) % b->size);
      want = pat(b, seeds[src], seed_any, (int)src, i);
      break;
    case OP_ALLGATHER:
      src = i / gm->chunk;
      want = pat(b, seeds[src], seed_any, (int)src, i % gm->chunk);
      break;
    default: /* alltoall: block src of my output is block `rank` of src's input */
      src = i / gm->chunk;
      g = (size_t)b->rank * gm->chunk + i % gm->chunk;
      want = pat(b, seeds[src], seed_any, (int)src, g);
      break;
    }
    int redop = b->a.op == OP_ALLREDUCE || b->a.op == OP_REDUCESCATTER;
    char gs[32], ws[32];
    if (fl) {
      double got = wb_load_f(t, out, i), w = favg && redop ? want_avg : (double)want;
      int ok = favg && redop ? fabs(got - w) <= tol * fabs(w) : got == w;
      if (ok) continue;
      snprintf(gs, sizeof gs, "%.17g", got);
      snprintf(ws, sizeof ws, "%.17g", w);
    } else {
      int64_t got = wb_load_i(t, out, i);
      if (got == want) continue;
      snprintf(gs, sizeof gs, "%lld", (long long)got);
      snprintf(ws, sizeof ws, "%lld", (long long)want);
    }
    report_wrong(b, gm, k, it, i, gs, ws);
  }
}

/* ------------------------------------------------------------------ running */
/* Prints the failure on this rank, stops the world so peers fail fast too. */
static int fail(bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(bench *b, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "weft-bench: rank %d: %s\n", b->rank, msg);
  if (b->world) weft_abort(b->world, msg);
  return -1;
}

/* Allgather/alltoall destination: the slot's preallocated, pre-touched
 * buffer, so the timing does not include page faults of a fresh output. */
static void *slot_alloc(size_t bytes, void *ctx) {
  slot *s = ctx;
  return bytes <= s->out_cap ? s->out : NULL;
}

static int wait_req(bench *b, weft_request *req, const char *what) {
  weft_status st = weft_wait(req, -1);
  if (st == WEFT_OK) return 0;
  return fail(b, "%s failed: %s: %s", what, weft_status_string(st), weft_request_error(req));
}

/* Blocking allreduce of one scalar (the time MAX, the wrong-count SUM). */
static int allreduce_scalar(bench *b, const char *name, weft_dtype t, void *val, weft_reduce_op op) {
  weft_tensor x = {t, 0, NULL, val, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(b->group, name, &x, &x, op, NULL, &req);
  if (st < 0) return fail(b, "weft_allreduce(%s): %s: %s", name, weft_status_string(st), weft_last_error());
  int rc = wait_req(b, req, name);
  weft_request_free(req);
  return rc;
}

static int barrier(bench *b, const char *name) {
  weft_request *req = NULL;
  weft_status st = weft_barrier(b->group, name, NULL, &req);
  if (st < 0) return fail(b, "weft_barrier(%s): %s: %s", name, weft_status_string(st), weft_last_error());
  int rc = wait_req(b, req, name);
  weft_request_free(req);
  return rc;
}

static weft_status submit(bench *b, const geom *gm, int k, const char *name, weft_request **req) {
  slot *s = &b->slots[k];
  int64_t in_shape[1] = {(int64_t)gm->in_elems}, out_shape[1] = {(int64_t)gm->out_elems};
  weft_tensor in = {b->a.dtype, 1, in_shape, s->in, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor out = {b->a.dtype, 1, out_shape, s->out, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.alloc = slot_alloc;
  opt.alloc_ctx = s;
  if (b->dev) {
    bdev_tensor(b->dev, &in);
    bdev_tensor(b->dev, &out);
  }
  switch (b->a.op) {
  case OP_ALLREDUCE:
    return weft_allreduce(b->group, name, &in, b->a.out_of_place ? &out : &in, b->a.rop, &opt, req);
  case OP_ALLGATHER: return weft_allgather(b->group, name, &in, &opt, req);
  case OP_BROADCAST: return weft_broadcast(b->group, name, &in, b->a.root, &opt, req);
  case OP_ALLTOALL: return weft_alltoall(b->group, name, &in, NULL, &opt, req);
  case OP_PERMUTE: {
    int perm[b->size];
    for (int r = 0; r < b->size; r++) perm[r] = (r + 1) % b->size;
    return weft_permute(b->group, name, &in, &out, perm, b->size, &opt, req);
  }
  default: return weft_reducescatter(b->group, name, &in, &out, b->a.rop, &opt, req);
  }
}

/* One iteration: (fill), submit every tensor, wait for all, (verify).
 * *elapsed gets the submit-to-last-completion time (elapsed NULL: not
 * timed here, the caller times the loop). */
static int run_iter(bench *b, const geom *gm, double *elapsed) {
  uint64_t it = b->seq++;
  int K = b->a.tensors, rc = 0, n = 0;
  if (b->a.check)
    for (int k = 0; k < K; k++) fill(b, gm, k, it);
  double t0 = elapsed ? now_s() : 0;
  for (; n < K; n++) {
    weft_status st = submit(b, gm, n, b->names[n], &b->reqs[n]);
    if (st < 0) {
      rc = fail(b, "submitting %s: %s: %s", b->names[n], weft_status_string(st), weft_last_error());
      goto out;
    }
  }
  for (int k = 0; k < K && rc == 0; k++) rc = wait_req(b, b->reqs[k], k_op_names[b->a.op]);
  if (elapsed) *elapsed = now_s() - t0;
  for (int k = 0; k < K && rc == 0 && b->a.check; k++) {
    const void *out = b->slots[k].in; /* allreduce in place, broadcast */
    size_t nout = gm->out_elems;
    if (b->a.op == OP_ALLGATHER || b->a.op == OP_ALLTOALL) {
      weft_tensor o;
      weft_status st = weft_request_output(b->reqs[k], &o);
      if (st != WEFT_OK) {
        rc = fail(b, "weft_request_output: %s: %s", weft_status_string(st), weft_last_error());
        break;
      }
      out = o.data;
      nout = o.ndim == 1 ? (size_t)o.shape[0] : 0;
    } else if (b->a.op == OP_REDUCESCATTER || b->a.op == OP_PERMUTE || (b->a.op == OP_ALLREDUCE && b->a.out_of_place)) {
      out = b->slots[k].out;
    }
    if (b->dev) { /* read back outside the timed part */
      if (bdev_get(b->dev, b->slots[k].host_out, out, nout * b->esize)) {
        rc = fail(b, "reading device memory back: %s", weft_last_error());
        break;
      }
      out = b->slots[k].host_out;
    }
    verify(b, gm, k, it, out, nout);
  }
out:
  for (int k = 0; k < n; k++) weft_request_free(b->reqs[k]);
  return rc;
}

/* Geometry of one requested size; 0 if it holds less than one element per
 * rank where the op needs that. Sizes round down to whole elements (and to a
 * multiple of the world size for the block-wise ops), as nccl-tests does. */
static int make_geom(const bench *b, size_t bytes, geom *gm) {
  size_t n = (size_t)b->size, e = bytes / b->esize;
  int blocks = b->a.op == OP_ALLGATHER || b->a.op == OP_ALLTOALL || b->a.op == OP_REDUCESCATTER;
  if (blocks) e -= e % n;
  if (e == 0) return 0;
  gm->elems = e;
  gm->bytes = e * b->esize;
  gm->chunk = e / n;
  gm->in_elems = b->a.op == OP_ALLGATHER ? e / n : e;
  gm->out_elems = b->a.op == OP_REDUCESCATTER ? e / n : e;
  return 1;
}

static double busbw_factor(int op, int n) {
  if (op == OP_ALLREDUCE) return 2.0 * (n - 1) / n;
  if (op == OP_BROADCAST || op == OP_PERMUTE) return 1.0;
  return (double)(n - 1) / n;
}

/* Runs one size and (rank 0) prints its row; adds busbw to *bw_sum. */
static int run_size(bench *b, const geom *gm, double *bw_sum) {
  char name[96];
  double t = 0, dt;
  int iters = b->a.iters;
  b->wrong = 0;
  b->reported = 0;
  for (int k = 0; k < b->a.tensors; k++)
    snprintf(b->names[k], sizeof b->names[k], "bench.%s.%zu.%d", k_op_names[b->a.op], gm->bytes, k);
  snprintf(name, sizeof name, "bench.barrier.%s.%zu", k_op_names[b->a.op], gm->bytes);
  if (barrier(b, name)) return -1;
  for (int w = 0; w < b->a.warmup; w++) {
    if (run_iter(b, gm, &dt)) return -1;
    t += dt;
  }
  if (b->a.time_target > 0) { /* every rank must choose the same count */
    if (b->a.warmup == 0 && run_iter(b, gm, &t)) return -1;
    double est = t / (b->a.warmup ? b->a.warmup : 1);
    snprintf(name, sizeof name, "bench.estimate.%s.%zu", k_op_names[b->a.op], gm->bytes);
    if (allreduce_scalar(b, name, WEFT_DTYPE_FLOAT64, &est, WEFT_OP_MAX)) return -1;
    double want = ceil(b->a.time_target / (est > 1e-9 ? est : 1e-9));
    iters = want > 1e6 ? 1000000 : want < 1 ? 1 : (int)want;
  }
  /* with --check each iteration fills and verifies outside its timed
   * part; without, the loop is timed as a whole, as the peer harnesses do
   * (clock reads per iteration would add a visible share to a small op;
   * bench/NOTES.md, "weft-bench") */
  t = 0;
  double t0 = b->a.check ? 0 : now_s();
  for (int i = 0; i < iters; i++) {
    if (run_iter(b, gm, b->a.check ? &dt : NULL)) return -1;
    t += b->a.check ? dt : 0;
  }
  if (!b->a.check) t = now_s() - t0;
  t /= iters;
  snprintf(name, sizeof name, "bench.time.%s.%zu", k_op_names[b->a.op], gm->bytes);
  if (allreduce_scalar(b, name, WEFT_DTYPE_FLOAT64, &t, WEFT_OP_MAX)) return -1;
  int64_t wrong = (int64_t)b->wrong;
  snprintf(name, sizeof name, "bench.wrong.%s.%zu", k_op_names[b->a.op], gm->bytes);
  if (b->a.check && allreduce_scalar(b, name, WEFT_DTYPE_INT64, &wrong, WEFT_OP_SUM)) return -1;
  double algbw = (double)gm->bytes * b->a.tensors / t / 1e9, busbw = algbw * busbw_factor(b->a.op, b->size);
  *bw_sum += busbw;
  if (b->rank == 0) {
    char wr[32] = "";
    if (b->a.check) snprintf(wr, sizeof wr, "%lld", (long long)wrong);
    if (b->a.csv)
      printf("%s,%s,%s,%d,%d,%zu,%zu,%d,%.3f,%.4f,%.4f,%s\n", k_op_names[b->a.op], weft_dtype_name(b->a.dtype),
             weft_reduce_op_name(b->a.rop), b->size, b->a.tensors, gm->bytes, gm->elems, iters, t * 1e6, algbw,
             busbw, wr);
    else
      printf("%14zu %13zu %13.2f %13.3f %13.3f %7s\n", gm->bytes, gm->elems, t * 1e6, algbw, busbw, wr);
    fflush(stdout);
  }
  return wrong ? 1 : 0;
}

/* ------------------------------------------------------------------ arguments */
static int parse_bytes(const char *s, size_t *out) {
  char *end;
  if (!s || *s == '-' || !*s) return -1;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned long long mul = 1;
  if (end == s) return -1;
  switch (*end) {
  case 'k': case 'K': mul = 1ull << 10; end++; break;
  case 'm': case 'M': mul = 1ull << 20; end++; break;
  case 'g': case 'G': mul = 1ull << 30; end++; break;
  default: break;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end || v > SIZE_MAX / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_int(const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: weftrun -np N weft-bench [options]\n"
          "  --op NAME            allreduce|allgather|broadcast|alltoall|reducescatter|sendrecv|pingpong|permute\n"
          "                       (allreduce; sendrecv: ring shift, pingpong: ranks 0 and 1, one-way time;\n"
          "                       permute: weft_permute of the shift r -> r + 1)\n"
          "  -b, --min-bytes B    smallest size (8); K/M/G suffixes (powers of 1024)\n"
          "  -e, --max-bytes B    largest size (32M)\n"
          "  -f, --step-factor F  multiply the size by F between runs (2)\n"
          "      --sizes LIST     comma list of sizes instead of -b/-e/-f\n"
          "  -d, --dtype NAME     uint8|int8|uint16|int16|int32|int64|float16|bfloat16|float32|float64|bool (float32)\n"
          "  -o, --reduce-op NAME sum|average|min|max|product (sum)\n"
          "  -n, --iters N        timed iterations per size (20)\n"
          "  -w, --warmup N       untimed iterations per size (5)\n"
          "  -T, --time-target S  instead of -n: as many iterations as take about S seconds\n"
          "  -c, --check          fill and verify every iteration; wrong elements -> exit 1\n"
          "  -r, --root R         broadcast root (0)\n"
          "  -k, --tensors K      submit K tensors of the size per iteration, wait for all (1)\n"
          "      --out-of-place   allreduce into a separate output buffer (default: in place)\n"
          "      --device NAME    cpu|sim|cuda: the tensors' memory (cpu: host memory)\n"
          "      --csv            comma-separated rows\n"
          "Size follows nccl-tests: allgather = total output, reducescatter = total input,\n"
          "alltoall = send buffer per rank. algbw = K*size/time; busbw = algbw * 2(n-1)/n\n"
          "(allreduce), (n-1)/n (allgather, reducescatter, alltoall), 1 (broadcast, permute).\n");
}

static int parse_sizes(bench_args *a, const char *list) {
  char buf[1024], *save = NULL;
  snprintf(buf, sizeof buf, "%s", list);
  a->nsizes = 0;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (a->nsizes == MAX_SIZES || parse_bytes(tok, &a->sizes[a->nsizes])) return -1;
    a->nsizes++;
  }
  return a->nsizes ? 0 : -1;
}

static int lookup(const char *s, const char *(*name_of)(int), int count) {
  for (int i = 0; i < count; i++)
    if (!strcasecmp(s, name_of(i))) return i;
  return -1;
}
static const char *dtype_name_i(int i) { return weft_dtype_name((weft_dtype)i); }
static const char *rop_name_i(int i) { return weft_reduce_op_name((weft_reduce_op)i); }
static const char *op_name_i(int i) { return k_op_names[i]; }

/* 0 ok, 1 help printed, -1 error (message printed). */
static int parse_args(int argc, char **argv, bench_args *a) {
  enum { O_OP = 256, O_CSV, O_SIZES, O_OOP, O_DEVICE };
  static const struct option opts[] = {
      {"op", required_argument, NULL, O_OP},          {"min-bytes", required_argument, NULL, 'b'},
      {"max-bytes", required_argument, NULL, 'e'},    {"step-factor", required_argument, NULL, 'f'},
      {"sizes", required_argument, NULL, O_SIZES},    {"dtype", required_argument, NULL, 'd'},
      {"reduce-op", required_argument, NULL, 'o'},    {"iters", required_argument, NULL, 'n'},
      {"warmup", required_argument, NULL, 'w'},       {"time-target", required_argument, NULL, 'T'},
      {"check", no_argument, NULL, 'c'},              {"root", required_argument, NULL, 'r'},
      {"tensors", required_argument, NULL, 'k'},      {"out-of-place", no_argument, NULL, O_OOP},
      {"csv", no_argument, NULL, O_CSV},              {"help", no_argument, NULL, 'h'},
      {"device", required_argument, NULL, O_DEVICE},
      {NULL, 0, NULL, 0}};
  size_t lo = 8, hi = 32u << 20;
  int factor = 2, c, v;
  const char *sizes = NULL;
  char *end;
  memset(a, 0, sizeof *a);
  a->dtype = WEFT_DTYPE_FLOAT32;
  a->rop = WEFT_OP_SUM;
  a->iters = 20;
  a->warmup = 5;
  a->tensors = 1;
  int li = -1;
  while ((c = getopt_long(argc, argv, "b:e:f:d:o:n:w:T:cr:k:h", opts, &li)) != -1) {
    int bad = 0;
    switch (c) {
    case O_OP: bad = (a->op = lookup(optarg, op_name_i, OP_COUNT)) < 0; break;
    case 'b': bad = parse_bytes(optarg, &lo) != 0; break;
    case 'e': bad = parse_bytes(optarg, &hi) != 0; break;
    case 'f': bad = parse_int(optarg, 2, 1 << 20, &factor) != 0; break;
    case O_SIZES: sizes = optarg; break;
    case 'd':
      v = lookup(optarg, dtype_name_i, WEFT_DTYPE_COUNT_);
      bad = v < 0;
      a->dtype = (weft_dtype)v;
      break;
    case 'o':
      v = lookup(optarg, rop_name_i, WEFT_OP_COUNT_);
      bad = v < 0;
      a->rop = (weft_reduce_op)v;
      break;
    case 'n': bad = parse_int(optarg, 1, 100000000, &a->iters) != 0; break;
    case 'w': bad = parse_int(optarg, 0, 100000000, &a->warmup) != 0; break;
    case 'T':
      a->time_target = strtod(optarg, &end);
      bad = *end || end == optarg || !(a->time_target > 0);
      break;
    case 'c': a->check = 1; break;
    case 'r': bad = parse_int(optarg, 0, 1 << 30, &a->root) != 0; break;
    case 'k': bad = parse_int(optarg, 1, 4096, &a->tensors) != 0; break;
    case O_OOP: a->out_of_place = 1; break;
    case O_CSV: a->csv = 1; break;
    case O_DEVICE:
      a->device = optarg;
      bad = strcasecmp(optarg, "cpu") && strcasecmp(optarg, "sim") && strcasecmp(optarg, "cuda");
      if (!strcasecmp(optarg, "cpu")) a->device = NULL;
      break;
    case 'h': usage(stdout); return 1;
    default: usage(stderr); return -1;
    }
    if (bad) {
      for (li = 0; opts[li].name && opts[li].val != c; li++) continue;
      fprintf(stderr, "weft-bench: bad value for --%s: '%s' (see --help)\n", opts[li].name, optarg);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "weft-bench: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return -1;
  }
  if (a->dtype == WEFT_DTYPE_BOOL && a->rop == WEFT_OP_AVERAGE &&
      (a->op == OP_ALLREDUCE || a->op == OP_REDUCESCATTER)) {
    fprintf(stderr, "weft-bench: average is not defined for bool\n");
    return -1;
  }
  if (sizes) {
    if (parse_sizes(a, sizes)) {
      fprintf(stderr, "weft-bench: bad --sizes '%s' (at most %d sizes)\n", sizes, MAX_SIZES);
      return -1;
    }
    return 0;
  }
  if (lo == 0 || hi < lo) {
    fprintf(stderr, "weft-bench: need 0 < --min-bytes <= --max-bytes\n");
    return -1;
  }
  for (size_t s = lo; a->nsizes < MAX_SIZES; s *= (size_t)factor) {
    a->sizes[a->nsizes++] = s;
    if (s > hi / (size_t)factor) break; /* the next size would pass hi (or overflow) */
  }
  return 0;
}

/* ------------------------------------------------------------------ main */
static int alloc_slots(bench *b) {
  size_t max_in = 0, max_out = 0;
  geom gm;
  for (int i = 0; i < b->a.nsizes; i++) {
    if (!make_geom(b, b->a.sizes[i], &gm)) continue;
    if (gm.in_elems > max_in) max_in = gm.in_elems;
    if (gm.out_elems > max_out) max_out = gm.out_elems;
  }
  int need_out = b->a.op == OP_ALLGATHER || b->a.op == OP_ALLTOALL || b->a.op == OP_REDUCESCATTER || b->a.op == OP_PERMUTE ||
                 (b->a.op == OP_ALLREDUCE && b->a.out_of_place);
  b->slots = calloc((size_t)b->a.tensors, sizeof *b->slots);
  b->reqs = calloc((size_t)b->a.tensors, sizeof *b->reqs);
  b->names = calloc((size_t)b->a.tensors, sizeof *b->names);
  if (!b->slots || !b->reqs || !b->names) return -1;
  for (int k = 0; k < b->a.tensors; k++) {
    slot *s = &b->slots[k];
    s->out_cap = need_out ? max_out * b->esize : 0;
    if (b->dev) { /* device buffers; host copies for filling and checking */
      size_t most = (max_in > max_out ? max_in : max_out) * b->esize + 1;
      s->in = bdev_alloc(b->dev, max_in * b->esize + 1);
      s->out = need_out ? bdev_alloc(b->dev, s->out_cap + 1) : NULL;
      s->host_in = malloc(most);
      s->host_out = malloc(most);
      if (!s->in || (need_out && !s->out) || !s->host_in || !s->host_out) return -1;
      continue;
    }
    /* at least one byte so a NULL from malloc(0) is never mistaken for failure */
    s->in = malloc(max_in * b->esize + 1);
    s->out = need_out ? malloc(s->out_cap + 1) : NULL;
    if (!s->in || (need_out && !s->out)) return -1;
    /* touched now, so no page is first faulted inside the timed region */
    memset(s->in, 0, max_in * b->esize + 1);
    if (s->out) memset(s->out, 0, s->out_cap + 1);
  }
  return 0;
}

int main(int argc, char **argv) {
  bench b;
  int rc = 1, prc;
  memset(&b, 0, sizeof b);
  prc = parse_args(argc, argv, &b.a);
  if (prc) return prc > 0 ? 0 : 2;
  b.esize = weft_dtype_size(b.a.dtype);

  weft_status st = weft_init(NULL, &b.world);
  if (st != WEFT_OK) {
    fprintf(stderr, "weft-bench: weft_init: %s: %s\n", weft_status_string(st), weft_last_error());
    return 1;
  }
  b.group = weft_world_group(b.world);
  b.rank = weft_rank(b.world);
  b.size = weft_size(b.world);
  if (b.a.root >= b.size) {
    if (b.rank == 0) fprintf(stderr, "weft-bench: --root %d is not a rank (world size %d)\n", b.a.root, b.size);
    goto out;
  }
  if (b.a.op == OP_SENDRECV || b.a.op == OP_PINGPONG) { /* point-to-point: weft_bench_p2p.c */
    p2p_bench_args pa = {b.a.op == OP_PINGPONG, b.a.dtype, b.a.sizes, b.a.nsizes, b.a.iters, b.a.warmup,
                         b.a.check, b.a.csv, b.a.time_target};
    rc = weft_bench_p2p(b.world, &pa) != 0;
    goto out;
  }
  pattern_range(&b);
  if (b.a.device && bdev_open(b.a.device, weft_local_rank(b.world), &b.dev)) {
    weft_abort(b.world, "weft-bench: --device unavailable");
    goto out;
  }
  if (alloc_slots(&b)) {
    fail(&b, "out of memory allocating the buffers");
    goto out;
  }
  const char *transport = getenv("WEFT_TRANSPORT");
  if (b.rank == 0) {
    char where[64] = "host memory";
    if (b.dev) bdev_describe(b.dev, where, sizeof where);
    printf("# weft-bench: weft %s, world size %d, transport %s, tensors on %s%s\n", weft_version(), b.size,
           transport && *transport ? transport : "auto (shm between ranks of one host, tcp across hosts)", where,
           b.dev ? " (rank 0's)" : "");
    char iters[48];
    if (b.a.time_target > 0)
      snprintf(iters, sizeof iters, "~%gs worth", b.a.time_target);
    else
      snprintf(iters, sizeof iters, "%d", b.a.iters);
    printf("# op %s%s, dtype %s, reduce-op %s, root %d, tensors %d, iters %s, warmup %d, check %s\n",
           k_op_names[b.a.op], b.a.op == OP_ALLREDUCE ? (b.a.out_of_place ? " (out of place)" : " (in place)") : "",
           weft_dtype_name(b.a.dtype), weft_reduce_op_name(b.a.rop), b.a.root, b.a.tensors, iters, b.a.warmup,
           b.a.check ? "on" : "off");
    if (b.a.csv)
      printf("op,dtype,reduce_op,ranks,tensors,bytes,count,iters,time_us,algbw_gbps,busbw_gbps,wrong\n");
    else
      printf("#\n# %12s %13s %13s %13s %13s %7s\n", "size(B)", "count(elts)", "time(us)", "algbw(GB/s)",
             "busbw(GB/s)", b.a.check ? "#wrong" : "");
    fflush(stdout);
  }
  double bw_sum = 0;
  int nrun = 0, any_wrong = 0;
  for (int i = 0; i < b.a.nsizes; i++) {
    geom gm;
    if (!make_geom(&b, b.a.sizes[i], &gm)) {
      if (b.rank == 0) printf("# skipped %zu B: less than one %s element per rank\n", b.a.sizes[i],
                              weft_dtype_name(b.a.dtype));
      continue;
    }
    int r = run_size(&b, &gm, &bw_sum);
    if (r < 0) goto out;
    any_wrong |= r;
    nrun++;
  }
  if (b.rank == 0) {
    printf("# Avg bus bandwidth: %.4f\n", nrun ? bw_sum / nrun : 0.0);
    if (any_wrong) printf("# FAILED: wrong results (see stderr)\n");
  }
  rc = any_wrong;
out:
  st = weft_finalize(b.world);
  if (st != WEFT_OK && rc == 0) {
    fprintf(stderr, "weft-bench: rank %d: weft_finalize: %s: %s\n", b.rank, weft_status_string(st), weft_last_error());
    rc = 1;
  }
  if (b.slots)
    for (int k = 0; k < b.a.tensors; k++) {
      if (b.dev) {
        bdev_free(b.dev, b.slots[k].in);
        bdev_free(b.dev, b.slots[k].out);
      } else {
        free(b.slots[k].in);
        free(b.slots[k].out);
      }
      free(b.slots[k].host_in);
      free(b.slots[k].host_out);
    }
  bdev_close(b.dev);
  free(b.slots);
  free(b.reqs);
  free(b.names);
  return rc;
}
