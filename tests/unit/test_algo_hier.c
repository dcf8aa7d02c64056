/* test_algo_hier.c - the hierarchical algorithms (allreduce, allgather and
 * broadcast "hier") in the schedule simulator (algo_sim.h), for many
 * layouts of 1..8 ranks over 1..4 hosts: contiguous, interleaved
 * ([0,1,0,1]), unequal (3 + 2, one big host and single-rank hosts) and
 * random.
 *
 *  - allreduce equals, bit for bit on every rank, an independent reference
 *    computed here with plain loops in the documented order: per host the
 *    left fold of its ranks in rank order, then the left fold of the host
 *    results in host order; float data of mixed magnitudes (so another
 *    order gives other bits), integer ops with any bits; counts 0, 1, odd,
 *    fewer than the ranks, large; segment sizes from 8 bytes to whole;
 *  - a fused allreduce (tensors packed at offsets) gives every tensor the
 *    same bits as its allreduce alone, with different segment sizes;
 *  - allgather (uneven counts, zeros, gaps, in aliasing out) and broadcast
 *    (every root, tree and chain sizes) deliver exact data;
 *  - the data crossing hosts: 2(H-1) x the tensor for allreduce, (H-1) x
 *    the data for allgather and broadcast, whatever the layout;
 *  - the automatic choice (WEFT_HIERARCHICAL unset, 0, 1), forced names,
 *    and that an inconsistent topology is declined. */
#include "algo_sim.h"

/* ------------------------------------------------------------ layouts */
typedef struct layout_t {
  int p, H;
  int host_of[MAXP];
  char name[48];
} layout_t;

/* Renumbers hosts in order of their lowest rank (as the engine does). */
static void canon(layout_t *L) {
  int map[MAXP], n = 0;
  for (int i = 0; i < MAXP; i++) map[i] = -1;
  for (int i = 0; i < L->p; i++) {
    if (map[L->host_of[i]] < 0) map[L->host_of[i]] = n++;
    L->host_of[i] = map[L->host_of[i]];
  }
  L->H = n;
}

/* All the layouts tested for p ranks; returns how many (at most 32). */
static int layouts(int p, layout_t *out) {
  int n = 0;
  uint64_t st = (uint64_t)p * 7919;
  for (int H = 1; H <= 4 && H <= p; H++) {
    for (int kind = 0; kind < 5; kind++) {
      layout_t L = {.p = p};
      for (int i = 0; i < p; i++) {
        switch (kind) {
          case 0: L.host_of[i] = i * H / p; break;                /* contiguous */
          case 1: L.host_of[i] = i % H; break;                    /* interleaved */
          case 2: L.host_of[i] = i < p - H + 1 ? 0 : i - (p - H); break; /* one big host first */
          case 3: L.host_of[i] = i < H - 1 ? i : H - 1; break;    /* one big host last */
          default: L.host_of[i] = i < H ? i : (int)(rng_next(&st) % (uint64_t)H); break; /* random */
        }
      }
      canon(&L);
      int dup = 0;
      for (int k = 0; k < n && !dup; k++) dup = !memcmp(out[k].host_of, L.host_of, sizeof(int) * (size_t)p);
      if (dup) continue;
      int w = snprintf(L.name, sizeof L.name, "hosts[");
      for (int i = 0; i < p; i++) w += snprintf(L.name + w, sizeof L.name - (size_t)w, "%d", L.host_of[i]);
      snprintf(L.name + w, sizeof L.name - (size_t)w, "]");
      out[n++] = L;
    }
  }
  return n;
}

static wf_topo topo_of(const layout_t *L) { return (wf_topo){.nhosts = L->H, .host_of = L->host_of}; }

/* Bytes sent by rank i to ranks on other hosts in its schedule. */
static size_t cross_bytes(const simrank *R, int i, const layout_t *L) {
  size_t b = 0;
  for (size_t k = 0; k < R[i].s.nsteps; k++) {
    const wf_step *st = &R[i].s.steps[k];
    if (st->kind == WF_STEP_SEND && L->host_of[st->peer] != L->host_of[i]) b += st->bytes;
  }
  return b;
}

/* ------------------------------------------------------------ values */
static const dtop k_dtops[] = {
    {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "float32 sum"},     {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "float64 sum"},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, 4, "float32 prod"}, {WEFT_DTYPE_FLOAT64, WEFT_OP_AVERAGE, 8, "float64 avg"},
    {WEFT_DTYPE_FLOAT32, WEFT_OP_MAX, 4, "float32 max"},      {WEFT_DTYPE_FLOAT64, WEFT_OP_MIN, 8, "float64 min"},
    {WEFT_DTYPE_INT32, WEFT_OP_SUM, 4, "int32 sum"},         {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8 sum"},
    {WEFT_DTYPE_INT16, WEFT_OP_MIN, 2, "int16 min"},         {WEFT_DTYPE_INT64, WEFT_OP_PRODUCT, 8, "int64 prod"},
};
#define NDTOPS (sizeof k_dtops / sizeof k_dtops[0])

/* Mixed magnitudes (random sign, full mantissa, wide exponents; narrow for
 * products): sums in different orders round differently. Integers: any
 * bits. No NaNs: the reference's plain comparisons define min/max. */
static void gen_mixed(const dtop *d, uint64_t *st, void *out) {
  uint64_t r = rng_next(st);
  int prod = d->op == WEFT_OP_PRODUCT;
  int e = prod ? (int)(r % 9) - 4 : (int)(r % 49) - 24;
  double m = 1.0 + (double)(r >> 11) / 9007199254740992.0;
  double v = ldexp((r >> 8 & 1) ? -m : m, e);
  if (d->dt == WEFT_DTYPE_FLOAT32) {
    float f = (float)v;
    memcpy(out, &f, 4);
  } else if (d->dt == WEFT_DTYPE_FLOAT64) {
    memcpy(out, &v, 8);
  } else {
    memcpy(out, &r, d->es);
  }
}

/* The documented order, by plain loops: per host the left fold of its
 * ranks in rank order, then the left fold of the hosts in host order. */
static void *hier_reference(const dtop *d, void *const *x, const layout_t *L, size_t count) {
  size_t bytes = count * d->es;
  void *ref = gb_alloc(bytes, 0), *part = gb_alloc(bytes, 0);
  for (int h = 0; h < L->H; h++) {
    int first = 1;
    for (int i = 0; i < L->p; i++) {
      if (L->host_of[i] != h) continue;
      if (first) memcpy(part, x[i], bytes);
      else ref_combine(d, part, x[i], count);
      first = 0;
    }
    if (h == 0) memcpy(ref, part, bytes);
    else ref_combine(d, ref, part, count);
  }
  gb_free(part);
  return ref;
}

/* ------------------------------------------------------------ allreduce */
/* Allreduce of x (count elements per rank) with algo over layout L; checks
 * guards, same bits on every rank, and (hier) the data crossing hosts.
 * Returns rank 0's result (gb_free it). */
static void *sim_allreduce(const char *algo, const layout_t *L, const dtop *d, size_t count, size_t seg,
                           void *const *x) {
  int p = L->p;
  simrank R[MAXP];
  void *buf[MAXP];
  size_t bytes = count * d->es;
  wf_topo t = topo_of(L);
  for (int i = 0; i < p; i++) {
    buf[i] = gb_alloc(bytes, 0);
    memcpy(buf[i], x[i], bytes);
    wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = d->dt, .op = d->op, .elem_size = d->es, .rank = i,
                      .size = p, .buf = buf[i], .count = count, .segment_bytes = seg, .topo = &t};
    build(R, i, &a, algo);
    add_region(&R[i], buf[i], bytes, 1);
  }
  if (algo && !strcmp(algo, "hier")) {
    size_t cross = 0;
    for (int i = 0; i < p; i++) cross += cross_bytes(R, i, L);
    CHECK(cross == 2 * (size_t)(L->H - 1) * bytes || p == 1, "%zu bytes cross hosts, want 2(H-1) x %zu", cross,
          bytes);
  }
  simulate(R, p, d->es);
  free_scheds(R, p);
  return same_results_keep0(buf, p, bytes);
}

static void check_allreduce(const layout_t *L, const dtop *d, size_t count, size_t seg, uint64_t seed) {
  snprintf(g_ctx, sizeof g_ctx, "allreduce hier p=%d %s %s count=%zu seg=%zu", L->p, L->name, d->name, count, seg);
  void *x[MAXP];
  uint64_t st = seed;
  for (int i = 0; i < L->p; i++) {
    x[i] = gb_alloc(count * d->es, 0);
    for (size_t k = 0; k < count; k++) gen_mixed(d, &st, (char *)x[i] + k * d->es);
  }
  void *got = sim_allreduce("hier", L, d, count, seg, x);
  void *ref = hier_reference(d, x, L, count);
  for (size_t k = 0; k < count; k++)
    if (memcmp((char *)got + k * d->es, (char *)ref + k * d->es, d->es)) FAIL("element %zu of %zu differs", k, count);
  gb_free(got);
  gb_free(ref);
  for (int i = 0; i < L->p; i++) gb_free(x[i]);
}

/* k tensors allreduced alone, then packed at offsets into one buffer (as
 * fusion does) with another segment size: every tensor's bits are equal. */
static void check_fusion(const layout_t *L, const dtop *d, uint64_t *st) {
  enum { K = 4 };
  size_t cnt[K], total = 0;
  for (int j = 0; j < K; j++) total += cnt[j] = (size_t)(rng_next(st) % 300) + (j == 1 ? 0 : 1);
  snprintf(g_ctx, sizeof g_ctx, "fusion hier p=%d %s %s total=%zu", L->p, L->name, d->name, total);
  void *fx[MAXP];
  for (int i = 0; i < L->p; i++) {
    fx[i] = gb_alloc(total * d->es, 0);
    for (size_t k = 0; k < total; k++) gen_mixed(d, st, (char *)fx[i] + k * d->es);
  }
  size_t fseg = (size_t)(rng_next(st) % 64 + 1) * d->es;
  void *fused = sim_allreduce("hier", L, d, total, fseg, fx);
  size_t off = 0;
  for (int j = 0; j < K; j++) {
    void *x[MAXP];
    for (int i = 0; i < L->p; i++) x[i] = (char *)fx[i] + off * d->es;
    void *alone = sim_allreduce("hier", L, d, cnt[j], 1 << 20, x);
    CHECK(!memcmp(alone, (char *)fused + off * d->es, cnt[j] * d->es), "tensor %d (%zu elements at %zu) differs fused",
          j, cnt[j], off);
    gb_free(alone);
    off += cnt[j];
  }
  gb_free(fused);
  for (int i = 0; i < L->p; i++) gb_free(fx[i]);
}

/* ------------------------------------------------------------ allgather */
static void check_allgather(const layout_t *L, size_t es, int pat, int alias) {
  int p = L->p;
  snprintf(g_ctx, sizeof g_ctx, "allgather hier p=%d %s es=%zu pattern=%d alias=%d", p, L->name, es, pat, alias);
  simrank R[MAXP];
  size_t counts[MAXP], displs[MAXP];
  void *in[MAXP], *out[MAXP], *orig[MAXP];
  for (int i = 0; i < p; i++) counts[i] = pattern(pat, i, p);
  size_t total = layout(counts, displs, p, 1), data = 0;
  uint64_t st = (uint64_t)pat * 977 + (uint64_t)p;
  wf_topo t = topo_of(L);
  for (int i = 0; i < p; i++) {
    size_t n = counts[i] * es;
    data += n;
    orig[i] = gb_alloc(n, 0);
    for (size_t k = 0; k < n; k++) ((unsigned char *)orig[i])[k] = (unsigned char)rng_next(&st);
    out[i] = gb_alloc(total * es, 0xCD);
    in[i] = alias ? (char *)out[i] + displs[i] * es : gb_alloc(n, 0);
    memcpy(in[i], orig[i], n);
    wf_coll_args a = {.coll = WF_COLL_ALLGATHER, .dtype = WEFT_DTYPE_UINT8, .elem_size = es, .rank = i, .size = p,
                      .in = in[i], .out = out[i], .counts = counts, .displs = displs, .segment_bytes = 8, .topo = &t};
    build(R, i, &a, "hier");
    add_region(&R[i], out[i], total * es, 1);
    if (!alias) add_region(&R[i], in[i], n, 0);
  }
  size_t cross = 0;
  for (int i = 0; i < p; i++) cross += cross_bytes(R, i, L);
  CHECK(cross == (size_t)(L->H - 1) * data, "%zu bytes cross hosts, want (H-1) x %zu", cross, data);
  simulate(R, p, es);
  sim_check_allgather(in, out, orig, counts, displs, p, es, total, alias);
  free_scheds(R, p);
}

/* ------------------------------------------------------------ broadcast */
/* small: 1 runs the leaders' tree, 0 the chain (WEFT_SMALL_BROADCAST_BYTES). */
static void check_broadcast(const layout_t *L, int root, size_t es, size_t count, size_t seg, int small) {
  int p = L->p;
  snprintf(g_ctx, sizeof g_ctx, "broadcast hier p=%d %s root=%d es=%zu count=%zu seg=%zu %s", p, L->name, root, es,
           count, seg, small ? "tree" : "chain");
  wf_settings set = *wf_settings_default();
  set.small_broadcast_bytes = small ? 1000000000 : -1;
  simrank R[MAXP];
  void *buf[MAXP];
  size_t bytes = count * es;
  void *src = gb_alloc(bytes, 0);
  uint64_t st = count + (uint64_t)root * 1000003 + es;
  for (size_t k = 0; k < bytes; k++) ((unsigned char *)src)[k] = (unsigned char)rng_next(&st);
  wf_topo t = topo_of(L);
  for (int i = 0; i < p; i++) {
    buf[i] = gb_alloc(bytes, (unsigned char)(0x10 + i));
    if (i == root) memcpy(buf[i], src, bytes);
    wf_coll_args a = {.coll = WF_COLL_BROADCAST, .dtype = WEFT_DTYPE_UINT8, .elem_size = es, .rank = i, .size = p,
                      .buf = buf[i], .count = count, .root = root, .segment_bytes = seg, .topo = &t, .set = &set};
    build(R, i, &a, "hier");
    add_region(&R[i], buf[i], bytes, 1);
  }
  size_t cross = 0;
  for (int i = 0; i < p; i++) cross += cross_bytes(R, i, L);
  CHECK(cross == (size_t)(L->H - 1) * bytes, "%zu bytes cross hosts, want (H-1) x %zu", cross, bytes);
  simulate(R, p, es);
  for (int i = 0; i < p; i++) {
    gb_check(buf[i], bytes, "buf", i);
    CHECK(!memcmp(buf[i], src, bytes), "rank %d did not get the root's data", i);
    gb_free(buf[i]);
  }
  gb_free(src);
  free_scheds(R, p);
}

/* ------------------------------------------------------------ choice */
static void test_choice(void) {
  snprintf(g_ctx, sizeof g_ctx, "automatic choice");
  static float buf[64];
  size_t counts[4] = {2, 2, 2, 2}, displs[4] = {0, 2, 4, 6};
  int two[4] = {0, 0, 1, 1}, spread[4] = {0, 1, 2, 3}, one[4] = {0, 0, 0, 0}, bad[4] = {0, 2, 1, 1};
  wf_topo t2 = {.nhosts = 2, .host_of = two}, t4 = {.nhosts = 4, .host_of = spread}, t1 = {.nhosts = 1, .host_of = one},
          tbad = {.nhosts = 3, .host_of = bad};
  const char *modes[] = {NULL, "-1", "0", "1"};
  for (int mi = 0; mi < 4; mi++) {
    int mode = modes[mi] ? atoi(modes[mi]) : -1;
    wf_settings set = *wf_settings_default();
    set.hierarchical = mode;
    const wf_topo *topos[] = {&t2, &t4, &t1, &tbad, NULL};
    for (int ti = 0; ti < 5; ti++) {
      const wf_topo *t = topos[ti];
      int claim = t && t != &tbad && t->nhosts > 1 && (mode == 1 || (mode == -1 && t->nhosts < 4));
      wf_coll_args ar = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM,
                         .elem_size = 4, .rank = 1, .size = 4, .buf = buf, .count = 8,
                         .segment_bytes = 1 << 20, .topo = t, .set = &set};
      const char *c = chosen_algo(&ar);
      CHECK(!strcmp(c, claim ? "hier" : "direct"), "allreduce mode %s topo %d: chose %s", modes[mi] ? modes[mi] : "unset",
            ti, c);
      ar.count = (size_t)1 << 24; /* any size (never touched): a tensor's bits must not depend on it */
      CHECK(!strcmp(chosen_algo(&ar), claim ? "hier" : "direct"), "allreduce: choice depends on the size");
      wf_coll_args ag = {.coll = WF_COLL_ALLGATHER, .dtype = WEFT_DTYPE_FLOAT32, .elem_size = 4, .rank = 2,
                         .size = 4, .in = buf + 4, .out = buf, .counts = counts, .displs = displs, .topo = t, .set = &set};
      c = chosen_algo(&ag);
      CHECK(!strcmp(c, claim ? "hier" : "ring"), "allgather mode %d topo %d: chose %s", mode, ti, c);
      wf_coll_args bc = {.coll = WF_COLL_BROADCAST, .dtype = WEFT_DTYPE_FLOAT32, .elem_size = 4, .rank = 3, .size = 4,
                         .buf = buf, .count = 8, .root = 1, .segment_bytes = 1 << 20, .topo = t, .set = &set};
      c = chosen_algo(&bc);
      CHECK(!strcmp(c, claim ? "hier" : "tree"), "broadcast mode %d topo %d: chose %s", mode, ti, c);
      wf_coll_args rs = {.coll = WF_COLL_REDUCESCATTER, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM,
                         .elem_size = 4, .rank = 0, .size = 4, .in = buf, .out = buf + 32, .counts = counts,
                         .displs = displs, .segment_bytes = 1 << 20, .topo = t, .set = &set};
      CHECK(!strcmp(chosen_algo(&rs), "direct"), "reducescatter is not hierarchical");
    }
  }
  /* forced: hier runs on one host too (then it is direct's order), and
   * with no topology at all; an inconsistent topology is declined */
  layout_t L1 = {.p = 3, .H = 1, .host_of = {0, 0, 0}, .name = "hosts[000]"};
  check_allreduce(&L1, &k_dtops[0], 100, 8, 1);
  snprintf(g_ctx, sizeof g_ctx, "forced");
  simrank R[1];
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 0, .size = 4, .buf = buf, .count = 8, .segment_bytes = 1 << 20};
  build(R, 0, &a, "hier");
  wf_sched_free(&R[0].s);
  a.topo = &tbad;
  fprintf(stderr, "test_algo_hier: a warning (hier declines an inconsistent topology) is expected next\n");
  CHECK(!strcmp(chosen_algo(&a), "direct"), "an inconsistent topology was not declined");
  wf_sched s;
  wf_sched_init(&s, a.dtype, a.op);
  const char *chosen = NULL;
  CHECK(wf_algo_build(&a, "hier", &s, &chosen) == WEFT_OK && !strcmp(chosen, "direct"), "forced hier on a bad topo");
  wf_sched_free(&s);
}

/* ------------------------------------------------------------ main */
#ifdef TEST_TSAN
#define BIG 20011
#else
#define BIG 100003
#endif

int main(void) {
  test_choice();
  static const size_t segs[] = {8, 1004, (size_t)1 << 20, 0};
  uint64_t st = 12345;
  for (int p = 1; p <= MAXP; p++) {
    layout_t L[32];
    int nl = layouts(p, L);
    for (int k = 0; k < nl; k++) {
      size_t counts[] = {0, 1, (size_t)p - 1, 7, (size_t)p + 1, 1001};
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t d = 0; d < NDTOPS; d++) check_allreduce(&L[k], &k_dtops[d], counts[c], segs[(c + d) % 4], st++);
      check_allreduce(&L[k], &k_dtops[(size_t)k % NDTOPS], BIG, segs[1 + k % 3], st++);
      check_fusion(&L[k], &k_dtops[(size_t)k % 2], &st);
      check_fusion(&L[k], &k_dtops[2 + (size_t)k % 2], &st);
      for (int pat = 0; pat < PAT_N; pat++) check_allgather(&L[k], pat % 3 ? 4 : 1, pat, pat % 2);
      int roots[] = {0, p - 1, p / 2};
      for (int ri = 0; ri < 3; ri++) {
        size_t bc[] = {0, 1, 7, 1000};
        for (size_t c = 0; c < 4; c++) {
          check_broadcast(&L[k], roots[ri], 4, bc[c], 8, 1);
          check_broadcast(&L[k], roots[ri], 1, bc[c], segs[c], 0);
        }
      }
      check_broadcast(&L[k], p - 1, 4, BIG, 1004, 0);
    }
  }
  printf("test_algo_hier: OK (%zu simulations)\n", g_sims);
  return 0;
}
