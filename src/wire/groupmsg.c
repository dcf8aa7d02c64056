/* groupmsg.c - the two messages of group resolution through the leader
 * (negotiate/resolve.h): GROUP_JOIN (a rank joins a keyed group, or asks to
 * create a group of listed members) and GROUP_REPLY (the leader's answer:
 * the members, or an error naming ranks and values).
 *
 * Payload layouts (little-endian; str = u16 length + bytes):
 *
 * GROUP_JOIN (17 bytes and up):
 *   u8  kind             0 keyed, 1 listed
 *   i32 key              listed: 0
 *   i32 size             1..WF_MAX_RANKS (listed: = nranks)
 *   i32 device           -1 (host), WEFT_DEVICE_KIND_CUDA or _SIM; listed: -1
 *   u32 nranks           keyed: 0; listed: = size
 *   nranks x u32 rank    ascending, distinct, < WF_MAX_RANKS
 *
 * GROUP_REPLY (27 bytes and up):
 *   u8  kind, i32 key, i32 size, i32 device   as the JOIN answered
 *   i32 status           0, or a weft_status < 0
 *   u32 id               keyed and status 0: 1..2^24-1; else 0
 *   u32 nranks           keyed, status 0: = size (the members); listed: = size (the list)
 *   nranks x u32 rank    ascending, distinct, < WF_MAX_RANKS
 *   str error            status < 0: 1..WF_ERRMSG_MAX bytes; else empty
 *
 * One check runs in the encoder (WEFT_ERR_INVALID_ARGUMENT) and the decoder
 * (WEFT_ERR_PROTOCOL), so every payload that decodes re-encodes to the same
 * bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

#define WHY_LEN 160
#define ID_MAX 0xffffffu /* group ids are 24 bits (exec.c's data tags) */

static const char *check(const wf_group_msg *m, int reply, char *why) {
  if (m->kind != WF_GROUP_KEYED && m->kind != WF_GROUP_LISTED) {
    snprintf(why, WHY_LEN, "%u is not 0 (keyed) or 1 (listed)", m->kind);
    return "kind";
  }
  int keyed = m->kind == WF_GROUP_KEYED;
  if (m->size < 1 || m->size > WF_MAX_RANKS) {
    snprintf(why, WHY_LEN, "%d out of range 1..%d", m->size, WF_MAX_RANKS);
    return "size";
  }
  if (!keyed && m->key != 0) {
    snprintf(why, WHY_LEN, "%d in a listed group (must be 0)", m->key);
    return "key";
  }
  if (keyed ? m->device != WEFT_DEVICE_CPU && m->device != WEFT_DEVICE_KIND_CUDA && m->device != WEFT_DEVICE_KIND_SIM
            : m->device != WEFT_DEVICE_CPU) {
    snprintf(why, WHY_LEN, "%d is not a device type here", m->device);
    return "device";
  }
  int ok = !reply || m->status == 0;
  if (reply && m->status > 0) {
    snprintf(why, WHY_LEN, "%d (must be 0 or an error)", m->status);
    return "status";
  }
  if (!reply && m->status != 0) {
    snprintf(why, WHY_LEN, "%d in a JOIN", m->status);
    return "status";
  }
  int want_id = reply && keyed && ok;
  if (want_id ? m->id < 1 || m->id > ID_MAX : m->id != 0) {
    snprintf(why, WHY_LEN, "%u (%s)", m->id, want_id ? "must be 1..16777215" : "must be 0");
    return "id";
  }
  uint32_t want_n = keyed ? (reply && ok ? (uint32_t)m->size : 0) : (uint32_t)m->size;
  if (m->nranks != want_n) {
    snprintf(why, WHY_LEN, "%u, expected %u", m->nranks, want_n);
    return "nranks";
  }
  if (m->nranks && !m->ranks) {
    snprintf(why, WHY_LEN, "NULL");
    return "ranks";
  }
  for (uint32_t i = 0; i < m->nranks; i++)
    if (m->ranks[i] >= WF_MAX_RANKS || (i && m->ranks[i] <= m->ranks[i - 1])) {
      snprintf(why, WHY_LEN, "entry %u (%u) is not ascending below %d", i, m->ranks[i], WF_MAX_RANKS);
      return "ranks";
    }
  size_t elen = m->error ? wf_str_len(m->error, WF_ERRMSG_MAX) : 0;
  if (reply && !ok && (elen < 1 || elen > WF_ERRMSG_MAX)) {
    snprintf(why, WHY_LEN, "an error needs a message of 1..%d bytes", WF_ERRMSG_MAX);
    return "error";
  }
  if ((!reply || ok) && elen) {
    snprintf(why, WHY_LEN, "a message without an error");
    return "error";
  }
  return NULL;
}

static weft_status encode(wf_buf *out, uint32_t src, const wf_group_msg *m, int reply) {
  char why[WHY_LEN];
  const char *fn = reply ? "wf_encode_group_reply" : "wf_encode_group_join";
  if (!m) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: NULL message", fn);
  const char *bad = check(m, reply, why);
  if (bad)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "%s: %s.%s: %s", fn, reply ? "GROUP_REPLY" : "GROUP_JOIN", bad, why);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->kind, 1);
  wf_buf_uint(out, (uint32_t)m->key, 4);
  wf_buf_uint(out, (uint32_t)m->size, 4);
  wf_buf_uint(out, (uint32_t)m->device, 4);
  if (reply) {
    wf_buf_uint(out, (uint32_t)m->status, 4);
    wf_buf_uint(out, m->id, 4);
  }
  wf_buf_uint(out, m->nranks, 4);
  for (uint32_t i = 0; i < m->nranks; i++) wf_buf_uint(out, m->ranks[i], 4);
  if (reply) wf_buf_str(out, m->error ? m->error : "", m->error ? strlen(m->error) : 0);
  return wf_frame_end(out, start, src, reply ? WF_MSG_GROUP_REPLY : WF_MSG_GROUP_JOIN);
}

weft_status wf_encode_group_join(wf_buf *out, uint32_t src, const wf_group_msg *m) { return encode(out, src, m, 0); }
weft_status wf_encode_group_reply(wf_buf *out, uint32_t src, const wf_group_msg *m) { return encode(out, src, m, 1); }

static weft_status decode(const uint8_t *p, size_t n, wf_group_msg *m, int reply, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[WHY_LEN];
  wf_rd_init(&r, p, n, reply ? "GROUP_REPLY" : "GROUP_JOIN", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u8(&r, "kind", &m->kind), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "key", &m->key), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "size", &m->size), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "device", &m->device), st, fail);
  if (reply) {
    WF_CHECK_GOTO(wf_rd_i32(&r, "status", &m->status), st, fail);
    WF_CHECK_GOTO(wf_rd_u32(&r, "id", &m->id), st, fail);
  }
  uint32_t nranks = 0;
  WF_CHECK_GOTO(wf_rd_u32(&r, "nranks", &nranks), st, fail);
  if (nranks > WF_MAX_RANKS) {
    st = wf_rd_fail(&r, "nranks", "%u over %d", nranks, WF_MAX_RANKS);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_count(&r, "nranks", nranks, 4), st, fail);
  if (nranks) {
    m->ranks = malloc(sizeof(uint32_t) * nranks);
    if (!m->ranks) {
      st = WEFT_ERR_NO_MEMORY;
      wf_rd_fail(&r, "ranks", "out of memory (%u entries)", nranks);
      goto fail;
    }
  }
  m->nranks = nranks;
  for (uint32_t i = 0; i < nranks; i++) WF_CHECK_GOTO(wf_rd_u32(&r, "ranks", &m->ranks[i]), st, fail);
  if (reply) {
    WF_CHECK_GOTO(wf_rd_str_alloc(&r, "error", 0, WF_ERRMSG_MAX, &m->error), st, fail);
    if (m->error && !m->error[0]) {
      free(m->error);
      m->error = NULL;
    }
  }
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  const char *bad = check(m, reply, why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  return WEFT_OK;
fail:
  wf_group_msg_free(m);
  return st;
}

weft_status wf_decode_group_join(const uint8_t *p, size_t n, wf_group_msg *m, char *err, size_t errlen) {
  return decode(p, n, m, 0, err, errlen);
}
weft_status wf_decode_group_reply(const uint8_t *p, size_t n, wf_group_msg *m, char *err, size_t errlen) {
  return decode(p, n, m, 1, err, errlen);
}

void wf_group_msg_free(wf_group_msg *m) {
  free(m->ranks);
  free(m->error);
  memset(m, 0, sizeof *m);
}
