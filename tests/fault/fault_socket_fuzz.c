/* fault_socket_fuzz.c - the live-socket fuzzer (issue 6, item 5): random
 * bytes and frames against the sockets of a real 3-rank job run by weftrun.
 *
 *   fault_socket_fuzz WEFTRUN [SECONDS [FIRST_SEED]]    the driver (ctest)
 *   fault_socket_fuzz --one a|b SEED WEFTRUN            one job, to reproduce
 *   fault_socket_fuzz --rank a|b SEED                   a rank (under weftrun)
 *
 * Mode a, unauthenticated: while ranks 1 and 2 hold back, the driver opens
 * ATTACKS connections at once to rank 0's rendezvous port and sends each
 * random bytes, random frames, or a well-formed handshake HELLO with a
 * random MAC, sometimes after reading the CHALLENGE, then half-closes (or
 * goes silent). Every one must be dropped (within the handshake timeout
 * + 2 s), get nothing beyond the 40-byte CHALLENGE, and be logged ("dropped
 * connection"); then the job forms and computes correct allreduces.
 *
 * Mode b, authenticated: rank 2 is a fake that holds the job secret (from
 * weftrun's environment). It runs the rendezvous itself (handshake, HELLO,
 * PEERS, dial rank 1), sometimes with a mutated HELLO; then, while ranks 0
 * and 1 run checked allreduces in a group of their own, it sends 1-4 fuzz
 * frames to rank 0 and/or 1: random bytes, headers with random type and
 * length (2^40, 2^64-1, 0, ...), truncated frames, or valid messages of
 * every type (REQUESTS, RESPONSES, DATA, ABORT, ...) mutated or not; then
 * it leaves (with a BYE, sometimes). The real ranks must never crash or
 * hang and never get a wrong result: every operation ends in its deadline,
 * a successful allreduce has the right sums, and a failure (init included)
 * has an error status and a message naming rank 2 (or, at init, any
 * error). They finalize within 2 s and leave no fd or thread behind (the
 * ASan build adds leaks and memory errors).
 *
 * The driver runs mode a twice, then mode b with seeds FIRST_SEED, +1, ...
 * until SECONDS (default 40) have passed (at least 4 runs), and fails with
 * the seed and the job's output on the first bad run. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "bootstrap/auth.h"
#include "bootstrap/sockutil.h"
#include "fault_common.h"
#include "util/settings.h"
#include "util/time.h"
#include "weft.h"
#include "wire/wire.h"

#define ATTACKS 24
#define A_RUNS 2
#define MIN_B_RUNS 4
#define OP_LIMIT 15.0 /* s: an operation still pending then is a hang */

static uint64_t g_rng;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng * 0x2545F4914F6CDD1DULL;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static void seed_rng(uint64_t seed, uint64_t salt) {
  g_rng = (seed + 1) * 0x9E3779B97F4A7C15ULL ^ salt;
  for (int i = 0; i < 4; i++) rnd();
}
static void random_bytes(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
}
static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int send_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    struct pollfd pf = {fd, POLLOUT, 0};
    if (poll(&pf, 1, 2000) <= 0) return -1; /* a peer that stopped reading: give up */
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

/* Mutates buf[0..len) 1-3 times; returns the new length (may be cut). */
static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
  int times = 1 + (int)below(3);
  for (int t = 0; t < times && len; t++) {
    size_t at = (size_t)below(len);
    switch (below(6)) {
      case 0: buf[at] ^= (uint8_t)(1 + below(255)); break;
      case 1: buf[at] = (uint8_t)rnd(); break;
      case 2: { /* a boundary value in a 2/4/8-byte field */
        static const uint64_t v[] = {0, UINT64_MAX, 1ULL << 40, 0x80000000ULL, 0xffff, 1ULL << 63};
        int w = 2 << below(3);
        for (int i = 0; i < w && at + (size_t)i < len; i++) buf[at + (size_t)i] = (uint8_t)(v[below(6)] >> (8 * i));
        break;
      }
      case 3: len = at; break; /* truncated */
      case 4: /* grown with junk */
        if (len < cap) {
          size_t k = (size_t)below(cap - len) + 1;
          random_bytes(buf + len, k);
          len += k;
        }
        break;
      default: { /* the frame header's length field */
        if (len >= WF_FRAME_HDR_SIZE) put_le(buf + 16, below(4) ? below(2 * len) : rnd(), 8);
      }
    }
  }
  return len;
}

/* ------------------------------------------------------------ the real ranks */

static int R = -1;
static int g_fds0, g_threads0;

static double env_num(const char *name, double dflt) {
  const char *v = getenv(name);
  return v && *v ? strtod(v, NULL) : dflt;
}

static void check_leaks(void) {
  int fds = fx_count_fds(), th = fx_count_threads_after(g_threads0);
  if (fds > g_fds0) fx_fail("rank %d: %d fds open after finalize, %d before init", R, fds, g_fds0);
  if (th != g_threads0) fx_fail("rank %d: %d threads after finalize, %d before init", R, th, g_threads0);
}

/* Known gap (reported to the lead, fix proposed in src/engine/engine.c):
 * a rank that fails because of a relayed ABORT ("status N: ...") does not
 * pass it on, trusting its sender told every peer; a fake that told only
 * rank 0 leaves rank 1 failing with "rank 0 has shut down", not naming
 * rank 2. While 1, such a secondary failure naming the other real rank is
 * tolerated (and logged); set it to 0 once the engine relays them. */
#define TOLERATE_UNRELAYED_ABORT 0

/* A failure after init must name the fake (rank 2). */
static void check_failure(weft_status st, const char *msg, const char *what) {
  if (st >= 0) fx_fail("%s: status %d is not an error", what, (int)st);
  else if (!msg || !*msg) fx_fail("%s: %s without a message", what, weft_status_string(st));
  else if (TOLERATE_UNRELAYED_ABORT && !fx_names_rank(msg, 2) && fx_names_rank(msg, !R) &&
           fx_has(msg, "shut down"))
    fx_info("%s: KNOWN GAP (unrelayed abort): %s \"%.300s\"", what, weft_status_string(st), msg);
  else if (!fx_names_rank(msg, 2)) fx_fail("%s: %s \"%s\" does not name rank 2", what, weft_status_string(st), msg);
  else fx_info("%s: %s \"%.300s\"", what, weft_status_string(st), msg);
}

/* Checked int64 sum allreduces in g until one fails (returns 0) or, when
 * `until_done`, the fake has left and `grace` s have passed (returns 1);
 * otherwise after `count` of them. Element 64 is each rank's vote to stop
 * (its grace is over): all stop after the same allreduce, the first whose
 * sum of votes is not 0 (stopping each on its own clock, one rank could
 * finalize while the other began one more, which then failed without
 * naming rank 2). */
static int allreduces(weft_group *g, int nranks, int count, int until_done, double grace) {
  int64_t v[65];
  int64_t shape[1] = {65};
  double t_end = -1;
  for (int it = 0; until_done || it < count; it++) {
    for (int i = 0; i < 64; i++) v[i] = (int64_t)R * 1000 + i + it;
    v[64] = t_end >= 0 && fx_now() > t_end;
    weft_tensor t = {WEFT_DTYPE_INT64, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    char name[32];
    snprintf(name, sizeof name, "fz.%d", it);
    weft_status st = weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &req);
    if (st != WEFT_OK) return check_failure(st, weft_last_error(), "allreduce submit"), 0;
    st = weft_wait(req, OP_LIMIT);
    if (st == WEFT_IN_PROGRESS) {
      fx_fail("rank %d: allreduce %s still pending after %.0f s (hang)", R, name, OP_LIMIT);
      weft_request_free(req);
      return 0;
    }
    if (st != WEFT_OK) {
      check_failure(st, weft_request_error(req), "allreduce");
      weft_request_free(req);
      return 0;
    }
    weft_request_free(req);
    for (int i = 0; i < 64; i++) {
      int64_t want = 1000LL * nranks * (nranks - 1) / 2 + (int64_t)nranks * (i + it);
      if (v[i] != want) {
        fx_fail("rank %d: allreduce %s element %d is %lld, expected %lld", R, name, i, (long long)v[i],
                (long long)want);
        return 0;
      }
    }
    if (until_done) {
      if (v[64] > 0) return 1;
      if (t_end < 0 && fx_wait_file("fake.done", 0) == 0) t_end = fx_now() + grace;
      fx_sleep(0.002);
    }
  }
  return 1;
}

static void finalize(weft_world *w) {
  double t0 = fx_now();
  weft_status st = weft_finalize(w);
  double dt = fx_now() - t0;
  if (st == WEFT_ERR_MISUSE || st == WEFT_ERR_INTERNAL)
    fx_fail("rank %d: weft_finalize: %s", R, weft_status_string(st));
  if (dt > 3.0) fx_fail("rank %d: weft_finalize took %.2f s", R, dt); /* ~1 s promised; slack for load */
}

static int real_rank(char mode) {
  fx_threads_settle();
  g_fds0 = fx_count_fds();
  g_threads0 = fx_count_threads();
  if (mode == 'a') {
    if (R == 0) {
      fx_put("addr", "%s", getenv("WEFT_ADDR") ? getenv("WEFT_ADDR") : "");
    } else if (fx_wait_file("go", 30) != 0) {
      fx_fail("rank %d: no go from the driver", R);
      return 1;
    }
  }
  weft_world *w = NULL;
  double t0 = fx_now();
  weft_status st = weft_init(NULL, &w);
  if (st != WEFT_OK) {
    const char *msg = weft_last_error();
    if (mode == 'a') fx_fail("rank %d: weft_init: %s: %s", R, weft_status_string(st), msg);
    else if (st >= 0 || !*msg) fx_fail("rank %d: weft_init failed with %s and \"%s\"", R, weft_status_string(st), msg);
    else fx_info("rank %d: init failed (the fake's HELLO?): %s \"%.300s\"", R, weft_status_string(st), msg);
    double limit = env_num("WEFT_INIT_TIMEOUT_SECONDS", 30) + 3;
    if (fx_now() - t0 > limit) fx_fail("rank %d: weft_init took %.1f s to fail", R, fx_now() - t0);
    check_leaks();
    if (!fx_failures) fx_pass("rank %d: init failed cleanly", R);
    return fx_failures ? 1 : 0;
  }
  if (mode == 'a') {
    allreduces(weft_world_group(w), 3, 5, 0, 0);
  } else {
    const int members[2] = {0, 1};
    weft_group *g = NULL;
    st = weft_group_create(w, members, 2, &g);
    if (st != WEFT_OK) check_failure(st, weft_last_error(), "group create");
    else if (allreduces(g, 2, 0, 1, 3.0)) {
      /* the fake left and the job goes on: only right after a goodbye */
      char done[64] = "";
      fx_get("fake.done", done, sizeof done);
      st = weft_async_error(w);
      if (st != WEFT_OK) check_failure(st, weft_last_error(), "after the fake left");
      else if (!strstr(done, "bye")) fx_fail("rank %d: the fake left without a BYE and nothing failed", R);
      else fx_info("rank %d: the fake said BYE; the job went on", R);
    }
  }
  finalize(w);
  check_leaks();
  if (!fx_failures) fx_pass("rank %d", R);
  return fx_failures ? 1 : 0;
}

/* ------------------------------------------------------------ the fake rank 2 */

static wf_auth_params g_ap;

/* Connects to a and runs the handshake as rank 2; -1 on failure. */
static int dial_auth(const struct sockaddr_in *a, uint32_t expect, double patience) {
  int64_t deadline = wf_deadline_after(patience);
  char err[256];
  for (;;) {
    int fd = -1;
    weft_status st = wf_sock_connect(a, deadline, &fd, err, sizeof err);
    if (st == WEFT_OK) {
      st = wf_auth_connect(fd, &g_ap, expect, deadline, err, sizeof err);
      if (st == WEFT_OK) return fd;
      close(fd);
    }
    if (st != WEFT_ERR_PEER_LOST || wf_now_ns() > deadline) {
      fx_info("fake: cannot reach rank %u: %s: %s", expect, weft_status_string(st), err);
      return -1;
    }
    fx_sleep(0.02);
  }
}

/* Reads exactly n bytes within `timeout` s: 1 ok, 0 EOF/error, -1 timeout. */
static int recv_n(int fd, uint8_t *p, size_t n, double timeout) {
  double end = fx_now() + timeout;
  size_t got = 0;
  while (got < n) {
    double left = end - fx_now();
    struct pollfd pf = {fd, POLLIN, 0};
    if (left <= 0) return -1;
    int r = poll(&pf, 1, (int)(left * 1000) + 1);
    if (r == 0) return -1;
    if (r < 0) continue;
    ssize_t k = recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k == 0) return 0;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return 0;
    }
    got += (size_t)k;
  }
  return 1;
}

/* The rendezvous as rank 2 of 3, by hand: handshake with rank 0, HELLO
 * (mutated on the first try, sometimes), PEERS, then dial rank 1. Returns
 * 1 with both links, or 0 when the job refused this rank (not a failure
 * when the HELLO was mutated). */
static int fake_bootstrap(int *fd0, int *fd1) {
  struct sockaddr_in a0, a1;
  char err[256];
  const char *addr = getenv("WEFT_ADDR");
  if (!addr || wf_sock_parse_addr(addr, 1, &a0, err, sizeof err) != WEFT_OK)
    return fx_fail("fake: bad WEFT_ADDR %s", addr ? addr : "(unset)");
  for (int attempt = 0; attempt < 2; attempt++) {
    int mutated = attempt == 0 && below(4) == 0;
    int fd = dial_auth(&a0, 0, 10);
    if (fd < 0) return attempt ? 0 : fx_fail("fake: the handshake with rank 0 failed with the real secret");
    wf_hello_msg h;
    memset(&h, 0, sizeof h);
    h.rank = 2, h.size = 3, h.pid = (uint32_t)getpid();
    snprintf(h.host, sizeof h.host, "fake-host");
    snprintf(h.listen_addr, sizeof h.listen_addr, "127.0.0.1:9");
    /* the agreed settings as a real rank of this job sends them (the same
     * environment), so that rank 0 answers the valid HELLO with PEERS */
    wf_settings set;
    if (wf_settings_resolve(&set, err, sizeof err) != WEFT_OK) return fx_fail("fake: settings: %s", err);
    wf_settings_text(&set, h.settings, sizeof h.settings);
    wf_settings_digest(&set, h.settings_digest);
    wf_buf b = {0};
    uint8_t buf[8192];
    if (wf_encode_hello(&b, 2, &h) != WEFT_OK || b.len > sizeof buf) return fx_fail("fake: cannot encode HELLO");
    size_t n = b.len;
    memcpy(buf, b.data, n);
    wf_buf_free(&b);
    if (mutated) n = mutate(buf, n, sizeof buf), fx_info("fake: HELLO mutated (%zu bytes)", n);
    if (send_all(fd, buf, n) != 0) fx_info("fake: HELLO cut short: %s", strerror(errno));
    uint8_t hdr[WF_FRAME_HDR_SIZE];
    int r = recv_n(fd, hdr, sizeof hdr, 3);
    wf_frame_hdr fh;
    if (r == 1 && wf_frame_hdr_decode(hdr, 1 << 20, 0, &fh, err, sizeof err) == WEFT_OK) {
      uint8_t *body = malloc(fh.length + 1);
      if (!body || recv_n(fd, body, (size_t)fh.length, 3) != 1) {
        free(body);
        close(fd);
        return fx_fail("fake: rank 0's reply was cut short");
      }
      wf_peers_msg pm = {0, NULL};
      if (fh.type == WF_MSG_PEERS && wf_decode_peers(body, (size_t)fh.length, &pm, err, sizeof err) == WEFT_OK &&
          pm.size == 3) {
        weft_status st = wf_sock_parse_addr(pm.peers[1].listen_addr, 1, &a1, err, sizeof err);
        wf_peers_msg_free(&pm);
        free(body);
        if (st != WEFT_OK) return close(fd), fx_fail("fake: rank 1's address: %s", err);
        *fd0 = fd;
        *fd1 = dial_auth(&a1, 1, 10);
        if (*fd1 < 0) return fx_fail("fake: the handshake with rank 1 failed");
        return 1;
      }
      char reason[WF_ERRMSG_MAX + 1] = "";
      if (fh.type == WF_MSG_ABORT) wf_decode_abort(body, (size_t)fh.length, reason, sizeof reason, err, sizeof err);
      free(body);
      close(fd);
      if (!mutated) return fx_fail("fake: rank 0 answered a valid HELLO with type %u: %s", fh.type, reason);
      fx_info("fake: rank 0 refused the mutated HELLO: %.200s", reason);
      return 0;
    }
    close(fd);
    if (!mutated) return fx_fail("fake: no PEERS for a valid HELLO (%s)", r == 1 ? err : r ? "timeout" : "closed");
    fx_info("fake: rank 0 %s after the mutated HELLO; trying again", r == 1 ? "sent junk" : r ? "waits" : "hung up");
  }
  return 0;
}

static int g_maybe_bye; /* a BYE may have gone out among the fuzz frames */

/* A valid message of a random type, as rank 2, appended to b. */
static void valid_message(wf_buf *b) {
  static const char *names[] = {"fz.0", "fz.1", "fz.2", "fz.3", "ghost", "fz.10"};
  static const uint32_t groups[] = {0, 1, 2, 7};
  switch (below(10)) {
    case 0:
    case 1: {
      wf_request_msg q[3];
      int64_t splits[3][3] = {{1, 1, 1}, {0, 2, 1}, {4, 4, 4}};
      uint32_t k = 1 + (uint32_t)below(3);
      memset(q, 0, sizeof q);
      for (uint32_t i = 0; i < k; i++) {
        q[i].group_id = groups[below(4)], q[i].coll = (uint8_t)below(WF_COLL_COUNT_);
        q[i].dtype = below(2) ? WEFT_DTYPE_INT64 : (uint8_t)below(WEFT_DTYPE_COUNT_);
        q[i].reduce_op = (uint8_t)below(WEFT_OP_COUNT_), q[i].ndim = 1;
        q[i].shape[0] = below(3) ? 64 : (int64_t)below(1 << 20);
        q[i].root = q[i].coll == WF_COLL_BROADCAST ? (int32_t)below(3) : -1, q[i].device = WEFT_DEVICE_CPU;
        q[i].prescale = q[i].postscale = 1.0;
        if (q[i].coll == WF_COLL_ALLTOALL) q[i].nsplits = below(2) ? 2 : 3, q[i].splits = splits[i];
        snprintf(q[i].name, sizeof q[i].name, "%s", names[below(6)]);
      }
      wf_encode_requests(b, 2, q, k);
      break;
    }
    case 2: {
      char n0[16], *nm[1] = {n0};
      int64_t sizes[4] = {64, 64, 64, 64};
      snprintf(n0, sizeof n0, "%s", names[below(6)]);
      wf_response_msg r = {below(8), groups[below(4)], (uint8_t)below(2), (uint8_t)below(WF_COLL_COUNT_), 0, 1, nm,
                           0, sizes, NULL};
      if (r.type == WF_RESP_ERROR) r.status = WEFT_ERR_MISMATCH, r.error = (char *)"fuzz says no";
      if (r.coll == WF_COLL_ALLREDUCE) r.nsizes = 3;
      if (r.coll == WF_COLL_ALLTOALL) r.nsizes = 4;
      wf_encode_responses(b, 2, &r, 1);
      break;
    }
    case 3: { /* DATA for some collective of the group */
      uint8_t f[WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE + 512];
      size_t k = (size_t)below(513);
      wf_frame_hdr h = {WF_MSG_DATA, 0, 2, WF_DATA_SUBHDR_SIZE + k};
      wf_data_hdr d = {below(8), (uint32_t)below(4)};
      wf_frame_hdr_encode(f, &h);
      wf_data_hdr_encode(f + WF_FRAME_HDR_SIZE, &d);
      random_bytes(f + WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE, k);
      size_t n = WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE + k;
      uint8_t *nd = realloc(b->data, b->len + n);
      if (!nd) break;
      memcpy(nd + b->len, f, n);
      b->data = nd, b->len += n, b->cap = b->len;
      break;
    }
    case 4: wf_encode_abort(b, 2, below(2) ? "status -7: the fuzzer disagrees" : "fuzz abort"); break;
    case 5: wf_encode_stall(b, 2, "fuzz stall report"); break;
    case 6: {
      wf_hello_msg h;
      memset(&h, 0, sizeof h);
      h.rank = 2, h.size = 3;
      snprintf(h.host, sizeof h.host, "x");
      snprintf(h.listen_addr, sizeof h.listen_addr, "127.0.0.1:1");
      wf_encode_hello(b, 2, &h);
      break;
    }
    case 7: {
      wf_peer_info p[3];
      memset(p, 0, sizeof p);
      for (int i = 0; i < 3; i++) {
        snprintf(p[i].host, sizeof p[i].host, "h");
        snprintf(p[i].listen_addr, sizeof p[i].listen_addr, "127.0.0.1:1");
        p[i].local_size = p[i].cross_size = 1;
      }
      wf_peers_msg m = {3, p};
      wf_encode_peers(b, 2, &m);
      break;
    }
#ifdef WF_CACHE_MAX_IDS
    case 8: {
      wf_cache_ref c = {(uint32_t)groups[below(4)], (uint32_t)below(4), 1 + below(3)};
      wf_encode_cache_refs(b, 2, below(2) ? WF_MSG_CACHED : WF_MSG_RESEND, &c, 1);
      break;
    }
#endif
    default: {
      int is_bye = below(2);
      g_maybe_bye |= is_bye;
      wf_encode_simple(b, 2, is_bye ? WF_MSG_BYE : WF_MSG_HEARTBEAT);
    }
  }
}

/* One fuzz frame into buf; returns its length. */
static size_t fuzz_frame(uint8_t *buf, size_t cap) {
  switch (below(3)) {
    case 0: {
      size_t n = 1 + (size_t)below(2048);
      random_bytes(buf, n);
      return n;
    }
    case 1: {
      static const uint64_t lens[] = {0, 8, 1ULL << 40, UINT64_MAX, UINT64_MAX - 15, 1 << 19};
      uint64_t len = below(3) ? below(300) : lens[below(6)];
      put_le(buf, below(8) ? WF_WIRE_MAGIC : rnd(), 4);
      buf[4] = below(8) ? WF_WIRE_VERSION : (uint8_t)rnd();
      buf[5] = (uint8_t)below(16);
      g_maybe_bye |= buf[5] == WF_MSG_BYE;
      put_le(buf + 6, below(8) ? 0 : rnd(), 2);
      put_le(buf + 8, below(8) ? 2 : below(4), 4);
      put_le(buf + 12, below(8) ? 0 : rnd(), 4);
      put_le(buf + 16, len, 8);
      size_t k = (size_t)below(300);
      random_bytes(buf + WF_FRAME_HDR_SIZE, k);
      return WF_FRAME_HDR_SIZE + k;
    }
    default: {
      wf_buf b = {0};
      valid_message(&b);
      size_t n = b.len < cap / 2 ? b.len : cap / 2;
      if (n) memcpy(buf, b.data, n);
      wf_buf_free(&b);
      return below(3) ? mutate(buf, n, cap) : n;
    }
  }
}

static int fake_rank(void) {
  const char *secret = getenv("WEFT_SECRET");
  g_ap = (wf_auth_params){(const uint8_t *)(secret ? secret : ""), secret ? strlen(secret) : 0, getenv("WEFT_JOB_ID"),
                          2, 3};
  int fd[2] = {-1, -1};
  int joined = fake_bootstrap(&fd[0], &fd[1]);
  if (joined != 1) {
    fx_put("fake.done", "%s", "refused");
    if (!fx_failures) fx_pass("fake: refused at the rendezvous");
    return fx_failures ? 1 : 0;
  }
  fx_sleep(0.05 + (double)below(300) / 1000.0); /* the real ranks are computing now */
  static uint8_t buf[8192];
  int frames = 1 + (int)below(4), sent = 0, open_links = 2;
  uint8_t hb[WF_FRAME_HDR_SIZE];
  wf_frame_hdr h = {WF_MSG_HEARTBEAT, 0, 2, 0};
  wf_frame_hdr_encode(hb, &h);
  for (int i = 0; i < frames && open_links; i++) {
    int to = (int)below(2);
    if (fd[to] < 0) to = !to;
    size_t n = fuzz_frame(buf, sizeof buf);
    if (below(3) == 0) send_all(fd[to], hb, sizeof hb);
    if (send_all(fd[to], buf, n) != 0) {
      fx_info("fake: rank %d dropped us (frame %d)", to, i);
      close(fd[to]);
      fd[to] = -1;
      open_links--;
    } else {
      sent++;
    }
  }
  int bye = below(5) == 0;
  if (bye) {
    wf_buf b = {0};
    wf_encode_simple(&b, 2, WF_MSG_BYE);
    for (int k = 0; k < 2; k++)
      if (fd[k] >= 0) send_all(fd[k], b.data, b.len);
    wf_buf_free(&b);
  }
  /* watch for a while whether the real ranks hang up on us */
  double end = fx_now() + 0.5;
  int dropped[2] = {fd[0] < 0, fd[1] < 0};
  while (fx_now() < end && (!dropped[0] || !dropped[1])) {
    uint8_t sink[4096];
    for (int k = 0; k < 2; k++) {
      if (dropped[k]) continue;
      ssize_t r = recv(fd[k], sink, sizeof sink, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) dropped[k] = 1;
    }
    fx_sleep(0.01);
  }
  fx_info("fake: sent %d of %d fuzz frame(s)%s; rank 0 %s, rank 1 %s", sent, frames, bye ? " and BYE" : "",
          dropped[0] ? "hung up" : "kept the link", dropped[1] ? "hung up" : "kept the link");
  fx_put("fake.done", "%s", bye || g_maybe_bye ? "bye" : "nobye");
  for (int k = 0; k < 2; k++)
    if (fd[k] >= 0) close(fd[k]);
  if (!fx_failures) fx_pass("fake");
  return fx_failures ? 1 : 0;
}

/* ------------------------------------------------------------ the driver */

static int g_bad; /* the driver's own findings */

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL [driver] ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  g_bad++;
}

/* Mode a's attackers: ATTACKS connections to rank 0 at once; each must be
 * dropped and get nothing beyond the CHALLENGE. */
static void attack(const char *addr, double hs) {
  struct sockaddr_in a;
  char err[256];
  if (wf_sock_parse_addr(addr, 1, &a, err, sizeof err) != WEFT_OK) return bad("rank 0's address %s: %s", addr, err);
  int fd[ATTACKS];
  unsigned kind[ATTACKS];
  size_t got[ATTACKS];
  double t0[ATTACKS], took[ATTACKS];
  uint8_t buf[4096];
  for (int i = 0; i < ATTACKS; i++) {
    kind[i] = (unsigned)below(6), got[i] = 0, took[i] = -1;
    fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&a, sizeof a) != 0) {
      bad("attacker %d: cannot connect to %s: %s", i, addr, strerror(errno));
      if (fd[i] >= 0) close(fd[i]);
      fd[i] = -1;
      continue;
    }
    if (kind[i] == 1 || kind[i] == 2 || kind[i] == 4) { /* read the CHALLENGE first */
      if (recv_n(fd[i], buf, 40, 5) != 1) bad("attacker %d: no CHALLENGE", i);
      else got[i] = 40;
    }
    size_t n = 0;
    switch (kind[i]) {
      case 0: case 1: n = 1 + (size_t)below(sizeof buf); random_bytes(buf, n); break;
      case 2: /* a well-formed HELLO for rank 1 with a random MAC */
      case 4: /* its first 20 bytes, then silence */
        memcpy(buf, "WFAU\1\2\0\0", 8), put_le(buf + 8, 1, 4), put_le(buf + 12, 3, 4);
        random_bytes(buf + 16, 64);
        n = kind[i] == 2 ? 80 : 20;
        break;
      case 3: n = fuzz_frame(buf, sizeof buf); break;
      default: n = (size_t)snprintf((char *)buf, sizeof buf, "GET / HTTP/1.1\r\nHost: weft\r\n\r\n"); break;
    }
    if (n) {
      ssize_t w = send(fd[i], buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)w; /* a drop may cut it short */
    }
    if (kind[i] <= 1 || kind[i] == 3) shutdown(fd[i], SHUT_WR);
    t0[i] = fx_now();
  }
  double end = fx_now() + hs + 2.5;
  int left = ATTACKS;
  while (left > 0 && fx_now() < end) {
    left = 0;
    for (int i = 0; i < ATTACKS; i++) {
      if (fd[i] < 0 || took[i] >= 0) continue;
      ssize_t r = recv(fd[i], buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) got[i] += (size_t)r;
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) took[i] = fx_now() - t0[i];
      else left++;
    }
    fx_sleep(0.005);
  }
  double worst = 0;
  for (int i = 0; i < ATTACKS; i++) {
    if (fd[i] < 0) continue;
    if (took[i] < 0) bad("attacker %d (kind %u) was not dropped within %.1f s", i, kind[i], hs + 2.5);
    if (got[i] > 40) bad("attacker %d (kind %u) got %zu bytes: more than a CHALLENGE", i, kind[i], got[i]);
    if (took[i] > worst) worst = took[i];
    close(fd[i]);
  }
  printf("INFO [driver] %d unauthenticated connections dropped, the slowest after %.2f s\n", ATTACKS, worst);
}

static int count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  char line[4096];
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  if (f) fclose(f);
  return n;
}

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[4096 + 300];
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      snprintf(p, sizeof p, "%s/%.256s", dir, e->d_name), unlink(p);
  if (d) closedir(d);
  rmdir(dir);
}

/* One job of mode a or b under weftrun; 1 if it passed. */
static int run_job(char mode, uint64_t seed, const char *weftrun, const char *self) {
  char dir[4096], out[4200], sd[32], md[2] = {mode, 0};
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/weft_sockfuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return bad("mkdtemp: %s", strerror(errno)), 0;
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(sd, sizeof sd, "%llu", (unsigned long long)seed);
  setenv("FAULT_DIR", dir, 1);
  int bad0 = g_bad;
  double t0 = fx_now();
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return bad("fork: %s", strerror(errno)), 0;
  if (pid == 0) {
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0) _exit(120);
    execl(weftrun, weftrun, "-np", "3", "--timeout", "60", self, "--rank", md, sd, (char *)NULL);
    _exit(127);
  }
  if (mode == 'a') {
    char addr[128] = "";
    if (fx_wait_file("addr", 20) != 0 || fx_get("addr", addr, sizeof addr) != 0) bad("rank 0 published no address");
    else attack(addr, env_num("WEFT_HANDSHAKE_TIMEOUT", 5));
    fx_put("go", "1");
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  double dt = fx_now() - t0;
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    bad("mode %c seed %s: weftrun exited %d (signal %d)", mode, sd, WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
        WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  if (count_lines(out, "FAIL")) bad("mode %c seed %s: a rank reported FAIL", mode, sd);
  if (count_lines(out, "PASS") < 3) bad("mode %c seed %s: %d of 3 ranks passed", mode, sd, count_lines(out, "PASS"));
  int drops = count_lines(out, "dropped connection");
  if (mode == 'a' && drops < ATTACKS) bad("mode a: rank 0 logged %d dropped connections, expected %d", drops, ATTACKS);
  FILE *f = fopen(out, "r");
  char line[4096];
  while (f && fgets(line, sizeof line, f)) /* the fake's story, one line per run */
    if (strstr(line, "fake: sent") || strstr(line, "refused the mutated") || strstr(line, "init failed") ||
        strstr(line, "KNOWN GAP"))
      printf("  seed %s: %s", sd, line);
  if (f) fclose(f);
  int ok = g_bad == bad0;
  printf("%s mode %c seed %s in %.1f s\n", ok ? "ok" : "FAILED", mode, sd, dt);
  if (!ok) {
    printf("--- the job's output (%s):\n", out);
    f = fopen(out, "r");
    while (f && fgets(line, sizeof line, f)) fputs(line, stdout);
    if (f) fclose(f);
    printf("--- reproduce: %s --one %c %s %s\n", self, mode, sd, weftrun);
  }
  rm_dir(dir);
  return ok;
}

static void job_env(void) {
  setenv("WEFT_TRANSPORT", "tcp", 1);
  setenv("WEFT_HANDSHAKE_TIMEOUT", "1", 1);
  setenv("WEFT_HEARTBEAT_TIMEOUT", "3", 1);
  setenv("WEFT_HEARTBEAT_INTERVAL", "0.5", 1);
  setenv("WEFT_TIMEOUT_SECONDS", "10", 1);
  setenv("WEFT_INIT_TIMEOUT_SECONDS", "10", 1);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  if (argc == 4 && !strcmp(argv[1], "--rank")) { /* under weftrun */
    char mode = argv[2][0];
    uint64_t seed = strtoull(argv[3], NULL, 10);
    R = (int)env_num("WEFT_RANK", -1);
    char who[16];
    snprintf(who, sizeof who, "%d", R == 2 && mode == 'b' ? -2 : R);
    fx_open_verdict(R == 2 && mode == 'b' ? "fake" : who);
    seed_rng(seed, (uint64_t)R);
    if (mode == 'b' && R == 2) return fake_rank();
    return real_rank(mode);
  }
  char self[4096];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return perror("readlink /proc/self/exe"), 1;
  self[k] = '\0';
  job_env();
  if (argc == 5 && !strcmp(argv[1], "--one")) { /* reproduce one run */
    uint64_t seed = strtoull(argv[3], NULL, 10);
    seed_rng(seed, 99);
    return run_job(argv[2][0], seed, argv[4], self) ? 0 : 1;
  }
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: fault_socket_fuzz WEFTRUN [SECONDS [FIRST_SEED]]\n"
                    "       fault_socket_fuzz --one a|b SEED WEFTRUN\n");
    return 2;
  }
  double budget = argc > 2 ? strtod(argv[2], NULL) : 40;
  uint64_t first = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
  double t0 = fx_now();
  int runs = 0;
  for (int i = 0; i < A_RUNS && !g_bad; i++, runs++) {
    seed_rng(first + (uint64_t)i, 99);
    run_job('a', first + (uint64_t)i, argv[1], self);
  }
  uint64_t seed = first;
  int b_runs = 0;
  while (!g_bad && (b_runs < MIN_B_RUNS || fx_now() - t0 < budget)) {
    seed_rng(seed, 99);
    run_job('b', seed++, argv[1], self);
    b_runs++, runs++;
  }
  printf("%s: %d job(s) (%d with the authenticated fake) in %.1f s\n", g_bad ? "FAILED" : "PASSED", runs, b_runs,
         fx_now() - t0);
  return g_bad ? 1 : 0;
}
