/* feat_common.h - shared scaffolding of the training-scale feature tests
 * (tests/features): fusion, priority, process sets, join, stall inspector,
 * timeline. Header-only (static functions) so that every test stays one
 * executable built from one .c file, run as N ranks by weftrun.
 *
 * It provides: joining the world from weftrun's environment; per-case
 * reporting ("PASS rank R: case" / "FAIL rank R: case: why") and the exit
 * status; bounded waits (a hang is a failure that aborts the job, so the
 * peers stop too instead of running into their own timeouts); a
 * deterministic PRNG, so that any rank can compute every rank's input and
 * hence the exact expected result; float16/bfloat16 conversions written
 * here, independently of the library's. Only the public API (weft.h). */
#ifndef FEAT_COMMON_H
#define FEAT_COMMON_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

#define FEAT_FN static __attribute__((unused))
#define FEAT_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* A collective not complete after this long is a hang, never a blocked test. */
#define FEAT_WAIT_SECONDS 60.0
#define FEAT_MAX_FAIL_LINES 8

static weft_world *feat_world;
static int feat_rank = -1, feat_size = -1;
static atomic_int feat_failures;
static pthread_mutex_t feat_print_mu = PTHREAD_MUTEX_INITIALIZER;
static char feat_case_name[192];
static int feat_case_fails;

/* One whole line per call: all ranks share the launcher's output. */
FEAT_FN FEAT_PRINTF(1, 2) void feat_say(const char *fmt, ...) {
  char line[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&feat_print_mu);
  fprintf(stdout, "%s\n", line);
  fflush(stdout);
  pthread_mutex_unlock(&feat_print_mu);
}

FEAT_FN FEAT_PRINTF(1, 2) void feat_case(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(feat_case_name, sizeof feat_case_name, fmt, ap);
  va_end(ap);
  feat_case_fails = 0;
}

/* Records a failure of the current case; returns 0 for `return feat_fail()`. */
FEAT_FN FEAT_PRINTF(1, 2) int feat_fail(const char *fmt, ...) {
  char why[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&feat_failures, 1);
  if (++feat_case_fails <= FEAT_MAX_FAIL_LINES) feat_say("FAIL rank %d: %s: %s", feat_rank, feat_case_name, why);
  return 0;
}

FEAT_FN void feat_case_end(void) {
  if (feat_case_fails == 0)
    feat_say("PASS rank %d: %s", feat_rank, feat_case_name);
  else if (feat_case_fails > FEAT_MAX_FAIL_LINES)
    feat_say("FAIL rank %d: %s: %d failures in all", feat_rank, feat_case_name, feat_case_fails);
}

/* The job can no longer make progress (a submission failed that the peers
 * made, or a wait hung): abort so that the peers stop too, and exit. */
FEAT_FN FEAT_PRINTF(1, 2) _Noreturn void feat_fatal(const char *fmt, ...) {
  char why[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  feat_say("FAIL rank %d: %s: %s (fatal: aborting the job)", feat_rank, feat_case_name, why);
  if (feat_world) {
    weft_abort(feat_world, "a feature test rank failed fatally");
    weft_finalize(feat_world);
  }
  exit(1);
}

FEAT_FN double feat_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

FEAT_FN void feat_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

FEAT_FN void *feat_alloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) feat_fatal("out of memory allocating %zu bytes", bytes);
  return p;
}

/* Joins the world from weftrun's environment (again after a finalize: a
 * process may hold several worlds over time). */
FEAT_FN void feat_setup(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  feat_case("weft_init");
  weft_status st = weft_init(NULL, &feat_world);
  if (st != WEFT_OK || !feat_world) {
    feat_world = NULL;
    feat_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
  }
  feat_rank = weft_rank(feat_world);
  feat_size = weft_size(feat_world);
  if (feat_rank < 0 || feat_size < 1 || feat_rank >= feat_size) feat_fatal("bad world: rank %d size %d", feat_rank, feat_size);
}

/* Leaves the current world (failures are recorded, not fatal). */
FEAT_FN void feat_leave(void) {
  if (!feat_world) return;
  weft_status st = weft_finalize(feat_world);
  feat_world = NULL;
  if (st != WEFT_OK) {
    feat_case("weft_finalize");
    feat_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  }
}

/* Leaves the world; returns the process exit status. */
FEAT_FN int feat_teardown(void) {
  feat_leave();
  int n = atomic_load(&feat_failures);
  feat_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", feat_rank, n);
  return n ? 1 : 0;
}

/* A submission the peers also made failed here: they would wait forever. */
FEAT_FN void feat_submitted(weft_status st, weft_request *const *req, const char *what) {
  if (st != WEFT_OK || !*req) feat_fatal("submitting %s: %s: %s", what, weft_status_string(st), weft_last_error());
}

/* Bounded wait; a hang is fatal. Returns the request's status. */
FEAT_FN weft_status feat_wait(weft_request *req, const char *what) {
  weft_status st = weft_wait(req, FEAT_WAIT_SECONDS);
  if (st == WEFT_IN_PROGRESS) feat_fatal("%s: not complete after %.0f s", what, FEAT_WAIT_SECONDS);
  return st;
}

FEAT_FN int feat_wait_ok(weft_request *req, const char *what) {
  weft_status st = feat_wait(req, what);
  if (st != WEFT_OK) return feat_fail("%s: %s: %s", what, weft_status_string(st), weft_request_error(req));
  return 1;
}

/* A world barrier (used to line the ranks up between phases). */
FEAT_FN void feat_barrier(const char *name) {
  weft_request *r = NULL;
  feat_submitted(weft_barrier(weft_world_group(feat_world), name, NULL, &r), &r, name);
  if (weft_wait(r, FEAT_WAIT_SECONDS) != WEFT_OK)
    feat_fatal("barrier %s: %s", name, weft_request_error(r));
  weft_request_free(r);
}

/* ------------------------------------------------------------ values */
FEAT_FN uint64_t feat_mix(uint64_t x) { /* splitmix64 finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* The pseudo-random word of (stream, index, seed): stream is usually a rank. */
FEAT_FN uint64_t feat_hash(uint64_t stream, uint64_t index, uint64_t seed) {
  return feat_mix(feat_mix(seed * 0x9e3779b97f4a7c15ULL + stream) ^ (index * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
}

/* A uniform double in [0, 1) from a hash word. */
FEAT_FN double feat_unit(uint64_t h) { return (double)(h >> 11) * 0x1p-53; }

FEAT_FN size_t feat_esize(weft_dtype t) {
  static const size_t sz[WEFT_DTYPE_COUNT_] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  return (unsigned)t < WEFT_DTYPE_COUNT_ ? sz[t] : 0;
}

/* IEEE binary16 <-> binary32 (round to nearest even), independent of weft. */
FEAT_FN float feat_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    float f = (float)m * 0x1p-24f;
    return sign ? -f : f;
  }
  if (e == 31) bits = sign | 0x7f800000u | (m << 13);
  else bits = sign | ((e - 15 + 127) << 23) | (m << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

FEAT_FN uint16_t feat_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  float a = fabsf(f);
  if (a != a) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 0x1p-14f) return sign | (uint16_t)nearbyintf(a * 0x1p24f);
  int e;
  float m = frexpf(a, &e);                      /* a = m * 2^e, m in [0.5, 1) */
  float q = nearbyintf(ldexpf(m, 11));          /* 11 significant bits */
  if (q >= 2048.0f) {
    q /= 2.0f;
    e++;
  }
  uint32_t exp = (uint32_t)(e - 1 + 15), man = (uint32_t)q - 1024u;
  if (exp >= 31) return sign | 0x7c00;
  return (uint16_t)(sign | (exp << 10) | man);
}

FEAT_FN float feat_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

FEAT_FN uint16_t feat_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(x >> 16);
}

/* Element i of a buffer of dtype t, widened to double. */
FEAT_FN double feat_get(weft_dtype t, const void *buf, size_t i) {
  switch (t) {
    case WEFT_DTYPE_INT32: return ((const int32_t *)buf)[i];
    case WEFT_DTYPE_INT64: return (double)((const int64_t *)buf)[i];
    case WEFT_DTYPE_FLOAT16: return feat_f16_to_f32(((const uint16_t *)buf)[i]);
    case WEFT_DTYPE_BFLOAT16: return feat_bf16_to_f32(((const uint16_t *)buf)[i]);
    case WEFT_DTYPE_FLOAT32: return ((const float *)buf)[i];
    case WEFT_DTYPE_FLOAT64: return ((const double *)buf)[i];
    default: return NAN;
  }
}

/* Stores v (already representable, or rounded as the dtype rounds). */
FEAT_FN void feat_put(weft_dtype t, void *buf, size_t i, double v) {
  switch (t) {
    case WEFT_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case WEFT_DTYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case WEFT_DTYPE_FLOAT16: ((uint16_t *)buf)[i] = feat_f32_to_f16((float)v); break;
    case WEFT_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = feat_f32_to_bf16((float)v); break;
    case WEFT_DTYPE_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case WEFT_DTYPE_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
  }
}

/* A one-dimensional tensor descriptor over data. */
FEAT_FN weft_tensor feat_tensor(weft_dtype t, const int64_t *shape1, void *data) {
  weft_tensor x = {t, 1, shape1, data, WEFT_DEVICE_CPU, 0, NULL};
  return x;
}

#endif
