/* tcp.h - the TCP transport: one non-blocking, authenticated socket per
 * peer, driven by the engine's epoll loop. Carries framed control messages
 * (wire.h) and data messages; large data is sent straight from the caller's
 * buffer in WEFT_TCP_CHUNK_BYTES frames (no second copy), so control frames
 * (heartbeats, responses) interleave with bulk transfers. Received data goes
 * straight into the posted buffer; data that arrives before its receive is
 * posted is kept (up to a cap per peer, then reading from that peer pauses
 * until the receive is posted: TCP backpressure instead of unbounded memory). */
#ifndef WF_TCP_H
#define WF_TCP_H
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"
#include "wire/wire.h"

typedef struct wf_tcp wf_tcp;

typedef struct wf_tcp_callbacks {
  void *ctx;
  /* A complete control frame arrived from peer. payload is only valid
   * during the call. Must not call back into the transport's send/recv. */
  void (*on_ctrl)(void *ctx, int peer, const wf_frame_hdr *h, const uint8_t *payload, size_t len);
  /* The connection to peer failed (closed, reset, protocol error). st is
   * WEFT_ERR_PEER_LOST or WEFT_ERR_PROTOCOL; msg describes it. Called once
   * per peer; the socket is closed afterwards. */
  void (*on_error)(void *ctx, int peer, weft_status st, const char *msg);
  /* WEFT_TCP_CHUNK_BYTES and WEFT_MAX_MESSAGE_BYTES (agreed settings); 0:
   * the defaults. */
  int64_t chunk_bytes, max_message_bytes;
} wf_tcp_callbacks;

/* Takes ownership of fds (size entries, fds[rank] == -1) and registers them
 * with epfd (epoll data.u32 = peer rank). */
weft_status wf_tcp_create(int rank, int size, int *fds, int epfd, const wf_tcp_callbacks *cb, wf_tcp **out);
void wf_tcp_destroy(wf_tcp *t); /* closes every socket */
wf_transport *wf_tcp_transport(wf_tcp *t);

/* Handles epoll events for peer. */
void wf_tcp_on_event(wf_tcp *t, int peer, uint32_t events);
/* Queues a control frame (takes ownership of frame, a malloc'd buffer
 * holding header + payload). Fails if the peer's connection is gone. */
weft_status wf_tcp_send_ctrl(wf_tcp *t, int peer, uint8_t *frame, size_t len);
/* 1 if the connection to peer is up. */
int wf_tcp_alive(const wf_tcp *t, int peer);
/* Nanosecond timestamps of the last byte received from / sent to peer. */
int64_t wf_tcp_last_rx(const wf_tcp *t, int peer);
int64_t wf_tcp_last_tx(const wf_tcp *t, int peer);
/* 1 if reading from peer is paused for backpressure (its silence is ours). */
int wf_tcp_paused(const wf_tcp *t, int peer);
/* Bytes still queued for sending to any peer. */
size_t wf_tcp_queued(const wf_tcp *t);
/* Closes the connection to peer now (no callback). */
void wf_tcp_close(wf_tcp *t, int peer);

#endif
