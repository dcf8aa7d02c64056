/* sockutil.h - the TCP plumbing under the rendezvous (bootstrap.c) and the
 * handshake (auth.c): IPv4 address parsing, listeners, non-blocking connect
 * and accept, and read/write-all with a deadline.
 *
 * Every socket made here is SOCK_CLOEXEC and starts non-blocking; every
 * connection gets TCP_NODELAY; listeners get SO_REUSEADDR. The I/O helpers
 * never block past their deadline whatever the fd's blocking mode: they use
 * MSG_DONTWAIT and wait in poll() with the time left, retrying on EINTR.
 * Messages go to err (errno text included); nothing here logs or sets the
 * thread's last error, so callers can add the rank and address. */
#ifndef WF_BOOT_SOCKUTIL_H
#define WF_BOOT_SOCKUTIL_H
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WF_ADDR_STR_MAX 32 /* "255.255.255.255:65535" and a NUL fit */

/* Parses "host:port" (need_port) or "host" / "host:port" (!need_port, port
 * 0 when absent) into an IPv4 address. host is a dotted quad or a name
 * (getaddrinfo, AF_INET; a name lookup is the one step here without a
 * deadline: use addresses where DNS may hang). WEFT_ERR_INVALID_ARGUMENT on a
 * malformed string or an unresolvable name. */
weft_status wf_sock_parse_addr(const char *s, int need_port, struct sockaddr_in *out, char *err, size_t errlen);

/* "a.b.c.d:port" into buf (at least WF_ADDR_STR_MAX bytes). */
void wf_sock_addr_str(const struct sockaddr_in *a, char *buf, size_t buflen);

/* 1 when the address is in 127.0.0.0/8. */
int wf_sock_is_loopback(const struct sockaddr_in *a);

/* A listener bound to a (port 0: any free port), backlog SOMAXCONN. *bound
 * (may be NULL) receives the address actually bound. */
weft_status wf_sock_listen(const struct sockaddr_in *a, int *fd, struct sockaddr_in *bound, char *err, size_t errlen);

/* Connects to a before deadline (absolute wf_now_ns()). WEFT_ERR_TIMEOUT when
 * the deadline passes, WEFT_ERR_PEER_LOST when refused/unreachable (worth a
 * retry: the listener may not be up yet), WEFT_ERR_SYSTEM otherwise. */
weft_status wf_sock_connect(const struct sockaddr_in *a, int64_t deadline, int *fd, char *err, size_t errlen);

/* One pending connection from a non-blocking listener. WEFT_IN_PROGRESS when
 * there is none right now (or it was aborted by the peer before we took it). */
weft_status wf_sock_accept(int lfd, int *fd, struct sockaddr_in *peer, char *err, size_t errlen);

/* Sets or clears O_NONBLOCK. */
weft_status wf_sock_set_blocking(int fd, int blocking, char *err, size_t errlen);

/* Moves len bytes before deadline. WEFT_ERR_TIMEOUT, WEFT_ERR_PEER_LOST
 * (closed or reset by the peer) or WEFT_ERR_SYSTEM; *done (may be NULL) holds
 * the bytes moved, also on error. */
weft_status wf_sock_write_all(int fd, const void *buf, size_t len, int64_t deadline, size_t *done, char *err,
                              size_t errlen);
weft_status wf_sock_read_all(int fd, void *buf, size_t len, int64_t deadline, size_t *done, char *err, size_t errlen);

/* Non-blocking step for state machines: moves what it can of buf[*off..len)
 * without waiting, advancing *off. WEFT_OK (possibly no progress: wait for
 * POLLIN/POLLOUT), WEFT_ERR_PEER_LOST or WEFT_ERR_SYSTEM. */
weft_status wf_sock_write_some(int fd, const void *buf, size_t len, size_t *off, char *err, size_t errlen);
weft_status wf_sock_read_some(int fd, void *buf, size_t len, size_t *off, char *err, size_t errlen);

/* Waits in poll() for events on fd until deadline: WEFT_OK when ready
 * (including POLLHUP/POLLERR: the next I/O call reports them),
 * WEFT_ERR_TIMEOUT, WEFT_ERR_SYSTEM. */
weft_status wf_sock_wait(int fd, short events, int64_t deadline, char *err, size_t errlen);

#endif
