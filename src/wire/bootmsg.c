/* bootmsg.c - the bootstrap messages HELLO and PEERS (see bootstrap.h).
 *
 * Payload layouts (little-endian; str = u16 length + bytes, no NUL byte):
 *
 * HELLO (66..3709 bytes):
 *   u32 rank             < size
 *   u32 size             1..WF_MAX_RANKS
 *   u32 pid
 *   str host             1..WF_HOST_MAX bytes
 *   str boot_id          0..63 bytes ("" when unknown)
 *   str listen_addr      1..WF_HOST_MAX bytes ("ip:port")
 *   u8[32] settings_digest  SHA-256 of the agreed settings' full text
 *   str settings         0..WF_SETTINGS_TEXT_MAX bytes: that text ("NAME=value\n" lines)
 *   u64 incarnation      the rank's random number for this weft_init (0: none, tests)
 *   u32 device_kinds     bits 1 << WEFT_DEVICE_KIND_* (only WF_DEVICE_KINDS_MASK's)
 *
 * PEERS:
 *   u32 size             1..WF_MAX_RANKS, then `size` entries in rank order:
 *     str host           1..WF_HOST_MAX bytes
 *     str listen_addr    1..WF_HOST_MAX bytes
 *     u32 pid
 *     i32 local_rank     0 <= local_rank < local_size
 *     i32 local_size     1..size
 *     i32 cross_rank     0 <= cross_rank < cross_size
 *     i32 cross_size     1..size
 *     u64 incarnation    as its HELLO said
 *     u32 device_kinds   as HELLO's
 *
 * The same field checks run in the encoder (a bad field is a bug here:
 * WEFT_ERR_INVALID_ARGUMENT) and in the decoder (a bad field is a bad peer:
 * WEFT_ERR_PROTOCOL), so whatever decodes re-encodes byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

#define BOOT_ID_MAX (sizeof(((wf_hello_msg *)0)->boot_id) - 1)
#define PEER_MIN_BYTES (2 + 1 + 2 + 1 + 6 * 4 + 8) /* one entry with 1-byte strings */

/* Checks a fixed-array string field: NUL-terminated, minlen..maxlen bytes. */
static int str_ok(const char *s, size_t minlen, size_t maxlen, char *why, size_t whylen) {
  size_t n = wf_str_len(s, maxlen);
  if (n > maxlen) snprintf(why, whylen, "not NUL-terminated within %zu bytes", maxlen + 1);
  else if (n < minlen) snprintf(why, whylen, "length %zu below the minimum %zu", n, minlen);
  else return 1;
  return 0;
}

/* Each check returns the name of the first bad field (with the reason in
 * why) or NULL when the message is valid. */
static const char *hello_check(const wf_hello_msg *m, char *why, size_t whylen) {
  if (m->size < 1 || m->size > WF_MAX_RANKS) {
    snprintf(why, whylen, "%u out of range 1..%u", m->size, (unsigned)WF_MAX_RANKS);
    return "size";
  }
  if (m->rank >= m->size) {
    snprintf(why, whylen, "%u out of range 0..%u (size %u)", m->rank, m->size - 1, m->size);
    return "rank";
  }
  if (!str_ok(m->host, 1, WF_HOST_MAX, why, whylen)) return "host";
  if (!str_ok(m->boot_id, 0, BOOT_ID_MAX, why, whylen)) return "boot_id";
  if (!str_ok(m->listen_addr, 1, WF_HOST_MAX, why, whylen)) return "listen_addr";
  if (!str_ok(m->settings, 0, WF_SETTINGS_TEXT_MAX, why, whylen)) return "settings";
  if (m->device_kinds & ~WF_DEVICE_KINDS_MASK) {
    snprintf(why, whylen, "0x%x has bits outside 0x%x", m->device_kinds, WF_DEVICE_KINDS_MASK);
    return "device_kinds";
  }
  return NULL;
}

static const char *peer_check(const wf_peer_info *p, uint32_t size, char *why, size_t whylen) {
  if (!str_ok(p->host, 1, WF_HOST_MAX, why, whylen)) return "host";
  if (!str_ok(p->listen_addr, 1, WF_HOST_MAX, why, whylen)) return "listen_addr";
  if (p->local_size < 1 || (uint32_t)p->local_size > size) {
    snprintf(why, whylen, "%d out of range 1..%u", p->local_size, size);
    return "local_size";
  }
  if (p->local_rank < 0 || p->local_rank >= p->local_size) {
    snprintf(why, whylen, "%d out of range 0..%d", p->local_rank, p->local_size - 1);
    return "local_rank";
  }
  if (p->cross_size < 1 || (uint32_t)p->cross_size > size) {
    snprintf(why, whylen, "%d out of range 1..%u", p->cross_size, size);
    return "cross_size";
  }
  if (p->cross_rank < 0 || p->cross_rank >= p->cross_size) {
    snprintf(why, whylen, "%d out of range 0..%d", p->cross_rank, p->cross_size - 1);
    return "cross_rank";
  }
  if (p->device_kinds & ~WF_DEVICE_KINDS_MASK) {
    snprintf(why, whylen, "0x%x has bits outside 0x%x", p->device_kinds, WF_DEVICE_KINDS_MASK);
    return "device_kinds";
  }
  return NULL;
}

/* ------------------------------------------------------------------ HELLO */
weft_status wf_encode_hello(wf_buf *out, uint32_t src, const wf_hello_msg *m) {
  char why[160];
  const char *bad = hello_check(m, why, sizeof why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_hello: HELLO.%s: %s", bad, why);
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->rank, 4);
  wf_buf_uint(out, m->size, 4);
  wf_buf_uint(out, m->pid, 4);
  wf_buf_str(out, m->host, strlen(m->host));
  wf_buf_str(out, m->boot_id, strlen(m->boot_id));
  wf_buf_str(out, m->listen_addr, strlen(m->listen_addr));
  wf_buf_put(out, m->settings_digest, sizeof m->settings_digest);
  wf_buf_str(out, m->settings, strlen(m->settings));
  wf_buf_uint(out, m->incarnation, 8);
  wf_buf_uint(out, m->device_kinds, 4);
  return wf_frame_end(out, start, src, WF_MSG_HELLO);
}

weft_status wf_decode_hello(const uint8_t *p, size_t n, wf_hello_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[160];
  wf_rd_init(&r, p, n, "HELLO", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "rank", &m->rank), st, fail);
  WF_CHECK_GOTO(wf_rd_u32(&r, "size", &m->size), st, fail);
  WF_CHECK_GOTO(wf_rd_u32(&r, "pid", &m->pid), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "host", 1, WF_HOST_MAX, m->host), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "boot_id", 0, BOOT_ID_MAX, m->boot_id), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "listen_addr", 1, WF_HOST_MAX, m->listen_addr), st, fail);
  for (size_t i = 0; i < sizeof m->settings_digest; i++)
    WF_CHECK_GOTO(wf_rd_u8(&r, "settings_digest", &m->settings_digest[i]), st, fail);
  WF_CHECK_GOTO(wf_rd_str(&r, "settings", 0, WF_SETTINGS_TEXT_MAX, m->settings), st, fail);
  WF_CHECK_GOTO(wf_rd_u64(&r, "incarnation", &m->incarnation), st, fail);
  WF_CHECK_GOTO(wf_rd_u32(&r, "device_kinds", &m->device_kinds), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  const char *bad = hello_check(m, why, sizeof why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  return WEFT_OK;
fail:
  memset(m, 0, sizeof *m);
  return st;
}

/* ------------------------------------------------------------------ PEERS */
weft_status wf_encode_peers(wf_buf *out, uint32_t src, const wf_peers_msg *m) {
  char why[160];
  if (m->size < 1 || m->size > WF_MAX_RANKS)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_peers: PEERS.size %u out of range 1..%u", m->size,
                  (unsigned)WF_MAX_RANKS);
  if (!m->peers) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_peers: PEERS.peers is NULL");
  for (uint32_t i = 0; i < m->size; i++) {
    const char *bad = peer_check(&m->peers[i], m->size, why, sizeof why);
    if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_peers: PEERS[%u].%s: %s", i, bad, why);
  }
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->size, 4);
  for (uint32_t i = 0; i < m->size; i++) {
    const wf_peer_info *e = &m->peers[i];
    wf_buf_str(out, e->host, strlen(e->host));
    wf_buf_str(out, e->listen_addr, strlen(e->listen_addr));
    wf_buf_uint(out, e->pid, 4);
    wf_buf_uint(out, (uint32_t)e->local_rank, 4);
    wf_buf_uint(out, (uint32_t)e->local_size, 4);
    wf_buf_uint(out, (uint32_t)e->cross_rank, 4);
    wf_buf_uint(out, (uint32_t)e->cross_size, 4);
    wf_buf_uint(out, e->incarnation, 8);
    wf_buf_uint(out, e->device_kinds, 4);
  }
  return wf_frame_end(out, start, src, WF_MSG_PEERS);
}

weft_status wf_decode_peers(const uint8_t *p, size_t n, wf_peers_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[160];
  uint32_t size = 0;
  wf_rd_init(&r, p, n, "PEERS", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "size", &size), st, fail);
  if (size < 1 || size > WF_MAX_RANKS) {
    st = wf_rd_fail(&r, "size", "%u out of range 1..%u", size, (unsigned)WF_MAX_RANKS);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_count(&r, "size", size, PEER_MIN_BYTES), st, fail);
  m->peers = calloc(size, sizeof *m->peers);
  if (!m->peers) {
    st = WEFT_ERR_NO_MEMORY;
    wf_rd_fail(&r, "peers", "out of memory (%u entries)", size);
    goto fail;
  }
  m->size = size;
  for (uint32_t i = 0; i < size; i++) {
    wf_peer_info *e = &m->peers[i];
    r.idx = (long)i;
    WF_CHECK_GOTO(wf_rd_str(&r, "host", 1, WF_HOST_MAX, e->host), st, fail);
    WF_CHECK_GOTO(wf_rd_str(&r, "listen_addr", 1, WF_HOST_MAX, e->listen_addr), st, fail);
    WF_CHECK_GOTO(wf_rd_u32(&r, "pid", &e->pid), st, fail);
    WF_CHECK_GOTO(wf_rd_i32(&r, "local_rank", &e->local_rank), st, fail);
    WF_CHECK_GOTO(wf_rd_i32(&r, "local_size", &e->local_size), st, fail);
    WF_CHECK_GOTO(wf_rd_i32(&r, "cross_rank", &e->cross_rank), st, fail);
    WF_CHECK_GOTO(wf_rd_i32(&r, "cross_size", &e->cross_size), st, fail);
    WF_CHECK_GOTO(wf_rd_u64(&r, "incarnation", &e->incarnation), st, fail);
    WF_CHECK_GOTO(wf_rd_u32(&r, "device_kinds", &e->device_kinds), st, fail);
    const char *bad = peer_check(e, size, why, sizeof why);
    if (bad) {
      st = wf_rd_fail(&r, bad, "%s", why);
      goto fail;
    }
  }
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  wf_peers_msg_free(m);
  return st;
}

void wf_peers_msg_free(wf_peers_msg *m) {
  free(m->peers);
  memset(m, 0, sizeof *m);
}
