/* test_bootstrap.c - the rendezvous (bootstrap/bootstrap.h) with real
 * processes: fork() N ranks on 127.0.0.1, each runs wf_bootstrap and proves
 * the mesh by sending its rank over every connection and reading the right
 * rank back from each. Also: local/cross ranks on simulated hosts, wrong
 * world size, duplicate rank, wrong secret, rank 0 starting late, stray
 * clients at rank 0's port, and the no-secret loopback rule.
 *
 * Each child writes what it saw into a shared (mmap) slot; the parent checks
 * exit statuses and slots. alarm() bounds every process. */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/auth.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/time.h"

#define MAXP 8

static int g_failures;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

typedef struct slot {
  int status;
  char msg[1024];
  int mesh_ok;                  /* 1: every fd carried the right rank both ways */
  char mesh_err[256];
  uint32_t peer_pid[MAXP];
  uint64_t peer_inc[MAXP];      /* the peer table's incarnations */
  char peer_host[MAXP][WF_HOST_MAX + 1];
  int local_rank, local_size, cross_rank, cross_size;
  double secs;
} slot;

typedef struct spec {
  int rank, size;
  const char *secret;           /* NULL: none */
  const char *host;             /* NULL: gethostname */
  const char *bind;
  double delay, timeout, hs;
  uint64_t incarnation;         /* 0: none */
} spec;

static slot *g_slots;
static pid_t g_kids[MAXP];
static int g_nkids;

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_bootstrap: TIMEOUT (alarm), killing children\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  for (int i = 0; i < g_nkids; i++) kill(g_kids[i], SIGKILL);
  _exit(3);
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &len)) {
    perror("free_port");
    exit(1);
  }
  close(s);
  return ntohs(a.sin_port);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Child: exchange ranks over every fd and check the fd properties. */
static int check_mesh(const wf_boot_result *r, int rank, slot *sl) {
  for (int j = 0; j < r->size; j++) {
    int fd = r->fds[j];
    if (j == rank) {
      if (fd != -1) return snprintf(sl->mesh_err, sizeof sl->mesh_err, "fds[self] = %d", fd), 0;
      continue;
    }
    int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD), nd = 0;
    socklen_t len = sizeof nd;
    getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nd, &len);
    if (fl < 0 || (fl & O_NONBLOCK) || !(fdfl & FD_CLOEXEC) || !nd)
      return snprintf(sl->mesh_err, sizeof sl->mesh_err, "fd to rank %d: flags 0x%x fdflags 0x%x nodelay %d", j, fl,
                      fdfl, nd), 0;
    int32_t v = rank;
    if (write(fd, &v, sizeof v) != (ssize_t)sizeof v)
      return snprintf(sl->mesh_err, sizeof sl->mesh_err, "write to rank %d failed", j), 0;
  }
  for (int j = 0; j < r->size; j++) {
    if (j == rank) continue;
    int32_t v = -1;
    size_t got = 0;
    while (got < sizeof v) {
      ssize_t n = read(r->fds[j], (char *)&v + got, sizeof v - got);
      if (n <= 0) return snprintf(sl->mesh_err, sizeof sl->mesh_err, "read from rank %d failed", j), 0;
      got += (size_t)n;
    }
    if (v != j) return snprintf(sl->mesh_err, sizeof sl->mesh_err, "fds[%d] carried rank %d", j, v), 0;
  }
  return 1;
}

static pid_t spawn(const spec *s, slot *sl, const char *addr) {
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid > 0) {
    g_kids[g_nkids++] = pid;
    return pid;
  }
  alarm(40);
  if (s->delay > 0) sleep_s(s->delay);
  wf_boot_cfg cfg = {.rank = s->rank,
                     .size = s->size,
                     .addr = addr,
                     .secret = (const uint8_t *)s->secret,
                     .secret_len = s->secret ? strlen(s->secret) : 0,
                     .job_id = "test-job",
                     .hostname = s->host,
                     .bind_addr = s->bind,
                     .timeout_seconds = s->timeout > 0 ? s->timeout : 20,
                     .handshake_timeout = s->hs > 0 ? s->hs : 5,
                     .incarnation = s->incarnation};
  wf_boot_result r;
  int64_t t0 = wf_now_ns();
  sl->status = wf_bootstrap(&cfg, &r);
  sl->secs = (double)(wf_now_ns() - t0) / 1e9;
  snprintf(sl->msg, sizeof sl->msg, "%s", wf_err_msg());
  if (sl->status == WEFT_OK) {
    sl->mesh_ok = r.size == s->size && check_mesh(&r, s->rank, sl);
    for (int j = 0; j < r.size && j < MAXP; j++) {
      sl->peer_pid[j] = r.peers[j].pid;
      sl->peer_inc[j] = r.peers[j].incarnation;
      snprintf(sl->peer_host[j], sizeof sl->peer_host[j], "%s", r.peers[j].host);
    }
    sl->local_rank = r.local_rank, sl->local_size = r.local_size;
    sl->cross_rank = r.cross_rank, sl->cross_size = r.cross_size;
    wf_boot_result_free(&r);
    wf_boot_result_free(&r); /* idempotent */
  } else if (r.fds || r.peers || r.size) {
    snprintf(sl->mesh_err, sizeof sl->mesh_err, "result not cleared on error");
    _exit(2);
  }
  _exit(0);
}

/* Runs n processes, waits for all, checks they exited cleanly. */
static void run_all(const spec *specs, int n, const char *addr, pid_t *pids) {
  memset(g_slots, 0, sizeof(slot) * MAXP);
  for (int i = 0; i < MAXP; i++) g_slots[i].status = 12345;
  g_nkids = 0;
  for (int i = 0; i < n; i++) pids[i] = spawn(&specs[i], &g_slots[i], addr);
  for (int i = 0; i < n; i++) {
    int ws = 0;
    waitpid(pids[i], &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "process %d (rank %d) ended badly (status 0x%x): %s", i,
          specs[i].rank, ws, g_slots[i].mesh_err);
  }
  g_nkids = 0;
}

static void addr_of(char *buf, size_t len) { snprintf(buf, len, "127.0.0.1:%d", free_port()); }

/* Reference topology: hosts numbered in order of their lowest rank. */
static void expect_topo(const char **hosts, int n, int *lr, int *ls, int *cr, int *cs) {
  int ncross = 0, host_index[MAXP];
  for (int r = 0; r < n; r++) {
    host_index[r] = -1;
    for (int q = 0; q < r; q++)
      if (!strcmp(hosts[q], hosts[r])) host_index[r] = host_index[q];
    if (host_index[r] < 0) host_index[r] = ncross++;
  }
  for (int r = 0; r < n; r++) {
    lr[r] = ls[r] = 0;
    for (int q = 0; q < n; q++)
      if (host_index[q] == host_index[r]) {
        ls[r]++;
        if (q < r) lr[r]++;
      }
    cr[r] = host_index[r];
    cs[r] = ncross;
  }
}

static void check_success(const spec *specs, int n, const pid_t *pids, const char *what) {
  for (int i = 0; i < n; i++) {
    slot *s = &g_slots[i];
    CHECK(s->status == WEFT_OK, "%s: rank %d: %s: %s", what, i, weft_status_string(s->status), s->msg);
    if (s->status != WEFT_OK) continue;
    CHECK(s->mesh_ok, "%s: rank %d mesh: %s", what, i, s->mesh_err);
    for (int j = 0; j < n; j++)
      CHECK(s->peer_pid[j] == (uint32_t)pids[j], "%s: rank %d thinks rank %d is pid %u, it is %d", what, i, j,
            s->peer_pid[j], (int)pids[j]);
    for (int j = 0; j < n; j++) /* every rank's HELLO incarnation reaches every peer table */
      CHECK(s->peer_inc[j] == specs[j].incarnation, "%s: rank %d has rank %d's incarnation %llx, not %llx", what, i,
            j, (unsigned long long)s->peer_inc[j], (unsigned long long)specs[j].incarnation);
  }
}

static void test_mesh(int n, const char *secret) {
  char addr[64], what[64];
  addr_of(addr, sizeof addr);
  snprintf(what, sizeof what, "mesh n=%d %s", n, secret ? "secret" : "no secret");
  spec specs[MAXP];
  pid_t pids[MAXP];
  memset(specs, 0, sizeof specs);
  for (int i = 0; i < n; i++)
    specs[i] = (spec){.rank = i, .size = n, .secret = secret, .incarnation = 0x5eed000000000000ull + (uint64_t)i};
  run_all(specs, n, addr, pids);
  check_success(specs, n, pids, what);
  for (int i = 0; i < n; i++) {
    slot *s = &g_slots[i];
    if (s->status != WEFT_OK) continue;
    CHECK(s->local_rank == i && s->local_size == n && s->cross_rank == 0 && s->cross_size == 1,
          "%s: rank %d local %d/%d cross %d/%d", what, i, s->local_rank, s->local_size, s->cross_rank, s->cross_size);
  }
}

static void test_topology(void) {
  const char *hosts[5] = {"hostB", "hostA", "hostB", "hostC", "hostA"};
  int lr[5], ls[5], cr[5], cs[5];
  expect_topo(hosts, 5, lr, ls, cr, cs);
  char addr[64];
  addr_of(addr, sizeof addr);
  spec specs[5];
  pid_t pids[5];
  for (int i = 0; i < 5; i++) specs[i] = (spec){.rank = i, .size = 5, .secret = "k", .host = hosts[i]};
  run_all(specs, 5, addr, pids);
  check_success(specs, 5, pids, "topology");
  for (int i = 0; i < 5; i++) {
    slot *s = &g_slots[i];
    CHECK(s->local_rank == lr[i] && s->local_size == ls[i] && s->cross_rank == cr[i] && s->cross_size == cs[i],
          "topology: rank %d got local %d/%d cross %d/%d, want %d/%d %d/%d", i, s->local_rank, s->local_size,
          s->cross_rank, s->cross_size, lr[i], ls[i], cr[i], cs[i]);
    for (int j = 0; j < 5; j++)
      CHECK(!strcmp(s->peer_host[j], hosts[j]), "topology: rank %d sees host %s for rank %d", i, s->peer_host[j], j);
  }
}

static void test_wrong_size(void) {
  char addr[64];
  addr_of(addr, sizeof addr);
  /* rank 2 starts late so rank 1 is surely registered and hears the abort */
  spec specs[3] = {{.rank = 0, .size = 3, .secret = "k", .timeout = 8},
                   {.rank = 1, .size = 3, .secret = "k", .timeout = 8},
                   {.rank = 2, .size = 4, .secret = "k", .timeout = 8, .delay = 0.5}};
  pid_t pids[3];
  run_all(specs, 3, addr, pids);
  const char *want = "rank 2 says world size 4, rank 0 has 3";
  CHECK(g_slots[0].status == WEFT_ERR_MISMATCH && strstr(g_slots[0].msg, want), "wrong size, rank 0: %s: %s",
        weft_status_string(g_slots[0].status), g_slots[0].msg);
  CHECK(g_slots[1].status == WEFT_ERR_ABORTED && strstr(g_slots[1].msg, want), "wrong size, rank 1: %s: %s",
        weft_status_string(g_slots[1].status), g_slots[1].msg);
  CHECK(g_slots[2].status == WEFT_ERR_AUTH && strstr(g_slots[2].msg, "world size"), "wrong size, rank 2: %s: %s",
        weft_status_string(g_slots[2].status), g_slots[2].msg);
  for (int i = 0; i < 3; i++) CHECK(g_slots[i].secs < 5, "wrong size: rank %d took %.2f s", i, g_slots[i].secs);
}

static void test_duplicate(void) {
  char addr[64];
  addr_of(addr, sizeof addr);
  spec specs[3] = {{.rank = 0, .size = 3, .secret = "k", .timeout = 8, .incarnation = 0xa0},
                   {.rank = 1, .size = 3, .secret = "k", .timeout = 8, .incarnation = 0xa1},
                   {.rank = 1, .size = 3, .secret = "k", .timeout = 8, .delay = 0.5, .incarnation = 0xb1}};
  pid_t pids[3];
  run_all(specs, 3, addr, pids);
  char want[128];
  snprintf(want, sizeof want, "rank 1 registered twice (pids %d and %d", (int)pids[1], (int)pids[2]);
  /* the processes' incarnations (weft_init's random numbers) tell the two apart */
  CHECK(strstr(g_slots[0].msg, "incarnations 00000000000000a1 and 00000000000000b1"), "duplicate: %s",
        g_slots[0].msg);
  CHECK(g_slots[0].status == WEFT_ERR_INVALID_ARGUMENT && strstr(g_slots[0].msg, want), "duplicate, rank 0: %s: %s",
        weft_status_string(g_slots[0].status), g_slots[0].msg);
  for (int i = 1; i < 3; i++)
    CHECK(g_slots[i].status == WEFT_ERR_ABORTED && strstr(g_slots[i].msg, want), "duplicate, process %d: %s: %s", i,
          weft_status_string(g_slots[i].status), g_slots[i].msg);
}

/* A rank with the wrong secret fails at once; rank 0 cannot tell it from an
 * attacker, so it keeps waiting and fails at its deadline naming the
 * missing rank and the rejected connection; rank 1 hears why (its own
 * deadline is later here: with equal deadlines it may time out first, with
 * its own message). */
static void test_wrong_secret(void) {
  char addr[64];
  addr_of(addr, sizeof addr);
  spec specs[3] = {{.rank = 0, .size = 3, .secret = "good", .timeout = 3},
                   {.rank = 1, .size = 3, .secret = "good", .timeout = 6},
                   {.rank = 2, .size = 3, .secret = "bad", .timeout = 3, .delay = 0.3}};
  pid_t pids[3];
  run_all(specs, 3, addr, pids);
  CHECK(g_slots[2].status == WEFT_ERR_AUTH && strstr(g_slots[2].msg, "rank 0") && strstr(g_slots[2].msg, addr),
        "wrong secret, rank 2: %s: %s", weft_status_string(g_slots[2].status), g_slots[2].msg);
  CHECK(g_slots[2].secs < 1.5, "wrong secret: rank 2 took %.2f s to fail", g_slots[2].secs);
  CHECK(g_slots[0].status == WEFT_ERR_TIMEOUT && strstr(g_slots[0].msg, "missing: 2") &&
            strstr(g_slots[0].msg, "MAC mismatch"),
        "wrong secret, rank 0: %s: %s", weft_status_string(g_slots[0].status), g_slots[0].msg);
  CHECK(g_slots[1].status == WEFT_ERR_ABORTED && strstr(g_slots[1].msg, "missing: 2"), "wrong secret, rank 1: %s: %s",
        weft_status_string(g_slots[1].status), g_slots[1].msg);
}

static void test_rank0_late(void) {
  char addr[64];
  addr_of(addr, sizeof addr);
  spec specs[3] = {{.rank = 0, .size = 3, .secret = "k", .delay = 1.0},
                   {.rank = 1, .size = 3, .secret = "k"},
                   {.rank = 2, .size = 3, .secret = "k"}};
  pid_t pids[3];
  run_all(specs, 3, addr, pids);
  check_success(specs, 3, pids, "rank 0 late");
  CHECK(g_slots[1].secs >= 0.9, "rank 0 late: rank 1 finished after %.2f s, before rank 0 started?", g_slots[1].secs);
}

/* Stray clients at rank 0's port: one stalls silently, one sends junk, one
 * sends half a HELLO's worth and hangs up. With a 10 s handshake timeout the
 * ranks must still finish in well under that: the stalled handshake runs
 * beside the real ones, not before them. */
static void test_stray_clients(void) {
  char addr[64];
  addr_of(addr, sizeof addr);
  struct sockaddr_in a;
  char err[256];
  CHECK(wf_sock_parse_addr(addr, 1, &a, err, sizeof err) == WEFT_OK, "%s", err);
  memset(g_slots, 0, sizeof(slot) * MAXP);
  g_nkids = 0;
  spec s0 = {.rank = 0, .size = 3, .secret = "k", .hs = 10, .timeout = 20};
  pid_t pids[3];
  pids[0] = spawn(&s0, &g_slots[0], addr);
  int stall = -1, junk = -1, half = -1;
  int64_t dl = wf_deadline_after(10);
  while (stall < 0 && wf_now_ns() < dl)
    if (wf_sock_connect(&a, dl, &stall, err, sizeof err) != WEFT_OK) sleep_s(0.01);
  CHECK(stall >= 0, "stray client could not connect to rank 0: %s", err);
  CHECK(wf_sock_connect(&a, dl, &junk, err, sizeof err) == WEFT_OK, "%s", err);
  CHECK(wf_sock_connect(&a, dl, &half, err, sizeof err) == WEFT_OK, "%s", err);
  uint8_t j[200];
  for (size_t i = 0; i < sizeof j; i++) j[i] = (uint8_t)(i * 37 + 11);
  if (junk >= 0 && write(junk, j, sizeof j) != (ssize_t)sizeof j) fprintf(stderr, "junk write failed\n");
  if (half >= 0 && write(half, "WFAU\x01\x02\x00\x00", 8) != 8) fprintf(stderr, "half write failed\n");
  if (half >= 0) close(half);
  sleep_s(0.2); /* the strays are in before the ranks */
  spec s1 = {.rank = 1, .size = 3, .secret = "k", .hs = 10, .timeout = 20};
  spec s2 = {.rank = 2, .size = 3, .secret = "k", .hs = 10, .timeout = 20};
  pids[1] = spawn(&s1, &g_slots[1], addr);
  pids[2] = spawn(&s2, &g_slots[2], addr);
  for (int i = 0; i < 3; i++) {
    int ws = 0;
    waitpid(pids[i], &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "stray: process %d ended badly (0x%x)", i, ws);
  }
  g_nkids = 0;
  spec specs[3] = {s0, s1, s2};
  check_success(specs, 3, pids, "stray clients");
  for (int i = 0; i < 3; i++)
    CHECK(g_slots[i].secs < 5, "stray clients: rank %d took %.2f s (handshake timeout 10 s)", i, g_slots[i].secs);
  if (stall >= 0) close(stall);
  if (junk >= 0) close(junk);
}

/* A holder of the secret whose HELLO names another rank than its handshake
 * did (in the frame header, or only in the payload): rank 0 fails with
 * WEFT_ERR_AUTH and sends the liar an ABORT. */
static void test_rank_mismatch(uint32_t frame_src) {
  char addr[64], err[256];
  addr_of(addr, sizeof addr);
  struct sockaddr_in a;
  CHECK(wf_sock_parse_addr(addr, 1, &a, err, sizeof err) == WEFT_OK, "%s", err);
  memset(g_slots, 0, sizeof(slot) * MAXP);
  g_nkids = 0;
  spec s0 = {.rank = 0, .size = 3, .secret = "k", .timeout = 10};
  pid_t pid = spawn(&s0, &g_slots[0], addr);
  int fd = -1;
  int64_t dl = wf_deadline_after(10);
  while (fd < 0 && wf_now_ns() < dl)
    if (wf_sock_connect(&a, dl, &fd, err, sizeof err) != WEFT_OK) sleep_s(0.01);
  wf_auth_params ap = {(const uint8_t *)"k", 1, "test-job", 1, 3};
  CHECK(fd >= 0 && wf_auth_connect(fd, &ap, 0, dl, err, sizeof err) == WEFT_OK, "handshake as rank 1: %s", err);
  wf_hello_msg h;
  memset(&h, 0, sizeof h);
  h.rank = 2, h.size = 3, h.pid = (uint32_t)getpid();
  snprintf(h.host, sizeof h.host, "liar");
  snprintf(h.listen_addr, sizeof h.listen_addr, "127.0.0.1:9");
  wf_buf buf = {0};
  CHECK(wf_encode_hello(&buf, frame_src, &h) == WEFT_OK, "encode");
  CHECK(fd >= 0 && wf_sock_write_all(fd, buf.data, buf.len, dl, NULL, err, sizeof err) == WEFT_OK, "%s", err);
  wf_buf_free(&buf);
  uint8_t hb[WF_FRAME_HDR_SIZE];
  wf_frame_hdr fh = {0};
  CHECK(fd >= 0 && wf_sock_read_all(fd, hb, sizeof hb, dl, NULL, err, sizeof err) == WEFT_OK &&
            wf_frame_hdr_decode(hb, 1 << 16, 0, &fh, err, sizeof err) == WEFT_OK && fh.type == WF_MSG_ABORT,
        "the liar should get an ABORT: %s (type %u)", err, fh.type);
  int ws = 0;
  waitpid(pid, &ws, 0);
  g_nkids = 0;
  if (fd >= 0) close(fd);
  const char *want = "authenticated as rank 1 but its HELLO says rank 2";
  CHECK(g_slots[0].status == WEFT_ERR_AUTH && strstr(g_slots[0].msg, want),
        "rank mismatch, rank 0: %s: %s", weft_status_string(g_slots[0].status), g_slots[0].msg);
}

/* Without a secret only loopback is allowed. */
static void test_loopback_rule(void) {
  wf_boot_cfg cfg = {.rank = 1, .size = 2, .addr = "10.11.12.13:5000", .job_id = "", .timeout_seconds = 2,
                     .handshake_timeout = 1};
  wf_boot_result r;
  int64_t t0 = wf_now_ns();
  weft_status st = wf_bootstrap(&cfg, &r);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "WEFT_SECRET") && strstr(wf_err_msg(), "10.11.12.13"),
        "non-loopback rank 0 without secret: %s: %s", weft_status_string(st), wf_err_msg());
  CHECK(wf_now_ns() - t0 < WF_NS_PER_SEC / 2, "the loopback check should fail before any network I/O");
  CHECK(r.fds == NULL && r.peers == NULL, "result not cleared");

  /* a rank listening on the wildcard address without a secret */
  char addr[64];
  addr_of(addr, sizeof addr);
  spec specs[2] = {{.rank = 0, .size = 2, .timeout = 2}, {.rank = 1, .size = 2, .timeout = 2, .bind = "0.0.0.0"}};
  pid_t pids[2];
  run_all(specs, 2, addr, pids);
  CHECK(g_slots[1].status == WEFT_ERR_INVALID_ARGUMENT && strstr(g_slots[1].msg, "WEFT_SECRET"),
        "wildcard bind without secret: %s: %s", weft_status_string(g_slots[1].status), g_slots[1].msg);
  CHECK(g_slots[0].status != WEFT_OK, "rank 0 succeeded without rank 1");
}

static void test_bad_config(void) {
  wf_boot_result r;
  wf_boot_cfg cfg = {.rank = 3, .size = 3, .addr = "127.0.0.1:1"};
  CHECK(wf_bootstrap(&cfg, &r) == WEFT_ERR_INVALID_ARGUMENT, "rank == size accepted");
  cfg = (wf_boot_cfg){.rank = 0, .size = 0, .addr = "127.0.0.1:1"};
  CHECK(wf_bootstrap(&cfg, &r) == WEFT_ERR_INVALID_ARGUMENT, "size 0 accepted");
  cfg = (wf_boot_cfg){.rank = 1, .size = 2, .addr = "127.0.0.1"};
  weft_status st = wf_bootstrap(&cfg, &r);
  CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(wf_err_msg(), "port"), "address without port: %s: %s",
        weft_status_string(st), wf_err_msg());
  /* nothing listens: refused, retried, then a timeout naming the address */
  char addr[64];
  addr_of(addr, sizeof addr);
  cfg = (wf_boot_cfg){.rank = 1, .size = 2, .addr = addr, .timeout_seconds = 0.5, .handshake_timeout = 1};
  int64_t t0 = wf_now_ns();
  st = wf_bootstrap(&cfg, &r);
  double secs = (double)(wf_now_ns() - t0) / 1e9;
  CHECK(st == WEFT_ERR_TIMEOUT && strstr(wf_err_msg(), addr) && secs >= 0.45 && secs < 1.0,
        "no rank 0: %s after %.2f s: %s", weft_status_string(st), secs, wf_err_msg());
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGALRM, on_alarm);
  alarm(55);
  g_slots = mmap(NULL, sizeof(slot) * MAXP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_slots == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  static const int sizes[] = {1, 2, 3, 5};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) test_mesh(sizes[i], "s3cret");
  test_mesh(3, NULL);
  test_topology();
  test_wrong_size();
  test_duplicate();
  test_wrong_secret();
  test_rank0_late();
  test_stray_clients();
  test_rank_mismatch(2);
  test_rank_mismatch(1);
  test_loopback_rule();
  test_bad_config();
  if (g_failures) {
    fprintf(stderr, "test_bootstrap: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("test_bootstrap: all passed\n");
  return 0;
}
