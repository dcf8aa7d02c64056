/* bootstrap.h - rendezvous: every rank finds every other, authenticates,
 * and ends with one connected, authenticated TCP socket per peer (full mesh).
 *
 * Rank 0 listens on cfg->addr ("host:port"). Every other rank opens its own
 * listener (on the address it uses to reach rank 0, or cfg->bind_addr),
 * connects to rank 0 (retrying until the deadline: rank 0 may start late),
 * authenticates (auth.h) and sends HELLO {rank, size, pid, host, boot id,
 * listen address, agreed settings}. Rank 0 checks each (world size agrees,
 * rank in range, no duplicate rank; otherwise the offender gets dropped and
 * init fails with a message naming the problem), once all registered checks
 * that their agreed settings equal its own (settings.h), computes local/cross ranks by (host, boot id),
 * and sends PEERS to all. Then rank i connects to every rank 0 < j < i and
 * accepts from every j > i (each connection authenticated, the acceptor
 * learns the peer's rank from the handshake). The rank-0 connection is kept
 * as the rank 0 <-> i link. Listeners are closed at the end.
 *
 * Blocking, single-threaded (weft_init's thread); every step obeys the
 * deadline; nothing is allocated or parsed from a peer before its handshake
 * is verified. */
#ifndef WF_BOOTSTRAP_H
#define WF_BOOTSTRAP_H
#include <stddef.h>
#include <stdint.h>

#include "util/settings.h"
#include "weft.h"
#include "wire/wire.h"

typedef struct wf_boot_cfg {
  int rank, size;
  const char *addr;            /* rank 0's "host:port" (IPv4 or name) */
  const uint8_t *secret;       /* job secret; may be NULL with secret_len 0 */
  size_t secret_len;           /* 0: no secret -> only loopback is allowed */
  const char *job_id;          /* "" if none */
  const char *hostname;        /* reported host name; NULL: gethostname() */
  const char *bind_addr;       /* NULL/"": address used to reach rank 0 */
  double timeout_seconds;      /* the whole rendezvous */
  double handshake_timeout;    /* one connection's handshake */
  int have_listen_fd;          /* rank 0: listen_fd is its rendezvous listener, */
  int listen_fd;               /* already listening at addr (wf_sock_listen); closed
                                  by wf_bootstrap (MPI bootstrap: port 0) */
  const wf_settings *settings; /* this rank's settings: their agreed part goes in
                                  the HELLO, and rank 0 refuses a job whose ranks
                                  differ (WEFT_ERR_MISMATCH naming the setting, both
                                  values and ranks; the others get it in an ABORT).
                                  NULL: none sent, none checked (tests) */
  uint64_t incarnation;        /* random per weft_init (HELLO, the peer table): a
                                  restarted rank is told apart ("rank N restarted");
                                  0: none (tests) */
  uint32_t device_kinds;       /* this rank's, for the peer table (WF_DEVICE_KINDS_MASK bits) */
} wf_boot_cfg;

typedef struct wf_boot_result {
  int size;
  int *fds;                    /* size entries; fds[rank] == -1; blocking mode,
                                  TCP_NODELAY set, CLOEXEC */
  wf_peer_info *peers;         /* size entries (this rank's included) */
  int local_rank, local_size, cross_rank, cross_size;
} wf_boot_result;

/* Runs the rendezvous. On error nothing is left open and the thread's last
 * error (util/err.h) names the problem (which rank, which address, why). */
weft_status wf_bootstrap(const wf_boot_cfg *cfg, wf_boot_result *out);

/* Closes fds still >= 0 and frees the arrays. Idempotent. */
void wf_boot_result_free(wf_boot_result *r);

#endif
