/* shm_numa.c - the node-aware staged algorithms ("numa"): allreduce,
 * broadcast and allgather through the staging regions (shm_stage.h) when
 * the host's ranks sit on several NUMA nodes (the segment's layout,
 * wf_stage_set_numa), so that a chunk crosses between nodes about once per node instead of
 * once per rank. Each rank's staging region is on its own node
 * (host/numa.c), so reading a peer's slot on the same node stays on the
 * node. Who folds, relays and reads what is the plan's (numa_plan.h).
 *
 * Allreduce, per chunk c (cut into n slices as the flat algorithm cuts it):
 *   A  every rank copies its whole chunk into its slot; ready = v(c);
 *   B  the folders of this rank's run fold their slices once the run's
 *      members are ready and (chain) the previous run's have reduced: the
 *      previous run's partial result first, then the run's inputs in rank
 *      order, so the bits are the left fold in rank order of "direct" and
 *      "shm"; the result replaces the folder's own input in its slot (only
 *      it reads that part); reduced = v(c). The last run's folder (the
 *      holder) also copies it into its buffer;
 *   R  a relay copies each slice whose holder is on another node from the
 *      holder's slot into its own (the one crossing into its node) and into
 *      its buffer; final = v(c);
 *   C  every other rank copies each slice from its node's holder or relay;
 *      done = v(c).
 * A rank's slot part is overwritten (B, R) only after every reader of what
 * it held has read it: the folds of a slice precede its holder's reduced.
 * Broadcast: the root copies chunk c into its slot; in every other node the
 * relay of c (once its own slot is free) copies it across into its slot and
 * buffer (final); the others copy it from the root (same node) or their
 * relay. Allgather: a slot holds one piece per rank, at the rank's
 * position; each rank copies its own piece in (ready), node k's relay of
 * rank j (node k's member j mod its size) copies j's piece across into the
 * same position of its own slot (final), and the others read each piece
 * from its owner (same node) or their relay. A rank's phases go in chunk order, copy-in at most `ahead` chunks
 * before copy-out, as in shm_stage.c, whose step, flags and failure
 * handling (gone, deadlines) these phases run under. */
#include <string.h>

#include "algo/shm_stage_int.h"
#include "reduce/reduce.h"

int wf_stage_numa_supports(const wf_coll_args *a) {
  const wf_stage *g = a->topo ? a->topo->stage : NULL;
  return (a->coll == WF_COLL_ALLREDUCE || a->coll == WF_COLL_BROADCAST || a->coll == WF_COLL_ALLGATHER) && g &&
         g->plan && g->plan->n == a->size && wf_stage_supports_as(a, 1);
}

static weft_status numa_build(const wf_coll_args *a, wf_sched *s) { return wf_stage_build_as(a, s, 1); }

const wf_algo wf_algo_allreduce_numa = {
    .name = "numa", .coll = WF_COLL_ALLREDUCE, .supports = wf_stage_numa_supports, .build = numa_build, .segments = 1};
const wf_algo wf_algo_broadcast_numa = {
    .name = "numa", .coll = WF_COLL_BROADCAST, .supports = wf_stage_numa_supports, .build = numa_build};
const wf_algo wf_algo_allgather_numa = {
    .name = "numa", .coll = WF_COLL_ALLGATHER, .supports = wf_stage_numa_supports, .build = numa_build};

/* A rank's flag f has reached chunk c. */
static int at(const stage_op *o, _Atomic uint64_t *f, size_t c) {
  return wf_stage_reached(wf_stage_load(f), wf_stage_vflag(o, c));
}

/* Chunk c: its first element (*start) and length. */
static size_t chunk_of(const stage_op *o, size_t c, size_t *start) {
  return wf_stage_piece(o->count, o->gm.E, c, start);
}

/* ------------------------------------------------------------ allreduce */

static int can_fold(const stage_op *o, size_t c) {
  const wf_numa_plan *p = o->g->plan;
  int j = p->run_of[o->me];
  for (int r = p->run_first[j]; r < p->run_first[j + 1]; r++)
    if (r != o->me && !at(o, &o->g->hdr[r]->ready, c)) return 0;
  for (int r = j > 0 ? p->run_first[j - 1] : 0; j > 0 && r < p->run_first[j]; r++)
    if (!at(o, &o->g->hdr[r]->reduced, c)) return 0;
  return 1;
}

/* B: this rank's slices of chunk c, folded onto the previous run's partial
 * results, in sub-blocks (the operands' lines stay in L1). */
static void fold(stage_op *o, size_t c) {
  const wf_numa_plan *p = o->g->plan;
  int j = p->run_of[o->me], last = j == p->nruns - 1;
  size_t es = o->es, start, m = chunk_of(o, c, &start), sub = SUB_BYTES / es;
  for (int s = 0; s < o->n; s++) {
    size_t off, len;
    wf_stage_block(m, o->n, s, &off, &len);
    if (wf_numa_folder(p, j, s) != o->me || !len) continue;
    char *dst = wf_stage_slot(o, o->me, c) + off * es;
    for (size_t b = 0; b < len; b += sub) {
      size_t k2 = len - b < sub ? len - b : sub;
      int k = 0;
      if (j > 0) o->x[k++] = wf_stage_slot(o, wf_numa_folder(p, j - 1, s), c) + (off + b) * es;
      for (int r = p->run_first[j]; r < p->run_first[j + 1]; r++) o->x[k++] = wf_stage_slot(o, r, c) + (off + b) * es;
      wf_fold(o->dt, o->op, dst + b * es, (const void *const *)o->x, k, k2, o->tmp);
    }
    if (last) wf_stage_scatter(o, start + off, dst, len);
  }
}

/* 1 if this rank relays slice s: its holder is on another node and this
 * rank is its node's relay for s. */
static int relays(const stage_op *o, int s) {
  const wf_numa_plan *p = o->g->plan;
  int h = wf_numa_holder(p, s);
  return p->node[h] != p->node[o->me] && wf_numa_relay(p, p->node[o->me], s) == o->me;
}

static int can_relay_ar(const stage_op *o, size_t c) {
  for (int s = 0; s < o->n; s++)
    if (relays(o, s) && !at(o, &o->g->hdr[wf_numa_holder(o->g->plan, s)]->reduced, c)) return 0;
  return 1;
}

static void relay_ar(stage_op *o, size_t c) {
  size_t es = o->es, start, m = chunk_of(o, c, &start);
  for (int s = 0; s < o->n; s++) {
    size_t off, len;
    wf_stage_block(m, o->n, s, &off, &len);
    if (!len || !relays(o, s)) continue;
    char *mine = wf_stage_slot(o, o->me, c) + off * es;
    wf_copy(mine, wf_stage_slot(o, wf_numa_holder(o->g->plan, s), c) + off * es, len * es);
    wf_stage_scatter(o, start + off, mine, len);
  }
}

/* C for slice s of chunk c: the rank to copy it from (-1: this rank has it
 * already) and its flag. */
static int ar_source(const stage_op *o, int s, _Atomic uint64_t **flag) {
  const wf_numa_plan *p = o->g->plan;
  int h = wf_numa_holder(p, s), relayed;
  if (h == o->me || relays(o, s)) return -1;
  int src = wf_numa_source(p, o->me, h, s, &relayed);
  *flag = relayed ? &o->g->hdr[src]->final : &o->g->hdr[src]->reduced;
  return src;
}

/* ------------------------------------------------------------ broadcast */

static int bc_relays(const stage_op *o, size_t c) {
  const wf_numa_plan *p = o->g->plan;
  return o->me != o->root && p->node[o->me] != p->node[o->root] &&
         wf_numa_relay(p, p->node[o->me], (int)(c % WF_NUMA_PLAN_MAX)) == o->me;
}

static int bc_source(const stage_op *o, size_t c, _Atomic uint64_t **flag) {
  int relayed;
  if (o->me == o->root || bc_relays(o, c)) return -1;
  int src = wf_numa_source(o->g->plan, o->me, o->root, (int)(c % WF_NUMA_PLAN_MAX), &relayed);
  *flag = relayed ? &o->g->hdr[src]->final : &o->g->hdr[src]->ready;
  return src;
}

/* ------------------------------------------------------------ allgather */

/* 1 if this rank relays rank j's pieces into its node. */
static int ag_relays(const stage_op *o, int j) {
  const wf_numa_plan *p = o->g->plan;
  return p->node[j] != p->node[o->me] && wf_numa_relay(p, p->node[o->me], j) == o->me;
}

/* Rank j's piece of chunk c: in every slot at position j. */
static size_t ag_piece(const stage_op *o, int j, size_t c, size_t *off) {
  return wf_stage_piece(o->counts[j], o->gm.E, c, off);
}

static char *ag_at(const stage_op *o, int rank, int j, size_t c) {
  return wf_stage_slot(o, rank, c) + (size_t)j * o->gm.E * o->es;
}

static int can_relay_ag(const stage_op *o, size_t c) {
  for (int j = 0; j < o->n; j++)
    if (ag_relays(o, j) && !at(o, &o->g->hdr[j]->ready, c)) return 0;
  return 1;
}

static void relay_ag(stage_op *o, size_t c) {
  size_t es = o->es, off, len;
  for (int j = 0; j < o->n; j++) {
    if (!ag_relays(o, j) || !(len = ag_piece(o, j, c, &off))) continue;
    wf_copy(ag_at(o, o->me, j, c), ag_at(o, j, j, c), len * es);
    o->put(o->out + (o->displs[j] + off) * es, ag_at(o, o->me, j, c), len * es);
  }
}

static int ag_source(const stage_op *o, int j, _Atomic uint64_t **flag) {
  int relayed;
  if (j == o->me || ag_relays(o, j)) return -1;
  int src = wf_numa_source(o->g->plan, o->me, j, j, &relayed);
  *flag = relayed ? &o->g->hdr[src]->final : &o->g->hdr[src]->ready;
  return src;
}

/* ------------------------------------------------------------ the phases */

static int can_relay(const stage_op *o, size_t c) {
  if (o->coll == WF_COLL_ALLREDUCE) return can_relay_ar(o, c);
  if (o->coll == WF_COLL_ALLGATHER) return can_relay_ag(o, c);
  return !bc_relays(o, c) || (wf_stage_slot_free(o, c) && at(o, &o->g->hdr[o->root]->ready, c));
}

static void relay(stage_op *o, size_t c) {
  if (o->coll == WF_COLL_ALLREDUCE) {
    relay_ar(o, c);
  } else if (o->coll == WF_COLL_ALLGATHER) {
    relay_ag(o, c);
  } else if (bc_relays(o, c)) {
    size_t off, len = wf_stage_piece(o->count, o->gm.E, c, &off);
    char *mine = wf_stage_slot(o, o->me, c);
    wf_copy(mine, wf_stage_slot(o, o->root, c), len * o->es);
    o->put(o->buf + off * o->es, mine, len * o->es);
  }
}

/* Items of chunk c: slices (allreduce), ranks' pieces (allgather) or the
 * chunk itself (broadcast). */
static int items(const stage_op *o) { return o->coll == WF_COLL_BROADCAST ? 1 : o->n; }

static int source(const stage_op *o, int s, size_t c, _Atomic uint64_t **flag) {
  return o->coll == WF_COLL_ALLREDUCE   ? ar_source(o, s, flag)
         : o->coll == WF_COLL_ALLGATHER ? ag_source(o, s, flag)
                                        : bc_source(o, c, flag);
}

static void copy_item(stage_op *o, int s, int src, size_t c) {
  size_t es = o->es;
  if (o->coll == WF_COLL_ALLREDUCE) {
    size_t start, m = chunk_of(o, c, &start), off, len;
    wf_stage_block(m, o->n, s, &off, &len);
    if (len) wf_stage_scatter(o, start + off, wf_stage_slot(o, src, c) + off * es, len);
  } else if (o->coll == WF_COLL_ALLGATHER) {
    size_t off, len = ag_piece(o, s, c, &off);
    if (len) o->put(o->out + (o->displs[s] + off) * es, ag_at(o, src, s, c), len * es);
  } else {
    size_t off, len = wf_stage_piece(o->count, o->gm.E, c, &off);
    o->put(o->buf + off * es, wf_stage_slot(o, src, c), len * es);
  }
}

/* C: what chunk cout's sources allow; done once every item is in. */
static int copy_out(stage_op *o) {
  int moved = 0, left = 0;
  size_t c = o->cout;
  for (int s = 0; s < items(o); s++) {
    if (o->cmask >> s & 1) continue;
    _Atomic uint64_t *flag = NULL;
    int src = source(o, s, c, &flag);
    if (src >= 0 && !at(o, flag, c)) {
      left = 1;
      continue;
    }
    if (src >= 0) copy_item(o, s, src, c);
    o->cmask |= (uint64_t)1 << s;
    moved = 1;
  }
  if (!left) {
    wf_stage_publish(o, &o->g->hdr[o->me]->done, wf_stage_vflag(o, c));
    o->cout++;
    o->cmask = 0;
    moved = 1;
  }
  return moved;
}

static void copy_in(stage_op *o, size_t c) {
  size_t start, m = chunk_of(o, c, &start), off, len;
  if (o->coll == WF_COLL_ALLREDUCE) {
    wf_stage_gather(o, wf_stage_slot(o, o->me, c), start, m);
  } else if (o->coll == WF_COLL_ALLGATHER) { /* its own piece at its position */
    if ((len = ag_piece(o, o->me, c, &off))) wf_copy(ag_at(o, o->me, o->me, c), o->in + off * o->es, len * o->es);
  } else {
    wf_copy(wf_stage_slot(o, o->me, c), o->buf + start * o->es, m * o->es);
  }
}

int wf_stage_numa_step(stage_op *o) {
  int moved = 0;
  stage_hdr *me = o->g->hdr[o->me];
  if (o->cout < o->crel) moved |= copy_out(o);
  if (o->crel < o->cred && can_relay(o, o->crel)) {
    relay(o, o->crel);
    wf_stage_publish(o, &me->final, wf_stage_vflag(o, o->crel));
    o->crel++;
    moved = 1;
  }
  if (o->cred < o->cin && (o->coll != WF_COLL_ALLREDUCE || can_fold(o, o->cred))) {
    if (o->coll == WF_COLL_ALLREDUCE) {
      fold(o, o->cred);
      wf_stage_publish(o, &me->reduced, wf_stage_vflag(o, o->cred));
    }
    o->cred++;
    moved = 1;
  }
  if (o->has_a && o->cin < o->gm.nchunks && wf_stage_slot_free(o, o->cin)) {
    copy_in(o, o->cin);
    wf_stage_publish(o, &me->ready, wf_stage_vflag(o, o->cin));
    wf_stage_copy_own(o, o->cin); /* allgather: nobody waits for it */
    o->cin++;
    moved = 1;
  }
  return moved;
}

int wf_stage_numa_can_move(const stage_op *o) {
  if (o->cout < o->crel) {
    for (int s = 0; s < items(o); s++) {
      _Atomic uint64_t *flag = NULL;
      if (!(o->cmask >> s & 1) && (source(o, s, o->cout, &flag) < 0 || at(o, flag, o->cout))) return 1;
    }
  }
  if (o->crel < o->cred && can_relay(o, o->crel)) return 1;
  if (o->cred < o->cin && (o->coll != WF_COLL_ALLREDUCE || can_fold(o, o->cred))) return 1;
  return o->has_a && o->cin < o->gm.nchunks && wf_stage_slot_free(o, o->cin);
}
