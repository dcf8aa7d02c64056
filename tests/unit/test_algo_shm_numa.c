/* test_algo_shm_numa.c - the node-aware staged pattern: its plan
 * (algo/numa_plan.h, pure) on simulated layouts, and the "numa" allreduce
 * and broadcast (algo/shm_numa.c) run by n ranks in one process (host:
 * test_algo_shm_common.h) with a declared layout on each rank's staging:
 *  - plan: nodes grouped and ordered, chain or flat chosen by the bytes
 *    crossing nodes, folders, holders, relays and sources; for every layout
 *    of up to 8 ranks on up to 3 nodes, checked against definitions
 *    recomputed here: every slice folded in rank order (the chain's runs
 *    concatenated are 0..n-1, each run on one node), one crossing per run
 *    boundary, and every rank's source on its own node except one relay
 *    per node and item, which reads the holder;
 *  - runtime: allreduce of every dtype bit for bit against "direct" (so
 *    against the rank-order fold), broadcast from every root and allgather
 *    (uneven rows, empty ones, in place or not) byte for byte,
 *    counts around chunk and slot boundaries, small regions (slots reused
 *    within one collective), ranks driven in turn, reversed, at random and
 *    by one thread each, for interleaved, block, uneven and three-node
 *    layouts;
 *  - selection: with a plan, "numa" for allreduce, broadcast and
 *    allgather from 64 KiB on, "shm" below and for the other collectives; without one
 *    (no layout, one node, an unknown node) never "numa". */
#include "algo/numa_plan.h"
#include "test_algo_shm_common.h"

/* ------------------------------------------------------------ the plan */

static void t_plan_examples(void) {
  snprintf(g_ctx, sizeof g_ctx, "plan examples");
  wf_numa_plan p;
  int inter[] = {0, 1, 0, 1};
  CHECK(wf_numa_plan_make(4, inter, &p), "0,1,0,1: no plan");
  CHECK(p.nnodes == 2 && !p.chain && p.nruns == 1 && p.node_runs == 4, "0,1,0,1: %d nodes, chain %d, %d runs",
        p.nnodes, p.chain, p.nruns);
  CHECK(p.order[0] == 0 && p.order[1] == 2 && p.order[2] == 1 && p.order[3] == 3, "0,1,0,1: order %d %d %d %d",
        p.order[0], p.order[1], p.order[2], p.order[3]);
  CHECK(wf_numa_cost_flat(&p) == 8 && wf_numa_cost_chain(&p) == 12, "0,1,0,1: costs flat %d chain %d",
        wf_numa_cost_flat(&p), wf_numa_cost_chain(&p));
  for (int s = 0; s < 4; s++)
    CHECK(wf_numa_holder(&p, s) == s, "0,1,0,1: slice %d held by %d", s, wf_numa_holder(&p, s));
  /* slice 1 (held by rank 1, node 1): node 0's relay is its member 1 % 2 = rank 2 */
  int rel;
  CHECK(wf_numa_relay(&p, 0, 1) == 2, "0,1,0,1: node 0's relay of slice 1 is %d", wf_numa_relay(&p, 0, 1));
  CHECK(wf_numa_source(&p, 0, 1, 1, &rel) == 2 && rel, "rank 0 reads slice 1 from its relay");
  CHECK(wf_numa_source(&p, 2, 1, 1, &rel) == 1 && !rel, "the relay reads the holder");
  CHECK(wf_numa_source(&p, 3, 1, 1, &rel) == 1 && !rel, "rank 3 shares the holder's node");
  CHECK(wf_numa_source(&p, 1, 1, 1, &rel) == 1 && !rel, "the holder itself");

  int block[] = {3, 3, 1, 1}; /* node numbers need not start at 0 */
  CHECK(wf_numa_plan_make(4, block, &p), "3,3,1,1: no plan");
  CHECK(p.nnodes == 2 && p.node_id[0] == 1 && p.node_id[1] == 3 && p.chain && p.nruns == 2, "3,3,1,1: chain %d",
        p.chain);
  CHECK(p.order[0] == 2 && p.order[1] == 3 && p.order[2] == 0 && p.order[3] == 1, "3,3,1,1: order");
  CHECK(wf_numa_folder(&p, 0, 3) == 1 && wf_numa_folder(&p, 1, 3) == 3 && wf_numa_holder(&p, 2) == 2,
        "3,3,1,1: folders");

  int one[] = {2, 2, 2}, unknown[] = {0, -1, 1}, pair[] = {0, 1};
  CHECK(!wf_numa_plan_make(3, one, &p), "one node: a plan");
  CHECK(!wf_numa_plan_make(3, unknown, &p), "an unknown node: a plan");
  CHECK(!wf_numa_plan_make(1, pair, &p), "one rank: a plan");
  CHECK(wf_numa_plan_make(2, pair, &p) && !p.chain, "0,1: no flat plan");
}

/* Every layout of n ranks on up to k nodes (k^n of them), checked against
 * the definitions (see the top of the file). */
static void t_plan_all(int n, int k) {
  int nodes[MAXP], total = 1;
  for (int i = 0; i < n; i++) total *= k;
  for (int code = 0; code < total; code++) {
    int c = code, distinct = 0, seen[4] = {0};
    for (int i = 0; i < n; i++, c /= k) {
      nodes[i] = c % k;
      distinct += !seen[nodes[i]];
      seen[nodes[i]] = 1;
    }
    snprintf(g_ctx, sizeof g_ctx, "plan n=%d layout %d", n, code);
    wf_numa_plan p;
    int made = wf_numa_plan_make(n, nodes, &p);
    CHECK(made == (distinct >= 2), "plan made %d with %d nodes", made, distinct);
    if (!made) continue;
    /* order: grouped by node number, rank order within */
    for (int i = 1; i < n; i++) {
      int a = p.order[i - 1], b = p.order[i];
      CHECK(nodes[a] < nodes[b] || (nodes[a] == nodes[b] && a < b), "order[%d..%d] = %d, %d", i - 1, i, a, b);
    }
    /* the cheaper fold pattern */
    int runs = 1, flat = 0;
    for (int i = 1; i < n; i++) runs += nodes[i] != nodes[i - 1];
    for (int s = 0; s < n; s++)
      for (int r = 0; r < n; r++) flat += nodes[r] != nodes[s];
    CHECK(p.chain == ((runs - 1) * n < flat), "chain %d, runs %d, flat cost %d", p.chain, runs, flat);
    for (int s = 0; s < n; s++) {
      /* rank order: the runs in turn cover 0..n-1, each on one node, and
       * slice s is folded by a member of each */
      int next = 0;
      for (int j = 0; j < p.nruns; j++) {
        int f = wf_numa_folder(&p, j, s);
        CHECK(f >= p.run_first[j] && f < p.run_first[j + 1], "slice %d run %d: folder %d outside it", s, j, f);
        for (int r = p.run_first[j]; r < p.run_first[j + 1]; r++) {
          CHECK(r == next++, "slice %d: rank %d folded out of order", s, r);
          if (p.chain) CHECK(nodes[r] == nodes[p.run_first[j]], "run %d spans nodes", j);
        }
      }
      CHECK(next == n, "slice %d: %d ranks folded", s, next);
      /* the spread: one relay per other node reads the holder, everyone
       * else a rank on its own node */
      int h = wf_numa_holder(&p, s), cross[4] = {0};
      for (int r = 0; r < n; r++) {
        int rel, src = wf_numa_source(&p, r, h, s, &rel);
        CHECK(src >= 0 && src < n, "slice %d: rank %d reads %d", s, r, src);
        if (nodes[src] != nodes[r]) {
          cross[nodes[r]]++;
          CHECK(src == h && !rel && wf_numa_relay(&p, p.node[r], s) == r, "slice %d: rank %d crosses to %d", s, r,
                src);
        } else if (rel) {
          int rr, back = wf_numa_source(&p, src, h, s, &rr);
          CHECK(src == wf_numa_relay(&p, p.node[r], s) && back == h && !rr, "slice %d: rank %d's relay %d", s, r, src);
        }
      }
      for (int x = 0; x < k; x++)
        CHECK(cross[x] == (seen[x] && x != nodes[h]), "slice %d: node %d crossed %d times", s, x, cross[x]);
    }
  }
}

/* ------------------------------------------------------------ the runtime */

static void set_layout(host *H, const int *nodes) {
  for (int i = 0; i < H->n; i++) wf_stage_set_numa(H->g[i], nodes);
}

static const char *layout_name(const int *nodes, int n, char *buf, size_t cap) {
  size_t o = 0;
  for (int i = 0; i < n && o + 4 < cap; i++) o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? "," : "", nodes[i]);
  return buf;
}

static void suite_layout(const int *nodes, int n, size_t bytes) {
  host H;
  char ln[64];
  layout_name(nodes, n, ln, sizeof ln);
  host_init(&H, n, bytes, 0);
  set_layout(&H, nodes);
  for (size_t di = 0; di < NALL; di++) {
    const dtop *d = &k_all[di];
    size_t E = ar_chunk_elems(bytes, d->es, n);
    size_t counts[] = {1, (size_t)n - 1, (size_t)n + 1, E - 1, E + 1, 3 * E + 5, 40003};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      if (!counts[k] || (counts[k] > 20000 && (di % 3 || TEST_TSAN))) continue;
      coll_case c = {.coll = WF_COLL_ALLREDUCE, .d = d, .n = counts[k]};
      int order = (int)((k + di) % 3);
      snprintf(g_ctx, sizeof g_ctx, "allreduce numa %s %s n=%zu region %zu order %d", ln, d->name, counts[k], bytes,
               order);
      run_case(&H, &c, order, 31 * k + di);
    }
    check_plain_allreduce(&H, d, E * 2 + 3, 7 + di);
  }
  static const dtop i16 = {WEFT_DTYPE_INT16, WEFT_OP_SUM, 2, "int16"};
  size_t E = ar_chunk_elems(bytes, 2, n);
  size_t bn[] = {1, E + 3, 5 * E + 1};
  for (int root = 0; root < n; root++)
    for (size_t k = 0; k < sizeof bn / sizeof bn[0]; k++) {
      coll_case c = {.coll = WF_COLL_BROADCAST, .d = &i16, .n = bn[k], .root = root};
      int order = (int)((k + (size_t)root) % 3);
      snprintf(g_ctx, sizeof g_ctx, "broadcast numa %s root %d n=%zu order %d", ln, root, bn[k], order);
      run_case(&H, &c, order, 5 + k);
    }
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f64 = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "f64"};
  for (int pat = 0; pat < PAT_N; pat++)
    for (int alias = 0; alias < 2; alias++)
      for (size_t base = 0; base < 5000; base += 4999) {
        const dtop *d = (pat + alias) % 2 ? &u8 : &f64;
        coll_case c = {.coll = WF_COLL_ALLGATHER, .d = d, .n = base, .pat = pat, .alias = alias};
        snprintf(g_ctx, sizeof g_ctx, "allgather numa %s %s pattern %d base %zu alias %d", ln, d->name, pat, base,
                 alias);
        run_case(&H, &c, (pat + alias) % 3, (uint64_t)pat);
      }
  host_free(&H);
}

/* One thread per rank, many collectives back to back (flags and slots of
 * one collective meet the next's). */
static void suite_threads(const int *nodes, int n, size_t bytes, int ncoll) {
  host H;
  char ln[64];
  host_init(&H, n, bytes, 0);
  set_layout(&H, nodes);
  snprintf(g_ctx, sizeof g_ctx, "threads numa %s, %d collectives", layout_name(nodes, n, ln, sizeof ln), ncoll);
  coll_case *C = calloc((size_t)ncoll, sizeof *C);
  job *jobs[MAXP];
  for (int i = 0; i < n; i++) jobs[i] = calloc((size_t)ncoll, sizeof(job));
  CHECK(C && jobs[0] && jobs[n - 1], "out of memory");
  uint64_t seed = 41;
  for (int k = 0; k < ncoll; k++) {
    static const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_BROADCAST, WF_COLL_ALLREDUCE, WF_COLL_ALLGATHER};
    C[k] = (coll_case){.coll = colls[k % 4], .d = &k_all[(size_t)k % NALL], .n = 1 + (size_t)(rng_next(&seed) % 30000),
                       .root = k % n, .pat = PAT_UNEVEN};
    job J[MAXP];
    case_setup(&H, &C[k], J, seed + (uint64_t)k);
    for (int i = 0; i < n; i++) jobs[i][k] = J[i];
  }
  run_threads(jobs, n, ncoll);
  for (int k = 0; k < ncoll; k++) {
    job J[MAXP];
    for (int i = 0; i < n; i++) J[i] = jobs[i][k];
    case_check(&H, &C[k], J);
  }
  for (int i = 0; i < n; i++) free(jobs[i]);
  free(C);
  host_free(&H);
}

/* ------------------------------------------------------------ selection */

static void t_select(void) {
  snprintf(g_ctx, sizeof g_ctx, "selection");
  static const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  host H;
  host_init(&H, 4, (size_t)1 << 20, 0);
  float *buf = calloc(1 << 20, sizeof(float));
  size_t counts[4] = {100, 100, 100, 100}, displs[4] = {0, 100, 200, 300};
  static const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_BROADCAST, WF_COLL_REDUCESCATTER, WF_COLL_ALLGATHER,
                                  WF_COLL_ALLTOALL};
  int inter[] = {0, 1, 0, 1}, one[] = {0, 0, 0, 0}, unknown[] = {0, 1, -1, 1};
  const int *layouts[] = {inter, one, unknown, NULL};
  for (int l = 0; l < 4; l++) {
    set_layout(&H, layouts[l]);
    for (int c = 0; c < 5; c++) {
      wf_coll_args a = args_of(&H, colls[c], &f32, 1);
      a.buf = buf;
      a.in = buf;
      a.out = buf + 1000;
      a.counts = a.send_counts = a.recv_counts = counts;
      a.displs = a.send_displs = a.recv_displs = displs;
      a.block_max = 100;
      int node_aware = l == 0 && c < 2; /* allgather's 4 x 100 elements: under 64 KiB */
      a.count = 1 << 14; /* 64 KiB */
      const char *got = chosen_algo(&a);
      CHECK(!strcmp(got, node_aware ? "numa" : "shm"), "layout %d, collective %d, 64 KiB: %s", l, (int)colls[c], got);
      a.count = (1 << 14) - 1;
      got = chosen_algo(&a);
      CHECK(!strcmp(got, "shm"), "layout %d, collective %d, under 64 KiB: %s", l, (int)colls[c], got);
    }
  }
  /* allgather from 64 KiB of output */
  size_t big[4] = {4096, 4096, 4096, 4096}, bigd[4] = {0, 4096, 8192, 12288};
  set_layout(&H, inter);
  wf_coll_args ag = args_of(&H, WF_COLL_ALLGATHER, &f32, 1);
  ag.in = buf + 4096;
  ag.out = buf;
  ag.counts = big;
  ag.displs = bigd;
  CHECK(!strcmp(chosen_algo(&ag), "numa"), "allgather, 64 KiB: %s", chosen_algo(&ag));
  big[3] = 4095;
  CHECK(!strcmp(chosen_algo(&ag), "shm"), "allgather, under 64 KiB: %s", chosen_algo(&ag));
  /* forced "numa" without a plan declines (the fallback is the table's) */
  set_layout(&H, NULL);
  wf_coll_args a = args_of(&H, WF_COLL_ALLREDUCE, &f32, 1);
  a.buf = buf;
  a.count = 1 << 18;
  wf_sched s;
  wf_sched_init(&s, a.dtype, a.op);
  const char *chosen = NULL;
  CHECK(wf_algo_build(&a, "numa", &s, &chosen) == WEFT_OK && chosen && !strcmp(chosen, "shm"),
        "forced numa without a layout ran %s", chosen ? chosen : "nothing");
  wf_sched_free(&s);
  free(buf);
  host_free(&H);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  t_plan_examples();
  for (int n = 2; n <= MAXP; n++) t_plan_all(n, n <= 6 ? 3 : 2);
  t_select();
  g_stage_algo = "numa";
  static const int inter4[] = {0, 1, 0, 1}, block4[] = {0, 0, 1, 1}, lone4[] = {0, 1, 1, 1}, two[] = {1, 0},
                   three6[] = {0, 1, 2, 0, 1, 2}, runs6[] = {0, 0, 1, 1, 0, 0}, inter8[] = {0, 1, 0, 1, 0, 1, 0, 1},
                   block8[] = {0, 0, 0, 0, 1, 1, 1, 1};
  suite_layout(inter4, 4, 16384 + HDR); /* small regions: many chunks, slots reused */
  suite_layout(block4, 4, 16384 + HDR);
  suite_layout(lone4, 4, 16384 + HDR);
  suite_layout(two, 2, 16384 + HDR);
  suite_layout(three6, 6, 16384 + HDR);
  suite_layout(runs6, 6, (size_t)1 << 20);
  if (!TEST_TSAN) {
    suite_layout(inter8, 8, 16384 + HDR);
    suite_layout(block8, 8, (size_t)1 << 20);
  }
  suite_threads(inter4, 4, 16384 + HDR, TEST_TSAN ? 20 : 60);
  suite_threads(block4, 4, (size_t)1 << 20, TEST_TSAN ? 20 : 60);
  suite_threads(three6, 6, 16384 + HDR, TEST_TSAN ? 10 : 30);
  printf("test_algo_shm_numa: OK (%zu simulations)\n", g_sims);
  return 0;
}
