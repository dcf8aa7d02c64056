/* fuzz_wire.c - libFuzzer target for the wire decoders (src/wire).
 *
 * The first input byte picks what the rest feeds:
 *   0      a frame: header decoder, then the payload decoder of its type
 *   1      the DATA sub-header decoder
 *   2..6   HELLO, PEERS, REQUESTS, RESPONSES, ABORT payload decoders
 *   7, 8   structured: the bytes drive a valid REQUESTS / RESPONSES message,
 *          which is encoded, decoded and compared, then one byte of the
 *          encoding is corrupted and decoded again (reaches deep states that
 *          random bytes rarely do)
 * Anything that decodes must re-encode to the same bytes; a mismatch aborts
 * (so libFuzzer reports it). Crashes, leaks and UB are reported by the
 * sanitizers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

#define FZ_MAX_CTRL (1u << 20)
#define FZ_MAX_DATA (1u << 20)

static void fz_fail(const char *what) {
  fprintf(stderr, "fuzz_wire: %s\n", what);
  abort();
}

/* Re-encoded frame b must carry exactly payload p[0..n). */
static void same_payload(wf_buf *b, const uint8_t *p, size_t n, const char *what) {
  if (b->oom) fz_fail("out of memory re-encoding");
  if (b->len != WF_FRAME_HDR_SIZE + n || memcmp(b->data + WF_FRAME_HDR_SIZE, p, n) != 0) fz_fail(what);
  wf_buf_free(b);
}

static void decode_payload(uint8_t type, const uint8_t *p, size_t n) {
  char err[256];
  wf_buf b = {0};
  switch (type) {
    case WF_MSG_HELLO: {
      wf_hello_msg m;
      if (wf_decode_hello(p, n, &m, err, sizeof err) != WEFT_OK) return;
      if (wf_encode_hello(&b, 0, &m) != WEFT_OK) fz_fail("decoded HELLO does not encode");
      same_payload(&b, p, n, "HELLO re-encodes differently");
      return;
    }
    case WF_MSG_PEERS: {
      wf_peers_msg m;
      if (wf_decode_peers(p, n, &m, err, sizeof err) != WEFT_OK) return;
      if (wf_encode_peers(&b, 0, &m) != WEFT_OK) fz_fail("decoded PEERS does not encode");
      wf_peers_msg_free(&m);
      same_payload(&b, p, n, "PEERS re-encodes differently");
      return;
    }
    case WF_MSG_REQUESTS: {
      wf_requests_msg m;
      if (wf_decode_requests(p, n, &m, err, sizeof err) != WEFT_OK) return;
      if (wf_encode_requests(&b, 0, m.reqs, m.count) != WEFT_OK) fz_fail("decoded REQUESTS does not encode");
      wf_requests_msg_free(&m);
      same_payload(&b, p, n, "REQUESTS re-encodes differently");
      return;
    }
    case WF_MSG_RESPONSES: {
      wf_responses_msg m;
      if (wf_decode_responses(p, n, &m, err, sizeof err) != WEFT_OK) return;
      if (wf_encode_responses(&b, 0, m.resps, m.count) != WEFT_OK) fz_fail("decoded RESPONSES does not encode");
      wf_responses_msg_free(&m);
      same_payload(&b, p, n, "RESPONSES re-encodes differently");
      return;
    }
    case WF_MSG_ABORT: {
      char reason[WF_ERRMSG_MAX + 1];
      if (wf_decode_abort(p, n, reason, sizeof reason, err, sizeof err) != WEFT_OK) return;
      if (wf_encode_abort(&b, 0, reason) != WEFT_OK) fz_fail("decoded ABORT does not encode");
      same_payload(&b, p, n, "ABORT re-encodes differently");
      return;
    }
    case WF_MSG_DATA: {
      wf_data_hdr d;
      uint8_t again[WF_DATA_SUBHDR_SIZE];
      if (n < WF_DATA_SUBHDR_SIZE) fz_fail("header accepted a DATA frame without sub-header");
      if (wf_data_hdr_decode(p, &d, err, sizeof err) != WEFT_OK) return;
      wf_data_hdr_encode(again, &d);
      if (memcmp(again, p, sizeof again) != 0) fz_fail("DATA sub-header re-encodes differently");
      return;
    }
    default: return; /* HEARTBEAT, BYE: no payload */
  }
}

static void decode_frame(const uint8_t *p, size_t n) {
  char err[256];
  wf_frame_hdr h;
  if (n < WF_FRAME_HDR_SIZE) return;
  if (wf_frame_hdr_decode(p, FZ_MAX_CTRL, FZ_MAX_DATA, &h, err, sizeof err) != WEFT_OK) return;
  uint8_t again[WF_FRAME_HDR_SIZE];
  wf_frame_hdr_encode(again, &h);
  if (memcmp(again, p, sizeof again) != 0) fz_fail("frame header re-encodes differently");
  if (h.length != n - WF_FRAME_HDR_SIZE) return; /* the payload is not all here */
  decode_payload(h.type, p + WF_FRAME_HDR_SIZE, (size_t)h.length);
}

/* ---- structured inputs: a tiny byte reader that never fails */
typedef struct fz_in {
  const uint8_t *p;
  size_t n, off;
} fz_in;
static uint64_t take(fz_in *in, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; i++) v = (v << 8) | (in->off < in->n ? in->p[in->off++] : 0);
  return v;
}
static void take_name(fz_in *in, char *dst, size_t max) {
  size_t len = 1 + (size_t)(take(in, 1) % max);
  for (size_t i = 0; i < len; i++) dst[i] = (char)(1 + take(in, 1) % 255); /* never NUL */
  dst[len] = '\0';
}

/* Encodes a message built from the input, checks that it decodes, then
 * decodes it once more with one byte corrupted. */
static void check_encoded(wf_buf *b, fz_in *in) {
  if (b->oom) fz_fail("out of memory encoding");
  decode_frame(b->data, b->len); /* round-trip check on the good frame */
  size_t at = (size_t)(take(in, 2) % b->len);
  b->data[at] ^= (uint8_t)(1 + take(in, 1) % 255);
  decode_frame(b->data, b->len);
}

static void structured_requests(fz_in *in) {
  wf_request_msg reqs[4];
  int64_t splits[4][8];
  uint32_t count = (uint32_t)(take(in, 1) % 5);
  memset(reqs, 0, sizeof reqs);
  for (uint32_t i = 0; i < count; i++) {
    wf_request_msg *r = &reqs[i];
    r->group_id = (uint32_t)take(in, 4);
    r->coll = (uint8_t)(take(in, 1) % WF_COLL_COUNT_);
    r->dtype = (uint8_t)(take(in, 1) % WEFT_DTYPE_COUNT_);
    r->reduce_op = (uint8_t)(take(in, 1) % WEFT_OP_COUNT_);
    r->ndim = (uint8_t)(take(in, 1) % (WEFT_MAX_DIMS + 1));
    r->root = r->coll == WF_COLL_BROADCAST ? (int32_t)(take(in, 2)) : -1;
    r->device = (int32_t)(take(in, 1) % 4) - 1;
    r->priority = (int32_t)(uint32_t)take(in, 4);
    uint64_t bits = take(in, 8);
    memcpy(&r->prescale, &bits, sizeof bits);
    bits = take(in, 8);
    memcpy(&r->postscale, &bits, sizeof bits);
    for (unsigned d = 0; d < r->ndim; d++) r->shape[d] = (int64_t)(take(in, 8) >> 1);
    if (r->coll == WF_COLL_ALLTOALL) {
      r->nsplits = 1 + (uint32_t)(take(in, 1) % 8);
      for (uint32_t s = 0; s < r->nsplits; s++) splits[i][s] = (int64_t)(take(in, 4));
      r->splits = splits[i];
    }
    take_name(in, r->name, WF_NAME_MAX);
  }
  wf_buf b = {0};
  if (wf_encode_requests(&b, (uint32_t)take(in, 2), reqs, count) != WEFT_OK) fz_fail("valid REQUESTS rejected");
  check_encoded(&b, in);
  wf_buf_free(&b);
}

static void structured_responses(fz_in *in) {
  wf_response_msg resps[4];
  char names[4][3][WF_NAME_MAX + 1];
  char *name_ptrs[4][3];
  int64_t sizes[4][16];
  char error[4][64];
  uint32_t count = (uint32_t)(take(in, 1) % 5);
  memset(resps, 0, sizeof resps);
  for (uint32_t i = 0; i < count; i++) {
    wf_response_msg *r = &resps[i];
    r->seq = take(in, 8);
    r->group_id = (uint32_t)take(in, 4);
    r->type = (uint8_t)(take(in, 1) % 2);
    r->coll = (uint8_t)(take(in, 1) % WF_COLL_COUNT_);
    r->status = r->type == WF_RESP_ERROR ? -1 - (int32_t)(take(in, 1) % 13) : 0;
    r->nnames = 1 + (uint32_t)(take(in, 1) % 3);
    for (uint32_t k = 0; k < r->nnames; k++) {
      take_name(in, names[i][k], 40);
      name_ptrs[i][k] = names[i][k];
    }
    r->names = name_ptrs[i];
    uint32_t k = (uint32_t)(take(in, 1) % 5);
    r->nsizes = r->coll == WF_COLL_ALLTOALL ? k * k : k;
    for (uint32_t s = 0; s < r->nsizes; s++) sizes[i][s] = (int64_t)take(in, 3);
    r->sizes = r->nsizes ? sizes[i] : NULL;
    if (r->type == WF_RESP_ERROR && take(in, 1) % 2) {
      take_name(in, error[i], sizeof error[i] - 1);
      r->error = error[i];
    }
  }
  wf_buf b = {0};
  if (wf_encode_responses(&b, (uint32_t)take(in, 2), resps, count) != WEFT_OK) fz_fail("valid RESPONSES rejected");
  check_encoded(&b, in);
  wf_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t sel = data[0] % 9;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  char err[256];
  switch (sel) {
    case 0: decode_frame(p, n); break;
    case 1:
      if (n == WF_DATA_SUBHDR_SIZE) decode_payload(WF_MSG_DATA, p, n);
      else if (n > WF_DATA_SUBHDR_SIZE) {
        wf_data_hdr d;
        (void)wf_data_hdr_decode(p, &d, err, sizeof err);
      }
      break;
    case 2: decode_payload(WF_MSG_HELLO, p, n); break;
    case 3: decode_payload(WF_MSG_PEERS, p, n); break;
    case 4: decode_payload(WF_MSG_REQUESTS, p, n); break;
    case 5: decode_payload(WF_MSG_RESPONSES, p, n); break;
    case 6: decode_payload(WF_MSG_ABORT, p, n); break;
    case 7: {
      fz_in in = {p, n, 0};
      structured_requests(&in);
      break;
    }
    case 8: {
      fz_in in = {p, n, 0};
      structured_responses(&in);
      break;
    }
  }
  return 0;
}
