/* allgather_hier.c - hierarchical allgatherv for groups that span hosts:
 * every block crosses the network once per other host, then spreads within
 * each host over shared memory.
 *
 * Round 1: each rank sends its block to the other ranks of its host, and to
 * one rank on every other host g: the one of local index (its own local
 * index mod n_g), so a host's incoming blocks are spread over its ranks.
 * Round 2: each rank forwards the blocks it received from other hosts to the
 * other ranks of its host. Blocks are received straight into place; no
 * scratch, nothing reduced. Both sides of every pair derive the same
 * messages, in ascending order of the block's rank, from the layout and the
 * counts (empty blocks are skipped by both). */
#include "algo/algo.h"
#include "algo/hier.h"
#include "util/err.h"


static int ag_supports(const wf_coll_args *a) {
  return a->coll == WF_COLL_ALLGATHER && a->size >= 1 && wf_hier_topo_ok(a);
}

/* 1 if rank z's block reaches host `host` through the rank of local index l
 * there (z on another host). */
static int relays(const wf_hier *h, int z, int host, int l) {
  return h->host_of[z] != host && h->lidx[z] % h->nloc[host] == l;
}

static weft_status ag_build(const wf_coll_args *a, wf_sched *s) {
  int p = a->size, r = a->rank;
  size_t es = a->elem_size;
  char *out = a->out;
  const char *in = a->in;
  if (p == 1) {
    wf_sched_copy(s, out + a->displs[r] * es, in, a->counts[r] * es);
    return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allgather hier: no memory for the schedule") : WEFT_OK;
  }
  wf_hier h;
  WF_CHECK(wf_hier_init(&h, a));
  int host = h.host_of[r], l = h.lidx[r], nl = h.nloc[host];
  size_t mine = a->counts[r] * es;

  /* round 1: my block to my host and to one rank per other host; receive
   * my host's blocks and the other hosts' blocks I relay */
  for (int j = 0; j < nl; j++)
    if (j != l) wf_sched_send(s, wf_hier_member(&h, host, j), in, mine);
  for (int g = 0; g < h.nhosts; g++)
    if (g != host) wf_sched_send(s, wf_hier_member(&h, g, l % h.nloc[g]), in, mine);
  for (int z = 0; z < p; z++)
    if (z != r && (h.host_of[z] == host || relays(&h, z, host, l)))
      wf_sched_recv(s, z, out + a->displs[z] * es, a->counts[z] * es);
  /* after the round's sends: in may alias this place anyway */
  wf_sched_copy(s, out + a->displs[r] * es, in, mine);
  wf_sched_end_round(s);

  /* round 2: forward what I relay; receive what my host's ranks relay */
  for (int z = 0; z < p; z++) {
    if (relays(&h, z, host, l))
      for (int j = 0; j < nl; j++)
        if (j != l) wf_sched_send(s, wf_hier_member(&h, host, j), out + a->displs[z] * es, a->counts[z] * es);
  }
  for (int j = 0; j < nl; j++) {
    if (j == l) continue;
    for (int z = 0; z < p; z++)
      if (relays(&h, z, host, j))
        wf_sched_recv(s, wf_hier_member(&h, host, j), out + a->displs[z] * es, a->counts[z] * es);
  }
  wf_sched_end_round(s);
  wf_hier_free(&h);
  return s->oom ? wf_err(WEFT_ERR_NO_MEMORY, "allgather hier: no memory for the schedule") : WEFT_OK;
}

const wf_algo wf_algo_allgather_hier = {
    .name = "hier",
    .coll = WF_COLL_ALLGATHER,
    .supports = ag_supports,
    .build = ag_build,
};
