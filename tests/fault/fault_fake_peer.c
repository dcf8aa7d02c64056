/* fault_fake_peer.c - item 7 of the fault matrix: malformed frames on a live,
 * authenticated connection. `fault_fake_peer CASE` starts a job of two
 * ranks by itself: a forked child is rank 0 (the real library, public API),
 * the parent is a FAKE rank 1 that runs the real rendezvous (wf_bootstrap)
 * and so holds an authenticated socket to rank 0, proves the link works (a
 * barrier negotiated with rank 0 through a REQUESTS frame it encodes
 * itself), and then sends one malformed frame while rank 0 has a request
 * pending. Rank 0 must fail that request with WEFT_ERR_PROTOCOL naming rank
 * 1 within 1 s, drop the connection, not crash, keep its peak RSS under
 * 200 MiB (no allocation sized by the frame), and finalize within 1 s.
 *
 * Cases: len2e40 (REQUESTS length 2^40), data2e40 (DATA length 2^40),
 * lenneg (length 2^64-16, "negative"), len0 (REQUESTS without payload),
 * truncated (half a frame, then close: PROTOCOL or PEER_LOST, naming rank 1),
 * stall (half a header, then silence: PEER_LOST "unresponsive" within T),
 * type0, type200 (unknown types), version (2), magic, reserved (non-zero
 * reserved field), count (REQUESTS claiming 2^32-1 entries in 60 bytes),
 * src (a heartbeat claiming to come from rank 0), responses (RESPONSES sent
 * to the coordinator), hello (a HELLO after the rendezvous), abortlen (an
 * ABORT whose string overruns its payload), random (4 KiB of noise),
 * orphans (40 MiB of well-formed requests for a group rank 0 never heard of,
 * which it may hold back for a while but not without limit; then a bad
 * magic ends the case: the RSS cap is the point).
 *
 * Links the internal library (weft_internal) for wf_bootstrap and the wire
 * encoders; rank 0 uses only weft.h. */
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "bootstrap/bootstrap.h"
#include "fault_common.h"
#include "weft.h"
#include "wire/wire.h"

#define SECRET "fault-fake-peer-secret"
#define RSS_CAP_KIB (200 * 1024)

typedef struct fcase {
  const char *name;
  int drop;      /* rank 0 must close the connection */
  int stall;     /* detected by the heartbeat: PEER_LOST "unresponsive" within T */
  int may_close; /* the fake closes: PEER_LOST is fine too */
} fcase;

static const fcase k_cases[] = {
    {"len2e40", 1, 0, 0},  {"data2e40", 1, 0, 0}, {"lenneg", 1, 0, 0},  {"len0", 1, 0, 0},      {"truncated", 0, 0, 1},
    {"stall", 0, 1, 0},    {"type0", 1, 0, 0},    {"type200", 1, 0, 0}, {"version", 1, 0, 0},   {"magic", 1, 0, 0},
    {"reserved", 1, 0, 0}, {"count", 1, 0, 0},    {"src", 1, 0, 0},     {"responses", 1, 0, 0}, {"hello", 1, 0, 0},
    {"abortlen", 1, 0, 0}, {"random", 1, 0, 0},   {"orphans", 1, 0, 0},
};

#define ORPHAN_FRAMES 40       /* x ~1 MiB of requests for an unknown group */
#define ORPHAN_PER_FRAME 24000 /* 44 wire bytes each */

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A 24-byte frame header with every field given. */
static void hdr(uint8_t *p, uint32_t magic, uint8_t version, uint8_t type, uint32_t src, uint32_t reserved,
                uint64_t len) {
  put_le(p, magic, 4);
  p[4] = version;
  p[5] = type;
  put_le(p + 6, 0, 2);
  put_le(p + 8, src, 4);
  put_le(p + 12, reserved, 4);
  put_le(p + 16, len, 8);
}

static int write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* One byte from a pipe, waiting at most `timeout` s; 0 on timeout/EOF. */
static char pipe_get(int fd, double timeout) {
  struct pollfd pf = {fd, POLLIN, 0};
  if (poll(&pf, 1, (int)(timeout * 1000)) <= 0) return 0;
  char c = 0;
  return read(fd, &c, 1) == 1 ? c : 0;
}

static void pipe_put(int fd, const void *p, size_t n) {
  if (write(fd, p, n) != (ssize_t)n) fx_fail("pipe write: %s", strerror(errno));
}

/* ------------------------------------------------------------ rank 0 */
static int rank0(const fcase *fc, const char *addr, int rd, int wr) {
  fx_open_verdict("0");
  double T = strtod(getenv("WEFT_HEARTBEAT_TIMEOUT") ? getenv("WEFT_HEARTBEAT_TIMEOUT") : "10", NULL) + 1.0;
  weft_config cfg = WEFT_CONFIG_INIT;
  cfg.rank = 0;
  cfg.size = 2;
  cfg.addr = addr;
  cfg.secret = SECRET;
  weft_world *w = NULL;
  weft_status st = weft_init(&cfg, &w);
  if (st != WEFT_OK) {
    fx_fail("weft_init: %s: %s", weft_status_string(st), weft_last_error());
    return 1;
  }
  weft_group *g = weft_world_group(w);
  weft_request *probe = NULL, *victim = NULL;
  st = weft_barrier(g, "probe", NULL, &probe);
  if (st == WEFT_OK) st = weft_wait(probe, 10);
  if (st != WEFT_OK)
    fx_fail("the fake rank's barrier did not complete: %s: %s", weft_status_string(st),
            probe ? weft_request_error(probe) : weft_last_error());
  weft_request_free(probe);
  float x[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
  if (weft_allreduce(g, "victim", &t, &t, WEFT_OP_SUM, NULL, &victim) != WEFT_OK)
    fx_fail("submit: %s", weft_last_error());
  pipe_put(wr, "R", 1); /* a request is pending: send the bad frame */
  double t_send = -1;
  struct pollfd pf = {rd, POLLIN, 0};
  if (poll(&pf, 1, 10000) != 1 || read(rd, &t_send, sizeof t_send) != (ssize_t)sizeof t_send)
    fx_fail("no send time from the fake rank");
  st = victim ? weft_wait(victim, T + 5) : WEFT_ERR_INVALID_ARGUMENT;
  double t_done = fx_now();
  const char *msg = victim ? weft_request_error(victim) : "";
  fx_info("%s: pending request ended %s: \"%s\"", fc->name, weft_status_string(st), msg);
  if (fc->stall) {
    if (st != WEFT_ERR_PEER_LOST || !fx_has(msg, "unresponsive"))
      fx_fail("%s: %s \"%s\", expected WEFT_ERR_PEER_LOST \"unresponsive\"", fc->name, weft_status_string(st), msg);
  } else if (st != WEFT_ERR_PROTOCOL && !(fc->may_close && st == WEFT_ERR_PEER_LOST)) {
    fx_fail("%s: %s (\"%s\"), expected WEFT_ERR_PROTOCOL", fc->name, weft_status_string(st), msg);
  }
  if (!fx_names_rank(msg, 1)) fx_fail("%s: message \"%s\" does not name rank 1", fc->name, msg);
  fx_measure("7", fc->name, fc->stall ? T : 1.0, t_send >= 0 ? t_done - t_send : -1);
  if (weft_async_error(w) == WEFT_OK) fx_fail("%s: the world is not failed", fc->name);
  weft_request_free(victim);
  pipe_put(wr, "D", 1);
  if (pipe_get(rd, 10) != 'F') fx_fail("the fake rank never finished its checks");
  double f0 = fx_now();
  st = weft_finalize(w);
  fx_measure("7", "finalize", 1.0, fx_now() - f0);
  if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL) fx_fail("weft_finalize: %s", weft_status_string(st));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fx_info("peak RSS %ld KiB", ru.ru_maxrss);
  if (ru.ru_maxrss > RSS_CAP_KIB)
    fx_fail("peak RSS %ld KiB is over %d KiB: memory sized or multiplied by what the peer sent?", ru.ru_maxrss,
            RSS_CAP_KIB);
  if (!fx_failures) fx_pass("rank 0: %s rejected cleanly", fc->name);
  return fx_failures ? 1 : 0;
}

/* ------------------------------------------------------------ the fake rank 1 */

/* The malformed bytes of a case into buf; returns their length. */
static size_t build(const fcase *fc, uint8_t *buf, size_t cap) {
  const char *c = fc->name;
  size_t n = 24;
  if (!strcmp(c, "len2e40"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, 1ULL << 40);
  else if (!strcmp(c, "data2e40"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_DATA, 1, 0, 1ULL << 40);
  else if (!strcmp(c, "lenneg"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, UINT64_MAX - 15);
  else if (!strcmp(c, "len0"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, 0);
  else if (!strcmp(c, "truncated"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, 100), memset(buf + 24, 0, 40), n = 64;
  else if (!strcmp(c, "stall"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, 100), n = 12;
  else if (!strcmp(c, "type0"))
    hdr(buf, WF_WIRE_MAGIC, 1, 0, 1, 0, 0);
  else if (!strcmp(c, "type200"))
    hdr(buf, WF_WIRE_MAGIC, 1, 200, 1, 0, 8), memset(buf + 24, 0, 8), n = 32;
  else if (!strcmp(c, "version"))
    hdr(buf, WF_WIRE_MAGIC, 2, WF_MSG_HEARTBEAT, 1, 0, 0);
  else if (!strcmp(c, "magic"))
    hdr(buf, 0x50545448u /* "HTTP" */, 1, WF_MSG_HEARTBEAT, 1, 0, 0);
  else if (!strcmp(c, "reserved"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_HEARTBEAT, 1, 0xdead, 0);
  else if (!strcmp(c, "src"))
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_HEARTBEAT, 0, 0, 0);
  else if (!strcmp(c, "orphans"))
    hdr(buf, 0x50545448u, 1, WF_MSG_HEARTBEAT, 1, 0, 0);
  else if (!strcmp(c, "count")) {
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_REQUESTS, 1, 0, 64);
    put_le(buf + 24, 0xffffffffu, 4);
    memset(buf + 28, 0x41, 60);
    n = 88;
  } else if (!strcmp(c, "abortlen")) {
    hdr(buf, WF_WIRE_MAGIC, 1, WF_MSG_ABORT, 1, 0, 12);
    put_le(buf + 24, 4000, 2); /* a 4000-byte reason in a 12-byte payload */
    memcpy(buf + 26, "short rea", 10);
    n = 36;
  } else if (!strcmp(c, "responses") || !strcmp(c, "hello")) {
    wf_buf b = {0};
    weft_status st;
    if (c[0] == 'r') {
      char name[] = "victim", *names[] = {name};
      wf_response_msg r = {0, 0, WF_RESP_OK, WF_COLL_ALLREDUCE, 0, 1, names, 0, NULL, NULL};
      st = wf_encode_responses(&b, 1, &r, 1);
    } else {
      wf_hello_msg h;
      memset(&h, 0, sizeof h);
      h.rank = 1, h.size = 2, h.pid = (uint32_t)getpid();
      snprintf(h.host, sizeof h.host, "fake");
      snprintf(h.listen_addr, sizeof h.listen_addr, "127.0.0.1:1");
      st = wf_encode_hello(&b, 1, &h);
    }
    if (st != WEFT_OK || b.len > cap) fx_fail("cannot encode the %s frame", c);
    n = st == WEFT_OK && b.len <= cap ? b.len : 0;
    if (n) memcpy(buf, b.data, n);
    wf_buf_free(&b);
  } else if (!strcmp(c, "random")) {
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    n = 4096;
    for (size_t i = 0; i < n; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      buf[i] = (uint8_t)s;
    }
  }
  return n;
}

static int fake_rank1(const fcase *fc, const char *addr, int rd, int wr, pid_t child) {
  fx_open_verdict("fake");
  /* the agreed settings a real rank of this job sends (same environment) */
  wf_settings set;
  char serr[256];
  if (wf_settings_resolve(&set, serr, sizeof serr) != WEFT_OK) {
    fx_fail("the fake rank's settings: %s", serr);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 1;
  }
  wf_boot_cfg bc = {.rank = 1,
                    .size = 2,
                    .addr = addr,
                    .secret = (const uint8_t *)SECRET,
                    .secret_len = strlen(SECRET),
                    .job_id = getenv("WEFT_JOB_ID"),
                    .hostname = "fake-rank",
                    .timeout_seconds = 10,
                    .handshake_timeout = 5,
                    .settings = &set};
  wf_boot_result br;
  weft_status st = wf_bootstrap(&bc, &br);
  if (st != WEFT_OK) {
    fx_fail("the fake rank's rendezvous failed: %s", weft_last_error());
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 1;
  }
  int fd = br.fds[0];
  /* The link works: a barrier rank 0 also submits, in a REQUESTS frame. */
  wf_request_msg m;
  memset(&m, 0, sizeof m);
  m.coll = WF_COLL_BARRIER, m.root = -1, m.device = WEFT_DEVICE_CPU, m.prescale = m.postscale = 1.0;
  snprintf(m.name, sizeof m.name, "probe");
  wf_buf b = {0};
  if (wf_encode_requests(&b, 1, &m, 1) != WEFT_OK || write_all(fd, b.data, b.len) != 0)
    fx_fail("cannot send the probe request");
  wf_buf_free(&b);
  if (pipe_get(rd, 15) != 'R') fx_fail("rank 0 never got its request pending");
  static uint8_t bad[8192];
  uint8_t hb[24];
  hdr(hb, WF_WIRE_MAGIC, 1, WF_MSG_HEARTBEAT, 1, 0, 0); /* fresh: the stall case must not time out early */
  if (!strcmp(fc->name, "orphans")) {                   /* well-formed, but for group 777 */
    wf_request_msg *q = calloc(ORPHAN_PER_FRAME, sizeof *q);
    if (!q) fx_fail("out of memory");
    for (int i = 0; q && i < ORPHAN_PER_FRAME; i++) {
      q[i].group_id = 777, q[i].coll = WF_COLL_BARRIER, q[i].root = -1, q[i].device = WEFT_DEVICE_CPU;
      q[i].prescale = q[i].postscale = 1.0;
      snprintf(q[i].name, sizeof q[i].name, "%c%c", 'a' + i % 26, 'a' + i / 26 % 26);
    }
    for (int f = 0; q && f < ORPHAN_FRAMES; f++) {
      wf_buf ob = {0};
      if (wf_encode_requests(&ob, 1, q, ORPHAN_PER_FRAME) != WEFT_OK || write_all(fd, ob.data, ob.len) != 0) {
        fx_info("the flood stopped after %d frames: %s", f, strerror(errno));
        wf_buf_free(&ob);
        break;
      }
      wf_buf_free(&ob);
    }
    free(q);
  }
  size_t n = build(fc, bad, sizeof bad);
  double t_send = fx_now();
  if (write_all(fd, hb, sizeof hb) != 0 || write_all(fd, bad, n) != 0)
    fx_info("the bad frame was cut short: %s", strerror(errno));
  if (!strcmp(fc->name, "truncated")) {
    t_send = fx_now();
    close(fd);
    br.fds[0] = fd = -1;
  }
  pipe_put(wr, &t_send, sizeof t_send);
  if (fc->drop) { /* rank 0 must hang up on us, within 1 s */
    double end = t_send + 1.0, t_eof = -1;
    uint8_t sink[4096];
    while (fx_now() < end) {
      struct pollfd pf = {fd, POLLIN, 0};
      if (poll(&pf, 1, 50) <= 0) continue;
      ssize_t r = recv(fd, sink, sizeof sink, 0);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        t_eof = fx_now();
        break;
      }
    }
    fx_measure("7", "connection_dropped", 1.0, t_eof >= 0 ? t_eof - t_send : -1);
  }
  if (pipe_get(rd, 15) != 'D') fx_fail("rank 0 never finished its checks");
  pipe_put(wr, "F", 1);
  int ws = 0;
  while (waitpid(child, &ws, 0) < 0 && errno == EINTR) {
  }
  wf_boot_result_free(&br);
  if (WIFSIGNALED(ws))
    fx_fail("rank 0 died of signal %d", WTERMSIG(ws));
  else if (WEXITSTATUS(ws) != 0)
    fx_fail("rank 0 exited %d", WEXITSTATUS(ws));
  if (!fx_failures) fx_pass("%s", fc->name);
  return fx_failures ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const fcase *fc = NULL;
  for (size_t i = 0; argc == 2 && i < sizeof k_cases / sizeof k_cases[0]; i++)
    if (!strcmp(argv[1], k_cases[i].name)) fc = &k_cases[i];
  if (!fc) {
    fprintf(stderr,
            "usage: fault_fake_peer CASE (len2e40, data2e40, lenneg, len0, truncated, stall, type0, type200, "
            "version, magic, reserved, count, src, responses, hello, abortlen, random, orphans)\n");
    return 2;
  }
  /* a port free now, on loopback (rank 0 listens there) */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) || getsockname(s, (struct sockaddr *)&sa, &len)) {
    perror("cannot find a free port");
    return 1;
  }
  close(s);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
  setenv("WEFT_JOB_ID", "fault-fake-peer-job", 1);
  int to0[2], from0[2];
  if (pipe(to0) || pipe(from0)) return 1;
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(to0[1]);
    close(from0[0]);
    _exit(rank0(fc, addr, to0[0], from0[1]));
  }
  close(to0[0]);
  close(from0[1]);
  return fake_rank1(fc, addr, from0[0], to0[1], child);
}
