/* test_algo_order.c - the canonical reduction order of the direct
 * algorithms, in the schedule simulator (algo_sim.h).
 *
 * Requirement: fusion preserves every result bit for bit against unfused
 * runs, with any float data and any world size. Float reduction is not
 * associative, so that needs one fixed order per element whatever the
 * size, position, segment size and fusion: the left fold in rank order,
 * ((x_0 op x_1) op x_2) ... op x_{p-1}. For world sizes 1..8, float32 and
 * float64 values of mixed magnitudes (so that other orders give other
 * bits), random counts and segment sizes from 1 byte to 1 MiB, this test
 * checks:
 *  - allreduce direct equals a left fold computed here with plain loops,
 *    bit for bit at every position, on every rank;
 *  - one allreduce of k tensors concatenated (as the coordinator fuses
 *    them) equals the k separate allreduces bit for bit, with the automatic
 *    choice (sizes on both sides of the old rd/ring threshold) and with
 *    direct forced, under different segment sizes;
 *  - reducescatter direct equals the left fold with uneven counts,
 *    including 0, and gaps between the blocks;
 *  - the data do expose the order: ring and rd differ from the left fold,
 *    and ring fused differs from ring unfused (else the checks above could
 *    not fail);
 *  - the schedule's shape: 2 rounds for small tensors, nsegs+1 rounds for
 *    large ones, scratch of at most (p-1) segments, bounded for many ranks,
 *    and (p-1)/p of the data sent per rank and phase. */
#include "algo_sim.h"

static const dtop k_f32sum = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"};
static const dtop k_f64sum = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "float64 sum"};
static const dtop k_others[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, 4, "float32 prod"}, {WEFT_DTYPE_FLOAT64, WEFT_OP_AVERAGE, 8, "float64 avg"},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, 4, "float32 max"},      {WEFT_DTYPE_FLOAT64, WEFT_OP_MIN, 8, "float64 min"},
    {WEFT_DTYPE_INT32, WEFT_OP_SUM, 4, "int32 sum"},
};
#define NOTHERS (sizeof k_others / sizeof k_others[0])
/* segment sizes in bytes: one element, odd element counts, 1 MiB, whole blocks */
static const size_t k_segs[] = {1, 12, 1004, (size_t)1 << 20, 0};
#define NSEGS (sizeof k_segs / sizeof k_segs[0])

/* A value of mixed magnitude: random sign and full mantissa, exponents over
 * a wide range, so sums in different orders round differently. Products
 * get a narrow range so that p factors neither overflow nor vanish. No
 * zeros, NaNs or infinities: the reference's plain comparisons and the
 * kernels agree on everything else. Integers: any bits. */
static void gen_mixed(const dtop *d, uint64_t *st, void *out) {
  uint64_t r = rng_next(st);
  int prod = d->op == WEFT_OP_PRODUCT;
  int e = prod ? (int)(r % 9) - 4 : (int)(r % 49) - 24;
  double m = 1.0 + (double)(r >> 11) / 9007199254740992.0; /* [1, 2), 53 random bits */
  double v = ldexp((r >> 8 & 1) ? -m : m, d->dt == WEFT_DTYPE_FLOAT64 && !prod ? 2 * e : e);
  if (d->dt == WEFT_DTYPE_FLOAT32) {
    float f = (float)v;
    memcpy(out, &f, 4);
  } else if (d->dt == WEFT_DTYPE_FLOAT64) {
    memcpy(out, &v, 8);
  } else {
    memcpy(out, &r, d->es);
  }
}

/* p input buffers of count elements each, rank-specific mixed values. */
static void make_inputs(const dtop *d, int p, size_t count, uint64_t seed, void **x) {
  uint64_t st = seed;
  for (int i = 0; i < p; i++) {
    x[i] = gb_alloc(count * d->es, 0);
    for (size_t k = 0; k < count; k++) gen_mixed(d, &st, (char *)x[i] + k * d->es);
  }
}
static void free_all(void **x, int p) {
  for (int i = 0; i < p; i++) gb_free(x[i]);
}

/* The canonical order, by plain loops: acc = x_0; acc = acc op x_i for
 * i = 1..p-1, over n elements at element offset off of every input. */
static void *left_fold(const dtop *d, void *const *x, int p, size_t off, size_t n) {
  void *ref = gb_alloc(n * d->es, 0);
  memcpy(ref, (const char *)x[0] + off * d->es, n * d->es);
  for (int i = 1; i < p; i++) ref_combine(d, ref, (const char *)x[i] + off * d->es, n);
  return ref;
}

/* Index of the first element where a and b differ bitwise, or n. */
static size_t first_diff(const void *a, const void *b, size_t n, size_t es) {
  for (size_t k = 0; k < n; k++)
    if (memcmp((const char *)a + k * es, (const char *)b + k * es, es)) return k;
  return n;
}

/* Fails naming the element if got differs from want anywhere. */
static void expect_same(const dtop *d, const void *got, const void *want, size_t n, const char *what) {
  size_t k = first_diff(got, want, n, d->es);
  if (k == n) return;
  double g = 0, w = 0;
  if (d->dt == WEFT_DTYPE_FLOAT32) {
    float a, b;
    memcpy(&a, (const char *)got + 4 * k, 4);
    memcpy(&b, (const char *)want + 4 * k, 4);
    g = a;
    w = b;
  } else if (d->dt == WEFT_DTYPE_FLOAT64) {
    memcpy(&g, (const char *)got + 8 * k, 8);
    memcpy(&w, (const char *)want + 8 * k, 8);
  }
  FAIL("%s: element %zu of %zu differs: %.17g, expected %.17g", what, k, n, g, w);
}

/* Allreduce of the inputs x (count elements per rank) with algo (NULL:
 * automatic); checks guards and that every rank has the same bits.
 * Returns rank 0's result (gb_free it). */
static void *sim_allreduce(const char *algo, int p, const dtop *d, size_t count, size_t seg, void *const *x) {
  simrank R[MAXP];
  void *buf[MAXP];
  size_t bytes = count * d->es;
  for (int i = 0; i < p; i++) {
    buf[i] = gb_alloc(bytes, 0);
    memcpy(buf[i], x[i], bytes);
    wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = d->dt, .op = d->op, .elem_size = d->es, .rank = i,
                      .size = p, .buf = buf[i], .count = count, .segment_bytes = seg};
    build(R, i, &a, algo);
    add_region(&R[i], buf[i], bytes, 1);
  }
  simulate(R, p, d->es);
  free_scheds(R, p);
  return same_results_keep0(buf, p, bytes);
}

/* ------------------------------------------------------------ allreduce = left fold */
static void check_allreduce(int p, const dtop *d, size_t count, size_t seg, uint64_t seed) {
  snprintf(g_ctx, sizeof g_ctx, "allreduce direct p=%d %s count=%zu seg=%zu", p, d->name, count, seg);
  void *x[MAXP];
  make_inputs(d, p, count, seed, x);
  void *got = sim_allreduce("direct", p, d, count, seg, x);
  void *ref = left_fold(d, x, p, 0, count);
  expect_same(d, got, ref, count, "direct vs left fold");
  gb_free(got);
  gb_free(ref);
  free_all(x, p);
}

/* The data expose the order: on p >= 3 ranks ring (each block folded from
 * a different rank) and, where it folds as a tree, rd give other bits than
 * the left fold somewhere, so comparing with the left fold can fail. On 2
 * ranks x0 + x1 == x1 + x0, and rd on 3 ranks happens to be a left fold. */
static void check_sensitive(int p, const dtop *d, size_t count) {
  snprintf(g_ctx, sizeof g_ctx, "order sensitivity p=%d %s count=%zu", p, d->name, count);
  void *x[MAXP];
  make_inputs(d, p, count, 99 + (uint64_t)p, x);
  void *ref = left_fold(d, x, p, 0, count);
  void *ring = sim_allreduce("ring", p, d, count, 1004, x);
  CHECK(first_diff(ring, ref, count, d->es) < count, "ring gave the left fold's bits everywhere: data too tame");
  if (p >= 4) {
    void *rd = sim_allreduce("rd", p, d, count, 8, x);
    CHECK(first_diff(rd, ref, count, d->es) < count, "rd gave the left fold's bits everywhere: data too tame");
    gb_free(rd);
  }
  gb_free(ring);
  gb_free(ref);
  free_all(x, p);
}

/* ------------------------------------------------------------ fusion invariance */
/* k tensors with counts cnt[]: one allreduce of their concatenation (what
 * the engine runs for a fused response) against k separate ones, the
 * separate ones with varying segment sizes. algo NULL: the automatic
 * choice. Returns 1 if every bit matched; fails on a mismatch if strict. */
static int fused_matches(const char *algo, int p, const dtop *d, const size_t *cnt, int k, size_t fseg, int strict,
                         uint64_t seed) {
  size_t total = 0, off = 0;
  for (int t = 0; t < k; t++) total += cnt[t];
  void *x[MAXP];
  make_inputs(d, p, total, seed, x);
  void *fused = sim_allreduce(algo, p, d, total, fseg, x);
  int same = 1;
  for (int t = 0; t < k; t++) {
    void *part[MAXP];
    for (int i = 0; i < p; i++) {
      part[i] = gb_alloc(cnt[t] * d->es, 0);
      memcpy(part[i], (char *)x[i] + off * d->es, cnt[t] * d->es);
    }
    /* another segment size per tensor; 1004 bytes for big ones, whose
     * 1-byte segments would cost 10^4 simulated rounds */
    size_t seg = cnt[t] > 2000 ? 1004 : k_segs[((size_t)t + seed) % NSEGS];
    void *one = sim_allreduce(algo, p, d, cnt[t], seg, part);
    char what[96];
    snprintf(what, sizeof what, "tensor %d of %d (%zu elements at %zu) fused vs alone", t, k, cnt[t], off);
    if (strict) expect_same(d, (char *)fused + off * d->es, one, cnt[t], what);
    same &= first_diff((char *)fused + off * d->es, one, cnt[t], d->es) == cnt[t];
    if (strict && (!algo || !strcmp(algo, "direct"))) { /* and both are the canonical order */
      void *ref = left_fold(d, x, p, off, cnt[t]);
      expect_same(d, one, ref, cnt[t], "alone vs left fold");
      gb_free(ref);
    }
    gb_free(one);
    free_all(part, p);
    off += cnt[t];
  }
  gb_free(fused);
  free_all(x, p);
  return same;
}

static void test_fusion(int p, uint64_t *st) {
  const dtop *ds[] = {&k_f32sum, &k_f64sum, &k_others[1]};
  for (int rep = 0; rep < 6; rep++) {
    size_t cnt[6];
    int k = 2 + (int)(rng_next(st) % 5);
    for (int t = 0; t < k; t++) {
      uint64_t r = rng_next(st);
      cnt[t] = r % 4 == 0 ? r / 4 % 3 : (size_t)(r / 4 % 700); /* 0, 1 and 2 among them */
    }
    if (rep == 0) { /* 64 KiB alone, more fused: once rd alone, ring fused */
      cnt[0] = 16384;
      cnt[1] += 1;
    }
    const dtop *d = ds[rep % 3];
    size_t fseg = k_segs[(size_t)(rep + 3) % NSEGS]; /* 1 MiB with the big tensor, then 0, 1, 12, ... */
    snprintf(g_ctx, sizeof g_ctx, "fusion %s p=%d %s k=%d seg=%zu", rep % 2 ? "direct" : "auto", p, d->name, k, fseg);
    fused_matches(rep % 2 ? "direct" : NULL, p, d, cnt, k, fseg, 1, (uint64_t)rep * 1000 + (uint64_t)p);
  }
  if (p < 3) return;
  /* the same check does catch an order that depends on the position */
  snprintf(g_ctx, sizeof g_ctx, "fusion sensitivity ring p=%d", p);
  size_t cnt[3] = {333, 1000, 517};
  CHECK(!fused_matches("ring", p, &k_f32sum, cnt, 3, 1004, 0, 7 + (uint64_t)p),
        "ring fused matched ring unfused everywhere: the fusion check could not fail");
}

/* ------------------------------------------------------------ reducescatter = left fold */
static void check_reducescatter(int p, const dtop *d, const size_t *counts, int gaps, size_t seg, uint64_t seed) {
  snprintf(g_ctx, sizeof g_ctx, "reducescatter direct p=%d %s gaps=%d seg=%zu counts=%zu,%zu,..", p, d->name, gaps,
           seg, counts[0], p > 1 ? counts[1] : 0);
  simrank R[MAXP];
  size_t displs[MAXP];
  void *in[MAXP], *orig[MAXP], *out[MAXP];
  size_t total = layout(counts, displs, p, gaps), es = d->es;
  make_inputs(d, p, total, seed, in);
  for (int i = 0; i < p; i++) {
    orig[i] = gb_alloc(total * es, 0);
    memcpy(orig[i], in[i], total * es);
    out[i] = gb_alloc(counts[i] * es, 0xCD);
    wf_coll_args a = {.coll = WF_COLL_REDUCESCATTER, .dtype = d->dt, .op = d->op, .elem_size = es, .rank = i,
                      .size = p, .in = in[i], .out = out[i], .counts = counts, .displs = displs,
                      .segment_bytes = seg};
    build(R, i, &a, "direct");
    add_region(&R[i], in[i], total * es, 0);
    add_region(&R[i], out[i], counts[i] * es, 1);
  }
  simulate(R, p, es);
  for (int i = 0; i < p; i++) {
    gb_check(in[i], total * es, "in", i);
    gb_check(out[i], counts[i] * es, "out", i);
    CHECK(!memcmp(in[i], orig[i], total * es), "rank %d's read-only input changed", i);
    void *ref = left_fold(d, orig, p, displs[i], counts[i]);
    char what[64];
    snprintf(what, sizeof what, "rank %d's block vs left fold", i);
    expect_same(d, out[i], ref, counts[i], what);
    gb_free(ref);
  }
  free_all(in, p);
  free_all(orig, p);
  free_all(out, p);
  free_scheds(R, p);
}

static void test_reducescatter(int p, uint64_t *st) {
  size_t counts[MAXP];
  for (int pat = 0; pat < PAT_SPLIT_BIG; pat++) {
    for (int i = 0; i < p; i++) counts[i] = pattern(pat, i, p);
    for (size_t s = 0; s < NSEGS; s++) check_reducescatter(p, &k_f32sum, counts, (int)s % 2, k_segs[s], rng_next(st));
    check_reducescatter(p, &k_f64sum, counts, 1, k_segs[pat % 3], rng_next(st));
    check_reducescatter(p, &k_others[(size_t)pat % NOTHERS], counts, 0, k_segs[pat % 3], rng_next(st));
  }
  for (int rep = 0; rep < 4; rep++) { /* random counts, a third of them 0 */
    for (int i = 0; i < p; i++) {
      uint64_t r = rng_next(st);
      counts[i] = r % 3 == 0 ? 0 : (size_t)(r / 3 % 900);
    }
    check_reducescatter(p, rep % 2 ? &k_f64sum : &k_f32sum, counts, rep % 2, k_segs[(size_t)rep % NSEGS],
                        rng_next(st));
  }
}

/* ------------------------------------------------------------ schedule shape */
/* Builds rank r's direct schedule (never run: buf is not touched). */
static void shape(wf_sched *s, wf_coll_args *a, const char *what) {
  wf_sched_init(s, a->dtype, a->op);
  const char *chosen = NULL;
  weft_status st = wf_algo_build(a, "direct", s, &chosen);
  CHECK(st == WEFT_OK && chosen && !strcmp(chosen, "direct"), "%s: wf_algo_build -> %s (%s)", what,
        weft_status_string(st), wf_err_msg());
}
static size_t sent_bytes(const wf_sched *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->nsteps; i++)
    if (s->steps[i].kind == WF_STEP_SEND) n += s->steps[i].bytes;
  return n;
}

static void test_shape(void) {
  snprintf(g_ctx, sizeof g_ctx, "direct schedule shape");
  size_t big = (size_t)16 << 20; /* 64 MiB of floats */
  float *buf = malloc(big * sizeof(float)); /* never touched: schedules are only built */
  CHECK(buf, "out of memory");
  wf_sched s;
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 2, .size = 4, .buf = buf, .count = 10, .segment_bytes = 1 << 20};
  shape(&s, &a, "small");
  CHECK(s.nrounds == 2, "10 floats on 4 ranks: %zu rounds, want 2", s.nrounds);
  wf_sched_free(&s);
  a.count = 4000; /* blocks of 1000 floats in segments of 251: 4 segments */
  a.segment_bytes = 1004;
  shape(&s, &a, "segmented");
  CHECK(s.nrounds == 5, "4 segments per block: %zu rounds, want 5", s.nrounds);
  CHECK(s.scratch_bytes <= 3 * 1004, "scratch %zu bytes, more than 3 segments", s.scratch_bytes);
  wf_sched_free(&s);
  /* large tensor: scratch (p-1) segments, not the tensor; (p-1)/p of the
   * data sent per phase */
  a.size = 8;
  a.rank = 5;
  a.count = big;
  a.segment_bytes = 1 << 20;
  shape(&s, &a, "large");
  CHECK(s.scratch_bytes <= (size_t)7 << 20, "scratch %zu bytes for 7 x 1 MiB segments", s.scratch_bytes);
  CHECK(sent_bytes(&s) == 2 * 7 * (big / 8) * 4, "sent %zu bytes, want 2 x 7/8 of %zu", sent_bytes(&s), big * 4);
  wf_sched_free(&s);
  /* many ranks: the segment shrinks to keep the scratch bounded */
  a.size = 300;
  a.rank = 299;
  shape(&s, &a, "300 ranks");
  CHECK(s.scratch_bytes <= (size_t)64 << 20, "300 ranks: scratch %zu bytes", s.scratch_bytes);
  wf_sched_free(&s);

  size_t counts[4] = {big / 4, 0, big / 4, big / 2 - 5}, displs[4] = {0, big / 4, big / 4, big / 2};
  wf_coll_args r = {.coll = WF_COLL_REDUCESCATTER, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 2, .size = 4, .in = buf, .out = buf, .counts = counts, .displs = displs,
                    .segment_bytes = 1 << 20};
  shape(&s, &r, "reducescatter large");
  CHECK(s.scratch_bytes <= (size_t)3 << 20, "reducescatter: scratch %zu bytes for 3 x 1 MiB", s.scratch_bytes);
  size_t others = counts[0] + counts[1] + counts[3]; /* our pieces of the other blocks */
  CHECK(sent_bytes(&s) == others * 4, "reducescatter: sent %zu bytes, want %zu", sent_bytes(&s), others * 4);
  wf_sched_free(&s);
  free(buf);
}

/* ------------------------------------------------------------ main */
static void test_allreduce(int p, uint64_t *st) {
  size_t counts[] = {0, 1, (size_t)p - 1, (size_t)p + 1, 0, 0};
  counts[4] = (size_t)(rng_next(st) % 50);
  counts[5] = 1000 + (size_t)(rng_next(st) % 1000);
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    for (size_t s = 0; s < NSEGS; s++) {
      check_allreduce(p, &k_f32sum, counts[c], k_segs[s], rng_next(st));
      check_allreduce(p, &k_f64sum, counts[c], k_segs[s], rng_next(st));
    }
    for (size_t o = 0; o < NOTHERS; o++)
      check_allreduce(p, &k_others[o], counts[c], k_segs[(c + o) % NSEGS], rng_next(st));
  }
#ifdef TEST_TSAN
  if (p != 8) return; /* one thread: TSan adds nothing but time on big buffers */
#endif
  if (p == 3 || p == 8) {
    check_allreduce(p, &k_f32sum, 100003, 1004, rng_next(st));
    check_allreduce(p, &k_f64sum, 100003, (size_t)1 << 20, rng_next(st));
  }
}

int main(void) {
  test_shape();
  for (int p = 1; p <= MAXP; p++) {
    /* a random stream per test and size: the same cases whatever ran before */
    uint64_t st[3] = {1000003 * (uint64_t)p, 1000003 * (uint64_t)p + 1, 1000003 * (uint64_t)p + 2};
    test_allreduce(p, &st[0]);
    if (p >= 3) check_sensitive(p, &k_f32sum, 3000);
    test_fusion(p, &st[1]);
    test_reducescatter(p, &st[2]);
  }
  printf("test_algo_order: OK (%zu simulations)\n", g_sims);
  return 0;
}
