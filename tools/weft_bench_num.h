/* weft_bench_num.h - weft-bench's element helpers (weft_bench_num.c): the
 * pattern's hash, half-precision conversions, and typed stores and loads. */
#ifndef WEFT_BENCH_NUM_H
#define WEFT_BENCH_NUM_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

uint64_t wb_mix64(uint64_t x); /* splitmix64 finaliser */
uint16_t wb_f32_to_f16(float f);
double wb_f16_to_double(uint16_t h);
uint16_t wb_f32_to_bf16(float f);
double wb_bf16_to_double(uint16_t h);
int wb_is_float(weft_dtype t);
int wb_is_signed(weft_dtype t);
int64_t wb_exact_limit(weft_dtype t);
double wb_float_eps(weft_dtype t);
void wb_store(weft_dtype t, void *buf, size_t i, int64_t v);
double wb_load_f(weft_dtype t, const void *buf, size_t i);
int64_t wb_load_i(weft_dtype t, const void *buf, size_t i);

#endif
