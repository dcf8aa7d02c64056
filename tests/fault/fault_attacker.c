/* fault_attacker.c - items 8 and 9 of the fault matrix: clients that are not
 * ranks knock on rank 0's rendezvous port while the job waits for a late
 * rank. `fault_attacker MODE HOST:PORT [COUNT SECONDS]`; results go to
 * $FAULT_DIR/verdict.attacker.<mode> (and stdout). Every mode checks that
 * rank 0 never sends more than its fixed-size CHALLENGE (no ACCEPT) and
 * hangs up:
 *
 *  junk          reads the CHALLENGE, sends 64 KiB of an HTTP request:
 *                dropped within 0.5 s (after the 8-byte handshake header).
 *  nohandshake   sends the 64 KiB at once, without reading: same.
 *  silent        reads the CHALLENGE and sends nothing: dropped within the
 *                handshake timeout (WEFT_HANDSHAKE_TIMEOUT) + 0.5 s.
 *  replay        a HELLO captured with this job's secret and job id (read
 *                from $FAULT_DIR/secret and jobid), answering another
 *                CHALLENGE: a valid MAC over the wrong nonce. Dropped within
 *                0.5 s.
 *  replay_other  the same, captured from another job (other secret and id).
 *  slow          COUNT connections trickle a plausible HELLO (valid header
 *                first) at one byte per second for SECONDS, reconnecting
 *                when dropped: each is dropped within the handshake timeout
 *                + 0.5 s of connecting (of 2 timeouts + 0.5 s when COUNT > 1:
 *                beyond rank 0's handshake slots a connection waits in the
 *                listen backlog first). The bound that matters, the late
 *                rank's rendezvous time, is checked by fault_test.sh.
 *
 * The capture runs the library's own connector (wf_auth_connect) against a
 * listener of this program, so this links the internal library. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include "bootstrap/auth.h"
#include "fault_common.h"
#include "util/time.h"

#define CHALLENGE_SIZE 40
#define HELLO_SIZE 80

static struct sockaddr_in g_addr;
static double g_hs; /* rank 0's handshake timeout */

static int parse_addr(const char *s, struct sockaddr_in *a) {
  char host[64];
  unsigned port;
  if (sscanf(s, "%63[^:]:%u", host, &port) != 2) return -1;
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)port);
  return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

/* Connects to rank 0, retrying for up to `patience` s (it may not listen
 * yet, or not any more). */
static int dial(double patience) {
  double end = fx_now() + patience;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&g_addr, sizeof g_addr) == 0) return fd;
    if (fd >= 0) close(fd);
    if (fx_now() > end) return -1;
    fx_sleep(0.02);
  }
}

/* Reads exactly n bytes within `timeout` s; returns bytes read. */
static size_t read_n(int fd, uint8_t *buf, size_t n, double timeout) {
  size_t got = 0;
  double end = fx_now() + timeout;
  while (got < n && fx_now() < end) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 20) <= 0) continue;
    ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
  }
  return got;
}

static void send_some(int fd, const void *p, size_t n) {
  ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w; /* a drop may cut it short: that is what is measured */
}

/* Waits up to `timeout` s for rank 0 to hang up; returns the time it took
 * from t0 (-1: still open). Beyond `unread` bytes (a CHALLENGE not read
 * yet), any byte received is an error: no ACCEPT may follow a bad HELLO. */
static double wait_hangup(int fd, double t0, double timeout, const char *mode, size_t unread) {
  uint8_t b[256];
  size_t got = 0;
  while (fx_now() < t0 + timeout) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 10) <= 0) continue;
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (r > 0) {
      got += (size_t)r;
      if (got > unread) fx_fail("%s: rank 0 sent %zu bytes beyond its CHALLENGE (an ACCEPT?)", mode, got - unread);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR)) return fx_now() - t0;
  }
  return -1;
}

static int check_challenge(const uint8_t *c, size_t got, const char *mode) {
  if (got != CHALLENGE_SIZE) return fx_fail("%s: got %zu CHALLENGE bytes, expected %d", mode, got, CHALLENGE_SIZE);
  if (memcmp(c, "WFAU", 4) != 0) return fx_fail("%s: the CHALLENGE does not start with the handshake magic", mode);
  return 1;
}

/* ------------------------------------------------------------ capture */

typedef struct cap {
  wf_auth_params p;
  int fd;
} cap;

static void *connector(void *arg) {
  cap *c = arg;
  char err[256];
  (void)wf_auth_connect(c->fd, &c->p, 0, wf_deadline_after(5), err, sizeof err); /* fails: we hang up */
  return NULL;
}

/* Captures the HELLO the real connector sends for (secret, job, rank 1 of
 * 2) in answer to a CHALLENGE with a nonce of our own. */
static int capture_hello(const char *secret, const char *job, uint8_t hello[HELLO_SIZE]) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &len))
    return fx_fail("capture: cannot listen: %s", strerror(errno));
  cap c = {{(const uint8_t *)secret, strlen(secret), job, 1, 2}, socket(AF_INET, SOCK_STREAM, 0)};
  if (c.fd < 0 || connect(c.fd, (struct sockaddr *)&a, sizeof a))
    return fx_fail("capture: connect: %s", strerror(errno));
  int as = accept(ls, NULL, NULL);
  pthread_t th;
  if (as < 0 || pthread_create(&th, NULL, connector, &c)) return fx_fail("capture: accept/thread failed");
  uint8_t ch[CHALLENGE_SIZE] = {'W', 'F', 'A', 'U', 1, 1, 0, 0};
  for (int i = 8; i < CHALLENGE_SIZE; i++) ch[i] = (uint8_t)(i * 37 + 11);
  send_some(as, ch, sizeof ch);
  size_t got = read_n(as, hello, HELLO_SIZE, 5);
  close(as);
  pthread_join(th, NULL);
  close(c.fd);
  close(ls);
  if (got != HELLO_SIZE) return fx_fail("capture: got %zu HELLO bytes", got);
  return 1;
}

/* ------------------------------------------------------------ modes */

static void one_shot(const char *mode) {
  static uint8_t junk[65536];
  snprintf((char *)junk, sizeof junk, "GET / HTTP/1.1\r\nHost: weft\r\n\r\n");
  for (size_t i = 40; i < sizeof junk; i++) junk[i] = (uint8_t)('a' + i % 26);
  uint8_t hello[HELLO_SIZE];
  int replay = !strncmp(mode, "replay", 6);
  if (replay) {
    char secret[512] = "other-job-secret", job[128] = "other-job";
    if (!strcmp(mode, "replay") && (fx_get("secret", secret, sizeof secret) || fx_get("jobid", job, sizeof job))) {
      fx_fail("replay: no secret/job id from rank 0");
      return;
    }
    if (!capture_hello(secret, job, hello)) return;
  }
  int fd = dial(10);
  if (fd < 0) {
    fx_fail("%s: cannot connect to rank 0", mode);
    return;
  }
  uint8_t ch[CHALLENGE_SIZE];
  double t0 = fx_now(), bound = 0.5;
  if (!strcmp(mode, "nohandshake")) {
    send_some(fd, junk, sizeof junk);
  } else {
    if (!check_challenge(ch, read_n(fd, ch, sizeof ch, 5), mode)) return;
    t0 = fx_now();
    if (!strcmp(mode, "junk"))
      send_some(fd, junk, sizeof junk);
    else if (replay)
      send_some(fd, hello, sizeof hello);
    else
      bound = g_hs + 0.5; /* silent */
  }
  size_t unread = !strcmp(mode, "nohandshake") ? CHALLENGE_SIZE : 0;
  fx_measure(getenv("FAULT_ITEM") ? getenv("FAULT_ITEM") : "8", mode, bound,
             wait_hangup(fd, t0, bound + 2, mode, unread));
  close(fd);
}

/* COUNT trickling connections for SECONDS; every drop within hs + 0.5 s. */
static void slow(int count, double seconds) {
  static const uint8_t prefix[HELLO_SIZE] = {'W', 'F', 'A', 'U', 1, 2, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0};
  int fd[1024];
  double since[1024];
  size_t sent[1024];
  if (count > 1024) count = 1024;
  for (int i = 0; i < count; i++) fd[i] = -1;
  double end = fx_now() + seconds, worst = 0, next_byte = 0;
  int drops = 0;
  while (fx_now() < end) {
    for (int i = 0; i < count; i++)
      if (fd[i] < 0) { /* reconnect at once, as a persistent attacker would */
        fd[i] = dial(0);
        since[i] = fx_now();
        sent[i] = 0;
      }
    int tick = fx_now() >= next_byte;
    if (tick) next_byte = fx_now() + 1.0;
    for (int i = 0; i < count; i++) {
      if (fd[i] < 0) continue;
      if (tick && sent[i] < sizeof prefix) send_some(fd[i], prefix + sent[i]++, 1);
      uint8_t b[64];
      ssize_t r = recv(fd[i], b, sizeof b, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        double held = fx_now() - since[i];
        if (held > worst) worst = held;
        drops++;
        close(fd[i]);
        fd[i] = -1;
      }
    }
    fx_sleep(0.01);
  }
  for (int i = 0; i < count; i++) /* still open at the end: held this long */
    if (fd[i] >= 0) {
      double held = fx_now() - since[i];
      if (held > worst) worst = held;
      close(fd[i]);
    }
  fx_info("slow: %d connection(s) for %.1f s, %d drop(s), longest hold %.2f s", count, seconds, drops, worst);
  char what[64];
  snprintf(what, sizeof what, "slow_x%d_longest_hold", count);
  /* Alone, a connection is dropped at its handshake deadline. Among many,
   * one may first wait in the listen backlog while rank 0's handshake slots
   * are full, for at most one more handshake timeout. */
  fx_measure("9", what, g_hs * (count > 1 ? 2 : 1) + 0.5, drops ? worst : -1);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3 || parse_addr(argv[2], &g_addr) != 0) {
    fprintf(stderr,
            "usage: fault_attacker junk|nohandshake|silent|replay|replay_other|slow HOST:PORT [COUNT SECONDS]\n");
    return 2;
  }
  const char *h = getenv("WEFT_HANDSHAKE_TIMEOUT");
  g_hs = h && *h ? strtod(h, NULL) : 5;
  char who[64];
  snprintf(who, sizeof who, "attacker.%s", argv[1]);
  fx_open_verdict(who);
  if (!strcmp(argv[1], "slow"))
    slow(argc > 3 ? atoi(argv[3]) : 1, argc > 4 ? strtod(argv[4], NULL) : 3);
  else
    one_shot(argv[1]);
  if (!fx_failures) fx_pass("%s", argv[1]);
  fx_line(fx_failures ? "FAILED" : "DONE", "%d failure(s)", fx_failures);
  return fx_failures ? 1 : 0;
}
