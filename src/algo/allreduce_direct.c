/* allreduce_direct.c - allreduce in the canonical reduction order, the
 * default at every size. Every element is combined as the left fold in rank
 * order, ((x_0 op x_1) op x_2) ... op x_{p-1}, whatever the tensor's size,
 * the element's position, the segment size or the world's fusion of small
 * tensors into one buffer. Float reduction is not associative, so that is
 * what makes a fused allreduce give the same bits as the separate ones (ring
 * folds each block from a different rank and rd folds as a tree, so there an
 * element's bits depend on where it sits and on the size threshold).
 *
 * Reduce-scatter by direct sends: the buffer is split into p blocks (as in
 * ring) and rank j owns block j; every rank sends its piece of block j to
 * rank j, which receives the p-1 pieces into scratch and folds them in rank
 * order with its own piece at its own position. Allgather by direct sends:
 * each owner sends its reduced block to every rank, received into place.
 * Each block is reduced once, by its owner, then only copied, so every rank
 * ends with the same bits. Each rank sends and receives (p-1)/p of the
 * buffer per phase, like ring, in 2 rounds for small tensors instead of
 * ring's 2(p-1).
 *
 * Blocks are cut into segments: round k carries the reduce-scatter of
 * segment k and the allgather of segment k-1 (reduced at the end of round
 * k-1), so the phases overlap and there are nsegs+1 rounds. The scratch is
 * p-1 segments (never the tensor), and is bounded for many ranks by
 * shrinking the segment, which changes no bits. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

/* Scratch bound: with many ranks p-1 full segments would be large, so the
 * segment shrinks to keep (p-1) x segment within this. */
#define WF_DIRECT_MAX_SCRATCH ((size_t)64 << 20)

/* Block b of count elements split over p ranks: the first count % p blocks
 * get one element more (the same split as ring). */
static void block_of(size_t count, int p, int b, size_t *off, size_t *n) {
  size_t q = count / (size_t)p, r = count % (size_t)p, ub = (size_t)b;
  *n = q + (ub < r ? 1 : 0);
  *off = q * ub + (ub < r ? ub : r);
}

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Elements per segment: segment_bytes (0: whole blocks), at most the largest
 * block, and small enough for the scratch bound. The same on every rank. */
static size_t seg_elems(const wf_coll_args *a, size_t maxblk) {
  size_t e = a->segment_bytes ? a->segment_bytes / a->elem_size : SIZE_MAX;
  size_t cap = WF_DIRECT_MAX_SCRATCH / a->elem_size / (size_t)(a->size > 1 ? a->size - 1 : 1);
  e = min_sz(min_sz(e, cap), maxblk);
  return e ? e : 1;
}

/* Scratch slot of rank i's piece on rank r: ranks in order, skipping r. */
static size_t slot_of(int i, int r) { return (size_t)(i < r ? i : i - 1); }

static int direct_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLREDUCE && a->size >= 1; }

static weft_status direct_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  if (p == 1 || a->count == 0) return WEFT_OK; /* nothing to combine */
  size_t es = a->elem_size;
  char *buf = a->buf;
  size_t maxblk = a->count / (size_t)p + (a->count % (size_t)p ? 1 : 0);
  size_t seg = seg_elems(a, maxblk);
  size_t slot = seg * es; /* bytes of one scratch slot */
  char *tmp = wf_sched_scratch(s, (size_t)(p - 1) * slot);
  if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "allreduce direct: no memory for %d x %zu bytes", p - 1, slot);

  size_t moff, mn; /* my block */
  block_of(a->count, p, r, &moff, &mn);
  size_t mysegs = nsegs(mn, seg), rounds = nsegs(maxblk, seg) + 1;
  for (size_t k = 0; k < rounds; k++) {
    /* Transfers with each peer j, in the same order on both sides of the
     * pair: our piece of j's block (segment k), then our reduced segment
     * k-1; receives: j's piece of our block, then j's reduced segment k-1.
     * Segments past a block's end have 0 bytes and are dropped by sched.c
     * on both sides. Peers in order from r+1 so that not every rank
     * addresses rank 0 first. */
    for (int d = 1; d < p; d++) {
      int j = (r + d) % p;
      size_t joff, jn;
      block_of(a->count, p, j, &joff, &jn);
      if (k * seg < jn) wf_sched_send(s, j, buf + (joff + k * seg) * es, min_sz(seg, jn - k * seg) * es);
      if (k >= 1 && (k - 1) * seg < mn)
        wf_sched_send(s, j, buf + (moff + (k - 1) * seg) * es, min_sz(seg, mn - (k - 1) * seg) * es);
      if (k * seg < mn) wf_sched_recv(s, j, tmp + slot_of(j, r) * slot, min_sz(seg, mn - k * seg) * es);
      if (k >= 1 && (k - 1) * seg < jn)
        wf_sched_recv(s, j, buf + (joff + (k - 1) * seg) * es, min_sz(seg, jn - (k - 1) * seg) * es);
    }
    /* Fold segment k of our block in rank order. Rank 0's own piece comes
     * first, so it folds straight into the buffer; any other rank folds
     * into rank 0's slot (its own piece, in the buffer, joins at its
     * position) and copies the result into place. */
    if (k < mysegs) {
      size_t m = min_sz(seg, mn - k * seg);
      char *mine = buf + (moff + k * seg) * es;
      char *acc = r == 0 ? mine : tmp;
      for (int i = 1; i < p; i++) wf_sched_reduce(s, acc, i == r ? mine : tmp + slot_of(i, r) * slot, m);
      if (r != 0) wf_sched_copy(s, mine, acc, m * es);
    }
    wf_sched_end_round(s);
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allreduce direct: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allreduce_direct = {
    .name = "direct",
    .coll = WF_COLL_ALLREDUCE,
    .supports = direct_supports,
    .build = direct_build,
};
