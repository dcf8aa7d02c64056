/* mp_fast_ref.c - the reference results of mp_fast.c (included by it, like
 * mp_harness.c): every rank's allreduce input as a function of (group rank,
 * index, seed), and the exact result the library must produce, computed
 * here element by element as reduce.h specifies it: prescale (Horovod's
 * rule: float32, float16 and bfloat16 times the factor rounded to float32,
 * in float32, then rounded to nearest even; float64 in double; integers a
 * double product truncated and saturated), a left fold
 * in group-rank order ((x0 op x1) op x2 ..., 16-bit floats in float32,
 * rounded back at each step, integers wrapping), then the average (integers:
 * a truncating division in the type) and postscale. Plus the submit / wait /
 * check helpers of allreduce, broadcast and barrier that the cases share. */
#ifndef MP_FAST_REF_C
#define MP_FAST_REF_C

#include "mp_harness.c"

static uint64_t fnv_add(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
  return h;
}

/* ------------------------------------------------------------ reference */
typedef struct arspec {
  weft_dtype t;
  weft_reduce_op op;
  double pre, post;
  uint64_t seed;
} arspec;

/* A double rounded to nearest even with `bits` significant bits (16-bit
 * floats: 11 or 8), exactly representable afterwards in float. */
static double round_bits(double v, int bits) {
  if (v == 0 || !isfinite(v)) return v;
  int e;
  double m = frexp(fabs(v), &e);
  if (bits == 11 && e < -13) return copysign(nearbyint(fabs(v) * 0x1p24) * 0x1p-24, v); /* f16 subnormal */
  return copysign(ldexp(nearbyint(ldexp(m, bits)), e - bits), v);
}

/* Stores v into element i, rounded as the library's scaling does (nearest
 * even; integers truncate and saturate). */
static void store_round(weft_dtype t, void *buf, size_t i, double v) {
  switch (t) {
    case WEFT_DTYPE_FLOAT64:
    case WEFT_DTYPE_FLOAT32: mp_set_f(t, buf, i, v); return;
    case WEFT_DTYPE_FLOAT16: {
      double r = round_bits(v, 11);
      mp_set_f(t, buf, i, fabs(r) >= 65520.0 ? copysign(INFINITY, r) : r);
      return;
    }
    case WEFT_DTYPE_BFLOAT16: mp_set_f(t, buf, i, round_bits(v, 8)); return;
    default: break;
  }
  if (v != v) v = 0;
  int64_t x;
  switch (t) {
    case WEFT_DTYPE_UINT8: x = (int64_t)fmin(fmax(v, 0), 255); break;
    case WEFT_DTYPE_INT8: x = (int64_t)fmin(fmax(v, -128), 127); break;
    case WEFT_DTYPE_UINT16: x = (int64_t)fmin(fmax(v, 0), 65535); break;
    case WEFT_DTYPE_INT16: x = (int64_t)fmin(fmax(v, -32768), 32767); break;
    case WEFT_DTYPE_INT32: x = (int64_t)fmin(fmax(v, -2147483648.0), 2147483647.0); break;
    default: x = v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v; break;
  }
  mp_set_i(t, buf, i, x);
}

/* x * f as Horovod's CPU ScaleBuffer: float64 in double; float32 and the
 * 16-bit floats as one float32 product (float)x * (float)f (volatile: no
 * excess precision), rounded to the element type; integers in double. */
static void scale_elem(weft_dtype t, void *buf, size_t i, double f) {
  if (t == WEFT_DTYPE_BOOL) mp_set_i(t, buf, i, mp_get_i(t, buf, i) != 0 && f != 0);
  else if (t == WEFT_DTYPE_FLOAT64) store_round(t, buf, i, mp_get_f(t, buf, i) * f);
  else if (mp_is_float(t)) {
    volatile float p = (float)mp_get_f(t, buf, i) * (float)f;
    store_round(t, buf, i, (double)p);
  }
  else store_round(t, buf, i, (double)mp_get_i(t, buf, i) * f);
}

/* Group rank q's input element i (before prescale), stored at buf[j]. */
static void put_input(const arspec *s, int q, size_t i, void *buf, size_t j) {
  uint64_t h = mp_hash((uint64_t)q, i, s->seed);
  int prod = s->op == WEFT_OP_PRODUCT, and = prod || s->op == WEFT_OP_MIN;
  double sign = (h >> 63) ? -1.0 : 1.0;
  switch (s->t) {
    case WEFT_DTYPE_BOOL: mp_set_i(s->t, buf, j, and ? h % 8 != 0 : h % 8 == 0); break;
    case WEFT_DTYPE_FLOAT16:
      mp_set_f(s->t, buf, j, prod ? sign * (double)(1024 + h % 1024) / 1024 : ((double)(h % 4097) - 2048) / 256);
      break;
    case WEFT_DTYPE_BFLOAT16:
      mp_set_f(s->t, buf, j, prod ? sign * (double)(128 + h % 128) / 128 : ((double)(h % 257) - 128) / 16);
      break;
    case WEFT_DTYPE_FLOAT32:
      mp_set_f(s->t, buf, j, prod ? sign * ldexp((double)((1u << 23) + h % (1u << 23)), -23)
                                  : ldexp((double)(h % (1u << 24)) - (double)(1u << 23), -20));
      break;
    case WEFT_DTYPE_FLOAT64:
      mp_set_f(s->t, buf, j, prod ? sign * ldexp((double)((1ull << 52) + h % (1ull << 52)), -52)
                                  : ldexp((double)(h >> 11) - 0x1p52, -49));
      break;
    default: mp_set_i(s->t, buf, j, (int64_t)h); break; /* full range: sums and products wrap */
  }
}

/* a = a op b, one element each, as reduce.h says. */
static void combine(weft_dtype t, weft_reduce_op op, void *a, const void *b) {
  if (t == WEFT_DTYPE_BOOL) {
    int x = mp_get_i(t, a, 0) != 0, y = mp_get_i(t, b, 0) != 0;
    mp_set_i(t, a, 0, (op == WEFT_OP_MIN || op == WEFT_OP_PRODUCT) ? (x && y) : (x || y));
  } else if (t == WEFT_DTYPE_FLOAT64) {
    double x = mp_get_f(t, a, 0), y = mp_get_f(t, b, 0);
    double r = op == WEFT_OP_PRODUCT ? x * y
               : op == WEFT_OP_MIN   ? (y < x ? y : x)
               : op == WEFT_OP_MAX   ? (y > x ? y : x)
                                     : x + y;
    mp_set_f(t, a, 0, r);
  } else if (mp_is_float(t)) { /* float32; 16-bit floats in float32, rounded back */
    float x = (float)mp_get_f(t, a, 0), y = (float)mp_get_f(t, b, 0);
    float r = op == WEFT_OP_PRODUCT ? x * y
              : op == WEFT_OP_MIN   ? (y < x ? y : x)
              : op == WEFT_OP_MAX   ? (y > x ? y : x)
                                    : x + y;
    mp_set_f(t, a, 0, r);
  } else {
    int64_t x = mp_get_i(t, a, 0), y = mp_get_i(t, b, 0);
    uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
    int64_t r = op == WEFT_OP_PRODUCT ? mp_wrap(t, ux * uy)
                : op == WEFT_OP_MIN   ? (y < x ? y : x)
                : op == WEFT_OP_MAX   ? (y > x ? y : x)
                                      : mp_wrap(t, ux + uy);
    mp_set_i(t, a, 0, r);
  }
}

/* Element i of the result of s over n group ranks, into out[0]. */
static void reference(const arspec *s, int n, size_t i, void *out) {
  unsigned char x[8];
  for (int q = 0; q < n; q++) {
    void *dst = q ? (void *)x : out;
    put_input(s, q, i, dst, 0);
    if (s->pre != 1.0) scale_elem(s->t, dst, 0, s->pre);
    if (q) combine(s->t, s->op, out, x);
  }
  double f = s->post;
  if (s->op == WEFT_OP_AVERAGE && !mp_is_float(s->t)) {
    int64_t v = mp_get_i(s->t, out, 0); /* exact truncating division in the type */
    mp_set_i(s->t, out, 0, mp_is_unsigned(s->t) ? (int64_t)((uint64_t)v / (uint64_t)n) : v / n);
  } else if (s->op == WEFT_OP_AVERAGE) {
    f = s->post / n;
  }
  if (f != 1.0) scale_elem(s->t, out, 0, f);
}

/* ------------------------------------------------------------ allreduce ops */
typedef struct arop {
  arspec s;
  size_t count;
  int64_t shape[1];
  unsigned char *in, *out;
  weft_request *req;
  char name[64];
} arop;

/* Fills this rank's input (group rank me) and submits; in place if out is 0. */
static void ar_submit(arop *a, weft_group *g, int me, int separate_out, const char *fmt, ...) MP_PRINTF(5, 6);
static void ar_submit(arop *a, weft_group *g, int me, int separate_out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->name, sizeof a->name, fmt, ap);
  va_end(ap);
  size_t es = mp_esize(a->s.t);
  a->in = mp_alloc(a->count * es);
  a->out = separate_out ? mp_alloc(a->count * es) : a->in;
  for (size_t i = 0; i < a->count; i++) put_input(&a->s, me, i, a->in, i);
  if (separate_out) memset(a->out, 0xa5, a->count * es);
  a->shape[0] = (int64_t)a->count;
  weft_tensor in = {a->s.t, 1, a->shape, a->in, WEFT_DEVICE_CPU, 0, NULL}, out = in;
  out.data = a->out;
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  o.prescale = a->s.pre;
  o.postscale = a->s.post;
  a->req = NULL;
  mp_submitted(weft_allreduce(g, a->name, &in, &out, a->s.op, &o, &a->req), &a->req, a->name);
}

/* Waits, checks every element against the reference; frees. Returns 1 if right. */
static int ar_finish(arop *a, int n, uint64_t *digest) {
  int ok = mp_wait_ok(a->req, a->name);
  weft_request_free(a->req);
  size_t es = mp_esize(a->s.t);
  unsigned char want[8];
  for (size_t i = 0; ok && i < a->count; i++) {
    reference(&a->s, n, i, want);
    if (memcmp(want, a->out + i * es, es)) {
      uint64_t gw = 0, ww = 0;
      memcpy(&gw, a->out + i * es, es);
      memcpy(&ww, want, es);
      ok = mp_fail("'%s' %s %s count %zu pre %g post %g: element %zu is 0x%llx, expected 0x%llx", a->name,
                   weft_dtype_name(a->s.t), weft_reduce_op_name(a->s.op), a->count, a->s.pre, a->s.post, i,
                   (unsigned long long)gw, (unsigned long long)ww);
    }
  }
  if (digest) *digest = fnv_add(*digest, a->out, a->count * es);
  if (a->out != a->in) free(a->out);
  free(a->in);
  return ok;
}

/* One allreduce of count elements in g, waited for and checked. */
static int ar_one(weft_group *g, int me, int n, weft_dtype t, weft_reduce_op op, size_t count, uint64_t seed,
                  const char *name) {
  arop a = {{t, op, 1.0, 1.0, seed}, count, {0}, NULL, NULL, NULL, ""};
  ar_submit(&a, g, me, 0, "%s", name);
  return ar_finish(&a, n, NULL);
}

static void barrier_wait(weft_group *g, const char *name) {
  weft_request *r = NULL;
  mp_submitted(weft_barrier(g, name, NULL, &r), &r, name ? name : "barrier");
  mp_wait_ok(r, name ? name : "unnamed barrier");
  weft_request_free(r);
}

/* A broadcast of count elements from root (payload from mp_fill); async. */
static weft_request *bc_submit(weft_group *g, const char *name, weft_dtype t, void *buf, int64_t *shape, size_t count,
                               int root, int me, uint64_t seed) {
  shape[0] = (int64_t)count;
  if (me == root) mp_fill(t, buf, 0, count, root, 0, seed);
  else memset(buf, t == WEFT_DTYPE_BOOL ? 0 : 0x5a, count * mp_esize(t));
  weft_tensor x = {t, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  mp_submitted(weft_broadcast(g, name, &x, root, NULL, &r), &r, name);
  return r;
}

#endif /* MP_FAST_REF_C */
