/* p2pmsg.c - the point-to-point messages (engine/p2p.c has the protocol).
 *
 * P2P_SEND payload (little-endian):
 *   u64 msg_id        >= 1
 *   u64 incarnation   != 0
 *   u32 group_id
 *   u64 key
 *   u8  dtype         < WEFT_DTYPE_COUNT_
 *   u8  eager         0 or 1
 *   u16 reserved      0
 *   u64 count         elements; count * dtype size fits in 62 bits
 *   eager: count * dtype-size bytes (at most WF_P2P_EAGER_MAX), else nothing
 *
 * P2P_REPLY payload:
 *   u64 msg_id        >= 1
 *   u8  status        WF_P2P_OK or WF_P2P_MISMATCH
 *   u8  dtype         < WEFT_DTYPE_COUNT_ (the receiver's)
 *   u16 reserved      0
 *   u64 count         the receiver's element count
 *
 * As everywhere in src/wire, one check runs in the encoder
 * (WEFT_ERR_INVALID_ARGUMENT) and the decoder (WEFT_ERR_PROTOCOL), so every
 * payload that decodes re-encodes to the same bytes. */
#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

#define WHY_LEN 160

/* The bytes of count elements of dtype, or UINT64_MAX when too many. */
static uint64_t p2p_bytes(uint8_t dtype, uint64_t count) {
  uint64_t es = weft_dtype_size((weft_dtype)dtype), b;
  if (__builtin_mul_overflow(count, es, &b) || b > (UINT64_MAX >> 2)) return UINT64_MAX;
  return b;
}

static const char *send_check(const wf_p2p_send_msg *m, char *why) {
  if (m->msg_id == 0) return snprintf(why, WHY_LEN, "0 (ids start at 1)"), "msg_id";
  if (m->incarnation == 0) return snprintf(why, WHY_LEN, "0 (never used)"), "incarnation";
  if (m->dtype >= WEFT_DTYPE_COUNT_) return snprintf(why, WHY_LEN, "unknown dtype %u", m->dtype), "dtype";
  if (m->eager > 1) return snprintf(why, WHY_LEN, "%u (0 or 1)", m->eager), "eager";
  uint64_t b = p2p_bytes(m->dtype, m->count);
  if (b == UINT64_MAX) return snprintf(why, WHY_LEN, "%llu elements is too many", (unsigned long long)m->count), "count";
  if (m->eager && b > WF_P2P_EAGER_MAX)
    return snprintf(why, WHY_LEN, "%llu bytes inline (at most %d)", (unsigned long long)b, WF_P2P_EAGER_MAX), "count";
  return NULL;
}

static const char *reply_check(const wf_p2p_reply_msg *m, char *why) {
  if (m->msg_id == 0) return snprintf(why, WHY_LEN, "0 (ids start at 1)"), "msg_id";
  if (m->status > WF_P2P_MISMATCH) return snprintf(why, WHY_LEN, "unknown status %u", m->status), "status";
  if (m->dtype >= WEFT_DTYPE_COUNT_) return snprintf(why, WHY_LEN, "unknown dtype %u", m->dtype), "dtype";
  if (p2p_bytes(m->dtype, m->count) == UINT64_MAX)
    return snprintf(why, WHY_LEN, "%llu elements is too many", (unsigned long long)m->count), "count";
  return NULL;
}

weft_status wf_encode_p2p_send(wf_buf *out, uint32_t src, const wf_p2p_send_msg *m) {
  char why[WHY_LEN];
  const char *bad = send_check(m, why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_p2p_send: %s: %s", bad, why);
  uint64_t b = p2p_bytes(m->dtype, m->count);
  if (m->eager && b > 0 && !m->data)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_p2p_send: eager with %llu bytes but no data",
                  (unsigned long long)b);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->msg_id, 8);
  wf_buf_uint(out, m->incarnation, 8);
  wf_buf_uint(out, m->group_id, 4);
  wf_buf_uint(out, m->key, 8);
  wf_buf_uint(out, m->dtype, 1);
  wf_buf_uint(out, m->eager, 1);
  wf_buf_uint(out, 0, 2);
  wf_buf_uint(out, m->count, 8);
  if (m->eager && b > 0) wf_buf_put(out, m->data, (size_t)b);
  return wf_frame_end(out, start, src, WF_MSG_P2P_SEND);
}

weft_status wf_encode_p2p_reply(wf_buf *out, uint32_t src, const wf_p2p_reply_msg *m) {
  char why[WHY_LEN];
  const char *bad = reply_check(m, why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_p2p_reply: %s: %s", bad, why);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->msg_id, 8);
  wf_buf_uint(out, m->status, 1);
  wf_buf_uint(out, m->dtype, 1);
  wf_buf_uint(out, 0, 2);
  wf_buf_uint(out, m->count, 8);
  return wf_frame_end(out, start, src, WF_MSG_P2P_REPLY);
}

weft_status wf_decode_p2p_send(const uint8_t *p, size_t n, wf_p2p_send_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  uint64_t v = 0;
  char why[WHY_LEN];
  wf_rd_init(&r, p, n, "P2P_SEND", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u64(&r, "msg_id", &m->msg_id), st, fail);
  WF_CHECK_GOTO(wf_rd_u64(&r, "incarnation", &m->incarnation), st, fail);
  WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &m->group_id), st, fail);
  WF_CHECK_GOTO(wf_rd_u64(&r, "key", &m->key), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "dtype", &m->dtype), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "eager", &m->eager), st, fail);
  WF_CHECK_GOTO(wf_rd_uint(&r, "reserved", 2, &v), st, fail);
  if (v != 0) {
    st = wf_rd_fail(&r, "reserved", "%llu (must be 0)", (unsigned long long)v);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_u64(&r, "count", &m->count), st, fail);
  const char *bad = send_check(m, why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  uint64_t b = m->eager ? p2p_bytes(m->dtype, m->count) : 0;
  if (wf_rd_left(&r) != b) {
    st = wf_rd_fail(&r, "data", "%zu bytes follow, %llu expected", wf_rd_left(&r), (unsigned long long)b);
    goto fail;
  }
  if (b > 0) m->data = p + r.off;
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}

weft_status wf_decode_p2p_reply(const uint8_t *p, size_t n, wf_p2p_reply_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  uint64_t v = 0;
  char why[WHY_LEN];
  wf_rd_init(&r, p, n, "P2P_REPLY", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u64(&r, "msg_id", &m->msg_id), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "status", &m->status), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "dtype", &m->dtype), st, fail);
  WF_CHECK_GOTO(wf_rd_uint(&r, "reserved", 2, &v), st, fail);
  if (v != 0) {
    st = wf_rd_fail(&r, "reserved", "%llu (must be 0)", (unsigned long long)v);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_u64(&r, "count", &m->count), st, fail);
  const char *bad = reply_check(m, why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}
