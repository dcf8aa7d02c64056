/* allreduce_ring.c - bandwidth-optimal ring allreduce (the seeds' algorithm):
 * a reduce-scatter around the ring leaves rank r with the fully reduced
 * block r+1, then an allgather around the ring copies every reduced block to
 * every rank. Each block is reduced along exactly one path and then only
 * copied, so every rank ends with the same bits. Blocks are cut into
 * segments of segment_bytes, one segment per round, so the only scratch is
 * one segment (the incoming partial that is reduced into the buffer).
 *
 * Subdivisions (WEFT_RING_SUBDIVS = S, TensorFlow's subdiv_offsets in
 * ring_alg.cc): the buffer is cut into S contiguous parts and part i goes
 * around ring i, whose rank order is the group's rotated by offset i *
 * max(1, p / S), reversed for odd i (TensorFlow: a negative offset reverses
 * the order, then starts at |offset|). The rings' steps share rounds, so a
 * rank sends to and receives from up to two neighbours at once (a reversed
 * ring runs the other way). Every rank builds the same orders; a (sender,
 * receiver) pair's messages are posted in (step, segment, ring) order on
 * both sides, so they match in order. Which fold order a block gets depends
 * on its ring, so float sums differ from S = 1 in the last bits (integers
 * are exact); all ranks still agree. */
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


/* One ring: its part of the buffer and this rank's place in it. */
typedef struct ring {
  char *base;     /* the part's first element */
  size_t count;   /* the part's elements */
  int pos;        /* this rank's position in the ring's order */
  int right, left; /* group ranks it sends to and receives from */
  char *tmp;      /* one segment of scratch */
} ring;

/* The group rank at position pos of the ring with subdivision offset off
 * (TensorFlow's InitializeCollectiveParams for one task). */
static int order_at(int p, int off, int pos) {
  int d = (pos + (off < 0 ? -off : off)) % p;
  return off < 0 ? p - 1 - d : d;
}

int wf_ring_subdivs(const wf_coll_args *a) {
  int64_t want = wf_algo_set(a)->ring_subdivs;
  return want < 1 ? 1 : want > WF_RING_MAX_SUBDIVS ? WF_RING_MAX_SUBDIVS : (int)want;
}

void wf_ring_place(int p, int nrings, int i, int rank, int *pos, int *right, int *left) {
  int stride = p / nrings ? p / nrings : 1;
  int off = (i % 2 ? -1 : 1) * stride * i;
  *pos = 0;
  for (int q = 0; q < p; q++)
    if (order_at(p, off, q) == rank) *pos = q;
  *right = order_at(p, off, mod(*pos + 1, p));
  *left = order_at(p, off, mod(*pos - 1, p));
}

int wf_ring_rank_at(int p, int nrings, int i, int pos) {
  int stride = p / nrings ? p / nrings : 1;
  return order_at(p, (i % 2 ? -1 : 1) * stride * i, mod(pos, p));
}

static int ring_supports(const wf_coll_args *a) { return a->coll == WF_COLL_ALLREDUCE && a->size >= 1; }

/* This step's send (block sb) and receive (block rb) of ring g, segment j:
 * appended when the blocks have a segment j. */
static void step(wf_sched *s, const ring *g, size_t es, size_t seg, int p, int sb, int rb, size_t j, int reduce) {
  size_t soff, sn, roff, rn;
  block_of(g->count, p, sb, &soff, &sn);
  block_of(g->count, p, rb, &roff, &rn);
  if (j < nsegs(sn, seg)) wf_sched_send(s, g->right, g->base + (soff + j * seg) * es, min_sz(seg, sn - j * seg) * es);
  if (j < nsegs(rn, seg)) {
    size_t m = min_sz(seg, rn - j * seg);
    char *dst = g->base + (roff + j * seg) * es;
    if (reduce) {
      wf_sched_recv(s, g->left, g->tmp, m * es);
      wf_sched_reduce(s, dst, g->tmp, m);
    } else {
      wf_sched_recv(s, g->left, dst, m * es);
    }
  }
}

static weft_status ring_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  if (p == 1 || a->count == 0) return WEFT_OK; /* nothing to combine */
  size_t es = a->elem_size;
  char *buf = a->buf;
  size_t seg = seg_elems(a);
  int nr = wf_ring_subdivs(a);
  ring rings[WF_RING_MAX_SUBDIVS];
  size_t most = 0; /* the largest block of any ring: its segment is the scratch */
  for (int i = 0; i < nr; i++) {
    ring *g = &rings[i];
    size_t off;
    block_of(a->count, nr, i, &off, &g->count);
    g->base = buf + off * es;
    wf_ring_place(p, nr, i, r, &g->pos, &g->right, &g->left);
    size_t blk = g->count / (size_t)p + (g->count % (size_t)p ? 1 : 0);
    if (blk > most) most = blk;
  }
  size_t tmp_bytes = (min_sz(seg, most) * es + 63) / 64 * 64;
  char *tmp = wf_sched_scratch(s, tmp_bytes * (size_t)nr);
  if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "allreduce ring: no memory for %d %zu-byte segments", nr, tmp_bytes);
  for (int i = 0; i < nr; i++) rings[i].tmp = tmp + tmp_bytes * (size_t)i;

  /* Reduce-scatter: in step k, pass on block pos-k (ours at k = 0, else the
   * one reduced in step k-1) and fold block pos-k-1 from the left into ours.
   * Segment j of a step only needs segment j of the previous step, so the
   * rounds go step by step, segment by segment. Allgather: position pos now
   * owns reduced block pos+1; pass blocks on and receive straight into
   * place (no reduction, so no scratch). */
  for (int phase = 0; phase < 2; phase++) {
    for (int k = 0; k < p - 1; k++) {
      size_t rounds = 0;
      for (int i = 0; i < nr; i++) {
        size_t soff, sn, roff, rn;
        int pos = rings[i].pos;
        block_of(rings[i].count, p, phase ? mod(pos + 1 - k, p) : mod(pos - k, p), &soff, &sn);
        block_of(rings[i].count, p, phase ? mod(pos - k, p) : mod(pos - k - 1, p), &roff, &rn);
        size_t m = nsegs(sn, seg) > nsegs(rn, seg) ? nsegs(sn, seg) : nsegs(rn, seg);
        if (m > rounds) rounds = m;
      }
      for (size_t j = 0; j < rounds; j++) {
        for (int i = 0; i < nr; i++) {
          int pos = rings[i].pos;
          if (phase == 0) step(s, &rings[i], es, seg, p, mod(pos - k, p), mod(pos - k - 1, p), j, 1);
          else step(s, &rings[i], es, seg, p, mod(pos + 1 - k, p), mod(pos - k, p), j, 0);
        }
        wf_sched_end_round(s);
      }
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
