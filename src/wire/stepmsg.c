/* stepmsg.c - STEP_REQ / STEP_REPLY: a rank asks its group's leader for the
 * step sequence of a graph key (weft_step_next, weft_step_refresh; seed
 * 004's GetStepSequenceRequest/Response), engine/steps.c.
 *
 * Payload layouts (little-endian):
 *   STEP_REQ    u32 group_id, i64 graph_key
 *   STEP_REPLY  u32 group_id, i64 graph_key, i32 status, i64 step_id,
 *               str error (u16 length + bytes)
 * A REPLY is OK (status 0, step_id 0..WF_STEP_ID_MASK, error empty) or an
 * error (status -1..-15, a weft_status; step_id 0; error 1..WF_ERRMSG_MAX
 * bytes). One check runs in the encoder (WEFT_ERR_INVALID_ARGUMENT) and the
 * decoder (WEFT_ERR_PROTOCOL), so every payload that decodes re-encodes to
 * the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

/* NULL if the reply's fields agree; else the field that does not, and why. */
static const char *check_reply(const wf_step_msg *m, size_t elen, char *why, size_t len) {
  if (m->status > 0 || m->status < WEFT_ERR_CANCELLED) {
    snprintf(why, len, "%d is not WEFT_OK or a weft_status error", m->status);
    return "status";
  }
  if (m->status == WEFT_OK ? (m->step_id < 0 || (uint64_t)m->step_id > WF_STEP_ID_MASK) : m->step_id != 0) {
    snprintf(why, len, "%lld does not suit status %d", (long long)m->step_id, m->status);
    return "step_id";
  }
  if ((m->status == WEFT_OK) != (elen == 0)) {
    snprintf(why, len, "%zu bytes with status %d (an error has one, OK none)", elen, m->status);
    return "error";
  }
  return NULL;
}

weft_status wf_encode_step_req(wf_buf *out, uint32_t src, const wf_step_msg *m) {
  if (!m) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_step_req: no message");
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->group_id, 4);
  wf_buf_uint(out, (uint64_t)m->graph_key, 8);
  return wf_frame_end(out, start, src, WF_MSG_STEP_REQ);
}

weft_status wf_encode_step_reply(wf_buf *out, uint32_t src, const wf_step_msg *m) {
  char why[128];
  size_t elen = m && m->error ? wf_str_len(m->error, WF_ERRMSG_MAX) : 0;
  if (!m || elen > WF_ERRMSG_MAX)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_step_reply: STEP_REPLY.error is over %d bytes", WF_ERRMSG_MAX);
  const char *bad = check_reply(m, elen, why, sizeof why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_step_reply: STEP_REPLY.%s: %s", bad, why);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->group_id, 4);
  wf_buf_uint(out, (uint64_t)m->graph_key, 8);
  wf_buf_uint(out, (uint32_t)m->status, 4);
  wf_buf_uint(out, (uint64_t)m->step_id, 8);
  wf_buf_str(out, m->error ? m->error : "", elen);
  return wf_frame_end(out, start, src, WF_MSG_STEP_REPLY);
}

weft_status wf_decode_step_req(const uint8_t *p, size_t n, wf_step_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  wf_rd_init(&r, p, n, "STEP_REQ", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &m->group_id), st, fail);
  WF_CHECK_GOTO(wf_rd_i64(&r, "graph_key", &m->graph_key), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}

weft_status wf_decode_step_reply(const uint8_t *p, size_t n, wf_step_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[128];
  wf_rd_init(&r, p, n, "STEP_REPLY", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &m->group_id), st, fail);
  WF_CHECK_GOTO(wf_rd_i64(&r, "graph_key", &m->graph_key), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "status", &m->status), st, fail);
  WF_CHECK_GOTO(wf_rd_i64(&r, "step_id", &m->step_id), st, fail);
  WF_CHECK_GOTO(wf_rd_str_alloc(&r, "error", 0, WF_ERRMSG_MAX, &m->error), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  size_t elen = m->error ? strlen(m->error) : 0;
  const char *bad = check_reply(m, elen, why, sizeof why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  if (m->error && !m->error[0]) {
    free(m->error);
    m->error = NULL;
  }
  return WEFT_OK;
fail:
  free(m->error);
  memset(m, 0, sizeof *m);
  return st;
}

void wf_step_msg_free(wf_step_msg *m) {
  if (!m) return;
  free(m->error);
  m->error = NULL;
}
