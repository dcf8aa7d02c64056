/* sockutil.c - TCP plumbing for the rendezvous and the handshake: every call
 * is bounded by a deadline and EINTR-safe (see sockutil.h). */
#include "bootstrap/sockutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/time.h"

weft_status wf_sock_parse_addr(const char *s, int need_port, struct sockaddr_in *out, char *err, size_t errlen) {
  char host[256];
  long port = 0;
  if (!s || !*s) {
    snprintf(err, errlen, "empty address");
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (s[0] == '[') {
    snprintf(err, errlen, "address '%s': IPv6 is not supported, use an IPv4 address or name", s);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  const char *colon = strrchr(s, ':');
  size_t hlen = colon ? (size_t)(colon - s) : strlen(s);
  if (!colon && need_port) {
    snprintf(err, errlen, "address '%s' has no port (expected host:port)", s);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (hlen == 0 || hlen >= sizeof host) {
    snprintf(err, errlen, "address '%s': bad host part", s);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  memcpy(host, s, hlen);
  host[hlen] = '\0';
  if (strchr(host, ':')) {
    snprintf(err, errlen, "address '%s': IPv6 is not supported, use an IPv4 address or name", s);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  if (colon) {
    char *end;
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < (need_port ? 1 : 0) || port > 65535) {
      snprintf(err, errlen, "address '%s': bad port '%s'", s, colon + 1);
      return WEFT_ERR_INVALID_ARGUMENT;
    }
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res) {
    snprintf(err, errlen, "address '%s': cannot resolve '%s': %s", s, host, rc ? gai_strerror(rc) : "no result");
    if (res) freeaddrinfo(res);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_addr = ((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
  out->sin_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return WEFT_OK;
}

void wf_sock_addr_str(const struct sockaddr_in *a, char *buf, size_t buflen) {
  char ip[INET_ADDRSTRLEN];
  if (!inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
  snprintf(buf, buflen, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
}

int wf_sock_is_loopback(const struct sockaddr_in *a) { return (ntohl(a->sin_addr.s_addr) >> 24) == 127; }

/* TCP_NODELAY: the bootstrap and control messages are small and latency
 * bound; Nagle would hold them back. */
static weft_status set_nodelay(int fd, char *err, size_t errlen) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) {
    snprintf(err, errlen, "setsockopt(TCP_NODELAY): %s", strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  return WEFT_OK;
}

weft_status wf_sock_listen(const struct sockaddr_in *a, int *fd, struct sockaddr_in *bound, char *err, size_t errlen) {
  char as[WF_ADDR_STR_MAX];
  wf_sock_addr_str(a, as, sizeof as);
  *fd = -1;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    snprintf(err, errlen, "socket(): %s", strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  int one = 1;
  socklen_t len;
  struct sockaddr_in tmp;
  /* SO_REUSEADDR: a job restarted on the same port must not wait out
   * TIME_WAIT of the previous run's connections. */
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) {
    snprintf(err, errlen, "setsockopt(SO_REUSEADDR): %s", strerror(errno));
    goto fail;
  }
  if (bind(s, (const struct sockaddr *)a, sizeof *a) < 0) {
    snprintf(err, errlen, "cannot listen on %s: bind: %s", as, strerror(errno));
    goto fail;
  }
  if (listen(s, SOMAXCONN) < 0) {
    snprintf(err, errlen, "cannot listen on %s: listen: %s", as, strerror(errno));
    goto fail;
  }
  if (!bound) bound = &tmp;
  len = sizeof *bound;
  if (getsockname(s, (struct sockaddr *)bound, &len) < 0) {
    snprintf(err, errlen, "getsockname: %s", strerror(errno));
    goto fail;
  }
  *fd = s;
  return WEFT_OK;
fail:
  close(s);
  return WEFT_ERR_SYSTEM;
}

static int is_retryable_connect_errno(int e) {
  return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ECONNRESET || e == ETIMEDOUT ||
         e == ECONNABORTED;
}

weft_status wf_sock_connect(const struct sockaddr_in *a, int64_t deadline, int *fd, char *err, size_t errlen) {
  char as[WF_ADDR_STR_MAX];
  wf_sock_addr_str(a, as, sizeof as);
  *fd = -1;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) {
    snprintf(err, errlen, "socket(): %s", strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  weft_status st = WEFT_ERR_SYSTEM;
  int e = 0;
  if (connect(s, (const struct sockaddr *)a, sizeof *a) < 0) e = errno;
  if (e == EINPROGRESS || e == EINTR) {
    /* EINTR: the connect goes on in the background, exactly like
     * EINPROGRESS; completion shows as writability. */
    st = wf_sock_wait(s, POLLOUT, deadline, err, errlen);
    if (st == WEFT_ERR_TIMEOUT) {
      snprintf(err, errlen, "connect to %s timed out", as);
      goto fail;
    }
    if (st != WEFT_OK) goto fail;
    socklen_t el = sizeof e;
    if (getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) < 0) e = errno;
  }
  if (e != 0) {
    snprintf(err, errlen, "connect to %s: %s", as, strerror(e));
    st = is_retryable_connect_errno(e) ? WEFT_ERR_PEER_LOST : WEFT_ERR_SYSTEM;
    goto fail;
  }
  st = set_nodelay(s, err, errlen);
  if (st != WEFT_OK) goto fail;
  *fd = s;
  return WEFT_OK;
fail:
  close(s);
  return st;
}

weft_status wf_sock_accept(int lfd, int *fd, struct sockaddr_in *peer, char *err, size_t errlen) {
  *fd = -1;
  for (;;) {
    socklen_t len = sizeof *peer;
    int s = accept4(lfd, (struct sockaddr *)peer, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
      if (errno == EINTR) continue;
      /* ECONNABORTED & co: the peer gave up before we took it; Linux also
       * passes pending network errors of the new socket up through accept. */
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EPROTO ||
          errno == ENETDOWN || errno == ENOPROTOOPT || errno == EHOSTDOWN || errno == ENONET ||
          errno == EHOSTUNREACH || errno == EOPNOTSUPP || errno == ENETUNREACH)
        return WEFT_IN_PROGRESS;
      snprintf(err, errlen, "accept: %s", strerror(errno));
      return WEFT_ERR_SYSTEM;
    }
    weft_status st = set_nodelay(s, err, errlen);
    if (st != WEFT_OK) {
      close(s);
      return st;
    }
    *fd = s;
    return WEFT_OK;
  }
}

weft_status wf_sock_set_blocking(int fd, int blocking, char *err, size_t errlen) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, blocking ? (fl & ~O_NONBLOCK) : (fl | O_NONBLOCK)) < 0) {
    snprintf(err, errlen, "fcntl(O_NONBLOCK): %s", strerror(errno));
    return WEFT_ERR_SYSTEM;
  }
  return WEFT_OK;
}

weft_status wf_sock_wait(int fd, short events, int64_t deadline, char *err, size_t errlen) {
  for (;;) {
    int64_t now = wf_now_ns();
    if (now >= deadline) {
      snprintf(err, errlen, "deadline passed");
      return WEFT_ERR_TIMEOUT;
    }
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int n = poll(&p, 1, wf_ms_until(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      snprintf(err, errlen, "poll: %s", strerror(errno));
      return WEFT_ERR_SYSTEM;
    }
    if (n > 0) return WEFT_OK; /* ready, or HUP/ERR: the next I/O call says which */
  }
}

static weft_status io_errno(int e, int is_write, char *err, size_t errlen) {
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH) {
    snprintf(err, errlen, "connection lost (%s: %s)", is_write ? "send" : "recv", strerror(e));
    return WEFT_ERR_PEER_LOST;
  }
  snprintf(err, errlen, "%s: %s", is_write ? "send" : "recv", strerror(e));
  return WEFT_ERR_SYSTEM;
}

weft_status wf_sock_write_some(int fd, const void *buf, size_t len, size_t *off, char *err, size_t errlen) {
  while (*off < len) {
    ssize_t n = send(fd, (const char *)buf + *off, len - *off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WEFT_OK;
      return io_errno(errno, 1, err, errlen);
    }
    *off += (size_t)n;
  }
  return WEFT_OK;
}

weft_status wf_sock_read_some(int fd, void *buf, size_t len, size_t *off, char *err, size_t errlen) {
  while (*off < len) {
    ssize_t n = recv(fd, (char *)buf + *off, len - *off, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WEFT_OK;
      return io_errno(errno, 0, err, errlen);
    }
    if (n == 0) {
      snprintf(err, errlen, "connection closed by the peer");
      return WEFT_ERR_PEER_LOST;
    }
    *off += (size_t)n;
  }
  return WEFT_OK;
}

/* Shared loop of read_all/write_all: step, then wait for the rest. */
static weft_status xfer_all(int fd, void *buf, size_t len, int is_write, int64_t deadline, size_t *done, char *err,
                            size_t errlen) {
  size_t off = 0;
  weft_status st = WEFT_OK;
  for (;;) {
    st = is_write ? wf_sock_write_some(fd, buf, len, &off, err, errlen)
                  : wf_sock_read_some(fd, buf, len, &off, err, errlen);
    if (st != WEFT_OK || off == len) break;
    st = wf_sock_wait(fd, is_write ? POLLOUT : POLLIN, deadline, err, errlen);
    if (st == WEFT_ERR_TIMEOUT)
      snprintf(err, errlen, "timed out after %s %zu of %zu bytes", is_write ? "sending" : "receiving", off, len);
    if (st != WEFT_OK) break;
  }
  if (done) *done = off;
  return st;
}

weft_status wf_sock_write_all(int fd, const void *buf, size_t len, int64_t deadline, size_t *done, char *err,
                              size_t errlen) {
  return xfer_all(fd, (void *)(uintptr_t)buf, len, 1, deadline, done, err, errlen);
}

weft_status wf_sock_read_all(int fd, void *buf, size_t len, int64_t deadline, size_t *done, char *err, size_t errlen) {
  return xfer_all(fd, buf, len, 0, deadline, done, err, errlen);
}
