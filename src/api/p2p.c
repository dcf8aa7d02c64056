/* p2p.c - the point-to-point entry points (weft_send, weft_recv,
 * weft_request_source): validate, describe the transfer in a request, and
 * hand it to the engine (engine/p2p.h). No name, no in-flight set: the
 * receiver's engine matches messages by (group, key, source). */
#include <stddef.h>
#include <string.h>

#include "engine/p2p.h"
#include "engine/submit.h"
#include "util/err.h"

#define INVALID(...) wf_err(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* Checks the arguments common to both directions; peer is a group rank
 * (any_ok: WEFT_ANY_SOURCE allowed). */
static weft_status check_p2p(const char *fn, weft_group *g, const weft_tensor *t, int peer, int any_ok,
                             const weft_op_options *o) {
  if (!g || g->magic != WF_GROUP_MAGIC || !g->world || g->world->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "%s: not a live group handle", fn);
  if (g->rank < 0) return INVALID("%s: this rank is not a member of group %u", fn, g->id);
  const char *what = any_ok ? "src" : "dst";
  if (!(any_ok && peer == WEFT_ANY_SOURCE) && (peer < 0 || peer >= g->size))
    return INVALID("%s: %s %d is not a rank of the group (0..%d%s)", fn, what, peer, g->size - 1,
                   any_ok ? ", or WEFT_ANY_SOURCE" : "");
  if (peer == g->rank) return INVALID("%s: %s %d is this rank itself", fn, what, peer);
  if (!t) return INVALID("%s: tensor is NULL", fn);
  if ((unsigned)t->dtype >= WEFT_DTYPE_COUNT_) return INVALID("%s: unknown dtype %d", fn, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > WEFT_MAX_DIMS)
    return INVALID("%s: tensor has %d dimensions (0..%d allowed)", fn, t->ndim, WEFT_MAX_DIMS);
  if (t->ndim > 0 && !t->shape) return INVALID("%s: tensor has ndim %d but shape is NULL", fn, t->ndim);
  size_t n = 1, b = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0) return INVALID("%s: tensor has negative dimension %d (%lld)", fn, d, (long long)t->shape[d]);
    if (__builtin_mul_overflow(n, (size_t)t->shape[d], &n)) return INVALID("%s: tensor is too large", fn);
  }
  if (__builtin_mul_overflow(n, weft_dtype_size(t->dtype), &b) || b > SIZE_MAX / 4)
    return INVALID("%s: tensor is too large", fn);
  if (n > 0 && !t->data) return INVALID("%s: tensor has %zu elements but data is NULL", fn, n);
  if (t->device != WEFT_DEVICE_CPU)
    return wf_err(t->device < WEFT_DEVICE_CPU ? WEFT_ERR_INVALID_ARGUMENT : WEFT_ERR_NOT_SUPPORTED,
                  "%s: tensor has device %d: point-to-point transfers take host memory only", fn, t->device);
  if (o && o->struct_size < offsetof(weft_op_options, alloc_ctx) + sizeof(void *))
    return INVALID("%s: options struct_size %zu is too small (use WEFT_OP_OPTIONS_INIT)", fn, o->struct_size);
  return WEFT_OK;
}

static weft_status submit(const char *fn, int dir, weft_group *g, const weft_tensor *t, int peer, uint64_t key,
                          const weft_op_options *opt, weft_request **req) {
  wf_err_clear();
  if (!req) return INVALID("%s: req is NULL", fn);
  *req = NULL;
  WF_CHECK(check_p2p(fn, g, t, peer, dir == WF_P2P_REQ_RECV, opt));
  return wf_p2p_post(g, dir, peer == WEFT_ANY_SOURCE ? -1 : g->ranks[peer], key, t, opt, req);
}

weft_status weft_send(weft_group *g, const weft_tensor *in, int dst, uint64_t key, const weft_op_options *opt,
                      weft_request **req) {
  return submit("weft_send", WF_P2P_REQ_SEND, g, in, dst, key, opt, req);
}

weft_status weft_recv(weft_group *g, const weft_tensor *out, int src, uint64_t key, const weft_op_options *opt,
                      weft_request **req) {
  return submit("weft_recv", WF_P2P_REQ_RECV, g, out, src, key, opt, req);
}

weft_status weft_request_source(weft_request *r, int *src) {
  wf_err_clear();
  if (!wf_request_live(r)) return wf_err(WEFT_ERR_MISUSE, "weft_request_source: not a live request handle");
  if (!src) return INVALID("weft_request_source: src is NULL");
  if (r->p2p != WF_P2P_REQ_RECV) return INVALID("weft_request_source: the request is not a weft_recv");
  if (!wf_request_done(r)) return wf_err(WEFT_IN_PROGRESS, "weft_request_source: the recv has not completed");
  *src = r->p2p_peer >= 0 ? wf_group_index(r->group, r->p2p_peer) : -1;
  return r->status;
}
