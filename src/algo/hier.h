/* hier.h - what the hierarchical algorithms (allreduce_hier.c,
 * allgather_hier.c, broadcast_hier.c) share: the group's layout by host,
 * built from wf_coll_args.topo, and the rule under which the selection
 * table (select.c) picks them (layout_hier.c).
 *
 * Layout: hosts are topo's host indices; a host's ranks are its group ranks
 * in ascending order, and a rank's local index is its position there. Every
 * rank computes the same layout from the same topo. A NULL topo is one host
 * holding every rank. */
#ifndef WF_ALGO_HIER_H
#define WF_ALGO_HIER_H
#include "algo/algo.h"

typedef struct wf_hier {
  int p, nhosts;
  int maxloc, minloc; /* most and fewest ranks on one host */
  int *host_of;       /* p: group rank -> host */
  int *lidx;          /* p: group rank -> local index */
  int *nloc;          /* nhosts: ranks per host */
  int *first;         /* nhosts + 1: host h's ranks are members[first[h] .. first[h + 1]) */
  int *members;       /* p: group ranks, host by host, ascending within a host */
} wf_hier;

/* 1 if a->topo is absent or consistent (nhosts in 1..size, every host_of in
 * range, no empty host); the hierarchical algorithms decline otherwise. */
int wf_hier_topo_ok(const wf_coll_args *a);
/* The hierarchical setting of collective c: WEFT_HIERARCHICAL_ALLREDUCE or
 * _ALLGATHER when 0 or 1, else WEFT_HIERARCHICAL (-1 automatic, 0 never,
 * 1 whenever the group spans hosts). */
int64_t wf_hier_mode(wf_coll c, const wf_settings *s);
/* The rule (the selection table's "spans hosts" rows): 1 if a's topo is
 * consistent, spans hosts and the mode allows: 1, or -1 when some host has
 * more than one of the group's ranks; else 0. */
int wf_hier_rule(const wf_coll_args *a);
/* Builds the layout (one allocation; wf_hier_free releases it). */
weft_status wf_hier_init(wf_hier *h, const wf_coll_args *a);
void wf_hier_free(wf_hier *h);

/* Group rank of host g's local index l. */
static inline int wf_hier_member(const wf_hier *h, int g, int l) { return h->members[h->first[g] + l]; }

/* Block b of n elements split in k parts: the first n % k parts get one
 * element more (the split of ring and direct). */
static inline void wf_hier_block(size_t n, int k, int b, size_t *off, size_t *len) {
  size_t q = n / (size_t)k, r = n % (size_t)k, ub = (size_t)b;
  *len = q + (ub < r ? 1 : 0);
  *off = q * ub + (ub < r ? ub : r);
}

#endif
