/* tcp.c - the TCP transport: framed control and chunked data over one
 * non-blocking socket per peer (see tcp.h for the design). Engine thread
 * only. */
#include "transport/tcp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "util/err.h"
#include "util/log.h"
#include "util/settings.h"
#include "util/time.h"

#define RBUF_SIZE (64 * 1024)
#define DIRECT_READ_MIN (16 * 1024) /* read payloads this large straight into place */
#define UNEXP_CAP (32u << 20)        /* buffered early data per peer before pausing */
#define DATA_HDR_LEN (WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE)

typedef struct tx_item {
  struct tx_item *next;
  int is_data;
  /* ctrl: the whole frame */
  uint8_t *frame;
  size_t frame_len;
  /* data */
  uint64_t seq;
  uint32_t idx;
  const uint8_t *buf;
  size_t len;
  int *pending;
  size_t off; /* ctrl: bytes of frame written; data: payload bytes written */
} tx_item;

typedef struct rx_post {
  struct rx_post *next;
  uint64_t seq;
  uint32_t idx;
  uint8_t *buf;
  size_t len, got;
  int *pending;
} rx_post;

typedef struct rx_unexp {
  struct rx_unexp *next;
  uint64_t seq;
  uint32_t idx;
  uint8_t *data;
  size_t len;
} rx_unexp;

enum { RX_HDR, RX_SUB, RX_CTRL, RX_DATA };

typedef struct conn {
  int fd;
  int peer;
  int epfd;
  uint32_t ev; /* registered epoll events */
  /* send side */
  tx_item *ctrl_head, *ctrl_tail, *data_head, *data_tail;
  tx_item *cur;     /* frame being written (ctrl item, or data item mid-chunk) */
  uint8_t dhdr[DATA_HDR_LEN];
  size_t dhdr_off;  /* header bytes of the current data chunk written */
  size_t chunk_end; /* payload offset where the current data chunk ends */
  size_t queued;
  /* receive side */
  uint8_t *rbuf;
  size_t rpos, rlen;
  int rstate;
  wf_frame_hdr hdr;
  wf_data_hdr dh;
  size_t dleft;     /* data payload bytes left in the current frame */
  uint8_t *ddst;    /* where they go */
  rx_post *dpost;   /* the posted receive being filled, or NULL (unexpected) */
  rx_unexp *dunexp; /* the unexpected chunk being filled */
  uint8_t *cbuf;    /* control payload (large ones) */
  size_t cgot;
  rx_post *post_head, *post_tail;
  rx_unexp *unexp_head, *unexp_tail;
  size_t unexp_bytes;
  int paused;
  int lost_tx; /* closed with data sends queued: they never complete (until cancel_data) */
  int64_t last_rx, last_tx;
} conn;

struct wf_tcp {
  wf_transport base;
  int rank, size;
  int epfd;
  conn *conns;
  wf_tcp_callbacks cb;
  size_t chunk;
  uint64_t max_ctrl;
};

static const wf_transport_ops tcp_ops;

static void conn_update_events(conn *c) {
  if (c->fd < 0) return;
  uint32_t want = (c->paused ? 0 : EPOLLIN) | ((c->cur || c->ctrl_head || c->data_head) ? EPOLLOUT : 0);
  if (want == c->ev) return;
  struct epoll_event e = {.events = want, .data.u32 = (uint32_t)c->peer};
  epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &e);
  c->ev = want;
}

/* Drops what was queued for sending: data always, control frames unless
 * keep_ctrl (a control frame half written stays: it is c->cur). */
static void free_tx(conn *c, int keep_ctrl) {
  /* the frame being written: a data item is still the head of the data list
   * (freed with it); a control item was taken off its list */
  if (c->cur && c->cur->is_data) c->cur = NULL;
  for (tx_item *i = c->data_head, *n; i; i = n) {
    n = i->next;
    free(i);
  }
  c->data_head = c->data_tail = NULL;
  if (keep_ctrl) return;
  if (c->cur) {
    free(c->cur->frame);
    free(c->cur);
    c->cur = NULL;
  }
  for (tx_item *i = c->ctrl_head, *n; i; i = n) {
    n = i->next;
    free(i->frame);
    free(i);
  }
  c->ctrl_head = c->ctrl_tail = NULL;
}

static void free_queues(conn *c, int keep_ctrl) {
  free_tx(c, keep_ctrl);
  for (rx_post *p = c->post_head, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  c->post_head = c->post_tail = NULL;
  for (rx_unexp *u = c->unexp_head, *n; u; u = n) {
    n = u->next;
    free(u->data);
    free(u);
  }
  c->unexp_head = c->unexp_tail = NULL;
  c->unexp_bytes = 0;
  c->dpost = NULL;
  c->dunexp = NULL;
}

static void unexp_remove(conn *c, rx_unexp *u) {
  rx_unexp **pp = &c->unexp_head, *prev = NULL;
  while (*pp != u) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  *pp = u->next;
  if (c->unexp_tail == u) c->unexp_tail = prev;
  c->unexp_bytes -= u->len;
  free(u->data);
  free(u);
}

/* Closes the socket and drops what was queued for sending. Data already
 * received (posted receives, early data) is kept: a peer that said BYE sent
 * everything first, and receives posted later may still be satisfied from
 * it. wf_tcp_destroy and cancel_data free the rest. */
static void conn_close(conn *c) {
  if (c->fd >= 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
  }
  if (c->data_head) c->lost_tx = 1;
  free_tx(c, 0);
  if (c->rstate == RX_DATA && c->dunexp) { /* a chunk cut short is no data */
    rx_unexp *u = c->dunexp;
    c->dunexp = NULL;
    unexp_remove(c, u);
  }
  c->rstate = RX_HDR;
  c->dpost = NULL;
  free(c->cbuf);
  c->cbuf = NULL;
  c->queued = 0;
}

static void conn_fail(wf_tcp *t, conn *c, weft_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conn_fail(wf_tcp *t, conn *c, weft_status st, const char *fmt, ...) {
  if (c->fd < 0) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  conn_close(c);
  if (t->cb.on_error) t->cb.on_error(t->cb.ctx, c->peer, st, msg);
}

weft_status wf_tcp_create(int rank, int size, int *fds, int epfd, const wf_tcp_callbacks *cb, wf_tcp **out) {
  *out = NULL;
  wf_tcp *t = calloc(1, sizeof *t);
  if (!t) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory creating the TCP transport");
  t->conns = calloc((size_t)size, sizeof *t->conns);
  if (!t->conns) {
    free(t);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory creating the TCP transport");
  }
  t->base.ops = &tcp_ops;
  t->rank = rank;
  t->size = size;
  t->epfd = epfd;
  t->cb = *cb;
  const wf_settings *def = wf_settings_default();
  int64_t chunk = cb->chunk_bytes ? cb->chunk_bytes : def->tcp_chunk_bytes;
  t->chunk = chunk < 4096 ? 4096 : (size_t)chunk;
  int64_t maxc = cb->max_message_bytes ? cb->max_message_bytes : def->max_message_bytes;
  t->max_ctrl = maxc < 65536 ? 65536 : (uint64_t)maxc;
  int64_t now = wf_now_ns();
  for (int p = 0; p < size; p++) {
    conn *c = &t->conns[p];
    c->fd = -1;
    c->peer = p;
    c->epfd = epfd;
    c->last_rx = c->last_tx = now;
  }
  for (int p = 0; p < size; p++) {
    conn *c = &t->conns[p];
    if (p == rank || fds[p] < 0) continue;
    c->rbuf = malloc(RBUF_SIZE);
    if (!c->rbuf) goto oom;
    int fl = fcntl(fds[p], F_GETFL);
    fcntl(fds[p], F_SETFL, fl | O_NONBLOCK);
    c->fd = fds[p];
    fds[p] = -1;
    c->ev = EPOLLIN;
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = (uint32_t)p};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &e)) {
      wf_tcp_destroy(t);
      return wf_err(WEFT_ERR_SYSTEM, "epoll_ctl(ADD) for rank %d: %s", p, strerror(errno));
    }
  }
  *out = t;
  return WEFT_OK;
oom:
  wf_tcp_destroy(t);
  return wf_err(WEFT_ERR_NO_MEMORY, "out of memory creating the TCP transport");
}

void wf_tcp_destroy(wf_tcp *t) {
  if (!t) return;
  for (int p = 0; p < t->size; p++) {
    conn_close(&t->conns[p]);
    free_queues(&t->conns[p], 0);
    free(t->conns[p].rbuf);
  }
  free(t->conns);
  free(t);
}

wf_transport *wf_tcp_transport(wf_tcp *t) { return &t->base; }
int wf_tcp_alive(const wf_tcp *t, int peer) { return t->conns[peer].fd >= 0; }
int64_t wf_tcp_last_rx(const wf_tcp *t, int peer) { return t->conns[peer].last_rx; }
int64_t wf_tcp_last_tx(const wf_tcp *t, int peer) { return t->conns[peer].last_tx; }
int wf_tcp_paused(const wf_tcp *t, int peer) { return t->conns[peer].paused; }
void wf_tcp_close(wf_tcp *t, int peer) { conn_close(&t->conns[peer]); }

size_t wf_tcp_queued(const wf_tcp *t) {
  size_t q = 0;
  for (int p = 0; p < t->size; p++) q += t->conns[p].queued;
  return q;
}

/* ------------------------------------------------------------------ send */

/* Picks the next frame to write: control frames go first, at data-chunk
 * boundaries, so a bulk transfer never delays heartbeats or responses by
 * more than one chunk. */
static int next_frame(wf_tcp *t, conn *c) {
  if (c->cur) return 1;
  if (c->ctrl_head) {
    c->cur = c->ctrl_head;
    c->ctrl_head = c->cur->next;
    if (!c->ctrl_head) c->ctrl_tail = NULL;
    return 1;
  }
  if (c->data_head) {
    tx_item *d = c->data_head;
    c->cur = d;
    size_t n = d->len - d->off;
    if (n > t->chunk) n = t->chunk;
    c->chunk_end = d->off + n;
    wf_frame_hdr h = {.type = WF_MSG_DATA, .src = (uint32_t)t->rank, .length = WF_DATA_SUBHDR_SIZE + n};
    wf_frame_hdr_encode(c->dhdr, &h);
    wf_data_hdr dh = {.seq = d->seq, .index = d->idx};
    wf_data_hdr_encode(c->dhdr + WF_FRAME_HDR_SIZE, &dh);
    c->dhdr_off = 0;
    return 1;
  }
  return 0;
}

static void conn_read(wf_tcp *t, conn *c);

static void conn_flush(wf_tcp *t, conn *c) {
  while (c->fd >= 0 && next_frame(t, c)) {
    tx_item *it = c->cur;
    struct iovec iov[2];
    int n = 0;
    if (!it->is_data) {
      iov[n].iov_base = it->frame + it->off;
      iov[n++].iov_len = it->frame_len - it->off;
    } else {
      if (c->dhdr_off < DATA_HDR_LEN) {
        iov[n].iov_base = c->dhdr + c->dhdr_off;
        iov[n++].iov_len = DATA_HDR_LEN - c->dhdr_off;
      }
      if (c->chunk_end > it->off) {
        iov[n].iov_base = (void *)(it->buf + it->off);
        iov[n++].iov_len = c->chunk_end - it->off;
      }
    }
    /* sendmsg with MSG_NOSIGNAL: a peer that died must not SIGPIPE us */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      int e = errno;
      /* Read what the peer sent before it went away (its reason for
       * failing, its BYE): the first cause must win over our EPIPE. */
      conn_read(t, c);
      conn_fail(t, c, WEFT_ERR_PEER_LOST, "lost connection to rank %d: write: %s", c->peer, strerror(e));
      return;
    }
    c->last_tx = wf_now_ns();
    size_t wr = (size_t)w;
    c->queued -= wr <= c->queued ? wr : c->queued;
    if (!it->is_data) {
      it->off += wr;
      if (it->off == it->frame_len) {
        free(it->frame);
        free(it);
        c->cur = NULL;
      }
      continue;
    }
    size_t h = DATA_HDR_LEN - c->dhdr_off;
    if (wr < h) {
      c->dhdr_off += wr;
      continue;
    }
    c->dhdr_off = DATA_HDR_LEN;
    it->off += wr - h;
    if (it->off < c->chunk_end) continue;
    c->cur = NULL; /* chunk done: a control frame may go next */
    if (it->off == it->len) {
      c->data_head = it->next;
      if (!c->data_head) c->data_tail = NULL;
      (*it->pending)--;
      free(it);
    }
  }
  conn_update_events(c);
}

weft_status wf_tcp_send_ctrl(wf_tcp *t, int peer, uint8_t *frame, size_t len) {
  conn *c = &t->conns[peer];
  if (c->fd < 0) {
    free(frame);
    return wf_err(WEFT_ERR_PEER_LOST, "no connection to rank %d", peer);
  }
  tx_item *it = calloc(1, sizeof *it);
  if (!it) {
    free(frame);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory queueing a message to rank %d", peer);
  }
  it->frame = frame;
  it->frame_len = len;
  if (c->ctrl_tail) c->ctrl_tail->next = it;
  else c->ctrl_head = it;
  c->ctrl_tail = it;
  c->queued += len;
  conn_flush(t, c);
  return WEFT_OK;
}

static weft_status tcp_send(wf_transport *tr, int peer, uint64_t seq, uint32_t idx, const void *buf, size_t len,
                            int *pending) {
  wf_tcp *t = (wf_tcp *)tr;
  conn *c = &t->conns[peer];
  if (c->fd < 0) return wf_err(WEFT_ERR_PEER_LOST, "no connection to rank %d", peer);
  if (len == 0) return WEFT_OK;
  tx_item *it = calloc(1, sizeof *it);
  if (!it) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory queueing data to rank %d", peer);
  it->is_data = 1;
  it->seq = seq;
  it->idx = idx;
  it->buf = buf;
  it->len = len;
  it->pending = pending;
  (*pending)++;
  if (c->data_tail) c->data_tail->next = it;
  else c->data_head = it;
  c->data_tail = it;
  c->queued += len + DATA_HDR_LEN * (len / t->chunk + 1);
  conn_flush(t, c);
  return WEFT_OK;
}

/* ------------------------------------------------------------------ receive */

static void conn_read(wf_tcp *t, conn *c);

static weft_status tcp_recv(wf_transport *tr, int peer, uint64_t seq, uint32_t idx, void *buf, size_t len,
                            int *pending) {
  wf_tcp *t = (wf_tcp *)tr;
  conn *c = &t->conns[peer];
  if (len == 0) return WEFT_OK;
  if (c->fd < 0) { /* closed: only data that already arrived can satisfy it */
    size_t have = 0;
    for (rx_unexp *u = c->unexp_head; u; u = u->next)
      if (u->seq == seq && u->idx == idx) have += u->len;
    if (have < len) return wf_err(WEFT_ERR_PEER_LOST, "the connection to rank %d is closed", peer);
  }
  rx_post *p = calloc(1, sizeof *p);
  if (!p) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory posting a receive from rank %d", peer);
  p->seq = seq;
  p->idx = idx;
  p->buf = buf;
  p->len = len;
  p->pending = pending;
  (*pending)++;
  /* Data that came early: consume the buffered chunks of this message, in
   * order. A chunk still arriving (c->dunexp) is handed over by data_end. */
  for (rx_unexp *u = c->unexp_head, *n; u && p->got < p->len; u = n) {
    n = u->next;
    if (u->seq != seq || u->idx != idx) continue;
    if (u == c->dunexp) break;
    if (u->len > p->len - p->got) {
      free(p);
      (*pending)--;
      conn_fail(t, c, WEFT_ERR_PROTOCOL, "rank %d sent more data than expected for collective %llu message %u",
                peer, (unsigned long long)seq, idx);
      return WEFT_OK; /* on_error has failed the world */
    }
    memcpy(p->buf + p->got, u->data, u->len);
    p->got += u->len;
    unexp_remove(c, u);
  }
  if (p->got == p->len) {
    (*pending)--;
    free(p);
    return WEFT_OK;
  }
  if (c->post_tail) c->post_tail->next = p;
  else c->post_head = p;
  c->post_tail = p;
  if (c->paused && c->dh.seq == seq && c->dh.index == idx) {
    c->paused = 0;
    conn_update_events(c);
    conn_read(t, c);
  }
  return WEFT_OK;
}

static void tcp_cancel_data(wf_transport *tr) {
  wf_tcp *t = (wf_tcp *)tr;
  for (int p = 0; p < t->size; p++) {
    conn *c = &t->conns[p];
    /* Keep every stream whole, so that peers learn the real cause of the
     * failure instead of a dropped connection: a data frame half written is
     * finished from a private copy of its rest (at most one chunk: the
     * caller's buffer may be freed now), and the rest of a data frame half
     * read is discarded as it arrives. */
    if (c->fd >= 0 && c->cur && c->cur->is_data) {
      tx_item *d = c->cur;
      size_t hdr_left = DATA_HDR_LEN - c->dhdr_off, pay_left = c->chunk_end - d->off;
      tx_item *rest = calloc(1, sizeof *rest);
      uint8_t *f = malloc(hdr_left + pay_left + 1);
      if (!rest || !f) {
        free(rest);
        free(f);
        conn_close(c); /* no memory to finish it: the stream cannot go on */
      } else {
        memcpy(f, c->dhdr + c->dhdr_off, hdr_left);
        memcpy(f + hdr_left, d->buf + d->off, pay_left);
        rest->frame = f;
        rest->frame_len = hdr_left + pay_left;
        c->cur = rest; /* a control-like item now; the data item goes with the data list */
      }
    }
    if (c->rstate == RX_DATA) {
      c->ddst = NULL; /* discard mode: see conn_read */
      c->dpost = NULL;
      c->dunexp = NULL; /* freed with the early data below */
    }
    free_queues(c, 1);
    c->lost_tx = 0;
    c->paused = 0; /* what waited for a receive is now just early data */
    c->queued = c->cur ? c->cur->frame_len - c->cur->off : 0;
    for (tx_item *i = c->ctrl_head; i; i = i->next) c->queued += i->frame_len;
    conn_update_events(c);
    if (c->fd >= 0) conn_flush(t, c);
  }
}

static rx_post *find_post(conn *c, uint64_t seq, uint32_t idx) {
  for (rx_post *p = c->post_head; p; p = p->next)
    if (p->seq == seq && p->idx == idx) return p;
  return NULL;
}

static void post_done(conn *c, rx_post *p) {
  rx_post **pp = &c->post_head, *prev = NULL;
  while (*pp != p) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  *pp = p->next;
  if (c->post_tail == p) c->post_tail = prev;
  (*p->pending)--;
  free(p);
}

/* Decides where the payload of the DATA frame just parsed goes. Returns 0 to
 * go on, 1 to pause (backpressure), -1 after a failure. */
static int data_begin(wf_tcp *t, conn *c) {
  size_t n = c->hdr.length - WF_DATA_SUBHDR_SIZE;
  c->dleft = n;
  c->dpost = NULL;
  c->dunexp = NULL;
  rx_post *p = find_post(c, c->dh.seq, c->dh.index);
  /* Bytes of this message already buffered must be consumed first. */
  int older = 0;
  for (rx_unexp *u = c->unexp_head; u; u = u->next)
    if (u->seq == c->dh.seq && u->idx == c->dh.index) older = 1;
  if (p && !older) {
    if (n > p->len - p->got) {
      conn_fail(t, c, WEFT_ERR_PROTOCOL,
                "rank %d sent %zu bytes for collective %llu message %u, but only %zu were expected", c->peer, n,
                (unsigned long long)c->dh.seq, c->dh.index, p->len - p->got);
      return -1;
    }
    c->dpost = p;
    c->ddst = p->buf + p->got;
    return 0;
  }
  if (c->unexp_bytes + n > UNEXP_CAP && c->unexp_bytes > 0) return 1;
  rx_unexp *u = calloc(1, sizeof *u);
  uint8_t *d = n ? malloc(n) : NULL;
  if (!u || (n && !d)) {
    free(u);
    free(d);
    conn_fail(t, c, WEFT_ERR_NO_MEMORY, "out of memory buffering %zu bytes from rank %d", n, c->peer);
    return -1;
  }
  u->seq = c->dh.seq;
  u->idx = c->dh.index;
  u->data = d;
  u->len = n;
  if (c->unexp_tail) c->unexp_tail->next = u;
  else c->unexp_head = u;
  c->unexp_tail = u;
  c->unexp_bytes += n;
  c->dunexp = u;
  c->ddst = d;
  return 0;
}

static void data_end(wf_tcp *t, conn *c) {
  if (c->dpost) {
    c->dpost->got += c->hdr.length - WF_DATA_SUBHDR_SIZE;
    if (c->dpost->got == c->dpost->len) post_done(c, c->dpost);
  } else if (c->dunexp) {
    /* A receive posted while this chunk arrived takes it now, if no older
     * chunk of the same message is still buffered. */
    rx_unexp *u = c->dunexp;
    c->dunexp = NULL;
    rx_post *p = find_post(c, u->seq, u->idx);
    rx_unexp *first = c->unexp_head;
    while (first && (first->seq != u->seq || first->idx != u->idx)) first = first->next;
    if (p && first == u) {
      if (u->len > p->len - p->got) {
        conn_fail(t, c, WEFT_ERR_PROTOCOL, "rank %d sent more data than expected for collective %llu message %u",
                  c->peer, (unsigned long long)u->seq, u->idx);
        return;
      }
      memcpy(p->buf + p->got, u->data, u->len);
      p->got += u->len;
      unexp_remove(c, u);
      if (p->got == p->len) post_done(c, p);
    }
  }
  c->dpost = NULL;
  c->rstate = RX_HDR;
}

/* Parses what is in rbuf and reads more until the socket would block. */
static void conn_read(wf_tcp *t, conn *c) {
  char err[256];
  size_t budget = 64u << 20; /* be fair to other peers */
  while (c->fd >= 0 && !c->paused) {
    size_t avail = c->rlen - c->rpos;
    uint8_t *rp = c->rbuf + c->rpos;
    if (c->rstate == RX_HDR && avail >= WF_FRAME_HDR_SIZE) {
      if (wf_frame_hdr_decode(rp, t->max_ctrl, t->chunk + WF_DATA_SUBHDR_SIZE, &c->hdr, err, sizeof err)) {
        conn_fail(t, c, WEFT_ERR_PROTOCOL, "bad frame from rank %d: %s", c->peer, err);
        return;
      }
      if (c->hdr.src != (uint32_t)c->peer) {
        conn_fail(t, c, WEFT_ERR_PROTOCOL, "frame on rank %d's connection claims to come from rank %u", c->peer,
                  c->hdr.src);
        return;
      }
      c->rpos += WF_FRAME_HDR_SIZE;
      c->rstate = c->hdr.type == WF_MSG_DATA ? RX_SUB : RX_CTRL;
      c->cgot = 0;
      continue;
    }
    if (c->rstate == RX_SUB && avail >= WF_DATA_SUBHDR_SIZE) {
      if (wf_data_hdr_decode(rp, &c->dh, err, sizeof err)) {
        conn_fail(t, c, WEFT_ERR_PROTOCOL, "bad data frame from rank %d: %s", c->peer, err);
        return;
      }
      int r = data_begin(t, c);
      if (r < 0) return;
      if (r > 0) {
        c->paused = 1;
        conn_update_events(c);
        return;
      }
      c->rpos += WF_DATA_SUBHDR_SIZE;
      c->rstate = RX_DATA;
      if (c->dleft == 0) data_end(t, c);
      continue;
    }
    if (c->rstate == RX_DATA && avail > 0) {
      size_t k = avail < c->dleft ? avail : c->dleft;
      if (c->ddst) memcpy(c->ddst, rp, k); /* NULL: discarding a cancelled frame */
      if (c->ddst) c->ddst += k;
      c->dleft -= k;
      c->rpos += k;
      if (c->dleft == 0) data_end(t, c);
      continue;
    }
    if (c->rstate == RX_CTRL) {
      size_t need = c->hdr.length;
      if (need <= RBUF_SIZE && avail >= need) {
        c->rpos += need;
        c->rstate = RX_HDR;
        t->cb.on_ctrl(t->cb.ctx, c->peer, &c->hdr, rp, need);
        continue;
      }
      if (need > RBUF_SIZE) {
        if (!c->cbuf) {
          c->cbuf = malloc(need);
          if (!c->cbuf) {
            conn_fail(t, c, WEFT_ERR_NO_MEMORY, "out of memory for a %zu-byte message from rank %d", need, c->peer);
            return;
          }
        }
        size_t k = avail < need - c->cgot ? avail : need - c->cgot;
        memcpy(c->cbuf + c->cgot, rp, k);
        c->cgot += k;
        c->rpos += k;
        if (c->cgot == need) {
          uint8_t *b = c->cbuf;
          c->cbuf = NULL;
          c->rstate = RX_HDR;
          t->cb.on_ctrl(t->cb.ctx, c->peer, &c->hdr, b, need);
          free(b);
          continue;
        }
      }
    }
    /* Need more bytes. */
    if (budget == 0) return;
    if (c->rpos == c->rlen) c->rpos = c->rlen = 0;
    ssize_t r;
    if (c->rstate == RX_DATA && c->ddst && c->rpos == c->rlen && c->dleft >= DIRECT_READ_MIN) {
      r = recv(c->fd, c->ddst, c->dleft, 0);
      if (r > 0) {
        c->ddst += r;
        c->dleft -= (size_t)r;
        c->last_rx = wf_now_ns();
        budget = (size_t)r >= budget ? 0 : budget - (size_t)r;
        if (c->dleft == 0) data_end(t, c);
        continue;
      }
    } else if (c->rstate == RX_CTRL && c->cbuf && c->rpos == c->rlen) {
      r = recv(c->fd, c->cbuf + c->cgot, c->hdr.length - c->cgot, 0);
      if (r > 0) {
        c->cgot += (size_t)r;
        c->last_rx = wf_now_ns();
        continue;
      }
    } else {
      if (c->rpos > 0 && c->rlen == RBUF_SIZE) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
      }
      r = recv(c->fd, c->rbuf + c->rlen, RBUF_SIZE - c->rlen, 0);
      if (r > 0) {
        c->rlen += (size_t)r;
        c->last_rx = wf_now_ns();
        budget = (size_t)r >= budget ? 0 : budget - (size_t)r;
        continue;
      }
    }
    if (r == 0) {
      conn_fail(t, c, WEFT_ERR_PEER_LOST, "rank %d closed its connection", c->peer);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    conn_fail(t, c, WEFT_ERR_PEER_LOST, "lost connection to rank %d: %s", c->peer, strerror(errno));
    return;
  }
}

void wf_tcp_on_event(wf_tcp *t, int peer, uint32_t events) {
  if (peer < 0 || peer >= t->size) return;
  conn *c = &t->conns[peer];
  if (c->fd < 0) return;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) conn_read(t, c);
  if (c->fd >= 0 && (events & EPOLLOUT)) conn_flush(t, c);
}

static int tcp_incomplete(wf_transport *tr, int peer) {
  wf_tcp *t = (wf_tcp *)tr;
  const conn *c = &t->conns[peer];
  return c->post_head != NULL || c->data_head != NULL || c->lost_tx;
}

static const wf_transport_ops tcp_ops = {
    .incomplete = tcp_incomplete,
    .name = "tcp",
    .send = tcp_send,
    .recv = tcp_recv,
    .cancel_data = tcp_cancel_data,
};
