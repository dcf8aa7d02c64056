/* test_auth.c - the authenticated handshake (bootstrap/auth.h) over
 * socketpair() and loopback TCP, acceptor and connector on two threads:
 * success, wrong secret / job id / size / expected rank, replayed HELLO and
 * ACCEPT, stalled and garbage clients, the MAC checked against an
 * independent HMAC-SHA256, and secret loading. */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/auth.h"
#include "bootstrap/auth_nb.h"
#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/time.h"

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

static wf_auth_params params(const char *secret, const char *job, uint32_t rank, uint32_t size) {
  wf_auth_params p = {(const uint8_t *)secret, secret ? strlen(secret) : 0, job, rank, size};
  return p;
}

/* ---- one side per thread */
typedef struct side {
  int fd;
  wf_auth_params p;
  uint32_t expect_rank; /* connector */
  double timeout;
  int is_acceptor;
  weft_status st;
  uint32_t peer_rank;
  char err[512];
  double elapsed;
} side;

static void *run_side(void *arg) {
  side *s = arg;
  int64_t t0 = wf_now_ns();
  int64_t dl = wf_deadline_after(s->timeout);
  s->peer_rank = 0xdeadbeef;
  if (s->is_acceptor)
    s->st = wf_auth_accept(s->fd, &s->p, dl, &s->peer_rank, s->err, sizeof s->err);
  else
    s->st = wf_auth_connect(s->fd, &s->p, s->expect_rank, dl, s->err, sizeof s->err);
  s->elapsed = (double)(wf_now_ns() - t0) / 1e9;
  /* what every caller does with a failed handshake: drop the connection */
  if (s->st != WEFT_OK) shutdown(s->fd, SHUT_RDWR);
  return NULL;
}

static void start(pthread_t *t, side *s) {
  if (pthread_create(t, NULL, run_side, s) != 0) {
    fprintf(stderr, "pthread_create failed\n");
    exit(1);
  }
}

static void make_pair(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    perror("socketpair");
    exit(1);
  }
}

/* Runs acceptor a and connector c on the two ends of a fresh socketpair. */
static void run_pair(side *a, side *c) {
  int sv[2];
  make_pair(sv);
  a->fd = sv[0];
  c->fd = sv[1];
  a->is_acceptor = 1;
  c->is_acceptor = 0;
  pthread_t ta, tc;
  start(&ta, a);
  start(&tc, c);
  pthread_join(ta, NULL);
  pthread_join(tc, NULL);
  close(sv[0]);
  close(sv[1]);
}

static side mk(wf_auth_params p, uint32_t expect, double timeout) {
  side s;
  memset(&s, 0, sizeof s);
  s.p = p;
  s.expect_rank = expect;
  s.timeout = timeout;
  return s;
}

static void test_success(void) {
  /* both role assignments, with and without a job id and a secret */
  for (int way = 0; way < 2; way++) {
    uint32_t ar = way ? 3 : 0, cr = way ? 1 : 2;
    side a = mk(params("s3cret", "job-42", ar, 4), 0, 5);
    side c = mk(params("s3cret", "job-42", cr, 4), ar, 5);
    run_pair(&a, &c);
    CHECK(a.st == WEFT_OK, "acceptor: %s %s", weft_status_string(a.st), a.err);
    CHECK(c.st == WEFT_OK, "connector: %s %s", weft_status_string(c.st), c.err);
    CHECK(a.peer_rank == cr, "acceptor learned rank %u, expected %u", a.peer_rank, cr);
  }
  side a = mk(params(NULL, "", 0, 2), 0, 5);
  side c = mk(params(NULL, NULL, 1, 2), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_OK && c.st == WEFT_OK, "no secret: %s %s / %s %s", weft_status_string(a.st), a.err,
        weft_status_string(c.st), c.err);
}

static void test_tcp_success(void) {
  struct sockaddr_in la, bound;
  char err[256];
  int lfd = -1, cfd = -1, afd = -1;
  CHECK(wf_sock_parse_addr("127.0.0.1:0", 0, &la, err, sizeof err) == WEFT_OK, "%s", err);
  CHECK(wf_sock_listen(&la, &lfd, &bound, err, sizeof err) == WEFT_OK, "%s", err);
  CHECK(ntohs(bound.sin_port) != 0, "listener got no port");
  CHECK(wf_sock_connect(&bound, wf_deadline_after(5), &cfd, err, sizeof err) == WEFT_OK, "%s", err);
  struct sockaddr_in peer;
  weft_status st = WEFT_IN_PROGRESS;
  for (int i = 0; i < 500 && st == WEFT_IN_PROGRESS; i++) {
    st = wf_sock_accept(lfd, &afd, &peer, err, sizeof err);
    if (st == WEFT_IN_PROGRESS) usleep(1000);
  }
  CHECK(st == WEFT_OK, "accept: %s", err);
  side a = mk(params("k", "j", 0, 2), 0, 5), c = mk(params("k", "j", 1, 2), 0, 5);
  a.fd = afd;
  a.is_acceptor = 1;
  c.fd = cfd;
  pthread_t ta, tc;
  start(&ta, &a);
  start(&tc, &c);
  pthread_join(ta, NULL);
  pthread_join(tc, NULL);
  CHECK(a.st == WEFT_OK && c.st == WEFT_OK && a.peer_rank == 1, "tcp: %s %s / %s %s", weft_status_string(a.st),
        a.err, weft_status_string(c.st), c.err);
  close(afd);
  close(cfd);
  close(lfd);
}

static void test_wrong_secret(void) {
  side a = mk(params("right", "j", 0, 3), 0, 5), c = mk(params("wrong", "j", 1, 3), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_ERR_AUTH, "acceptor: %s %s", weft_status_string(a.st), a.err);
  CHECK(c.st == WEFT_ERR_AUTH, "connector: %s %s", weft_status_string(c.st), c.err);
  CHECK(strstr(a.err, "MAC mismatch") != NULL, "acceptor message: %s", a.err);
  CHECK(strstr(c.err, "WEFT_SECRET") != NULL, "connector message: %s", c.err);
  /* a secret vs none */
  a = mk(params("right", "j", 0, 3), 0, 5), c = mk(params(NULL, "j", 1, 3), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_ERR_AUTH && c.st == WEFT_ERR_AUTH, "secret vs none: %s / %s", a.err, c.err);
  /* same secret, different job id */
  a = mk(params("k", "job-a", 0, 3), 0, 5), c = mk(params("k", "job-b", 1, 3), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_ERR_AUTH && c.st == WEFT_ERR_AUTH, "job id: %s / %s", a.err, c.err);
}

static void test_wrong_size(void) {
  side a = mk(params("k", "j", 0, 3), 0, 5), c = mk(params("k", "j", 2, 4), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_ERR_AUTH, "acceptor: %s %s", weft_status_string(a.st), a.err);
  CHECK(strstr(a.err, "rank 2 says world size 4, rank 0 has 3") != NULL, "acceptor message: %s", a.err);
  CHECK(c.st == WEFT_ERR_AUTH, "connector: %s %s", weft_status_string(c.st), c.err);
  /* rank out of range, sizes agree */
  a = mk(params("k", "j", 0, 3), 0, 5), c = mk(params("k", "j", 7, 3), 0, 5);
  run_pair(&a, &c);
  CHECK(a.st == WEFT_ERR_AUTH && strstr(a.err, "out of range"), "rank range: %s", a.err);
}

static void test_wrong_expected_rank(void) {
  side a = mk(params("k", "j", 1, 4), 0, 5), c = mk(params("k", "j", 3, 4), 2, 5);
  run_pair(&a, &c);
  CHECK(c.st == WEFT_ERR_AUTH, "connector: %s %s", weft_status_string(c.st), c.err);
  CHECK(strstr(c.err, "dialed rank 2 but rank 1 answered") != NULL, "connector message: %s", c.err);
}

/* ---- a relay between acceptor and connector that records both streams */
typedef struct rec {
  uint8_t c2a[256], a2c[256];
  size_t n_c2a, n_a2c;
} rec;

static void relay(int fa, int fc, pthread_t ta, pthread_t tc, rec *r) {
  /* pump until both threads are done (or 5 s pass) */
  int64_t dl = wf_deadline_after(5);
  int done_a = 0, done_c = 0;
  while (!(done_a && done_c) && wf_now_ns() < dl) {
    struct pollfd p[2] = {{fa, POLLIN, 0}, {fc, POLLIN, 0}};
    if (poll(p, 2, 20) < 0) continue;
    uint8_t buf[256];
    if (p[0].revents & POLLIN) {
      ssize_t n = read(fa, buf, sizeof buf);
      if (n > 0) {
        if (r->n_a2c + (size_t)n <= sizeof r->a2c) memcpy(r->a2c + r->n_a2c, buf, (size_t)n), r->n_a2c += (size_t)n;
        if (write(fc, buf, (size_t)n) != n) fprintf(stderr, "relay write failed\n");
      }
    }
    if (p[1].revents & POLLIN) {
      ssize_t n = read(fc, buf, sizeof buf);
      if (n > 0) {
        if (r->n_c2a + (size_t)n <= sizeof r->c2a) memcpy(r->c2a + r->n_c2a, buf, (size_t)n), r->n_c2a += (size_t)n;
        if (write(fa, buf, (size_t)n) != n) fprintf(stderr, "relay write failed\n");
      }
    }
    if (!done_a && pthread_tryjoin_np(ta, NULL) == 0) done_a = 1;
    if (!done_c && pthread_tryjoin_np(tc, NULL) == 0) done_c = 1;
  }
  if (!done_a) pthread_join(ta, NULL);
  if (!done_c) pthread_join(tc, NULL);
}

static void recorded_handshake(const char *secret, side *a, side *c, rec *r) {
  int sa[2], sc[2];
  make_pair(sa);
  make_pair(sc);
  *a = mk(params(secret, "job", 0, 2), 0, 5);
  *c = mk(params(secret, "job", 1, 2), 0, 5);
  a->fd = sa[0];
  a->is_acceptor = 1;
  c->fd = sc[0];
  memset(r, 0, sizeof *r);
  pthread_t ta, tc;
  start(&ta, a);
  start(&tc, c);
  relay(sa[1], sc[1], ta, tc, r);
  close(sa[0]), close(sa[1]), close(sc[0]), close(sc[1]);
}

static void test_replay_and_reference_mac(void) {
  side a, c;
  rec r;
  recorded_handshake("replay-key", &a, &c, &r);
  CHECK(a.st == WEFT_OK && c.st == WEFT_OK, "recorded handshake: %s / %s", a.err, c.err);
  CHECK(r.n_c2a == WF_AUTH_HELLO_SIZE, "connector sent %zu bytes", r.n_c2a);
  CHECK(r.n_a2c == WF_AUTH_CHALLENGE_SIZE + WF_AUTH_ACCEPT_SIZE, "acceptor sent %zu bytes", r.n_a2c);
  if (r.n_c2a != WF_AUTH_HELLO_SIZE || r.n_a2c != WF_AUTH_CHALLENGE_SIZE + WF_AUTH_ACCEPT_SIZE) return;

  /* The HELLO's MAC recomputed with OpenSSL's one-shot HMAC() from the
   * layout in auth.c's header comment: label | job | rank | size |
   * nonce_a | nonce_c. */
  uint8_t msg[10 + 3 + 8 + 64], md[32];
  unsigned mdlen = 0;
  memcpy(msg, "weft-hello", 10);
  memcpy(msg + 10, "job", 3);
  memcpy(msg + 13, r.c2a + 8, 8);       /* rank, size as sent (LE) */
  memcpy(msg + 21, r.a2c + 8, 32);      /* nonce_a from the CHALLENGE */
  memcpy(msg + 53, r.c2a + 16, 32);     /* nonce_c */
  HMAC(EVP_sha256(), "replay-key", 10, msg, sizeof msg, md, &mdlen);
  CHECK(mdlen == 32 && memcmp(md, r.c2a + 48, 32) == 0, "HELLO MAC differs from an independent HMAC-SHA256");
  CHECK(r.c2a[8] == 1 && r.c2a[12] == 2, "HELLO rank/size bytes %u %u", r.c2a[8], r.c2a[12]);

  /* Replay the HELLO on a new connection: the acceptor's new nonce makes
   * the old MAC worthless. */
  int sv[2];
  make_pair(sv);
  side a2 = mk(params("replay-key", "job", 0, 2), 0, 3);
  a2.fd = sv[0];
  a2.is_acceptor = 1;
  pthread_t t;
  start(&t, &a2);
  uint8_t chal[WF_AUTH_CHALLENGE_SIZE];
  size_t got = 0;
  char err[256];
  CHECK(wf_sock_read_all(sv[1], chal, sizeof chal, wf_deadline_after(3), &got, err, sizeof err) == WEFT_OK, "%s",
        err);
  CHECK(memcmp(chal + 8, r.a2c + 8, 32) != 0, "acceptor reused its nonce");
  CHECK(write(sv[1], r.c2a, r.n_c2a) == (ssize_t)r.n_c2a, "write");
  pthread_join(t, NULL);
  CHECK(a2.st == WEFT_ERR_AUTH, "replayed HELLO: %s %s", weft_status_string(a2.st), a2.err);
  close(sv[0]), close(sv[1]);

  /* Replay CHALLENGE + ACCEPT to a new connector: its new nonce_c makes
   * the old ACCEPT worthless. */
  make_pair(sv);
  side c2 = mk(params("replay-key", "job", 1, 2), 0, 3);
  c2.fd = sv[0];
  start(&t, &c2);
  CHECK(write(sv[1], r.a2c, WF_AUTH_CHALLENGE_SIZE) == WF_AUTH_CHALLENGE_SIZE, "write");
  uint8_t hello[WF_AUTH_HELLO_SIZE];
  CHECK(wf_sock_read_all(sv[1], hello, sizeof hello, wf_deadline_after(3), &got, err, sizeof err) == WEFT_OK, "%s",
        err);
  CHECK(memcmp(hello + 16, r.c2a + 16, 32) != 0, "connector reused its nonce");
  CHECK(write(sv[1], r.a2c + WF_AUTH_CHALLENGE_SIZE, WF_AUTH_ACCEPT_SIZE) == WF_AUTH_ACCEPT_SIZE, "write");
  pthread_join(t, NULL);
  CHECK(c2.st == WEFT_ERR_AUTH, "replayed ACCEPT: %s %s", weft_status_string(c2.st), c2.err);
  close(sv[0]), close(sv[1]);
}

/* The acceptor facing a raw client that sends `data` then stalls or closes. */
static side acceptor_vs_raw(const void *data, size_t n, int close_after, double timeout) {
  int sv[2];
  make_pair(sv);
  side a = mk(params("k", "j", 0, 2), 0, timeout);
  a.fd = sv[0];
  a.is_acceptor = 1;
  pthread_t t;
  start(&t, &a);
  if (n && write(sv[1], data, n) != (ssize_t)n) fprintf(stderr, "raw write failed\n");
  if (close_after) shutdown(sv[1], SHUT_WR);
  pthread_join(t, NULL);
  close(sv[0]), close(sv[1]);
  return a;
}

static void test_stall_and_garbage(void) {
  uint8_t one = 'W';
  side a = acceptor_vs_raw(&one, 1, 0, 1.0);
  CHECK(a.st == WEFT_ERR_TIMEOUT, "stalled client: %s %s", weft_status_string(a.st), a.err);
  CHECK(a.elapsed >= 0.95 && a.elapsed <= 1.5, "stalled client dropped after %.3f s (deadline 1 s)", a.elapsed);
  CHECK(strstr(a.err, "1 of 80") != NULL, "message: %s", a.err);

  a = acceptor_vs_raw(NULL, 0, 0, 0.3);
  CHECK(a.st == WEFT_ERR_TIMEOUT && a.elapsed <= 0.8, "silent client: %s after %.3f s", weft_status_string(a.st),
        a.elapsed);

  uint8_t junk[WF_AUTH_HELLO_SIZE];
  srand(7);
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)rand();
  a = acceptor_vs_raw(junk, sizeof junk, 0, 5);
  CHECK(a.st == WEFT_ERR_AUTH && a.elapsed < 1, "junk: %s after %.3f s", weft_status_string(a.st), a.elapsed);

  /* junk shorter than a HELLO is still rejected at once from its header */
  const char *http = "GET / HTTP/1.0\r\n";
  a = acceptor_vs_raw(http, strlen(http), 0, 5);
  CHECK(a.st == WEFT_ERR_AUTH && a.elapsed < 1, "http: %s after %.3f s", weft_status_string(a.st), a.elapsed);
  CHECK(strstr(a.err, "bad magic") != NULL, "http message: %s", a.err);

  a = acceptor_vs_raw("abc", 3, 1, 5);
  CHECK(a.st == WEFT_ERR_PEER_LOST, "short then close: %s %s", weft_status_string(a.st), a.err);

  /* valid header, garbage MAC */
  uint8_t h[WF_AUTH_HELLO_SIZE];
  memcpy(h, junk, sizeof h);
  memcpy(h, "WFAU\x01\x02\x00\x00", 8);
  memset(h + 8, 0, 8);
  h[8] = 1, h[12] = 2;
  a = acceptor_vs_raw(h, sizeof h, 0, 5);
  CHECK(a.st == WEFT_ERR_AUTH && strstr(a.err, "MAC mismatch"), "forged MAC: %s %s", weft_status_string(a.st),
        a.err);
}

/* The connector facing a raw server. */
static void test_connector_vs_raw(void) {
  int sv[2];
  make_pair(sv);
  side c = mk(params("k", "j", 1, 2), 0, 0.3);
  c.fd = sv[0];
  pthread_t t;
  start(&t, &c);
  pthread_join(t, NULL);
  CHECK(c.st == WEFT_ERR_TIMEOUT && c.elapsed < 0.8, "silent server: %s after %.3f s", weft_status_string(c.st),
        c.elapsed);
  close(sv[0]), close(sv[1]);

  make_pair(sv);
  c = mk(params("k", "j", 1, 2), 0, 5);
  c.fd = sv[0];
  const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n+++++++";
  CHECK(write(sv[1], banner, 40) == 40, "write");
  start(&t, &c);
  pthread_join(t, NULL);
  CHECK(c.st == WEFT_ERR_AUTH && strstr(c.err, "bad magic"), "ssh banner: %s %s", weft_status_string(c.st), c.err);
  close(sv[0]), close(sv[1]);
}

static void test_secret_loading(void) {
  uint8_t buf[4096];
  size_t len = 99;
  unsetenv("WEFT_SECRET");
  unsetenv("WEFT_SECRET_FILE");
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_OK && len == 0, "none: len %zu", len);
  setenv("WEFT_SECRET", "hunter2", 1);
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_OK && len == 7 && !memcmp(buf, "hunter2", 7), "env: len %zu", len);
  unsetenv("WEFT_SECRET");

  char path[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/weft_test_secret_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  setenv("WEFT_SECRET_FILE", path, 1);
  static uint8_t big[4097];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 7 + 1);
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_ERR_INVALID_ARGUMENT, "empty file accepted");
  CHECK(write(fd, big, 4096) == 4096, "write");
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_OK && len == 4096 && !memcmp(buf, big, 4096), "4096-byte file: %zu",
        len);
  CHECK(write(fd, big + 4096, 1) == 1, "write");
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_ERR_INVALID_ARGUMENT && len == 0, "4097-byte file accepted");
  CHECK(strstr(wf_err_msg(), "longer than 4096") != NULL, "message: %s", wf_err_msg());
  /* WEFT_SECRET wins over the file */
  setenv("WEFT_SECRET", "x", 1);
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_OK && len == 1 && buf[0] == 'x', "precedence");
  unsetenv("WEFT_SECRET");
  setenv("WEFT_SECRET_FILE", "/nonexistent/weft/secret", 1);
  CHECK(wf_auth_load_secret(buf, &len) == WEFT_ERR_SYSTEM, "missing file accepted");
  unsetenv("WEFT_SECRET_FILE");
  close(fd);
  unlink(path);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  alarm(50);
  test_success();
  test_tcp_success();
  test_wrong_secret();
  test_wrong_size();
  test_wrong_expected_rank();
  test_replay_and_reference_mac();
  test_stall_and_garbage();
  test_connector_vs_raw();
  test_secret_loading();
  if (g_failures) {
    fprintf(stderr, "test_auth: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("test_auth: all passed\n");
  return 0;
}
