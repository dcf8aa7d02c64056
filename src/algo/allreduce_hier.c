/* allreduce_hier.c - hierarchical allreduce for groups that span hosts:
 * a reduce-scatter among each host's ranks (shared memory), an allreduce of
 * each block across hosts among the ranks that hold it (the network), and an
 * allgather among each host's ranks.
 *
 * Fold order (the bits): every element is
 *   F_0 op F_1 op ... op F_{H-1}   (left fold in host order)
 * where F_h is the left fold of host h's ranks in group rank order,
 * ((x_a op x_b) op x_c) ... for a < b < c on host h, and hosts are numbered
 * in order of their lowest group rank (algo.h). The order depends only on
 * the group's layout, never on the tensor's size, the element's position,
 * the segment size or fusion, so a tensor fused with others gets the same
 * bits as alone. It is direct's order when the group is on one host.
 *
 * Blocks: the data are cut into chunks (pipeline segments), each chunk into
 * m blocks, m the most ranks on one host. On host h, block b is owned by
 * local index b mod n_h (so a host with fewer ranks has ranks owning more
 * than one block; a one-rank host owns them all: the leader scheme falls out
 * of the same rule). Per chunk:
 *   1. intra-host reduce-scatter: every rank sends its piece of block b to
 *      b's owner on its host, which folds the pieces in local order;
 *   2a. across hosts, among the H owners of block b (one per host): block b
 *      is cut into H sub-blocks, the owner on host g owns sub-block g,
 *      receives the other hosts' partials of it and folds them in host
 *      order; 2b. each sub-block owner sends its result to the other owners;
 *   3. intra-host allgather: each owner sends its block to its host's ranks.
 * The exchange across hosts is direct (not ring) at every size: each owner
 * sends and receives (H-1)/H of its block per step, as ring would, in 2
 * steps instead of 2(H-1), and ring would fold each sub-block starting from
 * a different host, which would tie the bits to the element's position.
 * Every result element is computed once, by its sub-block owner, and then
 * only copied, so all ranks hold the same bits.
 *
 * Pipeline: round t runs step 1 of chunk t, 2a of t-1, 2b of t-2 and 3 of
 * t-3 (nchunks + 3 rounds); folds run at the end of the round. A message
 * and its receive are always in the same round, emitted on both sides in
 * (step, block) order, so every pair matches. Scratch: the owner's incoming
 * pieces of one chunk for steps 1 and 2a, capped by shrinking the chunk. */
#include <stdint.h>

#include "algo/algo.h"
#include "algo/hier.h"
#include "util/err.h"

#define WF_HIER_MAX_SCRATCH ((size_t)64 << 20)

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t cdiv(size_t a, size_t b) { return a / b + (a % b ? 1 : 0); }

/* The chunking, the same on every rank. */
typedef struct geom {
  int m;              /* blocks per chunk */
  size_t chunk;       /* elements per chunk (the last may be shorter) */
  size_t nchunks;
  size_t blkmax, submax; /* largest block and sub-block of a chunk */
} geom;

static void geometry(const wf_coll_args *a, const wf_hier *h, geom *g) {
  g->m = h->maxloc;
  size_t m = (size_t)g->m, H = (size_t)h->nhosts;
  /* scratch per rank in blocks: on host x, owned blocks x (pieces of the
   * other local ranks + pieces of the other hosts); bound the worst host */
  size_t slots = 1;
  for (int x = 0; x < h->nhosts; x++) {
    size_t own = cdiv(m, (size_t)h->nloc[x]), s = own * ((size_t)h->nloc[x] - 1 + H - 1);
    if (s > slots) slots = s;
  }
  size_t seg = a->segment_bytes ? a->segment_bytes / a->elem_size : SIZE_MAX;
  size_t cap = WF_HIER_MAX_SCRATCH / a->elem_size / slots;
  seg = min_sz(seg ? seg : 1, cap ? cap : 1);
  g->chunk = seg > a->count / m ? a->count : seg * m; /* blocks of about one segment */
  if (g->chunk == 0) g->chunk = 1;
  g->nchunks = cdiv(a->count, g->chunk);
  g->blkmax = cdiv(min_sz(g->chunk, a->count), m);
  g->submax = cdiv(g->blkmax, H);
}

static int hier_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_ALLREDUCE && a->size >= 1 && wf_hier_topo_ok(a);
}

/* State of one rank's build. */
typedef struct ctx {
  const wf_coll_args *a;
  const wf_hier *h;
  const geom *g;
  wf_sched *s;
  char *buf;
  size_t es;
  int me, host, l, nl, H; /* my rank, host, local index, host's ranks, hosts */
  char *s1, *s2;          /* scratch: step 1 pieces, step 2a partials */
} ctx;

static int owner(const ctx *c, int b, int host) {
  return wf_hier_member(c->h, host, b % c->h->nloc[host]);
}

/* Chunk k's block b: absolute offset and length in elements. */
static void block(const ctx *c, size_t k, int b, size_t *off, size_t *n) {
  size_t base = k * c->g->chunk, len = min_sz(c->g->chunk, c->a->count - base);
  wf_hier_block(len, c->g->m, b, off, n);
  *off += base;
}

/* Scratch slot of local index j's piece of my k-th owned block (step 1),
 * and of host x's partial of my sub-block of it (step 2a). */
static char *slot1(const ctx *c, int k, int j) {
  size_t i = (size_t)k * (size_t)(c->nl - 1) + (size_t)(j < c->l ? j : j - 1);
  return c->s1 + i * c->g->blkmax * c->es;
}
static char *slot2(const ctx *c, int k, int x) {
  size_t i = (size_t)k * (size_t)(c->H - 1) + (size_t)(x < c->host ? x : x - 1);
  return c->s2 + i * c->g->submax * c->es;
}

/* Step 1 of chunk k: pieces to the owners; the owner receives them. */
static void step1(const ctx *c, size_t k) {
  for (int b = 0; b < c->g->m; b++) {
    size_t off, n;
    block(c, k, b, &off, &n);
    int o = owner(c, b, c->host);
    if (o != c->me) {
      wf_sched_send(c->s, o, c->buf + off * c->es, n * c->es);
      continue;
    }
    for (int j = 0; j < c->nl; j++)
      if (j != c->l) wf_sched_recv(c->s, wf_hier_member(c->h, c->host, j), slot1(c, b / c->nl, j), n * c->es);
  }
}

/* Steps 2a (sub-blocks to their owners) and 2b (results back) of chunk k,
 * for the blocks this rank owns. */
static void step2(const ctx *c, size_t k, int back) {
  for (int b = c->l; b < c->g->m; b += c->nl) {
    size_t off, n, moff, mn;
    block(c, k, b, &off, &n);
    wf_hier_block(n, c->H, c->host, &moff, &mn);
    for (int x = 0; x < c->H; x++) {
      if (x == c->host) continue;
      int peer = owner(c, b, x);
      size_t soff, sn;
      wf_hier_block(n, c->H, x, &soff, &sn);
      if (!back) {
        wf_sched_send(c->s, peer, c->buf + (off + soff) * c->es, sn * c->es);
        wf_sched_recv(c->s, peer, slot2(c, b / c->nl, x), mn * c->es);
      } else {
        wf_sched_send(c->s, peer, c->buf + (off + moff) * c->es, mn * c->es);
        wf_sched_recv(c->s, peer, c->buf + (off + soff) * c->es, sn * c->es);
      }
    }
  }
}

/* Step 3 of chunk k: owners send their blocks to the host's other ranks. */
static void step3(const ctx *c, size_t k) {
  for (int b = 0; b < c->g->m; b++) {
    size_t off, n;
    block(c, k, b, &off, &n);
    int o = owner(c, b, c->host);
    if (o != c->me) {
      wf_sched_recv(c->s, o, c->buf + off * c->es, n * c->es);
      continue;
    }
    for (int j = 0; j < c->nl; j++)
      if (j != c->l) wf_sched_send(c->s, wf_hier_member(c->h, c->host, j), c->buf + off * c->es, n * c->es);
  }
}

/* Folds of chunk k: step 1 (local order) or step 2a (host order). The
 * accumulator is the first operand's place: the buffer when it is ours,
 * else its scratch slot, copied into the buffer at the end. */
static void fold(const ctx *c, size_t k, int across) {
  for (int b = c->l; b < c->g->m; b += c->nl) {
    size_t off, n;
    block(c, k, b, &off, &n);
    int kb = b / c->nl, me = across ? c->host : c->l, cnt = across ? c->H : c->nl;
    if (across) {
      size_t soff;
      wf_hier_block(n, c->H, c->host, &soff, &n);
      off += soff;
    }
    char *mine = c->buf + off * c->es;
    char *acc = me == 0 ? mine : across ? slot2(c, kb, 0) : slot1(c, kb, 0);
    for (int i = 1; i < cnt; i++)
      wf_sched_reduce(c->s, acc, i == me ? mine : across ? slot2(c, kb, i) : slot1(c, kb, i), n);
    if (me != 0) wf_sched_copy(c->s, mine, acc, n * c->es);
  }
}

static weft_status hier_build(const wf_coll_args *a, wf_sched *s) {
  if (a->size == 1 || a->count == 0) return WEFT_OK;
  wf_hier h;
  WF_CHECK(wf_hier_init(&h, a));
  geom g;
  geometry(a, &h, &g);
  ctx c = {.a = a, .h = &h, .g = &g, .s = s, .buf = a->buf, .es = a->elem_size, .me = a->rank,
           .host = h.host_of[a->rank], .l = h.lidx[a->rank], .H = h.nhosts};
  c.nl = h.nloc[c.host];
  size_t own = cdiv((size_t)g.m - (size_t)c.l, (size_t)c.nl);
  size_t b1 = own * (size_t)(c.nl - 1) * g.blkmax * c.es, b2 = own * (size_t)(c.H - 1) * g.submax * c.es;
  char *tmp = wf_sched_scratch(s, b1 + b2);
  if (!tmp) {
    wf_hier_free(&h);
    return wf_err(WEFT_ERR_NO_MEMORY, "allreduce hier: no memory for %zu bytes of scratch", b1 + b2);
  }
  c.s1 = tmp;
  c.s2 = tmp + b1;
  for (size_t t = 0; t < g.nchunks + 3; t++) {
    if (t < g.nchunks) step1(&c, t);
    if (t >= 1 && t - 1 < g.nchunks) step2(&c, t - 1, 0);
    if (t >= 2 && t - 2 < g.nchunks) step2(&c, t - 2, 1);
    if (t >= 3 && t - 3 < g.nchunks) step3(&c, t - 3);
    if (t < g.nchunks) fold(&c, t, 0);
    if (t >= 1 && t - 1 < g.nchunks) fold(&c, t - 1, 1);
    wf_sched_end_round(s);
  }
  wf_hier_free(&h);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allreduce hier: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allreduce_hier = {
    .name = "hier",
    .coll = WF_COLL_ALLREDUCE,
    .supports = hier_supports,
    .build = hier_build,
};
