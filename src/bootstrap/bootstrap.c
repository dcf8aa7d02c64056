/* bootstrap.c - the rendezvous (bootstrap.h): every rank registers with
 * rank 0, rank 0 hands out the peer table, then the ranks build a full mesh
 * of authenticated TCP connections.
 *
 * Rank 0 and every mesh listener run their accepts in one poll() loop over
 * the listener and up to MAX_PENDING half-done handshakes (auth_nb.h), each
 * with its own handshake deadline: a stray, slow or hostile connection is
 * dropped with a warning when it misbehaves or its deadline passes, and
 * never holds up the real ranks. Only a peer that proved it holds the
 * secret can fail the job (world size disagrees, duplicate rank, ...);
 * rank 0 then tells every registered rank why (an ABORT frame) before
 * closing, so all ranks fail with the same message.
 *
 * A rank with a wrong secret fails at once with WEFT_ERR_AUTH; rank 0 cannot
 * tell it from an attacker, so it drops the connection, keeps waiting, and
 * at the deadline fails with WEFT_ERR_TIMEOUT naming the missing ranks and
 * the last rejected connection.
 *
 * Statuses of rank 0's checks: world size disagrees -> WEFT_ERR_MISMATCH;
 * duplicate or out-of-range rank -> WEFT_ERR_INVALID_ARGUMENT; a HELLO
 * naming another rank than its handshake -> WEFT_ERR_AUTH. The ranks told
 * by an ABORT return WEFT_ERR_ABORTED with rank 0's message.
 *
 * Mesh order: rank i dials 0 < j < i one at a time, then accepts j > i.
 * Rank 1 dials nobody, so it accepts at once; by induction every rank gets
 * to its accept loop, and a dial waits (up to the whole deadline, not the
 * handshake timeout) in the peer's backlog until then. */
#include "bootstrap/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/auth.h"
#include "bootstrap/auth_nb.h"
#include "bootstrap/sockutil.h"
#include "util/err.h"
#include "util/log.h"
#include "util/params.h"
#include "util/time.h"

#include "bootstrap/bootstrap_impl.h"

/* ------------------------------------------------------------ helpers */

/* Copies a string, truncating to fit (snprintf("%s") would do, but gcc
 * then warns about every possible truncation). */
void wf_boot_copy_str(char *dst, size_t dstlen, const char *src) {
  size_t n = strnlen(src, dstlen - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

double wf_boot_elapsed(const boot *b) { return (double)(wf_now_ns() - b->t0) / 1e9; }

void wf_boot_close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void read_boot_id(char *out, size_t outlen) {
  out[0] = '\0';
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n;
  do n = read(fd, out, outlen - 1);
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) n = 0;
  out[n] = '\0';
  out[strcspn(out, " \t\r\n")] = '\0';
}

void wf_boot_my_host(const boot *b, char *out, size_t outlen) {
  const char *h = b->cfg->hostname;
  if (h && *h) {
    wf_boot_copy_str(out, outlen, h);
    return;
  }
  char buf[WF_HOST_MAX + 2];
  if (gethostname(buf, sizeof buf) != 0 || !buf[0]) snprintf(buf, sizeof buf, "localhost");
  buf[WF_HOST_MAX] = '\0';
  wf_boot_copy_str(out, outlen, buf);
}

/* Best effort, never waits: tell a registered rank why the job failed. */
static void send_abort(const boot *b, int fd, const char *reason) {
  wf_buf buf = {0};
  char err[128];
  if (wf_encode_abort(&buf, (uint32_t)b->rank, reason) == WEFT_OK)
    (void)wf_sock_write_all(fd, buf.data, buf.len, wf_now_ns() + ABORT_GRACE_NS, NULL, err, sizeof err);
  wf_buf_free(&buf);
}

static void drop_pend(boot *b, pend *pd, const char *why) {
  WF_WARN(WF_SUB_BOOT, "rank %d: dropped connection from %s: %s", b->rank, pd->addr, why);
  b->rejected++;
  /* truncation is fine: it only goes into a message */
  int n = snprintf(b->last_reject, sizeof b->last_reject, "%s: ", pd->addr);
  if (n >= 0 && (size_t)n < sizeof b->last_reject) {
    size_t room = sizeof b->last_reject - (size_t)n - 1, len = strlen(why);
    if (len > room) len = room;
    memcpy(b->last_reject + n, why, len);
    b->last_reject[(size_t)n + len] = '\0';
  }
  wf_boot_close_fd(&pd->fd);
}

/* "1, 2, 5" (the first few) into out. */
static void missing_ranks(const boot *b, int mode, char *out, size_t outlen) {
  size_t n = 0;
  int shown = 0, total = 0;
  out[0] = '\0';
  for (int r = mode == MODE_REGISTER ? 1 : b->rank + 1; r < b->size; r++) {
    if (b->fds[r] >= 0) continue;
    total++;
    if (shown < 16 && n + 16 < outlen) {
      n += (size_t)snprintf(out + n, outlen - n, "%s%d", shown ? ", " : "", r);
      shown++;
    }
  }
  if (total > shown && n + 16 < outlen) snprintf(out + n, outlen - n, ", ... (%d in all)", total);
}

/* ------------------------------------------------- rank 0: registration */

/* A complete, decoded HELLO from authenticated rank pd->rank. Errors here
 * are the job's: the peer holds the secret. */
static weft_status on_hello(boot *b, pend *pd, const wf_hello_msg *h, int *have) {
  uint32_t r = pd->rank;
  if (h->size != (uint32_t)b->size)
    return wf_err(WEFT_ERR_MISMATCH, "rank %u says world size %u, rank 0 has %d", h->rank, h->size, b->size);
  if (h->rank != r)
    return wf_err(WEFT_ERR_AUTH, "rank 0: connection from %s authenticated as rank %u but its HELLO says rank %u",
                  pd->addr, r, h->rank);
  if (r == 0 || b->fds[r] >= 0) {
    char probe;
    if (r != 0 && h->incarnation != b->peers[r].incarnation &&
        recv(b->fds[r], &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) /* the first one's connection closed */
      return wf_err(WEFT_ERR_PEER_LOST,
                    "rank %u restarted: pid %u on %s (incarnation %016llx) registered and left, then pid %u on %s "
                    "(incarnation %016llx) registered as rank %u; a restarted rank cannot rejoin a job: start it again",
                    r, b->peers[r].pid, b->peers[r].host, (unsigned long long)b->peers[r].incarnation, h->pid, h->host,
                    (unsigned long long)h->incarnation, r);
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "rank %u registered twice (pids %u and %u; hosts %s and %s; incarnations %016llx and %016llx)", r,
                  b->peers[r].pid, h->pid, b->peers[r].host, h->host,
                  (unsigned long long)b->peers[r].incarnation, (unsigned long long)h->incarnation);
  }
  struct sockaddr_in la;
  char err[256];
  if (wf_sock_parse_addr(h->listen_addr, 1, &la, err, sizeof err) != WEFT_OK)
    return wf_err(WEFT_ERR_PROTOCOL, "rank 0: rank %u (pid %u on %s) announced an unusable listen address: %s", r,
                  h->pid, h->host, err);
  if (b->ap.secret_len == 0 && !wf_sock_is_loopback(&la))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "rank %u (on %s) listens on %s, but without a job secret only loopback (127.x) addresses are "
                  "allowed: set WEFT_SECRET (same value on every rank) to run across hosts",
                  r, h->host, h->listen_addr);
  wf_peer_info *p = &b->peers[r];
  wf_boot_copy_str(p->host, sizeof p->host, h->host);
  wf_boot_copy_str(p->listen_addr, sizeof p->listen_addr, h->listen_addr);
  p->pid = h->pid;
  p->incarnation = h->incarnation;
  p->device_kinds = h->device_kinds;
  wf_boot_copy_str(b->boot_ids[r], sizeof b->boot_ids[r], h->boot_id);
  if (b->set_text) {
    b->set_text[r] = strdup(h->settings);
    if (!b->set_text[r]) return wf_err(WEFT_ERR_NO_MEMORY, "rank 0: out of memory");
    memcpy(b->set_digest[r], h->settings_digest, sizeof b->set_digest[r]);
  }
  b->fds[r] = pd->fd;
  pd->fd = -1;
  (*have)++;
  WF_DEBUG(WF_SUB_BOOT, "rank 0: rank %u registered from %s (pid %u on %s, listens on %s)", r, pd->addr, h->pid,
           h->host, h->listen_addr);
  return WEFT_OK;
}

/* Reads the HELLO frame of an authenticated connection (rank 0). */
static weft_status step_hello(boot *b, pend *pd, int *have) {
  char err[512];
  weft_status st;
  if (pd->phase == PH_HDR) {
    st = wf_sock_read_some(pd->fd, pd->hdr, sizeof pd->hdr, &pd->off, err, sizeof err);
    if (st != WEFT_OK) goto lost;
    if (pd->off < sizeof pd->hdr) return WEFT_IN_PROGRESS;
    wf_frame_hdr h;
    st = wf_frame_hdr_decode(pd->hdr, HELLO_BUF, 0, &h, err, sizeof err);
    if (st == WEFT_OK && h.type != WF_MSG_HELLO) {
      snprintf(err, sizeof err, "expected a HELLO, got message type %u", h.type);
      st = WEFT_ERR_PROTOCOL;
    }
    if (st == WEFT_OK && h.src != pd->rank)
      return wf_err(WEFT_ERR_AUTH, "rank 0: connection from %s authenticated as rank %u but its HELLO says rank %u",
                    pd->addr, pd->rank, h.src);
    if (st != WEFT_OK) return wf_err(st, "rank 0: rank %u at %s: %s", pd->rank, pd->addr, err);
    pd->phase = PH_BODY;
    pd->blen = (size_t)h.length;
    pd->off = 0;
  }
  st = wf_sock_read_some(pd->fd, pd->body, pd->blen, &pd->off, err, sizeof err);
  if (st != WEFT_OK) goto lost;
  if (pd->off < pd->blen) return WEFT_IN_PROGRESS;
  wf_hello_msg hello;
  st = wf_decode_hello(pd->body, pd->blen, &hello, err, sizeof err);
  if (st != WEFT_OK) return wf_err(st, "rank 0: bad HELLO from rank %u at %s: %s", pd->rank, pd->addr, err);
  return on_hello(b, pd, &hello, have);
lost:
  /* authenticated, then gone: a rank that died or gave up (it retries) */
  drop_pend(b, pd, err);
  return WEFT_OK;
}

/* ------------------------------------------------- the accept loop */

/* A handshake finished on pd (mesh listener): register the connection. */
static weft_status on_mesh_peer(boot *b, pend *pd, int *have) {
  uint32_t r = pd->rank;
  if ((int)r <= b->rank)
    return wf_err(WEFT_ERR_PROTOCOL, "rank %d: rank %u (from %s) dialed this rank, but only higher ranks should",
                  b->rank, r, pd->addr);
  if (b->fds[r] >= 0)
    return wf_err(WEFT_ERR_PROTOCOL, "rank %d: rank %u connected twice (from %s; peer table: pid %u on %s)", b->rank,
                  r, pd->addr, b->peers[r].pid, b->peers[r].host);
  b->fds[r] = pd->fd;
  pd->fd = -1;
  (*have)++;
  return WEFT_OK;
}

/* Advances one pending connection. WEFT_OK: keep going (it may have been
 * dropped or completed); an error: the job fails. */
static weft_status step_pend(boot *b, pend *pd, int mode, int *have) {
  char err[512];
  if (pd->phase == PH_AUTH) {
    weft_status st = wf_auth_acc_step(&pd->acc, &pd->events, err, sizeof err);
    if (st == WEFT_IN_PROGRESS) return WEFT_OK;
    if (st != WEFT_OK) {
      if (!pd->acc.mac_ok) {
        drop_pend(b, pd, err);
        return WEFT_OK;
      }
      /* a holder of the secret with the wrong world size or rank */
      return wf_err(pd->acc.peer_size != (uint32_t)b->size ? WEFT_ERR_MISMATCH : WEFT_ERR_INVALID_ARGUMENT,
                    "%s (connection from %s)", err, pd->addr);
    }
    pd->rank = pd->acc.peer_rank;
    if (mode == MODE_MESH) return on_mesh_peer(b, pd, have);
    pd->phase = PH_HDR;
    pd->off = 0;
  }
  weft_status st = step_hello(b, pd, have);
  if (st == WEFT_IN_PROGRESS) {
    pd->events = POLLIN;
    return WEFT_OK;
  }
  if (st != WEFT_OK && pd->fd >= 0) b->abort_fd = pd->fd, pd->fd = -1; /* authenticated: tell it why */
  return st;
}

static weft_status accept_new(boot *b) {
  char err[256];
  while (b->npend < MAX_PENDING) {
    struct sockaddr_in peer;
    int fd;
    weft_status st = wf_sock_accept(b->lfd, &fd, &peer, err, sizeof err);
    if (st == WEFT_IN_PROGRESS) return WEFT_OK;
    if (st != WEFT_OK) return wf_err(st, "rank %d: on listener %s: %s", b->rank, b->listen_str, err);
    pend *pd = &b->pend[b->npend++];
    memset(pd, 0, sizeof *pd);
    pd->fd = fd;
    pd->phase = PH_AUTH;
    pd->deadline = wf_deadline_after(b->hs_timeout);
    wf_sock_addr_str(&peer, pd->addr, sizeof pd->addr);
    st = wf_auth_acc_init(&pd->acc, fd, &b->ap, err, sizeof err);
    if (st != WEFT_OK) return wf_err(st, "rank %d: %s", b->rank, err);
    pd->events = POLLOUT;
  }
  return WEFT_OK;
}

static void compact_pend(boot *b) {
  int j = 0;
  for (int i = 0; i < b->npend; i++)
    if (b->pend[i].fd >= 0) {
      if (i != j) b->pend[j] = b->pend[i];
      j++;
    }
  b->npend = j;
}

/* A registered rank (rank 0, before PEERS) must stay silent and connected. */
static weft_status check_registered(boot *b, int r) {
  char c;
  ssize_t n;
  do n = recv(b->fds[r], &c, 1, MSG_DONTWAIT | MSG_PEEK);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return WEFT_OK;
  if (n > 0)
    return wf_err(WEFT_ERR_PROTOCOL, "rank 0: rank %d (pid %u on %s) sent data before the peer table", r,
                  b->peers[r].pid, b->peers[r].host);
  return wf_err(WEFT_ERR_PEER_LOST, "rank 0: rank %d (pid %u on %s) disconnected before the rendezvous completed%s%s",
                r, b->peers[r].pid, b->peers[r].host, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
}

/* Accepts until `need` ranks are connected (MODE_REGISTER: registered with
 * rank 0; MODE_MESH: every higher rank dialed in) or the deadline passes. */
weft_status wf_boot_serve(boot *b, int mode, int need) {
  int have = 0;
  weft_status st = WEFT_OK;
  int nfds = 1 + MAX_PENDING + (mode == MODE_REGISTER ? b->size : 0);
  struct pollfd *pfd = calloc((size_t)nfds, sizeof *pfd);
  int *who = calloc((size_t)nfds, sizeof *who); /* >= 0: pend index; < 0: -1 - registered rank */
  if (!pfd || !who) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "rank %d: out of memory in the rendezvous", b->rank);
    goto out;
  }
  while (have < need) {
    int64_t now = wf_now_ns();
    if (now >= b->deadline) {
      char miss[160], rej[480] = "";
      missing_ranks(b, mode, miss, sizeof miss);
      if (b->rejected)
        snprintf(rej, sizeof rej, "; %d connection(s) were rejected, the last from %s", b->rejected, b->last_reject);
      if (mode == MODE_REGISTER)
        st = wf_err(WEFT_ERR_TIMEOUT, "rank 0: timed out after %.1f s at %s waiting for %d of %d ranks to register "
                    "(missing: %s)%s", wf_boot_elapsed(b), b->listen_str, need - have, b->size, miss, rej);
      else
        st = wf_err(WEFT_ERR_TIMEOUT, "rank %d: timed out after %.1f s waiting on %s for ranks %s to connect%s",
                    b->rank, wf_boot_elapsed(b), b->listen_str, miss, rej);
      goto out;
    }
    int n = 0;
    int64_t wake = b->deadline;
    if (b->npend < MAX_PENDING) pfd[n] = (struct pollfd){b->lfd, POLLIN, 0}, who[n++] = MAX_PENDING;
    for (int i = 0; i < b->npend; i++) {
      pfd[n] = (struct pollfd){b->pend[i].fd, b->pend[i].events, 0}, who[n++] = i;
      if (b->pend[i].deadline < wake) wake = b->pend[i].deadline;
    }
    if (mode == MODE_REGISTER)
      for (int r = 1; r < b->size; r++)
        if (b->fds[r] >= 0) pfd[n] = (struct pollfd){b->fds[r], POLLIN, 0}, who[n++] = -1 - r;
    int k = poll(pfd, (nfds_t)n, wf_ms_until(wake));
    if (k < 0 && errno != EINTR) {
      st = wf_err(WEFT_ERR_SYSTEM, "rank %d: poll: %s", b->rank, strerror(errno));
      goto out;
    }
    int accept_ready = 0;
    for (int i = 0; k > 0 && i < n; i++) {
      if (!pfd[i].revents) continue;
      if (who[i] == MAX_PENDING) {
        accept_ready = 1;
      } else if (who[i] >= 0) {
        pend *pd = &b->pend[who[i]];
        if (pd->fd >= 0 && (st = step_pend(b, pd, mode, &have)) != WEFT_OK) goto out;
      } else if ((st = check_registered(b, -1 - who[i])) != WEFT_OK) {
        goto out;
      }
    }
    now = wf_now_ns();
    for (int i = 0; i < b->npend; i++) {
      pend *pd = &b->pend[i];
      if (pd->fd < 0 || now < pd->deadline) continue;
      char why[160];
      if (pd->phase != PH_AUTH)
        snprintf(why, sizeof why, "handshake timed out after %.1f s (authenticated as rank %u, but sent no HELLO)",
                 b->hs_timeout, pd->rank);
      else if (pd->events == POLLIN)
        snprintf(why, sizeof why, "handshake timed out after %.1f s (%zu of %d HELLO bytes received)", b->hs_timeout,
                 wf_auth_acc_hello_bytes(&pd->acc), WF_AUTH_HELLO_SIZE);
      else
        snprintf(why, sizeof why, "handshake timed out after %.1f s (the peer is not reading)", b->hs_timeout);
      drop_pend(b, pd, why);
    }
    compact_pend(b);
    if (accept_ready) {
      int first = b->npend;
      if ((st = accept_new(b)) != WEFT_OK) goto out;
      /* send the CHALLENGE right away (a fresh socket always has room) */
      for (int i = first; i < b->npend; i++)
        if ((st = step_pend(b, &b->pend[i], mode, &have)) != WEFT_OK) goto out;
      compact_pend(b);
    }
  }
out:
  free(pfd);
  free(who);
  return st;
}

/* ------------------------------------------------- rank 0: peer table */

typedef struct host_key {
  const char *host, *boot;
  int rank;
} host_key;

static int cmp_host_key(const void *x, const void *y) {
  const host_key *a = x, *b = y;
  int c = strcmp(a->host, b->host);
  if (!c) c = strcmp(a->boot, b->boot);
  return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

static int cmp_int_pair(const void *x, const void *y) {
  const int *a = x, *b = y; /* {min rank, group} */
  return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Groups ranks by (host, boot id); hosts ordered by their lowest rank. */
static weft_status compute_topology(boot *b) {
  int n = b->size;
  host_key *keys = malloc((size_t)n * sizeof *keys);
  int *group = malloc((size_t)n * sizeof *group);
  int *gmin = malloc((size_t)n * 2 * sizeof *gmin);
  int *cross = malloc((size_t)n * sizeof *cross);
  weft_status st = WEFT_OK;
  if (!keys || !group || !gmin || !cross) {
    st = wf_err(WEFT_ERR_NO_MEMORY, "rank 0: out of memory computing local ranks");
    goto out;
  }
  for (int r = 0; r < n; r++) keys[r] = (host_key){b->peers[r].host, b->boot_ids[r], r};
  qsort(keys, (size_t)n, sizeof *keys, cmp_host_key);
  int ng = 0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j < n && !strcmp(keys[j].host, keys[i].host) && !strcmp(keys[j].boot, keys[i].boot)) j++;
    for (int k = i; k < j; k++) {
      b->peers[keys[k].rank].local_rank = k - i;
      b->peers[keys[k].rank].local_size = j - i;
      group[keys[k].rank] = ng;
    }
    gmin[2 * ng] = keys[i].rank; /* sorted by rank within the group */
    gmin[2 * ng + 1] = ng;
    ng++;
    i = j;
  }
  qsort(gmin, (size_t)ng, 2 * sizeof *gmin, cmp_int_pair);
  for (int c = 0; c < ng; c++) cross[gmin[2 * c + 1]] = c;
  for (int r = 0; r < n; r++) {
    b->peers[r].cross_rank = cross[group[r]];
    b->peers[r].cross_size = ng;
  }
out:
  free(keys);
  free(group);
  free(gmin);
  free(cross);
  return st;
}

/* Every rank's agreed settings equal rank 0's (settings.h), or the job is
 * refused naming each setting that differs and the first rank that has it
 * different. */
static weft_status check_settings(const boot *b) {
  if (!b->set_text) return WEFT_OK;
  for (int r = 1; r < b->size; r++) {
    if (!memcmp(b->set_digest[r], b->set_digest[0], WF_SETTINGS_DIGEST)) continue;
    char diff[1024];
    if (!wf_settings_diff(b->set_text[0], 0, b->set_text[r], r, diff, sizeof diff))
      snprintf(diff, sizeof diff, "the settings of rank 0 and rank %d differ beyond the %d bytes compared here "
               "(long WEFT_ALGO_* values?)", r, WF_SETTINGS_TEXT_MAX);
    return wf_err(WEFT_ERR_MISMATCH, "settings that must be the same on every rank differ: %s (pid %u on %s); set "
                  "them alike on every rank (weft-info lists which settings must agree)", diff, b->peers[r].pid,
                  b->peers[r].host);
  }
  return WEFT_OK;
}

static weft_status run_rank0(boot *b) {
  char err[256];
  weft_status st = WEFT_OK;
  if (b->lfd < 0) st = wf_sock_listen(&b->addr0, &b->lfd, NULL, err, sizeof err); /* else pre-opened */
  if (st != WEFT_OK) return wf_err(st, "rank 0: %s", err);
  wf_boot_copy_str(b->listen_str, sizeof b->listen_str, b->addr0_str);
  b->boot_ids = calloc((size_t)b->size, sizeof *b->boot_ids);
  if (!b->boot_ids) return wf_err(WEFT_ERR_NO_MEMORY, "rank 0: out of memory");
  if (b->cfg->settings) {
    b->set_text = calloc((size_t)b->size, sizeof *b->set_text);
    b->set_digest = calloc((size_t)b->size, sizeof *b->set_digest);
    if (!b->set_text || !b->set_digest) return wf_err(WEFT_ERR_NO_MEMORY, "rank 0: out of memory");
    b->set_text[0] = malloc(WF_SETTINGS_TEXT_MAX + 1);
    if (!b->set_text[0]) return wf_err(WEFT_ERR_NO_MEMORY, "rank 0: out of memory");
    wf_settings_text(b->cfg->settings, b->set_text[0], WF_SETTINGS_TEXT_MAX + 1);
    wf_settings_digest(b->cfg->settings, b->set_digest[0]);
  }
  wf_boot_copy_str(b->peers[0].host, sizeof b->peers[0].host, b->host);
  wf_boot_copy_str(b->peers[0].listen_addr, sizeof b->peers[0].listen_addr, b->addr0_str);
  b->peers[0].pid = (uint32_t)getpid();
  b->peers[0].incarnation = b->cfg->incarnation;
  b->peers[0].device_kinds = b->cfg->device_kinds & WF_DEVICE_KINDS_MASK;
  wf_boot_copy_str(b->boot_ids[0], sizeof b->boot_ids[0], b->boot_id);

  WF_CHECK(wf_boot_serve(b, MODE_REGISTER, b->size - 1));
  wf_boot_close_fd(&b->lfd);
  WF_CHECK(check_settings(b));
  WF_CHECK(compute_topology(b));

  wf_buf buf = {0};
  wf_peers_msg pm = {(uint32_t)b->size, b->peers};
  st = wf_encode_peers(&buf, 0, &pm);
  if (st != WEFT_OK) {
    wf_buf_free(&buf);
    wf_boot_copy_str(err, sizeof err, wf_err_msg()); /* wf_err must not read its own buffer */
    return wf_err(st, "rank 0: cannot encode the peer table: %s", err);
  }
  for (int r = 1; r < b->size && st == WEFT_OK; r++) {
    st = wf_sock_write_all(b->fds[r], buf.data, buf.len, b->deadline, NULL, err, sizeof err);
    if (st != WEFT_OK)
      wf_err(st, "rank 0: cannot send the peer table to rank %d (pid %u on %s): %s", r, b->peers[r].pid,
             b->peers[r].host, err);
  }
  wf_buf_free(&buf);
  return st;
}

/* ------------------------------------------------- entry points */

void wf_boot_result_free(wf_boot_result *r) {
  if (!r) return;
  if (r->fds)
    for (int i = 0; i < r->size; i++) wf_boot_close_fd(&r->fds[i]);
  free(r->fds);
  free(r->peers);
  memset(r, 0, sizeof *r);
}

static weft_status boot_init(boot *b, const wf_boot_cfg *cfg) {
  char err[256];
  b->cfg = cfg;
  b->rank = cfg->rank;
  b->size = cfg->size;
  b->lfd = b->abort_fd = -1;
  b->t0 = wf_now_ns();
  const wf_settings *def = wf_settings_default();
  b->timeout = cfg->timeout_seconds > 0 ? cfg->timeout_seconds : def->init_timeout_seconds;
  b->hs_timeout = cfg->handshake_timeout > 0 ? cfg->handshake_timeout : def->handshake_timeout;
  if (!(b->timeout > 0)) b->timeout = 60;
  if (!(b->hs_timeout > 0)) b->hs_timeout = 5;
  b->deadline = wf_deadline_after(b->timeout);
  b->ap = (wf_auth_params){cfg->secret, cfg->secret_len, cfg->job_id ? cfg->job_id : "", (uint32_t)cfg->rank,
                           (uint32_t)cfg->size};
  wf_boot_my_host(b, b->host, sizeof b->host);
  read_boot_id(b->boot_id, sizeof b->boot_id);
  b->fds = malloc((size_t)b->size * sizeof *b->fds);
  b->peers = calloc((size_t)b->size, sizeof *b->peers);
  if (!b->fds || !b->peers) return wf_err(WEFT_ERR_NO_MEMORY, "rank %d: out of memory for %d peers", b->rank, b->size);
  for (int i = 0; i < b->size; i++) b->fds[i] = -1;
  if (b->size == 1) return WEFT_OK;
  weft_status st = wf_sock_parse_addr(cfg->addr, 1, &b->addr0, err, sizeof err);
  if (st != WEFT_OK) return wf_err(st, "rank %d: rank 0's address (WEFT_ADDR): %s", b->rank, err);
  wf_sock_addr_str(&b->addr0, b->addr0_str, sizeof b->addr0_str);
  if (cfg->secret_len == 0 && !wf_sock_is_loopback(&b->addr0))
    return wf_err(WEFT_ERR_INVALID_ARGUMENT,
                  "rank %d: rank 0's address %s (%s) is not loopback, and without a job secret only 127.x addresses "
                  "are allowed: set WEFT_SECRET (same value on every rank) to run across hosts",
                  b->rank, cfg->addr, b->addr0_str);
  return WEFT_OK;
}

weft_status wf_bootstrap(const wf_boot_cfg *cfg, wf_boot_result *out) {
  if (!out) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_bootstrap: out is NULL");
  memset(out, 0, sizeof *out);
  if (!cfg || cfg->size < 1 || cfg->size > WF_MAX_RANKS || cfg->rank < 0 || cfg->rank >= cfg->size ||
      (cfg->secret_len && !cfg->secret)) {
    if (cfg && cfg->have_listen_fd) close(cfg->listen_fd);
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_bootstrap: bad configuration (rank %d, size %d)",
                  cfg ? cfg->rank : -1, cfg ? cfg->size : -1);
  }
  boot *b = calloc(1, sizeof *b);
  if (!b) {
    if (cfg->have_listen_fd) close(cfg->listen_fd);
    return wf_err(WEFT_ERR_NO_MEMORY, "rank %d: out of memory", cfg->rank);
  }
  weft_status st = boot_init(b, cfg);
  if (cfg->have_listen_fd) { /* rank 0's listener, opened by the caller: ours now */
    if (b->rank == 0 && b->size > 1) b->lfd = cfg->listen_fd;
    else close(cfg->listen_fd);
  }
  if (st == WEFT_OK && b->size == 1) {
    wf_boot_copy_str(b->peers[0].host, sizeof b->peers[0].host, b->host);
    wf_boot_copy_str(b->peers[0].listen_addr, sizeof b->peers[0].listen_addr, cfg->addr ? cfg->addr : "");
    b->peers[0].pid = (uint32_t)getpid();
    b->peers[0].incarnation = cfg->incarnation;
    b->peers[0].device_kinds = cfg->device_kinds & WF_DEVICE_KINDS_MASK;
    b->peers[0].local_size = b->peers[0].cross_size = 1;
  } else if (st == WEFT_OK) {
    st = b->rank == 0 ? run_rank0(b) : wf_boot_join(b);
  }
  for (int i = 0; st == WEFT_OK && i < b->size; i++) {
    char err[128];
    if (b->fds[i] >= 0 && (st = wf_sock_set_blocking(b->fds[i], 1, err, sizeof err)) != WEFT_OK)
      st = wf_err(st, "rank %d: %s", b->rank, err);
  }
  if (st == WEFT_OK) {
    const wf_peer_info *me = &b->peers[b->rank];
    *out = (wf_boot_result){b->size, b->fds, b->peers, me->local_rank, me->local_size, me->cross_rank,
                            me->cross_size};
    b->fds = NULL;
    b->peers = NULL;
    WF_INFO(WF_SUB_BOOT, "rank %d: rendezvous done in %.2f s: %d ranks, local %d/%d, cross %d/%d", b->rank,
            wf_boot_elapsed(b), b->size, out->local_rank, out->local_size, out->cross_rank, out->cross_size);
  } else if (b->rank == 0 && b->size > 1) {
    /* every rank that registered learns why the job failed */
    char reason[1024];
    wf_boot_copy_str(reason, sizeof reason, wf_err_msg());
    if (b->abort_fd >= 0) send_abort(b, b->abort_fd, reason);
    for (int r = 1; r < b->size; r++)
      if (b->fds[r] >= 0) send_abort(b, b->fds[r], reason);
    wf_err(st, "%s", reason);
  }
  /* on success only the listener is left here; on error, everything */
  wf_boot_close_fd(&b->lfd);
  wf_boot_close_fd(&b->abort_fd);
  for (int i = 0; i < b->npend; i++) wf_boot_close_fd(&b->pend[i].fd);
  if (b->fds)
    for (int i = 0; i < b->size; i++) wf_boot_close_fd(&b->fds[i]);
  free(b->fds);
  free(b->peers);
  free(b->boot_ids);
  for (int i = 0; b->set_text && i < b->size; i++) free(b->set_text[i]);
  free(b->set_text);
  free(b->set_digest);
  free(b);
  return st;
}
