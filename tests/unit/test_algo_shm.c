/* test_algo_shm.c - the staged shared-memory algorithms (coll_shm.c
 * of src/algo, and algo/shm_stage.c) in one process: n simulated ranks share n staging
 * regions allocated here, exactly as the ranks of one host share them in
 * the segment, and run their real STAGE steps.
 *
 *  - every collective (allreduce, reducescatter, allgather, broadcast) on 2..6
 *    ranks, many counts around the chunk and slot boundaries of small and
 *    default regions, every dtype: allreduce and reducescatter bit for bit
 *    against "direct" run in the schedule simulator (algo_sim.h) and against
 *    plain-loop left folds; allgather and broadcast byte for byte;
 *  - the ranks driven by one thread in several orders (in turn, reversed,
 *    random: a rank may run far ahead of its peers), and by one thread per
 *    rank running long sequences of mixed collectives back to back (slot
 *    reuse across collectives, real concurrency: TSan checks the flags order
 *    the plain data);
 *  - allreduce of fused tensors where they lie (segments), bit for bit;
 *  - a rank that gives up mid-collective: its peers fail naming it, no hang;
 *  - the registry: shm claims the collectives only with staging attached to
 *    the group's topology and the group the size of the host. */
#include <pthread.h>
#include <sched.h>

#include "algo/shm_stage.h"
#include "algo_sim.h"
#include "reduce/reduce.h"
#include "util/time.h"

#define HDR 512 /* bytes of a region's header (shm_stage.c) */
#ifndef TEST_TSAN
#define TEST_TSAN 0
#endif

/* ------------------------------------------------------------ the host */
typedef struct host {
  int n;
  size_t bytes;
  void *mem[MAXP];
  wf_stage *g[MAXP];
  wf_topo topo[MAXP];
  int hosts[MAXP], pids[MAXP];
} host;

static void host_init(host *H, int n, size_t bytes, int64_t spin_ns) {
  memset(H, 0, sizeof *H);
  H->n = n;
  H->bytes = bytes;
  for (int i = 0; i < n; i++) {
    H->mem[i] = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    CHECK(H->mem[i], "out of memory");
    memset(H->mem[i], 0, bytes);
  }
  for (int i = 0; i < n; i++) {
    CHECK(wf_stage_create(n, i, H->mem, bytes, NULL, NULL, &H->g[i]) == WEFT_OK, "wf_stage_create: %s",
          wf_err_msg());
    wf_stage_set_spin(H->g[i], spin_ns);
    H->topo[i] = (wf_topo){1, H->hosts, H->pids, 0, H->g[i]};
  }
}

static void host_free(host *H) {
  for (int i = 0; i < H->n; i++) {
    wf_stage_destroy(H->g[i]);
    free(H->mem[i]);
  }
}

/* ------------------------------------------------------------ running */
typedef struct job {
  wf_sched s;
  size_t round;
} job;

static void job_build(job *j, const wf_coll_args *a, const char *want) {
  memset(j, 0, sizeof *j);
  wf_sched_init(&j->s, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, "shm", &j->s, &chosen);
  CHECK(st == WEFT_OK, "rank %d: wf_algo_build -> %s (%s)", a->rank, weft_status_string(st), wf_err_msg());
  CHECK(chosen && !strcmp(chosen, want), "rank %d: chose %s, wanted %s", a->rank, chosen ? chosen : "NULL", want);
  for (size_t k = 0; k < j->s.nsteps; k++)
    CHECK(j->s.steps[k].kind == WF_STEP_STAGE, "rank %d: step %zu is not a STAGE step", a->rank, k);
}

/* Runs the job's local steps as far as they go: WEFT_OK when finished. */
static weft_status job_poll(job *j) {
  while (j->round < j->s.nrounds) {
    size_t first = j->round ? j->s.round_end[j->round - 1] : 0;
    weft_status st = wf_sched_run_local(&j->s, first, j->s.round_end[j->round]);
    if (st != WEFT_OK) return st;
    j->round++;
  }
  return WEFT_OK;
}

/* One thread drives p ranks: order 0 in turn, 1 reversed, 2 a random rank
 * polled a random number of times (some far ahead of the others). */
static void run_rr(job *J, int p, int order, uint64_t seed) {
  int done[MAXP] = {0}, left = p;
  for (long it = 0; left > 0; it++) {
    CHECK(it < 50000000, "no progress: deadlock");
    int i = order == 0 ? (int)(it % p) : order == 1 ? p - 1 - (int)(it % p) : (int)(rng_next(&seed) % (uint64_t)p);
    int reps = order == 2 ? 1 + (int)(rng_next(&seed) % 4) : 1;
    for (int r = 0; r < reps && !done[i]; r++) {
      weft_status st = job_poll(&J[i]);
      CHECK(st == WEFT_OK || st == WEFT_IN_PROGRESS, "rank %d: %s (%s)", i, weft_status_string(st), wf_err_msg());
      if (st == WEFT_OK) {
        done[i] = 1;
        left--;
      }
    }
  }
}

/* One thread per rank, each running its jobs one after the other. */
typedef struct lane {
  job *jobs;
  int njobs, rank;
  weft_status st;
  char err[256];
} lane;

static void *lane_main(void *p) {
  lane *l = p;
  int64_t deadline = wf_now_ns() + 120 * (int64_t)1000000000;
  for (int k = 0; k < l->njobs; k++) {
    weft_status st;
    while ((st = job_poll(&l->jobs[k])) == WEFT_IN_PROGRESS) {
      if (wf_now_ns() > deadline) {
        l->st = WEFT_ERR_TIMEOUT;
        snprintf(l->err, sizeof l->err, "job %d did not finish in 120 s", k);
        return NULL;
      }
      sched_yield();
    }
    if (st != WEFT_OK) {
      l->st = st;
      snprintf(l->err, sizeof l->err, "job %d: %s", k, wf_err_msg());
      return NULL;
    }
  }
  return NULL;
}

static void run_threads(job **jobs, int p, int njobs) {
  pthread_t t[MAXP];
  lane L[MAXP];
  for (int i = 0; i < p; i++) {
    L[i] = (lane){.jobs = jobs[i], .njobs = njobs, .rank = i};
    CHECK(!pthread_create(&t[i], NULL, lane_main, &L[i]), "pthread_create");
  }
  for (int i = 0; i < p; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < p; i++) CHECK(L[i].st == WEFT_OK, "rank %d: %s", i, L[i].err);
}

/* ------------------------------------------------------------ data */
static const dtop k_all[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"},     {WEFT_DTYPE_FLOAT64, WEFT_OP_PRODUCT, 8, "float64 prod"},
    {WEFT_DTYPE_INT32, WEFT_OP_MAX, 4, "int32 max"},         {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8 sum"},
    {WEFT_DTYPE_INT16, WEFT_OP_MIN, 2, "int16 min"},         {WEFT_DTYPE_INT64, WEFT_OP_PRODUCT, 8, "int64 prod"},
    {WEFT_DTYPE_FLOAT16, WEFT_OP_SUM, 2, "float16 sum"},     {WEFT_DTYPE_BFLOAT16, WEFT_OP_SUM, 2, "bfloat16 sum"},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, 4, "float32 min"},     {WEFT_DTYPE_BOOL, WEFT_OP_PRODUCT, 1, "bool prod"},
    {WEFT_DTYPE_INT8, WEFT_OP_AVERAGE, 1, "int8 average"},   {WEFT_DTYPE_UINT16, WEFT_OP_MAX, 2, "uint16 max"},
};
#define NALL (sizeof k_all / sizeof k_all[0])

/* Floats with full mantissas and mixed exponents (sums round: only the
 * same order gives the same bits), anything for the other types. */
static void fill_random(const dtop *d, void *buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next(&seed);
    if (d->dt == WEFT_DTYPE_FLOAT32) {
      float v = (float)(((double)(r >> 11) / 9007199254740992.0 * 2 - 1) * ldexp(1.0, (int)(r % 20) - 10));
      memcpy((char *)buf + i * 4, &v, 4);
    } else if (d->dt == WEFT_DTYPE_FLOAT64) {
      double v = ldexp((r & 1) ? -1.0 : 1.0, (int)((r >> 1) % 7) - 3) * (1.0 + (double)(r >> 40) / 16777216.0);
      memcpy((char *)buf + i * 8, &v, 8);
    } else if (d->dt == WEFT_DTYPE_FLOAT16) {
      uint16_t h = wf_f32_to_f16((float)((double)(r >> 11) / 9007199254740992.0 * 8 - 4));
      memcpy((char *)buf + i * 2, &h, 2);
    } else if (d->dt == WEFT_DTYPE_BFLOAT16) {
      uint16_t h = wf_f32_to_bf16((float)((double)(r >> 11) / 9007199254740992.0 * 8 - 4));
      memcpy((char *)buf + i * 2, &h, 2);
    } else if (d->dt == WEFT_DTYPE_BOOL) {
      ((unsigned char *)buf)[i] = (r & 7) != 0;
    } else {
      memcpy((char *)buf + i * d->es, &r, d->es);
    }
  }
}

/* 1 if ref_combine (algo_sim.h) knows the dtype. */
static int plain_ref(const dtop *d) {
  return d->dt == WEFT_DTYPE_FLOAT32 || d->dt == WEFT_DTYPE_FLOAT64 || d->dt == WEFT_DTYPE_UINT8 ||
         d->dt == WEFT_DTYPE_INT16 || d->dt == WEFT_DTYPE_INT32 || d->dt == WEFT_DTYPE_INT64;
}

static wf_coll_args args_of(host *H, wf_coll c, const dtop *d, int i) {
  return (wf_coll_args){.coll = c, .dtype = d->dt, .op = d->op == WEFT_OP_AVERAGE ? WEFT_OP_SUM : d->op,
                        .elem_size = d->es, .rank = i, .size = H->n, .segment_bytes = 1 << 16, .topo = &H->topo[i]};
}

/* ------------------------------------------------------------ one collective, checked */
typedef struct coll_case {
  wf_coll coll;
  const dtop *d;
  size_t n;     /* allreduce, broadcast: elements; others: a count pattern's base */
  int root, pat, alias;
  void *in[MAXP], *out[MAXP], *orig[MAXP], *ref[MAXP];
  size_t counts[MAXP], displs[MAXP], total;
  /* alltoall: pat is the split kind (a2a_matrix), n its scale; rank i's
   * send and receive counts and displacements, buffer lengths */
  size_t sc[MAXP][MAXP], sd[MAXP][MAXP], rc[MAXP][MAXP], rd[MAXP][MAXP], st[MAXP], rt[MAXP], bmax;
} coll_case;

/* Alltoall split matrix c->sc[i][j] = elements rank i sends rank j, by kind
 * c->pat (0 even, 1 random with zeros, 2 one block among empty ones, 3
 * only the diagonal) and scale c->n, and layouts that are neither packed
 * nor in rank order: blocks placed last rank first with gaps between (so
 * code that derived offsets from the counts would fail). */
enum { A2A_EVEN, A2A_RANDOM, A2A_LONE, A2A_DIAG, A2A_KINDS };
static void a2a_matrix(coll_case *c, int p, uint64_t seed) {
  uint64_t r = seed;
  c->bmax = 0;
  for (int i = 0; i < p; i++)
    for (int j = 0; j < p; j++) {
      size_t v = c->pat == A2A_EVEN     ? c->n
                 : c->pat == A2A_RANDOM ? (rng_next(&r) % 4 == 0 ? 0 : rng_next(&r) % (c->n + 1))
                 : c->pat == A2A_LONE   ? (i == p - 1 && j == 0 ? c->n : 0)
                                        : (i == j ? c->n : 0);
      c->sc[i][j] = v;
      if (v > c->bmax) c->bmax = v;
    }
  for (int i = 0; i < p; i++) {
    c->st[i] = c->rt[i] = 0;
    for (int j = p - 1; j >= 0; j--) {
      size_t gap = (size_t)(i + j) % 3;
      c->rc[i][j] = c->sc[j][i];
      c->sd[i][j] = c->st[i] + gap;
      c->st[i] += gap + c->sc[i][j];
      c->rd[i][j] = c->rt[i] + 2 * gap;
      c->rt[i] += 2 * gap + c->rc[i][j];
    }
  }
}

/* Builds rank i's job for case c (buffers filled, references computed). */
static void case_setup(host *H, coll_case *c, job *J, uint64_t seed) {
  int p = H->n;
  const dtop *d = c->d;
  size_t es = d->es;
  if (c->coll == WF_COLL_REDUCESCATTER || c->coll == WF_COLL_ALLGATHER) {
    for (int i = 0; i < p; i++) c->counts[i] = pattern(c->pat, i, p) + (c->pat == PAT_SPLIT_BIG ? 0 : c->n);
    c->total = layout(c->counts, c->displs, p, c->coll == WF_COLL_ALLGATHER);
  }
  simrank *R = calloc((size_t)p, sizeof *R);
  CHECK(R, "out of memory");
  for (int i = 0; i < p; i++) {
    wf_coll_args a = args_of(H, c->coll, d, i);
    switch (c->coll) {
      case WF_COLL_ALLREDUCE:
        c->in[i] = gb_alloc(c->n * es, 0);
        fill_random(d, c->in[i], c->n, seed + 1000 * (uint64_t)i + c->n);
        c->ref[i] = gb_alloc(c->n * es, 0);
        memcpy(c->ref[i], c->in[i], c->n * es);
        a.buf = c->in[i];
        a.count = c->n;
        job_build(&J[i], &a, "shm");
        a.buf = c->ref[i];
        a.topo = NULL;
        build(R, i, &a, "direct");
        add_region(&R[i], c->ref[i], c->n * es, 1);
        break;
      case WF_COLL_REDUCESCATTER: {
        c->in[i] = gb_alloc(c->total * es, 0);
        fill_random(d, c->in[i], c->total, seed + 77 * (uint64_t)i + c->total);
        c->out[i] = gb_alloc(c->counts[i] * es, 0xCD);
        c->ref[i] = gb_alloc(c->counts[i] * es, 0xCD);
        a.in = c->in[i];
        a.out = c->out[i];
        a.counts = c->counts;
        a.displs = c->displs;
        job_build(&J[i], &a, "shm");
        a.out = c->ref[i];
        a.topo = NULL;
        build(R, i, &a, "direct");
        add_region(&R[i], c->in[i], c->total * es, 0);
        add_region(&R[i], c->ref[i], c->counts[i] * es, 1);
        break;
      }
      case WF_COLL_ALLGATHER:
        c->out[i] = gb_alloc(c->total * es, 0xCD);
        c->orig[i] = gb_alloc(c->counts[i] * es, 0);
        fill_random(d, c->orig[i], c->counts[i], seed + 31 * (uint64_t)i);
        if (c->alias) {
          c->in[i] = (char *)c->out[i] + c->displs[i] * es;
        } else {
          c->in[i] = gb_alloc(c->counts[i] * es, 0);
        }
        memcpy(c->in[i], c->orig[i], c->counts[i] * es);
        a.in = c->in[i];
        a.out = c->out[i];
        a.counts = c->counts;
        a.displs = c->displs;
        job_build(&J[i], &a, "shm");
        break;
      case WF_COLL_ALLTOALL:
        if (i == 0) a2a_matrix(c, p, seed);
        c->in[i] = gb_alloc(c->st[i] * es, 0);
        fill_random(d, c->in[i], c->st[i], seed + 17 * (uint64_t)i);
        c->out[i] = gb_alloc(c->rt[i] * es, 0xCD);
        c->orig[i] = gb_alloc(c->st[i] * es, 0);
        memcpy(c->orig[i], c->in[i], c->st[i] * es);
        a.in = c->in[i];
        a.out = c->out[i];
        a.send_counts = c->sc[i];
        a.send_displs = c->sd[i];
        a.recv_counts = c->rc[i];
        a.recv_displs = c->rd[i];
        a.block_max = c->bmax;
        job_build(&J[i], &a, "shm");
        break;
      case WF_COLL_BROADCAST:
        c->in[i] = gb_alloc(c->n * es, 0xA7);
        if (i == c->root) {
          c->orig[0] = gb_alloc(c->n * es, 0);
          fill_random(d, c->orig[0], c->n, seed + 5);
          memcpy(c->in[i], c->orig[0], c->n * es);
        }
        a.buf = c->in[i];
        a.count = c->n;
        a.root = c->root;
        job_build(&J[i], &a, "shm");
        break;
      default:
        FAIL("unexpected collective");
    }
  }
  if (c->coll == WF_COLL_ALLREDUCE || c->coll == WF_COLL_REDUCESCATTER) simulate(R, p, es);
  free_scheds(R, p);
  free(R);
}

/* Checks case c after every rank's job ran; frees its buffers and jobs. */
static void case_check(host *H, coll_case *c, job *J) {
  int p = H->n;
  const dtop *d = c->d;
  size_t es = d->es;
  for (int i = 0; i < p; i++) wf_sched_free(&J[i].s);
  switch (c->coll) {
    case WF_COLL_ALLREDUCE:
      for (int i = 0; i < p; i++) {
        gb_check(c->in[i], c->n * es, "buf", i);
        CHECK(!memcmp(c->in[i], c->ref[i], c->n * es), "rank %d: shm differs from direct", i);
        gb_free(c->in[i]);
        gb_free(c->ref[i]);
      }
      break;
    case WF_COLL_REDUCESCATTER:
      for (int i = 0; i < p; i++) {
        gb_check(c->out[i], c->counts[i] * es, "out", i);
        CHECK(!memcmp(c->out[i], c->ref[i], c->counts[i] * es), "rank %d: shm differs from direct", i);
        gb_free(c->in[i]);
        gb_free(c->out[i]);
        gb_free(c->ref[i]);
      }
      break;
    case WF_COLL_ALLGATHER:
      sim_check_allgather(c->in, c->out, c->orig, c->counts, c->displs, p, es, c->total, c->alias);
      break;
    case WF_COLL_ALLTOALL: /* every block the sender's bytes, the gaps untouched, the input intact */
      for (int i = 0; i < p; i++) {
        gb_check(c->in[i], c->st[i] * es, "in", i);
        gb_check(c->out[i], c->rt[i] * es, "out", i);
        CHECK(!memcmp(c->in[i], c->orig[i], c->st[i] * es), "rank %d: alltoall wrote its input", i);
        const unsigned char *o = c->out[i];
        size_t at = 0;
        for (int j = p - 1; j >= 0; j--) { /* the layout's order: gap, block */
          for (; at < c->rd[i][j] * es; at++)
            if (o[at] != 0xCD) {
              CHECK(0, "rank %d: byte %zu (a gap before the block from rank %d) was written", i, at, j);
              break;
            }
          at = (c->rd[i][j] + c->rc[i][j]) * es;
          const char *want = (const char *)c->orig[j] + c->sd[j][i] * es;
          CHECK(!memcmp(o + c->rd[i][j] * es, want, c->rc[i][j] * es), "rank %d: block from rank %d (%zu elements) is wrong",
                i, j, c->rc[i][j]);
        }
      }
      for (int i = 0; i < p; i++) {
        gb_free(c->in[i]);
        gb_free(c->out[i]);
        gb_free(c->orig[i]);
      }
      break;
    case WF_COLL_BROADCAST:
      for (int i = 0; i < p; i++) {
        gb_check(c->in[i], c->n * es, "buf", i);
        CHECK(!memcmp(c->in[i], c->orig[0], c->n * es), "rank %d: broadcast from %d is wrong", i, c->root);
        gb_free(c->in[i]);
      }
      gb_free(c->orig[0]);
      break;
    default:
      break;
  }
}

/* The plain left fold of allreduce inputs (independent of src/reduce). */
static void check_plain_allreduce(host *H, const dtop *d, size_t n, uint64_t seed) {
  if (!plain_ref(d) || d->op == WEFT_OP_AVERAGE) return;
  size_t es = d->es;
  int p = H->n;
  snprintf(g_ctx, sizeof g_ctx, "allreduce shm vs plain fold p=%d %s n=%zu", p, d->name, n);
  void *in[MAXP], *acc = gb_alloc(n * es, 0), *x = gb_alloc(n * es, 0);
  job J[MAXP];
  for (int i = 0; i < p; i++) {
    in[i] = gb_alloc(n * es, 0);
    fill_random(d, in[i], n, seed + (uint64_t)i);
    wf_coll_args a = args_of(H, WF_COLL_ALLREDUCE, d, i);
    a.buf = in[i];
    a.count = n;
    job_build(&J[i], &a, "shm");
  }
  fill_random(d, acc, n, seed);
  for (int i = 1; i < p; i++) {
    fill_random(d, x, n, seed + (uint64_t)i);
    ref_combine(d, acc, x, n);
  }
  run_rr(J, p, 0, seed);
  for (int i = 0; i < p; i++) {
    CHECK(!memcmp(in[i], acc, n * es), "rank %d differs from the plain left fold", i);
    wf_sched_free(&J[i].s);
    gb_free(in[i]);
  }
  gb_free(acc);
  gb_free(x);
}

static void run_case(host *H, coll_case *c, int order, uint64_t seed) {
  job J[MAXP];
  case_setup(H, c, J, seed);
  run_rr(J, H->n, order, seed);
  case_check(H, c, J);
}

/* ------------------------------------------------------------ suites */
/* Elements per allreduce chunk for a region of `bytes` (as shm_stage.c
 * plans it), to aim counts at chunk boundaries. */
static size_t ar_chunk_elems(size_t bytes, size_t es, int p) {
  size_t cap = (bytes - HDR) / 4;
  if (cap > ((size_t)256 << 10)) cap = (size_t)256 << 10;
  cap -= cap % 64;
  size_t e = cap / es, q = (size_t)p * (64 / es);
  if (e >= 2 * q) e -= e % q;
  return e;
}

static void suite_allreduce(size_t bytes, int pmax) {
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (size_t di = 0; di < NALL; di++) {
      const dtop *d = &k_all[di];
      size_t E = ar_chunk_elems(bytes, d->es, p), fa = ((size_t)64 << 10) / d->es;
      size_t counts[] = {1, 2, 5, 7, (size_t)p - 1, E - 1, E, E + 1, 3 * E + 5, fa - 1, fa, fa + 1, 40003};
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        if (!counts[k]) continue;
        if (counts[k] > 20000 && (di % 3 || TEST_TSAN)) continue; /* large: some dtypes only */
        coll_case c = {.coll = WF_COLL_ALLREDUCE, .d = d, .n = counts[k]};
        int order = (int)((k + di + (size_t)p) % 3);
        snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=%d %s n=%zu region %zu order %d", p, d->name, counts[k], bytes,
                 order);
        run_case(&H, &c, order, 17 * k + di);
      }
      check_plain_allreduce(&H, d, E * 2 + 3, 99 + di);
    }
    host_free(&H);
  }
}

static void suite_reducescatter(size_t bytes, int pmax) {
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (size_t di = 0; di < NALL; di += 2)
      for (int pat = 0; pat < PAT_N; pat++) {
        if (pat == PAT_SPLIT_BIG && (di % 4 || TEST_TSAN)) continue;
        const size_t bases[] = {0, 1000};
        for (int b = 0; b < 2; b++) {
          coll_case c = {.coll = WF_COLL_REDUCESCATTER, .d = &k_all[di], .n = bases[b], .pat = pat};
          int order = (pat + b + p) % 3;
          snprintf(g_ctx, sizeof g_ctx, "reducescatter shm p=%d %s pattern %d base %zu region %zu order %d", p,
                   k_all[di].name, pat, bases[b], bytes, order);
          run_case(&H, &c, order, (uint64_t)pat * 7 + di);
        }
      }
    host_free(&H);
  }
}

static void suite_moves(size_t bytes, int pmax) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f64 = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "f64"};
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (int pat = 0; pat < PAT_N; pat++)
      for (int alias = 0; alias < 2; alias++)
        for (size_t base = 0; base < 5000; base += 4999) {
          const dtop *d = (pat + alias) % 2 ? &u8 : &f64;
          coll_case c = {.coll = WF_COLL_ALLGATHER, .d = d, .n = base, .pat = pat, .alias = alias};
          snprintf(g_ctx, sizeof g_ctx, "allgather shm p=%d %s pattern %d base %zu alias %d region %zu", p, d->name, pat,
                   base, alias, bytes);
          run_case(&H, &c, (pat + alias) % 3, (uint64_t)pat);
        }
    const size_t ns[] = {1, 63, 64, 4095, 4096, 4097, 100003};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (int root = 0; root < p; root++) {
        const dtop *d = k % 2 ? &u8 : &f64;
        if (ns[k] > 50000 && (root || TEST_TSAN)) continue;
        coll_case c = {.coll = WF_COLL_BROADCAST, .d = d, .n = ns[k], .root = root};
        snprintf(g_ctx, sizeof g_ctx, "broadcast shm p=%d %s n=%zu root %d region %zu", p, d->name, ns[k], root, bytes);
        run_case(&H, &c, (int)(k + (size_t)root) % 3, k);
      }
    host_free(&H);
  }
}

/* Alltoall(v) through the slots (a2a_matrix: even, random, lone and
 * diagonal splits, gapped layouts), checked against the senders' bytes. With
 * block_max 0 the staged algorithm must decline: a rank's own counts cannot
 * set the chunk count. */
static void run_alltoall(host *H, const dtop *d, int kind, size_t scale, int order, uint64_t seed) {
  coll_case c = {.coll = WF_COLL_ALLTOALL, .d = d, .n = scale, .pat = kind};
  a2a_matrix(&c, H->n, seed);
  if (!c.bmax) {
    wf_coll_args a = args_of(H, WF_COLL_ALLTOALL, d, 0);
    a.send_counts = c.sc[0], a.send_displs = c.sd[0], a.recv_counts = c.rc[0], a.recv_displs = c.rd[0];
    CHECK(!wf_stage_supports(&a), "staged alltoall with block_max 0 must decline");
    return;
  }
  run_case(H, &c, order, seed);
}

static void suite_alltoall(size_t bytes, int pmax) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f64 = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "f64"};
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    const size_t scales[] = {0, 1, 7, 64, 1000, 40000};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++)
      for (int kind = 0; kind < A2A_KINDS; kind++) {
        const dtop *d = (k + (size_t)kind) % 2 ? &u8 : &f64;
        if (scales[k] >= 40000 && (kind == A2A_RANDOM || TEST_TSAN) && p > 3) continue;
        snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=%d %s kind %d scale %zu region %zu", p, d->name, kind, scales[k],
                 bytes);
        run_alltoall(&H, d, kind, scales[k], (int)(k + (size_t)kind) % 3, 100 * (uint64_t)p + k * 4 + (uint64_t)kind);
      }
    host_free(&H);
  }
}

/* Outputs past the cache: once the host's outputs (every rank's) reach 32
 * MiB, copy-out streams (shm_stage.c NT_HOST_BYTES). Each collective that
 * copies out, just past that size, in byte and odd-sized types so the
 * copies start and end off the 32-byte grid of the streaming stores; the
 * guards around every buffer catch a copy that runs over. */
static void suite_streaming(void) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "f32"},
                    i16 = {WEFT_DTYPE_INT16, WEFT_OP_MAX, 2, "int16 max"};
  const size_t mib = (size_t)1 << 20;
  host H;
  host_init(&H, 2, 4 * mib, 0);
  for (int alias = 0; alias < 2; alias++) {
    coll_case c = {.coll = WF_COLL_ALLGATHER, .d = &u8, .n = 8 * mib + 3, .pat = PAT_UNEVEN, .alias = alias};
    snprintf(g_ctx, sizeof g_ctx, "allgather shm p=2 uint8 16 MiB alias %d (streaming copy-out)", alias);
    run_case(&H, &c, alias, 41);
  }
  snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=2 uint8 random splits to 16 MiB (streaming copy-out)");
  run_alltoall(&H, &u8, 1, 16 * mib + 3, 0, 45); /* outputs of 16 MiB give or take: both sides of the threshold */
  snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=2 uint8 even 8 MiB blocks (streaming copy-out)");
  run_alltoall(&H, &u8, 0, 8 * mib + 3, 1, 46);
  coll_case b = {.coll = WF_COLL_BROADCAST, .d = &u8, .n = 16 * mib + 5, .root = 1};
  snprintf(g_ctx, sizeof g_ctx, "broadcast shm p=2 uint8 16 MiB root 1 (streaming copy-out)");
  run_case(&H, &b, 2, 42);
  host_free(&H);
  host_init(&H, 3, 4 * mib, 0);
  coll_case r = {.coll = WF_COLL_ALLREDUCE, .d = &f32, .n = 11 * mib / 4 + 7};
  snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=3 f32 11 MiB (streaming copy-out)");
  run_case(&H, &r, 1, 43);
  coll_case r2 = {.coll = WF_COLL_ALLREDUCE, .d = &i16, .n = 11 * mib / 2 + 1};
  snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=3 int16 max 11 MiB (streaming copy-out)");
  run_case(&H, &r2, 0, 44);
  host_free(&H);
}

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
  suite_allreduce(16384 + HDR, pmax);     /* tiny regions: many chunks, slots wrap */
  suite_allreduce((size_t)4 << 20, 3);    /* the default geometry */
  suite_segments(16384 + HDR, pmax, 11);
  suite_segments((size_t)4 << 20, 3, 12);
  suite_reducescatter(16384 + HDR, pmax);
  suite_moves(16384 + HDR, pmax);
  suite_moves((size_t)1 << 20, 3);
  suite_alltoall(16384 + HDR, pmax);
  suite_alltoall((size_t)1 << 20, 3);
  suite_streaming();
  for (int p = 2; p <= 5; p++) suite_threads(p % 2 ? 16384 + HDR : (size_t)1 << 20, p, TEST_TSAN ? 40 : 150, 5 + (uint64_t)p);
  printf("test_algo_shm: OK (%zu simulations)\n", g_sims);
  return 0;
}
