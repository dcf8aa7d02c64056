/* algo_sim.h - the schedule simulator shared by the algorithm tests
 * (test_algo.c, test_algo_order.c): runs the schedules of n simulated ranks
 * in one process with the round semantics of algo/sched.h, per-(sender,
 * receiver) FIFO queues and rendezvous sends (a send completes only once the
 * receiver has posted the matching receive, the strictest transport); a
 * receive completes once the message was posted; local steps run when all
 * transfers of the round are done. No rank able to progress while some are
 * unfinished is a deadlock and fails the test. Each schedule is checked
 * first: no zero-byte or self transfers, every pointer inside the rank's
 * buffers or scratch (writes never into read-only input), no overlapping
 * targets within a round. Also: guarded buffers, a PRNG, plain-loop
 * reference reductions and per-rank count patterns.
 *
 * Header-only because every tests/unit/test_*.c is built alone; functions
 * are static inline so a test that does not use one gets no warning. */
#ifndef WF_TEST_ALGO_SIM_H
#define WF_TEST_ALGO_SIM_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "util/err.h"

/* File name without directories, for failure messages. */
static inline const char *sim_base(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

#define FAIL(...)                                                              \
  do {                                                                         \
    fprintf(stderr, "FAIL %s:%d [%s]: ", sim_base(__FILE__), __LINE__, g_ctx); \
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
static inline void *gb_alloc(size_t n, unsigned char fill) {
  unsigned char *b = malloc(n + 2 * GUARD);
  CHECK(b, "out of memory");
  memset(b, 0xA5, GUARD);
  memset(b + GUARD, fill, n);
  memset(b + GUARD + n, 0xA5, GUARD);
  return b + GUARD;
}
static inline void gb_check(const void *p, size_t n, const char *what, int rank) {
  const unsigned char *b = (const unsigned char *)p - GUARD;
  for (size_t i = 0; i < GUARD; i++)
    CHECK(b[i] == 0xA5 && b[GUARD + n + i] == 0xA5, "rank %d: write outside %s (%zu bytes)", rank, what, n);
}
static inline void gb_free(void *p) {
  if (p) free((unsigned char *)p - GUARD);
}

static inline uint64_t rng_next(uint64_t *st) { /* splitmix64 */
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

static inline void add_region(simrank *x, const void *p, size_t n, int writable) {
  if (!p || !n) return;
  CHECK(x->nreg < 6, "too many regions");
  x->reg[x->nreg++] = (region){(uintptr_t)p, (uintptr_t)p + n, writable};
}

static inline void check_range(const simrank *x, int rank, size_t step, const void *p, size_t n, int write) {
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  for (int i = 0; i < x->nreg; i++)
    if (lo >= x->reg[i].lo && hi <= x->reg[i].hi) {
      CHECK(!write || x->reg[i].writable, "rank %d step %zu writes into read-only input", rank, step);
      return;
    }
  FAIL("rank %d step %zu: %zu bytes at %p are outside its buffers and scratch", rank, step, n, p);
}

static inline int overlap(const void *a, size_t na, const void *b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

/* Static checks of one rank's schedule. */
static inline void validate(simrank *x, int rank, int p, size_t es) {
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
static inline void post_round(simrank *x, int i, int p, pairq *q, size_t first, size_t last) {
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
static inline int step_done(const simrank *x, int i, int p, const pairq *q, size_t k) {
  const wf_step *st = &x->s.steps[k];
  if (st->kind == WF_STEP_SEND) return x->idx[k] < q[i * p + st->peer].nrecv;
  if (st->kind == WF_STEP_RECV) return x->idx[k] < q[st->peer * p + i].n;
  return 1;
}

/* Runs the schedules of p ranks together; fails on deadlock or mismatch. */
static inline void simulate(simrank *R, int p, size_t es) {
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
static inline void build(simrank *R, int i, const wf_coll_args *a, const char *algo) {
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
static inline void free_scheds(simrank *R, int p) {
  for (int i = 0; i < p; i++) wf_sched_free(&R[i].s);
}

/* ------------------------------------------------------------ values and references */
typedef struct dtop {
  weft_dtype dt;
  weft_reduce_op op;
  size_t es;
  const char *name;
} dtop;

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
static inline void ref_combine(const dtop *d, void *acc, const void *x, size_t n) {
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

/* ------------------------------------------------------------ per-rank count patterns */
enum { PAT_ZERO, PAT_ONE, PAT_SEVEN, PAT_UNEVEN, PAT_LAST_ONLY, PAT_FEW, PAT_SPLIT1000, PAT_SPLIT_BIG, PAT_N };
static inline size_t pattern(int pat, int i, int p) {
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
static inline size_t layout(const size_t *counts, size_t *displs, int p, int gaps) {
  size_t off = 0;
  for (int i = 0; i < p; i++) {
    off += gaps ? (size_t)(i % 2) : 0;
    displs[i] = off;
    off += counts[i];
  }
  return off;
}

/* Checks an allgather simulated on p ranks and frees its buffers: every
 * rank's output holds each rank's block (orig[j]) at displs[j] and nothing
 * in the gaps (0xCD), inputs (when not aliased into out) are unchanged, no
 * guard byte was touched. */
static inline void sim_check_allgather(void **in, void **out, void **orig, const size_t *counts, const size_t *displs,
                                   int p, size_t es, size_t total, int alias) {
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
}

/* After a simulated allreduce: every rank's buf holds the same bytes and no
 * guard byte was touched; frees every buffer but rank 0's, which is returned. */
static inline void *same_results_keep0(void **buf, int p, size_t bytes) {
  for (int i = 0; i < p; i++) {
    gb_check(buf[i], bytes, "buf", i);
    CHECK(!memcmp(buf[i], buf[0], bytes), "rank %d's result differs from rank 0's", i);
  }
  for (int i = 1; i < p; i++) gb_free(buf[i]);
  return buf[0];
}

/* The algorithm the registry picks for a (a schedule is built and freed). */
static inline const char *chosen_algo(wf_coll_args *a) {
  wf_sched s;
  wf_sched_init(&s, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, NULL, &s, &chosen);
  CHECK(st == WEFT_OK, "wf_algo_build -> %s (%s)", weft_status_string(st), wf_err_msg());
  wf_sched_free(&s);
  return chosen;
}

/* The tests have one thread, so TSan can find nothing in them that the
 * plain and ASan runs miss; its ~100 MB/s on large buffers would only cost
 * time, so they run fewer large cases under it. */
#if defined(__SANITIZE_THREAD__) /* gcc */
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang */
#define TEST_TSAN 1
#endif
#endif

#endif
