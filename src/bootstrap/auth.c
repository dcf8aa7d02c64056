/* auth.c - the challenge-response handshake every connection starts with
 * (protocol in auth.h), and loading the job secret.
 *
 * Wire layout (little-endian), all messages fixed-size so nothing is
 * allocated or parsed before the MAC is checked:
 *   header (8 bytes): u32 magic "WFAU" (0x55414657), u8 version 1, u8 kind,
 *                     u16 reserved 0
 *   CHALLENGE (40):   header kind 1, nonce_a[32]
 *   HELLO (80):       header kind 2, u32 rank, u32 size, nonce_c[32], mac[32]
 *   ACCEPT (44):      header kind 3, u32 rank, mac[32]
 * The handshake magic differs from the frame magic "WEFT" (wire.h), so a
 * frame is never mistaken for a handshake message or the other way round.
 *
 * The MAC input is label | job_id | u32 rank | u32 size | nonce | nonce.
 * The labels ("weft-hello", "weft-accept") differ within their first six
 * bytes and everything after job_id is fixed-size, so no two distinct
 * messages share a MAC input: a HELLO's MAC cannot be reflected as an
 * ACCEPT's, and fresh nonces on both sides stop replays.
 *
 * Crypto is OpenSSL's: HMAC-SHA256 via EVP_MAC, RAND_bytes, CRYPTO_memcmp. */
#include "bootstrap/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/auth_nb.h"
#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/params.h"
#include "util/time.h"

#define AUTH_MAGIC 0x55414657u /* "WFAU" */
#define AUTH_VERSION 1
#define KIND_CHALLENGE 1
#define KIND_HELLO 2
#define KIND_ACCEPT 3
#define SECRET_MAX 4096

enum { ST_SEND_CHALLENGE, ST_READ_HELLO, ST_SEND_ACCEPT, ST_DONE, ST_FAILED };

static void put32(uint8_t *o, uint32_t v) {
  for (int i = 0; i < 4; i++) o[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *in) {
  return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

static void put_hdr(uint8_t *o, uint8_t kind) {
  put32(o, AUTH_MAGIC);
  o[4] = AUTH_VERSION;
  o[5] = kind;
  o[6] = o[7] = 0;
}

static const char *kind_name(unsigned k) {
  return k == KIND_CHALLENGE ? "CHALLENGE" : k == KIND_HELLO ? "HELLO" : k == KIND_ACCEPT ? "ACCEPT" : "unknown";
}

/* Checks an 8-byte handshake header; on mismatch writes why to err. */
static weft_status check_hdr(const uint8_t *in, uint8_t kind, char *err, size_t errlen) {
  uint32_t magic = get32(in);
  if (magic != AUTH_MAGIC) {
    snprintf(err, errlen, "not a weft handshake (bad magic 0x%08x; a stray client or another service?)", magic);
    return WEFT_ERR_AUTH;
  }
  if (in[4] != AUTH_VERSION) {
    snprintf(err, errlen, "handshake version %u, this build speaks %u (mixed weft versions?)", in[4], AUTH_VERSION);
    return WEFT_ERR_AUTH;
  }
  if (in[5] != kind || in[6] || in[7]) {
    snprintf(err, errlen, "expected a %s message, got kind %u (%s)", kind_name(kind), in[5], kind_name(in[5]));
    return WEFT_ERR_AUTH;
  }
  return WEFT_OK;
}

/* HMAC-SHA256(secret, label | job_id | rank | size | n1 | n2). */
static weft_status mac_compute(const wf_auth_params *p, const char *label, uint32_t rank, uint32_t size,
                               const uint8_t *n1, const uint8_t *n2, uint8_t out[WF_AUTH_MAC], char *err,
                               size_t errlen) {
  /* A zero-length key must still be a non-NULL pointer: EVP_MAC_init
   * treats NULL as "keep the previous key" and then fails. */
  static const uint8_t empty_key[1] = {0};
  const uint8_t *key = p->secret_len ? p->secret : empty_key;
  const char *job = p->job_id ? p->job_id : "";
  uint8_t nums[8];
  put32(nums, rank);
  put32(nums + 4, size);
  weft_status st = WEFT_ERR_SYSTEM;
  size_t outl = 0;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  OSSL_PARAM params[2] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                          OSSL_PARAM_construct_end()};
  if (!ctx || !EVP_MAC_init(ctx, key, p->secret_len, params) ||
      !EVP_MAC_update(ctx, (const uint8_t *)label, strlen(label)) ||
      !EVP_MAC_update(ctx, (const uint8_t *)job, strlen(job)) || !EVP_MAC_update(ctx, nums, sizeof nums) ||
      !EVP_MAC_update(ctx, n1, WF_AUTH_NONCE) || !EVP_MAC_update(ctx, n2, WF_AUTH_NONCE) ||
      !EVP_MAC_final(ctx, out, &outl, WF_AUTH_MAC) || outl != WF_AUTH_MAC) {
    snprintf(err, errlen, "HMAC-SHA256 failed in OpenSSL libcrypto");
    goto out;
  }
  st = WEFT_OK;
out:
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return st;
}

static weft_status check_params(const wf_auth_params *p, char *err, size_t errlen) {
  if (!p || (p->secret_len && !p->secret) || p->size == 0) {
    snprintf(err, errlen, "invalid handshake parameters");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  return WEFT_OK;
}

/* ------------------------------------------------------------- acceptor */

weft_status wf_auth_acc_init(wf_auth_acc *a, int fd, const wf_auth_params *p, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  a->fd = fd;
  a->state = ST_FAILED;
  weft_status st = check_params(p, err, errlen);
  if (st != WEFT_OK) return st;
  a->p = *p;
  if (RAND_bytes(a->nonce_a, WF_AUTH_NONCE) != 1) {
    snprintf(err, errlen, "RAND_bytes failed: no randomness for the handshake nonce");
    return WEFT_ERR_SYSTEM;
  }
  put_hdr(a->out, KIND_CHALLENGE);
  memcpy(a->out + 8, a->nonce_a, WF_AUTH_NONCE);
  a->out_len = WF_AUTH_CHALLENGE_SIZE;
  a->state = ST_SEND_CHALLENGE;
  return WEFT_OK;
}

size_t wf_auth_acc_hello_bytes(const wf_auth_acc *a) { return a->state == ST_READ_HELLO ? a->off : 0; }

/* A complete HELLO is in a->in: authenticate it and prepare the ACCEPT. */
static weft_status acc_verify(wf_auth_acc *a, char *err, size_t errlen) {
  const wf_auth_params *p = &a->p;
  uint32_t rank = get32(a->in + 8), size = get32(a->in + 12);
  const uint8_t *nonce_c = a->in + 16, *mac = a->in + 16 + WF_AUTH_NONCE;
  uint8_t want[WF_AUTH_MAC];
  weft_status st = mac_compute(p, "weft-hello", rank, size, a->nonce_a, nonce_c, want, err, errlen);
  if (st != WEFT_OK) return st;
  if (CRYPTO_memcmp(want, mac, WF_AUTH_MAC) != 0) {
    snprintf(err, errlen,
             "HELLO MAC mismatch: the connector has a different secret (WEFT_SECRET) or job id (WEFT_JOB_ID), "
             "or is not a weft rank");
    return WEFT_ERR_AUTH;
  }
  /* From here on the claims come from a holder of the secret. */
  a->mac_ok = 1;
  a->peer_rank = rank;
  a->peer_size = size;
  if (size != p->size) {
    snprintf(err, errlen, "rank %u says world size %u, rank %u has %u", rank, size, p->rank, p->size);
    return WEFT_ERR_AUTH;
  }
  if (rank >= size) {
    snprintf(err, errlen, "rank %u is out of range for world size %u", rank, size);
    return WEFT_ERR_AUTH;
  }
  put_hdr(a->out, KIND_ACCEPT);
  put32(a->out + 8, p->rank);
  /* nonces swapped relative to HELLO: each side's MAC covers the other's
   * fresh nonce first */
  st = mac_compute(p, "weft-accept", p->rank, p->size, nonce_c, a->nonce_a, a->out + 12, err, errlen);
  if (st != WEFT_OK) return st;
  a->out_len = WF_AUTH_ACCEPT_SIZE;
  return WEFT_OK;
}

weft_status wf_auth_acc_step(wf_auth_acc *a, short *events, char *err, size_t errlen) {
  weft_status st = WEFT_OK;
  for (;;) {
    switch (a->state) {
      case ST_SEND_CHALLENGE:
      case ST_SEND_ACCEPT:
        st = wf_sock_write_some(a->fd, a->out, a->out_len, &a->off, err, errlen);
        if (st != WEFT_OK) goto fail;
        if (a->off < a->out_len) {
          *events = POLLOUT;
          return WEFT_IN_PROGRESS;
        }
        a->state = a->state == ST_SEND_CHALLENGE ? ST_READ_HELLO : ST_DONE;
        a->off = 0;
        break;
      case ST_READ_HELLO: {
        size_t before = a->off;
        st = wf_sock_read_some(a->fd, a->in, sizeof a->in, &a->off, err, errlen);
        if (st == WEFT_ERR_PEER_LOST)
          snprintf(err, errlen, "connection closed after %zu of %d HELLO bytes", a->off, WF_AUTH_HELLO_SIZE);
        if (st != WEFT_OK) goto fail;
        /* Junk is dropped as soon as its header is in, not at the deadline. */
        if (before < 8 && a->off >= 8) {
          st = check_hdr(a->in, KIND_HELLO, err, errlen);
          if (st != WEFT_OK) goto fail;
        }
        if (a->off < sizeof a->in) {
          *events = POLLIN;
          return WEFT_IN_PROGRESS;
        }
        st = acc_verify(a, err, errlen);
        if (st != WEFT_OK) goto fail;
        a->state = ST_SEND_ACCEPT;
        a->off = 0;
        break;
      }
      case ST_DONE:
        return WEFT_OK;
      default:
        snprintf(err, errlen, "handshake already failed");
        return WEFT_ERR_MISUSE;
    }
  }
fail:
  a->state = ST_FAILED;
  return st;
}

weft_status wf_auth_accept(int fd, const wf_auth_params *p, int64_t deadline, uint32_t *peer_rank, char *err,
                           size_t errlen) {
  char dummy[8];
  if (!err || !errlen) err = dummy, errlen = sizeof dummy;
  wf_auth_acc a;
  weft_status st = wf_auth_acc_init(&a, fd, p, err, errlen);
  while (st == WEFT_OK) {
    short ev = 0;
    st = wf_auth_acc_step(&a, &ev, err, errlen);
    if (st == WEFT_OK) {
      *peer_rank = a.peer_rank;
      break;
    }
    if (st != WEFT_IN_PROGRESS) break;
    st = wf_sock_wait(fd, ev, deadline, err, errlen);
    if (st == WEFT_ERR_TIMEOUT) {
      if (ev == POLLIN)
        snprintf(err, errlen, "handshake timed out: %zu of %d HELLO bytes received", wf_auth_acc_hello_bytes(&a),
                 WF_AUTH_HELLO_SIZE);
      else
        snprintf(err, errlen, "handshake timed out: the connector is not reading");
    }
  }
  return st;
}

/* ------------------------------------------------------------ connector */

weft_status wf_auth_connect(int fd, const wf_auth_params *p, uint32_t expect_rank, int64_t deadline, char *err,
                            size_t errlen) {
  char dummy[8];
  if (!err || !errlen) err = dummy, errlen = sizeof dummy;
  uint8_t chal[WF_AUTH_CHALLENGE_SIZE], hello[WF_AUTH_HELLO_SIZE], acc[WF_AUTH_ACCEPT_SIZE];
  uint8_t nonce_c[WF_AUTH_NONCE], want[WF_AUTH_MAC];
  size_t got = 0;
  weft_status st = check_params(p, err, errlen);
  if (st != WEFT_OK) return st;

  st = wf_sock_read_all(fd, chal, sizeof chal, deadline, &got, err, errlen);
  if (st == WEFT_ERR_TIMEOUT)
    snprintf(err, errlen, "no handshake CHALLENGE from rank %u in time (%zu of %zu bytes; is it a weft rank?)",
             expect_rank, got, sizeof chal);
  else if (st == WEFT_ERR_PEER_LOST)
    snprintf(err, errlen, "rank %u closed the connection before its CHALLENGE", expect_rank);
  if (st != WEFT_OK) return st;
  st = check_hdr(chal, KIND_CHALLENGE, err, errlen);
  if (st != WEFT_OK) return st;

  if (RAND_bytes(nonce_c, WF_AUTH_NONCE) != 1) {
    snprintf(err, errlen, "RAND_bytes failed: no randomness for the handshake nonce");
    return WEFT_ERR_SYSTEM;
  }
  put_hdr(hello, KIND_HELLO);
  put32(hello + 8, p->rank);
  put32(hello + 12, p->size);
  memcpy(hello + 16, nonce_c, WF_AUTH_NONCE);
  st = mac_compute(p, "weft-hello", p->rank, p->size, chal + 8, nonce_c, hello + 16 + WF_AUTH_NONCE, err, errlen);
  if (st != WEFT_OK) return st;
  st = wf_sock_write_all(fd, hello, sizeof hello, deadline, NULL, err, errlen);
  if (st != WEFT_OK) return st;

  got = 0;
  st = wf_sock_read_all(fd, acc, sizeof acc, deadline, &got, err, errlen);
  if (st == WEFT_ERR_PEER_LOST && got == 0) {
    /* The acceptor hangs up without a word when our HELLO fails its checks
     * (it must not tell an unauthenticated peer why). */
    snprintf(err, errlen,
             "rank %u closed the connection after our HELLO: it rejected our credentials (different WEFT_SECRET, "
             "WEFT_JOB_ID or world size?)",
             expect_rank);
    return WEFT_ERR_AUTH;
  }
  if (st == WEFT_ERR_TIMEOUT)
    snprintf(err, errlen, "no handshake ACCEPT from rank %u in time (%zu of %zu bytes)", expect_rank, got,
             sizeof acc);
  if (st != WEFT_OK) return st;
  st = check_hdr(acc, KIND_ACCEPT, err, errlen);
  if (st != WEFT_OK) return st;
  uint32_t acc_rank = get32(acc + 8);
  st = mac_compute(p, "weft-accept", acc_rank, p->size, nonce_c, chal + 8, want, err, errlen);
  if (st != WEFT_OK) return st;
  if (CRYPTO_memcmp(want, acc + 12, WF_AUTH_MAC) != 0) {
    snprintf(err, errlen,
             "ACCEPT MAC mismatch: the acceptor has a different secret (WEFT_SECRET), job id (WEFT_JOB_ID) or world "
             "size, or is not a weft rank");
    return WEFT_ERR_AUTH;
  }
  if (acc_rank != expect_rank) {
    snprintf(err, errlen, "dialed rank %u but rank %u answered (stale peer table or wrong address?)", expect_rank,
             acc_rank);
    return WEFT_ERR_AUTH;
  }
  return WEFT_OK;
}

/* --------------------------------------------------------------- secret */

weft_status wf_auth_load_secret(uint8_t *buf, size_t *len) {
  *len = 0;
  const char *s = wf_param_str("WEFT_SECRET");
  if (*s) {
    size_t n = strlen(s);
    if (n > SECRET_MAX)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "WEFT_SECRET is %zu bytes, at most %d allowed", n, SECRET_MAX);
    memcpy(buf, s, n);
    *len = n;
    return WEFT_OK;
  }
  const char *path = wf_param_str("WEFT_SECRET_FILE");
  if (!*path) return WEFT_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return wf_err(WEFT_ERR_SYSTEM, "cannot open WEFT_SECRET_FILE %s: %s", path, strerror(errno));
  weft_status st = WEFT_OK;
  size_t n = 0;
  uint8_t extra;
  for (;;) {
    /* one byte past the cap tells "exactly 4096" from "too long" */
    ssize_t r = n < SECRET_MAX ? read(fd, buf + n, SECRET_MAX - n) : read(fd, &extra, 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      st = wf_err(WEFT_ERR_SYSTEM, "cannot read WEFT_SECRET_FILE %s: %s", path, strerror(errno));
      goto out;
    }
    if (r == 0) break;
    if (n >= SECRET_MAX) {
      st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "WEFT_SECRET_FILE %s is longer than %d bytes", path, SECRET_MAX);
      goto out;
    }
    n += (size_t)r;
  }
  if (n == 0) {
    st = wf_err(WEFT_ERR_INVALID_ARGUMENT, "WEFT_SECRET_FILE %s is empty", path);
    goto out;
  }
  *len = n;
out:
  close(fd);
  if (st != WEFT_OK) OPENSSL_cleanse(buf, SECRET_MAX);
  return st;
}
