/* cancelmsg.c - CANCEL: a rank withdraws its request for a name that is
 * still negotiating, asked (weft_request_cancel) or because the request's
 * own deadline passed (weft_op_options.timeout_seconds); negotiate/coord.h's
 * wf_coord_withdraw decides.
 *
 * Payload layout (little-endian):
 *   u32 group_id
 *   str name             1..WF_NAME_MAX bytes (u16 length + bytes)
 *   u8  reason           0 asked, 1 timeout
 *   f64 seconds          timeout: the request's timeout, finite and > 0; asked: 0
 *
 * One check runs in the encoder (WEFT_ERR_INVALID_ARGUMENT) and the decoder
 * (WEFT_ERR_PROTOCOL), so every payload that decodes re-encodes to the same
 * bytes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

static const char *check(const wf_cancel_msg *m, char *why, size_t len) {
  if (m->reason != WF_CANCEL_ASKED && m->reason != WF_CANCEL_TIMEOUT) {
    snprintf(why, len, "%u is not 0 (asked) or 1 (timeout)", m->reason);
    return "reason";
  }
  int ok = m->reason == WF_CANCEL_TIMEOUT ? isfinite(m->seconds) && m->seconds > 0 : m->seconds == 0 && !signbit(m->seconds);
  if (!ok) {
    snprintf(why, len, "%g does not suit reason %u", m->seconds, m->reason);
    return "seconds";
  }
  return NULL;
}

weft_status wf_encode_cancel(wf_buf *out, uint32_t src, const wf_cancel_msg *m) {
  char why[96];
  size_t n = m ? wf_str_len(m->name, WF_NAME_MAX) : 0;
  if (!m || n < 1 || n > WF_NAME_MAX)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cancel: CANCEL.name must be 1..%d bytes", WF_NAME_MAX);
  const char *bad = check(m, why, sizeof why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cancel: CANCEL.%s: %s", bad, why);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->group_id, 4);
  wf_buf_str(out, m->name, n);
  wf_buf_uint(out, m->reason, 1);
  wf_buf_f64(out, m->seconds);
  return wf_frame_end(out, start, src, WF_MSG_CANCEL);
}

weft_status wf_decode_cancel(const uint8_t *p, size_t n, wf_cancel_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[96];
  wf_rd_init(&r, p, n, "CANCEL", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &m->group_id), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "name", 1, WF_NAME_MAX, m->name), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "reason", &m->reason), st, fail);
  WF_CHECK_GOTO(wf_rd_f64(&r, "seconds", &m->seconds), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  const char *bad = check(m, why, sizeof why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}
