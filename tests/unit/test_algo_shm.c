/* test_algo_shm.c - the staged shared-memory algorithms (coll_shm.c of
 * src/algo, and algo/shm_stage.c) in one process (host:
 * test_algo_shm_common.h), beyond one collective in one thread:
 *
 *  - allreduce of fused tensors where they lie (segments), bit for bit, and
 *    the segment arguments the algorithm accepts;
 *  - one thread per rank running long sequences of mixed collectives back
 *    to back (slot reuse across collectives, real concurrency: TSan checks
 *    the flags order the plain data);
 *  - a rank that gives up mid-collective, or leaves: its peers fail naming
 *    it, no hang;
 *  - the registry: shm claims the collectives only with staging attached to
 *    the group's topology and the group the size of the host.
 * Each collective on its own, every count and dtype: test_algo_shm_colls.c. */
#include "test_algo_shm_common.h"

/* ------------------------------------------------------------ suites */
/* Fused tensors reduced where they lie (wf_seg): random segment sizes
 * (runs of one element, segments inside a slice, across slices, chunks and
 * slots), each segment its own guarded allocation; bit for bit against
 * "direct" on each rank's contiguous concatenation. */
#define MAX_SEGS 512
static void suite_segments(size_t bytes, int pmax, uint64_t seed) {
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (size_t di = p % 2; di < NALL; di += 2) {
      const dtop *d = &k_all[di];
      size_t es = d->es, E = ar_chunk_elems(bytes, es, p);
      size_t totals[] = {2, (size_t)p + 1, E + 1, 3 * E + 7, ((size_t)64 << 10) / es + 5};
      for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++) {
        size_t n = totals[t], sz[MAX_SEGS], nseg = 0;
        uint64_t s = seed + 131 * t + 7 * di + (uint64_t)p;
        for (size_t at = 0; at < n; nseg++) {
          uint64_t r = rng_next(&s);
          size_t k = r % 4 == 0 ? 1 : 1 + (size_t)(r >> 8) % (E / 2 + 2);
          if (k > n - at || nseg == MAX_SEGS - 1) k = n - at;
          sz[nseg] = k;
          at += k;
        }
        snprintf(g_ctx, sizeof g_ctx, "segmented allreduce p=%d %s n=%zu in %zu segments region %zu", p, d->name, n,
                 nseg, bytes);
        job J[MAXP];
        void *ref[MAXP];
        wf_seg *sg[MAXP];
        simrank *R = calloc((size_t)p, sizeof *R);
        CHECK(R, "out of memory");
        for (int i = 0; i < p; i++) {
          ref[i] = gb_alloc(n * es, 0);
          fill_random(d, ref[i], n, s + 1000 * (uint64_t)i);
          sg[i] = malloc(nseg * sizeof *sg[i]);
          CHECK(sg[i], "out of memory");
          for (size_t j = 0, at = 0; j < nseg; at += sz[j++]) {
            sg[i][j] = (wf_seg){gb_alloc(sz[j] * es, 0), at, sz[j]};
            memcpy(sg[i][j].ptr, (char *)ref[i] + at * es, sz[j] * es);
          }
          wf_coll_args a = args_of(&H, WF_COLL_ALLREDUCE, d, i);
          a.count = n;
          CHECK(wf_algo_takes_segments(&a, NULL), "rank %d: shm does not take segments", i);
          a.segs = sg[i];
          a.nsegs = nseg;
          job_build(&J[i], &a, "shm");
          a.segs = NULL;
          a.nsegs = 0;
          a.buf = ref[i];
          a.topo = NULL;
          build(R, i, &a, "direct");
          add_region(&R[i], ref[i], n * es, 1);
        }
        simulate(R, p, es);
        free_scheds(R, p);
        free(R);
        run_rr(J, p, (int)(t % 3), s);
        for (int i = 0; i < p; i++) {
          wf_sched_free(&J[i].s);
          for (size_t j = 0; j < nseg; j++) {
            gb_check(sg[i][j].ptr, sz[j] * es, "segment", i);
            CHECK(!memcmp(sg[i][j].ptr, (char *)ref[i] + sg[i][j].at * es, sz[j] * es),
                  "rank %d: segment %zu (elements %zu..%zu) differs from direct", i, j, sg[i][j].at,
                  sg[i][j].at + sz[j]);
            gb_free(sg[i][j].ptr);
          }
          free(sg[i]);
          gb_free(ref[i]);
        }
      }
    }
    host_free(&H);
  }
}

/* Segments are taken only by the algorithm that says so, and must tile the
 * count. */
static void test_segment_args(void) {
  snprintf(g_ctx, sizeof g_ctx, "segment arguments");
  static const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  host H;
  host_init(&H, 2, (size_t)1 << 20, 0);
  float x[8] = {0}, y[8] = {0};
  wf_seg sg[2] = {{x, 0, 8}, {y, 8, 8}};
  wf_coll_args a = args_of(&H, WF_COLL_ALLREDUCE, &f32, 0);
  a.count = 16;
  CHECK(wf_algo_takes_segments(&a, NULL) && wf_algo_takes_segments(&a, "shm"), "shm should take segments");
  CHECK(!wf_algo_takes_segments(&a, "direct"), "direct should not take segments");
  a.topo = NULL;
  CHECK(!wf_algo_takes_segments(&a, NULL), "segments without staging");
  a.topo = &H.topo[0];
  a.segs = sg;
  a.nsegs = 2;
  wf_sched s;
  wf_sched_init(&s, a.dtype, a.op);
  CHECK(wf_algo_build(&a, "direct", &s, NULL) != WEFT_OK, "direct accepted segments");
  wf_sched_free(&s);
  sg[1].at = 9; /* a gap */
  wf_sched_init(&s, a.dtype, a.op);
  CHECK(wf_algo_build(&a, NULL, &s, NULL) == WEFT_ERR_INVALID_ARGUMENT, "a gap between segments was accepted");
  wf_sched_free(&s);
  sg[1].at = 8;
  a.count = 17; /* more than the segments hold */
  wf_sched_init(&s, a.dtype, a.op);
  CHECK(wf_algo_build(&a, NULL, &s, NULL) == WEFT_ERR_INVALID_ARGUMENT, "17 elements in 16 were accepted");
  wf_sched_free(&s);
  host_free(&H);
}

/* One thread per rank, each running the same long list of mixed
 * collectives back to back: a rank starts the next while its peers still
 * read its region for the previous one. */
static void suite_threads(size_t bytes, int p, int ncoll, uint64_t seed) {
  snprintf(g_ctx, sizeof g_ctx, "threads p=%d region %zu: setup", p, bytes);
  host H;
  host_init(&H, p, bytes, 20000);
  coll_case *C = calloc((size_t)ncoll, sizeof *C);
  job *jobs[MAXP];
  for (int i = 0; i < p; i++) CHECK((jobs[i] = calloc((size_t)ncoll, sizeof(job))), "out of memory");
  uint64_t r = seed;
  for (int k = 0; k < ncoll; k++) {
    coll_case *c = &C[k];
    c->d = &k_all[rng_next(&r) % NALL];
    size_t big = TEST_TSAN ? 3000 : 30000;
    switch (rng_next(&r) % 5) {
      case 0: c->coll = WF_COLL_ALLREDUCE; c->n = 1 + rng_next(&r) % big; break;
      case 1: c->coll = WF_COLL_REDUCESCATTER; c->n = rng_next(&r) % (big / 4); c->pat = (int)(rng_next(&r) % PAT_SPLIT_BIG); break;
      case 2: c->coll = WF_COLL_ALLGATHER; c->n = rng_next(&r) % (big / 4); c->pat = (int)(rng_next(&r) % PAT_SPLIT_BIG); c->alias = (int)(rng_next(&r) % 2); break;
      case 3: c->coll = WF_COLL_BROADCAST; c->n = 1 + rng_next(&r) % big; c->root = (int)(rng_next(&r) % (uint64_t)p); break;
      default: c->coll = WF_COLL_ALLTOALL; c->n = 1 + rng_next(&r) % (big / 4); c->pat = (int)(rng_next(&r) % A2A_KINDS); break;
    }
    job J[MAXP];
    case_setup(&H, c, J, seed + (uint64_t)k);
    for (int i = 0; i < p; i++) jobs[i][k] = J[i];
  }
  snprintf(g_ctx, sizeof g_ctx, "threads p=%d region %zu: %d collectives", p, bytes, ncoll);
  run_threads(jobs, p, ncoll);
  for (int k = 0; k < ncoll; k++) {
    job J[MAXP];
    for (int i = 0; i < p; i++) J[i] = jobs[i][k];
    snprintf(g_ctx, sizeof g_ctx, "threads p=%d region %zu: collective %d (%d)", p, bytes, k, (int)C[k].coll);
    case_check(&H, &C[k], J);
  }
  for (int i = 0; i < p; i++) free(jobs[i]);
  free(C);
  host_free(&H);
}

/* A rank gives up mid-collective (its schedule is freed: the engine's
 * abort): the others fail naming it instead of waiting. */
static void test_gone(void) {
  static const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  for (int quitter = 0; quitter < 3; quitter++) {
    snprintf(g_ctx, sizeof g_ctx, "rank %d gives up", quitter);
    host H;
    host_init(&H, 3, 16384 + HDR, 0);
    size_t n = 100000;
    float *buf[3];
    job J[3];
    for (int i = 0; i < 3; i++) {
      buf[i] = calloc(n, sizeof(float));
      wf_coll_args a = args_of(&H, WF_COLL_ALLREDUCE, &f32, i);
      a.buf = buf[i];
      a.count = n;
      job_build(&J[i], &a, "shm");
    }
    for (int k = 0; k < 5; k++)
      for (int i = 0; i < 3; i++) CHECK(job_poll(&J[i]) == WEFT_IN_PROGRESS, "rank %d finished early", i);
    wf_sched_free(&J[quitter].s);
    for (int i = 0; i < 3; i++) { /* all survivors first: one that fails gives up too */
      if (i == quitter) continue;
      weft_status st;
      for (int k = 0; k < 1000 && (st = job_poll(&J[i])) == WEFT_IN_PROGRESS; k++) {
      }
      CHECK(st == WEFT_ERR_PEER_LOST, "rank %d: %s instead of PEER_LOST", i, weft_status_string(st));
      char want[32];
      snprintf(want, sizeof want, "rank %d", quitter);
      CHECK(strstr(wf_err_msg(), want), "rank %d's error does not name rank %d: %s", i, quitter, wf_err_msg());
    }
    for (int i = 0; i < 3; i++)
      if (i != quitter) wf_sched_free(&J[i].s);
    for (int i = 0; i < 3; i++) free(buf[i]);
    host_free(&H);
  }
}

/* A rank finalizes (wf_stage_leave): peers waiting for a collective it did
 * not run fail naming it; a rank that left after finishing its part does not
 * disturb the peers still copying out. */
static void test_leave(void) {
  static const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  for (int finished = 0; finished < 2; finished++) {
    snprintf(g_ctx, sizeof g_ctx, "rank 2 leaves %s", finished ? "after its part" : "before starting");
    host H;
    host_init(&H, 3, 16384 + HDR, 0);
    size_t n = 20000;
    float *buf[3];
    job J[3];
    for (int i = 0; i < 3; i++) {
      buf[i] = calloc(n, sizeof(float));
      for (size_t k = 0; k < n; k++) buf[i][k] = (float)(i + 1);
      wf_coll_args b = args_of(&H, WF_COLL_BROADCAST, &f32, i);
      b.buf = buf[i];
      b.count = n;
      b.root = 2;
      job_build(&J[i], &b, "shm");
    }
    if (finished) { /* all run until the root has copied every chunk in: the others still copy the last ones out */
      weft_status st[3] = {WEFT_IN_PROGRESS, WEFT_IN_PROGRESS, WEFT_IN_PROGRESS};
      for (int it = 0; it < 100000 && st[2] == WEFT_IN_PROGRESS; it++)
        for (int i = 0; i < 3; i++)
          if (st[i] == WEFT_IN_PROGRESS) st[i] = job_poll(&J[i]);
      CHECK(st[2] == WEFT_OK, "the root did not finish");
    }
    wf_stage_leave(H.g[2]);
    for (int i = 0; i < 2; i++) {
      weft_status st;
      for (int k = 0; k < 100000 && (st = job_poll(&J[i])) == WEFT_IN_PROGRESS; k++) {
      }
      if (finished) {
        CHECK(st == WEFT_OK, "rank %d: %s (%s) after the root left having finished", i, weft_status_string(st),
              wf_err_msg());
        for (size_t k = 0; k < n; k++) CHECK(buf[i][k] == 3.0f, "rank %d: element %zu is %g", i, k, buf[i][k]);
      } else {
        CHECK(st == WEFT_ERR_PEER_LOST, "rank %d: %s instead of PEER_LOST", i, weft_status_string(st));
        CHECK(strstr(wf_err_msg(), "rank 2 has shut down"), "rank %d: %s", i, wf_err_msg());
      }
    }
    for (int i = 0; i < 3; i++) {
      wf_sched_free(&J[i].s);
      free(buf[i]);
    }
    host_free(&H);
  }
}

/* The registry: shm only with staging attached, the group the host's size,
 * at least 2 ranks; then it wins over direct and cma. */
static void test_registry(void) {
  snprintf(g_ctx, sizeof g_ctx, "registry");
  static const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  host H;
  host_init(&H, 3, (size_t)4 << 20, 0);
  float *buf = calloc(1 << 20, sizeof(float));
  size_t counts[3] = {100, 100, 100}, displs[3] = {0, 100, 200};
  static const wf_coll colls[] = {WF_COLL_ALLREDUCE, WF_COLL_REDUCESCATTER, WF_COLL_ALLGATHER, WF_COLL_BROADCAST,
                                  WF_COLL_ALLTOALL};
  for (int c = 0; c < 5; c++) {
    wf_coll coll = colls[c];
    wf_coll_args a = args_of(&H, coll, &f32, 1);
    a.buf = buf;
    a.in = buf;
    a.out = buf + 1000;
    a.count = 1 << 20;
    a.counts = a.send_counts = a.recv_counts = counts;
    a.displs = a.send_displs = a.recv_displs = displs;
    a.block_max = 100;
    CHECK(!strcmp(chosen_algo(&a), "shm"), "collective %d: %s, not shm", (int)coll, chosen_algo(&a));
    if (coll == WF_COLL_ALLTOALL) { /* the whole matrix unknown: the chunk count cannot be agreed */
      a.block_max = 0;
      CHECK(strcmp(chosen_algo(&a), "shm"), "alltoall: shm without block_max");
      a.block_max = 100;
    }
    wf_topo t = H.topo[1];
    t.stage = NULL;
    a.topo = &t;
    CHECK(strcmp(chosen_algo(&a), "shm"), "collective %d: shm without staging", (int)coll);
    a.topo = NULL;
    CHECK(strcmp(chosen_algo(&a), "shm"), "collective %d: shm without topology", (int)coll);
    a.topo = &H.topo[1];
    a.size = 2; /* a group smaller than the host: never */
    a.rank = 1;
    CHECK(strcmp(chosen_algo(&a), "shm"), "collective %d: shm for a group of 2 on a host of 3", (int)coll);
  }
  free(buf);
  host_free(&H);
}

int main(void) {
  test_registry();
  test_gone();
  test_leave();
  test_segment_args();
  int pmax = TEST_TSAN ? 4 : 6;
  suite_segments(16384 + HDR, pmax, 11);
  suite_segments((size_t)4 << 20, 3, 12);
  for (int p = 2; p <= 5; p++) suite_threads(p % 2 ? 16384 + HDR : (size_t)1 << 20, p, TEST_TSAN ? 40 : 150, 5 + (uint64_t)p);
  printf("test_algo_shm: OK (%zu simulations)\n", g_sims);
  return 0;
}
