/* test_shm_common.h - the harness of the shared-memory transport tests
 * (test_shm.c: setup, transfers, waits, performance; test_shm_faults.c:
 * setups that fail and ranks that die): the parent forks N = 2..4 "ranks"
 * joined by socketpairs that stand in for the bootstrap's TCP connections;
 * each child builds the segment and moves tagged messages, checking every
 * byte against a pattern computed from (sender, receiver, seq, idx, offset).
 *
 * Children report through a MAP_SHARED page; alarm() bounds every child, and
 * the parent kills stragglers, checks exit statuses and that no file is left
 * in /dev/shm. Header-only because every tests/unit/test_*.c is built alone;
 * functions are static inline so a test that does not use one gets no
 * warning. */
#ifndef WF_TESTS_UNIT_TEST_SHM_COMMON_H
#define WF_TESTS_UNIT_TEST_SHM_COMMON_H

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host/segment.h"
#include "transport/shm.h"
#include "util/err.h"
#include "util/time.h"

#define MAXN 4
#define MIB (1u << 20)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1 /* several times slower: fewer geometry variants, one perf repetition */
#define PERF_REPS 1
#else
#define SANITIZED 0
#define PERF_REPS 5
#endif
#if defined(__SANITIZE_THREAD__)
#define BIG_MSG (2 * MIB) /* TSan checks every byte memcpy moves: 10 MiB x 12 pairs x 12 runs takes minutes */
#else
#define BIG_MSG (10 * MIB)
#endif

static int g_failures; /* in a child: its own failures; in the parent: all */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d (pid %d): %s: ", __FILE__, __LINE__, (int)getpid(), #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

/* Results children hand to the parent. */
typedef struct report {
  double wake_med_us, wake_max_us, cpu_frac, pingpong_us, bw_gbs;
  int errors_seen;
  int outcome[MAXN]; /* kill tests: 1 create succeeded, 2 failed */
} report;
static report *g_rep;

typedef struct ctx {
  int rank, n, nlocal, world; /* n processes; world size as the transport sees it (>= n) */
  int fds[MAXN];  /* this child's ends of the socketpairs, -1 for itself */
  int local[MAXN];
  char job[64];
  wf_host *h;
  wf_shm *s;
  wf_transport *t;
  const void *arg;
} ctx;

typedef void (*scenario)(ctx *c);

static int g_mesh[MAXN][MAXN]; /* g_mesh[i][j]: rank i's end of the i<->j socketpair */
static int g_jobno;

static inline double now_s(void) { return (double)wf_now_ns() / 1e9; }

/* ------------------------------------------------------------------ data pattern */

static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static inline uint64_t tag_of(int src, int dst, uint64_t seq, uint32_t idx) {
  return ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ (seq << 20) ^ idx;
}

/* Byte k of message tag is byte (k % 8) of mix(tag * golden + k / 8). */
static inline void fill(uint8_t *b, size_t len, uint64_t tag) {
  for (size_t w = 0; w * 8 < len; w++) {
    uint64_t v = mix(tag * 0x9e3779b97f4a7c15ULL + w);
    size_t k = len - w * 8 < 8 ? len - w * 8 : 8;
    memcpy(b + w * 8, &v, k);
  }
}

/* Index of the first wrong byte, or -1. Compares a word at a time (fast
 * under sanitizers), then finds the byte. */
static inline long verify(const uint8_t *b, size_t len, uint64_t tag) {
  for (size_t w = 0; w * 8 < len; w++) {
    uint64_t v = mix(tag * 0x9e3779b97f4a7c15ULL + w), got = 0;
    size_t k = len - w * 8 < 8 ? len - w * 8 : 8;
    if (k == 8) {
      memcpy(&got, b + w * 8, 8);
      if (got == v) continue;
    }
    uint8_t ref[8];
    memcpy(ref, &v, 8);
    for (size_t i = 0; i < k; i++)
      if (b[w * 8 + i] != ref[i]) return (long)(w * 8 + i);
  }
  return -1;
}

/* ------------------------------------------------------------------ harness */

static inline int shm_files(const char *job) {
  char prefix[96];
  snprintf(prefix, sizeof prefix, "weft-%s-", job);
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
  closedir(d);
  return n;
}

static inline void on_error(void *ctx, int peer, weft_status st, const char *msg) {
  (void)ctx;
  (void)msg;
  if (st == WEFT_ERR_PROTOCOL && peer >= 0) g_rep->errors_seen++;
}

/* Passed as wf_host_cfg.numa_nodes by mk (NULL: no placement). */
static const int *g_numa_nodes;

static inline weft_status mk(ctx *c, size_t slot, size_t nslots, int mode, double timeout) {
  int fds[MAXN];
  for (int i = 0; i < MAXN; i++) fds[i] = c->fds[i];
  wf_host_cfg hc = {.rank = c->rank, .size = c->world, .local_ranks = c->local, .nlocal = c->nlocal, .fds = fds,
                    .job_id = c->job, .timeout_seconds = timeout, .slot_bytes = slot, .nslots = nslots,
                    .numa_nodes = g_numa_nodes};
  c->h = NULL;
  c->s = NULL;
  c->t = NULL;
  weft_status st = wf_host_create(&hc, &c->h);
  if (st != WEFT_OK) return st;
  wf_shm_cfg cfg = {.rank = c->rank, .size = c->world, .copy_mode = mode, .on_error = on_error};
  st = wf_shm_create(c->h, &cfg, &c->s);
  if (st != WEFT_OK) {
    wf_host_destroy(c->h);
    c->h = NULL;
    return st;
  }
  c->t = wf_shm_transport(c->s);
  return st;
}

/* The transport, then the segment it runs over. */
static inline void unmk(ctx *c) {
  wf_shm_destroy(c->s);
  wf_host_destroy(c->h);
  c->s = NULL;
  c->h = NULL;
}

static inline void mk_or_die(ctx *c, size_t slot, size_t nslots, int mode) {
  weft_status st = mk(c, slot, nslots, mode, 10);
  if (st != WEFT_OK) {
    fprintf(stderr, "FAIL rank %d: wf_shm_create: %s: %s\n", c->rank, weft_status_string(st), wf_err_msg());
    _exit(3);
  }
}

/* Drives progress until *pending is 0; 0 if secs pass first. */
static inline int drive(ctx *c, int *pending, double secs) {
  double end = now_s() + secs;
  while (*pending > 0) {
    if (!wf_shm_progress(c->s)) wf_shm_wait(c->s, 2000000);
    if (now_s() > end) return 0;
  }
  return 1;
}

/* Drives progress for secs whatever happens. */
static inline void drive_for(ctx *c, double secs) {
  double end = now_s() + secs;
  while (now_s() < end)
    if (!wf_shm_progress(c->s)) wf_shm_wait(c->s, 1000000);
}

/* One byte each way with every other rank over the socketpairs; the byte
 * read must be ours (no setup bytes left behind). */
static inline void barrier(ctx *c) {
  char b = 'b';
  for (int p = 0; p < c->n; p++)
    if (p != c->rank) CHECK(write(c->fds[p], &b, 1) == 1, "barrier write");
  for (int p = 0; p < c->n; p++)
    if (p != c->rank) CHECK(read(c->fds[p], &b, 1) == 1 && b == 'b', "barrier read from %d", p);
}
static inline void signal_peer(ctx *c, int p) { CHECK(write(c->fds[p], "s", 1) == 1, "signal"); }
static inline void await_peer(ctx *c, int p) {
  char b;
  CHECK(read(c->fds[p], &b, 1) == 1, "await %d", p);
}

/* Forks n ranks running fn and returns how many children failed. kill_rank
 * >= 0: that rank may die (the parent SIGKILLs it after kill_after seconds
 * unless kill_after < 0, when it kills itself). */
static inline int run_ex(int n, scenario fn, const void *arg, int kill_rank, double kill_after, const char *what) {
  ctx c = {.n = n, .nlocal = n, .world = n, .arg = arg};
  snprintf(c.job, sizeof c.job, "tshm%dx%d", (int)getpid(), g_jobno++);
  for (int i = 0; i < n; i++) c.local[i] = i;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
        perror("socketpair");
        exit(2);
      }
      g_mesh[i][j] = sv[0];
      g_mesh[j][i] = sv[1];
    }
  memset(g_rep, 0, sizeof *g_rep);
  pid_t pids[MAXN];
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      alarm(40);
      g_failures = 0; /* count this child's own */
      c.rank = i;
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
          if (a != b && a != i) close(g_mesh[a][b]);
      for (int p = 0; p < MAXN; p++) c.fds[p] = p < n && p != i ? g_mesh[i][p] : -1;
      fn(&c);
      fflush(stdout);
      _exit(g_failures ? 1 : 0);
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) close(g_mesh[i][j]);
  if (kill_rank >= 0 && kill_after >= 0) {
    struct timespec ts = {0, (long)(kill_after * 1e9)};
    nanosleep(&ts, NULL);
    kill(pids[kill_rank], SIGKILL);
  }
  int bad = 0;
  double end = now_s() + 50;
  for (int i = 0; i < n; i++) {
    int status;
    pid_t r;
    while ((r = waitpid(pids[i], &status, WNOHANG)) == 0 && now_s() < end) usleep(1000);
    if (r == 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], &status, 0);
      fprintf(stderr, "FAIL %s: rank %d hung\n", what, i);
      bad++;
    } else if (i == kill_rank) {
      /* killed, or finished before the kill: either is fine */
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "FAIL %s: rank %d %s %d\n", what, i, WIFEXITED(status) ? "exited with" : "died of signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      bad++;
    }
  }
  int left = shm_files(c.job);
  if (left) fprintf(stderr, "FAIL %s: %d segment file(s) left in /dev/shm\n", what, left);
  g_failures += bad + (left > 0);
  return bad + (left > 0);
}
static inline int run(int n, scenario fn, const void *arg, const char *what) { return run_ex(n, fn, arg, -1, 0, what); }

#endif
