/* test_reduce_common.h - the scalar reference of the src/reduce tests
 * (test_reduce.c: wf_reduce / wf_reduce3 and the float16 / bfloat16
 * conversions; test_reduce_scale.c: wf_scale / wf_scale_copy): the failure
 * counter, a PRNG, the float16 / bfloat16 conversions written from the IEEE
 * definitions (ldexp/frexp/rint, not the library's bit tricks), one element
 * of every dtype x op, test data, and buffers at odd byte offsets between
 * guard bytes.
 *
 * Header-only because every tests/unit/test_*.c is built alone; functions
 * are static inline so a test that does not use one gets no warning. */
#ifndef WF_TESTS_UNIT_TEST_REDUCE_COMMON_H
#define WF_TESTS_UNIT_TEST_REDUCE_COMMON_H

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

static inline void fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void fail_at(const char *file, int line, const char *fmt, ...) {
  if (++g_failures > 40) return; /* the first ones say enough */
  const char *base = strrchr(file, '/');
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s:%d [%s] ", base ? base + 1 : file, line, g_ctx);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
#define EXPECT(cond, ...)                        \
  do {                                           \
    if (!(cond)) fail_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545F4914F6CDD1Dull;
}

static inline void *xmalloc(size_t n) {
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
static inline double ref_h2d(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* double -> float16, round to nearest even (rint in the default mode). */
static inline uint16_t ref_d2h(double d) {
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

static inline double ref_bf2d(uint16_t h) {
  int e = (h >> 7) & 255, m = h & 127;
  double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
  return (h & 0x8000) ? -v : v;
}

static inline uint16_t ref_d2bf(double d) {
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

static inline int h_isnan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static inline int bf_isnan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
static inline uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint64_t f32b(float f) { return fbits(f); }
static inline uint64_t f64b(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* ------------------------------------------------- element reference */
static inline int is_float(weft_dtype t) {
  return t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16 || t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64;
}

/* Elements are read and written through a uint64_t's low bytes: the test
 * assumes a little-endian machine, as weft does. */
static inline int64_t load_i(weft_dtype t, const unsigned char *p) {
  uint64_t u = 0, top = 1ull << (8 * DT[t].size - 1);
  memcpy(&u, p, DT[t].size);
  if (t == WEFT_DTYPE_UINT8 || t == WEFT_DTYPE_UINT16 || DT[t].size == 8) return (int64_t)u;
  return (int64_t)(u ^ top) - (int64_t)top; /* sign-extend */
}

/* Stores v modulo 2^width. */
static inline void store_u(weft_dtype t, unsigned char *p, uint64_t v) { memcpy(p, &v, DT[t].size); }

/* Float types as double (exact), and back with the type's rounding. */
static inline double load_f(weft_dtype t, const unsigned char *p) {
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
static inline void store_f(weft_dtype t, unsigned char *p, double v) {
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
static inline double ref_min(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) || signbit(y)) ? -0.0 : 0.0;
  return fmin(x, y);
}
static inline double ref_max(double x, double y) {
  if (isnan(x) || isnan(y)) return NAN;
  if (x == 0 && y == 0) return (signbit(x) && signbit(y)) ? -0.0 : 0.0;
  return fmax(x, y);
}

static inline void ref_elem(weft_dtype t, weft_reduce_op op, const unsigned char *pa, const unsigned char *pb,
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

static inline int elem_isnan(weft_dtype t, const unsigned char *p) {
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
static inline int elem_same(weft_dtype t, const unsigned char *got, const unsigned char *want) {
  if (memcmp(got, want, DT[t].size) == 0) return 1;
  return elem_isnan(t, want) && elem_isnan(t, got);
}

static inline unsigned long long elem_hex(weft_dtype t, const unsigned char *p) {
  uint64_t v = 0;
  memcpy(&v, p, DT[t].size); /* little-endian test machine: low bytes */
  return (unsigned long long)v;
}

/* -------------------------------------------------------- test data */
static inline void fill(weft_dtype t, unsigned char *p, size_t n) {
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

static inline buf_t buf_new(size_t bytes, size_t off) {
  buf_t b = {xmalloc(bytes + off + 2 * GUARD), NULL, bytes};
  memset(b.raw, 0xA5, bytes + off + 2 * GUARD);
  b.p = b.raw + GUARD + off;
  return b;
}
static inline int buf_guards_ok(const buf_t *b, size_t off) {
  for (size_t i = 0; i < GUARD + off; i++)
    if (b->raw[i] != 0xA5) return 0;
  for (size_t i = 0; i < GUARD; i++)
    if (b->p[b->bytes + i] != 0xA5) return 0;
  return 1;
}

static inline void expect_elems(weft_dtype t, const char *opname, const char *form, size_t n, const unsigned char *got,
                         const unsigned char *want, const unsigned char *a, const unsigned char *b, const char *file,
                         int line) {
  size_t sz = DT[t].size, bad = 0;
  if (memcmp(got, want, n * sz) == 0) return; /* the usual case, fast */
  for (size_t i = 0; i < n; i++) {
    if (elem_same(t, got + i * sz, want + i * sz)) continue;
    if (bad++ < 3)
      fail_at(file, line, "%s %s %s n=%zu i=%zu: a=0x%llx b=0x%llx got 0x%llx want 0x%llx", DT[t].name, opname, form,
              n, i, elem_hex(t, a + i * sz), elem_hex(t, b + i * sz), elem_hex(t, got + i * sz), elem_hex(t, want + i * sz));
  }
}

/* ------------------------------------------------------------ main's frame */
/* Checks the rounding mode the reference needs and says which float16 path
 * runs: 1 if F16C is in use (the float16 suites then run again without it),
 * 0 if not, -1 (after a FAIL line) if the rounding mode is wrong. */
static inline int reduce_test_begin(const char *name) {
  if (fegetround() != FE_TONEAREST) {
    fprintf(stderr, "FAIL: the reference needs round-to-nearest\n");
    return -1;
  }
  int hw = wf_half_hw_active();
  printf("%s: largest count %d; F16C path %s\n", name, BIG_COUNT,
         hw ? "available: float16 suites run with and without it" : "not available: software float16 path only");
  return hw;
}

/* main's exit status: 1 and the failure count, or 0 and "all passed". */
static inline int reduce_test_end(const char *name) {
  if (g_failures) {
    fprintf(stderr, "%s: %d failure(s)\n", name, g_failures);
    return 1;
  }
  printf("%s: all passed\n", name);
  return 0;
}

#endif
