/* fuzz_wire.c - libFuzzer target for every wire decoder (src/wire: frame.c,
 * bootmsg.c, ctrlmsg.c).
 *
 * (groupmsg.c, cachemsg.c, stepmsg.c too.)
 * One table row per message type (k_types below: decoder check, builder of
 * a valid frame, payload cap); a static assertion fails the build when
 * wire.h gains a type without a row, so a new message is fuzzed as soon as
 * it exists. The first input byte picks the mode (and, in its high bits,
 * the size of the error buffer the decoders get, so short buffers are
 * fuzzed too):
 *   0           a stream: a cap byte, then frames one after another, each
 *               header decoded and then its payload by the decoder of its
 *               type, as a connection reader does, until one is rejected
 *   1..T        raw payload bytes for the decoder of type 1..T
 *   T+1..2T     structured: the bytes drive the builder of a valid frame of
 *               that type (plus maybe one frame of another type); the
 *               stream must decode whole; then it is corrupted once
 *               (flipped byte, boundary value in a length/count field, cut
 *               short) and decoded again
 * Properties checked (a violation aborts, so libFuzzer saves the input):
 *  - whatever decodes re-encodes to the same bytes (header and payload);
 *  - an accepted header's length is within the caps given and the type's
 *    own limit; HEARTBEAT and BYE carry nothing;
 *  - a rejected payload leaves the output zeroed (nothing to free) and a
 *    NUL-terminated, non-empty message within the error buffer (a canary
 *    after it catches overruns the sanitizers cannot see);
 *  - a valid encoding always decodes.
 * Crashes, leaks, out-of-bounds reads and UB are the sanitizers' to report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "wire/wire.h"

#define FZ_BIG_CAP (1u << 20)
#define ERR_ROOM 300
#define CANARY 0xA5

/* ------------------------------------------------------------ checks */

static size_t g_errlen = 256; /* the error buffer size the decoders get */

static void err_reset(char *err) { memset(err, CANARY, ERR_ROOM); }

/* A rejection must leave a terminated, non-empty message inside errlen. */
static void check_err(const char *err, const char *what) {
  for (size_t i = g_errlen; i < ERR_ROOM; i++)
    if ((uint8_t)err[i] != CANARY) fz_fail("%s: the error message overran its %zu-byte buffer", what, g_errlen);
  if (g_errlen == 0) return;
  if (!memchr(err, 0, g_errlen)) fz_fail("%s: the error message is not NUL-terminated", what);
  if (g_errlen > 1 && err[0] == '\0') fz_fail("%s: rejected without a message", what);
}

static void check_zero(const void *m, size_t n, const char *what) {
  const uint8_t *p = m;
  for (size_t i = 0; i < n; i++)
    if (p[i]) fz_fail("%s: a rejected decode left the output non-zero at byte %zu", what, i);
}

/* Re-encoded frame b must carry exactly payload p[0..n). */
static void same_payload(wf_buf *b, const uint8_t *p, size_t n, const char *what) {
  if (b->oom) fz_fail("%s: out of memory re-encoding", what);
  if (b->len != WF_FRAME_HDR_SIZE + n || memcmp(b->data + WF_FRAME_HDR_SIZE, p, n) != 0)
    fz_fail("%s re-encodes differently", what);
  wf_buf_free(b);
}

/* ------------------------------------------------------------ decoders: 1 = accepted */

static int dec_hello(const uint8_t *p, size_t n, char *err) {
  wf_hello_msg m;
  wf_buf b = {0};
  if (wf_decode_hello(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "HELLO"), 0;
  if (wf_encode_hello(&b, 0, &m) != WEFT_OK) fz_fail("a decoded HELLO does not encode");
  same_payload(&b, p, n, "HELLO");
  return 1;
}

static int dec_peers(const uint8_t *p, size_t n, char *err) {
  wf_peers_msg m;
  wf_buf b = {0};
  if (wf_decode_peers(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "PEERS"), 0;
  if (wf_encode_peers(&b, 0, &m) != WEFT_OK) fz_fail("a decoded PEERS does not encode");
  wf_peers_msg_free(&m);
  same_payload(&b, p, n, "PEERS");
  return 1;
}

static int dec_requests(const uint8_t *p, size_t n, char *err) {
  wf_requests_msg m;
  wf_buf b = {0};
  if (wf_decode_requests(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "REQUESTS"), 0;
  if (wf_encode_requests(&b, 0, m.reqs, m.count) != WEFT_OK) fz_fail("a decoded REQUESTS does not encode");
  wf_requests_msg_free(&m);
  same_payload(&b, p, n, "REQUESTS");
  return 1;
}

static int dec_responses(const uint8_t *p, size_t n, char *err) {
  wf_responses_msg m;
  wf_buf b = {0};
  if (wf_decode_responses(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "RESPONSES"), 0;
  if (wf_encode_responses(&b, 0, m.resps, m.count) != WEFT_OK) fz_fail("a decoded RESPONSES does not encode");
  wf_responses_msg_free(&m);
  same_payload(&b, p, n, "RESPONSES");
  return 1;
}

static int dec_data(const uint8_t *p, size_t n, char *err) {
  wf_data_hdr d;
  uint8_t again[WF_DATA_SUBHDR_SIZE];
  if (n < WF_DATA_SUBHDR_SIZE) return 0; /* the frame header never lets this through */
  if (wf_data_hdr_decode(p, &d, err, g_errlen) != WEFT_OK) return check_zero(&d, sizeof d, "DATA"), 0;
  wf_data_hdr_encode(again, &d);
  if (memcmp(again, p, sizeof again) != 0) fz_fail("the DATA sub-header re-encodes differently");
  return 1;
}

/* ABORT and STALL share the payload (one string); the reason buffer is
 * sometimes short, which must truncate, never overrun. */
static int dec_text(const uint8_t *p, size_t n, char *err, wf_msg_type type) {
  char reason[WF_ERRMSG_MAX + 1 + 16];
  size_t rlen = n % 3 == 0 ? 7 : WF_ERRMSG_MAX + 1;
  memset(reason, CANARY, sizeof reason);
  wf_buf b = {0};
  const char *what = type == WF_MSG_ABORT ? "ABORT" : "STALL";
  weft_status st = wf_decode_abort(p, n, reason, rlen, err, g_errlen);
  for (size_t i = rlen; i < sizeof reason; i++)
    if ((uint8_t)reason[i] != CANARY) fz_fail("%s: the reason overran its %zu-byte buffer", what, rlen);
  if (!memchr(reason, 0, rlen)) fz_fail("%s: the reason is not NUL-terminated", what);
  if (st != WEFT_OK) {
    if (reason[0]) fz_fail("%s: a rejected decode left a reason", what);
    return 0;
  }
  if (rlen < WF_ERRMSG_MAX + 1) { /* truncated copy: a prefix of the payload's string */
    if (strncmp(reason, (const char *)p + 2, strlen(reason)) != 0) fz_fail("%s: truncated reason differs", what);
    return 1;
  }
  st = type == WF_MSG_ABORT ? wf_encode_abort(&b, 0, reason) : wf_encode_stall(&b, 0, reason);
  if (st != WEFT_OK) fz_fail("a decoded %s does not encode", what);
  same_payload(&b, p, n, what);
  return 1;
}
static int dec_abort(const uint8_t *p, size_t n, char *err) { return dec_text(p, n, err, WF_MSG_ABORT); }
static int dec_stall(const uint8_t *p, size_t n, char *err) { return dec_text(p, n, err, WF_MSG_STALL); }

/* CACHED and RESEND share the payload (a list of cache references). */
static int dec_refs(const uint8_t *p, size_t n, char *err, wf_msg_type type) {
  wf_cache_refs_msg m;
  wf_buf b = {0};
  const char *what = type == WF_MSG_CACHED ? "CACHED" : "RESEND";
  if (wf_decode_cache_refs(p, n, what, &m, err, g_errlen) != WEFT_OK) {
    check_zero(&m, sizeof m, what);
    if (g_errlen > 8 && strncmp(err, what, strlen(what) < g_errlen - 1 ? strlen(what) : g_errlen - 1) != 0)
      fz_fail("%s: the error does not name the message: %s", what, err);
    return 0;
  }
  if (wf_encode_cache_refs(&b, 0, type, m.refs, m.count) != WEFT_OK) fz_fail("a decoded %s does not encode", what);
  wf_cache_refs_msg_free(&m);
  same_payload(&b, p, n, what);
  return 1;
}
static int dec_cached(const uint8_t *p, size_t n, char *err) { return dec_refs(p, n, err, WF_MSG_CACHED); }
static int dec_resend(const uint8_t *p, size_t n, char *err) { return dec_refs(p, n, err, WF_MSG_RESEND); }

/* P2P_SEND: the inline bytes point into the payload. */
static int dec_p2p_send(const uint8_t *p, size_t n, char *err) {
  wf_p2p_send_msg m;
  wf_buf b = {0};
  if (wf_decode_p2p_send(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "P2P_SEND"), 0;
  if (m.data && (m.data < p || m.data > p + n)) fz_fail("P2P_SEND: data points outside the payload");
  if (wf_encode_p2p_send(&b, 0, &m) != WEFT_OK) fz_fail("a decoded P2P_SEND does not encode");
  same_payload(&b, p, n, "P2P_SEND");
  return 1;
}

static int dec_p2p_reply(const uint8_t *p, size_t n, char *err) {
  wf_p2p_reply_msg m;
  wf_buf b = {0};
  if (wf_decode_p2p_reply(p, n, &m, err, g_errlen) != WEFT_OK) return check_zero(&m, sizeof m, "P2P_REPLY"), 0;
  if (wf_encode_p2p_reply(&b, 0, &m) != WEFT_OK) fz_fail("a decoded P2P_REPLY does not encode");
  same_payload(&b, p, n, "P2P_REPLY");
  return 1;
}

/* GROUP_JOIN and GROUP_REPLY (groupmsg.c). */
static int dec_group(const uint8_t *p, size_t n, char *err, wf_msg_type type) {
  wf_group_msg m;
  wf_buf b = {0};
  int reply = type == WF_MSG_GROUP_REPLY;
  const char *what = reply ? "GROUP_REPLY" : "GROUP_JOIN";
  weft_status st =
      reply ? wf_decode_group_reply(p, n, &m, err, g_errlen) : wf_decode_group_join(p, n, &m, err, g_errlen);
  if (st != WEFT_OK) {
    check_zero(&m, sizeof m, what);
    if (g_errlen > 8 && strncmp(err, what, strlen(what) < g_errlen - 1 ? strlen(what) : g_errlen - 1) != 0)
      fz_fail("%s: the error does not name the message: %s", what, err);
    return 0;
  }
  st = reply ? wf_encode_group_reply(&b, 0, &m) : wf_encode_group_join(&b, 0, &m);
  if (st != WEFT_OK) fz_fail("a decoded %s does not encode", what);
  wf_group_msg_free(&m);
  same_payload(&b, p, n, what);
  return 1;
}
static int dec_group_join(const uint8_t *p, size_t n, char *err) { return dec_group(p, n, err, WF_MSG_GROUP_JOIN); }
static int dec_group_reply(const uint8_t *p, size_t n, char *err) { return dec_group(p, n, err, WF_MSG_GROUP_REPLY); }

/* CANCEL (cancelmsg.c). */
static int dec_cancel(const uint8_t *p, size_t n, char *err) {
  wf_cancel_msg m;
  wf_buf b = {0};
  if (wf_decode_cancel(p, n, &m, err, g_errlen) != WEFT_OK) {
    check_zero(&m, sizeof m, "CANCEL");
    if (g_errlen > 8 && strncmp(err, "CANCEL", 6) != 0) fz_fail("CANCEL: the error does not name the message: %s", err);
    return 0;
  }
  if (wf_encode_cancel(&b, 0, &m) != WEFT_OK) fz_fail("a decoded CANCEL does not encode");
  same_payload(&b, p, n, "CANCEL");
  return 1;
}

/* STEP_REQ and STEP_REPLY (stepmsg.c). */
static int dec_step(const uint8_t *p, size_t n, char *err, wf_msg_type type) {
  wf_step_msg m;
  wf_buf b = {0};
  int reply = type == WF_MSG_STEP_REPLY;
  const char *what = reply ? "STEP_REPLY" : "STEP_REQ";
  weft_status st = reply ? wf_decode_step_reply(p, n, &m, err, g_errlen) : wf_decode_step_req(p, n, &m, err, g_errlen);
  if (st != WEFT_OK) {
    check_zero(&m, sizeof m, what);
    if (g_errlen > 8 && strncmp(err, what, strlen(what) < g_errlen - 1 ? strlen(what) : g_errlen - 1) != 0)
      fz_fail("%s: the error does not name the message: %s", what, err);
    return 0;
  }
  st = reply ? wf_encode_step_reply(&b, 0, &m) : wf_encode_step_req(&b, 0, &m);
  if (st != WEFT_OK) fz_fail("a decoded %s does not encode", what);
  wf_step_msg_free(&m);
  same_payload(&b, p, n, what);
  return 1;
}
static int dec_step_req(const uint8_t *p, size_t n, char *err) { return dec_step(p, n, err, WF_MSG_STEP_REQ); }
static int dec_step_reply(const uint8_t *p, size_t n, char *err) { return dec_step(p, n, err, WF_MSG_STEP_REPLY); }
/* REMOTE_CALL and REMOTE_REPLY (remotemsg.c): tensors' data point into the payload. */
static int dec_remote(const uint8_t *p, size_t n, char *err, int call) {
  wf_remote_msg m;
  wf_buf b = {0};
  const char *what = call ? "REMOTE_CALL" : "REMOTE_REPLY";
  weft_status st = call ? wf_decode_remote_call(p, n, &m, err, g_errlen) : wf_decode_remote_reply(p, n, &m, err, g_errlen);
  if (st != WEFT_OK) {
    check_zero(&m, sizeof m, what);
    if (g_errlen > 12 && strncmp(err, what, strlen(what)) != 0) fz_fail("%s: the error does not name the message: %s", what, err);
    return 0;
  }
  for (uint32_t i = 0; i < m.n_in; i++)
    if (m.in[i].t.data && (m.in[i].t.data < p || m.in[i].t.data + m.in[i].t.nbytes > p + n))
      fz_fail("%s: data points outside the payload", what);
  if (m.tensor.data && (m.tensor.data < p || m.tensor.data + m.tensor.nbytes > p + n))
    fz_fail("%s: data points outside the payload", what);
  if ((call ? wf_encode_remote_call(&b, 0, &m) : wf_encode_remote_reply(&b, 0, &m)) != WEFT_OK)
    fz_fail("a decoded %s does not encode", what);
  same_payload(&b, p, n, what);
  wf_remote_msg_free(&m);
  return 1;
}
static int dec_remote_call(const uint8_t *p, size_t n, char *err) { return dec_remote(p, n, err, 1); }
static int dec_remote_reply(const uint8_t *p, size_t n, char *err) { return dec_remote(p, n, err, 0); }

/* HEARTBEAT, BYE: no decoder; only an empty payload is a valid one. */
static int dec_empty(const uint8_t *p, size_t n, char *err) {
  (void)p, (void)err;
  return n == 0;
}

/* ------------------------------------------------------------ builders: one valid frame */

static void build_hello(fz_in *in, wf_buf *b) {
  wf_hello_msg m;
  memset(&m, 0, sizeof m);
  m.size = 1 + (uint32_t)(fz_take(in, 4) % WF_MAX_RANKS);
  m.rank = (uint32_t)(fz_take(in, 4) % m.size);
  m.pid = (uint32_t)fz_take(in, 4);
  fz_take_name(in, m.host, WF_HOST_MAX);
  if (fz_take(in, 1) % 4) fz_take_name(in, m.boot_id, sizeof m.boot_id - 1);
  fz_take_name(in, m.listen_addr, WF_HOST_MAX);
  for (size_t i = 0; i < sizeof m.settings_digest; i++) m.settings_digest[i] = (uint8_t)fz_take(in, 1);
  if (fz_take(in, 1) % 2) fz_take_name(in, m.settings, WF_SETTINGS_TEXT_MAX);
  m.incarnation = fz_take(in, 8);
  m.device_kinds = (uint32_t)fz_take(in, 1) & WF_DEVICE_KINDS_MASK;
  if (wf_encode_hello(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid HELLO was rejected");
}

static void build_peers(fz_in *in, wf_buf *b) {
  wf_peer_info peers[5];
  wf_peers_msg m = {1 + (uint32_t)(fz_take(in, 1) % 5), peers};
  memset(peers, 0, sizeof peers);
  for (uint32_t i = 0; i < m.size; i++) {
    wf_peer_info *e = &peers[i];
    fz_take_name(in, e->host, 1 + fz_take(in, 1) % WF_HOST_MAX);
    fz_take_name(in, e->listen_addr, 1 + fz_take(in, 1) % WF_HOST_MAX);
    e->pid = (uint32_t)fz_take(in, 4);
    e->local_size = 1 + (int32_t)(fz_take(in, 1) % m.size);
    e->local_rank = (int32_t)(fz_take(in, 1) % (uint32_t)e->local_size);
    e->cross_size = 1 + (int32_t)(fz_take(in, 1) % m.size);
    e->cross_rank = (int32_t)(fz_take(in, 1) % (uint32_t)e->cross_size);
    e->incarnation = fz_take(in, 8);
    e->device_kinds = (uint32_t)fz_take(in, 1) & WF_DEVICE_KINDS_MASK;
  }
  if (wf_encode_peers(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid PEERS was rejected");
}

static void build_requests(fz_in *in, wf_buf *b) {
  wf_request_msg reqs[4];
  int64_t splits[4][8];
  uint32_t count = (uint32_t)(fz_take(in, 1) % 5);
  memset(reqs, 0, sizeof reqs);
  for (uint32_t i = 0; i < count; i++) {
    wf_request_msg *r = &reqs[i];
    r->group_id = (uint32_t)fz_take(in, 4);
    r->coll = (uint8_t)(fz_take(in, 1) % WF_COLL_COUNT_);
    r->dtype = (uint8_t)(fz_take(in, 1) % WEFT_DTYPE_COUNT_);
    r->reduce_op = (uint8_t)(fz_take(in, 1) % WEFT_OP_COUNT_);
    r->ndim = (uint8_t)(fz_take(in, 1) % (WEFT_MAX_DIMS + 1));
    r->root = r->coll == WF_COLL_BROADCAST ? (int32_t)(fz_take(in, 2)) : -1;
    r->device = (int32_t)(fz_take(in, 1) % 4) - 1;
    r->priority = (int32_t)(uint32_t)fz_take(in, 4);
    uint64_t bits = fz_take(in, 8);
    memcpy(&r->prescale, &bits, sizeof bits);
    bits = fz_take(in, 8);
    memcpy(&r->postscale, &bits, sizeof bits);
    for (unsigned d = 0; d < r->ndim; d++) r->shape[d] = (int64_t)(fz_take(in, 8) >> 1);
    if (r->coll == WF_COLL_ALLTOALL || r->coll == WF_COLL_PERMUTE) { /* permute: any entries >= 0 pass the wire */
      r->nsplits = 1 + (uint32_t)(fz_take(in, 1) % 8);
      for (uint32_t s = 0; s < r->nsplits; s++) splits[i][s] = (int64_t)(fz_take(in, 4));
      r->splits = splits[i];
    }
    fz_take_name(in, r->name, WF_NAME_MAX);
  }
  if (wf_encode_requests(b, (uint32_t)fz_take(in, 2), reqs, count) != WEFT_OK) fz_fail("a valid REQUESTS was rejected");
}

static void build_responses(fz_in *in, wf_buf *b) {
  wf_response_msg resps[4];
  char names[4][3][WF_NAME_MAX + 1];
  char *name_ptrs[4][3];
  int64_t sizes[4][16];
  char error[4][64];
  uint32_t count = (uint32_t)(fz_take(in, 1) % 5);
  memset(resps, 0, sizeof resps);
  for (uint32_t i = 0; i < count; i++) {
    wf_response_msg *r = &resps[i];
    r->seq = fz_take(in, 8);
    r->group_id = (uint32_t)fz_take(in, 4);
    r->type = (uint8_t)(fz_take(in, 1) % 2);
    r->coll = (uint8_t)(fz_take(in, 1) % WF_COLL_COUNT_);
    r->status = r->type == WF_RESP_ERROR ? -1 - (int32_t)(fz_take(in, 1) % 13) : 0;
    r->nnames = 1 + (uint32_t)(fz_take(in, 1) % 3);
    for (uint32_t k = 0; k < r->nnames; k++) {
      fz_take_name(in, names[i][k], 40);
      name_ptrs[i][k] = names[i][k];
    }
    r->names = name_ptrs[i];
    uint32_t k = (uint32_t)(fz_take(in, 1) % 5);
    r->nsizes = r->coll == WF_COLL_ALLTOALL ? k * k : k;
    for (uint32_t s = 0; s < r->nsizes; s++) sizes[i][s] = (int64_t)fz_take(in, 3);
    r->sizes = r->nsizes ? sizes[i] : NULL;
    if (r->type == WF_RESP_ERROR && fz_take(in, 1) % 2) {
      fz_take_name(in, error[i], sizeof error[i] - 1);
      r->error = error[i];
    }
  }
  if (wf_encode_responses(b, (uint32_t)fz_take(in, 2), resps, count) != WEFT_OK)
    fz_fail("a valid RESPONSES was rejected");
}

/* There is no whole-frame DATA encoder (the transport writes the header,
 * the sub-header and the user's bytes separately): the same pieces here. */
static void build_data(fz_in *in, wf_buf *b) {
  uint8_t frame[WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE + 64];
  size_t k = (size_t)(fz_take(in, 1) % 65);
  wf_frame_hdr h = {WF_MSG_DATA, 0, (uint32_t)fz_take(in, 2), WF_DATA_SUBHDR_SIZE + k};
  wf_data_hdr d = {fz_take(in, 8), (uint32_t)fz_take(in, 4)};
  wf_frame_hdr_encode(frame, &h);
  wf_data_hdr_encode(frame + WF_FRAME_HDR_SIZE, &d);
  memset(frame + WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE, 0, k);
  fz_take_bytes(in, frame + WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE, k);
  size_t n = WF_FRAME_HDR_SIZE + WF_DATA_SUBHDR_SIZE + k;
  if (b->oom || n > b->cap - b->len) {
    uint8_t *nd = b->oom ? NULL : realloc(b->data, b->len + n);
    if (!nd) fz_fail("out of memory");
    b->data = nd, b->cap = b->len + n;
  }
  memcpy(b->data + b->len, frame, n);
  b->len += n;
}

/* ABORT / STALL: sometimes longer than the limit (the encoder truncates). */
static void build_text(fz_in *in, wf_buf *b, wf_msg_type type) {
  static char text[WF_ERRMSG_MAX + 200];
  size_t len = fz_take(in, 1) % 8 == 0 ? WF_ERRMSG_MAX + 1 + fz_take(in, 1) % 100 : fz_take(in, 1) % 200;
  for (size_t i = 0; i < len; i++) text[i] = (char)(1 + fz_take(in, 1) % 255);
  text[len] = '\0';
  weft_status st = type == WF_MSG_ABORT ? wf_encode_abort(b, 1, text) : wf_encode_stall(b, 1, text);
  if (st != WEFT_OK) fz_fail("a valid ABORT/STALL was rejected");
}
static void build_abort(fz_in *in, wf_buf *b) { build_text(in, b, WF_MSG_ABORT); }
static void build_stall(fz_in *in, wf_buf *b) { build_text(in, b, WF_MSG_STALL); }
static void build_heartbeat(fz_in *in, wf_buf *b) {
  if (wf_encode_simple(b, (uint32_t)fz_take(in, 2), WF_MSG_HEARTBEAT) != WEFT_OK) fz_fail("HEARTBEAT rejected");
}
static void build_bye(fz_in *in, wf_buf *b) {
  if (wf_encode_simple(b, (uint32_t)fz_take(in, 2), WF_MSG_BYE) != WEFT_OK) fz_fail("BYE rejected");
}

static void build_refs(fz_in *in, wf_buf *b, wf_msg_type type) {
  wf_cache_ref refs[6];
  uint32_t count = 1 + (uint32_t)(fz_take(in, 1) % 6);
  for (uint32_t i = 0; i < count; i++) {
    refs[i].group_id = (uint32_t)fz_take(in, 4);
    refs[i].id = (uint32_t)(fz_take(in, 4) % WF_CACHE_MAX_IDS);
    refs[i].epoch = 1 + fz_take(in, 8) % UINT64_MAX;
  }
  if (wf_encode_cache_refs(b, (uint32_t)fz_take(in, 2), type, refs, count) != WEFT_OK)
    fz_fail("a valid CACHED/RESEND was rejected");
}
static void build_cached(fz_in *in, wf_buf *b) { build_refs(in, b, WF_MSG_CACHED); }

/* A valid GROUP_JOIN or GROUP_REPLY: keyed or listed, OK or an error. */
static void build_group(fz_in *in, wf_buf *b, wf_msg_type type) {
  static const int32_t devices[] = {WEFT_DEVICE_CPU, WEFT_DEVICE_KIND_CUDA, WEFT_DEVICE_KIND_SIM};
  uint32_t ranks[8];
  static char error[64];
  int reply = type == WF_MSG_GROUP_REPLY;
  wf_group_msg m = {.kind = (uint8_t)(fz_take(in, 1) % 2), .size = 1 + (int32_t)(fz_take(in, 1) % 8)};
  int keyed = m.kind == WF_GROUP_KEYED;
  m.key = keyed ? (int32_t)fz_take(in, 4) : 0;
  m.device = keyed ? devices[fz_take(in, 1) % 3] : WEFT_DEVICE_CPU;
  if (reply && fz_take(in, 1) % 2) {
    m.status = -1 - (int32_t)(fz_take(in, 1) % 14);
    fz_take_name(in, error, sizeof error - 1);
    m.error = error;
  }
  if (!keyed || (reply && m.status == 0)) {
    uint32_t at = (uint32_t)fz_take(in, 2);
    for (int32_t i = 0; i < m.size; i++) ranks[i] = (at += 1 + (uint32_t)(fz_take(in, 1) % 3)) % WF_MAX_RANKS;
    for (int32_t i = 1; i < m.size; i++) /* keep them ascending after the wrap */
      if (ranks[i] <= ranks[i - 1]) ranks[i] = ranks[i - 1] + 1;
    if (ranks[m.size - 1] >= WF_MAX_RANKS)
      for (int32_t i = 0; i < m.size; i++) ranks[i] = (uint32_t)i;
    m.nranks = (uint32_t)m.size;
    m.ranks = ranks;
  }
  if (reply && keyed && m.status == 0) m.id = 1 + (uint32_t)(fz_take(in, 4) % 0xffffffu);
  weft_status st = reply ? wf_encode_group_reply(b, (uint32_t)fz_take(in, 2), &m)
                         : wf_encode_group_join(b, (uint32_t)fz_take(in, 2), &m);
  if (st != WEFT_OK) fz_fail("a valid GROUP_%s was rejected", reply ? "REPLY" : "JOIN");
}
static void build_group_join(fz_in *in, wf_buf *b) { build_group(in, b, WF_MSG_GROUP_JOIN); }
static void build_group_reply(fz_in *in, wf_buf *b) { build_group(in, b, WF_MSG_GROUP_REPLY); }
static void build_cancel(fz_in *in, wf_buf *b) {
  wf_cancel_msg m = {.group_id = (uint32_t)fz_take(in, 4)};
  fz_take_name(in, m.name, WF_NAME_MAX);
  if (fz_take(in, 1) % 2) {
    m.reason = WF_CANCEL_TIMEOUT;
    m.seconds = 0.001 * (double)(1 + fz_take(in, 4));
  }
  if (wf_encode_cancel(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid CANCEL was rejected");
}
static void build_resend(fz_in *in, wf_buf *b) { build_refs(in, b, WF_MSG_RESEND); }
/* A valid STEP_REQ, or STEP_REPLY (OK with an id, or an error). */
static void build_step(fz_in *in, wf_buf *b, wf_msg_type type) {
  static char error[64];
  wf_step_msg m = {.group_id = (uint32_t)fz_take(in, 4), .graph_key = (int64_t)fz_take(in, 8)};
  if (type == WF_MSG_STEP_REPLY) {
    if (fz_take(in, 1) % 2) {
      m.status = -1 - (int32_t)(fz_take(in, 1) % 15);
      fz_take_name(in, error, sizeof error - 1);
      m.error = error;
    } else {
      m.step_id = (int64_t)(fz_take(in, 8) & WF_STEP_ID_MASK);
    }
  }
  weft_status st = type == WF_MSG_STEP_REPLY ? wf_encode_step_reply(b, (uint32_t)fz_take(in, 2), &m)
                                             : wf_encode_step_req(b, (uint32_t)fz_take(in, 2), &m);
  if (st != WEFT_OK) fz_fail("a valid %s was rejected", type == WF_MSG_STEP_REPLY ? "STEP_REPLY" : "STEP_REQ");
}
static void build_step_req(fz_in *in, wf_buf *b) { build_step(in, b, WF_MSG_STEP_REQ); }
static void build_step_reply(fz_in *in, wf_buf *b) { build_step(in, b, WF_MSG_STEP_REPLY); }

/* A small tensor: with data (from the input) or metadata only. */
static void take_remote_tensor(fz_in *in, wf_remote_tensor *t, int with_data, uint8_t *room, size_t room_len) {
  memset(t, 0, sizeof *t);
  t->dtype = (uint8_t)(fz_take(in, 1) % WEFT_DTYPE_COUNT_);
  t->ndim = (uint8_t)(fz_take(in, 1) % 4);
  t->device = (int32_t)(fz_take(in, 1) % 3) - 1;
  size_t es = weft_dtype_size((weft_dtype)t->dtype), elems = 1;
  for (int d = 0; d < t->ndim; d++) {
    t->shape[d] = (int64_t)(fz_take(in, 1) % 5);
    elems *= (size_t)t->shape[d];
  }
  if (!with_data) return;
  if (elems * es > room_len) { /* keep it small: a zero dimension */
    t->shape[0] = 0;
    elems = 0;
  }
  t->nbytes = elems * es;
  fz_take_bytes(in, room, (size_t)t->nbytes);
  t->data = t->nbytes ? room : NULL;
}

static void build_remote_call(fz_in *in, wf_buf *b) {
  static uint8_t room[4][256];
  wf_remote_arg args[4];
  wf_remote_oid outs[4];
  wf_remote_msg m = {.call_id = 1 + fz_take(in, 8) % UINT64_MAX, .op = (uint8_t)(1 + fz_take(in, 1) % (WF_ROP_COUNT_ - 1)),
                     .ctx = fz_take(in, 8), .timeout = (double)fz_take(in, 2) / 8, .idle = (double)fz_take(in, 2) / 8,
                     .device = (int32_t)(fz_take(in, 1) % 3) - 1};
  if (m.op == WF_ROP_EXECUTE) fz_take_name(in, m.name, WF_NAME_MAX);
  m.n_in = (uint32_t)(fz_take(in, 1) % 5);
  m.n_out = (uint32_t)(fz_take(in, 1) % 5);
  for (uint32_t i = 0; i < m.n_in; i++) {
    memset(&args[i], 0, sizeof args[i]);
    args[i].is_inline = (uint8_t)(fz_take(in, 1) % 3); /* an id, a tensor, a bulk tensor (bytes apart) */
    if (args[i].is_inline) take_remote_tensor(in, &args[i].t, 1, room[i], sizeof room[i]);
    else args[i].id = (wf_remote_oid){(int32_t)(fz_take(in, 2)), 1 + fz_take(in, 8) % UINT64_MAX};
  }
  for (uint32_t i = 0; i < m.n_out; i++) outs[i] = (wf_remote_oid){(int32_t)(fz_take(in, 2)), 1 + fz_take(in, 8) % UINT64_MAX};
  if (m.op == WF_ROP_EXECUTE) m.n_meta = (uint32_t)(fz_take(in, 1) % (m.n_out + 1));
  m.in = args;
  m.out = outs;
  if (wf_encode_remote_call(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid REMOTE_CALL was rejected");
}

static void build_remote_reply(fz_in *in, wf_buf *b) {
  static uint8_t room[256];
  wf_remote_tensor metas[4];
  char error[64];
  wf_remote_msg m = {.call_id = 1 + fz_take(in, 8) % UINT64_MAX, .op = (uint8_t)(1 + fz_take(in, 1) % (WF_ROP_COUNT_ - 1)),
                     .ctx = fz_take(in, 8), .status = -(int32_t)(fz_take(in, 1) % 16)};
  if (m.status < 0) {
    fz_take_name(in, error, sizeof error - 1);
    m.error = error;
  }
  m.n_metas = (uint32_t)(fz_take(in, 1) % 5);
  for (uint32_t i = 0; i < m.n_metas; i++) take_remote_tensor(in, &metas[i], 0, NULL, 0);
  m.metas = metas;
  m.has_tensor = (uint8_t)(fz_take(in, 1) % 3); /* none, a tensor, a bulk tensor (bytes apart) */
  if (m.has_tensor) take_remote_tensor(in, &m.tensor, 1, room, sizeof room);
  if (wf_encode_remote_reply(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid REMOTE_REPLY was rejected");
}

static void build_p2p_send(fz_in *in, wf_buf *b) {
  static uint8_t data[256];
  wf_p2p_send_msg m = {.msg_id = 1 + fz_take(in, 8) % UINT64_MAX,
                       .incarnation = 1 + fz_take(in, 8) % UINT64_MAX,
                       .group_id = (uint32_t)fz_take(in, 4),
                       .key = fz_take(in, 8),
                       .dtype = (uint8_t)(fz_take(in, 1) % WEFT_DTYPE_COUNT_),
                       .eager = (uint8_t)(fz_take(in, 1) & 1)};
  size_t es = weft_dtype_size((weft_dtype)m.dtype);
  if (m.eager) {
    m.count = fz_take(in, 1) % (sizeof data / es + 1);
    fz_take_bytes(in, data, (size_t)m.count * es);
    m.data = data;
  } else {
    m.count = fz_take(in, 8) % ((UINT64_MAX >> 2) / es);
  }
  if (wf_encode_p2p_send(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid P2P_SEND was rejected");
}

static void build_p2p_reply(fz_in *in, wf_buf *b) {
  wf_p2p_reply_msg m = {.msg_id = 1 + fz_take(in, 8) % UINT64_MAX,
                        .status = (uint8_t)(fz_take(in, 1) % 2),
                        .dtype = (uint8_t)(fz_take(in, 1) % WEFT_DTYPE_COUNT_)};
  m.count = fz_take(in, 8) % ((UINT64_MAX >> 2) / weft_dtype_size((weft_dtype)m.dtype));
  if (wf_encode_p2p_reply(b, (uint32_t)fz_take(in, 2), &m) != WEFT_OK) fz_fail("a valid P2P_REPLY was rejected");
}

/* ------------------------------------------------------------ the table */

typedef struct fz_type {
  uint8_t type;
  const char *name;
  int (*decode)(const uint8_t *p, size_t n, char *err); /* 1: accepted (and round-trip checked) */
  void (*build)(fz_in *in, wf_buf *b);                  /* appends one valid frame */
  uint64_t max_len;                                     /* the type's own payload limit */
} fz_type;

/* In wf_msg_type order (reserved numbers have no row). A new message type: add its row here. */
static const fz_type k_types[] = {
    {WF_MSG_HELLO, "hello", dec_hello, build_hello,
     12 + 2 + WF_HOST_MAX + 2 + 63 + 2 + WF_HOST_MAX + 32 + 2 + WF_SETTINGS_TEXT_MAX + 8 + 4},
    {WF_MSG_PEERS, "peers", dec_peers, build_peers, UINT64_MAX},
    {WF_MSG_REQUESTS, "requests", dec_requests, build_requests, UINT64_MAX},
    {WF_MSG_RESPONSES, "responses", dec_responses, build_responses, UINT64_MAX},
    {WF_MSG_DATA, "data", dec_data, build_data, UINT64_MAX},
    {WF_MSG_HEARTBEAT, "heartbeat", dec_empty, build_heartbeat, 0},
    {WF_MSG_ABORT, "abort", dec_abort, build_abort, 2 + WF_ERRMSG_MAX},
    {WF_MSG_BYE, "bye", dec_empty, build_bye, 0},
    {WF_MSG_STALL, "stall", dec_stall, build_stall, 2 + WF_ERRMSG_MAX},
    {WF_MSG_CACHED, "cached", dec_cached, build_cached, UINT64_MAX},
    {WF_MSG_RESEND, "resend", dec_resend, build_resend, UINT64_MAX},
    {WF_MSG_P2P_SEND, "p2p_send", dec_p2p_send, build_p2p_send, 40 + WF_P2P_EAGER_MAX},
    {WF_MSG_P2P_REPLY, "p2p_reply", dec_p2p_reply, build_p2p_reply, 20},
    {WF_MSG_GROUP_JOIN, "group_join", dec_group_join, build_group_join, UINT64_MAX},
    {WF_MSG_GROUP_REPLY, "group_reply", dec_group_reply, build_group_reply, UINT64_MAX},
    {WF_MSG_CANCEL, "cancel", dec_cancel, build_cancel, 4 + 2 + WF_NAME_MAX + 1 + 8},
    {WF_MSG_STEP_REQ, "step_req", dec_step_req, build_step_req, 4 + 8},
    {WF_MSG_STEP_REPLY, "step_reply", dec_step_reply, build_step_reply, 4 + 8 + 4 + 8 + 2 + WF_ERRMSG_MAX},
    {WF_MSG_REMOTE_CALL, "remote_call", dec_remote_call, build_remote_call, UINT64_MAX},
    {WF_MSG_REMOTE_REPLY, "remote_reply", dec_remote_reply, build_remote_reply, UINT64_MAX},
};
#define NTYPES ((int)(sizeof k_types / sizeof k_types[0]))
_Static_assert(sizeof k_types / sizeof k_types[0] == WF_MSG_TYPE_MAX_ - 1 - WF_MSG_RESERVED_,
               "wire.h has a message type without a row in fuzz_wire.c's k_types");

/* The row of a message type, or NULL (a reserved number). Rows are in type
 * order; a mode picks a row by index. */
static const fz_type *type_row(unsigned type) {
  for (int i = 0; i < NTYPES; i++)
    if (k_types[i].type == (int)type) return &k_types[i];
  return NULL;
}

/* ------------------------------------------------------------ streams */

/* Decodes frames from p[0..n) until the bytes end or one is rejected;
 * returns the number of frames accepted. */
static int decode_stream(const uint8_t *p, size_t n, uint64_t max_ctrl, uint64_t max_data) {
  char err[ERR_ROOM];
  int frames = 0;
  while (n >= WF_FRAME_HDR_SIZE) {
    wf_frame_hdr h;
    err_reset(err);
    if (wf_frame_hdr_decode(p, max_ctrl, max_data, &h, err, g_errlen) != WEFT_OK) {
      check_err(err, "frame header");
      check_zero(&h, sizeof h, "frame header");
      break;
    }
    const fz_type *t = type_row(h.type);
    if (!t) fz_fail("frame header accepted unknown type %u", h.type);
    uint64_t cap = h.type == WF_MSG_DATA ? max_data : max_ctrl;
    if (h.length > cap || h.length > t->max_len)
      fz_fail("%s header accepted with length %llu over its cap", t->name, (unsigned long long)h.length);
    uint8_t again[WF_FRAME_HDR_SIZE];
    wf_frame_hdr_encode(again, &h);
    if (memcmp(again, p, sizeof again) != 0) fz_fail("frame header re-encodes differently");
    if (h.length > n - WF_FRAME_HDR_SIZE) break; /* the rest of the frame is not here */
    err_reset(err);
    if (!t->decode(p + WF_FRAME_HDR_SIZE, (size_t)h.length, err)) {
      if (t->decode != dec_empty) check_err(err, t->name);
      break;
    }
    frames++;
    p += WF_FRAME_HDR_SIZE + h.length;
    n -= WF_FRAME_HDR_SIZE + (size_t)h.length;
  }
  return frames;
}

static void structured(const fz_type *t, fz_in *in) {
  wf_buf b = {0};
  t->build(in, &b);
  int frames = 1;
  if (fz_take(in, 1) % 4 == 0) { /* a second frame of any type after it */
    k_types[fz_take(in, 1) % NTYPES].build(in, &b);
    frames++;
  }
  if (b.oom) fz_fail("out of memory encoding");
  if (decode_stream(b.data, b.len, FZ_BIG_CAP, FZ_BIG_CAP) != frames)
    fz_fail("a valid %s stream was rejected", t->name);
  size_t len = fz_corrupt(in, b.data, b.len);
  decode_stream(b.data, len, FZ_BIG_CAP, FZ_BIG_CAP);
  wf_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const size_t errlens[4] = {256, 1, 9, 40};
  int modes = 1 + 2 * NTYPES;
  int mode = data[0] % modes;
  g_errlen = errlens[(data[0] / modes) % 4];
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  if (mode == 0) {
    if (n < 1) return 0;
    /* caps from the first byte: small ones reach the length checks */
    uint64_t max_ctrl = 1ull << (p[0] % 21), max_data = WF_DATA_SUBHDR_SIZE + (1ull << (p[0] / 21 % 12));
    decode_stream(p + 1, n - 1, max_ctrl, max_data);
  } else if (mode <= NTYPES) {
    char err[ERR_ROOM];
    err_reset(err);
    const fz_type *t = &k_types[mode - 1];
    if (!t->decode(p, n, err) && t->decode != dec_empty && (t->type != WF_MSG_DATA || n >= WF_DATA_SUBHDR_SIZE))
      check_err(err, t->name);
  } else {
    fz_in in = {p, n, 0};
    structured(&k_types[mode - 1 - NTYPES], &in);
  }
  return 0;
}

/* ------------------------------------------------------------ seeds */

static void fz_write_seeds(void) {
  int modes = 1 + 2 * NTYPES;
  for (int i = 0; i < NTYPES; i++) {
    const fz_type *t = &k_types[i];
    if (i && t->type <= k_types[i - 1].type) fz_fail("k_types is not in wf_msg_type order at row %d", i);
    for (uint64_t s = 1; s <= 3; s++) {
      uint8_t bytes[600];
      char name[64];
      fz_fill(bytes, sizeof bytes, s * 7919 + (uint64_t)i);
      snprintf(name, sizeof name, "structured-%s-%d", t->name, (int)s);
      fz_seed(name, (uint8_t)(1 + NTYPES + i), bytes, sizeof bytes);
      /* the same message as a stream and as a raw payload */
      fz_in in = {bytes, sizeof bytes, 0};
      wf_buf b = {0};
      t->build(&in, &b);
      if (b.oom || b.len < WF_FRAME_HDR_SIZE) fz_fail("seed: cannot build %s", t->name);
      uint8_t *st = malloc(b.len + 1);
      if (!st) fz_fail("out of memory");
      st[0] = 20; /* caps: 1 MiB control */
      memcpy(st + 1, b.data, b.len);
      snprintf(name, sizeof name, "stream-%s-%d", t->name, (int)s);
      fz_seed(name, 0, st, b.len + 1);
      snprintf(name, sizeof name, "payload-%s-%d", t->name, (int)s);
      fz_seed(name, (uint8_t)(1 + i + modes * (s % 2)), b.data + WF_FRAME_HDR_SIZE, b.len - WF_FRAME_HDR_SIZE);
      free(st);
      wf_buf_free(&b);
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_seed_init("fuzz_wire");
  return 0;
}
