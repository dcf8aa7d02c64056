/* test_algo_cma.c - the cross-memory attach algorithms (the *_cma.c files of src/algo) and
 * steps (algo/sched_cma.c) in one process: process_vm_readv on this
 * process's own pid is a real cross-memory transfer, so n simulated ranks,
 * each with its own buffers, run the real schedules here.
 *
 *  - the steps: read, the chunked fold (every chunk size, sources local or
 *    "remote", dst aliasing a source) against chains of
 *    REDUCE steps, bit for bit; failures (a pid that does not exist, a bad
 *    address) give a status and a message naming the rank and WEFT_CMA=0;
 *  - every collective on 1..6 ranks, many counts, against plain-loop
 *    references; allreduce and reducescatter bit for bit against "direct"
 *    run in the schedule simulator (algo_sim.h);
 *  - the registry: cma claims large messages on one host with CMA, never
 *    without topology, across hosts or with CMA off, and never by cost.
 * The simulator here delivers sends eagerly and runs the ranks in several
 * orders (greedy, one round at a time, reversed), so a rank may run far
 * ahead of its peers: reads and writes of a peer's buffer must still be
 * ordered by the schedules' messages alone. */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algo_sim.h"
#include "reduce/reduce.h"

static int g_pids[MAXP];
static int g_hosts[MAXP];
static wf_topo g_topo;

/* ------------------------------------------------------------ simulator */
typedef struct cq {
  unsigned char **b;
  size_t *n;
  size_t len, cap, head;
} cq;

static void cq_push(cq *q, const void *p, size_t n) {
  if (q->len == q->cap) {
    q->cap = q->cap ? 2 * q->cap : 16;
    q->b = realloc(q->b, q->cap * sizeof *q->b);
    q->n = realloc(q->n, q->cap * sizeof *q->n);
    CHECK(q->b && q->n, "out of memory");
  }
  q->b[q->len] = malloc(n);
  CHECK(q->b[q->len], "out of memory");
  memcpy(q->b[q->len], p, n);
  q->n[q->len++] = n;
}

/* Runs p schedules; order 0: each rank as far as it can, 1: one round per
 * rank per pass, 2: as 0 from the last rank down. */
static void run_scheds(wf_sched *S, int p, int order) {
  size_t round[MAXP] = {0};
  int posted[MAXP] = {0};
  cq q[MAXP * MAXP];
  memset(q, 0, sizeof q);
  for (;;) {
    int progress = 0, done = 0;
    for (int k = 0; k < p; k++) {
      int i = order == 2 ? p - 1 - k : k;
      const wf_sched *s = &S[i];
      while (round[i] < s->nrounds) {
        size_t first = round[i] ? s->round_end[round[i] - 1] : 0, last = s->round_end[round[i]];
        if (!posted[i]) {
          for (size_t t = first; t < last; t++)
            if (s->steps[t].kind == WF_STEP_SEND) {
              CHECK(s->steps[t].peer != i && s->steps[t].peer >= 0 && s->steps[t].peer < p, "bad send peer");
              cq_push(&q[i * p + s->steps[t].peer], s->steps[t].src, s->steps[t].bytes);
            }
          posted[i] = progress = 1;
        }
        size_t need[MAXP] = {0};
        int ok = 1;
        for (size_t t = first; t < last; t++)
          if (s->steps[t].kind == WF_STEP_RECV) need[s->steps[t].peer]++;
        for (int j = 0; j < p; j++) ok &= q[j * p + i].len - q[j * p + i].head >= need[j];
        if (!ok) break;
        for (size_t t = first; t < last; t++) {
          const wf_step *st = &s->steps[t];
          if (st->kind != WF_STEP_RECV) continue;
          cq *c = &q[st->peer * p + i];
          CHECK(c->n[c->head] == st->bytes, "rank %d: message from %d has %zu bytes, receive wants %zu", i, st->peer,
                c->n[c->head], st->bytes);
          memcpy(st->dst, c->b[c->head], st->bytes);
          free(c->b[c->head++]);
        }
        weft_status rc = wf_sched_run_local(s, first, last);
        CHECK(rc == WEFT_OK, "rank %d round %zu: %s: %s", i, round[i], weft_status_string(rc), wf_err_msg());
        round[i]++;
        posted[i] = 0;
        progress = 1;
        if (order == 1) break;
      }
      done += round[i] == s->nrounds;
    }
    if (done == p) break;
    CHECK(progress, "deadlock");
  }
  for (int j = 0; j < p * p; j++) {
    CHECK(q[j].head == q[j].len, "pair %d -> %d: %zu messages never received", j / p, j % p, q[j].len - q[j].head);
    free(q[j].b);
    free(q[j].n);
  }
  g_sims++;
}

static void build_cma(wf_sched *S, const wf_coll_args *a, const char *forced, const char *want) {
  wf_sched_init(S, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, forced, S, &chosen);
  CHECK(st == WEFT_OK, "rank %d: wf_algo_build -> %s (%s)", a->rank, weft_status_string(st), wf_err_msg());
  CHECK(chosen && !strcmp(chosen, want), "rank %d chose %s, wanted %s", a->rank, chosen ? chosen : "NULL", want);
}

static void fill_random(const dtop *d, void *buf, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next(&seed);
    if (d->dt == WEFT_DTYPE_FLOAT32) {
      float v = (float)(((double)(r >> 11) / 9007199254740992.0 * 2 - 1) * ldexp(1.0, (int)(r % 20) - 10));
      memcpy((char *)buf + i * 4, &v, 4);
    } else if (d->dt == WEFT_DTYPE_FLOAT64) {
      double v = ldexp((r & 1) ? -1.0 : 1.0, (int)((r >> 1) % 7) - 3) * (1.0 + (double)(r >> 40) / 16777216.0);
      memcpy((char *)buf + i * 8, &v, 8);
    } else {
      memcpy((char *)buf + i * d->es, &r, d->es);
    }
  }
}

/* ------------------------------------------------------------ steps */
static void test_steps(void) {
  snprintf(g_ctx, sizeof g_ctx, "cma steps");
  const size_t n = 1000;
  float x[4][1000], want[1000], dst[1000];
  uint64_t seed = 5;
  const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"};
  for (int k = 0; k < 4; k++) fill_random(&f32, x[k], n, seed + (uint64_t)k);
  uint64_t addr[4];
  for (int k = 0; k < 4; k++) addr[k] = (uint64_t)(uintptr_t)x[k];
  int me = (int)getpid();
  memcpy(want, x[0], sizeof want);
  for (int k = 1; k < 4; k++) wf_reduce(WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, want, x[k], n);
  const size_t chunks[] = {1, 7, 64, 999, 1000, 5000};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
    for (int local = -1; local < 4; local++) { /* which source is local (-1: none) */
      snprintf(g_ctx, sizeof g_ctx, "cma fold chunk %zu local %d", chunks[c], local);
      wf_sched s;
      wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
      float *tmp = wf_sched_scratch(&s, 2 * chunks[c] * 4);
      wf_mem src[4];
      for (int k = 0; k < 4; k++) src[k] = k == local ? wf_mem_local(x[k]) : wf_mem_peer(k, me, &addr[k], 0);
      memset(dst, 0, sizeof dst);
      wf_sched_cma_fold(&s, dst, src, 4, n, tmp, chunks[c]);
      CHECK(wf_sched_finish(&s) == WEFT_OK && wf_sched_run_local(&s, 0, s.nsteps) == WEFT_OK, "fold: %s",
            wf_err_msg());
      CHECK(!memcmp(dst, want, sizeof want), "fold differs from the chain of REDUCE steps");
      wf_sched_free(&s);
    }
  /* dst aliasing the first and the last (local) source: in-place folds */
  for (int at = 0; at < 4; at += 3) {
    snprintf(g_ctx, sizeof g_ctx, "cma fold into source %d", at);
    float y[4][1000];
    memcpy(y, x, sizeof y);
    uint64_t ya[4];
    for (int k = 0; k < 4; k++) ya[k] = (uint64_t)(uintptr_t)y[k];
    wf_sched s;
    wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
    void *tmp = wf_sched_scratch(&s, 2 * 100 * 4);
    wf_mem src[4];
    for (int k = 0; k < 4; k++) src[k] = k == at ? wf_mem_local(y[k]) : wf_mem_peer(k, me, &ya[k], 0);
    wf_sched_cma_fold(&s, y[at], src, 4, n, tmp, 100);
    CHECK(wf_sched_run_local(&s, 0, s.nsteps) == WEFT_OK, "fold: %s", wf_err_msg());
    CHECK(!memcmp(y[at], want, sizeof want), "in-place fold differs");
    wf_sched_free(&s);
  }
  /* a one-source fold is a copy; reads at offsets */
  snprintf(g_ctx, sizeof g_ctx, "cma read");
  wf_sched s;
  wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
  memset(dst, 0, sizeof dst);
  wf_sched_cma_read(&s, dst, wf_mem_peer(1, me, &addr[1], 40), 400);
  wf_mem one = wf_mem_peer(3, me, &addr[3], 8);
  wf_sched_cma_fold(&s, dst + 100, &one, 1, 500, NULL, 77);
  wf_sched_cma_read(&s, dst, wf_mem_peer(1, me, &addr[1], 0), 0); /* dropped */
  CHECK(s.nsteps == 2, "a zero-byte CMA step was kept");
  CHECK(wf_sched_run_local(&s, 0, s.nsteps) == WEFT_OK, "read: %s", wf_err_msg());
  CHECK(!memcmp(dst, x[1] + 10, 400) && !memcmp(dst + 100, x[3] + 2, 2000), "reads moved wrong bytes");
  wf_sched_free(&s);

  /* failures: a process that no longer exists, an address not mapped */
  snprintf(g_ctx, sizeof g_ctx, "cma failures");
  pid_t child = fork();
  CHECK(child >= 0, "fork: %s", strerror(errno));
  if (child == 0) _exit(0);
  CHECK(waitpid(child, NULL, 0) == child, "waitpid");
  wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
  wf_sched_cma_read(&s, dst, wf_mem_peer(3, (int)child, &addr[1], 0), 400);
  weft_status rc = wf_sched_run_local(&s, 0, s.nsteps);
  CHECK(rc == WEFT_ERR_PEER_LOST && strstr(wf_err_msg(), "rank 3") && strstr(wf_err_msg(), "WEFT_CMA=0"),
        "reading a dead pid: %s: %s", weft_status_string(rc), wf_err_msg());
  wf_sched_free(&s);
  uint64_t bad = 4096;
  wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
  wf_sched_cma_read(&s, dst, wf_mem_peer(2, me, &bad, 0), 400);
  rc = wf_sched_run_local(&s, 0, s.nsteps);
  CHECK(rc == WEFT_ERR_SYSTEM && strstr(wf_err_msg(), "rank 2") && strstr(wf_err_msg(), strerror(EFAULT)),
        "reading an unmapped address: %s: %s", weft_status_string(rc), wf_err_msg());
  wf_sched_free(&s);
}

/* ------------------------------------------------------------ collectives */
static wf_coll_args args_of(wf_coll c, const dtop *d, int i, int p) {
  return (wf_coll_args){.coll = c, .dtype = d->dt, .op = d->op, .elem_size = d->es, .rank = i, .size = p,
                        .segment_bytes = 1 << 16, .topo = &g_topo};
}

/* allreduce: cma bits == direct bits == the plain left fold. */
static void test_allreduce(int p, const dtop *d, size_t n, int order) {
  snprintf(g_ctx, sizeof g_ctx, "allreduce cma p=%d %s n=%zu order %d", p, d->name, n, order);
  size_t es = d->es;
  void *in[MAXP], *cm[MAXP], *dr[MAXP];
  wf_sched S[MAXP];
  simrank R[MAXP];
  for (int i = 0; i < p; i++) {
    in[i] = gb_alloc(n * es, 0);
    fill_random(d, in[i], n, 1000 * (uint64_t)i + n);
    cm[i] = gb_alloc(n * es, 0);
    dr[i] = gb_alloc(n * es, 0);
    memcpy(cm[i], in[i], n * es);
    memcpy(dr[i], in[i], n * es);
  }
  for (int i = 0; i < p; i++) {
    wf_coll_args a = args_of(WF_COLL_ALLREDUCE, d, i, p);
    a.buf = cm[i];
    a.count = n;
    build_cma(&S[i], &a, "cma", "cma");
    a.buf = dr[i];
    a.topo = NULL;
    build(R, i, &a, "direct");
    add_region(&R[i], dr[i], n * es, 1);
  }
  run_scheds(S, p, order);
  simulate(R, p, es);
  void *ref = gb_alloc(n * es, 0);
  memcpy(ref, in[0], n * es);
  for (int i = 1; i < p; i++) ref_combine(d, ref, in[i], n);
  for (int i = 0; i < p; i++) {
    gb_check(cm[i], n * es, "buf", i);
    CHECK(!memcmp(dr[i], ref, n * es), "rank %d: direct differs from the left fold", i);
    for (size_t k = 0; k < n * es; k++)
      CHECK(((unsigned char *)cm[i])[k] == ((unsigned char *)ref)[k], "rank %d: byte %zu differs from direct", i, k);
    wf_sched_free(&S[i]);
    gb_free(in[i]);
    gb_free(cm[i]);
    gb_free(dr[i]);
  }
  free_scheds(R, p);
  gb_free(ref);
}

/* reducescatter with uneven counts: cma bits == the plain left fold (the
 * order of direct, checked against it in test_algo_order.c). */
static void test_reducescatter(int p, const dtop *d, size_t base, int order) {
  snprintf(g_ctx, sizeof g_ctx, "reducescatter cma p=%d %s base=%zu order %d", p, d->name, base, order);
  size_t es = d->es, counts[MAXP], displs[MAXP], total = 0;
  for (int i = 0; i < p; i++) {
    counts[i] = i == 1 ? 0 : base + (size_t)i * 3;
    displs[i] = total;
    total += counts[i];
  }
  void *in[MAXP], *orig[MAXP], *out[MAXP];
  wf_sched S[MAXP];
  for (int i = 0; i < p; i++) {
    in[i] = gb_alloc(total * es, 0);
    fill_random(d, in[i], total, 77 * (uint64_t)i + base);
    orig[i] = gb_alloc(total * es, 0);
    memcpy(orig[i], in[i], total * es);
    out[i] = gb_alloc(counts[i] * es, 0xCD);
  }
  for (int i = 0; i < p; i++) {
    wf_coll_args a = args_of(WF_COLL_REDUCESCATTER, d, i, p);
    a.in = in[i];
    a.out = out[i];
    a.counts = counts;
    a.displs = displs;
    build_cma(&S[i], &a, "cma", "cma");
  }
  run_scheds(S, p, order);
  for (int i = 0; i < p; i++) {
    CHECK(!memcmp(in[i], orig[i], total * es), "rank %d's read-only input changed", i);
    gb_check(out[i], counts[i] * es, "out", i);
    void *ref = gb_alloc(counts[i] * es, 0);
    memcpy(ref, (char *)orig[0] + displs[i] * es, counts[i] * es);
    for (int j = 1; j < p; j++) ref_combine(d, ref, (char *)orig[j] + displs[i] * es, counts[i]);
    CHECK(!memcmp(out[i], ref, counts[i] * es), "rank %d's block differs from the left fold", i);
    gb_free(ref);
  }
  for (int i = 0; i < p; i++) {
    wf_sched_free(&S[i]);
    gb_free(in[i]);
    gb_free(orig[i]);
    gb_free(out[i]);
  }
}

/* allgather (uneven, one rank empty, the last rank's input inside its
 * output), broadcast from every root, alltoall with mixed block sizes. */
static void test_moves(int p, size_t base, int order) {
  snprintf(g_ctx, sizeof g_ctx, "allgather cma p=%d base=%zu order %d", p, base, order);
  const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"};
  size_t counts[MAXP], displs[MAXP], total = 0;
  for (int i = 0; i < p; i++) {
    counts[i] = i == 0 && p > 1 ? 0 : base + (size_t)i;
    displs[i] = total;
    total += counts[i];
  }
  unsigned char *in[MAXP], *out[MAXP], *all = gb_alloc(total, 0);
  wf_sched S[MAXP];
  fill_random(&u8, all, total, base);
  for (int i = 0; i < p; i++) {
    out[i] = gb_alloc(total, 0xEE);
    in[i] = i == p - 1 ? out[i] + displs[i] : gb_alloc(counts[i], 0);
    memcpy(in[i], all + displs[i], counts[i]);
  }
  for (int i = 0; i < p; i++) {
    wf_coll_args a = args_of(WF_COLL_ALLGATHER, &u8, i, p);
    a.in = in[i];
    a.out = out[i];
    a.counts = counts;
    a.displs = displs;
    build_cma(&S[i], &a, "cma", "cma");
  }
  run_scheds(S, p, order);
  for (int i = 0; i < p; i++) {
    gb_check(out[i], total, "out", i);
    CHECK(!memcmp(out[i], all, total), "rank %d: allgather output differs", i);
    wf_sched_free(&S[i]);
    if (i != p - 1) gb_free(in[i]);
  }

  for (int root = 0; root < p; root++) {
    snprintf(g_ctx, sizeof g_ctx, "broadcast cma p=%d n=%zu root %d order %d", p, total, root, order);
    for (int i = 0; i < p; i++) {
      memset(out[i], 0xEE, total);
      if (i == root) memcpy(out[i], all, total);
      wf_coll_args a = args_of(WF_COLL_BROADCAST, &u8, i, p);
      a.buf = out[i];
      a.count = total;
      a.root = root;
      build_cma(&S[i], &a, "cma", "cma");
    }
    run_scheds(S, p, order);
    for (int i = 0; i < p; i++) {
      CHECK(!memcmp(out[i], all, total), "rank %d: broadcast output differs", i);
      wf_sched_free(&S[i]);
    }
  }

  /* alltoall: rank i sends rank j sc[i][j] bytes: none, small or large. */
  snprintf(g_ctx, sizeof g_ctx, "alltoall cma p=%d base=%zu order %d", p, base, order);
  size_t sc[MAXP][MAXP], sd[MAXP][MAXP], rc[MAXP][MAXP], rd[MAXP][MAXP], st[MAXP] = {0}, rt[MAXP] = {0};
  for (int i = 0; i < p; i++)
    for (int j = 0; j < p; j++) {
      int kind = (i + 2 * j + (int)base) % 3;
      sc[i][j] = kind == 0 ? 0 : kind == 1 ? 10 + (size_t)i : base + (size_t)j;
    }
  for (int i = 0; i < p; i++)
    for (int j = 0; j < p; j++) {
      sd[i][j] = st[i];
      st[i] += sc[i][j];
      rc[j][i] = sc[i][j];
    }
  for (int j = 0; j < p; j++)
    for (int i = 0; i < p; i++) {
      rd[j][i] = rt[j];
      rt[j] += rc[j][i];
    }
  unsigned char *ain[MAXP], *aout[MAXP];
  for (int i = 0; i < p; i++) {
    ain[i] = gb_alloc(st[i], 0);
    fill_random(&u8, ain[i], st[i], 31 * (uint64_t)i + base);
    aout[i] = gb_alloc(rt[i], 0xEE);
    wf_coll_args a = args_of(WF_COLL_ALLTOALL, &u8, i, p);
    a.in = ain[i];
    a.out = aout[i];
    a.send_counts = sc[i];
    a.send_displs = sd[i];
    a.recv_counts = rc[i];
    a.recv_displs = rd[i];
    build_cma(&S[i], &a, "cma", "cma");
  }
  run_scheds(S, p, order);
  for (int j = 0; j < p; j++) {
    gb_check(aout[j], rt[j], "out", j);
    for (int i = 0; i < p; i++)
      CHECK(!memcmp(aout[j] + rd[j][i], ain[i] + sd[i][j], rc[j][i]), "rank %d: block from %d differs", j, i);
  }
  for (int i = 0; i < p; i++) {
    wf_sched_free(&S[i]);
    gb_free(ain[i]);
    gb_free(aout[i]);
    gb_free(out[i]);
  }
  gb_free(all);
}

/* ------------------------------------------------------------ registry */
static void test_registry(void) {
  snprintf(g_ctx, sizeof g_ctx, "registry");
  size_t big = (size_t)1 << 20;
  float *buf = malloc(big * 4);
  CHECK(buf, "out of memory");
  const dtop f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32"};
  wf_coll_args a = args_of(WF_COLL_ALLREDUCE, &f32, 1, 4);
  a.buf = buf;
  a.count = 65536; /* 256 KiB: the threshold of 4 ranks */
  CHECK(!strcmp(chosen_algo(&a), "cma"), "256 KiB allreduce on one host: not cma");
  a.count = 65535;
  CHECK(!strcmp(chosen_algo(&a), "direct"), "small allreduce: not direct");
  a.size = 2;
  CHECK(!strcmp(chosen_algo(&a), "direct"), "256 KiB allreduce on 2 ranks: not direct");
  a.count = (size_t)1 << 19; /* 2 MiB: the threshold of 2 ranks */
  CHECK(!strcmp(chosen_algo(&a), "cma"), "2 MiB allreduce on 2 ranks: not cma");
  a.count = big;
  wf_topo off = g_topo, two = g_topo;
  off.cma = 0;
  two.nhosts = 2;
  a.topo = &off;
  CHECK(!strcmp(chosen_algo(&a), "direct"), "allreduce with CMA off: not direct");
  a.topo = &two;
  CHECK(strcmp(chosen_algo(&a), "cma"), "allreduce across hosts: cma");
  a.topo = NULL;
  CHECK(!strcmp(chosen_algo(&a), "direct"), "allreduce without topology: not direct");
  a.size = 1;
  a.rank = 0;
  a.topo = &g_topo;
  CHECK(!strcmp(chosen_algo(&a), "direct"), "allreduce of one rank: claimed");
  /* never by cost: a small broadcast stays on tree */
  wf_coll_args b = args_of(WF_COLL_BROADCAST, &f32, 0, 3);
  b.buf = buf;
  b.count = 100;
  CHECK(!strcmp(chosen_algo(&b), "tree"), "small broadcast: %s, not tree", chosen_algo(&b));
  b.count = 16384;
  CHECK(!strcmp(chosen_algo(&b), "cma"), "64 KiB broadcast on 3 ranks: not cma");
  b.size = 2;
  b.count = big;
  CHECK(strcmp(chosen_algo(&b), "cma"), "broadcast on 2 ranks: cma");
  free(buf);
}

int main(void) {
  for (int i = 0; i < MAXP; i++) g_pids[i] = (int)getpid();
  g_topo = (wf_topo){.nhosts = 1, .host_of = g_hosts, .pid_of = g_pids, .cma = 1};
  test_steps();
  test_registry();
  static const dtop k_red[] = {
      {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"},     {WEFT_DTYPE_FLOAT64, WEFT_OP_PRODUCT, 8, "float64 prod"},
      {WEFT_DTYPE_INT32, WEFT_OP_MAX, 4, "int32 max"},         {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8 sum"},
      {WEFT_DTYPE_INT16, WEFT_OP_MIN, 2, "int16 min"},
  };
  const size_t counts[] = {0, 1, 5, 7, 1000, 65537, 200003};
  for (int p = 1; p <= 6; p++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (size_t d = 0; d < sizeof k_red / sizeof k_red[0]; d++) {
        if (counts[k] > 70000 && d > 1) continue; /* large: float32 and float64 only */
        int order = (int)((k + d + (size_t)p) % 3);
        test_allreduce(p, &k_red[d], counts[k], order);
        test_reducescatter(p, &k_red[d], counts[k] / (size_t)p, order);
      }
  const size_t bases[] = {0, 3, 40000, 70001};
  for (int p = 1; p <= 6; p++)
    for (size_t k = 0; k < sizeof bases / sizeof bases[0]; k++)
      for (int order = 0; order < 3; order++) test_moves(p, bases[k], order);
  printf("test_algo_cma: OK (%zu simulations)\n", g_sims);
  return 0;
}
