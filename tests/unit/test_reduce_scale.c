/* test_reduce_scale.c - unit test of src/reduce's scaling: wf_scale /
 * wf_scale_copy for every dtype (in place and copying, aliased too), known
 * values, ties in the float16 / bfloat16 rounding and Horovod's float32
 * multiply, against the scalar reference of test_reduce_common.h. The
 * float16 suites run twice, with F16C allowed and forbidden, so the
 * hardware and software paths must both match the reference. */
#include "test_reduce_common.h"

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
  expect_elems(t, "", form, n, d.p, want, s0, s0, __FILE__, __LINE__);
  EXPECT(!memcmp(s.p, s0, bytes), "%s scale_copy wrote its source", DT[t].name);
  snprintf(form, sizeof form, "scale(%g)", f);
  memcpy(d.p, s0, bytes);
  wf_scale(t, d.p, n, f);
  expect_elems(t, "", form, n, d.p, want, s0, s0, __FILE__, __LINE__);
  if (all_forms) {
    snprintf(form, sizeof form, "scale_copy(d,d,%g)", f);
    memcpy(d.p, s0, bytes);
    wf_scale_copy(t, d.p, d.p, n, f);
    expect_elems(t, "", form, n, d.p, want, s0, s0, __FILE__, __LINE__);
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
          fail_at(__FILE__, __LINE__, "%s scale(0x%04x, %a) = 0x%04x, want 0x%04x", DT[t].name, h, f, got, want);
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
          fail_at(__FILE__, __LINE__, "%s scale(0x%llx, %a) = 0x%llx, want 0x%llx (Horovod: x * (float)f in float32)%s", DT[t].name,
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

int main(void) {
  int hw = reduce_test_begin("test_reduce_scale");
  if (hw < 0) return 1;
  g_ctx = "scale";
  suite_scale_known();
  suite_scale_ties();
  suite_scale_horovod();
  g_ctx = "scale random";
  suite_scale_random(0);
  if (hw) { /* again through the software float16 path */
    wf_half_allow_hw(0);
    g_ctx = "scale, software f16";
    suite_scale_known();
    suite_scale_ties();
    suite_scale_horovod();
    suite_scale_random(1);
    wf_half_allow_hw(1);
  }
  return reduce_test_end("test_reduce_scale");
}
