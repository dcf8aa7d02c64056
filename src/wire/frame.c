/* frame.c - the frame header, the DATA sub-header, the encoders' growable
 * buffer and the bounds-checked payload reader shared by every decoder.
 *
 * Frame header (24 bytes, little-endian):
 *   off  0  u32 magic 0x54464557 ("WEFT" in memory order)
 *   off  4  u8  version (1)
 *   off  5  u8  type (wf_msg_type, 1..8)
 *   off  6  u16 flags (no flags are defined in version 1; passed through)
 *   off  8  u32 src rank of the sender
 *   off 12  u32 reserved, must be 0
 *   off 16  u64 payload length
 * Payload length limits, checked before anything is read or allocated:
 *   HELLO      58 .. 3701 (the largest valid HELLO), and <= max_ctrl
 *   PEERS      34 .. max_ctrl          (size + one minimal entry)
 *   REQUESTS    4 .. max_ctrl          (count; 0 requests is valid)
 *   RESPONSES   4 .. max_ctrl
 *   DATA       16 .. max_data          (sub-header included)
 *   HEARTBEAT   0, BYE 0
 *   ABORT       2 .. 2 + WF_ERRMSG_MAX, and <= max_ctrl
 *   STALL       2 .. 2 + WF_ERRMSG_MAX, and <= max_ctrl (same payload as ABORT)
 *
 * DATA sub-header (16 bytes): u64 seq, u32 index, u32 reserved (must be 0). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

const char *wf_coll_name(wf_coll c) {
  switch (c) {
    case WF_COLL_ALLREDUCE: return "allreduce";
    case WF_COLL_ALLGATHER: return "allgather";
    case WF_COLL_BROADCAST: return "broadcast";
    case WF_COLL_ALLTOALL: return "alltoall";
    case WF_COLL_REDUCESCATTER: return "reducescatter";
    case WF_COLL_BARRIER: return "barrier";
    case WF_COLL_JOIN: return "join";
    case WF_COLL_PERMUTE: return "permute";
    case WF_COLL_COUNT_: break;
  }
  return "unknown";
}

/* ------------------------------------------------------------------ limits */
/* host, listen >= 1 byte; then the settings digest and text, the incarnation, the device kinds */
#define WF_HELLO_MIN (3 * 4 + 3 * 2 + 1 + 1 + WF_SETTINGS_DIGEST + 2 + 8 + 4)
#define WF_HELLO_MAX /* boot_id < 64 */ \
  (3 * 4 + 3 * 2 + WF_HOST_MAX + 63 + WF_HOST_MAX + WF_SETTINGS_DIGEST + 2 + WF_SETTINGS_TEXT_MAX + 8 + 4)
#define WF_PEERS_MIN (4 + 2 + 1 + 2 + 1 + 6 * 4 + 8)

typedef struct wf_type_info {
  const char *name;
  uint64_t min_len, max_len; /* max_len UINT64_MAX: only the caller's cap */
} wf_type_info;

static const wf_type_info k_types[WF_MSG_TYPE_MAX_] = {
    [WF_MSG_HELLO] = {"HELLO", WF_HELLO_MIN, WF_HELLO_MAX},
    [WF_MSG_PEERS] = {"PEERS", WF_PEERS_MIN, UINT64_MAX},
    [WF_MSG_REQUESTS] = {"REQUESTS", 4, UINT64_MAX},
    [WF_MSG_RESPONSES] = {"RESPONSES", 4, UINT64_MAX},
    [WF_MSG_DATA] = {"DATA", WF_DATA_SUBHDR_SIZE, UINT64_MAX},
    [WF_MSG_HEARTBEAT] = {"HEARTBEAT", 0, 0},
    [WF_MSG_ABORT] = {"ABORT", 2, 2 + WF_ERRMSG_MAX},
    [WF_MSG_BYE] = {"BYE", 0, 0},
    [WF_MSG_STALL] = {"STALL", 2, 2 + WF_ERRMSG_MAX},
    [WF_MSG_CACHED] = {"CACHED", 4, UINT64_MAX},
    [WF_MSG_RESEND] = {"RESEND", 4, UINT64_MAX},
    [WF_MSG_P2P_SEND] = {"P2P_SEND", 40, 40 + WF_P2P_EAGER_MAX},
    [WF_MSG_P2P_REPLY] = {"P2P_REPLY", 20, 20},
    [WF_MSG_GROUP_JOIN] = {"GROUP_JOIN", 17, UINT64_MAX},
    [WF_MSG_GROUP_REPLY] = {"GROUP_REPLY", 27, UINT64_MAX},
    [WF_MSG_CANCEL] = {"CANCEL", 4 + 2 + 1 + 1 + 8, 4 + 2 + WF_NAME_MAX + 1 + 8},
    [WF_MSG_STEP_REQ] = {"STEP_REQ", 4 + 8, 4 + 8},
    [WF_MSG_STEP_REPLY] = {"STEP_REPLY", 4 + 8 + 4 + 8 + 2, 4 + 8 + 4 + 8 + 2 + WF_ERRMSG_MAX},
    [WF_MSG_REMOTE_CALL] = {"REMOTE_CALL", 8 + 1 + 8 + 8 + 8 + 4 + 2 + 4 + 4 + 4, UINT64_MAX},
    [WF_MSG_REMOTE_REPLY] = {"REMOTE_REPLY", 8 + 1 + 8 + 4 + 2 + 4 + 1, UINT64_MAX},
};

/* ------------------------------------------------------------------ header */
void wf_frame_hdr_encode(uint8_t out[WF_FRAME_HDR_SIZE], const wf_frame_hdr *h) {
  wf_le_put(out + 0, WF_WIRE_MAGIC, 4);
  out[4] = WF_WIRE_VERSION;
  out[5] = h->type;
  wf_le_put(out + 6, h->flags, 2);
  wf_le_put(out + 8, h->src, 4);
  wf_le_put(out + 12, 0, 4);
  wf_le_put(out + 16, h->length, 8);
}

static weft_status hdr_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static weft_status hdr_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return WEFT_ERR_PROTOCOL;
}

weft_status wf_frame_hdr_decode(const uint8_t in[WF_FRAME_HDR_SIZE], uint64_t max_ctrl, uint64_t max_data,
                                wf_frame_hdr *h, char *err, size_t errlen) {
  memset(h, 0, sizeof *h);
  uint32_t magic = (uint32_t)wf_le_get(in, 4);
  if (magic != WF_WIRE_MAGIC)
    return hdr_fail(err, errlen, "frame header: bad magic 0x%08x (want 0x%08x): not a weft peer or stream out of sync",
                    magic, WF_WIRE_MAGIC);
  if (in[4] != WF_WIRE_VERSION)
    return hdr_fail(err, errlen, "frame header: protocol version %u, this build speaks %u (mixed weft versions?)",
                    in[4], WF_WIRE_VERSION);
  uint8_t type = in[5];
  if (type == 0 || type >= WF_MSG_TYPE_MAX_ || !k_types[type].name) /* (a reserved number has no row) */
    return hdr_fail(err, errlen, "frame header: unknown message type %u", type);
  uint32_t reserved = (uint32_t)wf_le_get(in + 12, 4);
  if (reserved != 0) return hdr_fail(err, errlen, "frame header: reserved field is 0x%08x, must be 0", reserved);
  uint64_t len = wf_le_get(in + 16, 8);
  const wf_type_info *ti = &k_types[type];
  uint64_t cap = type == WF_MSG_DATA ? max_data : max_ctrl;
  if (ti->max_len < cap) cap = ti->max_len;
  if (len > cap)
    return hdr_fail(err, errlen, "frame header: %s payload length %llu exceeds the limit %llu", ti->name,
                    (unsigned long long)len, (unsigned long long)cap);
  if (len < ti->min_len)
    return hdr_fail(err, errlen, "frame header: %s payload length %llu is below the minimum %llu", ti->name,
                    (unsigned long long)len, (unsigned long long)ti->min_len);
  h->type = type;
  h->flags = (uint16_t)wf_le_get(in + 6, 2);
  h->src = (uint32_t)wf_le_get(in + 8, 4);
  h->length = len;
  return WEFT_OK;
}

/* ------------------------------------------------------------------ DATA sub-header */
void wf_data_hdr_encode(uint8_t out[WF_DATA_SUBHDR_SIZE], const wf_data_hdr *d) {
  wf_le_put(out, d->seq, 8);
  wf_le_put(out + 8, d->index, 4);
  wf_le_put(out + 12, 0, 4);
}

weft_status wf_data_hdr_decode(const uint8_t in[WF_DATA_SUBHDR_SIZE], wf_data_hdr *d, char *err, size_t errlen) {
  memset(d, 0, sizeof *d);
  uint32_t reserved = (uint32_t)wf_le_get(in + 12, 4);
  if (reserved != 0) return hdr_fail(err, errlen, "DATA sub-header: reserved field is 0x%08x, must be 0", reserved);
  d->seq = wf_le_get(in, 8);
  d->index = (uint32_t)wf_le_get(in + 8, 4);
  return WEFT_OK;
}

/* ------------------------------------------------------------------ wf_buf */
void wf_buf_free(wf_buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

void wf_buf_put(wf_buf *b, const void *p, size_t n) {
  if (b->oom || n == 0) return;
  if (n > b->cap - b->len) {
    if (n > SIZE_MAX / 2 - b->len) {
      b->oom = 1;
      return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d) {
      b->oom = 1;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

void wf_buf_uint(wf_buf *b, uint64_t v, int nbytes) {
  uint8_t tmp[8];
  wf_le_put(tmp, v, nbytes);
  wf_buf_put(b, tmp, (size_t)nbytes);
}

void wf_buf_f64(wf_buf *b, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits); /* the IEEE-754 bit pattern, NaN payloads included */
  wf_buf_uint(b, bits, 8);
}

void wf_buf_str(wf_buf *b, const char *s, size_t len) {
  wf_buf_uint(b, len, 2);
  wf_buf_put(b, s, len);
}

size_t wf_frame_begin(wf_buf *b) {
  size_t start = b->len;
  static const uint8_t zero[WF_FRAME_HDR_SIZE];
  wf_buf_put(b, zero, sizeof zero);
  return start;
}

void wf_frame_cancel(wf_buf *b, size_t start) {
  if (b->len > start) b->len = start;
}

weft_status wf_frame_end(wf_buf *b, size_t start, uint32_t src, wf_msg_type type) {
  if (b->oom) {
    wf_frame_cancel(b, start);
    return wf_err(WEFT_ERR_NO_MEMORY, "wire: out of memory encoding a %s message", k_types[type].name);
  }
  wf_frame_hdr h = {.type = (uint8_t)type, .flags = 0, .src = src, .length = b->len - start - WF_FRAME_HDR_SIZE};
  wf_frame_hdr_encode(b->data + start, &h);
  return WEFT_OK;
}

size_t wf_str_len(const char *s, size_t max) {
  /* a plain loop, not memchr: s may be a short heap string, and nothing past
   * its NUL may be read */
  size_t n = 0;
  while (n <= max && s[n]) n++;
  return n;
}

/* ------------------------------------------------------------------ reader */
void wf_rd_init(wf_rd *r, const uint8_t *p, size_t n, const char *msg, char *err, size_t errlen) {
  r->p = p;
  r->n = p ? n : 0;
  r->off = 0;
  r->err = err;
  r->errlen = errlen;
  r->msg = msg;
  r->idx = -1;
  if (err && errlen) err[0] = '\0';
}

weft_status wf_rd_fail(wf_rd *r, const char *field, const char *fmt, ...) {
  if (r->err && r->errlen) {
    int k;
    if (r->idx >= 0) k = snprintf(r->err, r->errlen, "%s[%ld].%s: ", r->msg, r->idx, field);
    else k = snprintf(r->err, r->errlen, "%s.%s: ", r->msg, field);
    if (k >= 0 && (size_t)k < r->errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return WEFT_ERR_PROTOCOL;
}

weft_status wf_rd_uint(wf_rd *r, const char *field, int nbytes, uint64_t *v) {
  if (wf_rd_left(r) < (size_t)nbytes)
    return wf_rd_fail(r, field, "truncated at byte %zu of %zu (need %d more)", r->off, r->n, nbytes);
  *v = wf_le_get(r->p + r->off, nbytes);
  r->off += (size_t)nbytes;
  return WEFT_OK;
}

weft_status wf_rd_u8(wf_rd *r, const char *field, uint8_t *v) {
  uint64_t x = 0;
  weft_status st = wf_rd_uint(r, field, 1, &x);
  *v = (uint8_t)x;
  return st;
}

weft_status wf_rd_u32(wf_rd *r, const char *field, uint32_t *v) {
  uint64_t x = 0;
  weft_status st = wf_rd_uint(r, field, 4, &x);
  *v = (uint32_t)x;
  return st;
}

weft_status wf_rd_i32(wf_rd *r, const char *field, int32_t *v) {
  uint32_t x = 0;
  weft_status st = wf_rd_u32(r, field, &x);
  memcpy(v, &x, sizeof x); /* two's complement reinterpretation without UB */
  return st;
}

weft_status wf_rd_u64(wf_rd *r, const char *field, uint64_t *v) { return wf_rd_uint(r, field, 8, v); }

weft_status wf_rd_i64(wf_rd *r, const char *field, int64_t *v) {
  uint64_t x = 0;
  weft_status st = wf_rd_uint(r, field, 8, &x);
  memcpy(v, &x, sizeof x);
  return st;
}

weft_status wf_rd_f64(wf_rd *r, const char *field, double *v) {
  uint64_t x = 0;
  weft_status st = wf_rd_uint(r, field, 8, &x);
  memcpy(v, &x, sizeof x);
  return st;
}

/* Reads the u16 length and checks it against the bounds and the bytes left;
 * on success r->off points at the bytes. */
static weft_status rd_str_head(wf_rd *r, const char *field, size_t minlen, size_t maxlen, size_t *len) {
  uint64_t n = 0;
  weft_status st = wf_rd_uint(r, field, 2, &n);
  if (st != WEFT_OK) return st;
  if (n < minlen || n > maxlen)
    return wf_rd_fail(r, field, "string length %llu out of range %zu..%zu", (unsigned long long)n, minlen, maxlen);
  if (n > wf_rd_left(r))
    return wf_rd_fail(r, field, "string of %llu bytes truncated (%zu bytes left)", (unsigned long long)n,
                      wf_rd_left(r));
  const uint8_t *nul = memchr(r->p + r->off, 0, (size_t)n);
  if (nul) return wf_rd_fail(r, field, "string contains a NUL byte at offset %zu", (size_t)(nul - (r->p + r->off)));
  *len = (size_t)n;
  return WEFT_OK;
}

weft_status wf_rd_str(wf_rd *r, const char *field, size_t minlen, size_t maxlen, char *dst) {
  size_t len = 0;
  weft_status st = rd_str_head(r, field, minlen, maxlen, &len);
  if (st != WEFT_OK) return st;
  memcpy(dst, r->p + r->off, len);
  dst[len] = '\0';
  r->off += len;
  return WEFT_OK;
}

weft_status wf_rd_str_alloc(wf_rd *r, const char *field, size_t minlen, size_t maxlen, char **out) {
  *out = NULL;
  size_t len = 0;
  weft_status st = rd_str_head(r, field, minlen, maxlen, &len);
  if (st != WEFT_OK) return st;
  char *s = malloc(len + 1);
  if (!s) {
    wf_rd_fail(r, field, "out of memory (%zu bytes)", len + 1);
    return WEFT_ERR_NO_MEMORY;
  }
  memcpy(s, r->p + r->off, len);
  s[len] = '\0';
  r->off += len;
  *out = s;
  return WEFT_OK;
}

weft_status wf_rd_count(wf_rd *r, const char *field, uint64_t count, size_t min_each) {
  /* divide rather than multiply: count * min_each may overflow */
  if (min_each && count > wf_rd_left(r) / min_each)
    return wf_rd_fail(r, field, "count %llu needs at least %llu bytes per entry, only %zu bytes left",
                      (unsigned long long)count, (unsigned long long)min_each, wf_rd_left(r));
  return WEFT_OK;
}

weft_status wf_rd_end(wf_rd *r) {
  if (r->off != r->n) {
    r->idx = -1;
    return wf_rd_fail(r, "end", "%zu trailing bytes after the message", r->n - r->off);
  }
  return WEFT_OK;
}
