/* remotemsg.c - REMOTE_CALL and REMOTE_REPLY: remote execution (src/remote/).
 *
 * REMOTE_CALL payload (little-endian):
 *   u64 call_id (>= 1), u8 op (1..10), u64 ctx, f64 timeout (>= 0), f64 idle (>= 0),
 *   i32 device (>= -1), str name (EXECUTE: 1..WF_NAME_MAX bytes; else empty),
 *   u32 n_meta (EXECUTE: <= n_out; else 0),
 *   u32 n_in, n_in x { u8 kind: 0 id {i32 owner >= 0, u64 local >= 1} | 1 tensor | 2 bulk tensor },
 *   u32 n_out, n_out x id
 * REMOTE_REPLY payload:
 *   u64 call_id (>= 1), u8 op, u64 ctx, i32 status (<= 0), str error (status < 0: 1..WF_ERRMSG_MAX; else empty),
 *   u32 n_metas, n_metas x tensor without bytes, u8 has_tensor (0/1/2), [tensor (1) | bulk tensor (2)]
 * tensor: u8 dtype, u8 ndim (<= WEFT_MAX_DIMS), i32 device (>= -1), i64 shape[ndim] (>= 0),
 *   u64 nbytes (with bytes: elements x dtype size; metadata: 0), nbytes bytes
 * bulk tensor: a tensor whose nbytes (elements x dtype size) do not follow: they travel on the
 *   point-to-point data path (remote/bulk.c)
 * Counts are at most WF_REMOTE_MAX_ARGS. One check per field runs in the encoder (WEFT_ERR_INVALID_ARGUMENT)
 * and the decoder (WEFT_ERR_PROTOCOL), so every payload that decodes re-encodes to the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

static int good_seconds(double s) { return isfinite(s) && s >= 0 && !signbit(s); }

/* The tensor's byte size from its shape (0 on overflow, with *ok 0). */
static uint64_t tensor_bytes(const wf_remote_tensor *t, int *ok) {
  uint64_t b = t->dtype < WEFT_DTYPE_COUNT_ ? weft_dtype_size((weft_dtype)t->dtype) : 0;
  *ok = b > 0 && t->ndim <= WEFT_MAX_DIMS;
  for (int i = 0; *ok && i < t->ndim; i++) {
    if (t->shape[i] < 0) *ok = 0;
    else if (t->shape[i] != 0 && b > (UINT64_MAX >> 1) / (uint64_t)t->shape[i]) *ok = 0;
    else b *= (uint64_t)t->shape[i];
  }
  return *ok ? b : 0;
}

/* NULL if t is well formed (with_data, inline or bulk: nbytes matches the shape; else 0). */
static const char *tensor_bad(const wf_remote_tensor *t, int with_data, char *why, size_t len) {
  int ok;
  uint64_t b = tensor_bytes(t, &ok);
  if (!ok) {
    snprintf(why, len, "dtype %u / ndim %u / shape out of range", t->dtype, t->ndim);
    return "tensor";
  }
  if (t->device < WEFT_DEVICE_CPU) {
    snprintf(why, len, "device %d < -1", (int)t->device);
    return "tensor.device";
  }
  if (t->nbytes != (with_data ? b : 0)) {
    snprintf(why, len, "nbytes %llu, shape says %llu", (unsigned long long)t->nbytes,
             (unsigned long long)(with_data ? b : 0));
    return "tensor.nbytes";
  }
  return NULL;
}

static const char *id_bad(const wf_remote_oid *id, char *why, size_t len) {
  if (id->owner < 0 || id->local == 0) {
    snprintf(why, len, "{%d, %llu}: owner must be >= 0 and local >= 1", (int)id->owner, (unsigned long long)id->local);
    return "id";
  }
  return NULL;
}

static const char *call_bad(const wf_remote_msg *m, char *why, size_t len) {
  if (m->call_id == 0) return snprintf(why, len, "0"), "call_id";
  if (m->op < 1 || m->op >= WF_ROP_COUNT_) return snprintf(why, len, "%u is not an operation", m->op), "op";
  if (!good_seconds(m->timeout)) return snprintf(why, len, "%g", m->timeout), "timeout";
  if (!good_seconds(m->idle)) return snprintf(why, len, "%g", m->idle), "idle";
  if (m->device < WEFT_DEVICE_CPU) return snprintf(why, len, "%d", (int)m->device), "device";
  size_t nl = wf_str_len(m->name, WF_NAME_MAX);
  if (m->op == WF_ROP_EXECUTE ? nl < 1 || nl > WF_NAME_MAX : nl != 0)
    return snprintf(why, len, "%zu bytes for op %u", nl, m->op), "name";
  if (m->n_in > WF_REMOTE_MAX_ARGS || m->n_out > WF_REMOTE_MAX_ARGS)
    return snprintf(why, len, "%u inputs, %u outputs (at most %d)", m->n_in, m->n_out, WF_REMOTE_MAX_ARGS), "count";
  if (m->op == WF_ROP_EXECUTE ? m->n_meta > m->n_out : m->n_meta != 0)
    return snprintf(why, len, "%u of %u outputs", m->n_meta, m->n_out), "n_meta";
  return NULL;
}

static const char *reply_bad(const wf_remote_msg *m, char *why, size_t len) {
  if (m->call_id == 0) return snprintf(why, len, "0"), "call_id";
  if (m->op < 1 || m->op >= WF_ROP_COUNT_) return snprintf(why, len, "%u is not an operation", m->op), "op";
  if (m->status > 0) return snprintf(why, len, "%d", (int)m->status), "status";
  size_t el = m->error ? wf_str_len(m->error, WF_ERRMSG_MAX) : 0;
  if (m->status < 0 ? el < 1 || el > WF_ERRMSG_MAX : el != 0)
    return snprintf(why, len, "%zu bytes with status %d", el, (int)m->status), "error";
  if (m->n_metas > WF_REMOTE_MAX_ARGS) return snprintf(why, len, "%u", m->n_metas), "n_metas";
  if (m->has_tensor > WF_RT_BULK) return snprintf(why, len, "%u", m->has_tensor), "has_tensor";
  return NULL;
}

/* bytes: the nbytes follow (an inline tensor), or not (metadata, a bulk tensor). */
static void put_tensor(wf_buf *b, const wf_remote_tensor *t, int bytes) {
  wf_buf_uint(b, t->dtype, 1);
  wf_buf_uint(b, t->ndim, 1);
  wf_buf_uint(b, (uint32_t)t->device, 4);
  for (int i = 0; i < t->ndim; i++) wf_buf_uint(b, (uint64_t)t->shape[i], 8);
  wf_buf_uint(b, t->nbytes, 8);
  if (bytes && t->nbytes) wf_buf_put(b, t->data, (size_t)t->nbytes);
}

static void put_id(wf_buf *b, const wf_remote_oid *id) {
  wf_buf_uint(b, (uint32_t)id->owner, 4);
  wf_buf_uint(b, id->local, 8);
}

weft_status wf_encode_remote_call(wf_buf *out, uint32_t src, const wf_remote_msg *m) {
  char why[128];
  const char *bad = m ? call_bad(m, why, sizeof why) : "message";
  for (uint32_t i = 0; !bad && i < m->n_in; i++)
    bad = m->in[i].is_inline > WF_RT_BULK ? (snprintf(why, sizeof why, "kind %u", m->in[i].is_inline), "in.kind")
          : m->in[i].is_inline  ? tensor_bad(&m->in[i].t, 1, why, sizeof why)
                                : id_bad(&m->in[i].id, why, sizeof why);
  for (uint32_t i = 0; !bad && i < m->n_out; i++) bad = id_bad(&m->out[i], why, sizeof why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_remote_call: REMOTE_CALL.%s: %s", bad, m ? why : "NULL");
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->call_id, 8);
  wf_buf_uint(out, m->op, 1);
  wf_buf_uint(out, m->ctx, 8);
  wf_buf_f64(out, m->timeout);
  wf_buf_f64(out, m->idle);
  wf_buf_uint(out, (uint32_t)m->device, 4);
  wf_buf_str(out, m->name, strlen(m->name));
  wf_buf_uint(out, m->n_meta, 4);
  wf_buf_uint(out, m->n_in, 4);
  for (uint32_t i = 0; i < m->n_in; i++) {
    wf_buf_uint(out, m->in[i].is_inline, 1);
    if (m->in[i].is_inline) put_tensor(out, &m->in[i].t, m->in[i].is_inline == WF_RT_INLINE);
    else put_id(out, &m->in[i].id);
  }
  wf_buf_uint(out, m->n_out, 4);
  for (uint32_t i = 0; i < m->n_out; i++) put_id(out, &m->out[i]);
  return wf_frame_end(out, start, src, WF_MSG_REMOTE_CALL);
}

weft_status wf_encode_remote_reply(wf_buf *out, uint32_t src, const wf_remote_msg *m) {
  char why[128];
  const char *bad = m ? reply_bad(m, why, sizeof why) : "message";
  for (uint32_t i = 0; !bad && i < m->n_metas; i++) bad = tensor_bad(&m->metas[i], 0, why, sizeof why);
  if (!bad && m->has_tensor) bad = tensor_bad(&m->tensor, 1, why, sizeof why);
  if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_remote_reply: REMOTE_REPLY.%s: %s", bad, m ? why : "NULL");
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, m->call_id, 8);
  wf_buf_uint(out, m->op, 1);
  wf_buf_uint(out, m->ctx, 8);
  wf_buf_uint(out, (uint32_t)m->status, 4);
  wf_buf_str(out, m->error ? m->error : "", m->error ? strlen(m->error) : 0);
  wf_buf_uint(out, m->n_metas, 4);
  for (uint32_t i = 0; i < m->n_metas; i++) put_tensor(out, &m->metas[i], 0);
  wf_buf_uint(out, m->has_tensor, 1);
  if (m->has_tensor) put_tensor(out, &m->tensor, m->has_tensor == WF_RT_INLINE);
  return wf_frame_end(out, start, src, WF_MSG_REMOTE_REPLY);
}

/* A count field (at most WF_REMOTE_MAX_ARGS, each entry at least min_bytes
 * of what is left) and its zeroed array of *n entries of size bytes: the
 * array (NULL for none), *st WEFT_OK; or NULL and *st the error. */
static void *rd_array(wf_rd *r, const char *field, const char *array, uint32_t *n, size_t min_bytes, size_t size,
                      weft_status *st) {
  void *a = NULL;
  if ((*st = wf_rd_u32(r, field, n)) != WEFT_OK) return NULL;
  if (*n > WF_REMOTE_MAX_ARGS) *st = wf_rd_fail(r, field, "%u > %d", *n, WF_REMOTE_MAX_ARGS);
  else if ((*st = wf_rd_count(r, field, *n, min_bytes)) == WEFT_OK && *n && !(a = calloc(*n, size)))
    *st = wf_rd_fail(r, array, "out of memory");
  return a;
}

/* with_data: 0 metadata, WF_RT_INLINE (the bytes follow), WF_RT_BULK (they do not). */
static weft_status rd_tensor(wf_rd *r, wf_remote_tensor *t, int with_data) {
  int32_t dev;
  char why[128];
  memset(t, 0, sizeof *t);
  WF_CHECK(wf_rd_u8(r, "tensor.dtype", &t->dtype));
  WF_CHECK(wf_rd_u8(r, "tensor.ndim", &t->ndim));
  if (t->dtype >= WEFT_DTYPE_COUNT_) return wf_rd_fail(r, "tensor.dtype", "%u is not a dtype", t->dtype);
  if (t->ndim > WEFT_MAX_DIMS) return wf_rd_fail(r, "tensor.ndim", "%u > %d", t->ndim, WEFT_MAX_DIMS);
  WF_CHECK(wf_rd_i32(r, "tensor.device", &dev));
  t->device = dev;
  for (int i = 0; i < t->ndim; i++) WF_CHECK(wf_rd_i64(r, "tensor.shape", &t->shape[i]));
  WF_CHECK(wf_rd_u64(r, "tensor.nbytes", &t->nbytes));
  const char *bad = tensor_bad(t, with_data, why, sizeof why);
  if (bad) return wf_rd_fail(r, bad, "%s", why);
  if (with_data == WF_RT_BULK) return WEFT_OK;
  if (t->nbytes > wf_rd_left(r))
    return wf_rd_fail(r, "tensor.data", "%llu bytes, %zu left", (unsigned long long)t->nbytes, wf_rd_left(r));
  t->data = t->nbytes ? r->p + r->off : NULL;
  r->off += (size_t)t->nbytes;
  return WEFT_OK;
}

static weft_status rd_id(wf_rd *r, wf_remote_oid *id) {
  char why[128];
  WF_CHECK(wf_rd_i32(r, "id.owner", &id->owner));
  WF_CHECK(wf_rd_u64(r, "id.local", &id->local));
  const char *bad = id_bad(id, why, sizeof why);
  return bad ? wf_rd_fail(r, bad, "%s", why) : WEFT_OK;
}

weft_status wf_decode_remote_call(const uint8_t *p, size_t n, wf_remote_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[128];
  int32_t dev;
  wf_rd_init(&r, p, n, "REMOTE_CALL", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u64(&r, "call_id", &m->call_id), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "op", &m->op), st, fail);
  WF_CHECK_GOTO(wf_rd_u64(&r, "ctx", &m->ctx), st, fail);
  WF_CHECK_GOTO(wf_rd_f64(&r, "timeout", &m->timeout), st, fail);
  WF_CHECK_GOTO(wf_rd_f64(&r, "idle", &m->idle), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "device", &dev), st, fail);
  m->device = dev;
  WF_CHECK_GOTO(wf_rd_str(&r, "name", 0, WF_NAME_MAX, m->name), st, fail);
  WF_CHECK_GOTO(wf_rd_u32(&r, "n_meta", &m->n_meta), st, fail);
  m->in = rd_array(&r, "n_in", "in", &m->n_in, 1 + 12, sizeof *m->in, &st);
  if (st != WEFT_OK) goto fail;
  for (uint32_t i = 0; i < m->n_in; i++) {
    r.idx = i;
    WF_CHECK_GOTO(wf_rd_u8(&r, "in.kind", &m->in[i].is_inline), st, fail);
    if (m->in[i].is_inline > WF_RT_BULK) {
      st = wf_rd_fail(&r, "in.kind", "%u is not 0 (id), 1 (tensor) or 2 (bulk tensor)", m->in[i].is_inline);
      goto fail;
    }
    if (m->in[i].is_inline) WF_CHECK_GOTO(rd_tensor(&r, &m->in[i].t, m->in[i].is_inline), st, fail);
    else WF_CHECK_GOTO(rd_id(&r, &m->in[i].id), st, fail);
  }
  r.idx = -1;
  m->out = rd_array(&r, "n_out", "out", &m->n_out, 12, sizeof *m->out, &st);
  if (st != WEFT_OK) goto fail;
  for (uint32_t i = 0; i < m->n_out; i++) {
    r.idx = i;
    WF_CHECK_GOTO(rd_id(&r, &m->out[i]), st, fail);
  }
  r.idx = -1;
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  const char *bad = call_bad(m, why, sizeof why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  return WEFT_OK;
fail:
  wf_remote_msg_free(m);
  return st;
}

weft_status wf_decode_remote_reply(const uint8_t *p, size_t n, wf_remote_msg *m, char *err, size_t errlen) {
  wf_rd r;
  weft_status st;
  char why[128];
  int32_t status;
  wf_rd_init(&r, p, n, "REMOTE_REPLY", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u64(&r, "call_id", &m->call_id), st, fail);
  WF_CHECK_GOTO(wf_rd_u8(&r, "op", &m->op), st, fail);
  WF_CHECK_GOTO(wf_rd_u64(&r, "ctx", &m->ctx), st, fail);
  WF_CHECK_GOTO(wf_rd_i32(&r, "status", &status), st, fail);
  m->status = status;
  WF_CHECK_GOTO(wf_rd_str_alloc(&r, "error", 0, WF_ERRMSG_MAX, &m->error), st, fail);
  if (m->error && !m->error[0]) {
    free(m->error);
    m->error = NULL;
  }
  m->metas = rd_array(&r, "n_metas", "metas", &m->n_metas, 14, sizeof *m->metas, &st);
  if (st != WEFT_OK) goto fail;
  for (uint32_t i = 0; i < m->n_metas; i++) {
    r.idx = i;
    WF_CHECK_GOTO(rd_tensor(&r, &m->metas[i], 0), st, fail);
  }
  r.idx = -1;
  WF_CHECK_GOTO(wf_rd_u8(&r, "has_tensor", &m->has_tensor), st, fail);
  if (m->has_tensor > WF_RT_BULK) {
    st = wf_rd_fail(&r, "has_tensor", "%u is not 0, 1 or 2", m->has_tensor);
    goto fail;
  }
  if (m->has_tensor) WF_CHECK_GOTO(rd_tensor(&r, &m->tensor, m->has_tensor), st, fail);
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  const char *bad = reply_bad(m, why, sizeof why);
  if (bad) {
    st = wf_rd_fail(&r, bad, "%s", why);
    goto fail;
  }
  return WEFT_OK;
fail:
  wf_remote_msg_free(m);
  return st;
}

void wf_remote_msg_free(wf_remote_msg *m) {
  if (!m) return;
  free(m->in);
  free(m->out);
  free(m->error);
  free(m->metas);
  memset(m, 0, sizeof *m);
}
