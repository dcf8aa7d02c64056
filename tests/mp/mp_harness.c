/* mp_harness.c - shared scaffolding of the multi-process tests (tests/mp).
 *
 * Not a test by itself: every tests/mp program #includes this file, so each
 * test stays one self-contained executable (one process per rank, launched by
 * weftrun -np N) built from one source. It provides:
 *  - joining the world from weftrun's environment, and leaving it;
 *  - per-case reporting: "PASS rank R: <case>" or "FAIL rank R: <case>: <why>"
 *    and the exit status (non-zero after any failure);
 *  - bounded waits: a hang becomes a failure, and a world that can no longer
 *    make progress is aborted so that the peers stop too instead of waiting
 *    for their own timeouts;
 *  - deterministic inputs: every value is a function of (rank, index, seed),
 *    so any rank can compute every rank's input and the exact expected
 *    result of a collective;
 *  - element access by dtype, with float16/bfloat16 conversions written here
 *    independently of the library's own.
 * Only the public API (weft.h) is used. */
#ifndef MP_HARNESS_C
#define MP_HARNESS_C

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

/* Helpers are static so every program gets its own copy; unused ones must
 * not warn (-Werror), since no program uses all of them. */
#define MP_FN static __attribute__((unused))
#define MP_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Every wait is bounded: a collective that does not complete within this
 * many seconds is a failure (a hang), never a blocked test. */
#define MP_WAIT_SECONDS 60.0
/* Failure lines printed per case; the rest are only counted. */
#define MP_MAX_FAIL_LINES 6

static weft_world *mp_world;
static weft_group *mp_group;
static int mp_rank = -1, mp_size = -1;
static atomic_int mp_failures;
static pthread_mutex_t mp_print_mu = PTHREAD_MUTEX_INITIALIZER;
/* The current case is per thread: the threaded tests run cases in parallel. */
static _Thread_local char mp_case_name[192];
static _Thread_local int mp_case_fails;

/* One line, printed whole: several ranks share the terminal or log file. */
MP_FN MP_PRINTF(1, 2) void mp_say(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&mp_print_mu);
  fputs(line, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  pthread_mutex_unlock(&mp_print_mu);
}

MP_FN MP_PRINTF(1, 2) void mp_case(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(mp_case_name, sizeof mp_case_name, fmt, ap);
  va_end(ap);
  mp_case_fails = 0;
}

/* Records a failure of the current case; returns 0 so that checks can be
 * written as `if (bad) return mp_fail(...)`. */
MP_FN MP_PRINTF(1, 2) int mp_fail(const char *fmt, ...) {
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&mp_failures, 1);
  if (++mp_case_fails <= MP_MAX_FAIL_LINES) mp_say("FAIL rank %d: %s: %s", mp_rank, mp_case_name, why);
  return 0;
}

/* Ends the current case: PASS if nothing failed since mp_case(). */
MP_FN void mp_case_end(void) {
  if (mp_case_fails == 0)
    mp_say("PASS rank %d: %s", mp_rank, mp_case_name);
  else if (mp_case_fails > MP_MAX_FAIL_LINES)
    mp_say("FAIL rank %d: %s: %d failures in all", mp_rank, mp_case_name, mp_case_fails);
}

/* The world cannot be trusted to make progress any more (a collective was
 * not submitted here, or hung): tell the peers, leave, and fail. */
MP_FN MP_PRINTF(1, 2) _Noreturn void mp_fatal(const char *fmt, ...) {
  char why[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  mp_say("FAIL rank %d: %s: %s (fatal: aborting the job)", mp_rank, mp_case_name, why);
  if (mp_world) {
    weft_abort(mp_world, "a test rank failed fatally");
    weft_finalize(mp_world);
  }
  exit(1);
}

MP_FN double mp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

MP_FN void mp_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* malloc that never returns NULL (0 bytes gives a valid pointer too). */
MP_FN void *mp_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) mp_fatal("out of memory allocating %zu bytes", bytes);
  return p;
}

/* Joins the world described by weftrun's environment. */
MP_FN void mp_setup(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  mp_case("weft_init");
  weft_status st = weft_init(NULL, &mp_world);
  if (st != WEFT_OK || !mp_world) {
    mp_world = NULL;
    mp_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
  }
  mp_rank = weft_rank(mp_world);
  mp_size = weft_size(mp_world);
  mp_group = weft_world_group(mp_world);
  if (mp_rank < 0 || mp_size < 1 || mp_rank >= mp_size || !mp_group)
    mp_fatal("bad world: rank %d size %d group %p", mp_rank, mp_size, (void *)mp_group);
}

/* Says DONE or FAILED with this rank's failure count; returns the process
 * exit status. */
MP_FN int mp_exit_status(void) {
  int n = atomic_load(&mp_failures);
  mp_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", mp_rank, n);
  return n ? 1 : 0;
}

/* Leaves the world; returns the process exit status. */
MP_FN int mp_teardown(void) {
  mp_case("weft_finalize");
  weft_status st = weft_finalize(mp_world);
  mp_world = NULL;
  if (st != WEFT_OK) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  return mp_exit_status();
}

/* A survivor's finalize (a peer died): it must return within limit seconds,
 * with any status that may report the dead peer, but not a handle or
 * internal error. Returns its status. */
MP_FN weft_status mp_finalize_within(double limit) {
  double f0 = mp_now();
  weft_world *w = mp_world;
  mp_world = NULL;
  weft_status st = weft_finalize(w);
  if (mp_now() - f0 > limit) mp_fail("weft_finalize took %.2f s", mp_now() - f0);
  if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL) mp_fail("weft_finalize: %s", weft_status_string(st));
  return st;
}

/* A submission that should have succeeded but did not: the peers did submit,
 * so the collective can never complete; abort rather than let them hang.
 * req points to the handle variable, so that the call can be written
 * inline: mp_submitted(weft_barrier(g, n, NULL, &r), &r, n). */
MP_FN void mp_submitted(weft_status st, weft_request *const *req, const char *what) {
  if (st != WEFT_OK || !*req) mp_fatal("submitting %s: %s: %s", what, weft_status_string(st), weft_last_error());
}

/* Waits (bounded) for a request; a timeout is fatal. Returns its status. */
MP_FN weft_status mp_wait(weft_request *req, const char *what) {
  weft_status st = weft_wait(req, MP_WAIT_SECONDS);
  if (st == WEFT_IN_PROGRESS) mp_fatal("%s: not complete after %.0f s", what, MP_WAIT_SECONDS);
  return st;
}

/* Waits and requires success; returns 1 on success. */
MP_FN int mp_wait_ok(weft_request *req, const char *what) {
  weft_status st = mp_wait(req, what);
  if (st != WEFT_OK) return mp_fail("%s: %s: %s", what, weft_status_string(st), weft_request_error(req));
  return 1;
}

/* --------------------------------------------------------------- values */
MP_FN uint64_t mp_mix(uint64_t x) { /* splitmix64 finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/* The pseudo-random word behind element `index` of rank `rank`'s input in
 * the case `seed`. */
MP_FN uint64_t mp_hash(uint64_t rank, uint64_t index, uint64_t seed) {
  return mp_mix(mp_mix(seed * 0x9e3779b97f4a7c15ULL + rank) ^ (index * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
}

MP_FN uint64_t mp_fnv(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

MP_FN int mp_is_float(weft_dtype t) {
  return t == WEFT_DTYPE_FLOAT16 || t == WEFT_DTYPE_BFLOAT16 || t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64;
}
MP_FN int mp_is_unsigned(weft_dtype t) {
  return t == WEFT_DTYPE_UINT8 || t == WEFT_DTYPE_UINT16 || t == WEFT_DTYPE_BOOL;
}

/* Element sizes, written here rather than taken from the library. */
MP_FN size_t mp_esize(weft_dtype t) {
  static const size_t sz[WEFT_DTYPE_COUNT_] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  return (unsigned)t < WEFT_DTYPE_COUNT_ ? sz[t] : 0;
}

MP_FN size_t mp_numel(int ndim, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
  return n;
}

/* IEEE binary16 <-> binary32, round to nearest even. */
MP_FN float mp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else { /* subnormal: m * 2^-24 */
      float f = (float)m * 0x1p-24f;
      return sign ? -f : f;
    }
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e - 15 + 127) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

MP_FN uint16_t mp_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  float a = fabsf(f);
  if (a != a) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00; /* rounds to infinity */
  if (a < 0x1p-14f) { /* subnormal or zero: units of 2^-24, nearest even */
    float q = a * 0x1p24f;
    return sign | (uint16_t)nearbyintf(q);
  }
  int e;
  float m = frexpf(a, &e);           /* a = m * 2^e, m in [0.5, 1) */
  float q = nearbyintf(m * 2048.0f); /* 11 significant bits */
  if (q >= 2048.0f) {
    q /= 2;
    e++;
  }
  return sign | (uint16_t)(((unsigned)(e - 1 + 15) << 10) | ((unsigned)q - 1024u));
}

MP_FN float mp_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

MP_FN uint16_t mp_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* An integer value stored in type t: truncated to the width, then sign- or
 * zero-extended (two's complement wrap, as the library computes integers). */
MP_FN int64_t mp_wrap(weft_dtype t, uint64_t u) {
  switch (t) {
    case WEFT_DTYPE_UINT8: return (uint8_t)u;
    case WEFT_DTYPE_INT8: return (int8_t)(uint8_t)u;
    case WEFT_DTYPE_UINT16: return (uint16_t)u;
    case WEFT_DTYPE_INT16: return (int16_t)(uint16_t)u;
    case WEFT_DTYPE_INT32: return (int32_t)(uint32_t)u;
    case WEFT_DTYPE_INT64: return (int64_t)u;
    case WEFT_DTYPE_BOOL: return u != 0;
    default: return 0;
  }
}

/* Integer (and bool) element access. */
MP_FN void mp_set_i(weft_dtype t, void *buf, size_t i, int64_t v) {
  unsigned char *p = (unsigned char *)buf + i * mp_esize(t);
  uint8_t u8 = (uint8_t)v;
  uint16_t u16 = (uint16_t)v;
  uint32_t u32 = (uint32_t)v;
  switch (t) {
    case WEFT_DTYPE_BOOL: u8 = v != 0; /* fall through */
    case WEFT_DTYPE_UINT8:
    case WEFT_DTYPE_INT8: memcpy(p, &u8, 1); break;
    case WEFT_DTYPE_UINT16:
    case WEFT_DTYPE_INT16: memcpy(p, &u16, 2); break;
    case WEFT_DTYPE_INT32: memcpy(p, &u32, 4); break;
    case WEFT_DTYPE_INT64: memcpy(p, &v, 8); break;
    default: break;
  }
}

MP_FN int64_t mp_get_i(weft_dtype t, const void *buf, size_t i) {
  const unsigned char *p = (const unsigned char *)buf + i * mp_esize(t);
  uint64_t u = 0;
  switch (mp_esize(t)) {
    case 1: u = p[0]; break;
    case 2: {
      uint16_t v;
      memcpy(&v, p, 2);
      u = v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, p, 4);
      u = v;
      break;
    }
    case 8: memcpy(&u, p, 8); break;
    default: break;
  }
  /* A stored bool must be exactly 0 or 1: return the raw byte for it. */
  return t == WEFT_DTYPE_BOOL ? (int64_t)u : mp_wrap(t, u);
}

/* Floating element access (values converted to/from double). */
MP_FN void mp_set_f(weft_dtype t, void *buf, size_t i, double v) {
  unsigned char *p = (unsigned char *)buf + i * mp_esize(t);
  if (t == WEFT_DTYPE_FLOAT64) {
    memcpy(p, &v, 8);
  } else if (t == WEFT_DTYPE_FLOAT32) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else {
    uint16_t h = t == WEFT_DTYPE_FLOAT16 ? mp_f32_to_f16((float)v) : mp_f32_to_bf16((float)v);
    memcpy(p, &h, 2);
  }
}

MP_FN double mp_get_f(weft_dtype t, const void *buf, size_t i) {
  const unsigned char *p = (const unsigned char *)buf + i * mp_esize(t);
  if (t == WEFT_DTYPE_FLOAT64) {
    double d;
    memcpy(&d, p, 8);
    return d;
  }
  if (t == WEFT_DTYPE_FLOAT32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return t == WEFT_DTYPE_FLOAT16 ? mp_f16_to_f32(h) : mp_bf16_to_f32(h);
}

/* A payload value for data-movement collectives (gather, broadcast,
 * alltoall), from a hash word: full-range integers, 0/1 bools, small
 * integers for floats (exact in every float type). */
MP_FN void mp_set_h(weft_dtype t, void *buf, size_t i, uint64_t h) {
  if (mp_is_float(t))
    mp_set_f(t, buf, i, (double)((int64_t)(h % 201) - 100));
  else
    mp_set_i(t, buf, i, t == WEFT_DTYPE_BOOL ? (int64_t)(h & 1) : (int64_t)h);
}

/* Fills n elements starting at element `first` of buf with rank `rank`'s
 * payload for elements [index0, index0 + n). */
MP_FN void mp_fill(weft_dtype t, void *buf, size_t first, size_t n, int rank, size_t index0, uint64_t seed) {
  for (size_t k = 0; k < n; k++) mp_set_h(t, buf, first + k, mp_hash((uint64_t)rank, index0 + k, seed));
}

/* Checks n elements of buf from `first` against rank's payload from index0;
 * reports the first difference. Returns 1 if all equal. */
MP_FN int mp_check_fill(weft_dtype t, const void *buf, size_t first, size_t n, int rank, size_t index0, uint64_t seed,
                        const char *what) {
  size_t es = mp_esize(t);
  unsigned char want[8];
  for (size_t k = 0; k < n; k++) {
    mp_set_h(t, want, 0, mp_hash((uint64_t)rank, index0 + k, seed));
    const unsigned char *got = (const unsigned char *)buf + (first + k) * es;
    if (memcmp(got, want, es) != 0) {
      uint64_t g = 0, w = 0;
      memcpy(&g, got, es);
      memcpy(&w, want, es);
      return mp_fail("%s: element %zu (rank %d's element %zu) is 0x%llx, expected 0x%llx", what, first + k, rank,
                     index0 + k, (unsigned long long)g, (unsigned long long)w);
    }
  }
  return 1;
}

/* Allgathers one 64-bit word from every rank into all[0..size) (a
 * collective: every rank must call it with the same name). Returns 1 on
 * success. */
MP_FN int mp_allgather_u64(const char *name, uint64_t mine, uint64_t *all) {
  int64_t shape[1] = {1};
  weft_tensor in = {WEFT_DTYPE_INT64, 1, shape, &mine, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allgather(mp_group, name, &in, NULL, &req);
  mp_submitted(st, &req, name);
  int ok = mp_wait_ok(req, name);
  if (ok) {
    weft_tensor out;
    st = weft_request_output(req, &out);
    if (st != WEFT_OK || out.ndim != 1 || out.shape[0] != mp_size || out.dtype != WEFT_DTYPE_INT64 || !out.data)
      ok = mp_fail("%s: bad allgather output (status %s)", name, weft_status_string(st));
    else
      memcpy(all, out.data, (size_t)mp_size * 8);
  }
  weft_request_free(req);
  return ok;
}

/* 1 if every rank passed the same word (collective). */
MP_FN int mp_same_everywhere(const char *name, uint64_t mine) {
  uint64_t *all = mp_alloc((size_t)mp_size * 8);
  int ok = mp_allgather_u64(name, mine, all);
  for (int r = 0; ok && r < mp_size; r++)
    if (all[r] != mine)
      ok = mp_fail("%s: rank %d has 0x%llx, this rank 0x%llx", name, r, (unsigned long long)all[r],
                   (unsigned long long)mine);
  free(all);
  return ok;
}

/* ----------------------------------------------------------- algorithms */
/* The algorithm WEFT_ALGO_<COLL> forces for coll ("ALLREDUCE", ...), or
 * NULL when the choice is automatic. */
MP_FN const char *mp_forced_algo(const char *coll) {
  char var[64];
  snprintf(var, sizeof var, "WEFT_ALGO_%s", coll);
  const char *v = getenv(var);
  return v && *v ? v : NULL;
}

/* req completed successfully: it ran the algorithm WEFT_ALGO_<coll> forces
 * (weft_request_algorithm), so that a forced algorithm that declines, and
 * the library's fallback to its automatic choice, fails the test instead of
 * passing on the fallback's results. declines: NULL, or why the forced
 * algorithm must decline this operation (then it must not have run: a
 * decline is known and expected, never just tolerated). The one-host fast
 * path ("board") never reaches the registry: tests that force an algorithm
 * run with WEFT_FAST=0. Nothing is checked when nothing is forced. Returns
 * 1 if right. */
MP_FN int mp_check_algo(weft_request *req, const char *coll, const char *declines, const char *what) {
  const char *forced = mp_forced_algo(coll), *ran = weft_request_algorithm(req);
  if (!forced) return 1;
  if (!ran || !*ran) return mp_fail("%s: weft_request_algorithm names no algorithm", what);
  if (declines) {
    if (!strcmp(ran, forced))
      return mp_fail("%s: the forced WEFT_ALGO_%s=%s ran, but it should decline (%s)", what, coll, forced, declines);
    return 1;
  }
  if (strcmp(ran, forced))
    return mp_fail("%s: ran '%s', not the forced WEFT_ALGO_%s=%s (%s)", what, ran, coll, forced,
                   !strcmp(ran, "board") ? "the one-host fast path took it: force algorithms with WEFT_FAST=0"
                                         : "it declined and the library fell back");
  return 1;
}

/* Case-insensitive substring test. */
MP_FN int mp_contains(const char *hay, const char *needle) {
  if (!hay || !needle) return 0;
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t k = 0;
    while (k < n && hay[k]) {
      char a = hay[k], b = needle[k];
      if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
      if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
      if (a != b) break;
      k++;
    }
    if (k == n) return 1;
  }
  return n == 0;
}

/* What a transfer or call with a peer that died must end in: st (its
 * status; IN_PROGRESS if it never ended) an error whose message msg names
 * dead ("rank 1"), within limit seconds of t0. Says how it ended. */
MP_FN void mp_expect_lost(weft_status st, const char *msg, double t0, double limit, const char *dead,
                          const char *what) {
  double dt = mp_now() - t0;
  if (st == WEFT_IN_PROGRESS) mp_fail("%s: no error %.1f s after it began", what, dt);
  else if (st >= 0) mp_fail("%s: completed (%s) although %s died", what, weft_status_string(st), dead);
  else if (!mp_contains(msg, dead)) mp_fail("%s: \"%s\" does not name %s", what, msg, dead);
  else if (dt > limit) mp_fail("%s: failed only after %.1f s", what, dt);
  else mp_say("INFO rank %d: %s failed after %.2f s: %s: %s", mp_rank, what, dt, weft_status_string(st), msg);
}

/* ---- a rank that kills itself on purpose (mp_fault, mp_p2p_fault). The
 * weft rank runs in a child; the process weftrun started waits for it, so
 * weftrun does not stop the survivors when the rank dies. Just before
 * raise(SIGKILL) the child tells its parent ('K' and its rank) on a pipe,
 * so an unplanned death still fails. */
static int mp_dying_fd = -1;

/* The rank dies now, as announced. */
MP_FN void mp_die_by_sigkill(void) {
  char note[2] = {'K', (char)mp_rank};
  if (write(mp_dying_fd, note, 2) != 2) perror("write");
  raise(SIGKILL);
  mp_fatal("still alive after raise(SIGKILL)");
}

/* Runs rank_main in a child and returns this process's exit status: 0 when
 * the child died by SIGKILL as announced (mp_die_by_sigkill), else its own. */
MP_FN int mp_supervised(int (*rank_main)(void)) {
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    return 1;
  }
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  if (child == 0) {
    close(fds[0]);
    mp_dying_fd = fds[1];
    return rank_main();
  }
  close(fds[1]);
  char note[2] = {0, 0};
  ssize_t n;
  do n = read(fds[0], note, 2);
  while (n < 0 && errno == EINTR);
  int ws = 0;
  while (waitpid(child, &ws, 0) < 0)
    if (errno != EINTR) {
      perror("waitpid");
      return 1;
    }
  if (WIFSIGNALED(ws)) {
    if (WTERMSIG(ws) == SIGKILL && n == 2 && note[0] == 'K') {
      printf("PASS rank %d: killed itself with SIGKILL as planned\n", note[1]);
      return 0;
    }
    printf("FAIL: a weft rank (pid %d) died of signal %d unplanned\n", (int)child, WTERMSIG(ws));
    return 1;
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

#endif /* MP_HARNESS_C */
