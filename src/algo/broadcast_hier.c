/* broadcast_hier.c - hierarchical broadcast for groups that span hosts: the
 * data cross the network once per other host.
 *
 * Each host has a leader: the root on the root's host, local index 0
 * elsewhere. Ranks are ordered host by host starting at the root's host
 * (root first, then that host's other ranks in local order; then hosts
 * root_host+1, ... wrapping, each leader first).
 *  - small (at most WEFT_SMALL_BROADCAST_BYTES): a binomial tree over the
 *    leaders (hosts in the order above), then a binomial tree within every
 *    host from its leader: ceil(log2 H) + ceil(log2 max ranks per host)
 *    rounds;
 *  - large: a pipelined chain through the order above in segments of
 *    segment_bytes (as broadcast_chain.c): every host boundary is one
 *    network link, each crossed once.
 * No scratch: every rank receives into place and forwards from there. */
#include <stdint.h>

#include "algo/algo.h"
#include "algo/hier.h"
#include "util/err.h"


static int bc_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_BROADCAST && a->size >= 1 && a->root >= 0 && a->root < a->size && wf_hier_topo_ok(a);
}

static int is_small(const wf_coll_args *a) {
  int64_t small = wf_algo_set(a)->small_broadcast_bytes;
  return small >= 0 && a->count <= (uint64_t)small / a->elem_size;
}

static size_t nsegs(size_t n, size_t seg) { return n == 0 ? 0 : 1 + (n - 1) / seg; }

/* Position of local index j in host g's order (leader first). */
static int host_pos(const wf_hier *h, int g, int j, int root) {
  if (g != h->host_of[root]) return j;
  int lr = h->lidx[root];
  return j == lr ? 0 : j < lr ? j + 1 : j;
}
/* Group rank at position v of host g's order (inverse of host_pos). */
static int host_at(const wf_hier *h, int g, int v, int root) {
  if (g != h->host_of[root]) return wf_hier_member(h, g, v);
  int lr = h->lidx[root];
  return wf_hier_member(h, g, v == 0 ? lr : v <= lr ? v - 1 : v);
}

/* One binomial-tree step (mask m) among k positions, position v: sends to
 * v + m or receives from v - m, as broadcast_tree.c. Returns the peer's
 * position and sets *send, or -1. */
static int tree_peer(int v, int k, int m, int *send) {
  if (v % (2 * m) == 0 && v + m < k) {
    *send = 1;
    return v + m;
  }
  if (v % (2 * m) == m) {
    *send = 0;
    return v - m;
  }
  return -1;
}

static int top_mask(int k) {
  int t = 1;
  while (t < k) t *= 2;
  return t / 2;
}

static weft_status bc_build(const wf_coll_args *a, wf_sched *s) {
  if (a->size == 1 || a->count == 0) return WEFT_OK; /* the data are in place */
  wf_hier h;
  WF_CHECK(wf_hier_init(&h, a));
  int H = h.nhosts, rh = h.host_of[a->root], me = a->rank;
  int host = h.host_of[me], hv = (host - rh + H) % H; /* my host's position among the hosts */
  int lv = host_pos(&h, host, h.lidx[me], a->root);  /* my position within my host */
  char *buf = a->buf;
  size_t bytes = a->count * a->elem_size;

  if (is_small(a)) {
    /* across hosts, among the leaders */
    for (int m = top_mask(H); m >= 1; m /= 2) {
      int send, pv = lv == 0 ? tree_peer(hv, H, m, &send) : -1;
      if (pv >= 0) {
        int peer = host_at(&h, (pv + rh) % H, 0, a->root);
        if (send) wf_sched_send(s, peer, buf, bytes);
        else wf_sched_recv(s, peer, buf, bytes);
      }
      wf_sched_end_round(s);
    }
    /* within every host, from its leader */
    for (int m = top_mask(h.maxloc); m >= 1; m /= 2) {
      int send, pv = tree_peer(lv, h.nloc[host], m, &send);
      if (pv >= 0) {
        int peer = host_at(&h, host, pv, a->root);
        if (send) wf_sched_send(s, peer, buf, bytes);
        else wf_sched_recv(s, peer, buf, bytes);
      }
      wf_sched_end_round(s);
    }
  } else {
    /* chain position: the ranks of the hosts before mine, then mine */
    size_t v = (size_t)lv;
    for (int k = 0; k < hv; k++) v += (size_t)h.nloc[(rh + k) % H];
    int prev = -1, next = -1;
    if (lv > 0) prev = host_at(&h, host, lv - 1, a->root);
    else if (hv > 0) {
      int ph = (host - 1 + H) % H;
      prev = host_at(&h, ph, h.nloc[ph] - 1, a->root);
    }
    if (lv + 1 < h.nloc[host]) next = host_at(&h, host, lv + 1, a->root);
    else if (hv + 1 < H) next = host_at(&h, (host + 1) % H, 0, a->root);
    size_t es = a->elem_size, seg = a->segment_bytes ? a->segment_bytes / es : SIZE_MAX;
    if (seg == 0) seg = 1;
    size_t S = nsegs(a->count, seg);
    /* as broadcast_chain.c: position v receives segment t - v + 1 and
     * forwards segment t - v in round t */
    for (size_t t = v ? v - 1 : 0; t < S + v; t++) {
      if (prev >= 0 && t + 1 >= v && t + 1 - v < S) {
        size_t j = t + 1 - v, n = a->count - j * seg < seg ? a->count - j * seg : seg;
        wf_sched_recv(s, prev, buf + j * seg * es, n * es);
      }
      if (next >= 0 && t >= v && t - v < S) {
        size_t j = t - v, n = a->count - j * seg < seg ? a->count - j * seg : seg;
        wf_sched_send(s, next, buf + j * seg * es, n * es);
      }
      wf_sched_end_round(s);
    }
  }
  wf_hier_free(&h);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "broadcast hier: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_broadcast_hier = {
    .name = "hier",
    .coll = WF_COLL_BROADCAST,
    .supports = bc_supports,
    .build = bc_build,
};
