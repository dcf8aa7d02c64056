/* validate.c - checks that every rank asked for the same collective on a
 * named tensor, and computes what every rank needs to know about the others
 * (allgather row counts, alltoall split matrix, permute's permutation, which
 * must be one of 0..n-1 and the same on every rank). Messages name the tensor,
 * the two ranks and both values, e.g.
 *   "tensor 'w': mismatched dtypes: rank %d has float32, rank 2 has int32". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/coord.h"

static void shape_str(const wf_request_msg *m, char *out, size_t n) {
  size_t k = 0;
  k += (size_t)snprintf(out + k, n - k, "[");
  for (int d = 0; d < m->ndim && k < n; d++)
    k += (size_t)snprintf(out + k, n - k, d ? ", %lld" : "%lld", (long long)m->shape[d]);
  if (k < n) snprintf(out + k, n - k, "]");
}

/* "host memory", "cuda:0", "sim:1" (wire.h, WF_DEVICE_CODE). */
static void device_str(int32_t code, char *out, size_t n) {
  int kind = WF_DEVICE_CODE_KIND(code), index = WF_DEVICE_CODE_INDEX(code);
  if (code < 0) snprintf(out, n, "host memory");
  else if (kind == WEFT_DEVICE_KIND_CUDA) snprintf(out, n, "cuda:%d", index);
  else if (kind == WEFT_DEVICE_KIND_SIM) snprintf(out, n, "sim:%d", index);
  else snprintf(out, n, "device kind %d:%d", kind, index);
}

/* Does m's shape hold more than INT64_MAX bytes (or elements), counting
 * dimension by dimension (as the API does: a zero after a huge product does
 * not make it fit)? No tensor does (the API refuses them), but a peer may
 * claim one: the coordinator multiplies the dimensions (fusion's byte
 * counts, allreduce's element counts). */
static int too_large(const wf_request_msg *m) {
  uint64_t bytes = weft_dtype_size((weft_dtype)m->dtype);
  for (int d = 0; d < m->ndim; d++)
    if (__builtin_mul_overflow(bytes, (uint64_t)m->shape[d], &bytes) || bytes > (uint64_t)INT64_MAX) return 1;
  return 0;
}

static int needs_dims(uint8_t coll) {
  return coll == WF_COLL_ALLGATHER || coll == WF_COLL_ALLTOALL || coll == WF_COLL_REDUCESCATTER;
}

/* Is rank r's permute request a permutation of 0..n-1? WEFT_OK, else
 * WEFT_ERR_INVALID_ARGUMENT with err naming the rank and the first bad entry
 * (out of range, or the second of a duplicate), or WEFT_ERR_NO_MEMORY. */
static weft_status bad_perm(const wf_request_msg *m, int n, int r, char *err, size_t errlen) {
  if (m->nsplits != (uint32_t)n) {
    snprintf(err, errlen, "tensor '%s': rank %d passed a permutation of %u entries for a group of %d ranks", m->name,
             r, m->nsplits, n);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  int *first = malloc(sizeof(int) * (size_t)n); /* first[v]: the index that sends to v, or -1 */
  if (!first) {
    snprintf(err, errlen, "tensor '%s': out of memory at the coordinator", m->name);
    return WEFT_ERR_NO_MEMORY;
  }
  for (int i = 0; i < n; i++) first[i] = -1;
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    int64_t v = m->splits[i];
    if (v < 0 || v >= n) {
      snprintf(err, errlen, "tensor '%s': rank %d passed no permutation of 0..%d: perm[%d] = %lld is out of range",
               m->name, r, n - 1, i, (long long)v);
      bad = 1;
    } else if (first[v] >= 0) {
      snprintf(err, errlen, "tensor '%s': rank %d passed no permutation of 0..%d: perm[%d] and perm[%d] are both %lld",
               m->name, r, n - 1, first[v], i, (long long)v);
      bad = 1;
    } else {
      first[v] = i;
    }
  }
  free(first);
  return bad ? WEFT_ERR_INVALID_ARGUMENT : WEFT_OK;
}

weft_status wf_validate(const wf_request_msg *const *reqs, int n, const int *ranks, wf_response_msg *resp, char *err,
                        size_t errlen) {
#define W(i) (ranks ? ranks[(i)] : (i)) /* messages name world ranks */
  const wf_request_msg *a = reqs[0];
  const char *name = a->name;
  for (int r = 0; r < n; r++) {
    const wf_request_msg *b = reqs[r];
    if (b->coll != a->coll) {
      snprintf(err, errlen, "tensor '%s': mismatched operations: rank %d did %s, rank %d did %s", name, W(0),
               wf_coll_name(a->coll), W(r), wf_coll_name(b->coll));
      return WEFT_ERR_MISMATCH;
    }
    if (needs_dims(b->coll) && b->ndim == 0) {
      snprintf(err, errlen, "tensor '%s': rank %d passed a 0-d (scalar) tensor to %s, which needs at least one dimension",
               name, W(r), wf_coll_name(b->coll));
      return WEFT_ERR_MISMATCH;
    }
    if (too_large(b)) {
      /* ranks that joined stand in with another rank's request (the same
       * pointer): then it is one of those ranks' */
      char sb[256], who[160];
      size_t k = 0;
      int nwho = 0;
      shape_str(b, sb, sizeof sb);
      for (int q = 0; q < n && k < sizeof who; q++)
        if (reqs[q] == b) k += (size_t)snprintf(who + k, sizeof who - k, nwho++ ? ", %d" : "%d", W(q));
      snprintf(err, errlen, "tensor '%s': %s %s sent shape %s (%s) of more than 2^63 bytes, which no tensor has", name,
               nwho > 1 ? "one of ranks" : "rank", who, sb, weft_dtype_name((weft_dtype)b->dtype));
      return WEFT_ERR_PROTOCOL;
    }
    weft_status pst = b->coll == WF_COLL_PERMUTE ? bad_perm(b, n, W(r), err, errlen) : WEFT_OK;
    if (pst != WEFT_OK) return pst;
  }
  for (int r = 1; r < n; r++) {
    const wf_request_msg *b = reqs[r];
    char sa[256], sb[256];
    if (b->dtype != a->dtype) {
      snprintf(err, errlen, "tensor '%s': mismatched dtypes: rank %d has %s, rank %d has %s", name, W(0),
               weft_dtype_name(a->dtype), W(r), weft_dtype_name(b->dtype));
      return WEFT_ERR_MISMATCH;
    }
    if (b->unit != a->unit) {
      char ua[64], ub[64];
      snprintf(ua, sizeof ua, a->unit ? "in a grouped op of %u tensors" : "as a tensor of its own", a->unit);
      snprintf(ub, sizeof ub, b->unit ? "in a grouped op of %u tensors" : "as a tensor of its own", b->unit);
      snprintf(err, errlen, "tensor '%s': mismatched grouped ops: rank %d submitted it %s, rank %d %s", name, W(0), ua,
               W(r), ub);
      return WEFT_ERR_MISMATCH;
    }
    /* kinds, not indices: ranks sharing a host use different devices
     * (their local rank's), as in Horovod */
    if (WF_DEVICE_CODE_KIND(b->device) != WF_DEVICE_CODE_KIND(a->device)) {
      char da[48], db[48];
      device_str(a->device, da, sizeof da);
      device_str(b->device, db, sizeof db);
      snprintf(err, errlen, "tensor '%s': mismatched devices: rank %d has %s, rank %d has %s", name, W(0), da, W(r),
               db);
      return WEFT_ERR_MISMATCH;
    }
    if (a->coll == WF_COLL_ALLREDUCE || a->coll == WF_COLL_BROADCAST || a->coll == WF_COLL_REDUCESCATTER ||
        a->coll == WF_COLL_PERMUTE) {
      int same = a->ndim == b->ndim;
      for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
      if (!same) {
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        snprintf(err, errlen, "tensor '%s': mismatched %s shapes: rank %d has %s, rank %d has %s", name,
                 wf_coll_name(a->coll), W(0), sa, W(r), sb);
        return WEFT_ERR_MISMATCH;
      }
    }
    if (a->coll == WF_COLL_ALLGATHER || a->coll == WF_COLL_ALLTOALL) {
      int same = a->ndim == b->ndim;
      for (int d = 1; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
      if (!same) {
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        snprintf(err, errlen,
                 "tensor '%s': mismatched %s shapes: rank %d has %s, rank %d has %s (all dimensions but the first must "
                 "agree)",
                 name, wf_coll_name(a->coll), W(0), sa, W(r), sb);
        return WEFT_ERR_MISMATCH;
      }
    }
    if (a->coll == WF_COLL_ALLREDUCE || a->coll == WF_COLL_REDUCESCATTER) {
      if (b->reduce_op != a->reduce_op) {
        snprintf(err, errlen, "tensor '%s': mismatched reduce ops: rank %d has %s, rank %d has %s", name, W(0),
                 weft_reduce_op_name(a->reduce_op), W(r), weft_reduce_op_name(b->reduce_op));
        return WEFT_ERR_MISMATCH;
      }
      if (b->prescale != a->prescale) {
        snprintf(err, errlen, "tensor '%s': mismatched prescale factors: rank %d has %g, rank %d has %g", name, W(0),
                 a->prescale, W(r), b->prescale);
        return WEFT_ERR_MISMATCH;
      }
      if (b->postscale != a->postscale) {
        snprintf(err, errlen, "tensor '%s': mismatched postscale factors: rank %d has %g, rank %d has %g", name, W(0),
                 a->postscale, W(r), b->postscale);
        return WEFT_ERR_MISMATCH;
      }
    }
    if (a->coll == WF_COLL_BROADCAST && b->root != a->root) {
      snprintf(err, errlen, "tensor '%s': mismatched broadcast root ranks: rank %d has root %d, rank %d has root %d",
               name, W(0), a->root, W(r), b->root);
      return WEFT_ERR_MISMATCH;
    }
    if (a->coll == WF_COLL_ALLTOALL && b->nsplits != a->nsplits) {
      snprintf(err, errlen, "tensor '%s': mismatched alltoall split counts: rank %d has %u splits, rank %d has %u",
               name, W(0), a->nsplits, W(r), b->nsplits);
      return WEFT_ERR_MISMATCH;
    }
    for (int i = 0; a->coll == WF_COLL_PERMUTE && i < n; i++) /* both are permutations of n entries (above) */
      if (b->splits[i] != a->splits[i]) {
        snprintf(err, errlen,
                 "tensor '%s': mismatched permutations: rank %d has perm[%d] = %lld, rank %d has perm[%d] = %lld "
                 "(the first difference)",
                 name, W(0), i, (long long)a->splits[i], W(r), i, (long long)b->splits[i]);
        return WEFT_ERR_MISMATCH;
      }
  }
  if (a->coll == WF_COLL_ALLGATHER) {
    resp->sizes = malloc(sizeof(int64_t) * (size_t)n);
    if (!resp->sizes) {
      snprintf(err, errlen, "tensor '%s': out of memory at the coordinator", name);
      return WEFT_ERR_NO_MEMORY;
    }
    resp->nsizes = (uint32_t)n;
    for (int r = 0; r < n; r++) resp->sizes[r] = reqs[r]->shape[0];
  } else if (a->coll == WF_COLL_ALLTOALL) {
    for (int r = 0; r < n; r++)
      if (reqs[r]->nsplits != (uint32_t)n) {
        snprintf(err, errlen, "tensor '%s': rank %d passed %u alltoall splits for a group of %d ranks", name, W(r),
                 reqs[r]->nsplits, n);
        return WEFT_ERR_MISMATCH;
      }
    resp->sizes = malloc(sizeof(int64_t) * (size_t)n * (size_t)n);
    if (!resp->sizes) {
      snprintf(err, errlen, "tensor '%s': out of memory at the coordinator", name);
      return WEFT_ERR_NO_MEMORY;
    }
    resp->nsizes = (uint32_t)(n * n);
    for (int r = 0; r < n; r++) memcpy(resp->sizes + (size_t)r * (size_t)n, reqs[r]->splits, sizeof(int64_t) * (size_t)n);
  } else if (a->coll == WF_COLL_PERMUTE) {
    resp->sizes = malloc(sizeof(int64_t) * (size_t)n);
    if (!resp->sizes) {
      snprintf(err, errlen, "tensor '%s': out of memory at the coordinator", name);
      return WEFT_ERR_NO_MEMORY;
    }
    resp->nsizes = (uint32_t)n;
    memcpy(resp->sizes, a->splits, sizeof(int64_t) * (size_t)n);
  }
  return WEFT_OK;
#undef W
}
