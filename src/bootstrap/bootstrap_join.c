/* bootstrap_join.c - a rank > 0 joins the rendezvous (bootstrap.c has the
 * protocol): it dials rank 0 and registers, receives the peer table, then
 * builds its part of the mesh. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap_impl.h"
#include "util/err.h"
#include "util/log.h"
#include "util/time.h"

/* Connects and authenticates to rank j at a, retrying refused or dropped
 * attempts with backoff until the deadline (rank 0 may start late; a
 * listener may be busy). hs_each: bound each handshake by the handshake
 * timeout (rank 0 answers at once) instead of the whole deadline (a mesh
 * peer answers only once done dialing its own lower ranks). */
static weft_status dial(boot *b, int j, const struct sockaddr_in *a, int hs_each, int *out) {
  char as[WF_ADDR_STR_MAX], err[512] = "";
  wf_sock_addr_str(a, as, sizeof as);
  int64_t backoff = BACKOFF_MIN_NS;
  int attempts = 0;
  for (;;) {
    int fd = -1;
    attempts++;
    weft_status st = wf_sock_connect(a, b->deadline, &fd, err, sizeof err);
    if (st == WEFT_OK) {
      int64_t hs = wf_deadline_after(b->hs_timeout);
      st = wf_auth_connect(fd, &b->ap, (uint32_t)j, hs_each && hs < b->deadline ? hs : b->deadline, err,
                           sizeof err);
      if (st == WEFT_OK) {
        *out = fd;
        return WEFT_OK;
      }
      close(fd);
      if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_PEER_LOST)
        return wf_err(st, "rank %d: handshake with rank %d at %s failed: %s", b->rank, j, as, err);
    } else if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_PEER_LOST) {
      return wf_err(st, "rank %d: cannot connect to rank %d at %s: %s", b->rank, j, as, err);
    }
    WF_DEBUG(WF_SUB_BOOT, "rank %d: attempt %d to reach rank %d at %s: %s", b->rank, attempts, j, as, err);
    int64_t now = wf_now_ns();
    if (now >= b->deadline)
      return wf_err(WEFT_ERR_TIMEOUT, "rank %d: could not reach rank %d at %s within %.1f s (%d attempts; last: %s)",
                    b->rank, j, as, b->timeout, attempts, err);
    int64_t nap = backoff < b->deadline - now ? backoff : b->deadline - now;
    struct timespec ts = {(time_t)(nap / WF_NS_PER_SEC), (long)(nap % WF_NS_PER_SEC)};
    nanosleep(&ts, NULL); /* EINTR: just retry sooner */
    backoff = backoff * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : backoff * 2;
  }
}

/* Opens this rank's mesh listener on cfg->bind_addr or on the local address
 * of the connection to rank 0 (the interface that reaches the job). */
static weft_status open_listener(boot *b) {
  char err[256];
  struct sockaddr_in la, via;
  socklen_t len = sizeof via;
  if (getsockname(b->fds[0], (struct sockaddr *)&via, &len) < 0)
    return wf_err(WEFT_ERR_SYSTEM, "rank %d: getsockname: %s", b->rank, strerror(errno));
  const char *bind = b->cfg->bind_addr;
  if (bind && *bind) {
    weft_status st = wf_sock_parse_addr(bind, 0, &la, err, sizeof err);
    if (st != WEFT_OK) return wf_err(st, "rank %d: bad bind address (WEFT_BIND_ADDR): %s", b->rank, err);
  } else {
    la = via;
    la.sin_port = 0;
  }
  if (b->ap.secret_len == 0 && !wf_sock_is_loopback(&la)) {
    wf_sock_addr_str(&la, b->listen_str, sizeof b->listen_str);
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "rank %d: listen address %s is not loopback, and without a job secret only 127.x addresses are "
                  "allowed: set WEFT_SECRET (same value on every rank) to run across hosts",
                  b->rank, b->listen_str);
  }
  struct sockaddr_in bound;
  weft_status st = wf_sock_listen(&la, &b->lfd, &bound, err, sizeof err);
  if (st != WEFT_OK) return wf_err(st, "rank %d: %s", b->rank, err);
  /* a wildcard bind is announced under the address that reaches rank 0 */
  if (bound.sin_addr.s_addr == htonl(INADDR_ANY)) bound.sin_addr = via.sin_addr;
  wf_sock_addr_str(&bound, b->listen_str, sizeof b->listen_str);
  return WEFT_OK;
}

static weft_status send_hello(boot *b) {
  wf_hello_msg h;
  memset(&h, 0, sizeof h);
  h.rank = (uint32_t)b->rank;
  h.size = (uint32_t)b->size;
  h.pid = (uint32_t)getpid();
  h.incarnation = b->cfg->incarnation;
  h.device_kinds = b->cfg->device_kinds & WF_DEVICE_KINDS_MASK;
  wf_boot_copy_str(h.host, sizeof h.host, b->host);
  wf_boot_copy_str(h.boot_id, sizeof h.boot_id, b->boot_id);
  wf_boot_copy_str(h.listen_addr, sizeof h.listen_addr, b->listen_str);
  if (b->cfg->settings) {
    wf_settings_text(b->cfg->settings, h.settings, sizeof h.settings);
    wf_settings_digest(b->cfg->settings, h.settings_digest);
  }
  wf_buf buf = {0};
  char err[256];
  weft_status st = wf_encode_hello(&buf, h.rank, &h);
  if (st != WEFT_OK) {
    wf_boot_copy_str(err, sizeof err, wf_err_msg()); /* wf_err must not read its own buffer */
    st = wf_err(st, "rank %d: cannot encode HELLO: %s", b->rank, err);
  } else {
    st = wf_sock_write_all(b->fds[0], buf.data, buf.len, b->deadline, NULL, err, sizeof err);
    if (st != WEFT_OK) st = wf_err(st, "rank %d: cannot send HELLO to rank 0 at %s: %s", b->rank, b->addr0_str, err);
  }
  wf_buf_free(&buf);
  return st;
}

/* Waits for rank 0's PEERS (or ABORT) and installs the table. */
static weft_status recv_peers(boot *b) {
  char err[512];
  uint8_t hb[WF_FRAME_HDR_SIZE];
  wf_frame_hdr h;
  uint8_t *body = NULL;
  wf_peers_msg pm = {0, NULL};
  weft_status st = wf_sock_read_all(b->fds[0], hb, sizeof hb, b->deadline, NULL, err, sizeof err);
  if (st == WEFT_ERR_PEER_LOST)
    return wf_err(st, "rank %d: rank 0 at %s closed the connection before sending the peer table (rank 0 failed: "
                  "see its log)", b->rank, b->addr0_str);
  if (st == WEFT_ERR_TIMEOUT)
    return wf_err(st, "rank %d: timed out after %.1f s waiting for the peer table from rank 0 at %s (some ranks "
                  "never registered?)", b->rank, wf_boot_elapsed(b), b->addr0_str);
  if (st != WEFT_OK) return wf_err(st, "rank %d: reading from rank 0 at %s: %s", b->rank, b->addr0_str, err);
  uint64_t cap = 4 + (uint64_t)b->size * PEER_ENTRY_MAX;
  if (cap < 2 + WF_ERRMSG_MAX) cap = 2 + WF_ERRMSG_MAX;
  st = wf_frame_hdr_decode(hb, cap, 0, &h, err, sizeof err);
  if (st == WEFT_OK && ((h.type != WF_MSG_PEERS && h.type != WF_MSG_ABORT) || h.src != 0)) {
    snprintf(err, sizeof err, "expected PEERS from rank 0, got message type %u from rank %u", h.type, h.src);
    st = WEFT_ERR_PROTOCOL;
  }
  if (st != WEFT_OK) return wf_err(st, "rank %d: from rank 0 at %s: %s", b->rank, b->addr0_str, err);
  body = malloc(h.length ? (size_t)h.length : 1);
  if (!body) return wf_err(WEFT_ERR_NO_MEMORY, "rank %d: out of memory for the peer table", b->rank);
  st = wf_sock_read_all(b->fds[0], body, (size_t)h.length, b->deadline, NULL, err, sizeof err);
  if (st != WEFT_OK) {
    st = wf_err(st, "rank %d: reading the peer table from rank 0 at %s: %s", b->rank, b->addr0_str, err);
    goto out;
  }
  if (h.type == WF_MSG_ABORT) {
    char reason[WF_ERRMSG_MAX + 1];
    st = wf_decode_abort(body, (size_t)h.length, reason, sizeof reason, err, sizeof err);
    if (st == WEFT_OK) st = wf_err(WEFT_ERR_ABORTED, "rank %d: rank 0 aborted the rendezvous: %s", b->rank, reason);
    else st = wf_err(st, "rank %d: bad ABORT from rank 0: %s", b->rank, err);
    goto out;
  }
  st = wf_decode_peers(body, (size_t)h.length, &pm, err, sizeof err);
  if (st != WEFT_OK) {
    st = wf_err(st, "rank %d: bad peer table from rank 0: %s", b->rank, err);
    goto out;
  }
  if (pm.size != (uint32_t)b->size || pm.peers[b->rank].pid != (uint32_t)getpid()) {
    st = wf_err(WEFT_ERR_PROTOCOL, "rank %d: rank 0's peer table has %u ranks (this rank: pid %u) but this is pid %u "
                "of %d ranks", b->rank, pm.size, pm.size == (uint32_t)b->size ? pm.peers[b->rank].pid : 0,
                (unsigned)getpid(), b->size);
    goto out;
  }
  if (pm.peers[b->rank].incarnation != b->cfg->incarnation) {
    st = wf_err(WEFT_ERR_PROTOCOL, "rank %d: rank 0's peer table knows this rank as incarnation %016llx, but this is "
                "incarnation %016llx (another process registered as rank %d)", b->rank,
                (unsigned long long)pm.peers[b->rank].incarnation, (unsigned long long)b->cfg->incarnation, b->rank);
    goto out;
  }
  memcpy(b->peers, pm.peers, (size_t)b->size * sizeof *b->peers);
out:
  wf_peers_msg_free(&pm);
  free(body);
  return st;
}

weft_status wf_boot_join(boot *b) {
  WF_CHECK(dial(b, 0, &b->addr0, 1, &b->fds[0]));
  WF_CHECK(open_listener(b));
  WF_CHECK(send_hello(b));
  WF_CHECK(recv_peers(b));
  /* full mesh: dial every lower rank, then accept every higher one */
  for (int j = 1; j < b->rank; j++) {
    struct sockaddr_in a;
    char err[256];
    weft_status st = wf_sock_parse_addr(b->peers[j].listen_addr, 1, &a, err, sizeof err);
    if (st != WEFT_OK) return wf_err(WEFT_ERR_PROTOCOL, "rank %d: rank %d's address: %s", b->rank, j, err);
    if (b->ap.secret_len == 0 && !wf_sock_is_loopback(&a))
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "rank %d: rank %d listens on %s, not loopback, and no job secret is "
                    "set: set WEFT_SECRET", b->rank, j, b->peers[j].listen_addr);
    WF_CHECK(dial(b, j, &a, 0, &b->fds[j]));
  }
  WF_CHECK(wf_boot_serve(b, MODE_MESH, b->size - 1 - b->rank));
  wf_boot_close_fd(&b->lfd);
  return WEFT_OK;
}

