/* reduce.c - wf_reduce / wf_reduce3: element-wise reduction of two buffers
 * for every dtype x op (semantics in reduce.h).
 *
 * Speed: once the data is in memory these loops should run at memory
 * bandwidth, so each (type, op) is a plain loop the compiler vectorises,
 * with an AVX2 clone (WF_CLONES). Loops are blocked by WF_BLK because gcc's
 * -O2 cost model only vectorises a loop whose trip count is a multiple of
 * the vector width. Every kernel has restrict pointers; the cases where the
 * caller's buffers alias are turned into non-aliasing calls by the dispatch
 * (see wf_reduce3).
 *
 * Integers: sum and product wrap, so they are computed in the unsigned type
 * of the width, which gives the same bits for signed types (no signed
 * overflow). bfloat16: each element widened to float32, the float32 op,
 * rounded back, all in one vectorised loop. float16: the F16C kernels of
 * half.c, else float32 scratch blocks with the software conversions. */
#include "reduce/reduce.h"

#include <string.h>

#include "reduce/reduce_impl.h"
#include "util/log.h"

#define WF_BLK 64

/* ------------------------------------------------------------- the ops */
/* uint8/uint16 promote to int: multiply as unsigned so 65535 * 65535 does
 * not overflow int. */
static inline uint8_t wf_add_u8(uint8_t a, uint8_t b) { return (uint8_t)((unsigned)a + b); }
static inline uint16_t wf_add_u16(uint16_t a, uint16_t b) { return (uint16_t)((unsigned)a + b); }
static inline uint32_t wf_add_u32(uint32_t a, uint32_t b) { return a + b; }
static inline uint64_t wf_add_u64(uint64_t a, uint64_t b) { return a + b; }
static inline uint8_t wf_mul_u8(uint8_t a, uint8_t b) { return (uint8_t)((unsigned)a * b); }
static inline uint16_t wf_mul_u16(uint16_t a, uint16_t b) { return (uint16_t)((unsigned)a * b); }
static inline uint32_t wf_mul_u32(uint32_t a, uint32_t b) { return a * b; }
static inline uint64_t wf_mul_u64(uint64_t a, uint64_t b) { return a * b; }

static inline uint8_t wf_min_u8(uint8_t a, uint8_t b) { return a < b ? a : b; }
static inline uint8_t wf_max_u8(uint8_t a, uint8_t b) { return a > b ? a : b; }
static inline int8_t wf_min_i8(int8_t a, int8_t b) { return a < b ? a : b; }
static inline int8_t wf_max_i8(int8_t a, int8_t b) { return a > b ? a : b; }
static inline uint16_t wf_min_u16(uint16_t a, uint16_t b) { return a < b ? a : b; }
static inline uint16_t wf_max_u16(uint16_t a, uint16_t b) { return a > b ? a : b; }
static inline int16_t wf_min_i16(int16_t a, int16_t b) { return a < b ? a : b; }
static inline int16_t wf_max_i16(int16_t a, int16_t b) { return a > b ? a : b; }
static inline int32_t wf_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t wf_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int64_t wf_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t wf_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

static inline float wf_add_f32(float a, float b) { return a + b; }
static inline float wf_mul_f32(float a, float b) { return a * b; }
static inline double wf_add_f64(double a, double b) { return a + b; }
static inline double wf_mul_f64(double a, double b) { return a * b; }

/* IEEE 754-2019 minimum/maximum: NaN if either operand is NaN (the first
 * NaN wins), and -0 < +0. The signed-zero rule makes the result independent
 * of operand order, so ranks that reduce in different orders still agree. */
/* The sign is read from the bits: gcc does not vectorise signbit() on double. */
static inline int wf_neg_f32(float a) {
  int32_t i;
  memcpy(&i, &a, sizeof i);
  return i < 0;
}
static inline int wf_neg_f64(double a) {
  int64_t i;
  memcpy(&i, &a, sizeof i);
  return i < 0;
}
static inline float wf_min_f32(float a, float b) { return (a != a || a < b || (a == b && wf_neg_f32(a))) ? a : b; }
static inline float wf_max_f32(float a, float b) { return (a != a || a > b || (a == b && !wf_neg_f32(a))) ? a : b; }
static inline double wf_min_f64(double a, double b) { return (a != a || a < b || (a == b && wf_neg_f64(a))) ? a : b; }
static inline double wf_max_f64(double a, double b) { return (a != a || a > b || (a == b && !wf_neg_f64(a))) ? a : b; }

/* bfloat16: the float32 op, rounded back to nearest even. */
static inline uint16_t wf_add_bf16(uint16_t a, uint16_t b) {
  return wf_f32_to_bf16_inl(wf_bf16_to_f32_inl(a) + wf_bf16_to_f32_inl(b));
}
static inline uint16_t wf_mul_bf16(uint16_t a, uint16_t b) {
  return wf_f32_to_bf16_inl(wf_bf16_to_f32_inl(a) * wf_bf16_to_f32_inl(b));
}
static inline uint16_t wf_min_bf16(uint16_t a, uint16_t b) {
  return wf_f32_to_bf16_inl(wf_min_f32(wf_bf16_to_f32_inl(a), wf_bf16_to_f32_inl(b)));
}
static inline uint16_t wf_max_bf16(uint16_t a, uint16_t b) {
  return wf_f32_to_bf16_inl(wf_max_f32(wf_bf16_to_f32_inl(a), wf_bf16_to_f32_inl(b)));
}

/* bool: any nonzero byte is true, the result is 0 or 1. */
static inline uint8_t wf_or_bool(uint8_t a, uint8_t b) { return (uint8_t)((a != 0) | (b != 0)); }
static inline uint8_t wf_and_bool(uint8_t a, uint8_t b) { return (uint8_t)((a != 0) & (b != 0)); }

/* ---------------------------------------------------------- the kernels */
/* acc: x[i] = OP(x[i], y[i]).  k3: d[i] = OP(a[i], b[i]) (a may equal b:
 * both are only read). T is a byte-aligned element type (reduce_impl.h). */
typedef void (*wf_acc_fn)(void *restrict x, const void *restrict y, size_t n);
typedef void (*wf_k3_fn)(void *restrict d, const void *restrict a, const void *restrict b, size_t n);

#define WF_DEF_REDUCE(acc_name, k3_name, T, OP)                                                                  \
  WF_CLONES static void acc_name(void *restrict xv, const void *restrict yv, size_t n) {                         \
    T *restrict x = xv;                                                                                          \
    const T *restrict y = yv;                                                                                    \
    size_t i = 0;                                                                                                \
    for (; i + WF_BLK <= n; i += WF_BLK)                                                                         \
      for (size_t j = i; j < i + WF_BLK; j++) x[j] = OP(x[j], y[j]);                                             \
    for (; i < n; i++) x[i] = OP(x[i], y[i]);                                                                    \
  }                                                                                                              \
  WF_CLONES static void k3_name(void *restrict dv, const void *restrict av, const void *restrict bv, size_t n) { \
    T *restrict d = dv;                                                                                          \
    const T *restrict a = av;                                                                                    \
    const T *restrict b = bv;                                                                                    \
    size_t i = 0;                                                                                                \
    for (; i + WF_BLK <= n; i += WF_BLK)                                                                         \
      for (size_t j = i; j < i + WF_BLK; j++) d[j] = OP(a[j], b[j]);                                             \
    for (; i < n; i++) d[i] = OP(a[i], b[i]);                                                                    \
  }

WF_DEF_REDUCE(wf_sum_u8_acc, wf_sum_u8_k3, wf_u8u, wf_add_u8)
WF_DEF_REDUCE(wf_sum_u16_acc, wf_sum_u16_k3, wf_u16u, wf_add_u16)
WF_DEF_REDUCE(wf_sum_u32_acc, wf_sum_u32_k3, wf_u32u, wf_add_u32)
WF_DEF_REDUCE(wf_sum_u64_acc, wf_sum_u64_k3, wf_u64u, wf_add_u64)
WF_DEF_REDUCE(wf_prod_u8_acc, wf_prod_u8_k3, wf_u8u, wf_mul_u8)
WF_DEF_REDUCE(wf_prod_u16_acc, wf_prod_u16_k3, wf_u16u, wf_mul_u16)
WF_DEF_REDUCE(wf_prod_u32_acc, wf_prod_u32_k3, wf_u32u, wf_mul_u32)
WF_DEF_REDUCE(wf_prod_u64_acc, wf_prod_u64_k3, wf_u64u, wf_mul_u64)

WF_DEF_REDUCE(wf_min_u8_acc, wf_min_u8_k3, wf_u8u, wf_min_u8)
WF_DEF_REDUCE(wf_max_u8_acc, wf_max_u8_k3, wf_u8u, wf_max_u8)
WF_DEF_REDUCE(wf_min_i8_acc, wf_min_i8_k3, wf_i8u, wf_min_i8)
WF_DEF_REDUCE(wf_max_i8_acc, wf_max_i8_k3, wf_i8u, wf_max_i8)
WF_DEF_REDUCE(wf_min_u16_acc, wf_min_u16_k3, wf_u16u, wf_min_u16)
WF_DEF_REDUCE(wf_max_u16_acc, wf_max_u16_k3, wf_u16u, wf_max_u16)
WF_DEF_REDUCE(wf_min_i16_acc, wf_min_i16_k3, wf_i16u, wf_min_i16)
WF_DEF_REDUCE(wf_max_i16_acc, wf_max_i16_k3, wf_i16u, wf_max_i16)
WF_DEF_REDUCE(wf_min_i32_acc, wf_min_i32_k3, wf_i32u, wf_min_i32)
WF_DEF_REDUCE(wf_max_i32_acc, wf_max_i32_k3, wf_i32u, wf_max_i32)
WF_DEF_REDUCE(wf_min_i64_acc, wf_min_i64_k3, wf_i64u, wf_min_i64)
WF_DEF_REDUCE(wf_max_i64_acc, wf_max_i64_k3, wf_i64u, wf_max_i64)

WF_DEF_REDUCE(wf_sum_f32_acc, wf_sum_f32_k3, wf_f32u, wf_add_f32)
WF_DEF_REDUCE(wf_prod_f32_acc, wf_prod_f32_k3, wf_f32u, wf_mul_f32)
WF_DEF_REDUCE(wf_min_f32_acc, wf_min_f32_k3, wf_f32u, wf_min_f32)
WF_DEF_REDUCE(wf_max_f32_acc, wf_max_f32_k3, wf_f32u, wf_max_f32)
WF_DEF_REDUCE(wf_sum_f64_acc, wf_sum_f64_k3, wf_f64u, wf_add_f64)
WF_DEF_REDUCE(wf_prod_f64_acc, wf_prod_f64_k3, wf_f64u, wf_mul_f64)
WF_DEF_REDUCE(wf_min_f64_acc, wf_min_f64_k3, wf_f64u, wf_min_f64)
WF_DEF_REDUCE(wf_max_f64_acc, wf_max_f64_k3, wf_f64u, wf_max_f64)

WF_DEF_REDUCE(wf_sum_bf16_acc, wf_sum_bf16_k3, wf_u16u, wf_add_bf16)
WF_DEF_REDUCE(wf_prod_bf16_acc, wf_prod_bf16_k3, wf_u16u, wf_mul_bf16)
WF_DEF_REDUCE(wf_min_bf16_acc, wf_min_bf16_k3, wf_u16u, wf_min_bf16)
WF_DEF_REDUCE(wf_max_bf16_acc, wf_max_bf16_k3, wf_u16u, wf_max_bf16)

WF_DEF_REDUCE(wf_or_bool_acc, wf_or_bool_k3, wf_u8u, wf_or_bool)
WF_DEF_REDUCE(wf_and_bool_acc, wf_and_bool_k3, wf_u8u, wf_and_bool)

/* ----------------------------------------------------------- the table */
typedef struct wf_kernel {
  wf_acc_fn acc;
  wf_k3_fn k3;
} wf_kernel;

/* One row per dtype; columns in weft_reduce_op order: sum, average (= sum),
 * min, max, product. Signed sum/product share the unsigned kernel of the
 * width (same bits). float16 has no row: see wf_reduce_f16. */
/* clang-format off */
static const wf_kernel wf_table[WEFT_DTYPE_COUNT_][WEFT_OP_COUNT_] = {
    [WEFT_DTYPE_UINT8] = {{wf_sum_u8_acc, wf_sum_u8_k3}, {wf_sum_u8_acc, wf_sum_u8_k3},
                          {wf_min_u8_acc, wf_min_u8_k3}, {wf_max_u8_acc, wf_max_u8_k3},
                          {wf_prod_u8_acc, wf_prod_u8_k3}},
    [WEFT_DTYPE_INT8] = {{wf_sum_u8_acc, wf_sum_u8_k3}, {wf_sum_u8_acc, wf_sum_u8_k3},
                         {wf_min_i8_acc, wf_min_i8_k3}, {wf_max_i8_acc, wf_max_i8_k3},
                         {wf_prod_u8_acc, wf_prod_u8_k3}},
    [WEFT_DTYPE_UINT16] = {{wf_sum_u16_acc, wf_sum_u16_k3}, {wf_sum_u16_acc, wf_sum_u16_k3},
                           {wf_min_u16_acc, wf_min_u16_k3}, {wf_max_u16_acc, wf_max_u16_k3},
                           {wf_prod_u16_acc, wf_prod_u16_k3}},
    [WEFT_DTYPE_INT16] = {{wf_sum_u16_acc, wf_sum_u16_k3}, {wf_sum_u16_acc, wf_sum_u16_k3},
                          {wf_min_i16_acc, wf_min_i16_k3}, {wf_max_i16_acc, wf_max_i16_k3},
                          {wf_prod_u16_acc, wf_prod_u16_k3}},
    [WEFT_DTYPE_INT32] = {{wf_sum_u32_acc, wf_sum_u32_k3}, {wf_sum_u32_acc, wf_sum_u32_k3},
                          {wf_min_i32_acc, wf_min_i32_k3}, {wf_max_i32_acc, wf_max_i32_k3},
                          {wf_prod_u32_acc, wf_prod_u32_k3}},
    [WEFT_DTYPE_INT64] = {{wf_sum_u64_acc, wf_sum_u64_k3}, {wf_sum_u64_acc, wf_sum_u64_k3},
                          {wf_min_i64_acc, wf_min_i64_k3}, {wf_max_i64_acc, wf_max_i64_k3},
                          {wf_prod_u64_acc, wf_prod_u64_k3}},
    [WEFT_DTYPE_FLOAT32] = {{wf_sum_f32_acc, wf_sum_f32_k3}, {wf_sum_f32_acc, wf_sum_f32_k3},
                            {wf_min_f32_acc, wf_min_f32_k3}, {wf_max_f32_acc, wf_max_f32_k3},
                            {wf_prod_f32_acc, wf_prod_f32_k3}},
    [WEFT_DTYPE_FLOAT64] = {{wf_sum_f64_acc, wf_sum_f64_k3}, {wf_sum_f64_acc, wf_sum_f64_k3},
                            {wf_min_f64_acc, wf_min_f64_k3}, {wf_max_f64_acc, wf_max_f64_k3},
                            {wf_prod_f64_acc, wf_prod_f64_k3}},
    [WEFT_DTYPE_BFLOAT16] = {{wf_sum_bf16_acc, wf_sum_bf16_k3}, {wf_sum_bf16_acc, wf_sum_bf16_k3},
                             {wf_min_bf16_acc, wf_min_bf16_k3}, {wf_max_bf16_acc, wf_max_bf16_k3},
                             {wf_prod_bf16_acc, wf_prod_bf16_k3}},
    [WEFT_DTYPE_BOOL] = {{wf_or_bool_acc, wf_or_bool_k3}, {wf_or_bool_acc, wf_or_bool_k3},
                         {wf_and_bool_acc, wf_and_bool_k3}, {wf_or_bool_acc, wf_or_bool_k3},
                         {wf_and_bool_acc, wf_and_bool_k3}},
};
/* clang-format on */

/* Callers validate dtype and op long before data moves, so a bad one here
 * is a bug in weft: say so loudly rather than write garbage. */
static int wf_valid(weft_dtype t, weft_reduce_op op) {
  if ((unsigned)t < WEFT_DTYPE_COUNT_ && (unsigned)op < WEFT_OP_COUNT_) return 1;
  WF_WARN(WF_SUB_ALL, "reduce: invalid dtype %d or op %d (internal error, buffer left unchanged)", (int)t, (int)op);
  return 0;
}

/* float16: the F16C kernel, else d = a op b through float32 scratch with
 * the software conversions. All of a block is read before any of it is
 * written, so d may equal a and/or b. */
static void wf_reduce_f16(weft_reduce_op op, void *d, const void *a, const void *b, size_t n) {
  if (wf_f16_reduce_hw(op, d, a, b, n)) return;
  float fa[WF_HALF_BLOCK], fb[WF_HALF_BLOCK];
  wf_acc_fn acc = wf_table[WEFT_DTYPE_FLOAT32][op].acc;
  wf_u16u *dp = d;
  const wf_u16u *ap = a, *bp = b;
  for (size_t i = 0; i < n; i += WF_HALF_BLOCK) {
    size_t m = n - i < WF_HALF_BLOCK ? n - i : WF_HALF_BLOCK;
    wf_f16_to_f32_block(fa, ap + i, m);
    wf_f16_to_f32_block(fb, bp + i, m);
    acc(fa, fb, m);
    wf_f32_to_f16_block(dp + i, fa, m);
  }
}

/* Bytes of scratch for the aliasing cases below. */
#define WF_ALIAS_SCRATCH 4096

void wf_reduce3(weft_dtype t, weft_reduce_op op, void *dst, const void *a, const void *b, size_t count) {
  if (count == 0 || !wf_valid(t, op)) return;
  if (t == WEFT_DTYPE_FLOAT16) {
    wf_reduce_f16(op, dst, a, b, count);
    return;
  }
  const wf_kernel *k = &wf_table[t][op];
  if (dst != a && dst != b) { /* the common case; a == b is fine (read only) */
    k->k3(dst, a, b, count);
    return;
  }
  if (dst == a && dst != b) {
    k->acc(dst, b, count);
    return;
  }
  /* dst == b (and maybe == a): copy dst's old values out block by block so
   * no kernel sees a written buffer under two names; a op b keeps the
   * operand order (it decides which NaN payload survives). */
  _Alignas(64) unsigned char old[WF_ALIAS_SCRATCH];
  size_t esz = wf_reduce_elem_size(t), per = WF_ALIAS_SCRATCH / esz;
  unsigned char *d = dst;
  const unsigned char *ap = a;
  for (size_t i = 0; i < count; i += per) {
    size_t m = count - i < per ? count - i : per;
    memcpy(old, d + i * esz, m * esz);
    if (dst == a)
      k->acc(d + i * esz, old, m); /* a == b == dst: x op x */
    else
      k->k3(d + i * esz, ap + i * esz, old, m);
  }
}

void wf_reduce(weft_dtype t, weft_reduce_op op, void *dst, const void *src, size_t count) {
  wf_reduce3(t, op, dst, dst, src, count);
}
