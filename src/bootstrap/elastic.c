/* elastic.c - the elastic driver protocol (elastic.h): the codec, the
 * generation's secret, the worker's question (wf_el_join) and the driver's
 * non-blocking connection (wf_el_conn). */
#include "bootstrap/elastic.h"

#include <errno.h>
#include <poll.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/err.h"
#include "util/time.h"
#include "wire/wire.h"

#define EL_MAGIC 0x4c454657u /* "WFEL" */
#define EL_VERSION 1
#define K_ASK 1
#define K_PLACE 2
#define K_PORT 3
#define K_CHECK 4
#define K_UPDATE 5
#define BACKOFF_NS (50 * 1000000LL)

static void put32(uint8_t *o, uint32_t v) {
  for (int i = 0; i < 4; i++) o[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *o, uint64_t v) {
  for (int i = 0; i < 8; i++) o[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *in) {
  return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}
static uint64_t get64(const uint8_t *in) { return (uint64_t)get32(in) | (uint64_t)get32(in + 4) << 32; }

static void put_hdr(uint8_t *o, uint8_t kind) {
  put32(o, EL_MAGIC);
  o[4] = EL_VERSION;
  o[5] = kind;
  o[6] = o[7] = 0;
}

static weft_status check_hdr(const uint8_t *in, uint8_t kind, char *err, size_t errlen) {
  if (get32(in) != EL_MAGIC || in[4] != EL_VERSION || in[5] != kind || in[6] || in[7]) {
    snprintf(err, errlen, "not an elastic driver message of kind %u (magic 0x%08x, version %u, kind %u)", kind,
             get32(in), in[4], in[5]);
    return WEFT_ERR_PROTOCOL;
  }
  return WEFT_OK;
}

static void put_str(uint8_t *o, size_t cap, const char *s) {
  memset(o, 0, cap);
  size_t n = s ? strnlen(s, cap - 1) : 0;
  memcpy(o, s ? s : "", n);
}

static weft_status get_str(const uint8_t *in, size_t cap, char *out, const char *what, char *err, size_t errlen) {
  if (!memchr(in, 0, cap)) {
    snprintf(err, errlen, "elastic driver message: %s is not NUL-terminated", what);
    return WEFT_ERR_PROTOCOL;
  }
  memcpy(out, in, cap);
  return WEFT_OK;
}

void wf_el_encode_ask(uint8_t out[WF_EL_ASK_SIZE], uint32_t id, uint64_t last_gen) {
  put_hdr(out, K_ASK);
  put32(out + 8, id);
  put32(out + 12, 0);
  put64(out + 16, last_gen);
}

weft_status wf_el_decode_ask(const uint8_t in[WF_EL_ASK_SIZE], uint32_t *id, uint64_t *last_gen, char *err,
                             size_t errlen) {
  weft_status st = check_hdr(in, K_ASK, err, errlen);
  if (st != WEFT_OK) return st;
  if (get32(in + 12) != 0 || get32(in + 8) >= WF_EL_IDS) {
    snprintf(err, errlen, "elastic ASK: bad id %u or reserved field", get32(in + 8));
    return WEFT_ERR_PROTOCOL;
  }
  *id = get32(in + 8);
  *last_gen = get64(in + 16);
  return WEFT_OK;
}

void wf_el_encode_place(uint8_t out[WF_EL_PLACE_SIZE], const wf_el_place *p) {
  put_hdr(out, K_PLACE);
  put32(out + 8, (uint32_t)p->status);
  put32(out + 12, 0);
  put64(out + 16, p->generation);
  put32(out + 24, p->rank);
  put32(out + 28, p->size);
  put_str(out + 32, WF_EL_ADDR_MAX, p->addr);
  put_str(out + 32 + WF_EL_ADDR_MAX, WF_EL_MSG_MAX, p->msg);
}

weft_status wf_el_decode_place(const uint8_t in[WF_EL_PLACE_SIZE], wf_el_place *p, char *err, size_t errlen) {
  weft_status st = check_hdr(in, K_PLACE, err, errlen);
  if (st != WEFT_OK) return st;
  memset(p, 0, sizeof *p);
  p->status = (int32_t)get32(in + 8);
  p->generation = get64(in + 16);
  p->rank = get32(in + 24);
  p->size = get32(in + 28);
  if ((st = get_str(in + 32, WF_EL_ADDR_MAX, p->addr, "addr", err, errlen)) != WEFT_OK) return st;
  if ((st = get_str(in + 32 + WF_EL_ADDR_MAX, WF_EL_MSG_MAX, p->msg, "msg", err, errlen)) != WEFT_OK) return st;
  if (get32(in + 12) != 0 || p->status > 0 ||
      (p->status == 0 && (p->generation == 0 || p->size < 1 || p->size > WF_MAX_RANKS || p->rank >= p->size))) {
    snprintf(err, errlen, "elastic PLACE: bad values (status %d, generation %llu, rank %u, size %u)", p->status,
             (unsigned long long)p->generation, p->rank, p->size);
    return WEFT_ERR_PROTOCOL;
  }
  return WEFT_OK;
}

void wf_el_encode_port(uint8_t out[WF_EL_PORT_SIZE], uint32_t id, uint64_t gen, const char *addr) {
  put_hdr(out, K_PORT);
  put32(out + 8, id);
  put32(out + 12, 0);
  put64(out + 16, gen);
  put_str(out + 24, WF_EL_ADDR_MAX, addr);
}

weft_status wf_el_decode_port(const uint8_t in[WF_EL_PORT_SIZE], uint32_t *id, uint64_t *gen, char *addr,
                              char *err, size_t errlen) {
  weft_status st = check_hdr(in, K_PORT, err, errlen);
  if (st != WEFT_OK) return st;
  if (get32(in + 12) != 0) {
    snprintf(err, errlen, "elastic PORT: reserved field set");
    return WEFT_ERR_PROTOCOL;
  }
  *id = get32(in + 8);
  *gen = get64(in + 16);
  return get_str(in + 24, WF_EL_ADDR_MAX, addr, "addr", err, errlen);
}

void wf_el_encode_check(uint8_t out[WF_EL_CHECK_SIZE], uint32_t id, uint64_t gen) {
  put_hdr(out, K_CHECK);
  put32(out + 8, id);
  put32(out + 12, 0);
  put64(out + 16, gen);
}

weft_status wf_el_decode_check(const uint8_t in[WF_EL_CHECK_SIZE], uint32_t *id, uint64_t *gen, char *err,
                               size_t errlen) {
  weft_status st = check_hdr(in, K_CHECK, err, errlen);
  if (st != WEFT_OK) return st;
  if (get32(in + 12) != 0 || get32(in + 8) >= WF_EL_IDS) {
    snprintf(err, errlen, "elastic CHECK: bad id %u or reserved field", get32(in + 8));
    return WEFT_ERR_PROTOCOL;
  }
  *id = get32(in + 8);
  *gen = get64(in + 16);
  return WEFT_OK;
}

void wf_el_encode_update(uint8_t out[WF_EL_CHECK_SIZE], int32_t status, uint32_t update, uint64_t gen) {
  put_hdr(out, K_UPDATE);
  put32(out + 8, (uint32_t)status);
  put32(out + 12, update);
  put64(out + 16, gen);
}

weft_status wf_el_decode_update(const uint8_t in[WF_EL_CHECK_SIZE], int32_t *status, uint32_t *update,
                                uint64_t *gen, char *err, size_t errlen) {
  weft_status st = check_hdr(in, K_UPDATE, err, errlen);
  if (st != WEFT_OK) return st;
  int32_t s = (int32_t)get32(in + 8);
  uint32_t u = get32(in + 12);
  if (s > 0 || (u & ~(WF_EL_UPD_REMOVED | WF_EL_UPD_ADDED))) {
    snprintf(err, errlen, "elastic UPDATE: bad values (status %d, update 0x%x)", s, u);
    return WEFT_ERR_PROTOCOL;
  }
  *status = s;
  *update = u;
  *gen = get64(in + 16);
  return WEFT_OK;
}

void wf_el_job_id(const char *job_id, char *out, size_t outlen) {
  snprintf(out, outlen, "%.*s/elastic", (int)(outlen > 9 ? outlen - 9 : 0), job_id ? job_id : "");
}

weft_status wf_el_gen_secret(const uint8_t *secret, size_t secret_len, uint64_t gen, uint8_t out[32]) {
  static const uint8_t empty_key[1] = {0};
  static const char label[] = "weft-elastic-generation";
  uint8_t g[8];
  put64(g, gen);
  size_t outl = 0;
  weft_status st = WEFT_OK;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  OSSL_PARAM params[2] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                          OSSL_PARAM_construct_end()};
  if (!ctx || !EVP_MAC_init(ctx, secret_len ? secret : empty_key, secret_len, params) ||
      !EVP_MAC_update(ctx, (const uint8_t *)label, sizeof label - 1) || !EVP_MAC_update(ctx, g, sizeof g) ||
      !EVP_MAC_final(ctx, out, &outl, 32) || outl != 32)
    st = wf_err(WEFT_ERR_SYSTEM, "HMAC-SHA256 failed in OpenSSL libcrypto (elastic generation secret)");
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return st;
}

/* ------------------------------------------------------------- the worker */

/* Connects and authenticates, retrying a refused connection (weftrun is up
 * before its ranks, but be patient all the same) until deadline. */
static weft_status dial(const wf_el_join_cfg *c, const struct sockaddr_in *a, const wf_auth_params *ap,
                        int64_t deadline, int *fd_out) {
  char err[512];
  for (;;) {
    int fd = -1;
    weft_status st = wf_sock_connect(a, deadline, &fd, err, sizeof err);
    if (st == WEFT_OK) {
      int64_t hs = wf_deadline_after(c->handshake_timeout > 0 ? c->handshake_timeout : 5);
      st = wf_auth_connect(fd, ap, WF_EL_DRIVER, hs < deadline ? hs : deadline, err, sizeof err);
      if (st == WEFT_OK) {
        *fd_out = fd;
        return WEFT_OK;
      }
      close(fd);
      return wf_err(st, "elastic worker %u: the driver (weftrun) at %s: %s", c->id, c->driver, err);
    }
    if (st != WEFT_ERR_PEER_LOST || wf_now_ns() + BACKOFF_NS >= deadline)
      return wf_err(st, "elastic worker %u: cannot reach the driver (weftrun) at %s (WEFT_ELASTIC_ADDR): %s", c->id,
                    c->driver, err);
    struct timespec ts = {0, BACKOFF_NS};
    nanosleep(&ts, NULL);
  }
}

/* Rank 0: a listener on a free port where it is told (or bind_addr). */
static weft_status open_rendezvous(const wf_el_join_cfg *c, wf_el_place *p, int *lfd) {
  char err[256];
  const char *where = c->bind_addr && *c->bind_addr ? c->bind_addr : p->addr;
  char host[WF_EL_ADDR_MAX];
  snprintf(host, sizeof host, "%.*s", (int)strcspn(where, ":"), where); /* the port is ours to choose */
  struct sockaddr_in a, bound;
  weft_status st = wf_sock_parse_addr(host, 0, &a, err, sizeof err);
  if (st == WEFT_OK) {
    a.sin_port = 0;
    st = wf_sock_listen(&a, lfd, &bound, err, sizeof err);
  }
  if (st != WEFT_OK)
    return wf_err(st, "elastic worker %u: rank 0 of generation %llu cannot listen on %s: %s", c->id,
                  (unsigned long long)p->generation, host, err);
  wf_sock_addr_str(&bound, p->addr, sizeof p->addr);
  return WEFT_OK;
}

/* Checks c, connects and authenticates (one question's connection). */
static weft_status open_question(const wf_el_join_cfg *c, int64_t deadline, int *fd) {
  char err[512], job[WF_EL_JOB_MAX];
  struct sockaddr_in a;
  weft_status st = wf_sock_parse_addr(c->driver, 1, &a, err, sizeof err);
  if (st != WEFT_OK) return wf_err(st, "elastic worker %u: WEFT_ELASTIC_ADDR: %s", c->id, err);
  if (c->id >= WF_EL_IDS || c->id == WF_EL_DRIVER)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "WEFT_ELASTIC_ID=%u is out of range 0..%u", c->id, WF_EL_DRIVER - 1);
  wf_el_job_id(c->job_id, job, sizeof job);
  wf_auth_params ap = {c->secret, c->secret_len, job, c->id, WF_EL_IDS};
  return dial(c, &a, &ap, deadline, fd);
}

weft_status wf_el_check(const wf_el_join_cfg *c, uint64_t gen, uint32_t *update) {
  char err[512];
  *update = 0;
  int64_t deadline = wf_deadline_after(c->timeout_seconds > 0 ? c->timeout_seconds : 60);
  int fd = -1;
  weft_status st = open_question(c, deadline, &fd);
  if (st != WEFT_OK) return st;
  uint8_t q[WF_EL_CHECK_SIZE], in[WF_EL_CHECK_SIZE];
  wf_el_encode_check(q, c->id, gen);
  size_t got = 0;
  int32_t status = 0;
  uint64_t last = 0;
  st = wf_sock_write_all(fd, q, sizeof q, deadline, NULL, err, sizeof err);
  if (st == WEFT_OK) st = wf_sock_read_all(fd, in, sizeof in, deadline, &got, err, sizeof err);
  if (st == WEFT_OK) st = wf_el_decode_update(in, &status, update, &last, err, sizeof err);
  close(fd);
  if (st != WEFT_OK)
    return wf_err(st, "elastic worker %u: asking the driver at %s for host updates: %s", c->id, c->driver, err);
  if (status != 0)
    return wf_err((weft_status)status, "elastic worker %u: the driver at %s refused to tell host updates (its "
                  "generation %llu)", c->id, c->driver, (unsigned long long)last);
  return WEFT_OK;
}

weft_status wf_el_join(const wf_el_join_cfg *c, wf_el_place *place, int *listen_fd) {
  char err[512];
  *listen_fd = -1;
  memset(place, 0, sizeof *place);
  int64_t deadline = wf_deadline_after(c->timeout_seconds > 0 ? c->timeout_seconds : 60);
  int fd = -1;
  weft_status st = open_question(c, deadline, &fd);
  if (st != WEFT_OK) return st;
  uint8_t ask[WF_EL_ASK_SIZE], in[WF_EL_PLACE_SIZE];
  wf_el_encode_ask(ask, c->id, c->last_gen);
  size_t got = 0;
  st = wf_sock_write_all(fd, ask, sizeof ask, deadline, NULL, err, sizeof err);
  if (st == WEFT_OK) st = wf_sock_read_all(fd, in, sizeof in, deadline, &got, err, sizeof err);
  if (st == WEFT_OK) st = wf_el_decode_place(in, place, err, sizeof err);
  if (st != WEFT_OK) {
    close(fd);
    if (st == WEFT_ERR_TIMEOUT)
      return wf_err(st, "elastic worker %u: no place in a world from the driver at %s within %.1f s", c->id,
                    c->driver, c->timeout_seconds);
    return wf_err(st, "elastic worker %u: asking the driver at %s for a place: %s", c->id, c->driver, err);
  }
  if (place->status != 0) {
    close(fd);
    return wf_err((weft_status)place->status, "elastic worker %u: the driver gave no place: %s", c->id, place->msg);
  }
  if (place->rank == 0 && place->size > 1) {
    if ((st = open_rendezvous(c, place, listen_fd)) != WEFT_OK) {
      close(fd);
      return st;
    }
    uint8_t port[WF_EL_PORT_SIZE];
    wf_el_encode_port(port, c->id, place->generation, place->addr);
    st = wf_sock_write_all(fd, port, sizeof port, deadline, NULL, err, sizeof err);
    if (st != WEFT_OK) {
      close(fd);
      close(*listen_fd);
      *listen_fd = -1;
      return wf_err(st, "elastic worker %u: cannot report rank 0's address to the driver at %s: %s", c->id,
                    c->driver, err);
    }
  }
  close(fd);
  return WEFT_OK;
}

/* ------------------------------------------------------------- the driver */

weft_status wf_el_conn_init(wf_el_conn *c, int fd, const char *peer, const wf_auth_params *ap,
                            double handshake_timeout, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  c->fd = fd;
  c->phase = WF_EL_C_AUTH;
  c->events = POLLOUT;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  c->deadline = wf_deadline_after(handshake_timeout > 0 ? handshake_timeout : 5);
  return wf_auth_acc_init(&c->acc, fd, ap, err, errlen);
}

weft_status wf_el_conn_step(wf_el_conn *c, char *err, size_t errlen) {
  weft_status st;
  if (c->phase == WF_EL_C_AUTH) {
    st = wf_auth_acc_step(&c->acc, &c->events, err, errlen);
    if (st != WEFT_OK) return st;
    c->phase = WF_EL_C_ASK;
    c->off = 0;
    c->events = POLLIN;
  }
  if (c->phase == WF_EL_C_ASK) {
    st = wf_sock_read_some(c->fd, c->in, WF_EL_ASK_SIZE, &c->off, err, errlen);
    if (st != WEFT_OK) return st;
    if (c->off < WF_EL_ASK_SIZE) return WEFT_IN_PROGRESS;
    uint32_t id;
    int check = c->in[5] == K_CHECK; /* the header's kind: the decoders check the rest */
    if (check) st = wf_el_decode_check(c->in, &id, &c->last_gen, err, errlen);
    else st = wf_el_decode_ask(c->in, &id, &c->last_gen, err, errlen);
    if (st != WEFT_OK) return st;
    if (id != c->acc.peer_rank) {
      snprintf(err, errlen, "authenticated as worker %u but %s as worker %u", c->acc.peer_rank,
               check ? "checks" : "asks", id);
      return WEFT_ERR_AUTH;
    }
    c->id = id;
    c->phase = check ? WF_EL_C_CHECK : WF_EL_C_HELD;
    if (!check) c->deadline = WF_NO_DEADLINE;
    return WEFT_OK;
  }
  if (c->phase == WF_EL_C_HELD) { /* nothing more may come: data or EOF is the worker gone */
    uint8_t b;
    ssize_t n = read(c->fd, &b, 1);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return WEFT_IN_PROGRESS;
    snprintf(err, errlen, "%s while waiting for its place", n == 0 ? "closed its connection" : "spoke out of turn");
    return n == 0 ? WEFT_ERR_PEER_LOST : WEFT_ERR_PROTOCOL;
  }
  if (c->phase == WF_EL_C_PORT) {
    st = wf_sock_read_some(c->fd, c->in, WF_EL_PORT_SIZE, &c->off, err, errlen);
    if (st != WEFT_OK) return st;
    if (c->off < WF_EL_PORT_SIZE) return WEFT_IN_PROGRESS;
    uint32_t id;
    uint64_t gen;
    if ((st = wf_el_decode_port(c->in, &id, &gen, c->port_addr, err, errlen)) != WEFT_OK) return st;
    if (id != c->id || gen != c->gen) {
      snprintf(err, errlen, "PORT for worker %u generation %llu, expected worker %u generation %llu", id,
               (unsigned long long)gen, c->id, (unsigned long long)c->gen);
      return WEFT_ERR_PROTOCOL;
    }
    c->phase = WF_EL_C_DONE;
    return WEFT_OK;
  }
  return WEFT_OK;
}

weft_status wf_el_conn_answer(wf_el_conn *c, const wf_el_place *p, double port_s, char *err, size_t errlen) {
  uint8_t out[WF_EL_PLACE_SIZE];
  wf_el_encode_place(out, p);
  weft_status st = wf_sock_write_all(c->fd, out, sizeof out, wf_deadline_after(0.5), NULL, err, errlen);
  if (st != WEFT_OK) return st;
  c->gen = p->generation;
  if (p->status == 0 && p->rank == 0 && p->size > 1) {
    c->phase = WF_EL_C_PORT;
    c->off = 0;
    c->events = POLLIN;
    c->deadline = wf_deadline_after(port_s);
  } else {
    c->phase = WF_EL_C_DONE;
  }
  return WEFT_OK;
}

weft_status wf_el_conn_update(wf_el_conn *c, int32_t status, uint32_t update, uint64_t gen, char *err,
                              size_t errlen) {
  uint8_t out[WF_EL_CHECK_SIZE];
  wf_el_encode_update(out, status, update, gen);
  c->phase = WF_EL_C_DONE;
  return wf_sock_write_all(c->fd, out, sizeof out, wf_deadline_after(0.5), NULL, err, errlen);
}

void wf_el_conn_close(wf_el_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}
