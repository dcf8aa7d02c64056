/* test_shm.c - the shared-memory transport (transport/shm.h) with real
 * processes: the parent forks N = 2..4 "ranks" joined by socketpairs that
 * stand in for the bootstrap's TCP connections; each child builds the
 * segment and moves tagged messages, checking every byte against a pattern
 * computed from (sender, receiver, seq, idx, offset). Covered: no file left
 * in /dev/shm (also when a rank is SIGKILLed during setup or transfer), all
 * sizes around the slot size and 10 MiB between all pairs with receives
 * posted before and after the data, backpressure, cancel_data, incomplete(),
 * protocol errors, setup failures (a full /dev/shm, a rank that never joins,
 * ranks that disagree), blocking waits (CPU time, wake-up latency,
 * interrupt), and informational latency / bandwidth numbers.
 *
 * Children report through a MAP_SHARED page; alarm() bounds every child, and
 * the parent kills stragglers and checks exit statuses. */
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

static double now_s(void) { return (double)wf_now_ns() / 1e9; }

/* ------------------------------------------------------------------ data pattern */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t tag_of(int src, int dst, uint64_t seq, uint32_t idx) {
  return ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ (seq << 20) ^ idx;
}

/* Byte k of message tag is byte (k % 8) of mix(tag * golden + k / 8). */
static void fill(uint8_t *b, size_t len, uint64_t tag) {
  for (size_t w = 0; w * 8 < len; w++) {
    uint64_t v = mix(tag * 0x9e3779b97f4a7c15ULL + w);
    size_t k = len - w * 8 < 8 ? len - w * 8 : 8;
    memcpy(b + w * 8, &v, k);
  }
}

/* Index of the first wrong byte, or -1. Compares a word at a time (fast
 * under sanitizers), then finds the byte. */
static long verify(const uint8_t *b, size_t len, uint64_t tag) {
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

static int shm_files(const char *job) {
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

static void on_error(void *ctx, int peer, weft_status st, const char *msg) {
  (void)ctx;
  (void)msg;
  if (st == WEFT_ERR_PROTOCOL && peer >= 0) g_rep->errors_seen++;
}

static weft_status mk(ctx *c, size_t slot, size_t nslots, int mode, double timeout) {
  int fds[MAXN];
  for (int i = 0; i < MAXN; i++) fds[i] = c->fds[i];
  wf_host_cfg hc = {.rank = c->rank, .size = c->world, .local_ranks = c->local, .nlocal = c->nlocal, .fds = fds,
                    .job_id = c->job, .timeout_seconds = timeout, .slot_bytes = slot, .nslots = nslots};
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
static void unmk(ctx *c) {
  wf_shm_destroy(c->s);
  wf_host_destroy(c->h);
  c->s = NULL;
  c->h = NULL;
}

static void mk_or_die(ctx *c, size_t slot, size_t nslots, int mode) {
  weft_status st = mk(c, slot, nslots, mode, 10);
  if (st != WEFT_OK) {
    fprintf(stderr, "FAIL rank %d: wf_shm_create: %s: %s\n", c->rank, weft_status_string(st), wf_err_msg());
    _exit(3);
  }
}

/* Drives progress until *pending is 0; 0 if secs pass first. */
static int drive(ctx *c, int *pending, double secs) {
  double end = now_s() + secs;
  while (*pending > 0) {
    if (!wf_shm_progress(c->s)) wf_shm_wait(c->s, 2000000);
    if (now_s() > end) return 0;
  }
  return 1;
}

/* Drives progress for secs whatever happens. */
static void drive_for(ctx *c, double secs) {
  double end = now_s() + secs;
  while (now_s() < end)
    if (!wf_shm_progress(c->s)) wf_shm_wait(c->s, 1000000);
}

/* One byte each way with every other rank over the socketpairs; the byte
 * read must be ours (no setup bytes left behind). */
static void barrier(ctx *c) {
  char b = 'b';
  for (int p = 0; p < c->n; p++)
    if (p != c->rank) CHECK(write(c->fds[p], &b, 1) == 1, "barrier write");
  for (int p = 0; p < c->n; p++)
    if (p != c->rank) CHECK(read(c->fds[p], &b, 1) == 1 && b == 'b', "barrier read from %d", p);
}
static void signal_peer(ctx *c, int p) { CHECK(write(c->fds[p], "s", 1) == 1, "signal"); }
static void await_peer(ctx *c, int p) {
  char b;
  CHECK(read(c->fds[p], &b, 1) == 1, "await %d", p);
}

/* Forks n ranks running fn and returns how many children failed. kill_rank
 * >= 0: that rank may die (the parent SIGKILLs it after kill_after seconds
 * unless kill_after < 0, when it kills itself). */
static int run_ex(int n, scenario fn, const void *arg, int kill_rank, double kill_after, const char *what) {
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
static int run(int n, scenario fn, const void *arg, const char *what) { return run_ex(n, fn, arg, -1, 0, what); }

/* ------------------------------------------------------------------ scenarios */

/* Setup alone: no file after create on any rank, is_local, and destroy. */
static void sc_setup(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  CHECK(shm_files(c->job) == 0, "a segment file exists after wf_shm_create returned");
  for (int r = 0; r < c->n; r++)
    CHECK(wf_shm_is_local(c->s, r) == (r != c->rank), "is_local(%d) on rank %d", r, c->rank);
  CHECK(!wf_shm_is_local(c->s, -1) && !wf_shm_is_local(c->s, c->n), "is_local out of range");
  barrier(c); /* nobody unmaps before everyone checked */
  unmk(c);
}

/* Two simulated hosts in a world of 4: {0,2} and {1,3}, one segment each. */
static void sc_two_hosts(ctx *c) {
  c->nlocal = 2;
  c->local[0] = c->rank % 2;
  c->local[1] = c->rank % 2 + 2;
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  int other = (c->rank + 2) % 4, pending = 0;
  for (int r = 0; r < 4; r++) CHECK(wf_shm_is_local(c->s, r) == (r == other), "is_local(%d) on rank %d", r, c->rank);
  uint8_t sb[5000], rb[5000];
  fill(sb, sizeof sb, tag_of(c->rank, other, 1, 0));
  CHECK(c->t->ops->send(c->t, (c->rank + 1) % 4, 1, 0, sb, 1, &pending) == WEFT_ERR_INVALID_ARGUMENT,
        "send to a rank on another host");
  CHECK(c->t->ops->send(c->t, other, 1, 0, sb, sizeof sb, &pending) == WEFT_OK, "send");
  CHECK(c->t->ops->recv(c->t, other, 1, 0, rb, sizeof rb, &pending) == WEFT_OK, "recv");
  CHECK(drive(c, &pending, 10), "transfer did not complete");
  CHECK(verify(rb, sizeof rb, tag_of(other, c->rank, 1, 0)) < 0, "wrong data");
  unmk(c);
}

typedef struct msg_arg {
  size_t slot, nslots; /* 0: defaults (64 KiB slots) */
  int order;           /* 0 receives first, 1 sends first (receives posted after data arrived), 2 interleaved */
} msg_arg;

#define NSIZES 7
/* Sizes 0, 1, 7, slot-1, slot, slot+1 and 10 MiB (BIG_MSG) between all pairs. */
static void sc_messages(ctx *c) {
  const msg_arg *a = c->arg;
  mk_or_die(c, a->slot, a->nslots, WF_SHM_COPY_AUTO);
  size_t slot = a->slot ? a->slot : 65536;
  size_t sizes[NSIZES] = {0, 1, 7, slot - 1, slot, slot + 1, BIG_MSG};
  uint8_t *sb[MAXN][NSIZES] = {{0}}, *rb[MAXN][NSIZES] = {{0}};
  const uint64_t seq = 42;
  for (int p = 0; p < c->n; p++) {
    if (p == c->rank) continue;
    for (int k = 0; k < NSIZES; k++) {
      sb[p][k] = malloc(sizes[k] + 1);
      rb[p][k] = malloc(sizes[k] + 16);
      fill(sb[p][k], sizes[k], tag_of(c->rank, p, seq, (uint32_t)k));
      memset(rb[p][k], 0xab, sizes[k] + 16);
    }
  }
  int pending = 0;
#define SEND(p, k) CHECK(c->t->ops->send(c->t, p, seq, (uint32_t)(k), sb[p][k], sizes[k], &pending) == WEFT_OK, "send")
#define RECV(p, k) CHECK(c->t->ops->recv(c->t, p, seq, (uint32_t)(k), rb[p][k], sizes[k], &pending) == WEFT_OK, "recv")
  if (a->order == 0) {
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) RECV(p, k);
    for (int p = 0; p < c->n; p++)
      if (p != c->rank) CHECK(c->t->ops->incomplete(c->t, p) == 1, "no incomplete receive from %d", p);
    barrier(c);
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) SEND(p, k);
  } else if (a->order == 1) {
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) SEND(p, k);
    drive_for(c, 0.03); /* fill the rings: nobody has posted a receive */
    for (int p = 0; p < c->n; p++) /* at least the 10 MiB one waits for its receiver */
      if (p != c->rank) CHECK(c->t->ops->incomplete(c->t, p) == 1, "all sends to %d completed without receives", p);
    barrier(c);
    for (int p = 0; p < c->n; p++)
      for (int k = 0; p != c->rank && k < NSIZES; k++) RECV(p, k);
  } else {
    for (int k = 0; k < NSIZES; k++)
      for (int i = 1; i < c->n; i++) {
        int to = (c->rank + i) % c->n, from = (c->rank - i + c->n) % c->n;
        if ((c->rank + k) % 2) {
          SEND(to, k);
          RECV(from, k);
        } else {
          RECV(from, k);
          SEND(to, k);
        }
      }
  }
  CHECK(drive(c, &pending, 20), "%d transfers did not complete", pending);
  for (int p = 0; p < c->n; p++) {
    if (p == c->rank) continue;
    CHECK(!c->t->ops->incomplete(c->t, p), "incomplete(%d) after completion", p);
    for (int k = 0; k < NSIZES; k++) {
      long bad = verify(rb[p][k], sizes[k], tag_of(p, c->rank, seq, (uint32_t)k));
      CHECK(bad < 0, "message %d (%zu bytes) from rank %d: wrong byte at %ld", k, sizes[k], p, bad);
      for (int g = 0; g < 16; g++) CHECK(rb[p][k][sizes[k] + g] == 0xab, "receive buffer overrun");
      free(sb[p][k]);
      free(rb[p][k]);
    }
  }
  barrier(c);
  unmk(c);
#undef SEND
#undef RECV
}

/* 64 MiB to a receiver that posts 100 ms late: the send waits in the ring. */
static void sc_backpressure(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  int pending = 0;
  if (c->rank == 0) {
    fill(b, len, tag_of(0, 1, 1, 0));
    CHECK(c->t->ops->send(c->t, 1, 1, 0, b, len, &pending) == WEFT_OK, "send");
    drive_for(c, 0.1);
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1), "the send completed without a receiver");
    signal_peer(c, 1);
    CHECK(drive(c, &pending, 20), "send did not complete");
  } else {
    await_peer(c, 0);
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, len, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 20), "receive did not complete");
    long bad = verify(b, len, tag_of(0, 1, 1, 0));
    CHECK(bad < 0, "wrong byte at %ld", bad);
  }
  free(b);
  barrier(c);
  unmk(c);
}

/* cancel_data on the sender with a send half in the ring, then on the
 * receiver with a receive half filled; the next collective still works. */
static void sc_cancel(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  size_t big = 8 * MIB, small = 1000;
  uint8_t sm[1000];
  int pending = 0;
  /* 1: sender cancels; the receiver never posted seq 5. */
  if (c->rank == 0) {
    uint8_t *b = malloc(big);
    fill(b, big, 1);
    CHECK(c->t->ops->send(c->t, 1, 5, 0, b, big, &pending) == WEFT_OK, "send");
    drive_for(c, 0.02);
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1) == 1, "send not pending");
    c->t->ops->cancel_data(c->t);
    CHECK(c->t->ops->incomplete(c->t, 1) == 0, "incomplete after cancel_data");
    free(b); /* ASan: the transport must not touch it any more */
    drive_for(c, 0.01);
    pending = 0;
    signal_peer(c, 1);
    fill(sm, small, tag_of(0, 1, 6, 0));
    CHECK(c->t->ops->send(c->t, 1, 6, 0, sm, small, &pending) == WEFT_OK, "send");
    CHECK(drive(c, &pending, 10), "send after cancel did not complete");
  } else {
    await_peer(c, 0);
    memset(sm, 0, small);
    CHECK(c->t->ops->recv(c->t, 0, 6, 0, sm, small, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 10), "receive after the sender cancelled did not complete");
    CHECK(verify(sm, small, tag_of(0, 1, 6, 0)) < 0, "wrong data after the sender cancelled");
  }
  barrier(c);
  /* 2: receiver cancels a half-filled receive of seq 7; seq 8 follows. */
  pending = 0;
  if (c->rank == 0) {
    uint8_t *b = malloc(big);
    fill(b, big, tag_of(0, 1, 7, 0));
    fill(sm, small, tag_of(0, 1, 8, 0));
    CHECK(c->t->ops->send(c->t, 1, 7, 0, b, big, &pending) == WEFT_OK, "send");
    CHECK(c->t->ops->send(c->t, 1, 8, 0, sm, small, &pending) == WEFT_OK, "send");
    signal_peer(c, 1); /* the ring is full; no progress until the receiver cancelled */
    await_peer(c, 1);
    CHECK(drive(c, &pending, 10), "sends did not complete after the receiver cancelled");
    free(b);
  } else {
    uint8_t *b = calloc(1, big);
    await_peer(c, 0);
    CHECK(c->t->ops->recv(c->t, 0, 7, 0, b, big, &pending) == WEFT_OK, "recv");
    CHECK(pending == 1 && c->t->ops->incomplete(c->t, 0) == 1, "receive not pending");
    CHECK(verify(b, 4096, tag_of(0, 1, 7, 0)) < 0, "first slot not received");
    c->t->ops->cancel_data(c->t);
    CHECK(c->t->ops->incomplete(c->t, 0) == 0, "incomplete after cancel_data");
    free(b);
    pending = 0;
    signal_peer(c, 0);
    memset(sm, 0, small);
    CHECK(c->t->ops->recv(c->t, 0, 8, 0, sm, small, &pending) == WEFT_OK, "recv");
    CHECK(drive(c, &pending, 10), "receive after cancel did not complete");
    CHECK(verify(sm, small, tag_of(0, 1, 8, 0)) < 0, "wrong data after the receiver cancelled");
  }
  barrier(c);
  unmk(c);
}

/* A length mismatch is a protocol error: on_error fires, the pair is dead. */
static void sc_protocol(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  uint8_t b[200];
  int pending = 0;
  if (c->rank == 0) {
    CHECK(c->t->ops->send(c->t, 1, 1, 0, b, 100, &pending) == WEFT_OK, "send");
    CHECK(pending == 0, "a 100-byte send did not complete at once");
  } else {
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, 200, &pending) == WEFT_OK, "recv");
    drive_for(c, 0.05);
    CHECK(g_rep->errors_seen == 1, "on_error called %d times", g_rep->errors_seen);
    CHECK(c->t->ops->recv(c->t, 0, 2, 0, b, 10, &pending) == WEFT_ERR_PROTOCOL, "recv on a broken pair");
    c->t->ops->cancel_data(c->t);
  }
  barrier(c);
  unmk(c);
}

static void *interrupter(void *arg) {
  usleep(30000);
  wf_shm_interrupt(arg);
  return NULL;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* wf_shm_wait: sleeps without burning CPU, wakes promptly on data, returns
 * at once when there is work or an interrupt. */
static void sc_wait(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  enum { ITERS = 20 };
  int pending = 0;
  if (c->rank == 1) {
    double w0 = now_s(), c0 = cpu_s();
    int calls = 0;
    while (now_s() - w0 < 0.3) {
      wf_shm_wait(c->s, 100000000);
      calls++;
    }
    double wall = now_s() - w0, cpu = cpu_s() - c0;
    g_rep->cpu_frac = cpu / wall;
    CHECK(cpu < 0.25 * wall, "idle wait burned %.3f s of CPU in %.3f s", cpu, wall);
    CHECK(calls <= 10, "an idle 100 ms wait returned early: %d calls in %.3f s", calls, wall);
    double lat[ITERS];
    for (int i = 0; i < ITERS; i++) {
      int64_t t0 = 0, t1 = 0;
      CHECK(c->t->ops->recv(c->t, 0, 100 + (uint64_t)i, 0, &t0, sizeof t0, &pending) == WEFT_OK, "recv");
      signal_peer(c, 0);
      double end = now_s() + 5;
      while (pending > 0 && now_s() < end) {
        wf_shm_wait(c->s, 2000000000);
        t1 = wf_now_ns();
        wf_shm_progress(c->s);
      }
      CHECK(pending == 0, "no data after 5 s");
      lat[i] = (double)(t1 - t0) / 1e3;
      /* a missed wake-up would show as the 2 s timeout */
      CHECK(t0 > 0 && lat[i] < 500000, "woke %.0f us after the send", lat[i]);
    }
    qsort(lat, ITERS, sizeof lat[0], cmp_d);
    g_rep->wake_med_us = lat[ITERS / 2];
    g_rep->wake_max_us = lat[ITERS - 1];
    /* Work already there: data at the head of a ring with a receive posted. */
    uint8_t *b = malloc(MIB);
    CHECK(c->t->ops->recv(c->t, 0, 200, 0, b, MIB, &pending) == WEFT_OK, "recv");
    signal_peer(c, 0);
    await_peer(c, 0); /* it filled the ring and stopped */
    double t = now_s();
    wf_shm_wait(c->s, 2000000000); /* nobody would wake it: blocking shows as 2 s */
    CHECK(now_s() - t < 0.5, "wait with data ready took %.3f s", now_s() - t);
    signal_peer(c, 0);
    CHECK(drive(c, &pending, 10), "1 MiB did not arrive");
    CHECK(verify(b, MIB, tag_of(0, 1, 200, 0)) < 0, "wrong data");
    free(b);
    /* Interrupts: pending one, then from another thread 30 ms later. */
    wf_shm_interrupt(c->s);
    t = now_s();
    wf_shm_wait(c->s, 2000000000);
    CHECK(now_s() - t < 0.5, "wait after interrupt took %.3f s", now_s() - t);
    pthread_t th;
    pthread_create(&th, NULL, interrupter, c->s);
    t = now_s();
    wf_shm_wait(c->s, 2000000000);
    double took = now_s() - t;
    pthread_join(th, NULL);
    CHECK(took > 0.02 && took < 1.0, "interrupted wait took %.3f s", took);
  } else {
    for (int i = 0; i < ITERS; i++) {
      await_peer(c, 1);
      usleep(20000); /* let it fall asleep */
      int64_t t0 = wf_now_ns();
      CHECK(c->t->ops->send(c->t, 1, 100 + (uint64_t)i, 0, &t0, sizeof t0, &pending) == WEFT_OK, "send");
      CHECK(pending == 0, "8-byte send did not complete at once");
    }
    uint8_t *b = malloc(MIB);
    fill(b, MIB, tag_of(0, 1, 200, 0));
    await_peer(c, 1);
    CHECK(c->t->ops->send(c->t, 1, 200, 0, b, MIB, &pending) == WEFT_OK, "send");
    signal_peer(c, 1);
    await_peer(c, 1);
    CHECK(drive(c, &pending, 10), "1 MiB send did not complete");
    free(b);
  }
  barrier(c);
  unmk(c);
}

/* Rank 2 disagrees about which ranks share the host: everyone fails. */
static void sc_mismatch(ctx *c) {
  c->world = 4;
  if (c->rank == 2) c->local[1] = 2, c->local[2] = 3;
  weft_status st = mk(c, 4096, 4, WF_SHM_COPY_AUTO, 10);
  CHECK(st == WEFT_ERR_PROTOCOL, "got %s: %s", weft_status_string(st), wf_err_msg());
  if (c->rank == 0) CHECK(strstr(wf_err_msg(), "rank 2 could not map") != NULL, "message: %s", wf_err_msg());
  if (st == WEFT_OK) unmk(c);
  barrier(c); /* the sockets are clean: TCP could take over */
}

/* A local rank that never joins: the others time out, nothing leaks. */
static void sc_timeout(ctx *c) {
  if (c->rank == 1) {
    usleep(600000);
    return;
  }
  double t = now_s();
  weft_status st = mk(c, 4096, 4, WF_SHM_COPY_AUTO, 0.2);
  CHECK(st == WEFT_ERR_TIMEOUT, "got %s: %s", weft_status_string(st), wf_err_msg());
  CHECK(now_s() - t < 1.5, "timed out after %.3f s", now_s() - t);
  CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message: %s", wf_err_msg());
  CHECK(shm_files(c->job) == 0, "segment file left after a timeout");
}

/* Setup with a large segment (so it takes a while) while the parent
 * SIGKILLs one rank: survivors fail or succeed cleanly, nothing leaks. */
static void sc_setup_killed(ctx *c) {
  weft_status st = mk(c, MIB, 16, WF_SHM_COPY_AUTO, 5);
  g_rep->outcome[c->rank] = st == WEFT_OK ? 1 : 2;
  if (st == WEFT_OK) {
    CHECK(shm_files(c->job) == 0, "a segment file exists after wf_shm_create returned");
    unmk(c);
  } else {
    CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message without the hint: %s", wf_err_msg());
  }
}

/* The receiver dies in the middle of a 64 MiB transfer: the sender neither
 * hangs nor crashes; its send stays pending until cancel_data. */
static void sc_transfer_killed(ctx *c) {
  mk_or_die(c, 0, 0, WF_SHM_COPY_AUTO);
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  int pending = 0;
  if (c->rank == 1) {
    await_peer(c, 0); /* the ring is full and the sender waits */
    CHECK(c->t->ops->recv(c->t, 0, 1, 0, b, len, &pending) == WEFT_OK, "recv");
    CHECK(pending == 1 && verify(b, 65536, tag_of(0, 1, 1, 0)) < 0, "no partial transfer before the kill");
    raise(SIGKILL);
  }
  fill(b, len, tag_of(0, 1, 1, 0));
  CHECK(c->t->ops->send(c->t, 1, 1, 0, b, len, &pending) == WEFT_OK, "send");
  signal_peer(c, 1);
  char x;
  while (read(c->fds[1], &x, 1) > 0) { /* the engine would see the TCP connection close */
  }
  drive_for(c, 0.1);
  CHECK(pending == 1 && c->t->ops->incomplete(c->t, 1), "send to a dead rank completed");
  double t = now_s();
  wf_shm_wait(c->s, 50000000);
  CHECK(now_s() - t < 1.0, "wait with a dead peer took %.3f s", now_s() - t);
  c->t->ops->cancel_data(c->t);
  CHECK(!c->t->ops->incomplete(c->t, 1), "incomplete after cancel_data");
  free(b);
  wf_shm_progress(c->s);
  unmk(c);
}

/* A segment larger than /dev/shm: a clean error naming /dev/shm. */
static void sc_full(ctx *c) {
  const size_t *nslots = c->arg;
  weft_status st = mk(c, 1u << 30, *nslots, WF_SHM_COPY_AUTO, 10);
  CHECK(st != WEFT_OK, "a segment larger than /dev/shm was created");
  if (c->rank == 0) CHECK(strstr(wf_err_msg(), "/dev/shm") != NULL, "message: %s", wf_err_msg());
  CHECK(strstr(wf_err_msg(), "WEFT_TRANSPORT=tcp") != NULL, "message: %s", wf_err_msg());
  if (st == WEFT_OK) unmk(c);
  barrier(c); /* the sockets are clean: TCP could take over */
}


/* Ping-pong latency and 64 MiB one-way bandwidth (printed, not asserted). */
static void sc_perf(ctx *c) {
  const int *mode = c->arg;
  mk_or_die(c, 0, 0, *mode);
  enum { ITERS = 10000 };
  static double rt[ITERS];
  int pending = 0;
  uint64_t x = 0, y = 0;
  barrier(c);
  for (int i = 0; i < ITERS; i++) {
    int64_t t = wf_now_ns();
    if (c->rank == 0) {
      c->t->ops->send(c->t, 1, (uint64_t)i, 0, &x, 8, &pending);
      c->t->ops->recv(c->t, 1, (uint64_t)i, 0, &y, 8, &pending);
    } else {
      c->t->ops->recv(c->t, 0, (uint64_t)i, 0, &y, 8, &pending);
      c->t->ops->send(c->t, 0, (uint64_t)i, 0, &x, 8, &pending);
    }
    if (!drive(c, &pending, 10)) break;
    rt[i] = (double)(wf_now_ns() - t) / 1e3;
  }
  CHECK(pending == 0, "ping-pong stalled");
  if (c->rank == 0) {
    qsort(rt, ITERS, sizeof rt[0], cmp_d);
    g_rep->pingpong_us = rt[ITERS / 2] / 2; /* median: preemption on a shared machine only adds a tail */
  }
  size_t len = 64 * MIB;
  uint8_t *b = malloc(len);
  memset(b, c->rank + 1, len); /* fault the pages in before timing */
  double best = 1e9;
  for (int rep = 0; rep < PERF_REPS; rep++) {
    if (c->rank == 1) {
      c->t->ops->recv(c->t, 0, 1000000 + (uint64_t)rep, 0, b, len, &pending);
      double t = now_s();
      signal_peer(c, 0);
      CHECK(drive(c, &pending, 20), "bandwidth receive stalled");
      double d = now_s() - t;
      if (d < best) best = d;
      CHECK(b[0] == 1 && b[len - 1] == 1, "bandwidth data wrong");
    } else {
      await_peer(c, 1);
      c->t->ops->send(c->t, 1, 1000000 + (uint64_t)rep, 0, b, len, &pending);
      CHECK(drive(c, &pending, 20), "bandwidth send stalled");
    }
  }
  if (c->rank == 1) g_rep->bw_gbs = (double)len / best / 1e9;
  free(b);
  barrier(c);
  unmk(c);
}

/* ------------------------------------------------------------------ main */

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  g_rep = mmap(NULL, sizeof *g_rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_rep == MAP_FAILED) return 2;
  double t_start = now_s();

  /* One local rank: nothing to set up, nothing is local. */
  int lone = 0, fds1[1] = {-1};
  (void)lone;
  (void)fds1;
  wf_shm_cfg one = {.rank = 0, .size = 1};
  wf_shm *s1 = NULL;
  CHECK(wf_shm_create(NULL, &one, &s1) == WEFT_OK && s1 && !wf_shm_is_local(s1, 0), "single local rank");
  wf_shm_destroy(s1);
  int bad_ranks[2] = {1, 0}, fds2[2] = {-1, 5};
  wf_host_cfg bad = {.rank = 0, .size = 2, .local_ranks = bad_ranks, .nlocal = 2, .fds = fds2};
  wf_host *h1 = NULL;
  CHECK(wf_host_create(&bad, &h1) == WEFT_ERR_INVALID_ARGUMENT && !h1, "unsorted local ranks accepted");
  int lone_ranks[1] = {0};
  wf_host_cfg alone = {.rank = 0, .size = 1, .local_ranks = lone_ranks, .nlocal = 1, .fds = fds1};
  CHECK(wf_host_create(&alone, &h1) == WEFT_ERR_INVALID_ARGUMENT && !h1, "a segment for one local rank accepted");

  for (int n = 2; n <= MAXN; n++) {
    char what[64];
    snprintf(what, sizeof what, "setup n=%d", n);
    run(n, sc_setup, NULL, what);
  }
  run(4, sc_two_hosts, NULL, "two hosts");
  printf("setup: ok so far (%d failures)\n", g_failures);

  const msg_arg geo[] = {{4096, 4, 0}, {4096, 4, 1}, {4096, 4, 2}, {65536, 16, 0}, {65536, 16, 1}, {8192, 2, 2}};
  for (int n = 2; n <= MAXN; n++)
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++) {
      if (SANITIZED && g >= 3 && n != MAXN) continue;
      char what[96];
      snprintf(what, sizeof what, "messages n=%d slot=%zu x %zu order=%d", n, geo[g].slot, geo[g].nslots,
               geo[g].order);
      run(n, sc_messages, &geo[g], what);
    }
  msg_arg defaults = {0, 0, 2};
  run(3, sc_messages, &defaults, "messages n=3 default geometry");
  printf("messages: done (%d failures)\n", g_failures);

  run(2, sc_backpressure, NULL, "backpressure");
  run(2, sc_cancel, NULL, "cancel");
  run(2, sc_protocol, NULL, "protocol error");
  printf("protocol error: reported through on_error (the WARN line above is expected)\n");
  run(2, sc_wait, NULL, "wait");
  printf("wait: idle CPU %.1f%% of wall time; wake-up latency median %.0f us, max %.0f us\n", 100 * g_rep->cpu_frac,
         g_rep->wake_med_us, g_rep->wake_max_us);

  run(3, sc_mismatch, NULL, "local ranks mismatch");
  run(2, sc_timeout, NULL, "setup timeout");
  int ok = 0, failed = 0;
  const double delays[] = {0, 0.001, 0.005, 0.02, 0.06, 0.15, 0.4};
  for (int victim = 0; victim < 2; victim++)
    for (size_t d = 0; d < sizeof delays / sizeof delays[0]; d++) {
      char what[96];
      snprintf(what, sizeof what, "setup with rank %d killed after %.1f ms", victim, delays[d] * 1e3);
      run_ex(3, sc_setup_killed, NULL, victim, delays[d], what);
      int survivor = victim == 0 ? 1 : 0;
      if (g_rep->outcome[survivor] == 1) ok++;
      if (g_rep->outcome[survivor] == 2) failed++;
    }
  printf("setup with a rank killed: %d setups completed, %d failed cleanly, no file left\n", ok, failed);
  run_ex(2, sc_transfer_killed, NULL, 1, -1, "receiver killed during a transfer");

  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) == 0 && vfs.f_blocks > 0) {
    size_t nslots = (size_t)((double)vfs.f_blocks * (double)vfs.f_frsize / (double)(1u << 30)) + 2;
    run(2, sc_full, &nslots, "segment larger than /dev/shm");
  } else {
    printf("segment larger than /dev/shm: skipped (no size limit)\n");
  }

  int modes[2] = {WF_SHM_COPY_MEMCPY, WF_SHM_COPY_NT};
  for (int m = 0; m < 2; m++) {
    run(2, sc_perf, &modes[m], "perf");
    printf("perf (%s copies into receive buffers, 64 KiB x 16 slots): 8-byte ping-pong one-way latency %.2f us "
           "(median), 64 MiB one-way %.2f GB/s (best of %d)\n",
           m ? "non-temporal" : "plain", g_rep->pingpong_us, g_rep->bw_gbs, PERF_REPS);
  }

  printf("%s: %d failure(s) in %.1f s\n", g_failures ? "FAILED" : "PASSED", g_failures, now_s() - t_start);
  return g_failures ? 1 : 0;
}
