/* test_algo_shm_common.h - the in-process host of the staged shared-memory
 * algorithm tests (test_algo_shm.c, test_algo_shm_colls.c): n simulated
 * ranks share n staging regions allocated here, exactly as the ranks of one
 * host share them in the segment, and run their real STAGE steps, driven by
 * one thread in several orders or by one thread per rank; one collective
 * set up (every dtype, count patterns, alltoall split matrices) and checked
 * bit for bit against "direct" in the schedule simulator (algo_sim.h) and
 * plain-loop folds, or byte for byte.
 *
 * Header-only because every tests/unit/test_*.c is built alone; functions
 * are static inline so a test that does not use one gets no warning. */
#ifndef WF_TESTS_UNIT_TEST_ALGO_SHM_COMMON_H
#define WF_TESTS_UNIT_TEST_ALGO_SHM_COMMON_H

#include <pthread.h>
#include <sched.h>

#include "algo/shm_stage.h"
#include "algo_sim.h"
#include "reduce/reduce.h"
#include "util/time.h"

#define HDR 640 /* bytes of a region's header (shm_stage_int.h) */
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

static inline void host_init(host *H, int n, size_t bytes, int64_t spin_ns) {
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
    H->topo[i] = (wf_topo){.nhosts = 1, .host_of = H->hosts, .pid_of = H->pids, .rings = 1, .stage = H->g[i]};
  }
}

static inline void host_free(host *H) {
  for (int i = 0; i < H->n; i++) {
    wf_stage_destroy(H->g[i]);
    free(H->mem[i]);
  }
}

/* ------------------------------------------------------------ running */
/* The staged algorithm the jobs force and must run: "shm", or "numa"
 * (test_algo_shm_numa.c, with a NUMA plan set on the host's ranks). */
static const char *g_stage_algo = "shm";

typedef struct job {
  wf_sched s;
  size_t round;
} job;

static inline void job_build(job *j, const wf_coll_args *a, const char *want) {
  memset(j, 0, sizeof *j);
  wf_sched_init(&j->s, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, g_stage_algo, &j->s, &chosen);
  CHECK(st == WEFT_OK, "rank %d: wf_algo_build -> %s (%s)", a->rank, weft_status_string(st), wf_err_msg());
  CHECK(chosen && !strcmp(chosen, want), "rank %d: chose %s, wanted %s", a->rank, chosen ? chosen : "NULL", want);
  for (size_t k = 0; k < j->s.nsteps; k++)
    CHECK(j->s.steps[k].kind == WF_STEP_STAGE, "rank %d: step %zu is not a STAGE step", a->rank, k);
}

/* Runs the job's local steps as far as they go: WEFT_OK when finished. */
static inline weft_status job_poll(job *j) {
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
static inline void run_rr(job *J, int p, int order, uint64_t seed) {
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

static inline void *lane_main(void *p) {
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

static inline void run_threads(job **jobs, int p, int njobs) {
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
static inline void fill_random(const dtop *d, void *buf, size_t n, uint64_t seed) {
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
static inline int plain_ref(const dtop *d) {
  return d->dt == WEFT_DTYPE_FLOAT32 || d->dt == WEFT_DTYPE_FLOAT64 || d->dt == WEFT_DTYPE_UINT8 ||
         d->dt == WEFT_DTYPE_INT16 || d->dt == WEFT_DTYPE_INT32 || d->dt == WEFT_DTYPE_INT64;
}

static inline wf_coll_args args_of(host *H, wf_coll c, const dtop *d, int i) {
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
static inline void a2a_matrix(coll_case *c, int p, uint64_t seed) {
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
static inline void case_setup(host *H, coll_case *c, job *J, uint64_t seed) {
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
        job_build(&J[i], &a, g_stage_algo);
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
        job_build(&J[i], &a, g_stage_algo);
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
        job_build(&J[i], &a, g_stage_algo);
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
        job_build(&J[i], &a, g_stage_algo);
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
        job_build(&J[i], &a, g_stage_algo);
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
static inline void case_check(host *H, coll_case *c, job *J) {
  int p = H->n;
  const dtop *d = c->d;
  size_t es = d->es;
  for (int i = 0; i < p; i++) wf_sched_free(&J[i].s);
  switch (c->coll) {
    case WF_COLL_ALLREDUCE:
      for (int i = 0; i < p; i++) {
        gb_check(c->in[i], c->n * es, "buf", i);
        CHECK(!memcmp(c->in[i], c->ref[i], c->n * es), "rank %d: %s differs from direct", i, g_stage_algo);
        gb_free(c->in[i]);
        gb_free(c->ref[i]);
      }
      break;
    case WF_COLL_REDUCESCATTER:
      for (int i = 0; i < p; i++) {
        gb_check(c->out[i], c->counts[i] * es, "out", i);
        CHECK(!memcmp(c->out[i], c->ref[i], c->counts[i] * es), "rank %d: %s differs from direct", i, g_stage_algo);
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
static inline void check_plain_allreduce(host *H, const dtop *d, size_t n, uint64_t seed) {
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
    job_build(&J[i], &a, g_stage_algo);
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

static inline void run_case(host *H, coll_case *c, int order, uint64_t seed) {
  job J[MAXP];
  case_setup(H, c, J, seed);
  run_rr(J, H->n, order, seed);
  case_check(H, c, J);
}

/* Elements per allreduce chunk for a region of `bytes` (as shm_stage.c
 * plans it), to aim counts at chunk boundaries. */
static inline size_t ar_chunk_elems(size_t bytes, size_t es, int p) {
  size_t cap = (bytes - HDR) / 4;
  if (cap > ((size_t)256 << 10)) cap = (size_t)256 << 10;
  cap -= cap % 64;
  size_t e = cap / es, q = (size_t)p * (64 / es);
  if (e >= 2 * q) e -= e % q;
  return e;
}

#endif
