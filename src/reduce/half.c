/* half.c - IEEE float16 and bfloat16 <-> float32 conversions: the scalar ones
 * of reduce.h and the block ones the f16/bf16 kernels use (reduce_impl.h).
 *
 * float16 blocks use F16C when the CPU has it; the software code must then
 * give the very same bits, so it copies the hardware's choices: round to
 * nearest even, a NaN is quieted (its top payload bits kept), f16 subnormals
 * are exact in float32, float32 values below half the smallest f16 subnormal
 * become +-0. Both assume the default floating-point environment (no
 * flush-to-zero). bfloat16 is plain integer code the compiler vectorises. */
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
  if (rem > half || (rem == half && (r & 1u)))
    r++; /* may carry into the smallest normal, which is the right answer */
  return (uint16_t)(sign | r);
}

static inline float wf_bf16_to_f32_soft(uint16_t h) { return wf_bits_f32((uint32_t)h << 16); }

static inline uint16_t wf_f32_to_bf16_soft(float f) {
  uint32_t x = wf_f32_bits(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16; /* carries up to inf */
  uint32_t quiet_nan = (x >> 16) | 0x40u;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

float wf_f16_to_f32(uint16_t h) { return wf_f16_to_f32_soft(h); }
uint16_t wf_f32_to_f16(float f) { return wf_f32_to_f16_soft(f); }
float wf_bf16_to_f32(uint16_t h) { return wf_bf16_to_f32_soft(h); }
uint16_t wf_f32_to_bf16(float f) { return wf_f32_to_bf16_soft(f); }

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

void wf_half_allow_hw(int allow) {
  atomic_store_explicit(&wf_f16c_allowed, allow != 0, memory_order_relaxed);
}

#ifdef WF_HAVE_F16C_CODE
/* The tail (< 8 elements) goes through a padded copy so every element takes
 * the hardware path. */
__attribute__((target("avx2,f16c"))) static void wf_f16_to_f32_f16c(float *restrict dst,
                                                                   const wf_u16u *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
  if (i < n) {
    uint16_t in[8] = {0};
    float out[8];
    memcpy(in, (const void *)(src + i), (n - i) * sizeof *in);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)in)));
    memcpy(dst + i, out, (n - i) * sizeof *out);
  }
}

__attribute__((target("avx2,f16c"))) static void wf_f32_to_f16_f16c(wf_u16u *restrict dst,
                                                                   const float *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(void *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) {
    float in[8] = {0};
    uint16_t out[8];
    memcpy(in, src + i, (n - i) * sizeof *in);
    _mm_storeu_si128((__m128i *)(void *)out, _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
    memcpy((void *)(dst + i), out, (n - i) * sizeof *out);
  }
}
#endif

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

/* Blocked so gcc -O2 (whose cheap cost model will not vectorise a loop
 * that needs a scalar epilogue) vectorises the bulk. The clones are static
 * behind plain functions: clang 14 emits no ifunc for an external
 * target_clones function that its own file does not call. */
WF_CLONES static void wf_bf16_to_f32_loop(float *restrict dst, const wf_u16u *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (size_t j = i; j < i + 64; j++) dst[j] = wf_bf16_to_f32_soft(src[j]);
  for (; i < n; i++) dst[i] = wf_bf16_to_f32_soft(src[i]);
}

WF_CLONES static void wf_f32_to_bf16_loop(wf_u16u *restrict dst, const float *restrict src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (size_t j = i; j < i + 64; j++) dst[j] = wf_f32_to_bf16_soft(src[j]);
  for (; i < n; i++) dst[i] = wf_f32_to_bf16_soft(src[i]);
}

void wf_bf16_to_f32_block(float *restrict dst, const wf_u16u *restrict src, size_t n) {
  wf_bf16_to_f32_loop(dst, src, n);
}

void wf_f32_to_bf16_block(wf_u16u *restrict dst, const float *restrict src, size_t n) {
  wf_f32_to_bf16_loop(dst, src, n);
}
