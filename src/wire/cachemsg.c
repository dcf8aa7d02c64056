/* cachemsg.c - the response cache's two messages, CACHED (a rank names
 * tensors ready here by their cache id instead of their full description)
 * and RESEND (the coordinator could not resolve some ids: the rank sends
 * those tensors' full REQUESTS). See negotiate/cache.h for the protocol.
 *
 * Payload layout (both; little-endian):
 *   u32 count            1..WF_MAX_BATCH-like bound: at most 4096
 *   count x {
 *     u32 group_id
 *     u32 id             < WF_CACHE_MAX_IDS
 *     u64 epoch          >= 1
 *   }
 *
 * As everywhere in src/wire, one check runs in the encoder
 * (WEFT_ERR_INVALID_ARGUMENT) and the decoder (WEFT_ERR_PROTOCOL), so every
 * payload that decodes re-encodes to the same bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "wire/codec.h"

#define REF_BYTES 16
#define REFS_MAX 4096 /* entries in one frame (the engine splits larger batches) */
#define WHY_LEN 160

static const char *ref_check(const wf_cache_ref *r, char *why) {
  if (r->id >= WF_CACHE_MAX_IDS) {
    snprintf(why, WHY_LEN, "%u over the maximum %u", r->id, (unsigned)WF_CACHE_MAX_IDS - 1);
    return "id";
  }
  if (r->epoch == 0) {
    snprintf(why, WHY_LEN, "0 (epochs start at 1)");
    return "epoch";
  }
  return NULL;
}

weft_status wf_encode_cache_refs(wf_buf *out, uint32_t src, wf_msg_type type, const wf_cache_ref *refs,
                                 uint32_t count) {
  char why[WHY_LEN];
  if (type != WF_MSG_CACHED && type != WF_MSG_RESEND)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cache_refs: type %d is not CACHED or RESEND", (int)type);
  if (count < 1 || count > REFS_MAX || !refs)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cache_refs: count %u (must be 1..%d, refs non-NULL)", count,
                  REFS_MAX);
  for (uint32_t i = 0; i < count; i++) {
    const char *bad = ref_check(&refs[i], why);
    if (bad) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "wf_encode_cache_refs: refs[%u].%s: %s", i, bad, why);
  }
  size_t start = wf_frame_begin(out);
  wf_buf_uint(out, count, 4);
  for (uint32_t i = 0; i < count; i++) {
    wf_buf_uint(out, refs[i].group_id, 4);
    wf_buf_uint(out, refs[i].id, 4);
    wf_buf_uint(out, refs[i].epoch, 8);
  }
  return wf_frame_end(out, start, src, type);
}

weft_status wf_decode_cache_refs(const uint8_t *p, size_t n, const char *what, wf_cache_refs_msg *m, char *err,
                                 size_t errlen) {
  wf_rd r;
  weft_status st;
  uint32_t count = 0;
  char why[WHY_LEN];
  wf_rd_init(&r, p, n, what ? what : "CACHED", err, errlen);
  memset(m, 0, sizeof *m);
  WF_CHECK_GOTO(wf_rd_u32(&r, "count", &count), st, fail);
  if (count < 1 || count > REFS_MAX) {
    st = wf_rd_fail(&r, "count", "%u (must be 1..%d)", count, REFS_MAX);
    goto fail;
  }
  WF_CHECK_GOTO(wf_rd_count(&r, "count", count, REF_BYTES), st, fail);
  m->refs = calloc(count, sizeof *m->refs);
  if (!m->refs) {
    st = WEFT_ERR_NO_MEMORY;
    wf_rd_fail(&r, "refs", "out of memory (%u entries)", count);
    goto fail;
  }
  m->count = count;
  for (uint32_t i = 0; i < count; i++) {
    wf_cache_ref *c = &m->refs[i];
    r.idx = (long)i;
    WF_CHECK_GOTO(wf_rd_u32(&r, "group_id", &c->group_id), st, fail);
    WF_CHECK_GOTO(wf_rd_u32(&r, "id", &c->id), st, fail);
    WF_CHECK_GOTO(wf_rd_u64(&r, "epoch", &c->epoch), st, fail);
    const char *bad = ref_check(c, why);
    if (bad) {
      st = wf_rd_fail(&r, bad, "%s", why);
      goto fail;
    }
  }
  r.idx = -1;
  WF_CHECK_GOTO(wf_rd_end(&r), st, fail);
  return WEFT_OK;
fail:
  wf_cache_refs_msg_free(m);
  return st;
}

void wf_cache_refs_msg_free(wf_cache_refs_msg *m) {
  free(m->refs);
  memset(m, 0, sizeof *m);
}
