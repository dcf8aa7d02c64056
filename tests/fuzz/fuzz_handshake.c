/* fuzz_handshake.c - libFuzzer target for the authentication handshake
 * (src/bootstrap/auth.c, protocol in auth.h), both sides, over a socketpair
 * whose other end the fuzzer plays. The first input byte picks the mode:
 *   0  acceptor, raw: the input is the connector's HELLO, delivered in
 *      chunks to the non-blocking machine (wf_auth_acc_*), maybe then EOF
 *   1  acceptor, structured: a HELLO computed with the real secret over the
 *      real CHALLENGE nonce, or with a wrong secret, job id, label, world
 *      size or rank, or over another nonce (a replay), then maybe corrupted
 *      once (fuzz_common.h: fz_corrupt)
 *   2  acceptor, blocking (wf_auth_accept): raw bytes, then EOF
 *   3  connector, raw (wf_auth_connect): the input is the acceptor's
 *      CHALLENGE and ACCEPT, then EOF
 *   4  connector, structured: a real CHALLENGE, then an ACCEPT computed like
 *      mode 1's HELLO (right or wrong secret, job, label, rank, nonces),
 *      maybe corrupted; the connector runs in a thread
 * Every outcome is checked against an independent model of the protocol
 * (its own HMAC-SHA256 via OpenSSL's one-shot HMAC()): the handshake
 * succeeds exactly when the peer's message is well-formed and its MAC is
 * right for this job, these nonces and these claims, never on a wrong MAC
 * or a replay; a failed acceptor sends nothing after its CHALLENGE; the
 * ACCEPT and HELLO it or the connector sends carry correct MACs; mac_ok
 * is set only for a valid MAC. Allocation hooks check that the acceptor
 * allocates nothing while it reads a HELLO (before the MAC check) and
 * nothing large while it checks it. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <sanitizer/allocator_interface.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/auth.h"
#include "bootstrap/auth_nb.h"
#include "fuzz_common.h"
#include "util/time.h"

#define SECRET "fuzz-handshake-secret"
#define JOB "fuzz-job"
#define WORLD 4
#define ME 0       /* the acceptor's rank */
#define PEER 1     /* the connector's rank */
#define MAX_ALLOC_DURING_CHECK (64 * 1024)

static const wf_auth_params k_acc = {(const uint8_t *)SECRET, sizeof SECRET - 1, JOB, ME, WORLD};
static const wf_auth_params k_conn = {(const uint8_t *)SECRET, sizeof SECRET - 1, JOB, PEER, WORLD};

/* ------------------------------------------------------------ allocation hooks */
static volatile int g_armed;
static volatile size_t g_allocs, g_max_alloc;
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  if (!g_armed) return;
  g_allocs++;
  if (n > g_max_alloc) g_max_alloc = n;
}
static void on_free(const volatile void *p) { (void)p; }

/* ------------------------------------------------------------ the model */
static void put32(uint8_t *o, uint32_t v) {
  for (int i = 0; i < 4; i++) o[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* HMAC-SHA256(secret, label | job | rank | size | n1 | n2) */
static void model_mac(const char *secret, const char *job, const char *label, uint32_t rank, uint32_t size,
                      const uint8_t *n1, const uint8_t *n2, uint8_t out[WF_AUTH_MAC]) {
  uint8_t msg[512];
  size_t k = 0, ll = strlen(label), jl = strlen(job);
  memcpy(msg, label, ll), k += ll;
  memcpy(msg + k, job, jl), k += jl;
  put32(msg + k, rank), k += 4;
  put32(msg + k, size), k += 4;
  memcpy(msg + k, n1, WF_AUTH_NONCE), k += WF_AUTH_NONCE;
  memcpy(msg + k, n2, WF_AUTH_NONCE), k += WF_AUTH_NONCE;
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, k, out, &len) || len != WF_AUTH_MAC)
    fz_fail("model: HMAC failed");
}

static void put_hdr(uint8_t *o, uint8_t kind) {
  memcpy(o, "WFAU", 4);
  o[4] = 1, o[5] = kind, o[6] = o[7] = 0;
}
static int hdr_ok(const uint8_t *p, uint8_t kind) {
  return !memcmp(p, "WFAU", 4) && p[4] == 1 && p[5] == kind && !p[6] && !p[7];
}

/* A message of the given kind (HELLO: 2, ACCEPT: 3) built from the input:
 * mostly right, sometimes with one wrong ingredient (secret, job id, label,
 * rank, world size, or the nonce it answers: a replay), then maybe
 * corrupted once. Both MACs cover (the nonce answered, the sender's own):
 * a HELLO's own nonce comes from the input, an ACCEPT's is `mine` (its
 * CHALLENGE's). Returns the length (a corruption may cut it). */
static size_t make_msg(fz_in *in, uint8_t kind, const uint8_t *theirs, const uint8_t *mine, uint8_t *out) {
  unsigned f = (unsigned)fz_take(in, 1);
  const char *secret = f & 1 ? "fuzz-handshake-secreT" : SECRET;
  const char *job = f & 2 ? "fuzz-jo" : JOB;
  const char *label = (f & 4) ? (kind == 2 ? "weft-accept" : "weft-hello") : (kind == 2 ? "weft-hello" : "weft-accept");
  uint8_t other[WF_AUTH_NONCE], fresh[WF_AUTH_NONCE];
  if (kind == 2) {
    memset(fresh, 0xa7, sizeof fresh);
    fz_take_bytes(in, fresh, sizeof fresh);
    mine = fresh;
  }
  if (f & 8) { /* a replay: the answer to another CHALLENGE / HELLO */
    memset(other, 0x5c, sizeof other);
    fz_take_bytes(in, other, sizeof other);
    theirs = other;
  }
  uint32_t rank = f & 16 ? (uint32_t)fz_take(in, 1) % (WORLD + 2) : kind == 2 ? PEER : ME;
  uint32_t size = f & 32 ? (uint32_t)fz_take(in, 1) : WORLD;
  size_t len;
  put_hdr(out, kind);
  put32(out + 8, rank);
  if (kind == 2) {
    put32(out + 12, size);
    memcpy(out + 16, mine, WF_AUTH_NONCE);
    model_mac(secret, job, label, rank, size, theirs, mine, out + 16 + WF_AUTH_NONCE);
    len = WF_AUTH_HELLO_SIZE;
  } else {
    model_mac(secret, job, label, rank, size, theirs, mine, out + 12);
    len = WF_AUTH_ACCEPT_SIZE;
  }
  if (f & 64) len = fz_corrupt(in, out, len);
  return len;
}

/* ------------------------------------------------------------ plumbing */
static void pair(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair: %s", strerror(errno));
  if (fcntl(sv[0], F_SETFL, O_NONBLOCK) != 0) fz_fail("fcntl: %s", strerror(errno));
}
static void put_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fz_fail("write to the socketpair: %s", strerror(errno));
    p += w, n -= (size_t)w;
  }
}
/* Reads exactly n bytes within 5 s; returns what came. Retries on EINTR:
 * libFuzzer's timeout timer interrupts system calls with SIGALRM. */
static size_t get_n(int fd, uint8_t *p, size_t n) {
  size_t got = 0;
  int64_t deadline = wf_deadline_after(5);
  while (got < n) {
    int64_t left_ms = (deadline - wf_now_ns()) / 1000000;
    if (left_ms <= 0) break;
    struct pollfd pf = {fd, POLLIN, 0};
    int r = poll(&pf, 1, (int)left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ssize_t k = read(fd, p + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  return got;
}
/* Bytes waiting on fd (never blocks). */
static size_t pending(int fd, uint8_t *p, size_t n) {
  ssize_t r;
  do r = recv(fd, p, n, MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  return r > 0 ? (size_t)r : 0;
}

/* ------------------------------------------------------------ acceptor */

/* The model's verdict on the HELLO bytes h[0..len) answering nonce_a. */
static weft_status model_accept(const uint8_t *h, size_t len, int eof, const uint8_t *nonce_a, int *mac_ok) {
  *mac_ok = 0;
  if (len >= 8 && !hdr_ok(h, 2)) return WEFT_ERR_AUTH;
  if (len < WF_AUTH_HELLO_SIZE) return eof ? WEFT_ERR_PEER_LOST : WEFT_IN_PROGRESS;
  uint8_t want[WF_AUTH_MAC];
  uint32_t rank = get32(h + 8), size = get32(h + 12);
  model_mac(SECRET, JOB, "weft-hello", rank, size, nonce_a, h + 16, want);
  if (memcmp(want, h + 16 + WF_AUTH_NONCE, WF_AUTH_MAC) != 0) return WEFT_ERR_AUTH;
  *mac_ok = 1;
  return size == WORLD && rank < size ? WEFT_OK : WEFT_ERR_AUTH;
}

static void acceptor(fz_in *in, int structured) {
  int sv[2];
  char err[256];
  pair(sv);
  unsigned cfg = (unsigned)fz_take(in, 1);
  size_t chunk = 1 + cfg % 81;
  int eof = (cfg / 81) % 2;
  wf_auth_acc a;
  if (wf_auth_acc_init(&a, sv[0], &k_acc, err, sizeof err) != WEFT_OK) fz_fail("wf_auth_acc_init: %s", err);
  short ev = 0;
  weft_status st = wf_auth_acc_step(&a, &ev, err, sizeof err);
  if (st != WEFT_IN_PROGRESS || ev != POLLIN) fz_fail("the acceptor did not send its CHALLENGE and wait");
  uint8_t chal[WF_AUTH_CHALLENGE_SIZE];
  if (get_n(sv[1], chal, sizeof chal) != sizeof chal || !hdr_ok(chal, 1)) fz_fail("bad CHALLENGE");
  const uint8_t *nonce_a = chal + 8;
  uint8_t hello[256];
  size_t len = structured ? make_msg(in, 2, nonce_a, NULL, hello) : fz_take_bytes(in, hello, sizeof hello);
  size_t off = 0;
  while (st == WEFT_IN_PROGRESS && off < len) {
    size_t k = len - off < chunk ? len - off : chunk;
    put_all(sv[1], hello + off, k);
    off += k;
    if (off == len && eof) shutdown(sv[1], SHUT_WR);
    /* still reading the HELLO: nothing may be allocated */
    int reading = off < WF_AUTH_HELLO_SIZE;
    g_allocs = g_max_alloc = 0;
    g_armed = 1;
    st = wf_auth_acc_step(&a, &ev, err, sizeof err);
    g_armed = 0;
    if (reading && g_allocs) fz_fail("the acceptor allocated %zu time(s) before the HELLO was complete", g_allocs);
    if (!reading && g_max_alloc > MAX_ALLOC_DURING_CHECK)
      fz_fail("the acceptor allocated %zu bytes checking a HELLO", g_max_alloc);
  }
  if (len == 0 && eof) {
    shutdown(sv[1], SHUT_WR);
    st = wf_auth_acc_step(&a, &ev, err, sizeof err);
  }
  size_t delivered = off < WF_AUTH_HELLO_SIZE ? off : WF_AUTH_HELLO_SIZE;
  int mac_ok;
  weft_status want = model_accept(hello, delivered, eof && off == len, nonce_a, &mac_ok);
  /* junk that ends with EOF in the same read may be reported as the EOF
   * (the header is checked after the read): dropped either way */
  int junk_then_eof = want == WEFT_ERR_AUTH && !mac_ok && eof && off == len && st == WEFT_ERR_PEER_LOST &&
                      delivered < WF_AUTH_HELLO_SIZE;
  if (st != want && !junk_then_eof)
    fz_fail("acceptor: %s, the model says %s (%zu HELLO bytes, eof %d): %s", weft_status_string(st),
            weft_status_string(want), delivered, eof, st == WEFT_IN_PROGRESS ? "" : err);
  if (a.mac_ok != mac_ok) fz_fail("acceptor: mac_ok %d, the model says %d", a.mac_ok, mac_ok);
  if (mac_ok && (a.peer_rank != get32(hello + 8) || a.peer_size != get32(hello + 12)))
    fz_fail("acceptor: peer rank/size differ from the authenticated HELLO");
  uint8_t acc[WF_AUTH_ACCEPT_SIZE + 16];
  size_t got = pending(sv[1], acc, sizeof acc);
  if (st == WEFT_OK) {
    uint8_t mac[WF_AUTH_MAC];
    model_mac(SECRET, JOB, "weft-accept", ME, WORLD, hello + 16, nonce_a, mac);
    if (got != WF_AUTH_ACCEPT_SIZE || !hdr_ok(acc, 3) || get32(acc + 8) != ME || memcmp(acc + 12, mac, sizeof mac))
      fz_fail("acceptor: the ACCEPT is wrong (%zu bytes)", got);
  } else if (got) {
    fz_fail("acceptor: %zu bytes sent after the CHALLENGE of a handshake that did not succeed", got);
  }
  close(sv[0]);
  close(sv[1]);
}

/* The blocking wrapper on raw bytes, then EOF: never succeeds (the bytes
 * were chosen before the nonce existed). */
static void acceptor_blocking(fz_in *in) {
  int sv[2];
  char err[256];
  uint8_t bytes[200];
  pair(sv);
  size_t n = fz_take_bytes(in, bytes, sizeof bytes);
  put_all(sv[1], bytes, n);
  shutdown(sv[1], SHUT_WR);
  uint32_t peer = 99;
  weft_status st = wf_auth_accept(sv[0], &k_acc, wf_deadline_after(5), &peer, err, sizeof err);
  if (st == WEFT_OK) fz_fail("wf_auth_accept accepted bytes chosen before its nonce");
  if (st != WEFT_ERR_AUTH && st != WEFT_ERR_PEER_LOST) fz_fail("wf_auth_accept: %s: %s", weft_status_string(st), err);
  if (!err[0]) fz_fail("wf_auth_accept failed without a message");
  close(sv[0]);
  close(sv[1]);
}

/* ------------------------------------------------------------ connector */

/* A HELLO the connector sent must be right for the CHALLENGE it got. */
static void check_hello(const uint8_t *h, const uint8_t *nonce_a) {
  uint8_t mac[WF_AUTH_MAC];
  if (!hdr_ok(h, 2) || get32(h + 8) != PEER || get32(h + 12) != WORLD) fz_fail("connector: malformed HELLO");
  model_mac(SECRET, JOB, "weft-hello", PEER, WORLD, nonce_a, h + 16, mac);
  if (memcmp(mac, h + 16 + WF_AUTH_NONCE, WF_AUTH_MAC) != 0) fz_fail("connector: its HELLO has a wrong MAC");
}

static void connector_raw(fz_in *in) {
  int sv[2];
  char err[256];
  uint8_t bytes[200], hello[WF_AUTH_HELLO_SIZE + 8];
  pair(sv);
  size_t n = fz_take_bytes(in, bytes, sizeof bytes);
  put_all(sv[1], bytes, n);
  shutdown(sv[1], SHUT_WR);
  weft_status st = wf_auth_connect(sv[0], &k_conn, ME, wf_deadline_after(5), err, sizeof err);
  if (st == WEFT_OK) fz_fail("wf_auth_connect accepted an ACCEPT chosen before its nonce");
  if (!err[0]) fz_fail("wf_auth_connect failed without a message");
  size_t got = pending(sv[1], hello, sizeof hello);
  if (got && (got != WF_AUTH_HELLO_SIZE || n < WF_AUTH_CHALLENGE_SIZE)) fz_fail("connector: sent %zu bytes", got);
  if (got) check_hello(hello, bytes + 8);
  close(sv[0]);
  close(sv[1]);
}

typedef struct conn_run {
  int fd;
  weft_status st;
  char err[256];
} conn_run;
static void *conn_thread(void *arg) {
  conn_run *c = arg;
  c->st = wf_auth_connect(c->fd, &k_conn, ME, wf_deadline_after(5), c->err, sizeof c->err);
  return NULL;
}

static void connector(fz_in *in) {
  int sv[2];
  pair(sv);
  conn_run c = {sv[0], WEFT_OK, ""};
  pthread_t th;
  if (pthread_create(&th, NULL, conn_thread, &c) != 0) fz_fail("pthread_create");
  uint8_t chal[WF_AUTH_CHALLENGE_SIZE], hello[WF_AUTH_HELLO_SIZE], acc[128];
  put_hdr(chal, 1);
  memset(chal + 8, 0x3c, WF_AUTH_NONCE);
  fz_take_bytes(in, chal + 8, WF_AUTH_NONCE);
  put_all(sv[1], chal, sizeof chal);
  if (get_n(sv[1], hello, sizeof hello) != sizeof hello) fz_fail("connector: no HELLO for a good CHALLENGE");
  check_hello(hello, chal + 8);
  const uint8_t *nonce_c = hello + 16;
  size_t len = make_msg(in, 3, nonce_c, chal + 8, acc);
  put_all(sv[1], acc, len);
  shutdown(sv[1], SHUT_WR);
  pthread_join(th, NULL);
  int good = 0;
  if (len >= WF_AUTH_ACCEPT_SIZE && hdr_ok(acc, 3) && get32(acc + 8) == ME) {
    uint8_t want[WF_AUTH_MAC];
    model_mac(SECRET, JOB, "weft-accept", ME, WORLD, nonce_c, chal + 8, want);
    good = !memcmp(want, acc + 12, WF_AUTH_MAC);
  }
  if ((c.st == WEFT_OK) != good)
    fz_fail("connector: %s, the model says %s: %s", weft_status_string(c.st), good ? "accept" : "reject", c.err);
  close(sv[0]);
  close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fz_in in = {data + 1, size - 1, 0};
  switch (data[0] % 5) {
    case 0: acceptor(&in, 0); break;
    case 1: acceptor(&in, 1); break;
    case 2: acceptor_blocking(&in); break;
    case 3: connector_raw(&in); break;
    case 4: connector(&in); break;
  }
  return 0;
}

/* ------------------------------------------------------------ seeds */
static void fz_write_seeds(void) {
  uint8_t b[200];
  char name[64];
  for (int mode = 0; mode < 5; mode++)
    for (int s = 0; s < 3; s++) {
      fz_fill(b, sizeof b, (uint64_t)(mode * 31 + s + 1));
      if (s == 0) b[0] = 0; /* structured: every ingredient right, no corruption */
      if (s == 0 && mode == 0) b[0] = 80, put_hdr(b + 1, 2), put32(b + 9, PEER), put32(b + 13, WORLD);
      if (s == 0 && mode == 3) put_hdr(b, 1), put_hdr(b + 40, 3);
      if (s == 0 && mode == 4) b[32] = 0;
      if (s == 0 && mode == 1) b[1] = 0;
      snprintf(name, sizeof name, "mode%d-%d", mode, s);
      fz_seed(name, (uint8_t)mode, b, mode == 1 && s == 0 ? 40 : sizeof b);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (!__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free)) fz_fail("cannot install allocation hooks");
  fz_seed_init("fuzz_handshake");
  return 0;
}
