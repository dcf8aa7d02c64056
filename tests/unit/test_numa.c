/* test_numa.c - NUMA placement of the host segment (host/numa.h) on a
 * simulated topology: CPU lists, which node a rank's affinity lies in, the
 * declared layout (WEFT_NUMA_NODES's syntax), ranks grouped by node, the
 * ranges each rank's parts occupy (every ring into it, its staging region,
 * every mailbox slot for it), and the binding itself: mbind on a real
 * shared-memory file, read back with get_mempolicy, and through
 * wf_host_create in forked ranks (test_shm_common.h). This machine may have
 * one node: bindings to node 0 are real, ones to nodes it lacks are planned
 * and skipped, which is checked too. */
#include <linux/mempolicy.h>
#include <sys/syscall.h>

#include "host/mailbox.h"
#include "host/numa.h"
#include "test_shm_common.h"

static int has(const wf_cpuset *s, int cpu) { return (int)(s->bits[cpu / 64] >> (cpu % 64)) & 1; }

static void t_cpulist(void) {
  wf_cpuset s;
  CHECK(wf_cpulist_parse("0-3,8,10-11\n", &s), "a valid list refused");
  int want[] = {0, 1, 2, 3, 8, 10, 11}, k = 0, count = 0;
  for (int c = 0; c < WF_NUMA_MAX_CPUS; c++) count += has(&s, c);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) k += has(&s, want[i]);
  CHECK(count == 7 && k == 7, "0-3,8,10-11: %d CPUs, %d of the expected", count, k);
  const char *bad[] = {"3-1", "a", "0,,1", "2000", "1-", "0-3x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!wf_cpulist_parse(bad[i], &s), "'%s' accepted", bad[i]);
}

static void t_node_of(void) {
  wf_cpuset nodes[2], c;
  wf_cpulist_parse("0-3", &nodes[0]);
  wf_cpulist_parse("4-7", &nodes[1]);
  wf_cpulist_parse("1-2", &c);
  CHECK(wf_numa_node_of(&c, nodes, 2) == 0, "CPUs 1-2: node %d", wf_numa_node_of(&c, nodes, 2));
  wf_cpulist_parse("5", &c);
  CHECK(wf_numa_node_of(&c, nodes, 2) == 1, "CPU 5: node %d", wf_numa_node_of(&c, nodes, 2));
  wf_cpulist_parse("3-4", &c); /* not pinned to one node */
  CHECK(wf_numa_node_of(&c, nodes, 2) == -1, "CPUs 3-4: node %d", wf_numa_node_of(&c, nodes, 2));
  memset(&c, 0, sizeof c);
  CHECK(wf_numa_node_of(&c, nodes, 2) == -1, "no CPU: node %d", wf_numa_node_of(&c, nodes, 2));
}

static void t_layout_spec(void) {
  int nodes[4];
  char err[256] = "";
  CHECK(wf_numa_parse_nodes("0,0,1,1", 4, nodes, err, sizeof err) && nodes[0] == 0 && nodes[1] == 0 &&
            nodes[2] == 1 && nodes[3] == 1,
        "0,0,1,1: %s", err);
  const char *bad[] = {"0,1", "0,0,1,1,1", "0,x,1,1", "0,0,1,99", "", "0,0,1,-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    CHECK(!wf_numa_parse_nodes(bad[i], 4, nodes, err, sizeof err) && strstr(err, "WEFT_NUMA_NODES") &&
              strstr(err, bad[i]),
          "'%s' for 4 ranks: accepted or unclear (%s)", bad[i], err);
  }
}

static void t_order(void) {
  int nodes[] = {1, 0, 1, 0}, order[4];
  CHECK(wf_numa_order(4, nodes, order) == 2 && order[0] == 1 && order[1] == 3 && order[2] == 0 && order[3] == 2,
        "1,0,1,0: order %d %d %d %d", order[0], order[1], order[2], order[3]);
  int mixed[] = {0, -1, 1, 0};
  CHECK(wf_numa_order(4, mixed, order) == 3 && order[0] == 0 && order[1] == 3 && order[2] == 2 && order[3] == 1,
        "0,-1,1,0: order %d %d %d %d", order[0], order[1], order[2], order[3]);
}

/* The range of the segment that holds [p, p + len) on node, or NULL. */
static const wf_numa_range *covering(const wf_numa_range *r, int n, size_t off, size_t len) {
  for (int i = 0; i < n; i++)
    if (off >= r[i].off && off + len <= r[i].off + r[i].len) return &r[i];
  return NULL;
}

/* Every part another rank writes for j to read, and j's staging region, in
 * a range on j's node; unknown ranks' parts in none. */
static void t_ranges(void) {
  enum { N = 6 };
  int nodes[N] = {1, 0, 1, 0, -1, 2};
  wf_shm_layout l;
  CHECK(wf_host_plan(N, 0, 0, 1u << 20, 4u << 20, &l), "no layout");
  wf_numa_range r[3 * N];
  int n = wf_numa_ranges(&l, N, nodes, r);
  CHECK(n == 3 * (N - 1), "%d ranges", n);
  for (int i = 0; i < n; i++) {
    CHECK(r[i].off % 4096 == 0 && r[i].len % 4096 == 0 && r[i].off + r[i].len <= l.size, "range %d unaligned", i);
    for (int k = 0; k < i; k++)
      CHECK(r[i].off + r[i].len <= r[k].off || r[k].off + r[k].len <= r[i].off, "ranges %d and %d overlap", i, k);
  }
  uint8_t *base = (uint8_t *)(uintptr_t)4096; /* addresses only */
  unsigned ps = wf_mbox_pair_slots(N);
  for (int j = 0; j < N; j++) {
    const wf_numa_range *c = covering(r, n, (size_t)((uint8_t *)wf_shm_bell_at(base, &l, j) - base), WF_SHM_LINE);
    CHECK(nodes[j] < 0 ? !c : c && c->node == nodes[j], "rank %d's bell: %s", j, c ? "wrong node" : "not placed");
    c = covering(r, n, l.stage_off + l.stage_bytes * (size_t)j, l.stage_bytes);
    CHECK(nodes[j] < 0 ? !c : c && c->node == nodes[j], "rank %d's stage", j);
    for (int i = 0; i < N; i++) {
      if (i == j) continue;
      c = covering(r, n, (size_t)((uint8_t *)wf_shm_ring_at(base, &l, i, j) - base), l.ring_bytes);
      CHECK(nodes[j] < 0 ? !c : c && c->node == nodes[j], "ring %d->%d", i, j);
      for (uint64_t k = 0; k < ps; k++) {
        size_t off = l.mbox_off + (size_t)((uint8_t *)wf_mbox_slot_at(base, ps, i, j, k) - base);
        c = covering(r, n, off, WF_MBOX_SLOT_BYTES);
        CHECK(nodes[j] < 0 ? !c : c && c->node == nodes[j], "mailbox slot %llu of %d->%d", (unsigned long long)k,
              i, j);
      }
    }
  }
}

/* The policy of the page at p: 1 if MPOL_PREFERRED on node. */
static int preferred_on(void *p, int node) {
  int mode = -1;
  unsigned long mask[WF_NUMA_MAX_NODES / (8 * sizeof(unsigned long))] = {0};
  if (syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)WF_NUMA_MAX_NODES + 1, p, MPOL_F_ADDR)) return 0;
  return mode == MPOL_PREFERRED && (mask[0] >> node & 1);
}

/* mbind on a real shared-memory file (memfd: the same shmem as /dev/shm):
 * node 0 is bound, a node the machine lacks skipped. */
static void t_bind(void) {
  size_t len = 4 * 4096;
  int fd = memfd_create("weft-numa-test", MFD_CLOEXEC);
  CHECK(fd >= 0 && !ftruncate(fd, (off_t)len), "memfd");
  uint8_t *m = fd >= 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (m == MAP_FAILED) {
    CHECK(0, "mmap");
    return;
  }
  int present = wf_numa_machine(NULL, WF_NUMA_MAX_NODES);
  wf_numa_range r[2] = {{4096, 4096, 0}, {2 * 4096, 4096, WF_NUMA_MAX_NODES - 1}};
  CHECK(present >= 1, "%d nodes", present);
  CHECK(wf_numa_bind(m, r, 2, present) == 1, "bound %d ranges", wf_numa_bind(m, r, 2, present));
  CHECK(preferred_on(m + 4096, 0), "page 1 not preferred on node 0");
  CHECK(!preferred_on(m, 0) && !preferred_on(m + 3 * 4096, 0), "pages outside the range bound");
  munmap(m, len);
  close(fd);
}

/* Through wf_host_create: the creator binds each rank's inbox to its node
 * (all 0 here: what this machine has), every rank reads it back. */
static void sc_segment(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  const wf_shm_layout *l = wf_host_layout(c->h);
  uint8_t *map = wf_host_map(c->h);
  for (int j = 0; j < c->nlocal; j++) {
    CHECK(preferred_on(wf_shm_bell_at(map, l, j), 0), "rank %d: inbox %d not on node 0", c->rank, j);
    CHECK(preferred_on(map + l->mbox_off + (size_t)WF_MBOX_BLOCK * (size_t)j, 0), "rank %d: mailbox %d", c->rank, j);
  }
  CHECK(!preferred_on(map, 0), "rank %d: the header was bound", c->rank);
  barrier(c);
  unmk(c);
}

/* The creator's layout reaches every local rank through the segment's
 * header (wf_host_numa): the same on all, whoever computed it; none when
 * the creator had none or knew no rank's node. */
static const int *g_want_numa;
static void sc_layout(ctx *c) {
  mk_or_die(c, 4096, 4, WF_SHM_COPY_AUTO);
  const int *got = wf_host_numa(c->h);
  if (!g_want_numa) {
    CHECK(!got, "rank %d: a layout where the creator had none", c->rank);
  } else {
    CHECK(got, "rank %d: no layout", c->rank);
    for (int j = 0; got && j < c->nlocal; j++)
      CHECK(got[j] == g_want_numa[j], "rank %d: local rank %d on node %d, the creator said %d", c->rank, j, got[j],
            g_want_numa[j]);
  }
  barrier(c);
  unmk(c);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  g_rep = mmap(NULL, sizeof *g_rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_rep == MAP_FAILED) return 2;
  t_cpulist();
  t_node_of();
  t_layout_spec();
  t_order();
  t_ranges();
  t_bind();
  int self = (int)getpid(), node = -2;
  int machine = wf_numa_detect(&self, 1, &node);
  printf("this machine: %d NUMA node(s); this process: node %d (-1: not pinned to one, or one node)\n", machine, node);
  static const int zeros[MAXN] = {0};
  g_numa_nodes = zeros;
  run(3, sc_segment, NULL, "segment placed on node 0");
  static const int layout[MAXN] = {1, 0, -1, 1}, unknown[MAXN] = {-1, -1, -1, -1};
  g_numa_nodes = g_want_numa = layout; /* node 1 this machine may lack: planned, the header says it */
  run(4, sc_layout, NULL, "the creator's layout, read by every rank");
  g_numa_nodes = unknown;
  g_want_numa = NULL;
  run(3, sc_layout, NULL, "no rank's node known: no layout");
  g_numa_nodes = NULL;
  run(3, sc_layout, NULL, "no layout");
  if (g_failures) {
    fprintf(stderr, "test_numa: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("test_numa: OK\n");
  return 0;
}
