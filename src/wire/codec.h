/* codec.h - private helpers shared by the wire encoders and decoders
 * (frame.c, bootmsg.c, ctrlmsg.c). Not for use outside src/wire: everything
 * else goes through wire.h.
 *
 * Writing: appends to a wf_buf never fail on the spot; an allocation failure
 * sets buf->oom and later appends are dropped, so an encoder writes the
 * whole frame and checks once at the end (wf_frame_end).
 *
 * Reading: a wf_rd walks one payload. Every read checks the bytes left first;
 * the first failure formats "MSG[idx].field: why" into the caller's err
 * buffer and returns WEFT_ERR_PROTOCOL, so decoders just propagate it. */
#ifndef WF_WIRE_CODEC_H
#define WF_WIRE_CODEC_H
#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/* ---- little-endian scalars on raw bytes (no alignment assumed) */
static inline void wf_le_put(uint8_t *out, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t wf_le_get(const uint8_t *in, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; i++) v |= (uint64_t)in[i] << (8 * i);
  return v;
}

/* ---- writer */
void wf_buf_put(wf_buf *b, const void *p, size_t n);
void wf_buf_uint(wf_buf *b, uint64_t v, int nbytes); /* nbytes 1, 2, 4 or 8 */
void wf_buf_f64(wf_buf *b, double v);
/* u16 length + bytes; the caller has checked len <= UINT16_MAX. */
void wf_buf_str(wf_buf *b, const char *s, size_t len);

/* Reserves room for a frame header; returns the frame's start offset. */
size_t wf_frame_begin(wf_buf *b);
/* Writes the header of the frame started at start (length = bytes appended
 * since). On OOM drops the partial frame (len back to start) and returns
 * WEFT_ERR_NO_MEMORY (with the thread's last error set). */
weft_status wf_frame_end(wf_buf *b, size_t start, uint32_t src, wf_msg_type type);
/* Drops a partial frame (an encoder found a bad field midway). */
void wf_frame_cancel(wf_buf *b, size_t start);

/* Length of s if it is NUL-terminated within max+1 bytes, else max+1 (so
 * callers can test "> max" without reading past a fixed-size array). */
size_t wf_str_len(const char *s, size_t max);

/* ---- reader */
typedef struct wf_rd {
  const uint8_t *p;
  size_t n, off;
  char *err;
  size_t errlen;
  const char *msg; /* "HELLO", "REQUESTS", ... for error messages */
  long idx;        /* entry index shown as MSG[idx], or -1 */
} wf_rd;

void wf_rd_init(wf_rd *r, const uint8_t *p, size_t n, const char *msg, char *err, size_t errlen);
static inline size_t wf_rd_left(const wf_rd *r) { return r->n - r->off; }

/* Formats "MSG[idx].field: <fmt>" into r->err; returns WEFT_ERR_PROTOCOL. */
weft_status wf_rd_fail(wf_rd *r, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

weft_status wf_rd_uint(wf_rd *r, const char *field, int nbytes, uint64_t *v);
weft_status wf_rd_u8(wf_rd *r, const char *field, uint8_t *v);
weft_status wf_rd_u32(wf_rd *r, const char *field, uint32_t *v);
weft_status wf_rd_i32(wf_rd *r, const char *field, int32_t *v);
weft_status wf_rd_u64(wf_rd *r, const char *field, uint64_t *v);
weft_status wf_rd_i64(wf_rd *r, const char *field, int64_t *v);
weft_status wf_rd_f64(wf_rd *r, const char *field, double *v);

/* A string of minlen..maxlen bytes without NUL, copied into dst (which has
 * room for maxlen + 1) and NUL-terminated. */
weft_status wf_rd_str(wf_rd *r, const char *field, size_t minlen, size_t maxlen, char *dst);
/* Same, into a fresh malloc'd string (*out stays NULL on error). */
weft_status wf_rd_str_alloc(wf_rd *r, const char *field, size_t minlen, size_t maxlen, char **out);

/* Checks that count entries of at least min_each bytes each can fit in what
 * is left, before the caller allocates count of anything. */
weft_status wf_rd_count(wf_rd *r, const char *field, uint64_t count, size_t min_each);
/* Rejects trailing bytes. */
weft_status wf_rd_end(wf_rd *r);

#endif
