/* bootstrap_impl.h - the rendezvous's state, shared by bootstrap.c (rank 0
 * and the accept loop) and bootstrap_join.c (a rank > 0 joining). Internal
 * to src/bootstrap/. */
#ifndef WF_BOOTSTRAP_IMPL_H
#define WF_BOOTSTRAP_IMPL_H
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/auth.h"
#include "bootstrap/auth_nb.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/sockutil.h"
#include "wire/wire.h"

#define MAX_PENDING 64       /* handshakes in flight on one listener */
#define HELLO_BUF 4096       /* > the largest HELLO payload (3701 bytes) */
#define PEER_ENTRY_MAX (2 + WF_HOST_MAX + 2 + WF_HOST_MAX + 5 * 4)
#define BACKOFF_MIN_NS (10 * 1000000LL)
#define BACKOFF_MAX_NS (200 * 1000000LL)
#define ABORT_GRACE_NS (200 * 1000000LL)

enum { PH_AUTH, PH_HDR, PH_BODY };
enum { MODE_REGISTER, MODE_MESH };

/* One accepted connection whose handshake (and, on rank 0, HELLO) is not
 * complete yet. */
typedef struct pend {
  int fd;
  int phase;
  int64_t deadline;
  short events;
  char addr[WF_ADDR_STR_MAX];
  wf_auth_acc acc;
  uint32_t rank;               /* authenticated rank (after PH_AUTH) */
  uint8_t hdr[WF_FRAME_HDR_SIZE];
  uint8_t body[HELLO_BUF];
  size_t off, blen;
} pend;

typedef struct boot {
  const wf_boot_cfg *cfg;
  int rank, size;
  wf_auth_params ap;
  int64_t t0, deadline;
  double timeout, hs_timeout;
  struct sockaddr_in addr0;
  char addr0_str[WF_ADDR_STR_MAX];
  char host[WF_HOST_MAX + 1];
  char boot_id[64];
  int *fds;
  wf_peer_info *peers;
  char (*boot_ids)[64];        /* rank 0: every rank's boot id */
  char **set_text;             /* rank 0: every rank's agreed settings (HELLO), malloc'd */
  uint8_t (*set_digest)[WF_SETTINGS_DIGEST]; /* rank 0: and their digests */
  int lfd;
  char listen_str[WF_ADDR_STR_MAX];
  pend pend[MAX_PENDING];
  int npend;
  int rejected;
  char last_reject[400];
  int abort_fd;                /* rank 0: an authenticated offender to tell */
} boot;

/* Copies a string, truncating to fit. */
void wf_boot_copy_str(char *dst, size_t dstlen, const char *src);
/* Seconds since the rendezvous began. */
double wf_boot_elapsed(const boot *b);
/* Closes *fd if open and sets it to -1. */
void wf_boot_close_fd(int *fd);
/* This rank's host name as the peers will see it. */
void wf_boot_my_host(const boot *b, char *out, size_t outlen);
/* The accept loop on b->lfd until need connections completed (mode:
 * MODE_REGISTER on rank 0, MODE_MESH on every listener). */
weft_status wf_boot_serve(boot *b, int mode, int need);
/* A rank > 0: dials rank 0, registers (HELLO), receives the peer table,
 * dials every lower rank and accepts every higher one (bootstrap_join.c). */
weft_status wf_boot_join(boot *b);

#endif
