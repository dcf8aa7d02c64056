/* numa.c - which node each local rank runs on, and the placement of the
 * host segment's per-rank parts on those nodes (numa.h). */
#include "host/numa.h"

#include <dirent.h>
#include <errno.h>
#include <linux/mempolicy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "host/mailbox.h"

int wf_cpulist_parse(const char *s, wf_cpuset *out) {
  memset(out, 0, sizeof *out);
  while (*s && *s != '\n') {
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 0) return 0;
    s = end;
    if (*s == '-') {
      b = strtol(s + 1, &end, 10);
      if (end == s + 1 || b < a) return 0;
      s = end;
    }
    if (b >= WF_NUMA_MAX_CPUS) return 0;
    for (long c = a; c <= b; c++) out->bits[c / 64] |= 1ull << (c % 64);
    if (*s == ',') s++;
    else if (*s && *s != '\n') return 0;
  }
  return 1;
}

int wf_numa_node_of(const wf_cpuset *cpus, const wf_cpuset *nodes, int nnodes) {
  int any = 0;
  for (size_t w = 0; w < WF_NUMA_MAX_CPUS / 64; w++) any |= cpus->bits[w] != 0;
  if (!any) return -1;
  for (int k = 0; k < nnodes; k++) {
    int inside = 1;
    for (size_t w = 0; w < WF_NUMA_MAX_CPUS / 64 && inside; w++) inside = !(cpus->bits[w] & ~nodes[k].bits[w]);
    if (inside) return k;
  }
  return -1;
}

int wf_numa_parse_nodes(const char *spec, int nlocal, int *nodes, char *err, size_t errlen) {
  const char *s = spec;
  for (int i = 0; i < nlocal; i++) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v >= WF_NUMA_MAX_NODES) {
      snprintf(err, errlen, "WEFT_NUMA_NODES='%s': entry %d is not a node number 0..%d", spec, i,
               WF_NUMA_MAX_NODES - 1);
      return 0;
    }
    nodes[i] = (int)v;
    s = end;
    if (i + 1 < nlocal && *s++ != ',') {
      snprintf(err, errlen, "WEFT_NUMA_NODES='%s': %d entries for %d local ranks", spec, i + 1, nlocal);
      return 0;
    }
  }
  if (*s) {
    snprintf(err, errlen, "WEFT_NUMA_NODES='%s': more than %d entries (one per local rank)", spec, nlocal);
    return 0;
  }
  return 1;
}

/* The first line of a small file, or 0. */
static int read_line(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  return ok;
}

int wf_numa_machine(wf_cpuset *nodes, int cap) {
  int n = 0;
  char path[96], line[4096];
  /* nodes are numbered densely on the machines this targets; stop at the
   * first missing one */
  for (; n < cap && n < WF_NUMA_MAX_NODES; n++) {
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
    wf_cpuset tmp;
    if (!read_line(path, line, sizeof line) || !wf_cpulist_parse(line, nodes ? &nodes[n] : &tmp)) break;
  }
  return n > 0 ? n : 1;
}

int wf_numa_detect(const int *pids, int nlocal, int *nodes) {
  static wf_cpuset node_cpus[WF_NUMA_MAX_NODES]; /* large: not on the stack */
  int nn = wf_numa_machine(node_cpus, WF_NUMA_MAX_NODES);
  for (int i = 0; i < nlocal; i++) {
    nodes[i] = -1;
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/status", pids[i]);
    FILE *f = nn > 1 && pids[i] > 0 ? fopen(path, "re") : NULL;
    if (!f) continue;
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "Cpus_allowed_list:", 18)) continue;
      const char *v = line + 18;
      while (*v == ' ' || *v == '\t') v++;
      wf_cpuset c;
      if (wf_cpulist_parse(v, &c)) nodes[i] = wf_numa_node_of(&c, node_cpus, nn);
      break;
    }
    fclose(f);
  }
  return nn;
}

int wf_numa_order(int nlocal, const int *nodes, int *order) {
  int k = 0, groups = 0;
  for (int node = 0; node < WF_NUMA_MAX_NODES; node++) {
    int before = k;
    for (int i = 0; i < nlocal; i++)
      if (nodes[i] == node) order[k++] = i;
    groups += k > before;
  }
  int before = k;
  for (int i = 0; i < nlocal; i++)
    if (nodes[i] < 0 || nodes[i] >= WF_NUMA_MAX_NODES) order[k++] = i;
  return groups + (k > before);
}

int wf_numa_ranges(const wf_shm_layout *l, int nlocal, const int *nodes, wf_numa_range *out) {
  int k = 0;
  for (int j = 0; j < nlocal; j++) {
    if (nodes[j] < 0) continue;
    out[k++] = (wf_numa_range){l->rings_off + l->inbox_bytes * (size_t)j, l->inbox_bytes, nodes[j]};
    if (l->stage_bytes)
      out[k++] = (wf_numa_range){l->stage_off + l->stage_bytes * (size_t)j, l->stage_bytes, nodes[j]};
    out[k++] = (wf_numa_range){l->mbox_off + (size_t)WF_MBOX_BLOCK * (size_t)j, WF_MBOX_BLOCK, nodes[j]};
  }
  return k;
}

int wf_numa_bind(void *map, const wf_numa_range *r, int n, int present) {
  int bound = 0;
  for (int i = 0; i < n; i++) {
    if (r[i].node < 0 || r[i].node >= present) continue;
    unsigned long mask[WF_NUMA_MAX_NODES / (8 * sizeof(unsigned long))] = {0};
    mask[(size_t)r[i].node / (8 * sizeof(unsigned long))] |= 1ul << ((size_t)r[i].node % (8 * sizeof(unsigned long)));
    if (syscall(SYS_mbind, (char *)map + r[i].off, r[i].len, MPOL_PREFERRED, mask, (unsigned long)WF_NUMA_MAX_NODES + 1,
                0))
      return -1;
    bound++;
  }
  return bound;
}
