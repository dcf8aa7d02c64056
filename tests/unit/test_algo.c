/* test_algo.c - schedule simulator for every collective algorithm.
 *
 * For each algorithm, world sizes 1..8, many counts (0, 1, size-1, 7, 1000,
 * 100003, fewer elements than ranks), several dtype x op pairs and segment
 * sizes, the test builds the schedule of every simulated rank and runs them
 * together in one process with the round semantics of algo/sched.h:
 * per-(sender, receiver) FIFO queues; a send completes only once the
 * receiver has posted the matching receive (rendezvous, the strictest
 * transport), a receive once the message was posted; local steps run when
 * all transfers of the round are done. No rank able to progress while some
 * are unfinished is a deadlock and fails the test. Each schedule is checked
 * first: no zero-byte or self transfers, every pointer inside the rank's
 * buffers or scratch (writes never into read-only input), no overlapping
 * targets within a round. Results are compared with references computed
 * here with plain loops, and across ranks bit for bit; guard bytes catch
 * writes out of bounds. The registry (forced names, declines, automatic
 * choice) and the schedule builder are tested directly too. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "util/err.h"

#define FAIL(...)                                                              \
  do {                                                                         \
    fprintf(stderr, "FAIL test_algo.c:%d [%s]: ", __LINE__, g_ctx);            \
    fprintf(stderr, __VA_ARGS__);                                              \
    fputc('\n', stderr);                                                       \
    exit(1);                                                                   \
  } while (0)
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) FAIL(__VA_ARGS__);                                            \
  } while (0)

static char g_ctx[256] = "setup"; /* the case being run, printed on failure */
static size_t g_sims;            /* simulations run */
#define MAXP 8

/* ------------------------------------------------------------ buffers */
/* Every buffer sits between guard bytes, checked after each simulation. */
#define GUARD 64
static void *gb_alloc(size_t n, unsigned char fill) {
  unsigned char *b = malloc(n + 2 * GUARD);
  CHECK(b, "out of memory");
  memset(b, 0xA5, GUARD);
  memset(b + GUARD, fill, n);
  memset(b + GUARD + n, 0xA5, GUARD);
  return b + GUARD;
}
static void gb_check(const void *p, size_t n, const char *what, int rank) {
  const unsigned char *b = (const unsigned char *)p - GUARD;
  for (size_t i = 0; i < GUARD; i++)
    CHECK(b[i] == 0xA5 && b[GUARD + n + i] == 0xA5, "rank %d: write outside %s (%zu bytes)", rank, what, n);
}
static void gb_free(void *p) {
  if (p) free((unsigned char *)p - GUARD);
}

static uint64_t rng_next(uint64_t *st) { /* splitmix64 */
  uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ------------------------------------------------------------ simulator */
typedef struct region {
  uintptr_t lo, hi;
  int writable;
} region;

typedef struct simrank {
  wf_sched s;
  region reg[6];
  int nreg;
  size_t round; /* current round */
  int posted;   /* its transfers are posted */
  size_t *idx;  /* per step: index of the message within its (sender, receiver) pair */
} simrank;

typedef struct msg {
  size_t bytes;
  size_t at; /* offset of its snapshot (taken at post time) in the pair's data */
} msg;
typedef struct pairq {
  msg *m;
  size_t n, cap;       /* messages posted by the sender */
  size_t nrecv;        /* receives posted by the receiver */
  size_t ndelivered;   /* messages copied out; the data is reset when all are */
  unsigned char *data; /* snapshots, appended (one allocation per pair, not per message) */
  size_t len, dcap;
} pairq;

static void add_region(simrank *x, const void *p, size_t n, int writable) {
  if (!p || !n) return;
  CHECK(x->nreg < 6, "too many regions");
  x->reg[x->nreg++] = (region){(uintptr_t)p, (uintptr_t)p + n, writable};
}

static void check_range(const simrank *x, int rank, size_t step, const void *p, size_t n, int write) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  for (int i = 0; i < x->nreg; i++)
    if (lo >= x->reg[i].lo && hi <= x->reg[i].hi) {
      CHECK(!write || x->reg[i].writable, "rank %d step %zu writes into read-only input", rank, step);
      return;
    }
  FAIL("rank %d step %zu: %zu bytes at %p are outside its buffers and scratch", rank, step, n, p);
}

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

/* Static checks of one rank's schedule. */
static void validate(simrank *x, int rank, int p, size_t es) {
  const wf_sched *s = &x->s;
  CHECK(!s->oom, "rank %d: schedule out of memory", rank);
  CHECK(s->nrounds ? s->round_end[s->nrounds - 1] == s->nsteps : s->nsteps == 0,
        "rank %d: rounds do not cover the %zu steps", rank, s->nsteps);
  size_t first = 0;
  for (size_t r = 0; r < s->nrounds; first = s->round_end[r++]) {
    CHECK(s->round_end[r] > first, "rank %d: round %zu is empty", rank, r);
    for (size_t i = first; i < s->round_end[r]; i++) {
      const wf_step *st = &s->steps[i];
      switch (st->kind) {
        case WF_STEP_SEND:
        case WF_STEP_RECV:
          CHECK(st->peer >= 0 && st->peer < p && st->peer != rank, "rank %d step %zu: bad peer %d", rank, i,
                st->peer);
          CHECK(st->bytes > 0, "rank %d step %zu: zero-byte transfer", rank, i);
          if (st->kind == WF_STEP_SEND) {
            check_range(x, rank, i, st->src, st->bytes, 0);
          } else {
            check_range(x, rank, i, st->dst, st->bytes, 1);
            /* a receive target is touched by nothing else in flight */
            for (size_t j = first; j < s->round_end[r]; j++) {
              const wf_step *o = &s->steps[j];
              if (j == i || (o->kind != WF_STEP_SEND && o->kind != WF_STEP_RECV)) continue;
              const void *q = o->kind == WF_STEP_SEND ? o->src : o->dst;
              CHECK(!overlap(st->dst, st->bytes, q, o->bytes), "rank %d round %zu: receive target overlaps step %zu",
                    rank, r, j);
            }
          }
          break;
        case WF_STEP_REDUCE:
        case WF_STEP_SCALE:
          CHECK(st->count > 0, "rank %d step %zu: empty local step", rank, i);
          check_range(x, rank, i, st->dst, st->count * es, 1);
          check_range(x, rank, i, st->src, st->count * es, 0);
          CHECK(st->dst == st->src || !overlap(st->dst, st->count * es, st->src, st->count * es),
                "rank %d step %zu: reduce operands partially overlap", rank, i);
          break;
        case WF_STEP_COPY:
          CHECK(st->bytes > 0, "rank %d step %zu: empty copy", rank, i);
          check_range(x, rank, i, st->dst, st->bytes, 1);
          check_range(x, rank, i, st->src, st->bytes, 0);
          break;
        default:
          FAIL("rank %d step %zu: unknown kind %d", rank, i, st->kind);
      }
    }
  }
}

/* Posts rank i's current round: each send's data is snapshotted (the
 * sender may change its buffer once its round completes). */
static void post_round(simrank *x, int i, int p, pairq *q, size_t first, size_t last) {
  for (size_t k = first; k < last; k++) {
    const wf_step *st = &x->s.steps[k];
    if (st->kind == WF_STEP_RECV) x->idx[k] = q[st->peer * p + i].nrecv++;
    if (st->kind != WF_STEP_SEND) continue;
    pairq *pq = &q[i * p + st->peer];
    if (pq->n == pq->cap) {
      pq->cap = pq->cap ? 2 * pq->cap : 16;
      CHECK((pq->m = realloc(pq->m, pq->cap * sizeof *pq->m)), "out of memory");
    }
    if (pq->len + st->bytes > pq->dcap) {
      pq->dcap = 2 * (pq->len + st->bytes);
      CHECK((pq->data = realloc(pq->data, pq->dcap)), "out of memory");
    }
    memcpy(pq->data + pq->len, st->src, st->bytes);
    pq->m[pq->n] = (msg){st->bytes, pq->len};
    pq->len += st->bytes;
    x->idx[k] = pq->n++;
  }
}

/* Step k of rank i is done: a send once the receiver posted its receive
 * (rendezvous), a receive once the message was sent. */
static int step_done(const simrank *x, int i, int p, const pairq *q, size_t k) {
  const wf_step *st = &x->s.steps[k];
  if (st->kind == WF_STEP_SEND) return x->idx[k] < q[i * p + st->peer].nrecv;
  if (st->kind == WF_STEP_RECV) return x->idx[k] < q[st->peer * p + i].n;
  return 1;
}

/* Runs the schedules of p ranks together; fails on deadlock or mismatch. */
static void simulate(simrank *R, int p, size_t es) {
  for (int i = 0; i < p; i++) {
    validate(&R[i], i, p, es);
    R[i].round = 0;
    R[i].posted = 0;
    CHECK((R[i].idx = malloc((R[i].s.nsteps + 1) * sizeof(size_t))), "out of memory");
  }
  pairq *q = calloc((size_t)p * (size_t)p, sizeof *q); /* q[a * p + b]: a -> b */
  CHECK(q, "out of memory");
  for (int done = 0; done < p;) {
    int progress = 0;
    done = 0;
    for (int i = 0; i < p; i++) {
      simrank *x = &R[i];
      const wf_sched *s = &x->s;
      while (x->round < s->nrounds) {
        size_t first = x->round ? s->round_end[x->round - 1] : 0, last = s->round_end[x->round], k;
        if (!x->posted) post_round(x, i, p, q, first, last);
        progress |= !x->posted;
        x->posted = 1;
        for (k = first; k < last && step_done(x, i, p, q, k);) k++;
        if (k < last) break;
        for (k = first; k < last; k++) {
          const wf_step *st = &s->steps[k];
          if (st->kind != WF_STEP_RECV) continue;
          pairq *pq = &q[st->peer * p + i];
          msg *m = &pq->m[x->idx[k]];
          CHECK(m->bytes == st->bytes, "rank %d round %zu: message #%zu from rank %d has %zu bytes, receive wants %zu",
                i, x->round, x->idx[k], st->peer, m->bytes, st->bytes);
          memcpy(st->dst, pq->data + m->at, st->bytes);
          if (++pq->ndelivered == pq->n) pq->len = 0; /* nothing pending: reuse the space */
        }
        wf_sched_run_local(s, first, last);
        x->round++;
        x->posted = 0;
        progress = 1;
      }
      done += x->round == s->nrounds;
    }
    if (progress || done == p) continue;
    for (int i = 0; i < p; i++) {
      const simrank *x = &R[i];
      if (x->round == x->s.nrounds) continue;
      for (size_t k = x->round ? x->s.round_end[x->round - 1] : 0; k < x->s.round_end[x->round]; k++)
        if (!step_done(x, i, p, q, k))
          fprintf(stderr, "  rank %d round %zu/%zu: %s #%zu %s rank %d pending\n", i, x->round, x->s.nrounds,
                  x->s.steps[k].kind == WF_STEP_SEND ? "send" : "receive", x->idx[k],
                  x->s.steps[k].kind == WF_STEP_SEND ? "to" : "from", x->s.steps[k].peer);
    }
    FAIL("deadlock: no rank can progress (pending transfers above)");
  }
  for (int a = 0; a < p; a++)
    for (int b = 0; b < p; b++) {
      pairq *pq = &q[a * p + b];
      CHECK(pq->n == pq->nrecv, "rank %d sent %zu messages to rank %d, which received %zu", a, pq->n, b, pq->nrecv);
      free(pq->m);
      free(pq->data);
    }
  free(q);
  for (int i = 0; i < p; i++) {
    free(R[i].idx);
    R[i].idx = NULL;
  }
  g_sims++;
}

static const char *g_choice; /* rank 0's algorithm in the current case */

/* Builds rank i's schedule through the registry; checks the choice (the
 * forced one, and the same on every rank). */
static void build(simrank *R, int i, const wf_coll_args *a, const char *algo) {
  memset(&R[i], 0, sizeof R[i]);
  wf_sched_init(&R[i].s, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, algo, &R[i].s, &chosen);
  CHECK(st == WEFT_OK, "rank %d: wf_algo_build -> %s (%s)", i, weft_status_string(st), wf_err_msg());
  CHECK(chosen && (!algo || !strcmp(chosen, algo)), "rank %d: chose %s, wanted %s", i, chosen ? chosen : "NULL",
        algo ? algo : "any");
  if (i == 0) g_choice = chosen;
  CHECK(!strcmp(chosen, g_choice), "rank %d chose %s, rank 0 chose %s", i, chosen, g_choice);
  add_region(&R[i], R[i].s.scratch, R[i].s.scratch_bytes, 1);
}
static void free_scheds(simrank *R, int p) {
  for (int i = 0; i < p; i++) wf_sched_free(&R[i].s);
}

/* ------------------------------------------------------------ values and references */
typedef struct dtop {
  weft_dtype dt;
  weft_reduce_op op;
  size_t es;
  const char *name;
} dtop;
static const dtop k_dtops[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"},     {WEFT_DTYPE_INT32, WEFT_OP_MAX, 4, "int32 max"},
    {WEFT_DTYPE_FLOAT64, WEFT_OP_PRODUCT, 8, "float64 prod"}, {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8 sum"},
    {WEFT_DTYPE_INT16, WEFT_OP_MIN, 2, "int16 min"},         {WEFT_DTYPE_INT64, WEFT_OP_AVERAGE, 8, "int64 avg"},
};
#define NDTOPS (sizeof k_dtops / sizeof k_dtops[0])
static const dtop k_f32max = {WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, 4, "float32 max"};

enum { V_EXACT, V_RANDOM, V_SPECIAL };

/* EXACT values make every reduction order give the same bits (small
 * integers, powers of two), so results must equal the reference exactly;
 * RANDOM floats are order-sensitive (compared with a tolerance, and across
 * ranks bit for bit); SPECIAL mixes +0, -0 and NaNs with rank-specific
 * payloads, where only cross-rank identity is defined. */
static void gen(const dtop *d, int mode, uint64_t *st, void *out) {
  uint64_t r = rng_next(st);
  switch (d->dt) {
    case WEFT_DTYPE_FLOAT32: {
      float v;
      if (mode == V_RANDOM) {
        v = (float)(((double)(r >> 11) / 9007199254740992.0 * 2 - 1) * ldexp(1.0, (int)(r % 20) - 10));
      } else if (mode == V_SPECIAL) {
        uint32_t bits[] = {0x00000000u, 0x80000000u, 0x7fc00000u | (uint32_t)(r >> 40 & 0xff), 0x3f800000u,
                           0xbf800000u};
        memcpy(&v, &bits[(r >> 8) % 5], 4);
      } else {
        v = (float)((int)(r % 17) - 8);
      }
      memcpy(out, &v, 4);
      break;
    }
    case WEFT_DTYPE_FLOAT64: {
      double v = ldexp((r & 1) ? -1.0 : 1.0, (int)((r >> 1) % 7) - 3);
      memcpy(out, &v, 8);
      break;
    }
    default:
      memcpy(out, &r, d->es); /* integers: any bits */
      break;
  }
}

/* acc[i] = acc[i] op x[i], plain loops independent of src/reduce. Integer
 * sums and products wrap (computed in uint64_t); average reduces as sum.
 * Buffers and blocks are aligned to the element size. */
#define REF_LOOP(T, SUM, PROD)                                                 \
  do {                                                                         \
    T *A = acc;                                                                \
    const T *X = x;                                                            \
    for (size_t i = 0; i < n; i++) {                                           \
      T a = A[i], b = X[i];                                                    \
      A[i] = op == WEFT_OP_MIN ? (a < b ? a : b)                               \
             : op == WEFT_OP_MAX ? (a > b ? a : b)                             \
             : op == WEFT_OP_PRODUCT ? (T)(PROD) : (T)(SUM);                   \
    }                                                                          \
  } while (0)
#define REF_INT(T) REF_LOOP(T, (uint64_t)a + (uint64_t)b, (uint64_t)a * (uint64_t)b)
static void ref_combine(const dtop *d, void *acc, const void *x, size_t n) {
  weft_reduce_op op = d->op;
  switch (d->dt) {
    case WEFT_DTYPE_FLOAT32: REF_LOOP(float, a + b, a * b); break;
    case WEFT_DTYPE_FLOAT64: REF_LOOP(double, a + b, a * b); break;
    case WEFT_DTYPE_UINT8: REF_INT(uint8_t); break;
    case WEFT_DTYPE_INT16: REF_INT(int16_t); break;
    case WEFT_DTYPE_INT32: REF_INT(int32_t); break;
    case WEFT_DTYPE_INT64: REF_INT(int64_t); break;
    default: FAIL("reference: unsupported dtype");
  }
}

/* float32 results against a float64 reference sum. */
static void check_close_f32(const void *got, const void *const *xs, int p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double sum = 0, mag = 0;
    for (int r = 0; r < p; r++) {
      float v;
      memcpy(&v, (const char *)xs[r] + 4 * i, 4);
      sum += v;
      mag += fabs(v);
    }
    float g;
    memcpy(&g, (const char *)got + 4 * i, 4);
    CHECK(fabs(g - sum) <= 1e-5 * mag + 1e-30, "element %zu: %.9g, reference %.9g", i, g, sum);
  }
}

/* ------------------------------------------------------------ allreduce */
static void run_allreduce(const char *algo, int p, const dtop *d, size_t count, size_t seg, int mode) {
  snprintf(g_ctx, sizeof g_ctx, "allreduce %s p=%d %s count=%zu seg=%zu mode=%d", algo ? algo : "auto", p, d->name,
           count, seg, mode);
  simrank R[MAXP];
  void *x[MAXP], *buf[MAXP];
  size_t bytes = count * d->es;
  uint64_t st = count * 131 + (uint64_t)p * 7 + seg;
  for (int i = 0; i < p; i++) {
    x[i] = gb_alloc(bytes, 0);
    for (size_t k = 0; k < count; k++) gen(d, mode, &st, (char *)x[i] + k * d->es);
    buf[i] = gb_alloc(bytes, 0);
    memcpy(buf[i], x[i], bytes);
    wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = d->dt, .op = d->op, .elem_size = d->es, .rank = i,
                      .size = p, .buf = buf[i], .count = count, .segment_bytes = seg};
    build(R, i, &a, algo);
    add_region(&R[i], buf[i], bytes, 1);
  }
  simulate(R, p, d->es);
  for (int i = 0; i < p; i++) {
    gb_check(buf[i], bytes, "buf", i);
    CHECK(!memcmp(buf[i], buf[0], bytes), "rank %d's result differs from rank 0's", i);
  }
  if (mode == V_EXACT) {
    void *ref = gb_alloc(bytes, 0);
    memcpy(ref, x[0], bytes);
    for (int i = 1; i < p; i++) ref_combine(d, ref, x[i], count);
    if (memcmp(buf[0], ref, bytes)) {
      size_t k = 0;
      while (((unsigned char *)buf[0])[k] == ((unsigned char *)ref)[k]) k++;
      FAIL("byte %zu differs from the reference", k);
    }
    gb_free(ref);
  } else if (mode == V_RANDOM) {
    check_close_f32(buf[0], (const void *const *)x, p, count);
  }
  for (int i = 0; i < p; i++) {
    gb_free(x[i]);
    gb_free(buf[i]);
  }
  free_scheds(R, p);
}

/* ------------------------------------------------------------ broadcast */
static void run_broadcast(const char *algo, int p, int root, size_t es, size_t count, size_t seg) {
  snprintf(g_ctx, sizeof g_ctx, "broadcast %s p=%d root=%d es=%zu count=%zu seg=%zu", algo ? algo : "auto", p, root,
           es, count, seg);
  simrank R[MAXP];
  void *buf[MAXP];
  size_t bytes = count * es;
  void *src = gb_alloc(bytes, 0);
  uint64_t st = count + (uint64_t)root * 1000003 + es;
  for (size_t k = 0; k < bytes; k++) ((unsigned char *)src)[k] = (unsigned char)rng_next(&st);
  for (int i = 0; i < p; i++) {
    buf[i] = gb_alloc(bytes, (unsigned char)(0x10 + i)); /* garbage to be overwritten */
    if (i == root) memcpy(buf[i], src, bytes);
    wf_coll_args a = {.coll = WF_COLL_BROADCAST, .dtype = WEFT_DTYPE_UINT8, .elem_size = es, .rank = i, .size = p,
                      .buf = buf[i], .count = count, .root = root, .segment_bytes = seg};
    build(R, i, &a, algo);
    add_region(&R[i], buf[i], bytes, 1);
  }
  simulate(R, p, es);
  for (int i = 0; i < p; i++) {
    gb_check(buf[i], bytes, "buf", i);
    CHECK(!memcmp(buf[i], src, bytes), "rank %d did not get the root's data", i);
    gb_free(buf[i]);
  }
  gb_free(src);
  free_scheds(R, p);
}

/* ------------------------------------------------------------ per-rank count patterns */
enum { PAT_ZERO, PAT_ONE, PAT_SEVEN, PAT_UNEVEN, PAT_LAST_ONLY, PAT_FEW, PAT_SPLIT1000, PAT_SPLIT_BIG, PAT_N };
static size_t pattern(int pat, int i, int p) {
  switch (pat) {
    case PAT_ZERO: return 0;
    case PAT_ONE: return 1;
    case PAT_SEVEN: return 7;
    case PAT_UNEVEN: return i % 3 == 1 ? 0 : (size_t)(i * 37 + 11) % 23; /* zeros among uneven sizes */
    case PAT_LAST_ONLY: return i == p - 1 ? 1000 : 0;
    case PAT_FEW: return i < p / 2 ? 1 : 0; /* fewer elements than ranks */
    case PAT_SPLIT1000: return 1000 / (size_t)p + ((size_t)i < 1000 % (size_t)p); /* weft's dim-0 split */
    default: return 100003 / (size_t)p + ((size_t)i < 100003 % (size_t)p);
  }
}

/* Displacements of counts with a gap of (i % 2) elements before block i;
 * returns the total elements including gaps. */
static size_t layout(const size_t *counts, size_t *displs, int p, int gaps) {
  size_t off = 0;
  for (int i = 0; i < p; i++) {
    off += gaps ? (size_t)(i % 2) : 0;
    displs[i] = off;
    off += counts[i];
  }
  return off;
}

/* ------------------------------------------------------------ allgather */
static void run_allgather(int p, size_t es, int pat, int alias) {
  snprintf(g_ctx, sizeof g_ctx, "allgather ring p=%d es=%zu pattern=%d alias=%d", p, es, pat, alias);
  simrank R[MAXP];
  size_t counts[MAXP], displs[MAXP];
  void *in[MAXP], *out[MAXP], *orig[MAXP];
  for (int i = 0; i < p; i++) counts[i] = pattern(pat, i, p);
  size_t total = layout(counts, displs, p, 1);
  uint64_t st = (uint64_t)pat * 977 + (uint64_t)p;
  for (int i = 0; i < p; i++) {
    size_t n = counts[i] * es;
    orig[i] = gb_alloc(n, 0);
    for (size_t k = 0; k < n; k++) ((unsigned char *)orig[i])[k] = (unsigned char)rng_next(&st);
    out[i] = gb_alloc(total * es, 0xCD);
    if (alias) {
      in[i] = (char *)out[i] + displs[i] * es;
    } else {
      in[i] = gb_alloc(n, 0);
    }
    memcpy(in[i], orig[i], n);
    wf_coll_args a = {.coll = WF_COLL_ALLGATHER, .dtype = WEFT_DTYPE_UINT8, .elem_size = es, .rank = i, .size = p,
                      .in = in[i], .out = out[i], .counts = counts, .displs = displs, .segment_bytes = 8};
    build(R, i, &a, "ring");
    add_region(&R[i], out[i], total * es, 1);
    if (!alias) add_region(&R[i], in[i], n, 0);
  }
  simulate(R, p, es);
  for (int i = 0; i < p; i++) {
    gb_check(out[i], total * es, "out", i);
    CHECK(!memcmp(out[i], out[0], total * es), "rank %d's output differs from rank 0's", i);
    if (!alias) {
      gb_check(in[i], counts[i] * es, "in", i);
      CHECK(!memcmp(in[i], orig[i], counts[i] * es), "rank %d's input changed", i);
    }
  }
  size_t pos = 0;
  for (int j = 0; j < p; j++) {
    for (; pos < displs[j] * es; pos++) CHECK(((unsigned char *)out[0])[pos] == 0xCD, "gap byte %zu written", pos);
    CHECK(!memcmp((char *)out[0] + pos, orig[j], counts[j] * es), "block of rank %d is wrong", j);
    pos += counts[j] * es;
  }
  for (int i = 0; i < p; i++) {
    if (!alias) gb_free(in[i]);
    gb_free(out[i]);
    gb_free(orig[i]);
  }
  free_scheds(R, p);
}

/* ------------------------------------------------------------ alltoall */
static size_t a2a_count(int pat, int i, int j, int p) {
  switch (pat) {
    case 0: return 0;
    case 1: return 1;
    case 2: return (i + j) % 4 == 0 ? 0 : (size_t)(i * 31 + j * 17 + 5) % 13;
    case 3: return i == j ? 5 : 0; /* only the self copy */
    case 4: return i == 0 ? 300 : 0; /* one sender */
    default: return 100003 / (size_t)(p * p) + (size_t)(i + j) % 3;
  }
}

static void run_alltoall(int p, size_t es, int pat) {
  snprintf(g_ctx, sizeof g_ctx, "alltoall pairwise p=%d es=%zu pattern=%d", p, es, pat);
  simrank R[MAXP];
  size_t sc[MAXP][MAXP], sd[MAXP][MAXP], rc[MAXP][MAXP], rd[MAXP][MAXP], stot[MAXP], rtot[MAXP];
  void *in[MAXP], *out[MAXP], *orig[MAXP];
  for (int i = 0; i < p; i++)
    for (int j = 0; j < p; j++) {
      sc[i][j] = a2a_count(pat, i, j, p); /* i sends to j */
      rc[j][i] = sc[i][j];
    }
  uint64_t st = (uint64_t)pat * 31 + (uint64_t)p;
  for (int i = 0; i < p; i++) {
    stot[i] = layout(sc[i], sd[i], p, 1);
    rtot[i] = layout(rc[i], rd[i], p, (i + 1) % 2); /* gaps on some ranks only */
    in[i] = gb_alloc(stot[i] * es, 0);
    for (size_t k = 0; k < stot[i] * es; k++) ((unsigned char *)in[i])[k] = (unsigned char)rng_next(&st);
    orig[i] = gb_alloc(stot[i] * es, 0);
    memcpy(orig[i], in[i], stot[i] * es);
    out[i] = gb_alloc(rtot[i] * es, 0xCD);
  }
  for (int i = 0; i < p; i++) {
    wf_coll_args a = {.coll = WF_COLL_ALLTOALL, .dtype = WEFT_DTYPE_UINT8, .elem_size = es, .rank = i, .size = p,
                      .in = in[i], .out = out[i], .send_counts = sc[i], .send_displs = sd[i],
                      .recv_counts = rc[i], .recv_displs = rd[i], .segment_bytes = 8};
    build(R, i, &a, "pairwise");
    add_region(&R[i], in[i], stot[i] * es, 0);
    add_region(&R[i], out[i], rtot[i] * es, 1);
  }
  simulate(R, p, es);
  for (int j = 0; j < p; j++) {
    gb_check(in[j], stot[j] * es, "in", j);
    gb_check(out[j], rtot[j] * es, "out", j);
    CHECK(!memcmp(in[j], orig[j], stot[j] * es), "rank %d's input changed", j);
    size_t pos = 0;
    for (int i = 0; i < p; i++) { /* rank j's block from rank i */
      for (; pos < rd[j][i] * es; pos++) CHECK(((unsigned char *)out[j])[pos] == 0xCD, "rank %d: gap written", j);
      CHECK(!memcmp((char *)out[j] + pos, (char *)orig[i] + sd[i][j] * es, rc[j][i] * es),
            "rank %d: block from rank %d is wrong", j, i);
      pos += rc[j][i] * es;
    }
  }
  for (int i = 0; i < p; i++) {
    gb_free(in[i]);
    gb_free(out[i]);
    gb_free(orig[i]);
  }
  free_scheds(R, p);
}

/* ------------------------------------------------------------ reducescatter */
static void run_reducescatter(int p, const dtop *d, int pat, size_t seg) {
  snprintf(g_ctx, sizeof g_ctx, "reducescatter ring p=%d %s pattern=%d seg=%zu", p, d->name, pat, seg);
  simrank R[MAXP];
  size_t counts[MAXP], displs[MAXP];
  void *in[MAXP], *orig[MAXP], *out[MAXP];
  for (int i = 0; i < p; i++) counts[i] = pattern(pat, i, p);
  size_t total = layout(counts, displs, p, 0), es = d->es;
  uint64_t st = (uint64_t)pat * 7 + (uint64_t)p + seg;
  for (int i = 0; i < p; i++) {
    in[i] = gb_alloc(total * es, 0);
    for (size_t k = 0; k < total; k++) gen(d, V_EXACT, &st, (char *)in[i] + k * es);
    orig[i] = gb_alloc(total * es, 0);
    memcpy(orig[i], in[i], total * es);
    out[i] = gb_alloc(counts[i] * es, 0xCD);
    wf_coll_args a = {.coll = WF_COLL_REDUCESCATTER, .dtype = d->dt, .op = d->op, .elem_size = es, .rank = i,
                      .size = p, .in = in[i], .out = out[i], .counts = counts, .displs = displs,
                      .segment_bytes = seg};
    build(R, i, &a, "ring");
    add_region(&R[i], in[i], total * es, 0);
    add_region(&R[i], out[i], counts[i] * es, 1);
  }
  simulate(R, p, es);
  for (int i = 0; i < p; i++) {
    gb_check(in[i], total * es, "in", i);
    gb_check(out[i], counts[i] * es, "out", i);
    CHECK(!memcmp(in[i], orig[i], total * es), "rank %d's read-only input changed", i);
    void *ref = gb_alloc(counts[i] * es, 0);
    memcpy(ref, (char *)orig[0] + displs[i] * es, counts[i] * es);
    for (int j = 1; j < p; j++) ref_combine(d, ref, (char *)orig[j] + displs[i] * es, counts[i]);
    CHECK(!memcmp(ref, out[i], counts[i] * es), "rank %d's block differs from the reference", i);
    gb_free(ref);
  }
  for (int i = 0; i < p; i++) {
    gb_free(in[i]);
    gb_free(orig[i]);
    gb_free(out[i]);
  }
  free_scheds(R, p);
}

/* ------------------------------------------------------------ schedule builder */
static void test_sched(void) {
  snprintf(g_ctx, sizeof g_ctx, "wf_sched");
  wf_sched s;
  wf_sched_init(&s, WEFT_DTYPE_INT32, WEFT_OP_SUM);
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, c[4] = {0};
  wf_sched_end_round(&s); /* empty: no round */
  CHECK(s.nrounds == 0, "an empty round was closed");
  wf_sched_send(&s, 1, a, 0); /* zero-byte transfers vanish */
  wf_sched_recv(&s, 1, a, 0);
  wf_sched_copy(&s, a, a, 16); /* a self copy is a no-op */
  CHECK(s.nsteps == 0, "zero-byte or self steps were kept");
  void *scr = wf_sched_scratch(&s, 100);
  CHECK(scr && ((uintptr_t)scr % 64) == 0, "scratch missing or not 64-byte aligned");
  CHECK(wf_sched_scratch(&s, 50) == scr && wf_sched_scratch(&s, 101) == NULL, "second scratch call semantics");
  wf_sched_send(&s, 1, a, 16);
  wf_sched_reduce(&s, a, b, 4);
  wf_sched_end_round(&s);
  wf_sched_end_round(&s);
  wf_sched_copy(&s, c, a, 16);
  wf_sched_scale(&s, c, c, 4, 3.0);
  CHECK(wf_sched_finish(&s) == WEFT_OK && s.nrounds == 2 && s.round_end[0] == 2 && s.round_end[1] == 4,
        "rounds: %zu", s.nrounds);
  CHECK(wf_sched_finish(&s) == WEFT_OK && s.nrounds == 2, "finish twice added a round");
  wf_sched_run_local(&s, 0, s.nsteps);
  for (int i = 0; i < 4; i++) CHECK(a[i] == 11 * (i + 1) && c[i] == 33 * (i + 1), "local steps: a=%d c=%d", a[i], c[i]);
  wf_sched_free(&s);
  CHECK(s.steps == NULL && s.nsteps == 0, "free did not reset");
}

/* ------------------------------------------------------------ registry */
/* Builds (and frees) one schedule for *a with count elements; returns the
 * algorithm chosen ("" on error) and the status in *stp. */
static const char *pick(wf_coll_args *a, size_t count, const char *forced, weft_status *stp) {
  wf_sched s;
  wf_sched_init(&s, a->dtype, a->op);
  a->count = count;
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, forced, &s, &chosen);
  if (stp) *stp = st;
  else CHECK(st == WEFT_OK, "wf_algo_build -> %s (%s)", weft_status_string(st), wf_err_msg());
  wf_sched_free(&s);
  return chosen ? chosen : "";
}
#define PICKS(a, count, forced, want) (!strcmp(pick((a), (count), (forced), NULL), (want)))
static weft_status pick_status(wf_coll_args *a, size_t count) {
  weft_status st;
  pick(a, count, NULL, &st);
  return st;
}

static void test_registry(void) {
  snprintf(g_ctx, sizeof g_ctx, "registry");
  const wf_algo *const *t = wf_algo_table();
  int n = 0, per_coll[WF_COLL_COUNT_] = {0};
  for (; t[n]; n++) {
    CHECK(t[n]->name && t[n]->supports && t[n]->cost && t[n]->build, "entry %d incomplete", n);
    CHECK(t[n]->coll < WF_COLL_COUNT_, "entry %s: bad collective", t[n]->name);
    per_coll[t[n]->coll]++;
    for (int j = 0; j < n; j++)
      CHECK(t[j]->coll != t[n]->coll || strcmp(t[j]->name, t[n]->name), "duplicate name %s", t[n]->name);
  }
  CHECK(per_coll[WF_COLL_ALLREDUCE] >= 2 && per_coll[WF_COLL_BROADCAST] >= 2 && per_coll[WF_COLL_ALLGATHER] >= 1 &&
            per_coll[WF_COLL_ALLTOALL] >= 1 && per_coll[WF_COLL_REDUCESCATTER] >= 1,
        "table misses algorithms (%d entries)", n);

  size_t big = ((size_t)64 << 20) / 4 + 1; /* floats: just over rd's 64 MiB limit */
  float *buf = malloc(big * sizeof(float)); /* never touched: schedules are only built */
  CHECK(buf, "out of memory");
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 1, .size = 4, .buf = buf, .segment_bytes = 1 << 20};
  /* automatic: rd up to WEFT_SMALL_ALLREDUCE_BYTES (64 KiB), ring above */
  unsetenv("WEFT_SMALL_ALLREDUCE_BYTES");
  unsetenv("WEFT_SMALL_BROADCAST_BYTES");
  int sizes[] = {2, 3, 4, 5, 8};
  for (int k = 0; k < 5; k++) {
    a.size = sizes[k];
    CHECK(PICKS(&a, 1, NULL, "rd"), "p=%d 4 bytes: not rd", a.size);
    CHECK(PICKS(&a, 16384, "", "rd"), "p=%d 64 KiB: not rd", a.size);
    CHECK(PICKS(&a, 16385, NULL, "ring"), "p=%d 64 KiB + 4: not ring", a.size);
  }
  a.size = 4;
  setenv("WEFT_SMALL_ALLREDUCE_BYTES", "1024", 1);
  CHECK(PICKS(&a, 256, NULL, "rd"), "1 KiB with a 1 KiB threshold: not rd");
  CHECK(PICKS(&a, 257, NULL, "ring"), "the threshold knob is ignored");
  unsetenv("WEFT_SMALL_ALLREDUCE_BYTES");
  /* forced names, unknown names, declines */
  CHECK(PICKS(&a, 1000, "ring", "ring"), "forced ring not honoured");
  CHECK(PICKS(&a, 1000000, "rd", "rd"), "forced rd not honoured for a 4 MB tensor");
  fprintf(stderr, "test_algo: two warnings (unknown name, declined name) are expected next\n");
  CHECK(PICKS(&a, 10, "bogus", "rd"), "unknown name did not fall back to the cheapest");
  CHECK(PICKS(&a, 10, "tree", "rd"), "another collective's algorithm was accepted");
  CHECK(PICKS(&a, big, "rd", "ring"), "rd did not decline above 64 MiB (it needs a scratch that large)");

  wf_coll_args b = {.coll = WF_COLL_BROADCAST, .dtype = WEFT_DTYPE_UINT8, .elem_size = 1, .rank = 0, .size = 5,
                    .buf = buf, .root = 3, .segment_bytes = 1 << 20};
  CHECK(PICKS(&b, 1024, NULL, "tree"), "small broadcast: not tree");
  CHECK(PICKS(&b, 262144, NULL, "tree"), "256 KiB broadcast: not tree");
  CHECK(PICKS(&b, 262145, NULL, "chain"), "large broadcast: not chain");
  CHECK(PICKS(&b, 262145, "tree", "tree"), "forced tree not honoured");

  /* errors */
  wf_coll_args c = {.coll = WF_COLL_BARRIER, .elem_size = 1, .rank = 0, .size = 2};
  CHECK(pick_status(&c, 0) == WEFT_ERR_NOT_SUPPORTED && strstr(wf_err_msg(), "barrier"), "barrier: no error");
  a.rank = 4;
  CHECK(pick_status(&a, 10) == WEFT_ERR_INVALID_ARGUMENT, "rank out of range accepted");
  a.rank = 0;
  CHECK(pick_status(&a, SIZE_MAX / 2) == WEFT_ERR_INVALID_ARGUMENT, "byte size overflow accepted");
  a.buf = NULL;
  CHECK(pick_status(&a, 10) == WEFT_ERR_INVALID_ARGUMENT, "NULL buffer accepted");
  b.root = 5;
  CHECK(pick_status(&b, 10) == WEFT_ERR_INVALID_ARGUMENT, "root out of range accepted");
  size_t cnt[2] = {1, 2}, dsp[2] = {0, 1};
  wf_coll_args e = {.coll = WF_COLL_ALLTOALL, .elem_size = 4, .rank = 1, .size = 2, .in = buf, .out = buf,
                    .send_counts = cnt, .send_displs = dsp, .recv_counts = dsp, .recv_displs = dsp};
  CHECK(pick_status(&e, 0) == WEFT_ERR_INVALID_ARGUMENT, "alltoall with a self count mismatch accepted");
  free(buf);
}

/* ------------------------------------------------------------ main */
static const size_t k_segs[] = {8, 1004, (size_t)1 << 20};
#define BIG 100003

/* Every dtype x op x segment size for the small counts. BIG elements cost
 * far more to simulate (above all under TSan: ~10^5 rounds per rank in 8-byte
 * segments, megabytes per rank), so every size runs one BIG case per
 * algorithm and two sizes (odd and a power of two) run a spread of them. */
static int big_p(int p) { return p == 3 || p == 8; }
/* The test has one thread, so TSan can find nothing here that the plain and
 * ASan runs miss; its ~100 MB/s on large buffers would only cost time. */
#if defined(__SANITIZE_THREAD__) /* gcc */
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang */
#define TEST_TSAN 1
#endif
#endif
#ifdef TEST_TSAN
static int any_big(int p) { return p == 8; }
#else
static int any_big(int p) { (void)p; return 1; }
#endif

static void test_allreduce(int p) {
  size_t counts[] = {0, 1, (size_t)p - 1, 7, 1000, (size_t)p / 2, (size_t)p + 1};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    for (size_t d = 0; d < NDTOPS; d++) {
      run_allreduce("rd", p, &k_dtops[d], n, 8, V_EXACT);
      for (size_t s = 0; s < 3; s++) run_allreduce("ring", p, &k_dtops[d], n, k_segs[s], V_EXACT);
    }
    for (int s = 0; s < 3; s += 2) {
      run_allreduce("ring", p, &k_dtops[0], n, k_segs[s], V_RANDOM);
      run_allreduce("ring", p, &k_f32max, n, k_segs[s], V_SPECIAL);
    }
    run_allreduce("rd", p, &k_dtops[0], n, 8, V_RANDOM);
    run_allreduce("rd", p, &k_f32max, n, 8, V_SPECIAL);
    run_allreduce(NULL, p, &k_dtops[0], n, 1 << 20, V_EXACT);
    run_allreduce("ring", p, &k_dtops[0], n, 0, V_EXACT); /* 0: whole blocks */
  }
  /* k_dtops[0] float32 sum, [1] int32 max, [2] float64 prod, [3] uint8 sum, [4] int16 min */
  if (!any_big(p)) return;
  run_allreduce("ring", p, &k_dtops[0], BIG, k_segs[1], V_EXACT);
  run_allreduce("rd", p, &k_dtops[0], BIG, 8, V_EXACT);
  if (!big_p(p)) return;
  /* 2-element segments: 10^5 rounds per rank, so on the small size only */
  if (p == 3) run_allreduce("ring", p, &k_dtops[0], BIG, k_segs[0], V_EXACT);
  run_allreduce("ring", p, &k_dtops[3], BIG, k_segs[0], V_EXACT);
  run_allreduce("ring", p, &k_dtops[2], BIG, k_segs[2], V_EXACT);
  run_allreduce("ring", p, &k_dtops[1], BIG, k_segs[1], V_EXACT);
  run_allreduce("ring", p, &k_dtops[0], BIG, k_segs[2], V_RANDOM);
  run_allreduce("rd", p, &k_dtops[2], BIG, 8, V_EXACT);
  run_allreduce("rd", p, &k_dtops[4], BIG, 8, V_EXACT);
  run_allreduce(NULL, p, &k_dtops[0], BIG, 1 << 20, V_EXACT);
}

static void test_broadcast(int p) {
  size_t counts[] = {0, 1, (size_t)p - 1, 7, 1000, (size_t)p / 2, (size_t)p + 1};
  int roots[] = {0, p - 1, p / 2};
  size_t ess[] = {1, 4, 8};
  for (int ri = 0; ri < 3; ri++)
    for (size_t e = 0; e < 3; e++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        run_broadcast("tree", p, roots[ri], ess[e], counts[c], 8);
        for (size_t s = 0; s < 3; s++) run_broadcast("chain", p, roots[ri], ess[e], counts[c], k_segs[s]);
      }
  run_broadcast(NULL, p, p / 2, 4, 1000, 8);
  run_broadcast("chain", p, p - 1, 4, 1000, 0); /* 0: one segment */
  if (!any_big(p)) return;
  run_broadcast("chain", p, p / 2, 4, BIG, k_segs[1]);
  if (!big_p(p)) return;
  run_broadcast("tree", p, p / 2, 4, BIG, 8);
  run_broadcast("chain", p, p - 1, 1, BIG, k_segs[0]);
  run_broadcast("chain", p, 0, 8, BIG, k_segs[2]);
  run_broadcast(NULL, p, p - 1, 4, BIG, 8);
}

static void test_gather_scatter(int p) {
  size_t ess[] = {1, 4, 8};
  for (int pat = 0; pat < PAT_SPLIT_BIG; pat++)
    for (size_t e = 0; e < 3; e++) {
      run_allgather(p, ess[e], pat, 0);
      run_allgather(p, ess[e], pat, 1);
    }
  for (int pat = 0; pat < 5; pat++)
    for (size_t e = 0; e < 3; e++) run_alltoall(p, ess[e], pat);
  for (int pat = 0; pat < PAT_SPLIT_BIG; pat++)
    for (size_t d = 0; d < NDTOPS; d++)
      for (size_t s = 0; s < 3; s++) run_reducescatter(p, &k_dtops[d], pat, k_segs[s]);
  run_reducescatter(p, &k_dtops[0], PAT_UNEVEN, 0); /* 0: whole blocks */
  if (!any_big(p)) return;
  run_allgather(p, 4, PAT_SPLIT_BIG, 0);
  run_alltoall(p, 4, 5);
  run_reducescatter(p, &k_dtops[0], PAT_SPLIT_BIG, k_segs[1]);
  if (!big_p(p)) return;
  run_allgather(p, 1, PAT_SPLIT_BIG, 1);
  run_alltoall(p, 8, 5);
  run_reducescatter(p, &k_dtops[3], PAT_SPLIT_BIG, k_segs[0]);
  run_reducescatter(p, &k_dtops[2], PAT_SPLIT_BIG, k_segs[2]);
  run_reducescatter(p, &k_dtops[5], PAT_SPLIT_BIG, k_segs[2]);
}

int main(void) {
  test_sched();
  test_registry();
  for (int p = 1; p <= MAXP; p++) {
    test_allreduce(p);
    test_broadcast(p);
    test_gather_scatter(p);
  }
  printf("test_algo: OK (%zu simulations)\n", g_sims);
  return 0;
}
