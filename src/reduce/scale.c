/* scale.c - wf_scale / wf_scale_copy: multiply every element by a double
 * factor (prescale, postscale, and the 1/n of a float WEFT_OP_AVERAGE).
 *
 * The arithmetic is Horovod 0.28's CPU ScaleBuffer (collective_operations.cc
 * and .h), so scaled results are bit-identical to Horovod's:
 *  - float32: x * (float)f in float32 (the factor rounded to float first);
 *  - float16, bfloat16: (float)x * (float)f in float32, that float product
 *    rounded to 16 bits (nearest even), as Horovod's F16C and scalar float16
 *    loops do (bfloat16 has no Horovod CPU kernel; it follows float16);
 *  - float64: x * f in double;
 *  - integers: x * f in double, converted back truncating toward zero like
 *    a C cast. Out of range (and NaN), where the C conversion is undefined,
 *    weft saturates at the type's limits (NaN -> 0) instead.
 * float16 uses the F16C kernel of half.c when it can (same bits). Loops are
 * blocked like reduce.c's for gcc -O2. */
#include <string.h>

#include "reduce/reduce.h"
#include "reduce/reduce_impl.h"
#include "util/copy.h"
#include "util/log.h"

#define WF_BLK 64

/* ------------------------------------------------- double -> element */
/* Clamp before converting: a value in (MAX, MAX + 1) truncates to MAX
 * anyway, and the bounds are exact in double for widths up to 32 bits. */
static inline uint8_t wf_sat_u8(double v) {
  v = v == v ? v : 0.0;
  v = v > 0.0 ? v : 0.0;
  v = v < 255.0 ? v : 255.0;
  return (uint8_t)v;
}
static inline int8_t wf_sat_i8(double v) {
  v = v == v ? v : 0.0;
  v = v > -128.0 ? v : -128.0;
  v = v < 127.0 ? v : 127.0;
  return (int8_t)v;
}
static inline uint16_t wf_sat_u16(double v) {
  v = v == v ? v : 0.0;
  v = v > 0.0 ? v : 0.0;
  v = v < 65535.0 ? v : 65535.0;
  return (uint16_t)v;
}
static inline int16_t wf_sat_i16(double v) {
  v = v == v ? v : 0.0;
  v = v > -32768.0 ? v : -32768.0;
  v = v < 32767.0 ? v : 32767.0;
  return (int16_t)v;
}
static inline int32_t wf_sat_i32(double v) {
  v = v == v ? v : 0.0;
  v = v > -2147483648.0 ? v : -2147483648.0;
  v = v < 2147483647.0 ? v : 2147483647.0;
  return (int32_t)v;
}
/* INT64_MAX is not a double: test against 2^63 instead of clamping. */
static inline int64_t wf_sat_i64(double v) {
  if (v != v) return 0;
  if (v >= 0x1p63) return INT64_MAX;
  if (v < -0x1p63) return INT64_MIN;
  return (int64_t)v;
}
static inline float wf_to_f32(float v) { return v; }
static inline double wf_to_f64(double v) { return v; }
#define WF_DBL(x) ((double)(x))
#define WF_FLT(x) ((float)(x))

/* ---------------------------------------------------------- the kernels */
typedef void (*wf_scale_fn)(void *x, size_t n, double f);
typedef void (*wf_scale_copy_fn)(void *restrict d, const void *restrict s, size_t n, double f);

/* in place: x[i] = CONV(LOAD(x[i]) * k); copy: d[i] = CONV(LOAD(s[i]) * k),
 * with k = (FT)f. LOAD widens an element to FT (double for integers and
 * float64, float for float32 and bfloat16), so the product is an FT one. */
#define WF_DEF_SCALE(inplace_name, copy_name, T, FT, LOAD, CONV)                                    \
  WF_CLONES static void inplace_name(void *xv, size_t n, double f) {                                \
    T *x = xv;                                                                                      \
    const FT k = (FT)f;                                                                             \
    size_t i = 0;                                                                                   \
    for (; i + WF_BLK <= n; i += WF_BLK)                                                            \
      for (size_t j = i; j < i + WF_BLK; j++) x[j] = CONV(LOAD(x[j]) * k);                          \
    for (; i < n; i++) x[i] = CONV(LOAD(x[i]) * k);                                                 \
  }                                                                                                 \
  WF_CLONES static void copy_name(void *restrict dv, const void *restrict sv, size_t n, double f) { \
    T *restrict d = dv;                                                                             \
    const T *restrict s = sv;                                                                       \
    const FT k = (FT)f;                                                                             \
    size_t i = 0;                                                                                   \
    for (; i + WF_BLK <= n; i += WF_BLK)                                                            \
      for (size_t j = i; j < i + WF_BLK; j++) d[j] = CONV(LOAD(s[j]) * k);                          \
    for (; i < n; i++) d[i] = CONV(LOAD(s[i]) * k);                                                 \
  }

WF_DEF_SCALE(wf_scale_u8, wf_scale_copy_u8, wf_u8u, double, WF_DBL, wf_sat_u8)
WF_DEF_SCALE(wf_scale_i8, wf_scale_copy_i8, wf_i8u, double, WF_DBL, wf_sat_i8)
WF_DEF_SCALE(wf_scale_u16, wf_scale_copy_u16, wf_u16u, double, WF_DBL, wf_sat_u16)
WF_DEF_SCALE(wf_scale_i16, wf_scale_copy_i16, wf_i16u, double, WF_DBL, wf_sat_i16)
WF_DEF_SCALE(wf_scale_i32, wf_scale_copy_i32, wf_i32u, double, WF_DBL, wf_sat_i32)
WF_DEF_SCALE(wf_scale_i64, wf_scale_copy_i64, wf_i64u, double, WF_DBL, wf_sat_i64)
WF_DEF_SCALE(wf_scale_f32, wf_scale_copy_f32, wf_f32u, float, WF_FLT, wf_to_f32)
WF_DEF_SCALE(wf_scale_f64, wf_scale_copy_f64, wf_f64u, double, WF_DBL, wf_to_f64)
WF_DEF_SCALE(wf_scale_bf16, wf_scale_copy_bf16, wf_u16u, float, wf_bf16_to_f32_inl, wf_f32_to_bf16_inl)

/* float32 scratch of a float16 block (software path), in place */
WF_CLONES static void wf_scale_f32_block(float *x, size_t n, float k) {
  size_t i = 0;
  for (; i + WF_BLK <= n; i += WF_BLK)
    for (size_t j = i; j < i + WF_BLK; j++) x[j] *= k;
  for (; i < n; i++) x[i] *= k;
}

/* bool: x becomes (x != 0 && f != 0); f is the same for every element. */
static void wf_scale_bool(void *xv, size_t n, double f) {
  uint8_t *x = xv;
  if (f == 0.0) {
    memset(x, 0, n);
    return;
  }
  for (size_t i = 0; i < n; i++) x[i] = x[i] != 0;
}
static void wf_scale_copy_bool(void *restrict dv, const void *restrict sv, size_t n, double f) {
  uint8_t *restrict d = dv;
  const uint8_t *restrict s = sv;
  if (f == 0.0) {
    memset(d, 0, n);
    return;
  }
  for (size_t i = 0; i < n; i++) d[i] = s[i] != 0;
}

static const struct {
  wf_scale_fn inplace;
  wf_scale_copy_fn copy;
} wf_scale_table[WEFT_DTYPE_COUNT_] = {
    [WEFT_DTYPE_UINT8] = {wf_scale_u8, wf_scale_copy_u8},
    [WEFT_DTYPE_INT8] = {wf_scale_i8, wf_scale_copy_i8},
    [WEFT_DTYPE_UINT16] = {wf_scale_u16, wf_scale_copy_u16},
    [WEFT_DTYPE_INT16] = {wf_scale_i16, wf_scale_copy_i16},
    [WEFT_DTYPE_INT32] = {wf_scale_i32, wf_scale_copy_i32},
    [WEFT_DTYPE_INT64] = {wf_scale_i64, wf_scale_copy_i64},
    [WEFT_DTYPE_FLOAT32] = {wf_scale_f32, wf_scale_copy_f32},
    [WEFT_DTYPE_FLOAT64] = {wf_scale_f64, wf_scale_copy_f64},
    [WEFT_DTYPE_BFLOAT16] = {wf_scale_bf16, wf_scale_copy_bf16},
    [WEFT_DTYPE_BOOL] = {wf_scale_bool, wf_scale_copy_bool},
    /* FLOAT16: wf_scale_f16 */
};

/* float16: the F16C kernel, else convert a block, scale it in float32
 * scratch by (float)f, convert back. The whole block is read before it is written, so
 * dst may equal src. */
static void wf_scale_f16(void *dst, const void *src, size_t n, double f) {
  const float k = (float)f;
  if (wf_f16_scale_hw(dst, src, n, k)) return;
  float tmp[WF_HALF_BLOCK];
  wf_u16u *d = dst;
  const wf_u16u *s = src;
  for (size_t i = 0; i < n; i += WF_HALF_BLOCK) {
    size_t m = n - i < WF_HALF_BLOCK ? n - i : WF_HALF_BLOCK;
    wf_f16_to_f32_block(tmp, s + i, m);
    wf_scale_f32_block(tmp, m, k);
    wf_f32_to_f16_block(d + i, tmp, m);
  }
}

void wf_scale_copy(weft_dtype t, void *dst, const void *src, size_t count, double factor) {
  if (count == 0) return;
  if ((unsigned)t >= WEFT_DTYPE_COUNT_) {
    WF_WARN(WF_SUB_ALL, "scale: invalid dtype %d (internal error, buffer left unchanged)", (int)t);
    return;
  }
  if (factor == 1.0) { /* exact, keeps int64 beyond 2^53 and NaN payloads */
    if (dst != src) wf_copy(dst, src, count * wf_reduce_elem_size(t));
    return;
  }
  if (t == WEFT_DTYPE_FLOAT16)
    wf_scale_f16(dst, src, count, factor);
  else if (dst == src)
    wf_scale_table[t].inplace(dst, count, factor);
  else
    wf_scale_table[t].copy(dst, src, count, factor);
}

void wf_scale(weft_dtype t, void *buf, size_t count, double factor) { wf_scale_copy(t, buf, buf, count, factor); }

/* Integer average: an exact division of the (wrapped) sum, truncating
 * toward zero, instead of a trip through double that loses int64 bits. */
#define DIV_LOOP(T)                                                            \
  do {                                                                         \
    T *p = buf;                                                                \
    for (size_t i = 0; i < count; i++) p[i] = (T)(p[i] / (T)n);                \
  } while (0)
static int divide_int(weft_dtype t, void *buf, size_t count, int n) {
  switch (t) {
    case WEFT_DTYPE_UINT8: DIV_LOOP(uint8_t); return 1;
    case WEFT_DTYPE_INT8: DIV_LOOP(int8_t); return 1;
    case WEFT_DTYPE_UINT16: DIV_LOOP(uint16_t); return 1;
    case WEFT_DTYPE_INT16: DIV_LOOP(int16_t); return 1;
    case WEFT_DTYPE_INT32: DIV_LOOP(int32_t); return 1;
    case WEFT_DTYPE_INT64: DIV_LOOP(int64_t); return 1;
    default: return 0;
  }
}

void wf_post_scale(weft_dtype t, weft_reduce_op op, double postscale, void *buf, size_t count, int n) {
  if (op == WEFT_OP_AVERAGE && !divide_int(t, buf, count, n)) postscale /= n;
  wf_scale(t, buf, count, postscale);
}
