/* reduce_impl.h - private to src/reduce: what reduce.c, scale.c and half.c
 * share (the clone attribute, byte-aligned element types, bfloat16 inline
 * conversions, the F16C float16 kernels) and a test hook. Other modules use
 * reduce.h. */
#ifndef WF_REDUCE_IMPL_H
#define WF_REDUCE_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft.h"

/* Hot loops get an AVX2 clone next to the baseline one, picked once at load
 * time through an ifunc. Not under ThreadSanitizer: the ifunc resolvers run
 * while the dynamic loader is still relocating, before the TSan runtime is
 * up, and the process dies (seen with gcc 12 and clang 14). WF_NO_CLONES
 * turns them off by hand. Clone only static functions: clang 14 emits no
 * ifunc for an external one that its own file does not call. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WF_REDUCE_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define WF_REDUCE_TSAN 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(WF_REDUCE_TSAN) && !defined(WF_NO_CLONES)
#define WF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define WF_CLONES
#endif

/* The kernels take buffers at any byte address (a receive buffer may start
 * right after a header), so elements are read through types of alignment 1:
 * x86 vector loads do not care, and UBSan's alignment check is satisfied. */
typedef uint8_t wf_u8u;
typedef int8_t wf_i8u;
typedef uint16_t wf_u16u __attribute__((aligned(1)));
typedef int16_t wf_i16u __attribute__((aligned(1)));
typedef uint32_t wf_u32u __attribute__((aligned(1)));
typedef int32_t wf_i32u __attribute__((aligned(1)));
typedef uint64_t wf_u64u __attribute__((aligned(1)));
typedef int64_t wf_i64u __attribute__((aligned(1)));
typedef float wf_f32u __attribute__((aligned(1)));
typedef double wf_f64u __attribute__((aligned(1)));

/* Bytes per element (the public weft_dtype_size lives in the API layer). */
static inline size_t wf_reduce_elem_size(weft_dtype t) {
  switch (t) {
    case WEFT_DTYPE_UINT8:
    case WEFT_DTYPE_INT8:
    case WEFT_DTYPE_BOOL: return 1;
    case WEFT_DTYPE_UINT16:
    case WEFT_DTYPE_INT16:
    case WEFT_DTYPE_FLOAT16:
    case WEFT_DTYPE_BFLOAT16: return 2;
    case WEFT_DTYPE_INT32:
    case WEFT_DTYPE_FLOAT32: return 4;
    case WEFT_DTYPE_INT64:
    case WEFT_DTYPE_FLOAT64: return 8;
    default: return 0;
  }
}

/* bfloat16 is the top half of a float32: plain integer code the compiler
 * vectorises inside the kernels. Round to nearest even (the carry runs into
 * the exponent, up to inf); a NaN is quieted so dropping payload bits cannot
 * turn it into inf. */
static inline float wf_bf16_to_f32_inl(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint16_t wf_f32_to_bf16_inl(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (x >> 16) | 0x40u;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

/* Elements per block when float16 goes through float32 scratch (software
 * path). */
#define WF_HALF_BLOCK 512

/* float16 <-> float32 blocks (16-bit side at any address). F16C when the CPU
 * has it and the hook allows, else the exact software code: the same bits
 * either way. Round to nearest even, NaN stays NaN (quieted), overflow is
 * inf. */
void wf_f16_to_f32_block(float *restrict dst, const wf_u16u *restrict src, size_t n);
void wf_f32_to_f16_block(wf_u16u *restrict dst, const float *restrict src, size_t n);

/* F16C float16 kernels, with reduce.c's float32 semantics (scale: times
 * the float factor in float32, as scale.c's software path). Return 0 (doing
 * nothing) when F16C is not in use; the caller then takes the software
 * path. d may equal a, b or s; no other overlap. */
int wf_f16_reduce_hw(weft_reduce_op op, void *d, const void *a, const void *b, size_t n);
int wf_f16_scale_hw(void *d, const void *s, size_t n, float factor);

/* Test hook: allow (1, the default) or forbid (0) the F16C path, so a test
 * can run the software path on a machine that has F16C. Thread-safe. */
void wf_half_allow_hw(int allow);
/* 1 if the F16C path is in use now (CPU has it and it is allowed). */
int wf_half_hw_active(void);

#endif
