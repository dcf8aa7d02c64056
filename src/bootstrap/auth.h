/* auth.h - the authenticated handshake every connection starts with.
 *
 * Challenge-response with HMAC-SHA256 (OpenSSL libcrypto), keyed by the job
 * secret; fixed-size messages, so nothing is allocated or parsed before the
 * MAC is checked; constant-time compare (CRYPTO_memcmp); fresh random nonces
 * (RAND_bytes) on both sides, so a recorded handshake cannot be replayed.
 *
 *   acceptor -> connector  CHALLENGE: magic, version, kind=1, nonce_a[32]
 *   connector -> acceptor  HELLO: magic, version, kind=2, rank u32, size u32,
 *        nonce_c[32], mac = HMAC(secret, "weft-hello" | job_id | rank | size
 *        | nonce_a | nonce_c)
 *   acceptor -> connector  ACCEPT: magic, version, kind=3, rank u32 (the
 *        acceptor's), mac = HMAC(secret, "weft-accept" | job_id | rank |
 *        size | nonce_c | nonce_a)
 * Both sides check the size matches their own; the connector checks the
 * acceptor's rank is the one it dialed. */
#ifndef WF_AUTH_H
#define WF_AUTH_H
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct wf_auth_params {
  const uint8_t *secret;
  size_t secret_len;
  const char *job_id;
  uint32_t rank;   /* mine */
  uint32_t size;   /* world size */
} wf_auth_params;

/* Acceptor side on a connected socket. On success *peer_rank is the
 * authenticated rank of the connector. Deadline: absolute wf_now_ns() value.
 * Errors: WEFT_ERR_AUTH (bad MAC, wrong magic/size), WEFT_ERR_TIMEOUT,
 * WEFT_ERR_PEER_LOST (closed); message in err. */
weft_status wf_auth_accept(int fd, const wf_auth_params *p, int64_t deadline, uint32_t *peer_rank, char *err,
                           size_t errlen);

/* Connector side; expect_rank is the rank of the acceptor dialed. */
weft_status wf_auth_connect(int fd, const wf_auth_params *p, uint32_t expect_rank, int64_t deadline, char *err,
                            size_t errlen);

/* Loads the job secret: WEFT_SECRET (text), else WEFT_SECRET_FILE (whole file,
 * at most 4096 bytes), else none (*len = 0). buf must hold 4096 bytes. */
weft_status wf_auth_load_secret(uint8_t *buf, size_t *len);

#endif
