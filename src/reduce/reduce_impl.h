/* reduce_impl.h - private to src/reduce: what reduce.c, scale.c and half.c
 * share (the clone attribute, byte-aligned element types, the float16 /
 * bfloat16 block conversions) and a test hook. Not for other modules: they
 * use reduce.h. */
#ifndef WF_REDUCE_IMPL_H
#define WF_REDUCE_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Hot loops get an AVX2 clone next to the baseline one, picked once at load
 * time through an ifunc. Not under ThreadSanitizer: the ifunc resolvers run
 * while the dynamic loader is still relocating, before the TSan runtime is
 * up, and the process dies (seen with gcc 12 and clang 14). WF_NO_CLONES
 * turns them off by hand. */
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

/* Elements per block when float16/bfloat16 go through float32 scratch. */
#define WF_HALF_BLOCK 512

/* Block conversions between 16-bit floats (any alignment) and float32
 * scratch. Bit-identical whichever path runs: F16C (when the CPU has it and
 * the hook allows it) or the exact software code. Round to nearest even,
 * NaN stays NaN (quieted), overflow becomes inf. */
void wf_f16_to_f32_block(float *restrict dst, const wf_u16u *restrict src, size_t n);
void wf_f32_to_f16_block(wf_u16u *restrict dst, const float *restrict src, size_t n);
void wf_bf16_to_f32_block(float *restrict dst, const wf_u16u *restrict src, size_t n);
void wf_f32_to_bf16_block(wf_u16u *restrict dst, const float *restrict src, size_t n);

/* Test hook: allow (1, the default) or forbid (0) the F16C path, so a test
 * can run the software path on a machine that has F16C. Thread-safe. */
void wf_half_allow_hw(int allow);
/* 1 if the F16C path is in use now (CPU has it and it is allowed). */
int wf_half_hw_active(void);

#endif
