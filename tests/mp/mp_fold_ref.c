/* mp_fold_ref.c - the rank-order fold reference of the one-host
 * reduction tests (mp_shm.c, mp_numa.c, mp_cma.c), included after mp_harness.c: rank
 * r's deterministic inputs (from the including file's g_seed) and the fold
 * r = 0, 1, ... of them in each type's own arithmetic, average as Horovod
 * scales it, checked bit for bit. */
#include <math.h>

/* Rank r's input element i: floats with full mantissas in [-FOLD_SPAN,
 * FOLD_SPAN) (2 unless the including file sets it; sums and products round),
 * integers over the whole range (they wrap), bools 0/1. */
#ifndef FOLD_SPAN
#define FOLD_SPAN 2.0
#endif
static void put_input(weft_dtype t, void *buf, size_t at, int r, size_t i) {
  uint64_t h = mp_hash((uint64_t)r, i, g_seed);
  if (mp_is_float(t)) mp_set_f(t, buf, at, (double)(h >> 11) / (double)(1ULL << 53) * (2 * FOLD_SPAN) - FOLD_SPAN);
  else mp_set_i(t, buf, at, t == WEFT_DTYPE_BOOL ? (int64_t)(h & 1) : mp_wrap(t, h));
}

/* acc = acc op x for one element, in t's arithmetic (average as sum). */
static void combine(weft_dtype t, weft_reduce_op op, unsigned char *acc, const unsigned char *x) {
  if (op == WEFT_OP_AVERAGE) op = WEFT_OP_SUM;
  if (mp_is_float(t)) {
    double a = mp_get_f(t, acc, 0), b = mp_get_f(t, x, 0), r;
    if (t == WEFT_DTYPE_FLOAT64) {
      r = op == WEFT_OP_MIN ? (b < a ? b : a) : op == WEFT_OP_MAX ? (b > a ? b : a) : op == WEFT_OP_PRODUCT ? a * b : a + b;
    } else { /* float arithmetic, rounded back to the type after every step */
      float fa = (float)a, fb = (float)b;
      r = op == WEFT_OP_MIN ? (fb < fa ? fb : fa) : op == WEFT_OP_MAX ? (fb > fa ? fb : fa)
          : op == WEFT_OP_PRODUCT ? (double)(fa * fb) : (double)(fa + fb);
    }
    mp_set_f(t, acc, 0, r);
    return;
  }
  int64_t a = mp_get_i(t, acc, 0), b = mp_get_i(t, x, 0), r;
  if (t == WEFT_DTYPE_BOOL) {
    r = (op == WEFT_OP_SUM || op == WEFT_OP_MAX) ? (a || b) : (a && b);
  } else {
    r = op == WEFT_OP_MIN ? (b < a ? b : a) : op == WEFT_OP_MAX ? (b > a ? b : a)
        : op == WEFT_OP_PRODUCT ? mp_wrap(t, (uint64_t)a * (uint64_t)b) : mp_wrap(t, (uint64_t)a + (uint64_t)b);
  }
  mp_set_i(t, acc, 0, r);
}

static void expect(weft_dtype t, weft_reduce_op op, size_t i, unsigned char *out) {
  unsigned char x[8];
  put_input(t, out, 0, 0, i);
  for (int r = 1; r < mp_size; r++) {
    put_input(t, x, 0, r, i);
    combine(t, op, out, x);
  }
}

/* v rounded to nearest even with `bits` significant bits (float16: 11,
 * bfloat16: 8), from the double at once (float16 subnormals in units of
 * 2^-24). */
static double round_bits(double v, int bits) {
  if (v == 0 || !isfinite(v)) return v;
  int e;
  double m = frexp(fabs(v), &e);
  if (bits == 11 && e < -13) return copysign(nearbyint(fabs(v) * 0x1p24) * 0x1p-24, v);
  return copysign(ldexp(nearbyint(ldexp(m, bits)), e - bits), v);
}

/* The average from the fold `sum` (both one element of t): integers divided
 * by the size exactly, truncating toward zero (the sum wrapped first);
 * floats times 1/size as Horovod scales: float64 in double, float32 and the
 * 16-bit floats one float32 product sum * (float)(1/size), rounded to t. */
static void average_of(weft_dtype t, const unsigned char *sum, unsigned char *avg) {
  if (!mp_is_float(t)) {
    mp_set_i(t, avg, 0, mp_wrap(t, (uint64_t)(mp_get_i(t, sum, 0) / mp_size)));
    return;
  }
  double v;
  if (t == WEFT_DTYPE_FLOAT64) {
    v = mp_get_f(t, sum, 0) * (1.0 / mp_size);
  } else {
    volatile float p = (float)mp_get_f(t, sum, 0) * (float)(1.0 / mp_size); /* no excess precision */
    v = p;
  }
  if (t == WEFT_DTYPE_FLOAT16) v = round_bits(v, 11);
  else if (t == WEFT_DTYPE_BFLOAT16) v = round_bits(v, 8);
  mp_set_f(t, avg, 0, v); /* float32 and float64: exact already */
}

/* got[k] is element first + k of the tensor: the fold (average: of the
 * fold), bit for bit. */
static int check_fold(weft_dtype t, weft_reduce_op op, const void *got, size_t first, size_t n, const char *what) {
  size_t es = mp_esize(t);
  unsigned char want[8];
  for (size_t k = 0; k < n; k++) {
    expect(t, op, first + k, want);
    if (op == WEFT_OP_AVERAGE) {
      unsigned char sum[8];
      memcpy(sum, want, es);
      average_of(t, sum, want);
    }
    const unsigned char *g = (const unsigned char *)got + k * es;
    if (memcmp(g, want, es)) {
      uint64_t gv = 0, wv = 0;
      memcpy(&gv, g, es);
      memcpy(&wv, want, es);
      return mp_fail("%s: element %zu is 0x%llx, the rank-order fold%s gives 0x%llx", what, first + k,
                     (unsigned long long)gv, op == WEFT_OP_AVERAGE ? " / size" : "", (unsigned long long)wv);
    }
  }
  return 1;
}

/* After an allreduce case's fold check: the including test's own checks of
 * the request and its result (buf, bytes per rank). */
typedef void (*fold_after_fn)(weft_request *req, const unsigned char *buf, size_t bytes, const char *name);

/* One case: an in-place allreduce of n elements of t, every rank's
 * put_input, checked against the fold, then after(). */
MP_FN void fold_allreduce_case(weft_dtype t, weft_reduce_op op, size_t n, fold_after_fn after) {
  char name[96];
  snprintf(name, sizeof name, "ar.%s.%s.%zu", weft_dtype_name(t), weft_reduce_op_name(op), n);
  mp_case("%s", name);
  size_t es = mp_esize(t);
  unsigned char *buf = mp_alloc(n * es);
  for (size_t i = 0; i < n; i++) put_input(t, buf, i, mp_rank, i);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor tt = {t, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &tt, &tt, op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    check_fold(t, op, buf, 0, n, name);
    after(req, buf, n * es, name);
  }
  weft_request_free(req);
  free(buf);
  mp_case_end();
}
