/* numa_plan.h - the node-aware staged pattern's plan (shm_numa.c): from the
 * NUMA node of each rank of one host (host/numa.h's layout, every rank of
 * the host has the same), which rank folds, relays and reads what. Pure:
 * the same layout gives every rank the same plan, and the unit tests run it
 * without a host.
 *
 * The ranks of a node, in rank order, are its members; nodes are ordered by
 * number; order[] lists the members of each node in turn (wf_numa_order's
 * grouping). An allreduce chunk is cut into n slices (slice s as the flat
 * staged algorithm cuts it). Folds stay in rank order, the one order of
 * weft (reduce/fold.c):
 *  - chain: when the node changes seldom along the ranks (a block layout
 *    such as 0,0,1,1), the ranks are cut into runs of consecutive ranks on
 *    one node; slice s is folded run by run, by one member of each run
 *    (folder(j, s) = run j's member s mod its length), each taking the
 *    previous run's partial result and folding its run's inputs onto it:
 *    one cross-node read of a slice per run boundary;
 *  - flat: otherwise (interleaved layouts such as 0,1,0,1, where a chain
 *    would cross nodes at every rank), rank s folds slice s from every
 *    rank's input, as the flat algorithm does.
 * Chosen by the bytes that cross nodes per chunk (in slices): the chain
 * (runs - 1) * n, flat the sum over folders s of the inputs on other nodes.
 * Then the result spreads one copy per node: the last folder of slice s
 * holds it (holder(s)); in every other node one member (relay(k, s) = node
 * k's member s mod its size) copies it across, and the node's other members
 * copy it from that relay. A broadcast spreads the same way from the root,
 * chunk c relayed by node k's member c mod its size, and an allgather each
 * rank j's pieces, relayed by node k's member j mod its size. */
#ifndef WF_ALGO_NUMA_PLAN_H
#define WF_ALGO_NUMA_PLAN_H

#define WF_NUMA_PLAN_MAX 64 /* ranks (staging's most) */

typedef struct wf_numa_plan {
  int n;                            /* ranks */
  int nnodes;                       /* distinct nodes */
  int node[WF_NUMA_PLAN_MAX];       /* rank -> node index (0..nnodes-1, nodes by number) */
  int node_id[WF_NUMA_PLAN_MAX];    /* node index -> the node's number */
  int first[WF_NUMA_PLAN_MAX + 1];  /* node k's members: order[first[k] .. first[k+1]) */
  int order[WF_NUMA_PLAN_MAX];      /* the ranks grouped by node, rank order within a node */
  int node_runs;                    /* maximal runs of consecutive ranks on one node */
  int chain;                        /* 1: slices folded run by run; 0: flat */
  int nruns;                        /* runs of consecutive ranks on one node (1 when flat: all ranks) */
  int run_first[WF_NUMA_PLAN_MAX + 1]; /* run j: ranks run_first[j] .. run_first[j+1]-1 */
  int run_of[WF_NUMA_PLAN_MAX];     /* rank -> its run (0 when flat) */
} wf_numa_plan;

/* The plan for n ranks on nodes[] (node numbers >= 0): 1 when the pattern
 * applies (2..WF_NUMA_PLAN_MAX ranks, every rank's node known, at least two
 * nodes), else 0 (p untouched beyond n). */
int wf_numa_plan_make(int n, const int *nodes, wf_numa_plan *p);

/* Who folds slice s in run j. */
int wf_numa_folder(const wf_numa_plan *p, int j, int s);
/* Who holds slice s's result first (the last run's folder). */
int wf_numa_holder(const wf_numa_plan *p, int s);
/* Who brings item s (an allreduce slice, a broadcast chunk) into node k
 * from a rank on another node: node k's member s mod its size. */
int wf_numa_relay(const wf_numa_plan *p, int k, int s);
/* Where rank r copies an item from, held first by rank src (a slice's
 * holder, a broadcast's root): src itself when r shares its node or r is
 * its node's relay for s, else r's node's relay; r == src: r. *relayed is 1
 * when that source is a relay (it copies the item across first). */
int wf_numa_source(const wf_numa_plan *p, int r, int src, int s, int *relayed);

/* Bytes that cross nodes per allreduce chunk, in slices of 1/n chunk,
 * folds only: the chain's and flat's (the plan picks the smaller; ties flat). */
int wf_numa_cost_chain(const wf_numa_plan *p);
int wf_numa_cost_flat(const wf_numa_plan *p);

#endif
