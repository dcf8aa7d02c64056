/* numa.h - NUMA placement of the host segment (host/segment.h): which node
 * each local rank runs on, and binding each rank's parts of the segment
 * (its ring inbox, its staging region, its mailbox inbox: what the others
 * write for it to read, and what it writes for them to read) to that node.
 * Plain syscalls (mbind), no libnuma.
 *
 * A rank's node: the one node whose CPUs contain every CPU the rank may run
 * on (its affinity, /proc/<pid>/status Cpus_allowed_list, against
 * /sys/devices/system/node/node<k>/cpulist); unknown (-1) when it may run
 * on several nodes (not pinned), and then its parts stay where the kernel
 * puts them. WEFT_NUMA_NODES declares a layout instead ("0,0,1,1": node per
 * local rank; "off": no placement), for tests and for machines where
 * affinity is set after init. Only the segment's creator places it: it sets
 * each range's policy (MPOL_PREFERRED, the node) before reserving the pages,
 * so they are allocated there. A node the machine lacks (a declared layout
 * on a smaller machine) is planned but not bound. */
#ifndef WF_HOST_NUMA_H
#define WF_HOST_NUMA_H
#include <stddef.h>
#include <stdint.h>

#include "host/segment.h"

#define WF_NUMA_MAX_CPUS 1024
#define WF_NUMA_MAX_NODES 64

typedef struct wf_cpuset {
  uint64_t bits[WF_NUMA_MAX_CPUS / 64];
} wf_cpuset;

/* Parses a kernel cpu list ("0-3,8,10-11", newline allowed at the end) into
 * *out: 1, or 0 if malformed or a CPU is >= WF_NUMA_MAX_CPUS. */
int wf_cpulist_parse(const char *s, wf_cpuset *out);

/* The node among nodes[0..nnodes) whose CPUs contain all of cpus (and cpus
 * is not empty), else -1. */
int wf_numa_node_of(const wf_cpuset *cpus, const wf_cpuset *nodes, int nnodes);

/* Parses WEFT_NUMA_NODES's layout, a comma list of nlocal node numbers (0
 * .. WF_NUMA_MAX_NODES-1), into nodes[]: 1, or 0 with a message in err
 * naming what is wrong. */
int wf_numa_parse_nodes(const char *spec, int nlocal, int *nodes, char *err, size_t errlen);

/* This machine's NUMA nodes (from /sys; 1 when it cannot tell) and their
 * CPUs (nodes may be NULL). */
int wf_numa_machine(wf_cpuset *nodes, int cap);

/* nodes[i] for each process pids[i] (-1: unknown or not pinned to one
 * node); returns the machine's node count. */
int wf_numa_detect(const int *pids, int nlocal, int *nodes);

/* The local indices grouped by node: order[] holds every index once, the
 * ranks of the lowest node first, in index order within a node (ranks of
 * unknown node last, as one group); returns the number of groups. For
 * within-host patterns that should cross nodes as few times as possible
 * (a ring in this order crosses between nodes once per group). */
int wf_numa_order(int nlocal, const int *nodes, int *order);

typedef struct wf_numa_range {
  size_t off, len; /* bytes of the segment, page-aligned */
  int node;
} wf_numa_range;

/* The ranges to bind for a layout: per local index j with nodes[j] >= 0,
 * its ring inbox, its staging region (if any) and its mailbox inbox, on
 * nodes[j]. out has room for 3 * nlocal; returns how many. */
int wf_numa_ranges(const wf_shm_layout *l, int nlocal, const int *nodes, wf_numa_range *out);

/* Sets each range's memory policy (mbind, MPOL_PREFERRED on its node) over
 * the mapping map; ranges on a node >= present are skipped. Returns the
 * number bound, or -1 (errno set) when mbind failed. */
int wf_numa_bind(void *map, const wf_numa_range *r, int n, int present);

#endif
