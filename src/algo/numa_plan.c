/* numa_plan.c - the node-aware staged pattern's plan (numa_plan.h). */
#include "algo/numa_plan.h"

#include <string.h>

int wf_numa_cost_chain(const wf_numa_plan *p) { return (p->node_runs - 1) * p->n; }

int wf_numa_cost_flat(const wf_numa_plan *p) {
  int c = 0;
  for (int s = 0; s < p->n; s++) { /* folder s reads the inputs of the ranks on other nodes */
    int k = p->node[s];
    c += p->n - (p->first[k + 1] - p->first[k]);
  }
  return c;
}

int wf_numa_plan_make(int n, const int *nodes, wf_numa_plan *p) {
  if (n < 2 || n > WF_NUMA_PLAN_MAX || !nodes) return 0;
  for (int i = 0; i < n; i++)
    if (nodes[i] < 0) return 0;
  memset(p, 0, sizeof *p);
  p->n = n;
  /* node indices by node number: repeatedly the smallest number not taken */
  int taken = 0, last = -1;
  while (taken < n) {
    int next = -1;
    for (int i = 0; i < n; i++)
      if (nodes[i] > last && (next < 0 || nodes[i] < next)) next = nodes[i];
    int k = p->nnodes++;
    p->node_id[k] = next;
    p->first[k] = taken;
    for (int i = 0; i < n; i++)
      if (nodes[i] == next) {
        p->node[i] = k;
        p->order[taken++] = i;
      }
    last = next;
  }
  p->first[p->nnodes] = n;
  if (p->nnodes < 2) return 0;
  p->node_runs = 1;
  for (int i = 1; i < n; i++) p->node_runs += nodes[i] != nodes[i - 1];
  p->chain = wf_numa_cost_chain(p) < wf_numa_cost_flat(p);
  p->nruns = p->chain ? p->node_runs : 1;
  int j = 0;
  p->run_first[0] = 0;
  for (int i = 0; i < n; i++) {
    if (p->chain && i > 0 && nodes[i] != nodes[i - 1]) p->run_first[++j] = i;
    p->run_of[i] = j;
  }
  p->run_first[p->nruns] = n;
  return 1;
}

int wf_numa_folder(const wf_numa_plan *p, int j, int s) {
  int len = p->run_first[j + 1] - p->run_first[j];
  return p->run_first[j] + s % len;
}

int wf_numa_holder(const wf_numa_plan *p, int s) { return wf_numa_folder(p, p->nruns - 1, s); }

int wf_numa_relay(const wf_numa_plan *p, int k, int s) {
  int size = p->first[k + 1] - p->first[k];
  return p->order[p->first[k] + s % size];
}

int wf_numa_source(const wf_numa_plan *p, int r, int src, int s, int *relayed) {
  *relayed = 0;
  if (r == src || p->node[r] == p->node[src]) return src;
  int rel = wf_numa_relay(p, p->node[r], s);
  if (rel == r) return src;
  *relayed = 1;
  return rel;
}
