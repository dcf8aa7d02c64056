/* fault_rank_util.h - what the fault-matrix rank programs (fault_peers.c,
 * fault_semantics.c) share on top of fault_common.h: joining the world,
 * bounded waits, a checked allreduce, exchanging a word with every rank, the
 * detection bound T, and "victims" (a rank that is SIGKILLed runs in a
 * forked child, so weftrun, which stops the job when one of its processes
 * dies, never sees the death and cannot cut the survivors short).
 * Only the public API (weft.h) is used. */
#ifndef FAULT_RANK_UTIL_H
#define FAULT_RANK_UTIL_H

#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include "fault_common.h"
#include "weft.h"

static weft_world *W;
static weft_group *G;
static int R = -1, N = -1; /* rank and size, from weftrun's environment first */
static double T = 11;      /* detection bound: heartbeat timeout + 1 s */
static const char *ITEM = "?";

FX_FN double fx_env_num(const char *name, double dflt) {
  const char *v = getenv(name);
  return v && *v ? strtod(v, NULL) : dflt;
}

/* Reads the environment before weft_init: rank, size, the bound T; opens
 * this rank's verdict file. */
FX_FN void fr_begin(const char *item) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  ITEM = item;
  R = (int)fx_env_num("WEFT_RANK", -1);
  N = (int)fx_env_num("WEFT_SIZE", -1);
  T = fx_env_num("WEFT_HEARTBEAT_TIMEOUT", 10) + 1.0;
  char who[16];
  snprintf(who, sizeof who, "%d", R);
  fx_open_verdict(who);
}

/* Ends the program: exit status 0 only if nothing failed. */
FX_FN int fr_end(void) {
  fx_line(fx_failures ? "FAILED" : "DONE", "%d failure(s)", fx_failures);
  return fx_failures ? 1 : 0;
}

/* The world could not be joined or the test cannot go on. */
FX_FN FX_PRINTF(1, 2) _Noreturn void fr_fatal(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fx_fail("fatal: %s", msg);
  if (W) {
    weft_abort(W, "a fault-test rank failed fatally");
    weft_finalize(W);
  }
  exit(fr_end());
}

FX_FN void fr_join(void) {
  weft_status st = weft_init(NULL, &W);
  if (st != WEFT_OK || !W) {
    W = NULL;
    fr_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
  }
  R = weft_rank(W);
  N = weft_size(W);
  G = weft_world_group(W);
}

/* Waits at most `limit` s; a request still pending then is a hang. */
FX_FN weft_status fr_wait(weft_request *req, double limit, const char *what) {
  weft_status st = weft_wait(req, limit);
  if (st == WEFT_IN_PROGRESS) fx_fail("%s: still pending after %.1f s (hang)", what, limit);
  return st;
}

/* A checked int64 sum allreduce of n elements (every rank computes the
 * expected values itself). Returns 1 if it succeeded with the right sums. */
FX_FN int fr_allreduce_ok(const char *name, int n) {
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!v) fr_fatal("out of memory");
  for (int i = 0; i < n; i++) v[i] = (int64_t)R * 1000003 + i * 7 + 1;
  int64_t shape[1] = {n};
  weft_tensor t = {WEFT_DTYPE_INT64, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &req);
  int ok = 0;
  if (st != WEFT_OK) {
    fx_fail("%s: submit: %s: %s", name, weft_status_string(st), weft_last_error());
  } else if ((st = fr_wait(req, 30, name)) != WEFT_OK) {
    if (st != WEFT_IN_PROGRESS) fx_fail("%s: %s: %s", name, weft_status_string(st), weft_request_error(req));
  } else {
    ok = 1;
    for (int i = 0; i < n && ok; i++) {
      int64_t want = 1000003LL * N * (N - 1) / 2 + (int64_t)N * (i * 7 + 1);
      if (v[i] != want)
        ok = fx_fail("%s: element %d is %lld, expected %lld", name, i, (long long)v[i], (long long)want);
    }
  }
  if (req) weft_request_free(req);
  free(v);
  return ok;
}

/* Every rank's 64-bit word into all[0..N) (a collective). 1 on success. */
FX_FN int fr_exchange(const char *name, uint64_t mine, uint64_t *all) {
  int64_t shape[1] = {1};
  weft_tensor in = {WEFT_DTYPE_INT64, 1, shape, &mine, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allgather(G, name, &in, NULL, &req);
  if (st != WEFT_OK) return fx_fail("%s: submit: %s: %s", name, weft_status_string(st), weft_last_error());
  int ok = 0;
  if ((st = fr_wait(req, 30, name)) != WEFT_OK) {
    if (st != WEFT_IN_PROGRESS) fx_fail("%s: %s: %s", name, weft_status_string(st), weft_request_error(req));
  } else {
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 1 || out.shape[0] != N || !out.data)
      fx_fail("%s: bad allgather output", name);
    else
      memcpy(all, out.data, sizeof(uint64_t) * (size_t)N), ok = 1;
  }
  weft_request_free(req);
  return ok;
}

FX_FN uint64_t fr_hash(const char *s) { /* FNV-1a */
  uint64_t h = 1469598103934665603ULL;
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* 1 if every rank in `mask` (bit r: rank r takes part; all ranks call this)
 * passed the same message. */
FX_FN int fr_same_message(const char *name, const char *msg, uint64_t mask) {
  uint64_t *all = calloc((size_t)N, sizeof *all);
  if (!all) fr_fatal("out of memory");
  int ok = fr_exchange(name, (mask >> R) & 1 ? fr_hash(msg) : 0, all);
  for (int r = 0; ok && r < N; r++)
    if ((mask >> r) & 1 && (mask >> R) & 1 && all[r] != fr_hash(msg))
      ok = fx_fail("%s: rank %d got a different error message than this rank (\"%s\")", name, r, msg);
  free(all);
  return ok;
}

/* Timed weft_finalize: must return within `limit` s with a status that is
 * not a handle or internal error. */
FX_FN void fr_finalize(double limit) {
  double t0 = fx_now();
  weft_status st = weft_finalize(W);
  double dt = fx_now() - t0;
  W = NULL;
  G = NULL;
  if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL) fx_fail("weft_finalize: %s", weft_status_string(st));
  fx_measure(ITEM, "finalize", limit, dt);
}

/* ------------------------------------------------------------ victims */

static int fr_victim_pipe = -1;

/* If this rank is the victim, forks: the child goes on as the weft rank and
 * returns; the parent (the process weftrun watches) waits for it and exits
 * 0 if it died by SIGKILL after announcing it (fr_die), otherwise with the
 * child's failure. */
FX_FN void fr_maybe_fork_victim(int victim) {
  if (R != victim) return;
  int fds[2];
  if (pipe(fds) != 0) fr_fatal("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) fr_fatal("fork: %s", strerror(errno));
  if (child == 0) {
    close(fds[0]);
    fr_victim_pipe = fds[1];
    return;
  }
  close(fds[1]);
  char note = 0;
  ssize_t n;
  do n = read(fds[0], &note, 1);
  while (n < 0 && errno == EINTR);
  int ws = 0;
  while (waitpid(child, &ws, 0) < 0)
    if (errno != EINTR) _exit(1);
  if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL && n == 1 && note == 'K') {
    fx_pass("rank %d (pid %d) was SIGKILLed as planned", victim, (int)child);
    _exit(0);
  }
  if (WIFSIGNALED(ws)) {
    fx_fail("victim rank %d (pid %d) died of signal %d unplanned", victim, (int)child, WTERMSIG(ws));
    _exit(1);
  }
  _exit(WIFEXITED(ws) ? WEXITSTATUS(ws) : 1);
}

/* The victim dies now; the moment is written to $FAULT_DIR/<stamp> first. */
FX_FN _Noreturn void fr_die(const char *stamp) {
  char k = 'K';
  fx_put(stamp, "%.9f", fx_now());
  if (fr_victim_pipe < 0 || write(fr_victim_pipe, &k, 1) != 1) fx_fail("victim: cannot announce the kill");
  raise(SIGKILL);
  _exit(99);
}

#endif /* FAULT_RANK_UTIL_H */
