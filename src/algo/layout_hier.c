/* layout_hier.c - the layout by host that the hierarchical algorithms share
 * (hier.h): topo validation, the rule under which the selection table picks
 * them (WEFT_HIERARCHICAL) and the per-host member lists. */
#include <stdlib.h>
#include <string.h>

#include "algo/hier.h"
#include "util/err.h"

int wf_hier_topo_ok(const wf_coll_args *a) {
  const wf_topo *t = a->topo;
  if (!t) return 1;
  if (t->nhosts < 1 || t->nhosts > a->size || !t->host_of) return 0;
  /* hosts are numbered in order of their lowest group rank (algo.h), so
   * every host index is at most one above the highest seen so far, and all
   * of 0..nhosts-1 appear */
  int next = 0;
  for (int i = 0; i < a->size; i++) {
    int h = t->host_of[i];
    if (h < 0 || h >= t->nhosts || h > next) return 0;
    if (h == next) next++;
  }
  return next == t->nhosts;
}

int64_t wf_hier_mode(wf_coll c, const wf_settings *s) {
  int64_t mode = -1;
  if (c == WF_COLL_ALLREDUCE) mode = s->hierarchical_allreduce;
  if (c == WF_COLL_ALLGATHER) mode = s->hierarchical_allgather;
  return mode == 0 || mode == 1 ? mode : s->hierarchical;
}

int wf_hier_rule(const wf_coll_args *a) {
  const wf_topo *t = a->topo;
  if (!t || t->nhosts < 2 || !wf_hier_topo_ok(a)) return 0;
  int64_t mode = wf_hier_mode(a->coll, wf_algo_set(a));
  if (mode == 0) return 0;
  if (mode == 1) return 1;
  /* automatic: worth it when some host holds more than one rank */
  return t->nhosts < a->size;
}

weft_status wf_hier_init(wf_hier *h, const wf_coll_args *a) {
  memset(h, 0, sizeof *h);
  int p = a->size, H = a->topo ? a->topo->nhosts : 1;
  if (!wf_hier_topo_ok(a)) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "hierarchical: inconsistent topology");
  int *mem = malloc(sizeof(int) * ((size_t)p * 3 + (size_t)H * 2 + 1));
  if (!mem) return wf_err(WEFT_ERR_NO_MEMORY, "hierarchical: no memory for the layout of %d ranks", p);
  h->p = p;
  h->nhosts = H;
  h->host_of = mem;
  h->lidx = mem + p;
  h->members = mem + 2 * p;
  h->nloc = mem + 3 * p;
  h->first = mem + 3 * p + H; /* H + 1 entries */
  for (int g = 0; g < H; g++) h->nloc[g] = 0;
  for (int i = 0; i < p; i++) {
    int g = a->topo ? a->topo->host_of[i] : 0;
    h->host_of[i] = g;
    h->lidx[i] = h->nloc[g]++;
  }
  h->first[0] = 0;
  h->maxloc = 0;
  h->minloc = p;
  for (int g = 0; g < H; g++) {
    h->first[g + 1] = h->first[g] + h->nloc[g];
    if (h->nloc[g] > h->maxloc) h->maxloc = h->nloc[g];
    if (h->nloc[g] < h->minloc) h->minloc = h->nloc[g];
  }
  for (int i = 0; i < p; i++) h->members[h->first[h->host_of[i]] + h->lidx[i]] = i;
  return WEFT_OK;
}

void wf_hier_free(wf_hier *h) {
  free(h->host_of);
  memset(h, 0, sizeof *h);
}
