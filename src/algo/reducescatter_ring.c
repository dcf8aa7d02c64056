/* reducescatter_ring.c - ring reduce-scatter with uneven counts: in step k
 * rank r passes block r-k-1 to its right neighbour and folds block r-k-2
 * arriving from the left into its own contribution, so after p-1 steps it
 * holds block r reduced over every rank, each block reduced along one path.
 * Steps are cut into segments of segment_bytes (one per round).
 *
 * in is read-only, so partial sums live in two block-sized scratch buffers
 * used alternately: a step receives and reduces into one while sending the
 * previous step's partials from the other. The last step receives straight
 * into out. */
#include <stdint.h>

#include "algo/algo.h"
#include "util/err.h"


static int mod(int x, int p) { return ((x % p) + p) % p; }

static size_t seg_elems(const wf_coll_args *a) {
  if (a->segment_bytes == 0) return SIZE_MAX; /* no segmentation */
  size_t e = a->segment_bytes / a->elem_size;
  return e ? e : 1;
}

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }
static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static int rs_supports(const wf_coll_args *a) { return a->coll == WF_COLL_REDUCESCATTER && a->size >= 1; }

static weft_status rs_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  const char *in = a->in;
  char *out = a->out;
  if (p == 1) {
    if (a->counts[0]) wf_sched_copy(s, out, in + a->displs[0] * es, a->counts[0] * es);
    wf_sched_end_round(s);
    return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "reducescatter ring: no memory for the schedule") : WEFT_OK;
  }
  /* Partials pass through here for every block but ours (r, lands in out)
   * and our left neighbour's (r-1, sent straight from in). */
  size_t maxacc = 0;
  for (int b = 0; b < p; b++)
    if (b != r && b != mod(r - 1, p) && a->counts[b] > maxacc) maxacc = a->counts[b];
  char *acc[2] = {NULL, NULL};
  if (maxacc) {
    char *tmp = wf_sched_scratch(s, 2 * maxacc * es);
    if (!tmp) return wf_err(WEFT_ERR_NO_MEMORY, "reducescatter ring: no memory for 2 x %zu bytes", maxacc * es);
    acc[0] = tmp;
    acc[1] = tmp + maxacc * es;
  }
  size_t seg = seg_elems(a);
  int right = mod(r + 1, p), left = mod(r - 1, p);
  for (int k = 0; k < p - 1; k++) {
    int sb = mod(r - k - 1, p), rb = mod(r - k - 2, p);
    size_t sn = a->counts[sb], rn = a->counts[rb];
    size_t ns = nsegs(sn, seg), nr = nsegs(rn, seg);
    for (size_t j = 0; j < ns || j < nr; j++) {
      size_t at = j * seg; /* element offset of segment j in the block */
      if (j < ns) {
        const char *src = k == 0 ? in + (a->displs[sb] + at) * es : acc[(k - 1) % 2] + at * es;
        wf_sched_send(s, right, src, min_sz(seg, sn - at) * es);
      }
      if (j < nr) {
        size_t m = min_sz(seg, rn - at);
        char *dst = (k == p - 2 ? out : acc[k % 2]) + at * es;
        wf_sched_recv(s, left, dst, m * es);
        wf_sched_reduce(s, dst, in + (a->displs[rb] + at) * es, m); /* partial op ours */
      }
      wf_sched_end_round(s);
    }
  }
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "reducescatter ring: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_reducescatter_ring = {
    .name = "ring",
    .coll = WF_COLL_REDUCESCATTER,
    .supports = rs_supports,
    .build = rs_build,
};
