/* dtype.c - names and sizes of dtypes and reduce ops, the version string. */
#include "weft.h"
#include "wire/wire.h"

#define STR2(x) #x
#define STR(x) STR2(x)

size_t weft_dtype_size(weft_dtype t) {
  static const size_t sz[WEFT_DTYPE_COUNT_] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  return (unsigned)t < WEFT_DTYPE_COUNT_ ? sz[t] : 0;
}

const char *weft_dtype_name(weft_dtype t) {
  static const char *const n[WEFT_DTYPE_COUNT_] = {"uint8",   "int8",     "uint16",  "int16",   "int32", "int64",
                                                   "float16", "bfloat16", "float32", "float64", "bool"};
  return (unsigned)t < WEFT_DTYPE_COUNT_ ? n[t] : "unknown";
}

const char *weft_reduce_op_name(weft_reduce_op op) {
  static const char *const n[WEFT_OP_COUNT_] = {"sum", "average", "min", "max", "product"};
  return (unsigned)op < WEFT_OP_COUNT_ ? n[op] : "unknown";
}

const char *weft_version(void) {
  return STR(WEFT_VERSION_MAJOR) "." STR(WEFT_VERSION_MINOR) "." STR(WEFT_VERSION_PATCH);
}
