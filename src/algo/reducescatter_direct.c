/* reducescatter_direct.c - reduce-scatter in the canonical reduction order,
 * the default: every element of rank r's block is the left fold in rank
 * order, ((x_0 op x_1) op x_2) ... op x_{p-1}, whatever the counts and the
 * segment size (float reduction is not associative; see
 * allreduce_direct.c, whose first phase this is, with uneven counts).
 *
 * Every rank sends its piece of block j straight to rank j; rank r folds
 * the p-1 pieces it receives with its own (read from in) in rank order.
 * Rank 0's piece is received straight into out (rank 0 copies its own
 * there), so out is the accumulator and the scratch holds the other p-2
 * pieces (p-1 on rank 0). Blocks are cut into segments, one per round, so
 * the scratch is a few segments, never the tensor. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

/* Scratch bound: with many ranks the segment shrinks to keep the scratch
 * ((p-1) x segment at most) within this. */
#define WF_DIRECT_MAX_SCRATCH ((size_t)64 << 20)

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Scratch slot of rank i's piece on rank r: ranks in order, skipping r and
 * (except on rank 0) rank 0, whose piece lands in out. */
static size_t slot_of(int i, int r) { return (size_t)(i - 1 - (i > r && r != 0)); }

static size_t max_count(const wf_coll_args *a) {
  size_t m = 0;
  for (int i = 0; i < a->size; i++)
    if (a->counts[i] > m) m = a->counts[i];
  return m;
}

/* Elements per segment: segment_bytes (0: whole blocks), at most the
 * largest block, small enough for the scratch bound. Same on every rank. */
static size_t seg_elems(const wf_coll_args *a, size_t maxc) {
  size_t e = a->segment_bytes ? a->segment_bytes / a->elem_size : SIZE_MAX;
  size_t cap = WF_DIRECT_MAX_SCRATCH / a->elem_size / (size_t)(a->size > 1 ? a->size - 1 : 1);
  e = min_sz(min_sz(e, cap), maxc);
  return e ? e : 1;
}

static int rs_supports(const wf_coll_args *a) { return a->coll == WF_COLL_REDUCESCATTER && a->size >= 1; }

static weft_status rs_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  const char *in = a->in;
  char *out = a->out;
  size_t mn = a->counts[r], maxc = max_count(a);
  if (p == 1 || maxc == 0) {
    wf_sched_copy(s, out, in + a->displs[r] * es, mn * es); /* 0 bytes: dropped */
    return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "reducescatter direct: no memory for the schedule") : WEFT_OK;
  }
  size_t seg = seg_elems(a, maxc), slot = seg * es;
  int nslots = r == 0 ? p - 1 : p - 2;
  char *tmp = NULL;
  if (mn && nslots > 0) {
    tmp = wf_sched_scratch(s, (size_t)nslots * slot);
    if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "reducescatter direct: no memory for %d x %zu bytes", nslots, slot);
  }
  size_t rounds = nsegs(maxc, seg);
  for (size_t k = 0; k < rounds; k++) {
    size_t at = k * seg; /* element offset of segment k in a block */
    size_t m = at < mn ? min_sz(seg, mn - at) : 0;
    /* Peers from r+1 on, so that not every rank addresses rank 0 first;
     * one message per pair and round, so the order cannot mismatch. */
    for (int d = 1; d < p; d++) {
      int j = (r + d) % p;
      size_t jn = a->counts[j];
      if (at < jn) wf_sched_send(s, j, in + (a->displs[j] + at) * es, min_sz(seg, jn - at) * es);
      if (m) {
        char *dst = j == 0 ? out + at * es : tmp + slot_of(j, r) * slot;
        wf_sched_recv(s, j, dst, m * es);
      }
    }
    if (m) {
      char *acc = out + at * es;
      if (r == 0) wf_sched_copy(s, acc, in + (a->displs[0] + at) * es, m * es);
      for (int i = 1; i < p; i++) {
        wf_sched_reduce(s, acc, i == r ? in + (a->displs[r] + at) * es : tmp + slot_of(i, r) * slot, m);
      }
    }
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "reducescatter direct: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_reducescatter_direct = {
    .name = "direct",
    .coll = WF_COLL_REDUCESCATTER,
    .supports = rs_supports,
    .build = rs_build,
};
