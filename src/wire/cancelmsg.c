/* cancelmsg.c - CANCEL: a rank withdraws its request for a name that is
 * still negotiating (weft_request_cancel; negotiate/coord.h's
 * wf_coord_cancel decides).
 *
 * Payload layout (little-endian):
 *   u32 group_id
 *   str name             1..WF_NAME_MAX bytes (u16 length + bytes)
 *
 * One check runs in the encoder (WEFT_ERR_INVALID_ARGUMENT) and the decoder
 * (WEFT_ERR_PROTOCOL), so every payload that decodes re-encodes to the same
 * bytes. */
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

weft_status wf_encode_cancel(wf_buf *out, uint32_t src, const wf_cancel_msg *m) {
  size_t n = m ? wf_str_len(m->name, WF_NAME_MAX) : 0;
  if (!m || n < 1 || n > WF_NAME_MAX)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cancel: CANCEL.name must be 1..%d bytes", WF_NAME_MAX);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->group_id, 4);
  wf_buf_str(out, m->name, n);
  return wf_frame_end(out, start, src, WF_MSG_CANCEL);
}

weft_status wf_decode_cancel(const uint8_t *p, size_t n, wf_cancel_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  wf_rd_init(&r, p, n, "CANCEL", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &m->group_id), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "name", 1, WF_NAME_MAX, m->name), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}
