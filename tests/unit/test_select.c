/* test_select.c - the selection tables (src/algo/select.c): which algorithm
 * the automatic choice takes, at and around every threshold, for every
 * collective and kind of topology (none, one host with or without cross-
 * memory attach and staging, several hosts with one or several ranks each),
 * WEFT_HIERARCHICAL and WEFT_SMALL_BROADCAST_BYTES; that a forced name
 * still comes first, a declining one falls back to the table and an
 * unknown one is WEFT_ERR_NOT_FOUND; the table's text (wf_select_describe);
 * and the algorithms by name (weft_algorithm_*, weft.h). The expected picks
 * and names are written out here from the documented rules, not computed
 * from the tables. */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/shm_stage.h"
#include "unit_check.h"
#include "util/err.h"
#include "util/settings.h"

#define MAXP 8
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static int g_pids[MAXP], g_one[MAXP], g_two2[MAXP], g_two1[MAXP];
static size_t g_counts[MAXP], g_displs[MAXP];
static char g_mem[64]; /* buffers are never touched: nothing runs */

/* Topologies: one host without / with cross-memory attach, two hosts of two
 * ranks each (4 ranks), two hosts of one rank each (2 ranks). */
static wf_topo g_plain, g_cma, g_cma_rings, g_hosts22, g_hosts11, g_hosts22_cma;

static void topos_init(void) {
  for (int i = 0; i < MAXP; i++) {
    g_pids[i] = 100 + i;
    g_one[i] = 0;
    g_two2[i] = i / 2; /* 0 0 1 1 */
    g_two1[i] = i;     /* 0 1 */
  }
  g_plain = (wf_topo){.nhosts = 1, .host_of = g_one, .pid_of = g_pids};
  g_cma = (wf_topo){.nhosts = 1, .host_of = g_one, .pid_of = g_pids, .cma = 1}; /* no rings: WEFT_TRANSPORT=tcp */
  g_cma_rings = (wf_topo){.nhosts = 1, .host_of = g_one, .pid_of = g_pids, .cma = 1, .rings = 1};
  g_hosts22 = (wf_topo){.nhosts = 2, .host_of = g_two2, .pid_of = g_pids};
  g_hosts22_cma = (wf_topo){.nhosts = 2, .host_of = g_two2, .pid_of = g_pids, .cma = 1}; /* cma is for one host only */
  g_hosts11 = (wf_topo){.nhosts = 2, .host_of = g_two1, .pid_of = g_pids};
}

/* Arguments of coll on p ranks (this rank the last) over n elements of es
 * bytes: the buffer (allreduce, broadcast), the whole output (allgather),
 * the whole input (reducescatter, split evenly), or every block (alltoall,
 * block_max n). */
static wf_coll_args args(wf_coll coll, int p, size_t es, size_t n, const wf_topo *t, const wf_settings *set) {
  static const weft_dtype dt[9] = {0, WEFT_DTYPE_UINT8, WEFT_DTYPE_FLOAT16, 0, WEFT_DTYPE_FLOAT32, 0, 0, 0,
                                   WEFT_DTYPE_FLOAT64};
  wf_coll_args a = {.coll = coll, .dtype = dt[es], .op = WEFT_OP_SUM, .elem_size = es, .rank = p - 1, .size = p,
                    .buf = g_mem, .count = n, .root = 0, .in = g_mem, .out = g_mem, .segment_bytes = MiB,
                    .topo = t, .set = set};
  size_t off = 0;
  for (int i = 0; i < p; i++) {
    g_counts[i] = coll == WF_COLL_ALLTOALL ? n : n / (size_t)p + ((size_t)i < n % (size_t)p ? 1 : 0);
    g_displs[i] = off;
    off += g_counts[i];
  }
  a.counts = a.send_counts = a.recv_counts = g_counts;
  a.displs = a.send_displs = a.recv_displs = g_displs;
  if (coll == WF_COLL_ALLTOALL) a.block_max = n;
  return a;
}

static const char *pick(const wf_coll_args *a) {
  const wf_algo *alg = wf_select(a);
  return alg ? alg->name : "(none)";
}

static const char *const k_names[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"};

/* EXPECT(coll, p, es, n, topo, settings, want) */
#define EXPECT(coll, p, es, n, t, set, want)                                                                     \
  do {                                                                                                           \
    wf_coll_args a_ = args((coll), (p), (es), (n), (t), (set));                                                  \
    const char *got_ = pick(&a_);                                                                                \
    CHECK(!strcmp(got_, (want)), "%s p=%d es=%zu n=%zu (%s): %s, want %s", k_names[coll], (p), (size_t)(es),      \
          (size_t)(n), #t, got_, (want));                                                                        \
  } while (0)

static void test_allreduce(void) {
  const wf_settings *d = NULL; /* the defaults */
  /* one host with cma: 2 ranks from 2 MiB, 3 or more from 256 KiB */
  for (size_t es = 1; es <= 8; es *= 2) {
    EXPECT(WF_COLL_ALLREDUCE, 2, es, 2 * MiB / es - 1, &g_cma, d, "direct");
    EXPECT(WF_COLL_ALLREDUCE, 2, es, 2 * MiB / es, &g_cma, d, "cma");
    EXPECT(WF_COLL_ALLREDUCE, 3, es, 256 * KiB / es - 1, &g_cma, d, "direct");
    EXPECT(WF_COLL_ALLREDUCE, 3, es, 256 * KiB / es, &g_cma, d, "cma");
    EXPECT(WF_COLL_ALLREDUCE, 8, es, 256 * KiB / es, &g_cma, d, "cma");
  }
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 64 * KiB, &g_cma, d, "direct"); /* 256 KiB: 3 ranks' bound, not 2 ranks' */
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 256 * KiB, &g_cma, d, "direct"); /* 1 MiB */
  EXPECT(WF_COLL_ALLREDUCE, 1, 4, 64 * MiB, &g_cma, d, "direct");  /* one rank: nothing to attach to */
  /* with the shared-memory rings, the ring transport's algorithms at every size */
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 64 * MiB, &g_cma_rings, d, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 64 * MiB, &g_cma_rings, d, "direct");
  EXPECT(WF_COLL_ALLGATHER, 4, 4, 64 * MiB, &g_cma_rings, d, "ring");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 64 * MiB, &g_cma_rings, d, "chain");
  EXPECT(WF_COLL_REDUCESCATTER, 4, 4, 64 * MiB, &g_cma_rings, d, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 64 * MiB, &g_plain, d, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 64 * MiB, NULL, d, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 0, &g_cma, d, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 64 * MiB, &g_hosts22_cma, d, "hier"); /* cma needs one host */
  /* hierarchical: automatic when a host has several ranks */
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 1, &g_hosts22, d, "hier");
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 64 * MiB, &g_hosts11, d, "direct");
  wf_settings s = *wf_settings_default();
  s.hierarchical = 1;
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 1, &g_hosts11, &s, "hier");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 64 * MiB, &g_plain, &s, "direct"); /* one host: never hier */
  s.hierarchical = 0;
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 1, &g_hosts22, &s, "direct");
  s.hierarchical_allreduce = 1; /* the per-collective setting wins */
  EXPECT(WF_COLL_ALLREDUCE, 2, 4, 1, &g_hosts11, &s, "hier");
  s = *wf_settings_default();
  s.hierarchical_allreduce = 0;
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 1, &g_hosts22, &s, "direct");
  /* direct at every size */
  s = *wf_settings_default();
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 1, &g_plain, &s, "direct");
  EXPECT(WF_COLL_ALLREDUCE, 4, 4, 16 * MiB + 1, &g_plain, &s, "direct");
}

static void test_reducescatter(void) {
  const wf_settings *d = NULL;
  for (size_t es = 1; es <= 8; es *= 2) {
    EXPECT(WF_COLL_REDUCESCATTER, 2, es, MiB / es - 1, &g_cma, d, "direct");
    EXPECT(WF_COLL_REDUCESCATTER, 2, es, MiB / es, &g_cma, d, "cma");
    EXPECT(WF_COLL_REDUCESCATTER, 3, es, 256 * KiB / es - 1, &g_cma, d, "direct");
    EXPECT(WF_COLL_REDUCESCATTER, 3, es, 256 * KiB / es, &g_cma, d, "cma");
  }
  EXPECT(WF_COLL_REDUCESCATTER, 1, 4, 64 * MiB, &g_cma, d, "direct");
  EXPECT(WF_COLL_REDUCESCATTER, 4, 4, 64 * MiB, &g_plain, d, "direct");
  EXPECT(WF_COLL_REDUCESCATTER, 4, 4, 64 * MiB, &g_hosts22, d, "direct"); /* no hierarchical reducescatter */
  EXPECT(WF_COLL_REDUCESCATTER, 4, 4, 64 * MiB, NULL, d, "direct");
}

static void test_allgather(void) {
  const wf_settings *d = NULL;
  for (size_t es = 1; es <= 8; es *= 2) {
    EXPECT(WF_COLL_ALLGATHER, 2, es, MiB / es - 1, &g_cma, d, "ring");
    EXPECT(WF_COLL_ALLGATHER, 2, es, MiB / es, &g_cma, d, "cma");
    EXPECT(WF_COLL_ALLGATHER, 5, es, MiB / es - 1, &g_cma, d, "ring");
    EXPECT(WF_COLL_ALLGATHER, 5, es, MiB / es, &g_cma, d, "cma");
  }
  EXPECT(WF_COLL_ALLGATHER, 1, 4, 64 * MiB, &g_cma, d, "ring");
  EXPECT(WF_COLL_ALLGATHER, 4, 4, 64 * MiB, &g_plain, d, "ring");
  EXPECT(WF_COLL_ALLGATHER, 4, 4, 1, &g_hosts22, d, "hier");
  EXPECT(WF_COLL_ALLGATHER, 2, 4, 64 * MiB, &g_hosts11, d, "ring");
  wf_settings s = *wf_settings_default();
  s.hierarchical_allgather = 1;
  EXPECT(WF_COLL_ALLGATHER, 2, 4, 1, &g_hosts11, &s, "hier");
  s.hierarchical_allgather = 0;
  EXPECT(WF_COLL_ALLGATHER, 4, 4, 1, &g_hosts22, &s, "ring");
  s.hierarchical_allgather = -1;
  s.hierarchical = 0;
  EXPECT(WF_COLL_ALLGATHER, 4, 4, 1, &g_hosts22, &s, "ring");
}

static void test_broadcast(void) {
  const wf_settings *d = NULL; /* WEFT_SMALL_BROADCAST_BYTES 256 KiB */
  for (size_t es = 1; es <= 8; es *= 2) {
    EXPECT(WF_COLL_BROADCAST, 3, es, 256 * KiB / es, &g_plain, d, "tree");
    EXPECT(WF_COLL_BROADCAST, 3, es, 256 * KiB / es + 1, &g_plain, d, "chain");
    /* cma: 3 ranks or more from 64 KiB; never on 2 */
    EXPECT(WF_COLL_BROADCAST, 3, es, 64 * KiB / es - 1, &g_cma, d, "tree");
    EXPECT(WF_COLL_BROADCAST, 3, es, 64 * KiB / es, &g_cma, d, "cma");
    EXPECT(WF_COLL_BROADCAST, 2, es, 64 * KiB / es, &g_cma, d, "tree");
    EXPECT(WF_COLL_BROADCAST, 2, es, 256 * KiB / es + 1, &g_cma, d, "chain");
  }
  EXPECT(WF_COLL_BROADCAST, 2, 4, 256 * MiB, &g_cma, d, "chain");
  EXPECT(WF_COLL_BROADCAST, 1, 4, 1, &g_cma, d, "tree");
  EXPECT(WF_COLL_BROADCAST, 1, 4, 64 * MiB, &g_cma, d, "chain");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 0, NULL, d, "tree");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 64 * MiB, NULL, d, "chain");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 1, &g_hosts22, d, "hier");
  EXPECT(WF_COLL_BROADCAST, 2, 4, 1, &g_hosts11, d, "tree");
  wf_settings s = *wf_settings_default();
  s.hierarchical_allreduce = 0; /* only WEFT_HIERARCHICAL rules broadcast */
  s.hierarchical_allgather = 0;
  EXPECT(WF_COLL_BROADCAST, 4, 4, 1, &g_hosts22, &s, "hier");
  s.hierarchical = 0;
  EXPECT(WF_COLL_BROADCAST, 4, 4, 1, &g_hosts22, &s, "tree");
  /* the tree's bound is WEFT_SMALL_BROADCAST_BYTES; negative: never */
  s = *wf_settings_default();
  s.small_broadcast_bytes = 1024;
  EXPECT(WF_COLL_BROADCAST, 4, 8, 128, &g_plain, &s, "tree");
  EXPECT(WF_COLL_BROADCAST, 4, 8, 129, &g_plain, &s, "chain");
  EXPECT(WF_COLL_BROADCAST, 4, 1, 1024, &g_plain, &s, "tree");
  EXPECT(WF_COLL_BROADCAST, 4, 1, 1025, &g_plain, &s, "chain");
  s.small_broadcast_bytes = 0;
  EXPECT(WF_COLL_BROADCAST, 4, 4, 0, &g_plain, &s, "tree");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 1, &g_plain, &s, "chain");
  s.small_broadcast_bytes = -1;
  EXPECT(WF_COLL_BROADCAST, 4, 4, 0, &g_plain, &s, "chain");
  EXPECT(WF_COLL_BROADCAST, 4, 4, 1, &g_plain, &s, "chain");
  s.small_broadcast_bytes = (int64_t)MiB;
  EXPECT(WF_COLL_BROADCAST, 3, 4, 64 * KiB, &g_cma, &s, "cma"); /* cma's row comes before the tree's */
  /* no pipelining (WEFT_RING_SEGMENT_BYTES=0): the tree at every size on 3+ ranks */
  {
    wf_coll_args a = args(WF_COLL_BROADCAST, 3, 4, 64 * MiB, &g_plain, NULL);
    a.segment_bytes = 0;
    CHECK(!strcmp(pick(&a), "tree"), "unsegmented 3 ranks 256 MiB: %s, want tree", pick(&a));
    a.size = 2;
    a.rank = 1;
    CHECK(!strcmp(pick(&a), "chain"), "unsegmented 2 ranks: %s, want chain", pick(&a));
    a = args(WF_COLL_BROADCAST, 3, 4, 64 * MiB, &g_plain, NULL);
    CHECK(!strcmp(pick(&a), "chain"), "segmented 3 ranks 256 MiB: %s, want chain", pick(&a));
  }
  EXPECT(WF_COLL_BROADCAST, 2, 4, 256 * KiB, &g_cma, &s, "tree");
}

static void test_alltoall(void) {
  const wf_settings *d = NULL;
  EXPECT(WF_COLL_ALLTOALL, 2, 4, 0, &g_cma, d, "cma"); /* any size */
  EXPECT(WF_COLL_ALLTOALL, 2, 4, 1, &g_cma, d, "cma");
  EXPECT(WF_COLL_ALLTOALL, 5, 1, 64 * MiB, &g_cma, d, "cma");
  EXPECT(WF_COLL_ALLTOALL, 4, 4, 64 * MiB, &g_cma_rings, d, "pairwise"); /* with the rings */
  EXPECT(WF_COLL_ALLTOALL, 1, 4, 1, &g_cma, d, "pairwise");
  EXPECT(WF_COLL_ALLTOALL, 4, 4, 1, &g_plain, d, "pairwise");
  EXPECT(WF_COLL_ALLTOALL, 4, 4, 1, &g_hosts22, d, "pairwise");
  EXPECT(WF_COLL_ALLTOALL, 4, 4, 1, NULL, d, "pairwise");
}

/* Staging first, at every size it can run; alltoall only with block_max. */
static void test_staged(void) {
  enum { N = 3 };
  size_t bytes = MiB;
  void *mem[N];
  wf_stage *g = NULL;
  for (int i = 0; i < N; i++) {
    mem[i] = aligned_alloc(4096, bytes);
    CHECK(mem[i], "out of memory");
    if (mem[i]) memset(mem[i], 0, bytes);
  }
  CHECK(wf_stage_create(N, N - 1, mem, bytes, NULL, NULL, &g) == WEFT_OK && g, "wf_stage_create: %s", wf_err_msg());
  wf_topo st = {.nhosts = 1, .host_of = g_one, .pid_of = g_pids, .rings = 1, .stage = g},
          stc = {.nhosts = 1, .host_of = g_one, .pid_of = g_pids, .cma = 1, .rings = 1, .stage = g};
  const wf_settings *d = NULL;
  const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_ALLGATHER, WF_COLL_BROADCAST, WF_COLL_ALLTOALL,
                           WF_COLL_REDUCESCATTER};
  for (int c = 0; c < 5; c++) {
    EXPECT(colls[c], N, 4, 1, &st, d, "shm");
    EXPECT(colls[c], N, 4, 64 * MiB, &stc, d, "shm"); /* ahead of cma */
  }
  /* alltoall: block_max unknown (0): staging declines; staging means the
   * rings are there, so not cma either: pairwise */
  wf_coll_args a = args(WF_COLL_ALLTOALL, N, 4, 1000, &stc, d);
  a.block_max = 0;
  CHECK(!strcmp(pick(&a), "pairwise"), "alltoall without block_max on staging+cma: %s, want pairwise", pick(&a));
  /* the allreduce staged takes fused tensors where they lie */
  a = args(WF_COLL_ALLREDUCE, N, 4, 1000, &st, d);
  CHECK(wf_algo_takes_segments(&a, NULL), "staged allreduce: does not take segments");
  CHECK(!wf_algo_takes_segments(&a, "direct"), "forced direct: takes segments");
  a.topo = &g_plain;
  CHECK(!wf_algo_takes_segments(&a, NULL), "direct: takes segments");
  wf_stage_destroy(g);
  for (int i = 0; i < N; i++) free(mem[i]);
}

/* A forced name comes first; a declining one falls back to the table
 * (with a warning, once); an unknown one is WEFT_ERR_NOT_FOUND, naming the
 * ones there are (weft_init refuses it first: this is the registry's own
 * answer). */
static void test_forced(void) {
  wf_coll_args a = args(WF_COLL_BROADCAST, 3, 4, 64 * KiB / 4, &g_cma, NULL);
  const char *chosen = NULL;
  wf_sched s;
  const char *const forced[] = {"chain", "tree", "shm", "", NULL};
  const char *const want[] = {"chain", "tree", "cma", "cma", "cma"};
  fprintf(stderr, "test_select: a warning (declined name) is expected next\n");
  for (int k = 0; k < 5; k++) {
    wf_sched_init(&s, a.dtype, a.op);
    weft_status st = wf_algo_build(&a, forced[k], &s, &chosen);
    CHECK(st == WEFT_OK && chosen && !strcmp(chosen, want[k]), "broadcast forced %s: %s (%s), want %s",
          forced[k] ? forced[k] : "NULL", chosen ? chosen : "-", weft_status_string(st), want[k]);
    wf_sched_free(&s);
  }
  const char *const unknown[] = {"bogus", "board", "Tree", "direct"}; /* direct: allreduce's, not broadcast's */
  for (int k = 0; k < 4; k++) {
    wf_sched_init(&s, a.dtype, a.op);
    weft_status st = wf_algo_build(&a, unknown[k], &s, &chosen);
    CHECK(st == WEFT_ERR_NOT_FOUND && !chosen, "broadcast forced %s: %s (%s), want NOT_FOUND", unknown[k],
          chosen ? chosen : "-", weft_status_string(st));
    char want_msg[128];
    snprintf(want_msg, sizeof want_msg, "broadcast has no algorithm '%s' (it has: tree, chain, hier, cma, shm, numa)",
             unknown[k]);
    CHECK(strstr(wf_err_msg(), want_msg), "forced %s: message '%s'", unknown[k], wf_err_msg());
    CHECK(!wf_algo_takes_segments(&a, unknown[k]), "forced %s takes segments", unknown[k]);
    wf_sched_free(&s);
  }
}

/* The algorithms by name (weft.h): every collective's names in table
 * order, lookups both ways, and the errors. */
static void test_by_name(void) {
  static const char *const want[WEFT_COLLECTIVE_COUNT_][8] = {
      {"direct", "rd", "ring", "hier", "cma", "shm", "numa", NULL},
      {"ring", "hier", "cma", "shm", "numa", NULL},
      {"tree", "chain", "hier", "cma", "shm", "numa", NULL},
      {"pairwise", "cma", "shm", NULL},
      {"direct", "ring", "cma", "shm", NULL},
  };
  static const char *const colls[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"};
  for (int c = 0; c < WEFT_COLLECTIVE_COUNT_; c++) {
    weft_collective wc = (weft_collective)c;
    CHECK(!strcmp(weft_collective_name(wc), colls[c]), "collective %d is %s", c, weft_collective_name(wc));
    int n = 0;
    while (want[c][n]) n++;
    CHECK(weft_algorithm_count(wc) == n, "%s: %d algorithms, want %d", colls[c], weft_algorithm_count(wc), n);
    for (int i = 0; i < n; i++) {
      const char *got = weft_algorithm_name(wc, i);
      CHECK(got && !strcmp(got, want[c][i]), "%s algorithm %d: %s, want %s", colls[c], i, got ? got : "NULL",
            want[c][i]);
      int idx = -2;
      weft_status st = weft_algorithm_lookup(wc, want[c][i], &idx);
      CHECK(st == WEFT_OK && idx == i, "lookup %s %s: %s, index %d, want %d", colls[c], want[c][i],
            weft_status_string(st), idx, i);
    }
    CHECK(!weft_algorithm_name(wc, n), "%s: a name past the end", colls[c]);
    CHECK(!weft_algorithm_name(wc, -1), "%s: a name at -1", colls[c]);
    int idx = 7;
    weft_status st = weft_algorithm_lookup(wc, "binomial", &idx);
    CHECK(st == WEFT_ERR_NOT_FOUND && idx == -1, "lookup %s binomial: %s, index %d", colls[c],
          weft_status_string(st), idx);
    char msg[160];
    snprintf(msg, sizeof msg, "%s has no algorithm 'binomial' (it has: ", colls[c]);
    CHECK(strstr(weft_last_error(), msg), "lookup %s binomial: message '%s'", colls[c], weft_last_error());
  }
  int idx = 0;
  CHECK(weft_algorithm_lookup(WEFT_COLLECTIVE_ALLREDUCE, "board", &idx) == WEFT_ERR_NOT_FOUND &&
            strstr(weft_last_error(), "one-host fast path"),
        "lookup board: '%s'", weft_last_error());
  CHECK(weft_algorithm_lookup(WEFT_COLLECTIVE_ALLREDUCE, "ring", &idx) == WEFT_OK && !weft_last_error()[0],
        "a successful lookup leaves the last error: '%s'", weft_last_error());
  CHECK(weft_algorithm_lookup(WEFT_COLLECTIVE_COUNT_, "ring", &idx) == WEFT_ERR_INVALID_ARGUMENT,
        "lookup in collective 5");
  CHECK(weft_algorithm_lookup((weft_collective)-1, "ring", &idx) == WEFT_ERR_INVALID_ARGUMENT, "collective -1");
  CHECK(weft_algorithm_lookup(WEFT_COLLECTIVE_ALLREDUCE, NULL, &idx) == WEFT_ERR_INVALID_ARGUMENT, "NULL name");
  CHECK(weft_algorithm_lookup(WEFT_COLLECTIVE_ALLREDUCE, "ring", NULL) == WEFT_ERR_INVALID_ARGUMENT, "NULL index");
  CHECK(weft_algorithm_count(WEFT_COLLECTIVE_COUNT_) == -1, "count of collective 5");
  CHECK(!weft_algorithm_name(WEFT_COLLECTIVE_COUNT_, 0), "a name of collective 5");
  CHECK(!strcmp(weft_collective_name(WEFT_COLLECTIVE_COUNT_), "unknown"), "collective 5's name");
  CHECK(!strcmp(weft_status_string(WEFT_ERR_NOT_FOUND), "WEFT_ERR_NOT_FOUND"), "NOT_FOUND's name");
}

static void test_describe(void) {
  char out[2048];
  wf_select_describe(WF_COLL_ALLREDUCE, NULL, out, sizeof out);
  const char *want_ar =
      "one host, board: every rank folds every input up to 256 KiB (WEFT_FAST_ALLREDUCE_BYTES), split folds from "
      "16 KiB (WEFT_FAST_SPLIT_BYTES) on 3+ ranks, up to the board's large slots -> board; one host, staging, ranks "
      "on several NUMA nodes: >= 64 KiB -> numa; one host, staging: any size -> shm; spans hosts, some host with several ranks: any size -> hier; one host without rings, cma, 2 ranks: >= 2 MiB -> cma; one host without rings, cma, "
      ">= 3 ranks: >= 256 KiB -> cma; any: any size -> direct";
  CHECK(!strcmp(out, want_ar), "allreduce table:\n  %s\nwant\n  %s", out, want_ar);
  wf_settings s = *wf_settings_default();
  s.small_broadcast_bytes = -1;
  s.hierarchical = 0;
  wf_select_describe(WF_COLL_BROADCAST, &s, out, sizeof out);
  const char *want_bc =
      "one host, board: up to the board's large slots (WEFT_FAST_LARGE_BYTES) -> board; one host, staging, ranks on "
      "several NUMA nodes: >= 64 KiB -> numa; one host, staging: any size -> shm; spans hosts, hierarchical off: any size -> hier; one host without rings, cma, >= 3 ranks: >= 64 KiB -> cma; any: no size "
      "(WEFT_SMALL_BROADCAST_BYTES < 0) -> tree; any, >= 3 ranks: any size when WEFT_RING_SEGMENT_BYTES=0 -> tree; "
      "any: any size -> chain";
  CHECK(!strcmp(out, want_bc), "broadcast table:\n  %s\nwant\n  %s", out, want_bc);
  wf_select_describe(WF_COLL_BROADCAST, NULL, out, sizeof out);
  CHECK(strstr(out, "any: <= 256 KiB (WEFT_SMALL_BROADCAST_BYTES) -> tree; any, >= 3 ranks: any size when "
                    "WEFT_RING_SEGMENT_BYTES=0 -> tree; any: any size -> chain"),
        "broadcast table with the defaults: %s", out);
  wf_select_describe(WF_COLL_ALLTOALL, NULL, out, sizeof out);
  CHECK(strstr(out, "; one host without rings, cma, >= 2 ranks: any size -> cma; any: any size -> pairwise"), "alltoall table: %s",
        out);
  /* every table starts with the board's place; a short buffer is cut, terminated */
  const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_ALLGATHER, WF_COLL_BROADCAST, WF_COLL_ALLTOALL,
                           WF_COLL_REDUCESCATTER};
  for (int c = 0; c < 5; c++) {
    wf_select_describe(colls[c], NULL, out, sizeof out);
    CHECK(!strncmp(out, "one host, board", 15), "%s table does not start with the board: %s", k_names[colls[c]],
          out);
  }
  char tiny[10];
  memset(tiny, 'x', sizeof tiny);
  wf_select_describe(WF_COLL_ALLREDUCE, NULL, tiny, sizeof tiny);
  CHECK(!strcmp(tiny, "one host,"), "cut text: '%.10s'", tiny);
}

/* The board row: sizes that go on the board, with the slot sizes given
 * (pooled 4 KiB, large 1 MiB) and the settings' thresholds (whole folds up
 * to 256 KiB, split from 16 KiB by default). */
static void test_board_row(void) {
  wf_settings s = *wf_settings_default();
  s.fast_allreduce_bytes = 256 * KiB;
  s.fast_split_bytes = 16 * KiB;
  size_t part = 4 * KiB, large = MiB;
  int split = -1;
  /* 2 ranks, no own folds: whole folds up to 256 KiB, split beyond, up to the large slots */
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 16 * KiB, 2, 0, part, large, &s, &split) && !split, "2 ranks 16 KiB");
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 256 * KiB, 2, 0, part, large, &s, &split) && !split, "2 ranks 256 KiB");
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 256 * KiB + 1, 2, 0, part, large, &s, &split) && split,
        "2 ranks 256 KiB + 1: split");
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, MiB, 2, 0, part, large, &s, &split) && split, "2 ranks 1 MiB: split");
  CHECK(!wf_select_board(WF_COLL_ALLREDUCE, MiB + 1, 2, 0, part, large, &s, &split), "2 ranks past the slots");
  /* 2 ranks folding their own slices: split from 16 KiB */
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 16 * KiB, 2, 1, part, large, &s, &split) && split, "own 16 KiB: split");
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 16 * KiB - 1, 2, 1, part, large, &s, &split) && !split, "own 16 KiB - 1");
  /* 3 ranks: split from 16 KiB */
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 16 * KiB, 3, 0, part, large, &s, &split) && split, "3 ranks 16 KiB");
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 16 * KiB - 1, 3, 0, part, large, &s, &split) && !split, "3 ranks small");
  /* split off: whole folds up to 256 KiB only */
  s.fast_split_bytes = 0;
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 256 * KiB, 3, 0, part, large, &s, &split) && !split, "no split 256 KiB");
  CHECK(!wf_select_board(WF_COLL_ALLREDUCE, 256 * KiB + 1, 3, 0, part, large, &s, &split), "no split past 256 KiB");
  /* whole folds never below the pooled slots */
  s.fast_allreduce_bytes = 0;
  CHECK(wf_select_board(WF_COLL_ALLREDUCE, 4 * KiB, 2, 0, part, large, &s, &split) && !split, "pooled slot size");
  CHECK(!wf_select_board(WF_COLL_ALLREDUCE, 4 * KiB + 1, 2, 0, part, large, &s, &split), "past the pooled slots");
  /* the other collectives: up to the large slots */
  const wf_coll others[] = {WF_COLL_ALLGATHER, WF_COLL_BROADCAST, WF_COLL_ALLTOALL, WF_COLL_REDUCESCATTER};
  for (int c = 0; c < 4; c++) {
    CHECK(wf_select_board(others[c], MiB, 3, 0, part, large, &s, &split) && !split, "%s 1 MiB", k_names[others[c]]);
    CHECK(!wf_select_board(others[c], MiB + 1, 3, 0, part, large, &s, &split), "%s past", k_names[others[c]]);
  }
}

int main(void) {
  topos_init();
  test_board_row();
  test_allreduce();
  test_reducescatter();
  test_allgather();
  test_broadcast();
  test_alltoall();
  test_staged();
  test_forced();
  test_by_name();
  test_describe();
  return unit_result("test_select");
}
