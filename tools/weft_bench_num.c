/* weft_bench_num.c - weft-bench's element helpers: the pattern's hash,
 * float16/bfloat16 conversions exact for the values weft-bench encodes, and
 * stores and loads of every dtype (weft_bench.c fills and checks with them). */
#include "weft_bench_num.h"

#include <math.h>
#include <string.h>

uint64_t wb_mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Exact for every value this file encodes (small integers); rounds to nearest
 * even otherwise, so a decoded average is compared fairly. */
uint16_t wb_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int32_t he = (int32_t)e - 127 + 15;
  if (he >= 31) return (uint16_t)(sign | 0x7c00u);
  if (he <= 0) { /* subnormal half, or zero */
    if (he < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - he), h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)h;
}

double wb_f16_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
  return (h & 0x8000) ? -v : v;
}

uint16_t wb_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

double wb_bf16_to_double(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

int wb_is_float(weft_dtype t) {
  return t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16 || t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64;
}
int wb_is_signed(weft_dtype t) {
  return t == WEFT_DTYPE_INT8 || t == WEFT_DTYPE_INT16 || t == WEFT_DTYPE_INT32 || t == WEFT_DTYPE_INT64 ||
         wb_is_float(t);
}

/* Largest integer magnitude held exactly (and without overflow) by t. */
int64_t wb_exact_limit(weft_dtype t) {
  switch (t) {
  case WEFT_DTYPE_UINT8: return 255;
  case WEFT_DTYPE_INT8: return 127;
  case WEFT_DTYPE_UINT16: return 65535;
  case WEFT_DTYPE_INT16: return 32767;
  case WEFT_DTYPE_INT32: return INT32_MAX;
  case WEFT_DTYPE_INT64: return INT64_C(1) << 62;
  case WEFT_DTYPE_FLOAT16: return 2048;
  case WEFT_DTYPE_BFLOAT16: return 256;
  case WEFT_DTYPE_FLOAT32: return INT64_C(1) << 24;
  case WEFT_DTYPE_FLOAT64: return INT64_C(1) << 53;
  default: return 1; /* bool */
  }
}

/* Relative rounding unit of a float dtype (for the average's tolerance). */
double wb_float_eps(weft_dtype t) {
  return t == WEFT_DTYPE_FLOAT16 ? 0x1p-10 : t == WEFT_DTYPE_BFLOAT16 ? 0x1p-7 : t == WEFT_DTYPE_FLOAT32 ? 0x1p-23 : 0x1p-52;
}

void wb_store(weft_dtype t, void *buf, size_t i, int64_t v) {
  switch (t) {
  case WEFT_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case WEFT_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case WEFT_DTYPE_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
  case WEFT_DTYPE_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case WEFT_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case WEFT_DTYPE_INT64: ((int64_t *)buf)[i] = v; break;
  case WEFT_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = wb_f32_to_f16((float)v); break;
  case WEFT_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = wb_f32_to_bf16((float)v); break;
  case WEFT_DTYPE_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case WEFT_DTYPE_FLOAT64: ((double *)buf)[i] = (double)v; break;
  default: ((uint8_t *)buf)[i] = (uint8_t)(v != 0); break;
  }
}

/* Element i as a double (floats) or an exact integer (the rest). */
double wb_load_f(weft_dtype t, const void *buf, size_t i) {
  switch (t) {
  case WEFT_DTYPE_FLOAT16: return wb_f16_to_double(((const uint16_t *)buf)[i]);
  case WEFT_DTYPE_BFLOAT16: return wb_bf16_to_double(((const uint16_t *)buf)[i]);
  case WEFT_DTYPE_FLOAT32: return ((const float *)buf)[i];
  default: return ((const double *)buf)[i];
  }
}

int64_t wb_load_i(weft_dtype t, const void *buf, size_t i) {
  switch (t) {
  case WEFT_DTYPE_UINT8: return ((const uint8_t *)buf)[i];
  case WEFT_DTYPE_INT8: return ((const int8_t *)buf)[i];
  case WEFT_DTYPE_UINT16: return ((const uint16_t *)buf)[i];
  case WEFT_DTYPE_INT16: return ((const int16_t *)buf)[i];
  case WEFT_DTYPE_INT32: return ((const int32_t *)buf)[i];
  case WEFT_DTYPE_INT64: return ((const int64_t *)buf)[i];
  default: return ((const uint8_t *)buf)[i]; /* bool: the raw byte, so 2 is caught */
  }
}
