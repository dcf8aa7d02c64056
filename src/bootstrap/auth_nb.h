/* auth_nb.h - the acceptor side of the handshake (auth.h) as a
 * non-blocking state machine, so one thread can run many handshakes in a
 * poll() loop: a slow or hostile connection then costs only its own
 * handshake deadline, never the other ranks'. wf_auth_accept() is this
 * machine driven to completion on one fd. Private to src/bootstrap. */
#ifndef WF_BOOT_AUTH_NB_H
#define WF_BOOT_AUTH_NB_H
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/auth.h"

#define WF_AUTH_NONCE 32
#define WF_AUTH_MAC 32
#define WF_AUTH_CHALLENGE_SIZE (8 + WF_AUTH_NONCE)                 /* 40 */
#define WF_AUTH_HELLO_SIZE (8 + 4 + 4 + WF_AUTH_NONCE + WF_AUTH_MAC) /* 80 */
#define WF_AUTH_ACCEPT_SIZE (8 + 4 + WF_AUTH_MAC)                  /* 44 */

typedef struct wf_auth_acc {
  int fd;
  wf_auth_params p;      /* copied; the pointers inside must outlive it */
  int state;             /* private */
  size_t off;            /* bytes moved in the current state */
  uint8_t nonce_a[WF_AUTH_NONCE];
  uint8_t out[WF_AUTH_ACCEPT_SIZE > WF_AUTH_CHALLENGE_SIZE ? WF_AUTH_ACCEPT_SIZE : WF_AUTH_CHALLENGE_SIZE];
  size_t out_len;
  uint8_t in[WF_AUTH_HELLO_SIZE];
  /* Results. mac_ok: the HELLO carried a valid MAC, so peer_rank and
   * peer_size are what a holder of the secret claims, even when the
   * handshake then failed (world size disagrees, rank out of range): the
   * caller can tell a misconfigured rank (fail the job) from a stray
   * connection (drop it). */
  int mac_ok;
  uint32_t peer_rank, peer_size;
} wf_auth_acc;

/* Draws the nonce and prepares the CHALLENGE; no I/O. WEFT_ERR_SYSTEM when
 * the random generator fails. */
weft_status wf_auth_acc_init(wf_auth_acc *a, int fd, const wf_auth_params *p, char *err, size_t errlen);

/* Does all the I/O possible now without blocking. WEFT_IN_PROGRESS: poll
 * the fd for *events and call again. WEFT_OK: the connector is
 * authenticated (a->peer_rank). Errors as wf_auth_accept(). */
weft_status wf_auth_acc_step(wf_auth_acc *a, short *events, char *err, size_t errlen);

/* Bytes of HELLO received so far (for timeout messages). */
size_t wf_auth_acc_hello_bytes(const wf_auth_acc *a);

#endif
