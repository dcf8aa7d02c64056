/* half.c - IEEE float16 and bfloat16 <-> float32 conversions (the scalar
 * ones of reduce.h, float16 blocks for the software path) and the F16C
 * float16 kernels.
 *
 * F16C and the software code must give the very same bits, so the software
 * code copies the hardware's choices: round to nearest even, a NaN is
 * quieted (its top payload bits kept), f16 subnormals are exact in float32,
 * float32 values at or below half the smallest f16 subnormal become +-0.
 * Both assume the default floating-point environment (no flush-to-zero). */
#include <stdatomic.h>
#include <string.h>

#include "reduce/reduce.h"
#include "reduce/reduce_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define WF_HAVE_F16C_CODE 1
#endif

static inline uint32_t wf_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float wf_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float wf_f16_to_f32_soft(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  if (em >= 0x7c00u) /* inf, or NaN quieted like vcvtph2ps does */
    return wf_bits_f32(sign | 0x7f800000u | ((em & 0x3ffu) << 13) | (em > 0x7c00u ? 0x400000u : 0));
  if (em >= 0x0400u) /* normal: move the exponent bias from 15 to 127 */
    return wf_bits_f32(sign | ((em << 13) + 0x38000000u));
  /* zero or subnormal: em * 2^-24, exact in float32 */
  return wf_bits_f32(sign | wf_f32_bits((float)em * 0x1p-24f));
}

static inline uint16_t wf_f32_to_f16_soft(float f) {
  uint32_t x = wf_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet it, keep the payload's top bits */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* >= 65520 (65504 + half an ulp, a tie to even) */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* f16 normal range: rebias, round the low 13 bits */
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: ties to 0 */
    return sign;
  /* f16 subnormal: the float32 significand shifted to units of 2^-24 */
  uint32_t e = a >> 23; /* 102 .. 112 */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 24 .. 14 */
  uint32_t r = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) r++; /* may carry into the smallest normal, which is the right answer */
  return (uint16_t)(sign | r);
}

float wf_f16_to_f32(uint16_t h) { return wf_f16_to_f32_soft(h); }
uint16_t wf_f32_to_f16(float f) { return wf_f32_to_f16_soft(f); }
float wf_bf16_to_f32(uint16_t h) { return wf_bf16_to_f32_inl(h); }
uint16_t wf_f32_to_bf16(float f) { return wf_f32_to_bf16_inl(f); }

/* ------------------------------------------------------------ F16C path */
/* 0 = not probed yet, 1 = no F16C, 2 = F16C. Probing twice is harmless, so
 * relaxed ordering is enough: every thread stores the same answer. */
static atomic_int wf_f16c_state;
/* Test hook; relaxed: it only selects between two paths that agree. */
static atomic_int wf_f16c_allowed = 1;

static int wf_f16c_probe(void) {
#ifdef WF_HAVE_F16C_CODE
  unsigned a, b, c, d;
  __builtin_cpu_init();
  /* avx2 is checked through the compiler (it also checks the OS saves YMM
   * state); clang 14 does not know "f16c" there, so read CPUID for it. */
  if (!__builtin_cpu_supports("avx2")) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  return (c & bit_F16C) != 0;
#else
  return 0;
#endif
}

int wf_half_hw_active(void) {
  int st = atomic_load_explicit(&wf_f16c_state, memory_order_relaxed);
  if (st == 0) {
    st = wf_f16c_probe() ? 2 : 1;
    atomic_store_explicit(&wf_f16c_state, st, memory_order_relaxed);
  }
  return st == 2 && atomic_load_explicit(&wf_f16c_allowed, memory_order_relaxed);
}

void wf_half_allow_hw(int allow) { atomic_store_explicit(&wf_f16c_allowed, allow != 0, memory_order_relaxed); }

#ifdef WF_HAVE_F16C_CODE
#define WF_F16C __attribute__((target("avx2,f16c")))
#define WF_F16C_INLINE __attribute__((target("avx2,f16c"), always_inline)) static inline

/* 8 float16 at any address <-> 8 float32 lanes. */
WF_F16C_INLINE __m256 wf_load8(const wf_u16u *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
WF_F16C_INLINE void wf_store8(wf_u16u *p, __m256 v) {
  _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* The float32 ops of reduce.c, 8 lanes, same results: IEEE add and multiply;
 * minimum/maximum take a if a is NaN, if a < b (a > b), or if a == b and a
 * is negative (positive), else b. blendv picks by the mask's sign bit, so
 * "a == b and a negative" is the equal-mask ANDed with a itself. */
WF_F16C_INLINE __m256 wf_min8(__m256 a, __m256 b) {
  __m256 take_a = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)),
                               _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ), a));
  return _mm256_blendv_ps(b, a, take_a);
}
WF_F16C_INLINE __m256 wf_max8(__m256 a, __m256 b) {
  __m256 take_a = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)),
                               _mm256_andnot_ps(a, _mm256_cmp_ps(a, b, _CMP_EQ_OQ)));
  return _mm256_blendv_ps(b, a, take_a);
}
WF_F16C_INLINE __m256 wf_op8(weft_reduce_op op, __m256 a, __m256 b) {
  switch (op) {
    case WEFT_OP_MIN: return wf_min8(a, b);
    case WEFT_OP_MAX: return wf_max8(a, b);
    case WEFT_OP_PRODUCT: return _mm256_mul_ps(a, b);
    default: return _mm256_add_ps(a, b); /* sum, average */
  }
}

/* d = a op b, 8 at a time; each group is loaded before it is stored, so d
 * may equal a or b. The tail goes through padded copies so every element
 * takes the hardware path. op is a constant in each caller below, so the
 * switch in wf_op8 folds away. */
WF_F16C_INLINE void wf_f16c_reduce_loop(weft_reduce_op op, wf_u16u *d, const wf_u16u *a, const wf_u16u *b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) wf_store8(d + i, wf_op8(op, wf_load8(a + i), wf_load8(b + i)));
  if (i < n) {
    uint16_t ta[8] = {0}, tb[8] = {0}, td[8];
    memcpy(ta, (const void *)(a + i), (n - i) * 2);
    memcpy(tb, (const void *)(b + i), (n - i) * 2);
    wf_store8(td, wf_op8(op, wf_load8(ta), wf_load8(tb)));
    memcpy((void *)(d + i), td, (n - i) * 2);
  }
}
WF_F16C static void wf_f16c_sum(wf_u16u *d, const wf_u16u *a, const wf_u16u *b, size_t n) {
  wf_f16c_reduce_loop(WEFT_OP_SUM, d, a, b, n);
}
WF_F16C static void wf_f16c_min(wf_u16u *d, const wf_u16u *a, const wf_u16u *b, size_t n) {
  wf_f16c_reduce_loop(WEFT_OP_MIN, d, a, b, n);
}
WF_F16C static void wf_f16c_max(wf_u16u *d, const wf_u16u *a, const wf_u16u *b, size_t n) {
  wf_f16c_reduce_loop(WEFT_OP_MAX, d, a, b, n);
}
WF_F16C static void wf_f16c_prod(wf_u16u *d, const wf_u16u *a, const wf_u16u *b, size_t n) {
  wf_f16c_reduce_loop(WEFT_OP_PRODUCT, d, a, b, n);
}

/* d = s * k: each float16 widened to float32 (exact), one float32 multiply,
 * rounded back to float16 (nearest even): Horovod's F16C ScaleBuffer loop. */
WF_F16C static void wf_f16c_scale(wf_u16u *d, const wf_u16u *s, size_t n, float factor) {
  __m256 k = _mm256_set1_ps(factor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) wf_store8(d + i, _mm256_mul_ps(wf_load8(s + i), k));
  if (i < n) {
    uint16_t ts[8] = {0}, td[8];
    memcpy(ts, (const void *)(s + i), (n - i) * 2);
    wf_store8(td, _mm256_mul_ps(wf_load8(ts), k));
    memcpy((void *)(d + i), td, (n - i) * 2);
  }
}

WF_F16C static void wf_f16_to_f32_f16c(float *restrict dst, const wf_u16u *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, wf_load8(src + i));
  if (i < n) {
    uint16_t in[8] = {0};
    float out[8];
    memcpy(in, (const void *)(src + i), (n - i) * sizeof *in);
    _mm256_storeu_ps(out, wf_load8(in));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
}

WF_F16C static void wf_f32_to_f16_f16c(wf_u16u *restrict dst, const float *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) wf_store8(dst + i, _mm256_loadu_ps(src + i));
  if (i < n) {
    float in[8] = {0};
    uint16_t out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    wf_store8(out, _mm256_loadu_ps(in));
    memcpy((void *)(dst + i), out, (n - i) * sizeof *out);
  }
}
#endif

/* ------------------------------------------------------- F16C kernels */
int wf_f16_reduce_hw(weft_reduce_op op, void *d, const void *a, const void *b, size_t n) {
#ifdef WF_HAVE_F16C_CODE
  if (!wf_half_hw_active()) return 0;
  switch (op) {
    case WEFT_OP_MIN: wf_f16c_min(d, a, b, n); break;
    case WEFT_OP_MAX: wf_f16c_max(d, a, b, n); break;
    case WEFT_OP_PRODUCT: wf_f16c_prod(d, a, b, n); break;
    default: wf_f16c_sum(d, a, b, n); break;
  }
  return 1;
#else
  (void)op, (void)d, (void)a, (void)b, (void)n;
  return 0;
#endif
}

int wf_f16_scale_hw(void *d, const void *s, size_t n, float factor) {
#ifdef WF_HAVE_F16C_CODE
  if (!wf_half_hw_active()) return 0;
  wf_f16c_scale(d, s, n, factor);
  return 1;
#else
  (void)d, (void)s, (void)n, (void)factor;
  return 0;
#endif
}

/* --------------------------------------------------------- block entry */
void wf_f16_to_f32_block(float *restrict dst, const wf_u16u *restrict src, size_t n) {
#ifdef WF_HAVE_F16C_CODE
  if (wf_half_hw_active()) {
    wf_f16_to_f32_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = wf_f16_to_f32_soft(src[i]);
}

void wf_f32_to_f16_block(wf_u16u *restrict dst, const float *restrict src, size_t n) {
#ifdef WF_HAVE_F16C_CODE
  if (wf_half_hw_active()) {
    wf_f32_to_f16_f16c(dst, src, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; i++) dst[i] = wf_f32_to_f16_soft(src[i]);
}
