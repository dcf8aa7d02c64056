/* reduce.h - reduction and scaling kernels for every dtype x op.
 * Semantics are those of a plain reference loop, element by element:
 *  - integers wrap on overflow (computed in the unsigned type of the width);
 *  - floats follow IEEE (NaN propagates through sum/product; min/max return
 *    NaN if either operand is NaN, like torch.minimum/maximum);
 *  - float16/bfloat16 are computed in float32 and rounded back to nearest even;
 *  - bool (one byte, any nonzero is true, results are 0/1): sum and max are
 *    logical or, min and product logical and;
 *  - WEFT_OP_AVERAGE reduces like WEFT_OP_SUM (the division is a postscale). */
#ifndef WF_REDUCE_H
#define WF_REDUCE_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* dst[i] = dst[i] op src[i] for count elements. dst and src may be the same
 * pointer but must not otherwise overlap. */
void wf_reduce(weft_dtype t, weft_reduce_op op, void *dst, const void *src, size_t count);

/* dst[i] = a[i] op b[i]. dst may equal a or b; no other overlap. */
void wf_reduce3(weft_dtype t, weft_reduce_op op, void *dst, const void *a, const void *b, size_t count);

/* The rank-order fold, the one reduction order of weft: dst = ((x[0] op
 * x[1]) op x[2]) ... op x[n-1], element by element over count elements, so a
 * result's bits depend neither on the algorithm, the size, the position nor
 * fusion. Every path that has all operands at hand folds with it (the board,
 * shm staging); the schedules that receive operands one at a time (direct,
 * cma) apply the same left fold step by step, in the same rank order.
 * dst may be x[0] or x[n-1]; if it is another operand, tmp (count elements)
 * takes the intermediate results, else tmp may be NULL. n == 1 copies. */
void wf_fold(weft_dtype t, weft_reduce_op op, void *dst, const void *const *x, int n, size_t count, void *tmp);

/* buf[i] = buf[i] * factor, as Horovod 0.28's CPU ScaleBuffer: float32 as
 * x * (float)factor in float32; float16/bfloat16 as (float)x * (float)factor
 * in float32, rounded to 16 bits; float64 in double; integers in double,
 * converted back truncating toward zero (saturating at the type's limits
 * where a C conversion would be undefined; NaN -> 0). bool becomes
 * (x != 0 && factor != 0). factor == 1.0 is a no-op. */
void wf_scale(weft_dtype t, void *buf, size_t count, double factor);

/* dst[i] = src[i] * factor (dst may equal src). factor == 1.0 is a copy. */
void wf_scale_copy(weft_dtype t, void *dst, const void *src, size_t count, double factor);

/* The last step of an allreduce or reducescatter: average and postscale, in
 * place. Floats: one wf_scale by postscale / n (divided in double, as
 * Horovod). Integers: an exact truncating division of the wrapped sum by n,
 * then wf_scale by postscale (Horovod multiplies by postscale / n instead,
 * which can land below the exact quotient: 49 * (1.0 / 49) < 1). */
void wf_post_scale(weft_dtype t, weft_reduce_op op, double postscale, void *buf, size_t count, int n);

/* IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN,
 * overflow becomes inf). */
float wf_f16_to_f32(uint16_t h);
uint16_t wf_f32_to_f16(float f);
float wf_bf16_to_f32(uint16_t h);
uint16_t wf_f32_to_bf16(float f);

#endif
