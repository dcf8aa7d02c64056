/* test_reduce.c - unit test of src/reduce: wf_reduce / wf_reduce3 for every
 * dtype x op (aliased buffers too), wf_scale / wf_scale_copy, and the
 * float16 / bfloat16 conversions, against a scalar reference written here
 * from the IEEE definitions (ldexp/frexp/rint, not the library's bit
 * tricks). The float16 suites run twice, with F16C allowed and forbidden,
 * so the hardware and software paths must both match the reference.
 * Buffers sit at odd byte offsets between guard bytes.
 *
 * `test_reduce --exhaustive` also checks all 2^32 float32 -> float16 and
 * bfloat16 conversions (a few minutes; not run by ctest). */
#include <fenv.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"
#include "reduce/reduce_impl.h"

/* ------------------------------------------------------------ harness */
/* The largest count. ThreadSanitizer makes every memory access in the
 * reference loops several times dearer and is here for the thread suite,
 * so under it the largest count shrinks to keep the run under a minute. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(TEST_TSAN)
#define BIG_COUNT 20011
#else
#define BIG_COUNT 1000003
#endif

static int g_failures;
static const char *g_ctx = ""; /* which suite is running, for messages */

static void fail_at(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_at(int line, const char *fmt, ...) {
  if (++g_failures > 40) return; /* the first ones say enough */
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL test_reduce.c:%d [%s] ", line, g_ctx);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
#define EXPECT(cond, ...)                        \
  do {                                           \
    if (!(cond)) fail_at(__LINE__, __VA_ARGS__); \
  } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1Dull;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "FAIL: out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

static const struct {
  const char *name;
  size_t size;
} DT[WEFT_DTYPE_COUNT_] = {
    [WEFT_DTYPE_UINT8] = {"uint8", 1},     [WEFT_DTYPE_INT8] = {"int8", 1},
    [WEFT_DTYPE_UINT16] = {"uint16", 2},   [WEFT_DTYPE_INT16] = {"int16", 2},
    [WEFT_DTYPE_INT32] = {"int32", 4},     [WEFT_DTYPE_INT64] = {"int64", 8},
    [WEFT_DTYPE_FLOAT16] = {"float16", 2}, [WEFT_DTYPE_BFLOAT16] = {"bfloat16", 2},
    [WEFT_DTYPE_FLOAT32] = {"float32", 4}, [WEFT_DTYPE_FLOAT64] = {"float64", 8},
    [WEFT_DTYPE_BOOL] = {"bool", 1},
};
static const char *const OPN[WEFT_OP_COUNT_] = {"sum", "average", "min", "max", "product"};

/* --------------------------------------------- reference conversions */
static double ref_h2d(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* double -> float16, round to nearest even (rint in the default mode). */
static uint16_t ref_d2h(double d) {
  uint16_t s = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isnan(d)) return (uint16_t)(s | 0x7e00);
  if (a >= 65520.0) return (uint16_t)(s | 0x7c00);                    /* 65504 + half an ulp */
  if (a < 0x1p-14) return (uint16_t)(s | (uint16_t)rint(a * 0x1p24)); /* may reach 0x400: right */
  int e;
  double q = rint(ldexp(frexp(a, &e), 11)); /* 1024 .. 2048 */
  if (q == 2048) q = 1024, e++;
  return (uint16_t)(s | (uint16_t)((e + 14) << 10) | (uint16_t)(q - 1024));
}

static double ref_bf2d(uint16_t h) {
  int e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
  return (h & 0x8000) ? -v : v;
}

static uint16_t ref_d2bf(double d) {
  uint16_t s = signbit(d) ? 0x8000 : 0;
  double a = fabs(d);
  if (isnan(d)) return (uint16_t)(s | 0x7fc0);
  if (a >= 0x1.ffp127) return (uint16_t)(s | 0x7f80);
  if (a < 0x1p-126) return (uint16_t)(s | (uint16_t)rint(a * 0x1p133));
  int e;
  double q = rint(ldexp(frexp(a, &e), 8)); /* 128 .. 256 */
  if (q == 256) q = 128, e++;
  return (uint16_t)(s | (uint16_t)((e + 126) << 7) | (uint16_t)(q - 128));
}

static int h_isnan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int bf_isnan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ------------------------------------------------- element reference */
static int is_float(weft_dtype t) {
  return t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16 || t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64;
}

/* Elements are read and written through a uint64_t's low bytes: the test
 * assumes a little-endian machine, as weft does. */
static int64_t load_i(weft_dtype t, const unsigned char *p) {
  uint64_t u = 0, top = 1ull << (8 * DT[t].size - 1);
  memcpy(&u, p, DT[t].size);
  if (t == WEFT_DTYPE_UINT8 || t == WEFT_DTYPE_UINT16 || DT[t].size == 8) return (int64_t)u;
  return (int64_t)(u ^ top) - (int64_t)top; /* sign-extend */
}

/* Stores v modulo 2^width. */
static void store_u(weft_dtype t, unsigned char *p, uint64_t v) { memcpy(p, &v, DT[t].size); }

/* Float types as double (exact), and back with the type's rounding. */
static double load_f(weft_dtype t, const unsigned char *p) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case WEFT_DTYPE_FLOAT16: memcpy(&h, p, 2); return ref_h2d(h);
    case WEFT_DTYPE_BFLOAT16: memcpy(&h, p, 2); return ref_bf2d(h);
    case WEFT_DTYPE_FLOAT32: memcpy(&f, p, 4); return f;
    default: memcpy(&d, p, 8); return d;
  }
}
static void store_f(weft_dtype t, unsigned char *p, double v) {
  uint16_t h;
  float f = (float)v;
  if (t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16) {
    h = t == WEFT_DTYPE_FLOAT16 ? ref_d2h(v) : ref_d2bf(v);
    memcpy(p, &h, 2);
  } else {
    memcpy(p, t == WEFT_DTYPE_FLOAT32 ? (void *)&f : (void *)&v, DT[t].size);
  }
}

/* IEEE 754-2019 minimum / maximum: NaN wins, -0 < +0. */
static double ref_min(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) || signbit(y)) ? -0.0 : 0.0;
  return fmin(x, y);
}
static double ref_max(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) && signbit(y)) ? -0.0 : 0.0;
  return fmax(x, y);
}

static void ref_elem(weft_dtype t, weft_reduce_op op, const unsigned char *pa, const unsigned char *pb,
                     unsigned char *out) {
  if (t == WEFT_DTYPE_BOOL) {
    int x = *pa != 0, y = *pb != 0;
    *out = (unsigned char)((op == WEFT_OP_MIN || op == WEFT_OP_PRODUCT) ? (x && y) : (x || y));
  } else if (is_float(t)) {
    double x = load_f(t, pa), y = load_f(t, pb), r;
    int narrow = t != WEFT_DTYPE_FLOAT64; /* f16/bf16/f32: arithmetic in float32 */
    if (op == WEFT_OP_SUM || op == WEFT_OP_AVERAGE)
      r = narrow ? (double)((float)x + (float)y) : x + y;
    else if (op == WEFT_OP_PRODUCT)
      r = narrow ? (double)((float)x * (float)y) : x * y;
    else
      r = op == WEFT_OP_MIN ? ref_min(x, y) : ref_max(x, y);
    store_f(t, out, r);
  } else { /* integers: 64-bit arithmetic, kept modulo 2^width */
    int64_t x = load_i(t, pa), y = load_i(t, pb);
    uint64_t r;
    if (op == WEFT_OP_SUM || op == WEFT_OP_AVERAGE)
      r = (uint64_t)x + (uint64_t)y;
    else if (op == WEFT_OP_PRODUCT)
      r = (uint64_t)x * (uint64_t)y;
    else
      r = (uint64_t)((op == WEFT_OP_MIN) == (x < y) ? x : y);
    store_u(t, out, r);
  }
}

static int elem_isnan(weft_dtype t, const unsigned char *p) {
  uint16_t h;
  switch (t) {
    case WEFT_DTYPE_FLOAT16: memcpy(&h, p, 2); return h_isnan(h);
    case WEFT_DTYPE_BFLOAT16: memcpy(&h, p, 2); return bf_isnan(h);
    case WEFT_DTYPE_FLOAT32:
    case WEFT_DTYPE_FLOAT64: return isnan(load_f(t, p));
    default: return 0;
  }
}

/* Same bits, or both NaN (the payload of a NaN result is not specified). */
static int elem_same(weft_dtype t, const unsigned char *got, const unsigned char *want) {
  if (memcmp(got, want, DT[t].size) == 0) return 1;
  return elem_isnan(t, want) && elem_isnan(t, got);
}

static unsigned long long elem_hex(weft_dtype t, const unsigned char *p) {
  uint64_t v = 0;
  memcpy(&v, p, DT[t].size); /* little-endian test machine: low bytes */
  return (unsigned long long)v;
}

/* -------------------------------------------------------- test data */
static void fill(weft_dtype t, unsigned char *p, size_t n) {
  size_t sz = DT[t].size;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd(), sel = rnd() % 16;
    unsigned char *q = p + i * sz;
    if (t == WEFT_DTYPE_BOOL) {
      static const unsigned char bv[6] = {0, 1, 2, 255, 0, 1};
      *q = bv[r % 6];
    } else if (t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16) {
      uint16_t h = (uint16_t)r;
      if (sel < 12) { /* mostly nearby exponents, so sums round */
        if (t == WEFT_DTYPE_FLOAT16)
          h = (uint16_t)((h & 0x83ff) | ((10 + (r >> 20) % 10) << 10));
        else
          h = (uint16_t)((h & 0x807f) | ((120 + (r >> 20) % 14) << 7));
      }
      memcpy(q, &h, 2);
    } else if (t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64) {
      static const double sp[] = {0.0,   -0.0,  INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0, 3.4028234663852886e38,
                                  1e-45, 1e300, 4.9e-324};
      if (sel < 13) { /* random sign and significand, exponent within +-20 */
        uint32_t e = (uint32_t)(r >> 40) % 41u;
        if (t == WEFT_DTYPE_FLOAT32)
          r = (r & 0x807fffffu) | (uint64_t)(107u + e) << 23;
        else
          r = (r & 0x800fffffffffffffull) | (uint64_t)(1003u + e) << 52;
      }
      if (sel >= 13 && sel < 15)
        store_f(t, q, sp[r % (sizeof sp / sizeof sp[0])]);
      else /* the bits built above, or any bit pattern */
        store_u(t, q, r);
    } else {
      static const int64_t sp[] = {0, 1, -1, INT64_MIN, INT64_MAX, 127, -128, 255, 32767, -32768, INT32_MAX, INT32_MIN};
      store_u(t, q, sel < 13 ? r : (uint64_t)sp[r % (sizeof sp / sizeof sp[0])]);
    }
  }
}

/* --------------------------------------------------- reduce checking */
#define GUARD 32
/* A buffer of n elements at byte offset off between guard bytes. */
typedef struct {
  unsigned char *raw, *p;
  size_t bytes;
} buf_t;

static buf_t buf_new(size_t bytes, size_t off) {
  buf_t b = {xmalloc(bytes + off + 2 * GUARD), NULL, bytes};
  memset(b.raw, 0xA5, bytes + off + 2 * GUARD);
  b.p = b.raw + GUARD + off;
  return b;
}
static int buf_guards_ok(const buf_t *b, size_t off) {
  for (size_t i = 0; i < GUARD + off; i++)
    if (b->raw[i] != 0xA5) return 0;
  for (size_t i = 0; i < GUARD; i++)
    if (b->p[b->bytes + i] != 0xA5) return 0;
  return 1;
}

static void expect_elems(weft_dtype t, const char *opname, const char *form, size_t n, const unsigned char *got,
                         const unsigned char *want, const unsigned char *a, const unsigned char *b, int line) {
  size_t sz = DT[t].size, bad = 0;
  if (memcmp(got, want, n * sz) == 0) return; /* the usual case, fast */
  for (size_t i = 0; i < n; i++) {
    if (elem_same(t, got + i * sz, want + i * sz)) continue;
    if (bad++ < 3)
      fail_at(line, "%s %s %s n=%zu i=%zu: a=0x%llx b=0x%llx got 0x%llx want 0x%llx", DT[t].name, opname, form, n, i,
              elem_hex(t, a + i * sz), elem_hex(t, b + i * sz), elem_hex(t, got + i * sz), elem_hex(t, want + i * sz));
  }
}

/* all_forms: 0 = only reduce3(d,a,b) and reduce(d,b) (large counts), 1 = every
 * aliasing form too. */
static void check_reduce(weft_dtype t, weft_reduce_op op, size_t n, size_t off, int all_forms) {
  size_t sz = DT[t].size, bytes = n * sz;
  buf_t a = buf_new(bytes, off), b = buf_new(bytes, off), d = buf_new(bytes, off);
  unsigned char *a0 = xmalloc(bytes), *b0 = xmalloc(bytes), *want = xmalloc(bytes), *want_aa = xmalloc(bytes);
  fill(t, a.p, n);
  fill(t, b.p, n);
  memcpy(a0, a.p, bytes);
  memcpy(b0, b.p, bytes);
  for (size_t i = 0; i < n; i++) {
    ref_elem(t, op, a0 + i * sz, b0 + i * sz, want + i * sz);
    ref_elem(t, op, a0 + i * sz, a0 + i * sz, want_aa + i * sz);
  }

  wf_reduce3(t, op, d.p, a.p, b.p, n);
  expect_elems(t, OPN[op], "reduce3(d,a,b)", n, d.p, want, a0, b0, __LINE__);
  EXPECT(!memcmp(a.p, a0, bytes) && !memcmp(b.p, b0, bytes), "%s %s reduce3 wrote its inputs", DT[t].name, OPN[op]);

  memcpy(d.p, a0, bytes);
  wf_reduce(t, op, d.p, b.p, n);
  expect_elems(t, OPN[op], "reduce(d=a,b)", n, d.p, want, a0, b0, __LINE__);

  if (all_forms) {
    memcpy(d.p, b0, bytes);
    wf_reduce3(t, op, d.p, a.p, d.p, n);
    expect_elems(t, OPN[op], "reduce3(d,a,d)", n, d.p, want, a0, b0, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce3(t, op, d.p, d.p, b.p, n);
    expect_elems(t, OPN[op], "reduce3(d,d,b)", n, d.p, want, a0, b0, __LINE__);

    memset(d.p, 0x5A, bytes);
    wf_reduce3(t, op, d.p, a.p, a.p, n);
    expect_elems(t, OPN[op], "reduce3(d,a,a)", n, d.p, want_aa, a0, a0, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce3(t, op, d.p, d.p, d.p, n);
    expect_elems(t, OPN[op], "reduce3(d,d,d)", n, d.p, want_aa, a0, a0, __LINE__);

    memcpy(d.p, a0, bytes);
    wf_reduce(t, op, d.p, d.p, n);
    expect_elems(t, OPN[op], "reduce(d,d)", n, d.p, want_aa, a0, a0, __LINE__);
  }
  EXPECT(buf_guards_ok(&a, off) && buf_guards_ok(&b, off) && buf_guards_ok(&d, off),
         "%s %s n=%zu off=%zu: wrote outside the buffer", DT[t].name, OPN[op], n, off);
  free(a.raw), free(b.raw), free(d.raw), free(a0), free(b0), free(want), free(want_aa);
}

/* only_half: just float16, without the largest count (the rerun through
 * the software path). The largest count runs one op per dtype, in turn, so
 * every op meets it (the loop structure is shared by all ops of a dtype);
 * a Debug+ASan build would otherwise take minutes. */
static void suite_reduce_random(int only_half) {
  static const size_t counts[] = {1, 7, 8, 63, 64, 65, 1000, 10007};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    if (only_half && t != WEFT_DTYPE_FLOAT16) continue;
    for (int op = 0; op < WEFT_OP_COUNT_; op++) {
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) /* aligned and odd addresses */
        for (size_t off = counts[c] > 1000 ? 3 : 0; off < 4; off += 3)
          check_reduce((weft_dtype)t, (weft_reduce_op)op, counts[c], off, 1);
      if (!only_half && op == t % WEFT_OP_COUNT_) check_reduce((weft_dtype)t, (weft_reduce_op)op, BIG_COUNT, 1, 0);
    }
  }
}

static void suite_count_zero(void) {
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++)
    for (int op = 0; op < WEFT_OP_COUNT_; op++) {
      unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 9, 9, 9, 9, 9, 9, 9};
      wf_reduce((weft_dtype)t, (weft_reduce_op)op, NULL, NULL, 0);
      wf_reduce3((weft_dtype)t, (weft_reduce_op)op, NULL, NULL, NULL, 0);
      wf_reduce((weft_dtype)t, (weft_reduce_op)op, x, y, 0);
      wf_reduce3((weft_dtype)t, (weft_reduce_op)op, x, y, y, 0);
      wf_scale((weft_dtype)t, NULL, 0, 0.5);
      wf_scale_copy((weft_dtype)t, x, y, 0, 0.5);
      EXPECT(x[0] == 1 && x[7] == 8, "%s %s count 0 wrote", DT[t].name, OPN[op]);
    }
  /* an invalid dtype or op (a bug in the caller) warns and writes nothing */
  unsigned char x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  wf_reduce(WEFT_DTYPE_COUNT_, WEFT_OP_SUM, x, y, 8);
  wf_reduce3(WEFT_DTYPE_INT8, WEFT_OP_COUNT_, x, y, y, 8);
  wf_scale(WEFT_DTYPE_COUNT_, x, 8, 0.5);
  EXPECT(x[0] == 1 && x[7] == 8, "invalid dtype/op wrote");
}

/* ------------------------------------------------- known-value checks */
/* One element through wf_reduce3; the inputs are given as raw bit patterns. */
static uint64_t red1(weft_dtype t, weft_reduce_op op, uint64_t a, uint64_t b) {
  unsigned char pa[8], pb[8], pd[8];
  store_u(t, pa, a);
  store_u(t, pb, b);
  wf_reduce3(t, op, pd, pa, pb, 1);
  return elem_hex(t, pd);
}
#define KNOWN(t, op, a, b, want)                                                                     \
  do {                                                                                               \
    uint64_t got_ = red1(t, op, (uint64_t)(a), (uint64_t)(b));                                       \
    EXPECT(got_ == (uint64_t)(want), "%s %s(%s, %s) = 0x%llx, want %s", DT[t].name, OPN[op], #a, #b, \
           (unsigned long long)got_, #want);                                                         \
  } while (0)

static uint64_t f32b(float f) { return fbits(f); }
static uint64_t f64b(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

static void suite_known(void) {
  /* integer wrap */
  KNOWN(WEFT_DTYPE_INT32, WEFT_OP_SUM, INT32_MAX, 1, 0x80000000u);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_SUM, 100, 100, 0xC8); /* -56 */
  KNOWN(WEFT_DTYPE_UINT8, WEFT_OP_AVERAGE, 200, 100, 44);
  KNOWN(WEFT_DTYPE_INT16, WEFT_OP_PRODUCT, 300, 300, 24464);
  KNOWN(WEFT_DTYPE_UINT16, WEFT_OP_PRODUCT, 65535, 65535, 1);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_PRODUCT, 16, 16, 0);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_SUM, INT64_MIN, -1, INT64_MAX);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_PRODUCT, INT64_MIN, -1, INT64_MIN);
  KNOWN(WEFT_DTYPE_INT32, WEFT_OP_PRODUCT, 65536, 65536, 0);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_MIN, -128, 127, 0x80);
  KNOWN(WEFT_DTYPE_INT8, WEFT_OP_MAX, -1, 1, 1);
  KNOWN(WEFT_DTYPE_UINT8, WEFT_OP_MAX, 0, 255, 255);
  KNOWN(WEFT_DTYPE_INT16, WEFT_OP_MIN, -32768, 32767, 0x8000);
  KNOWN(WEFT_DTYPE_UINT16, WEFT_OP_MIN, 65535, 1, 1);
  KNOWN(WEFT_DTYPE_INT64, WEFT_OP_MAX, INT64_MIN, -5, -5);
  /* bool */
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_SUM, 2, 0, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_SUM, 0, 0, 0);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MAX, 0, 128, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_PRODUCT, 255, 3, 1);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MIN, 0, 5, 0);
  KNOWN(WEFT_DTYPE_BOOL, WEFT_OP_MIN, 7, 7, 1);
  /* float32 / float64: NaN, inf, signed zeros */
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, f32b(INFINITY), f32b(1.0f), f32b(INFINITY));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, f32b(3.4028234663852886e38f), f32b(3.4028234663852886e38f), f32b(INFINITY));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, f32b(-0.0f), f32b(0.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, f32b(0.0f), f32b(-0.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, f32b(-0.0f), f32b(0.0f), 0);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, f32b(0.0f), f32b(-0.0f), 0);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MIN, f64b(-0.0), f64b(0.0), 0x8000000000000000ull);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MAX, f64b(0.0), f64b(-0.0), 0);
  KNOWN(WEFT_DTYPE_FLOAT64, WEFT_OP_MAX, f64b(-INFINITY), f64b(-1e300), f64b(-1e300));
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, f32b(0.0f), f32b(-2.0f), 0x80000000u);
  KNOWN(WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, 0x00000001u, f32b(0.5f), 0); /* ties to even */
  /* NaN in either position of every float op gives NaN */
  static const struct {
    weft_dtype t;
    uint64_t qnan, snan, one, inf;
  } fv[4] = {{WEFT_DTYPE_FLOAT16, 0x7e00, 0xfc01, 0x3c00, 0x7c00},
             {WEFT_DTYPE_BFLOAT16, 0x7fc0, 0xff81, 0x3f80, 0x7f80},
             {WEFT_DTYPE_FLOAT32, 0x7fc00000, 0xff800001, 0x3f800000, 0x7f800000},
             {WEFT_DTYPE_FLOAT64, 0x7ff8000000000000, 0xfff0000000000001, 0x3ff0000000000000, 0x7ff0000000000000}};
  for (int k = 0; k < 4; k++) {
    weft_dtype t = fv[k].t;
    uint64_t other[3] = {fv[k].one, fv[k].inf, 0};
    for (int op = 0; op < WEFT_OP_COUNT_; op++)
      for (int j = 0; j < 3; j++) {
        unsigned char r1[8], r2[8], r3[8];
        store_u(t, r1, red1(t, (weft_reduce_op)op, fv[k].qnan, other[j]));
        store_u(t, r2, red1(t, (weft_reduce_op)op, other[j], fv[k].qnan));
        store_u(t, r3, red1(t, (weft_reduce_op)op, fv[k].snan, other[j]));
        EXPECT(elem_isnan(t, r1) && elem_isnan(t, r2) && elem_isnan(t, r3),
               "%s %s with NaN operand (other 0x%llx) not NaN", DT[t].name, OPN[op], (unsigned long long)other[j]);
      }
  }
  /* float16: computed in float32, rounded back to nearest even */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x7bff, 0x7bff, 0x7c00);     /* 65504 + 65504 = inf */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x3c00, 0x1000, 0x3c00);     /* 1 + 2^-11: tie, to even */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x3c01, 0x1000, 0x3c02);     /* tie, to even (up) */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 0x0001, 0x0001, 0x0002);     /* subnormals */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_PRODUCT, 0x0001, 0x3800, 0x0000); /* 2^-25: tie to 0 */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_PRODUCT, 0x0003, 0x3800, 0x0002); /* 1.5 ulp: tie to 2 */
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MIN, 0x8000, 0x0000, 0x8000);
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MAX, 0x8000, 0x0000, 0x0000);
  KNOWN(WEFT_DTYPE_FLOAT16, WEFT_OP_MAX, 0xfc00, 0xfbff, 0xfbff);
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x3f80, 0x3b80, 0x3f80); /* 1 + 2^-8: tie, to even */
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x3f81, 0x3b80, 0x3f82);
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 0x7f7f, 0x7f7f, 0x7f80);     /* max + max = inf */
  KNOWN(WEFT_DTYPE_BFLOAT16, WEFT_OP_PRODUCT, 0x3fc0, 0x3fc0, 0x4010); /* 1.5 * 1.5 = 2.25 */
}

/* ---------------------------------------------------- conversions */
static void suite_conversions(int exhaustive) {
  g_ctx = "conversions";
  /* known bit patterns */
  EXPECT(wf_f16_to_f32(0x3c00) == 1.0f, "f16 0x3C00 != 1.0");
  EXPECT(wf_f16_to_f32(0x7bff) == 65504.0f, "f16 0x7BFF != 65504");
  EXPECT(wf_f16_to_f32(0x7c00) == INFINITY, "f16 0x7C00 != inf");
  EXPECT(wf_f16_to_f32(0xfc00) == -INFINITY, "f16 0xFC00 != -inf");
  EXPECT(wf_f16_to_f32(0x0001) == 0x1p-24f, "f16 0x0001 != 2^-24");
  EXPECT(fbits(wf_f16_to_f32(0x8000)) == 0x80000000u, "f16 0x8000 != -0");
  EXPECT(isnan(wf_f16_to_f32(0x7c01)) && isnan(wf_f16_to_f32(0xfe00)), "f16 NaN not NaN");
  EXPECT(wf_f32_to_f16(1.0f) == 0x3c00, "1.0 -> 0x%04x", wf_f32_to_f16(1.0f));
  EXPECT(wf_f32_to_f16(65504.0f) == 0x7bff, "65504 -> 0x%04x", wf_f32_to_f16(65504.0f));
  EXPECT(wf_f32_to_f16(65519.996f) == 0x7bff, "65519.996 -> 0x%04x", wf_f32_to_f16(65519.996f));
  EXPECT(wf_f32_to_f16(65520.0f) == 0x7c00, "65520 -> 0x%04x (tie must go to inf)", wf_f32_to_f16(65520.0f));
  EXPECT(wf_f32_to_f16(1e10f) == 0x7c00 && wf_f32_to_f16(-1e10f) == 0xfc00, "overflow not inf");
  EXPECT(wf_f32_to_f16(INFINITY) == 0x7c00, "inf -> 0x%04x", wf_f32_to_f16(INFINITY));
  EXPECT(wf_f32_to_f16(0x1p-24f) == 0x0001, "2^-24 -> 0x%04x", wf_f32_to_f16(0x1p-24f));
  EXPECT(wf_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 -> 0x%04x (tie to even 0)", wf_f32_to_f16(0x1p-25f));
  EXPECT(wf_f32_to_f16(bitsf(0x33000001u)) == 0x0001, "2^-25+ -> 0x%04x", wf_f32_to_f16(bitsf(0x33000001u)));
  EXPECT(wf_f32_to_f16(-0x1p-26f) == 0x8000, "-2^-26 -> 0x%04x", wf_f32_to_f16(-0x1p-26f));
  EXPECT(wf_f32_to_f16(0x1.ffcp-15f) == 0x0400, "subnormal rounding up to min normal");
  EXPECT(h_isnan(wf_f32_to_f16(NAN)) && h_isnan(wf_f32_to_f16(bitsf(0x7f800001u))), "NaN -> not NaN");
  EXPECT(wf_f32_to_bf16(1.0f) == 0x3f80 && wf_bf16_to_f32(0x3f80) == 1.0f, "bf16 1.0");
  EXPECT(wf_f32_to_bf16(bitsf(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
  EXPECT(wf_f32_to_bf16(bitsf(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
  EXPECT(wf_f32_to_bf16(3.4028234663852886e38f) == 0x7f80, "bf16 FLT_MAX rounds to inf");
  EXPECT(bf_isnan(wf_f32_to_bf16(bitsf(0x7f800001u))), "bf16 sNaN with low payload must stay NaN");

  /* every float16 / bfloat16 pattern: to float32 and back */
  uint16_t *h = xmalloc(65536 * 2), *h2 = xmalloc(65536 * 2);
  float *f = xmalloc(65536 * 4), *fsw = xmalloc(65536 * 4);
  for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  for (uint32_t i = 0; i < 65536; i++) {
    float v = wf_f16_to_f32(h[i]);
    double want = ref_h2d(h[i]);
    uint16_t back = wf_f32_to_f16(v);
    if (h_isnan(h[i]))
      EXPECT(isnan(v) && !signbit(v) == !signbit(want) && h_isnan(back) && (back & 0x8000) == (h[i] & 0x8000),
             "f16 NaN 0x%04x -> 0x%08x -> 0x%04x", h[i], fbits(v), back);
    else
      EXPECT((double)v == want && !signbit(v) == !signbit(want) && back == h[i], "f16 0x%04x -> %a -> 0x%04x", h[i],
             (double)v, back);
    float bv = wf_bf16_to_f32(h[i]);
    double bwant = ref_bf2d(h[i]);
    uint16_t bback = wf_f32_to_bf16(bv);
    if (bf_isnan(h[i]))
      EXPECT(isnan(bv) && bf_isnan(bback) && (bback & 0x8000) == (h[i] & 0x8000), "bf16 NaN 0x%04x", h[i]);
    else
      EXPECT((double)bv == bwant && !signbit(bv) == !signbit(bwant) && bback == h[i], "bf16 0x%04x -> %a -> 0x%04x",
             h[i], (double)bv, bback);
  }
  /* float16 block conversions, both paths, agree with the scalar ones bit
   * for bit (NaNs included: both quiet them the same way) */
  for (int hw = 1; hw >= 0; hw--) {
    wf_half_allow_hw(hw);
    wf_f16_to_f32_block(f, h, 65536);
    wf_f32_to_f16_block(h2, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
      EXPECT(fbits(f[i]) == fbits(wf_f16_to_f32(h[i])), "f16 block (hw=%d) 0x%04x -> 0x%08x", wf_half_hw_active(), h[i],
             fbits(f[i]));
      EXPECT(h2[i] == wf_f32_to_f16(f[i]), "f16 block back (hw=%d) 0x%08x -> 0x%04x", wf_half_hw_active(), fbits(f[i]),
             h2[i]);
    }
  }
  wf_half_allow_hw(1);

  /* short blocks (the F16C tail) stay inside their buffers, at odd addresses */
  for (size_t n = 0; n <= 19; n++) {
    for (int hw = 1; hw >= 0; hw--) {
      wf_half_allow_hw(hw);
      buf_t hb = buf_new(n * 2, 1), fb = buf_new(n * 4, 0);
      wf_f16_to_f32_block((float *)(void *)fb.p, (const wf_u16u *)(h + 0x3bf0), n);
      for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, fb.p + 4 * i, 4);
        EXPECT(v == wf_f16_to_f32((uint16_t)(0x3bf0 + i)), "f16 block n=%zu hw=%d elem %zu", n, hw, i);
      }
      wf_f32_to_f16_block((wf_u16u *)(void *)hb.p, (const float *)(const void *)fb.p, n);
      EXPECT(n == 0 || !memcmp(hb.p, h + 0x3bf0, n * 2), "f16 block back n=%zu hw=%d", n, hw);
      EXPECT(buf_guards_ok(&hb, 1) && buf_guards_ok(&fb, 0), "f16 block n=%zu hw=%d wrote outside", n, hw);
      free(hb.raw), free(fb.raw);
    }
  }
  wf_half_allow_hw(1);

  /* float32 -> 16 bits on random patterns (and all, with --exhaustive):
   * scalar against the reference, blocks (hw and sw) against the scalar */
  uint64_t total = exhaustive ? (1ull << 32) : (1ull << 21);
  for (uint64_t base = 0; base < total; base += 65536) {
    for (uint32_t i = 0; i < 65536; i++) {
      uint32_t u = exhaustive ? (uint32_t)(base + i) : (uint32_t)rnd();
      if (!exhaustive && (i & 3) == 0) u = (u & 0x80ffffffu) | ((100u + (u >> 24) % 45u) << 23); /* f16 range */
      fsw[i] = bitsf(u);
    }
    for (uint32_t i = 0; i < 65536; i++) {
      float v = fsw[i];
      uint16_t got = wf_f32_to_f16(v), want = ref_d2h(v);
      if (isnan(v))
        EXPECT(h_isnan(got) && (got & 0x8000) == (want & 0x8000), "f32 NaN 0x%08x -> 0x%04x", fbits(v), got);
      else
        EXPECT(got == want, "f32 0x%08x -> f16 0x%04x, want 0x%04x", fbits(v), got, want);
      got = wf_f32_to_bf16(v), want = ref_d2bf(v);
      if (isnan(v))
        EXPECT(bf_isnan(got) && (got & 0x8000) == (want & 0x8000), "f32 NaN 0x%08x -> bf16 0x%04x", fbits(v), got);
      else
        EXPECT(got == want, "f32 0x%08x -> bf16 0x%04x, want 0x%04x", fbits(v), got, want);
    }
    for (int hw = 1; hw >= 0; hw--) {
      wf_half_allow_hw(hw);
      wf_f32_to_f16_block(h2, fsw, 65536);
      for (uint32_t i = 0; i < 65536; i++)
        EXPECT(h2[i] == wf_f32_to_f16(fsw[i]), "f16 block (hw=%d) 0x%08x -> 0x%04x", hw, fbits(fsw[i]), h2[i]);
    }
    wf_half_allow_hw(1);
    if (g_failures > 40) break;
  }
  free(h), free(h2), free(f), free(fsw);
}

/* ---------------------------------------------------------- scaling */
/* One float32 multiply, rounded to float32 (volatile: no excess precision,
 * no contraction, whatever the compiler's settings). */
static float ref_mul_f32(float a, float b) {
  volatile float p = a * b;
  return p;
}

static void ref_scale_elem(weft_dtype t, const unsigned char *in, unsigned char *out, double f) {
  size_t sz = DT[t].size;
  if (f == 1.0) { /* documented no-op */
    memcpy(out, in, sz);
    return;
  }
  if (t == WEFT_DTYPE_BOOL) {
    *out = (unsigned char)(*in != 0 && f != 0);
    return;
  }
  if (t == WEFT_DTYPE_FLOAT64) {
    store_f(t, out, load_f(t, in) * f);
    return;
  }
  if (is_float(t)) { /* Horovod's CPU ScaleBuffer: x * (float)f in float32, then (f16/bf16) rounded to 16 bits */
    store_f(t, out, (double)ref_mul_f32((float)load_f(t, in), (float)f));
    return;
  }
  /* integers: the double product, truncated (a C cast), saturated where that
   * cast is undefined */
  static const struct {
    double lo, hi_excl; /* v < lo saturates low, v >= hi_excl high */
    int64_t min, max;
  } lim[] = {[WEFT_DTYPE_UINT8] = {0, 256, 0, 255},
             [WEFT_DTYPE_INT8] = {-128, 128, -128, 127},
             [WEFT_DTYPE_UINT16] = {0, 65536, 0, 65535},
             [WEFT_DTYPE_INT16] = {-32768, 32768, -32768, 32767},
             [WEFT_DTYPE_INT32] = {-0x1p31, 0x1p31, INT32_MIN, INT32_MAX},
             [WEFT_DTYPE_INT64] = {-0x1p63, 0x1p63, INT64_MIN, INT64_MAX}};
  double v = trunc((double)load_i(t, in) * f);
  int64_t r = isnan(v) ? 0 : v >= lim[t].hi_excl ? lim[t].max : v < lim[t].lo ? lim[t].min : (int64_t)v;
  store_u(t, out, (uint64_t)r);
}

static void check_scale(weft_dtype t, size_t n, size_t off, double f, int all_forms) {
  size_t sz = DT[t].size, bytes = n * sz;
  buf_t s = buf_new(bytes, off), d = buf_new(bytes, off);
  unsigned char *s0 = xmalloc(bytes), *want = xmalloc(bytes);
  fill(t, s.p, n);
  memcpy(s0, s.p, bytes);
  for (size_t i = 0; i < n; i++) ref_scale_elem(t, s0 + i * sz, want + i * sz, f);
  char form[64];
  snprintf(form, sizeof form, "scale_copy(d,s,%g)", f);
  wf_scale_copy(t, d.p, s.p, n, f);
  expect_elems(t, "", form, n, d.p, want, s0, s0, __LINE__);
  EXPECT(!memcmp(s.p, s0, bytes), "%s scale_copy wrote its source", DT[t].name);
  snprintf(form, sizeof form, "scale(%g)", f);
  memcpy(d.p, s0, bytes);
  wf_scale(t, d.p, n, f);
  expect_elems(t, "", form, n, d.p, want, s0, s0, __LINE__);
  if (all_forms) {
    snprintf(form, sizeof form, "scale_copy(d,d,%g)", f);
    memcpy(d.p, s0, bytes);
    wf_scale_copy(t, d.p, d.p, n, f);
    expect_elems(t, "", form, n, d.p, want, s0, s0, __LINE__);
  }
  EXPECT(buf_guards_ok(&s, off) && buf_guards_ok(&d, off), "%s scale n=%zu: wrote outside the buffer", DT[t].name, n);
  free(s.raw), free(d.raw), free(s0), free(want);
}

static void suite_scale_random(int only_half) {
  static const double factors[] = {0.5,   -0.5,     1.0 / 3,   0.1,  3.0,
                                   1.0,   0.0,      -0.0,      1e30, -1e30,
                                   1e-30, INFINITY, -INFINITY, NAN,  1.0 + 0x1p-11 + 0x1p-40};
  static const size_t counts[] = {1, 7, 65, 1000};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    if (only_half && t != WEFT_DTYPE_FLOAT16) continue;
    for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        check_scale((weft_dtype)t, counts[c], c & 1, factors[k], 1);
    /* the largest count for the float types (the average of a gradient)
     * and int64 (the scalar loop) */
    if (!only_half && (is_float((weft_dtype)t) || t == WEFT_DTYPE_INT64))
      check_scale((weft_dtype)t, BIG_COUNT, 1, 1.0 / 7, 0);
  }
}

static uint64_t scale1(weft_dtype t, uint64_t x, double f) {
  unsigned char p[8];
  store_u(t, p, x);
  wf_scale(t, p, 1, f);
  return elem_hex(t, p);
}
#define KNOWN_SCALE(t, x, f, want)                                                             \
  do {                                                                                         \
    uint64_t got_ = scale1(t, (uint64_t)(x), f);                                               \
    EXPECT(got_ == (uint64_t)(want), "%s scale(%s, %s) = 0x%llx, want %s", DT[t].name, #x, #f, \
           (unsigned long long)got_, #want);                                                   \
  } while (0)

static void suite_scale_known(void) {
  KNOWN_SCALE(WEFT_DTYPE_INT32, 7, 0.5, 3);
  KNOWN_SCALE(WEFT_DTYPE_INT32, -7, 0.5, (uint32_t)-3);
  KNOWN_SCALE(WEFT_DTYPE_INT32, 5, NAN, 0);
  KNOWN_SCALE(WEFT_DTYPE_INT32, 5, INFINITY, INT32_MAX);
  KNOWN_SCALE(WEFT_DTYPE_INT32, -5, INFINITY, 0x80000000u);
  KNOWN_SCALE(WEFT_DTYPE_INT8, 100, 2.0, 127);
  KNOWN_SCALE(WEFT_DTYPE_INT8, -100, 2.0, 0x80);
  KNOWN_SCALE(WEFT_DTYPE_INT8, -3, 0.5, 0xff); /* -1.5 -> -1 */
  KNOWN_SCALE(WEFT_DTYPE_UINT8, 200, 2.0, 255);
  KNOWN_SCALE(WEFT_DTYPE_UINT8, 10, -1.0, 0);
  KNOWN_SCALE(WEFT_DTYPE_UINT16, 65535, 1.5, 65535);
  KNOWN_SCALE(WEFT_DTYPE_INT16, 32767, -2.0, 0x8000);
  KNOWN_SCALE(WEFT_DTYPE_INT64, 1ll << 62, 4.0, INT64_MAX);
  KNOWN_SCALE(WEFT_DTYPE_INT64, 1ll << 62, 2.0, INT64_MAX); /* exactly 2^63 */
  KNOWN_SCALE(WEFT_DTYPE_INT32, 1 << 30, 2.0, INT32_MAX);   /* exactly 2^31 */
  KNOWN_SCALE(WEFT_DTYPE_INT32, -(1 << 30), 2.0, 0x80000000u);
  KNOWN_SCALE(WEFT_DTYPE_UINT16, 32768, 2.0, 65535);
  KNOWN_SCALE(WEFT_DTYPE_INT64, -(1ll << 62), 2.0, INT64_MIN);
  KNOWN_SCALE(WEFT_DTYPE_INT64, -(1ll << 62), 4.0, INT64_MIN);
  KNOWN_SCALE(WEFT_DTYPE_INT64, (1ll << 53) + 1, 1.0, (1ll << 53) + 1); /* no-op: exact */
  KNOWN_SCALE(WEFT_DTYPE_INT64, 9, 1.0 / 3, 3);
  KNOWN_SCALE(WEFT_DTYPE_BOOL, 2, 1.0, 2); /* no-op */
  KNOWN_SCALE(WEFT_DTYPE_BOOL, 2, 0.5, 1);
  KNOWN_SCALE(WEFT_DTYPE_BOOL, 2, 0.0, 0);
  KNOWN_SCALE(WEFT_DTYPE_BOOL, 0, 3.0, 0);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT32, f32b(3.0f), 0.5, f32b(1.5f));
  KNOWN_SCALE(WEFT_DTYPE_FLOAT32, f32b(1e30f), 1e30, f32b(INFINITY));
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x3c00, 0.5, 0x3800);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x7bff, 2.0, 0x7c00);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x7c01, 1.0, 0x7c01); /* no-op keeps a signalling NaN */
  /* The factor is rounded to float32 first, as Horovod does: 1 + 2^-11 +
   * 2^-40 becomes 1 + 2^-11, and 1.0 times it is a float16 tie, which goes
   * to even (1.0). The double product would have rounded up (0x3c01). */
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x3c00, 1.0 + 0x1p-11 + 0x1p-40, 0x3c00);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0xbc00, 1.0 + 0x1p-11 + 0x1p-40, 0xbc00);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x3c00, 1.0 + 0x1p-11 - 0x1p-40, 0x3c00);
  KNOWN_SCALE(WEFT_DTYPE_FLOAT16, 0x3c01, 1.0 + 0x1p-11 + 0x1p-40, 0x3c02); /* tie, to even: up */
  KNOWN_SCALE(WEFT_DTYPE_BFLOAT16, 0x3f80, 1.0 + 0x1p-8 + 0x1p-40, 0x3f80);
  KNOWN_SCALE(WEFT_DTYPE_BFLOAT16, 0x3f81, 1.0 + 0x1p-8 + 0x1p-40, 0x3f82);
  KNOWN_SCALE(WEFT_DTYPE_BFLOAT16, 0x3f80, 0.5, 0x3f00);
  /* float32: times (float)f in float32, one rounding of the float factor's
   * product: 9 * 0.1f = 0x1.cccccep-1 and 5 * (float)(1/3) = 0x1.aaaaacp+0,
   * where the double product rounded once gives 0x1.ccccccp-1 and
   * 0x1.aaaaaap+0. */
  KNOWN_SCALE(WEFT_DTYPE_FLOAT32, f32b(9.0f), 0.1, f32b(0x1.cccccep-1f));
  KNOWN_SCALE(WEFT_DTYPE_FLOAT32, f32b(5.0f), 1.0 / 3, f32b(0x1.aaaaacp+0f));
  KNOWN_SCALE(WEFT_DTYPE_FLOAT32, f32b(3.0f), 1.0 / 3, f32b(1.0f));
  KNOWN_SCALE(WEFT_DTYPE_FLOAT64, 0x4008000000000000ull, 1.0 / 3, 0x3ff0000000000000ull); /* 3 * (1/3) = 1 in double */
}

/* Near ties: for every finite nonzero 16-bit float x, factors that put x * f
 * just above and just below the midpoint between x and its neighbour away
 * from zero. The factor is rounded to float32 first (Horovod's rule), which
 * drops the 2^-40 nudge: the float32 product then lands on the tie (or next
 * to it) and must round to even exactly as the reference does, at every x. */
static void suite_scale_ties(void) {
  for (int bf = 0; bf < 2; bf++) {
    weft_dtype t = bf ? WEFT_DTYPE_BFLOAT16 : WEFT_DTYPE_FLOAT16;
    int bad = 0;
    for (uint32_t x = 1; x < 0x10000; x++) {
      uint16_t h = (uint16_t)x, next = (uint16_t)(x + 1);
      double v = bf ? ref_bf2d(h) : ref_h2d(h), vn = bf ? ref_bf2d(next) : ref_h2d(next);
      if (!isfinite(v) || !isfinite(vn) || v == 0 || (x & 0x7fff) == 0x7fff) continue;
      for (int sgn = -1; sgn <= 1; sgn += 2) {
        double f = (v + vn) / 2 / v * (1 + sgn * 0x1p-40);
        double p = ref_mul_f32((float)v, (float)f);
        uint16_t got = h, want = bf ? ref_d2bf(p) : ref_d2h(p);
        wf_scale(t, &got, 1, f);
        if (got != want && bad++ < 3)
          fail_at(__LINE__, "%s scale(0x%04x, %a) = 0x%04x, want 0x%04x", DT[t].name, h, f, got, want);
      }
    }
  }
}

/* Horovod's rule against the one weft used before (the double product
 * x * f, rounded once to the element type): for float32, float16 and
 * bfloat16, factors like 0.1 and 1/3 (and two near ties), every
 * float16/bfloat16 value and
 * many random float32 values. The suite first checks that its inputs tell
 * the two rules apart (some element differs for each type), then that
 * wf_scale follows Horovod's on every element. */
static void suite_scale_horovod(void) {
  /* the last two are just above 1 + half a bfloat16 (float16) ulp: rounded
   * to float32 they lose the 2^-30, and x = 1 lands on a tie */
  static const double factors[] = {0.1, 1.0 / 3, 1.0 / 7, 0.3, 1.0 / 49, 2.0 / 3, 1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-11 + 0x1p-30};
  static const weft_dtype types[] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_FLOAT16, WEFT_DTYPE_BFLOAT16};
  const size_t n = 65536;
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    weft_dtype t = types[ti];
    size_t sz = DT[t].size, differ = 0, bad = 0;
    unsigned char *in = xmalloc(n * sz), *got = xmalloc(n * sz), *want = xmalloc(n * sz), *old = xmalloc(n * sz);
    for (size_t i = 0; i < n; i++) {
      if (t == WEFT_DTYPE_FLOAT32) {
        uint32_t u = (uint32_t)rnd();
        u = (u & 0x807fffffu) | ((100u + (u >> 23) % 56u) << 23); /* finite, 2^-27 .. 2^28 */
        memcpy(in + 4 * i, &u, 4);
      } else {
        uint16_t h = (uint16_t)i;
        memcpy(in + 2 * i, &h, 2); /* every 16-bit pattern */
      }
    }
    for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++) {
      double f = factors[k];
      for (size_t i = 0; i < n; i++) {
        ref_scale_elem(t, in + i * sz, want + i * sz, f);
        store_f(t, old + i * sz, load_f(t, in + i * sz) * f); /* the old rule */
        if (!elem_same(t, want + i * sz, old + i * sz)) differ++;
      }
      wf_scale_copy(t, got, in, n, f);
      for (size_t i = 0; i < n; i++) {
        if (elem_same(t, got + i * sz, want + i * sz)) continue;
        if (bad++ < 3)
          fail_at(__LINE__, "%s scale(0x%llx, %a) = 0x%llx, want 0x%llx (Horovod: x * (float)f in float32)%s", DT[t].name,
                  elem_hex(t, in + i * sz), f, elem_hex(t, got + i * sz), elem_hex(t, want + i * sz),
                  elem_same(t, got + i * sz, old + i * sz) ? "; got the double product rounded once" : "");
      }
    }
    EXPECT(differ > 0, "%s: no input tells Horovod's scaling rule from the double product's (test inputs too weak)",
           DT[t].name);
    printf("test_reduce: %s scale: %zu of %zu products differ between Horovod's rule and the double product\n",
           DT[t].name, differ, n * (sizeof factors / sizeof factors[0]));
    free(in), free(got), free(want), free(old);
  }
}

/* ------------------------------------------------------- threads */
/* One thread reduces float16 while another flips the F16C hook: both
 * paths give the same bits, so every result must match. (TSan checks the
 * hook and the CPU probe are race-free.) */
typedef struct {
  const uint16_t *a, *b, *want;
  size_t n;
  int bad;
} thr_arg;

static void *thr_reduce(void *p) {
  thr_arg *x = p;
  uint16_t *d = xmalloc(x->n * 2);
  for (int it = 0; it < 40; it++) {
    wf_reduce3(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, d, x->a, x->b, x->n);
    if (memcmp(d, x->want, x->n * 2)) x->bad++;
  }
  free(d);
  return NULL;
}
static void *thr_flip(void *p) {
  (void)p;
  for (int it = 0; it < 2000; it++) wf_half_allow_hw(it & 1);
  wf_half_allow_hw(1);
  return NULL;
}

static void suite_threads(void) {
  g_ctx = "threads";
  size_t n = 4099;
  uint16_t *a = xmalloc(n * 2), *b = xmalloc(n * 2), *want = xmalloc(n * 2);
  fill(WEFT_DTYPE_FLOAT16, (unsigned char *)a, n);
  fill(WEFT_DTYPE_FLOAT16, (unsigned char *)b, n);
  for (size_t i = 0; i < n; i++) { /* no NaN inputs: results compared bytewise */
    if (h_isnan(a[i])) a[i] = 0x3c00;
    if (h_isnan(b[i])) b[i] = 0x4000;
    ref_elem(WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, (unsigned char *)(a + i), (unsigned char *)(b + i),
             (unsigned char *)(want + i));
  }
  thr_arg args[2] = {{a, b, want, n, 0}, {a, b, want, n, 0}};
  pthread_t th[3];
  int rc = pthread_create(&th[0], NULL, thr_reduce, &args[0]);
  rc |= pthread_create(&th[1], NULL, thr_reduce, &args[1]);
  rc |= pthread_create(&th[2], NULL, thr_flip, NULL);
  EXPECT(rc == 0, "pthread_create failed");
  if (rc == 0)
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  EXPECT(args[0].bad == 0 && args[1].bad == 0, "concurrent float16 reduce gave wrong results (%d, %d)", args[0].bad,
         args[1].bad);
  free(a), free(b), free(want);
}

int main(int argc, char **argv) {
  int exhaustive = argc > 1 && strcmp(argv[1], "--exhaustive") == 0;
  if (fegetround() != FE_TONEAREST) {
    fprintf(stderr, "FAIL: the reference needs round-to-nearest\n");
    return 1;
  }
  int hw = wf_half_hw_active();
  printf("test_reduce: largest count %d; F16C path %s\n", BIG_COUNT,
         hw ? "available: float16 suites run with and without it" : "not available: software float16 path only");
  g_ctx = "known values";
  suite_known();
  suite_conversions(exhaustive);
  suite_count_zero();
  g_ctx = "scale";
  suite_scale_known();
  suite_scale_ties();
  suite_scale_horovod();
  g_ctx = "scale random";
  suite_scale_random(0);
  g_ctx = "reduce random";
  suite_reduce_random(0);
  if (hw) { /* again through the software float16 path */
    wf_half_allow_hw(0);
    g_ctx = "known values, software f16";
    suite_known();
    g_ctx = "scale, software f16";
    suite_scale_known();
    suite_scale_ties();
    suite_scale_horovod();
    suite_scale_random(1);
    g_ctx = "reduce random, software f16";
    suite_reduce_random(1);
    wf_half_allow_hw(1);
  }
  suite_threads();
  if (g_failures) {
    fprintf(stderr, "test_reduce: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("test_reduce: all passed\n");
  return 0;
}
