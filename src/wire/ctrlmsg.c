/* ctrlmsg.c - the negotiation and control messages: REQUESTS, RESPONSES,
 * ABORT, HEARTBEAT, BYE.
 *
 * Payload layouts (little-endian; str = u16 length + bytes, no NUL byte;
 * f64 = IEEE-754 bit pattern in a u64):
 *
 * REQUESTS:
 *   u32 count            then `count` requests (0 is valid), each >= 47 bytes:
 *     u32 group_id
 *     u8  coll           < WF_COLL_COUNT_
 *     u8  dtype          < WEFT_DTYPE_COUNT_
 *     u8  reduce_op      < WEFT_OP_COUNT_
 *     u8  ndim           0..WEFT_MAX_DIMS
 *     i32 root           broadcast: >= 0; others: >= -1
 *     i32 device         >= -1: WEFT_DEVICE_CPU, or kind * 65536 + index (WF_DEVICE_CODE)
 *     i32 priority
 *     u32 unit           0..WF_UNIT_MAX: the grouped op's tensor count (0: none)
 *     f64 prescale, f64 postscale
 *     i64 shape[ndim]    each >= 0
 *     u32 nsplits        alltoall, permute: 1..WF_MAX_RANKS; others: 0
 *     i64 splits[nsplits] each >= 0 (permute: the permutation; the coordinator
 *                        checks its range, duplicates and agreement)
 *     str name           1..WF_NAME_MAX bytes
 *
 * RESPONSES:
 *   u32 count            then `count` responses (0 is valid), each >= 28 bytes:
 *     u64 seq
 *     u32 group_id
 *     u8  type           0 = OK, 1 = ERROR
 *     u8  coll           < WF_COLL_COUNT_
 *     i32 status         OK: 0; ERROR: < 0
 *     u32 nnames         >= 1, then nnames x str (1..WF_NAME_MAX bytes each)
 *     u32 nsizes         OK alltoall: k*k for some k <= 65535; others: <= WF_MAX_RANKS
 *                        (OK permute: the agreed permutation)
 *     i64 sizes[nsizes]  each >= 0 (ERROR: the group ranks it was decided
 *                        without, for a timeout or a departure; else none)
 *     str error          OK: empty (decodes to error == NULL);
 *                        ERROR: 0..WF_ERRMSG_MAX bytes (decodes to a malloc'd
 *                        string, "" when empty; a NULL error encodes as "")
 *
 * ABORT:      str reason, 0..WF_ERRMSG_MAX bytes (the encoder truncates a
 *             longer reason: an abort must always get out).
 * HEARTBEAT, BYE: empty payload.
 *
 * As in bootmsg.c, one check per message type runs in both the encoder
 * (WEFT_ERR_INVALID_ARGUMENT) and the decoder (WEFT_ERR_PROTOCOL), so every
 * payload that decodes re-encodes to the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

#define REQ_MIN_BYTES (4 + 4 + 4 * 4 + 2 * 8 + 4 + 2 + 1)
#define RESP_MIN_BYTES (8 + 4 + 1 + 1 + 4 + 4 + 4 + 2)
#define WHY_LEN 160

/* ------------------------------------------------------------------ checks */
/* Each returns the name of the first bad field (reason in why) or NULL. */
static const char *req_check(const wf_request_msg *m, char *why) {
  if (m->coll >= WF_COLL_COUNT_) {
    snprintf(why, WHY_LEN, "bad value %u (must be < %d)", m->coll, WF_COLL_COUNT_);
    return "coll";
  }
  if (m->dtype >= WEFT_DTYPE_COUNT_) {
    snprintf(why, WHY_LEN, "bad value %u (must be < %d)", m->dtype, WEFT_DTYPE_COUNT_);
    return "dtype";
  }
  if (m->reduce_op >= WEFT_OP_COUNT_) {
    snprintf(why, WHY_LEN, "bad value %u (must be < %d)", m->reduce_op, WEFT_OP_COUNT_);
    return "reduce_op";
  }
  if (m->ndim > WEFT_MAX_DIMS) {
    snprintf(why, WHY_LEN, "%u over the maximum %d", m->ndim, WEFT_MAX_DIMS);
    return "ndim";
  }
  int32_t min_root = m->coll == WF_COLL_BROADCAST ? 0 : -1;
  if (m->root < min_root) {
    snprintf(why, WHY_LEN, "%d below %d for %s", m->root, min_root, wf_coll_name((wf_coll)m->coll));
    return "root";
  }
  if (m->device < WEFT_DEVICE_CPU) {
    snprintf(why, WHY_LEN, "%d below %d", m->device, WEFT_DEVICE_CPU);
    return "device";
  }
  if (m->unit > WF_UNIT_MAX) {
    snprintf(why, WHY_LEN, "%u over the maximum %d", m->unit, WF_UNIT_MAX);
    return "unit";
  }
  for (unsigned i = 0; i < m->ndim; i++) {
    if (m->shape[i] < 0) {
      snprintf(why, WHY_LEN, "shape[%u] is %lld, must be >= 0", i, (long long)m->shape[i]);
      return "shape";
    }
  }
  int split_coll = m->coll == WF_COLL_ALLTOALL || m->coll == WF_COLL_PERMUTE;
  if (split_coll ? (m->nsplits < 1 || m->nsplits > WF_MAX_RANKS) : m->nsplits != 0) {
    snprintf(why, WHY_LEN, "%u invalid for %s (alltoall, permute: 1..%u, others: 0)", m->nsplits,
             wf_coll_name((wf_coll)m->coll), (unsigned)WF_MAX_RANKS);
    return "nsplits";
  }
  if (m->nsplits && !m->splits) {
    snprintf(why, WHY_LEN, "NULL with nsplits %u", m->nsplits);
    return "splits";
  }
  for (uint32_t i = 0; i < m->nsplits; i++) {
    if (m->splits[i] < 0) {
      snprintf(why, WHY_LEN, "splits[%u] is %lld, must be >= 0", i, (long long)m->splits[i]);
      return "splits";
    }
  }
  size_t n = wf_str_len(m->name, WF_NAME_MAX);
  if (n < 1 || n > WF_NAME_MAX) {
    snprintf(why, WHY_LEN, n ? "not NUL-terminated within %d bytes" : "empty (must be 1..%d bytes)",
             n ? WF_NAME_MAX + 1 : WF_NAME_MAX);
    return "name";
  }
  return NULL;
}

static int is_square(uint32_t v) {
  uint64_t lo = 0, hi = 65536; /* 65536^2 > UINT32_MAX */
  while (lo < hi) {            /* smallest k with k*k >= v */
    uint64_t mid = (lo + hi) / 2;
    if (mid * mid < v) lo = mid + 1;
    else hi = mid;
  }
  return lo * lo == v;
}

static const char *resp_check(const wf_response_msg *m, char *why) {
  if (m->type != WF_RESP_OK && m->type != WF_RESP_ERROR) {
    snprintf(why, WHY_LEN, "bad value %u (must be 0 = OK or 1 = ERROR)", m->type);
    return "type";
  }
  if (m->coll >= WF_COLL_COUNT_) {
    snprintf(why, WHY_LEN, "bad value %u (must be < %d)", m->coll, WF_COLL_COUNT_);
    return "coll";
  }
  if (m->type == WF_RESP_OK ? m->status != 0 : m->status >= 0) {
    snprintf(why, WHY_LEN, "%d invalid for a%s response (must be %s)", m->status,
             m->type == WF_RESP_OK ? "n OK" : "n ERROR", m->type == WF_RESP_OK ? "0" : "< 0");
    return "status";
  }
  if (m->nnames < 1 || !m->names) {
    snprintf(why, WHY_LEN, "no tensor names (nnames %u)", m->nnames);
    return "names";
  }
  for (uint32_t i = 0; i < m->nnames; i++) {
    size_t n = m->names[i] ? wf_str_len(m->names[i], WF_NAME_MAX) : 0;
    if (n < 1 || n > WF_NAME_MAX) {
      if (!m->names[i]) snprintf(why, WHY_LEN, "names[%u] is NULL", i);
      else if (n) snprintf(why, WHY_LEN, "names[%u] not NUL-terminated within %d bytes", i, WF_NAME_MAX + 1);
      else snprintf(why, WHY_LEN, "names[%u] is empty", i);
      return "names";
    }
  }
  if (m->coll == WF_COLL_ALLTOALL && m->type == WF_RESP_OK ? !is_square(m->nsizes) : m->nsizes > WF_MAX_RANKS) {
    snprintf(why, WHY_LEN, "%u invalid for %s (alltoall OK: size*size, others: <= %u)", m->nsizes,
             wf_coll_name((wf_coll)m->coll), (unsigned)WF_MAX_RANKS);
    return "nsizes";
  }
  if (m->nsizes && !m->sizes) {
    snprintf(why, WHY_LEN, "NULL with nsizes %u", m->nsizes);
    return "sizes";
  }
  for (uint32_t i = 0; i < m->nsizes; i++) {
    if (m->sizes[i] < 0) {
      snprintf(why, WHY_LEN, "sizes[%u] is %lld, must be >= 0", i, (long long)m->sizes[i]);
      return "sizes";
    }
  }
  if (m->error) {
    size_t n = wf_str_len(m->error, WF_ERRMSG_MAX);
    if (n > WF_ERRMSG_MAX) {
      snprintf(why, WHY_LEN, "longer than %d bytes", WF_ERRMSG_MAX);
      return "error";
    }
    if (m->type == WF_RESP_OK && n) {
      snprintf(why, WHY_LEN, "set on an OK response");
      return "error";
    }
  }
  return NULL;
}

/* ------------------------------------------------------------------ REQUESTS */
weft_status wf_encode_requests(wf_buf *out, uint32_t src, const wf_request_msg *reqs, uint32_t count) {
  char why[WHY_LEN];
  if (count && !reqs) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_requests: reqs is NULL, count %u", count);
  for (uint32_t i = 0; i < count; i++) {
    const char *bad = req_check(&reqs[i], why);
    if (bad)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_requests: REQUESTS[%u].%s (tensor '%.64s'): %s", i, bad,
                    reqs[i].name, why);
  }
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, count, 4);
  for (uint32_t i = 0; i < count; i++) {
    const wf_request_msg *m = &reqs[i];
    wf_buf_uint(out, m->group_id, 4);
    uint8_t small[4] = {m->coll, m->dtype, m->reduce_op, m->ndim};
    wf_buf_put(out, small, sizeof small);
    wf_buf_uint(out, (uint32_t)m->root, 4);
    wf_buf_uint(out, (uint32_t)m->device, 4);
    wf_buf_uint(out, (uint32_t)m->priority, 4);
    wf_buf_uint(out, m->unit, 4);
    wf_buf_f64(out, m->prescale);
    wf_buf_f64(out, m->postscale);
    for (unsigned d = 0; d < m->ndim; d++) wf_buf_uint(out, (uint64_t)m->shape[d], 8);
    wf_buf_uint(out, m->nsplits, 4);
    for (uint32_t s = 0; s < m->nsplits; s++) wf_buf_uint(out, (uint64_t)m->splits[s], 8);
    wf_buf_str(out, m->name, strlen(m->name));
  }
  return wf_frame_end(out, start, src, WF_MSG_REQUESTS);
}

static weft_status decode_request(wf_rd *r, wf_request_msg *m) {
  char why[WHY_LEN];
  WF_CHECK(wf_rd_u32(r, "group_id", &m->group_id));
  WF_CHECK(wf_rd_u8(r, "coll", &m->coll));
  WF_CHECK(wf_rd_u8(r, "dtype", &m->dtype));
  WF_CHECK(wf_rd_u8(r, "reduce_op", &m->reduce_op));
  WF_CHECK(wf_rd_u8(r, "ndim", &m->ndim));
  if (m->ndim > WEFT_MAX_DIMS) return wf_rd_fail(r, "ndim", "%u over the maximum %d", m->ndim, WEFT_MAX_DIMS);
  WF_CHECK(wf_rd_i32(r, "root", &m->root));
  WF_CHECK(wf_rd_i32(r, "device", &m->device));
  WF_CHECK(wf_rd_i32(r, "priority", &m->priority));
  WF_CHECK(wf_rd_u32(r, "unit", &m->unit));
  WF_CHECK(wf_rd_f64(r, "prescale", &m->prescale));
  WF_CHECK(wf_rd_f64(r, "postscale", &m->postscale));
  for (unsigned d = 0; d < m->ndim; d++) WF_CHECK(wf_rd_i64(r, "shape", &m->shape[d]));
  uint32_t nsplits = 0;
  WF_CHECK(wf_rd_u32(r, "nsplits", &nsplits));
  if (nsplits > WF_MAX_RANKS)
    return wf_rd_fail(r, "nsplits", "%u over the maximum %u", nsplits, (unsigned)WF_MAX_RANKS);
  WF_CHECK(wf_rd_count(r, "nsplits", nsplits, 8));
  if (nsplits) {
    m->splits = malloc(nsplits * sizeof *m->splits);
    if (!m->splits) {
      wf_rd_fail(r, "splits", "out of memory (%u entries)", nsplits);
      return WEFT_ERR_NO_MEMORY;
    }
    m->nsplits = nsplits;
    for (uint32_t s = 0; s < nsplits; s++) WF_CHECK(wf_rd_i64(r, "splits", &m->splits[s]));
  }
  WF_CHECK(wf_rd_str(r, "name", 1, WF_NAME_MAX, m->name));
  const char *bad = req_check(m, why);
  return bad ? wf_rd_fail(r, bad, "%s", why) : WEFT_OK;
}

weft_status wf_decode_requests(const uint8_t *p, size_t n, wf_requests_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  uint32_t count = 0;
  wf_rd_init(&r, p, n, "REQUESTS", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "count", &count), st, fail);
  WF_CHECK_GOTO(wf_rd_count(&r, "count", count, REQ_MIN_BYTES), st, fail);
  if (count) {
    m->reqs = calloc(count, sizeof *m->reqs);
    if (!m->reqs) {
      st = WEFT_ERR_NO_MEMORY;
      wf_rd_fail(&r, "reqs", "out of memory (%u entries)", count);
      goto fail;
    }
    m->count = count;
  }
  for (uint32_t i = 0; i < count; i++) {
    r.idx = (long)i;
    WF_CHECK_GOTO(decode_request(&r, &m->reqs[i]), st, fail);
  }
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  wf_requests_msg_free(m);
  return st;
}

void wf_request_msg_free(wf_request_msg *m) {
  free(m->splits);
  m->splits = NULL;
  m->nsplits = 0;
}

void wf_requests_msg_free(wf_requests_msg *m) {
  for (uint32_t i = 0; m->reqs && i < m->count; i++) wf_request_msg_free(&m->reqs[i]);
  free(m->reqs);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ RESPONSES */
weft_status wf_encode_responses(wf_buf *out, uint32_t src, const wf_response_msg *resps, uint32_t count) {
  char why[WHY_LEN];
  if (count && !resps)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_responses: resps is NULL, count %u", count);
  for (uint32_t i = 0; i < count; i++) {
    const char *bad = resp_check(&resps[i], why);
    if (bad)
      return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_responses: RESPONSES[%u].%s (seq %llu): %s", i, bad,
                    (unsigned long long)resps[i].seq, why);
  }
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, count, 4);
  for (uint32_t i = 0; i < count; i++) {
    const wf_response_msg *m = &resps[i];
    wf_buf_uint(out, m->seq, 8);
    wf_buf_uint(out, m->group_id, 4);
    uint8_t small[2] = {m->type, m->coll};
    wf_buf_put(out, small, sizeof small);
    wf_buf_uint(out, (uint32_t)m->status, 4);
    wf_buf_uint(out, m->nnames, 4);
    for (uint32_t k = 0; k < m->nnames; k++) wf_buf_str(out, m->names[k], strlen(m->names[k]));
    wf_buf_uint(out, m->nsizes, 4);
    for (uint32_t k = 0; k < m->nsizes; k++) wf_buf_uint(out, (uint64_t)m->sizes[k], 8);
    const char *e = m->error ? m->error : "";
    wf_buf_str(out, e, strlen(e));
  }
  return wf_frame_end(out, start, src, WF_MSG_RESPONSES);
}

static weft_status decode_response(wf_rd *r, wf_response_msg *m) {
  char why[WHY_LEN];
  uint32_t nnames = 0, nsizes = 0;
  WF_CHECK(wf_rd_u64(r, "seq", &m->seq));
  WF_CHECK(wf_rd_u32(r, "group_id", &m->group_id));
  WF_CHECK(wf_rd_u8(r, "type", &m->type));
  if (m->type != WF_RESP_OK && m->type != WF_RESP_ERROR)
    return wf_rd_fail(r, "type", "bad value %u (must be 0 = OK or 1 = ERROR)", m->type);
  WF_CHECK(wf_rd_u8(r, "coll", &m->coll));
  WF_CHECK(wf_rd_i32(r, "status", &m->status));
  WF_CHECK(wf_rd_u32(r, "nnames", &nnames));
  WF_CHECK(wf_rd_count(r, "nnames", nnames, 2 + 1));
  if (nnames) {
    m->names = calloc(nnames, sizeof *m->names);
    if (!m->names) {
      wf_rd_fail(r, "names", "out of memory (%u entries)", nnames);
      return WEFT_ERR_NO_MEMORY;
    }
    m->nnames = nnames;
    for (uint32_t k = 0; k < nnames; k++) WF_CHECK(wf_rd_str_alloc(r, "names", 1, WF_NAME_MAX, &m->names[k]));
  }
  WF_CHECK(wf_rd_u32(r, "nsizes", &nsizes));
  WF_CHECK(wf_rd_count(r, "nsizes", nsizes, 8));
  if (nsizes) {
    m->sizes = malloc(nsizes * sizeof *m->sizes);
    if (!m->sizes) {
      wf_rd_fail(r, "sizes", "out of memory (%u entries)", nsizes);
      return WEFT_ERR_NO_MEMORY;
    }
    m->nsizes = nsizes;
    for (uint32_t k = 0; k < nsizes; k++) WF_CHECK(wf_rd_i64(r, "sizes", &m->sizes[k]));
  }
  /* an OK response carries an empty error string; only ERROR allocates one */
  WF_CHECK(wf_rd_str_alloc(r, "error", 0, m->type == WF_RESP_OK ? 0 : WF_ERRMSG_MAX, &m->error));
  if (m->type == WF_RESP_OK) {
    free(m->error);
    m->error = NULL;
  }
  const char *bad = resp_check(m, why);
  return bad ? wf_rd_fail(r, bad, "%s", why) : WEFT_OK;
}

weft_status wf_decode_responses(const uint8_t *p, size_t n, wf_responses_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  uint32_t count = 0;
  wf_rd_init(&r, p, n, "RESPONSES", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "count", &count), st, fail);
  WF_CHECK_GOTO(wf_rd_count(&r, "count", count, RESP_MIN_BYTES), st, fail);
  if (count) {
    m->resps = calloc(count, sizeof *m->resps);
    if (!m->resps) {
      st = WEFT_ERR_NO_MEMORY;
      wf_rd_fail(&r, "resps", "out of memory (%u entries)", count);
      goto fail;
    }
    m->count = count;
  }
  for (uint32_t i = 0; i < count; i++) {
    r.idx = (long)i;
    WF_CHECK_GOTO(decode_response(&r, &m->resps[i]), st, fail);
  }
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  wf_responses_msg_free(m);
  return st;
}

void wf_response_msg_free(wf_response_msg *m) {
  for (uint32_t k = 0; m->names && k < m->nnames; k++) free(m->names[k]);
  free(m->names);
  free(m->sizes);
  free(m->error);
  m->names = NULL;
  m->nnames = 0;
  m->sizes = NULL;
  m->nsizes = 0;
  m->error = NULL;
}

void wf_responses_msg_free(wf_responses_msg *m) {
  for (uint32_t i = 0; m->resps && i < m->count; i++) wf_response_msg_free(&m->resps[i]);
  free(m->resps);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ ABORT, HEARTBEAT, BYE */
static weft_status encode_text(wf_buf *out, uint32_t src, wf_msg_type type, const char *text) {
  if (!text) text = "";
  size_t len = wf_str_len(text, WF_ERRMSG_MAX);
  if (len > WF_ERRMSG_MAX) len = WF_ERRMSG_MAX;
  size_t start = wf_frame_begin(out);
  wf_buf_str(out, text, len);
  return wf_frame_end(out, start, src, type);
}

weft_status wf_encode_abort(wf_buf *out, uint32_t src, const char *reason) {
  return encode_text(out, src, WF_MSG_ABORT, reason);
}

weft_status wf_encode_stall(wf_buf *out, uint32_t src, const char *report) {
  return encode_text(out, src, WF_MSG_STALL, report);
}

weft_status wf_decode_abort(const uint8_t *p, size_t n, char *reason, size_t reason_len, char *err, size_t errlen) {
  wf_rd r;
  char s[WF_ERRMSG_MAX + 1];
  wf_rd_init(&r, p, n, "ABORT", err, errlen);
  if (reason && reason_len) reason[0] = '\0';
  WF_CHECK(wf_rd_str(&r, "reason", 0, WF_ERRMSG_MAX, s));
  WF_CHECK(wf_rd_end(&r));
  /* a short buffer gets a truncated reason: still better than none */
  if (reason && reason_len) snprintf(reason, reason_len, "%s", s);
  return WEFT_OK;
}

weft_status wf_encode_simple(wf_buf *out, uint32_t src, wf_msg_type type) {
  if (type != WF_MSG_HEARTBEAT && type != WF_MSG_BYE)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_simple: type %d has a payload (only HEARTBEAT, BYE)",
                  (int)type);
  size_t start = wf_frame_begin(out);
  return wf_frame_end(out, start, src, type);
}
