/* allreduce_ring.c - bandwidth-optimal ring allreduce (the seeds' algorithm):
 * a reduce-scatter around the ring leaves rank r with the fully reduced
 * block r+1, then an allgather around the ring copies every reduced block to
 * every rank. Each block is reduced along exactly one path and then only
 * copied, so every rank ends with the same bits. Blocks are cut into
 * segments of segment_bytes, one segment per round, so the only scratch is
 * one segment (the incoming partial that is reduced into the buffer). */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"

static int mod(int x, int p) { return ((x % p) + p) % p; }

/* Block b of count elements split over p ranks: the first count % p blocks
 * get one element more. */
static void block_of(size_t count, int p, int b, size_t *off, size_t *n) {
  size_t q = count / (size_t)p, r = count % (size_t)p, ub = (size_t)b;
  *n = q + (ub < r ? 1 : 0);
  *off = q * ub + (ub < r ? ub : r);
}

/* Elements per segment; 0 (no segmentation) means whole blocks. */
static size_t seg_elems(const wf_coll_args *a) {
  if (a->segment_bytes == 0) return SIZE_MAX;
  size_t e = a->segment_bytes / a->elem_size;
  return e ? e : 1;
}

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static int ring_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLREDUCE && a->size >= 1; }

static weft_status ring_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  if (p == 1 || a->count == 0) return WEFT_OK; /* nothing to combine */
  size_t es = a->elem_size;
  char *buf = a->buf;
  size_t seg = seg_elems(a);
  size_t maxblk = a->count / (size_t)p + (a->count % (size_t)p ? 1 : 0);
  size_t tmp_bytes = min_sz(seg, maxblk) * es;
  char *tmp = wf_sched_scratch(s, tmp_bytes);
  if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "allreduce ring: no memory for a %zu-byte segment", tmp_bytes);
  int right = mod(r + 1, p), left = mod(r - 1, p);

  /* Reduce-scatter: in step k, pass on block r-k (ours at k = 0, else the
   * one reduced in step k-1) and fold block r-k-1 from the left into ours.
   * Segment j of a step only needs segment j of the previous step, so the
   * rounds go step by step, segment by segment. */
  for (int k = 0; k < p - 1; k++) {
    size_t soff, sn, roff, rn;
    block_of(a->count, p, mod(r - k, p), &soff, &sn);
    block_of(a->count, p, mod(r - k - 1, p), &roff, &rn);
    size_t ns = nsegs(sn, seg), nr = nsegs(rn, seg);
    for (size_t j = 0; j < ns || j < nr; j++) {
      if (j < ns) wf_sched_send(s, right, buf + (soff + j * seg) * es, min_sz(seg, sn - j * seg) * es);
      if (j < nr) {
        size_t m = min_sz(seg, rn - j * seg);
        wf_sched_recv(s, left, tmp, m * es);
        wf_sched_reduce(s, buf + (roff + j * seg) * es, tmp, m);
      }
      wf_sched_end_round(s);
    }
  }
  /* Allgather: rank r now owns reduced block r+1; pass blocks on and
   * receive straight into place (no reduction, so no scratch). */
  for (int k = 0; k < p - 1; k++) {
    size_t soff, sn, roff, rn;
    block_of(a->count, p, mod(r + 1 - k, p), &soff, &sn);
    block_of(a->count, p, mod(r - k, p), &roff, &rn);
    size_t ns = nsegs(sn, seg), nr = nsegs(rn, seg);
    for (size_t j = 0; j < ns || j < nr; j++) {
      if (j < ns) wf_sched_send(s, right, buf + (soff + j * seg) * es, min_sz(seg, sn - j * seg) * es);
      if (j < nr) wf_sched_recv(s, left, buf + (roff + j * seg) * es, min_sz(seg, rn - j * seg) * es);
      wf_sched_end_round(s);
    }
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allreduce ring: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allreduce_ring = {
    .name = "ring",
    .coll = WF_COLL_ALLREDUCE,
    .supports = ring_supports,
    .build = ring_build,
};
