/* broadcast_chain.c - pipelined chain broadcast for large messages: ranks
 * form a chain starting at the root (v = rank - root mod p) and the buffer
 * flows down it in segments of segment_bytes. In round t, rank v receives
 * segment t - v + 1 from v - 1 and forwards segment t - v to v + 1, so every
 * link is busy at once and the whole takes S + p - 2 rounds for S segments
 * (instead of S * (p - 1) without the pipeline). No scratch: each segment is
 * received into place and forwarded from there. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

static size_t seg_elems(const wf_coll_args *a) {
  if (a->segment_bytes == 0) return SIZE_MAX; /* no segmentation */
  size_t e = a->segment_bytes / a->elem_size;
  return e ? e : 1;
}

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }

static int chain_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_BROADCAST && a->size >= 1 && a->root >= 0 && a->root < a->size;
}

static weft_status chain_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size;
  if (p == 1 || a->count == 0) return WEFT_OK; /* the data is already in place */
  size_t es = a->elem_size, seg = seg_elems(a), S = nsegs(a->count, seg);
  char *buf = a->buf;
  size_t v = (size_t)(((a->rank - a->root) % p + p) % p);
  int prev = (a->rank - 1 + p) % p, next = (a->rank + 1) % p;
  size_t last = (size_t)p - 1;
  /* rank v is busy from round v - 1 (first receive) to round S + v - 1 (last send) */
  for (size_t t = v ? v - 1 : 0; t < S + v; t++) {
    if (v > 0 && t + 1 >= v && t + 1 - v < S) {
      size_t j = t + 1 - v;
      size_t n = a->count - j * seg < seg ? a->count - j * seg : seg;
      wf_sched_recv(s, prev, buf + j * seg * es, n * es);
    }
    if (v < last && t >= v && t - v < S) {
      size_t j = t - v;
      size_t n = a->count - j * seg < seg ? a->count - j * seg : seg;
      wf_sched_send(s, next, buf + j * seg * es, n * es);
    }
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "broadcast chain: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_broadcast_chain = {
    .name = "chain",
    .coll = WF_COLL_BROADCAST,
    .supports = chain_supports,
    .build = chain_build,
};
