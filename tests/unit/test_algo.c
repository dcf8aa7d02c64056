/* test_algo.c - every collective algorithm in the schedule simulator
 * (algo_sim.h: n simulated ranks in one process, rendezvous transfers,
 * deadlock and schedule checks).
 *
 * For each algorithm, world sizes 1..8, many counts (0, 1, size-1, 7, 1000,
 * 100003, fewer elements than ranks), several dtype x op pairs and segment
 * sizes: results are compared with references computed here with plain
 * loops, and across ranks bit for bit; guard bytes catch writes out of
 * bounds. The registry (forced names, declines, automatic choice) and the
 * schedule builder are tested directly too. The canonical reduction order
 * of the direct algorithms (bits independent of size, position, segment and
 * fusion) is tested in test_algo_order.c. */
#include "algo_sim.h"

/* ------------------------------------------------------------ values */
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
/* The settings run_allreduce's ranks get (NULL: the defaults); the ring's
 * subdivisions are set through it. */
static const wf_settings *g_ar_set;

static void run_allreduce(const char *algo, int p, const dtop *d, size_t count, size_t seg, int mode) {
  snprintf(g_ctx, sizeof g_ctx, "allreduce %s p=%d %s count=%zu seg=%zu mode=%d subdivs=%lld", algo ? algo : "auto",
           p, d->name, count, seg, mode, g_ar_set ? (long long)g_ar_set->ring_subdivs : 1LL);
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
                      .size = p, .buf = buf[i], .count = count, .segment_bytes = seg, .set = g_ar_set};
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


/* ------------------------------------------------------------ allgather */
static void run_allgather(int p, size_t es, int pat, int alias) {
  snprintf(g_ctx, sizeof g_ctx, "allgather ring p=%d es=%zu pattern=%d alias=%d subdivs=%lld", p, es, pat, alias,
           g_ar_set ? (long long)g_ar_set->ring_subdivs : 1LL);
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
                      .in = in[i], .out = out[i], .counts = counts, .displs = displs, .segment_bytes = 8,
                      .set = g_ar_set};
    build(R, i, &a, "ring");
    add_region(&R[i], out[i], total * es, 1);
    if (!alias) add_region(&R[i], in[i], n, 0);
  }
  simulate(R, p, es);
  sim_check_allgather(in, out, orig, counts, displs, p, es, total, alias);
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
static void run_reducescatter(const char *algo, int p, const dtop *d, int pat, size_t seg) {
  snprintf(g_ctx, sizeof g_ctx, "reducescatter %s p=%d %s pattern=%d seg=%zu", algo ? algo : "auto", p, d->name, pat,
           seg);
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
    build(R, i, &a, algo);
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
    CHECK(t[n]->name && t[n]->supports && t[n]->build, "entry %d incomplete", n);
    CHECK(t[n]->coll < WF_COLL_COUNT_, "entry %s: bad collective", t[n]->name);
    per_coll[t[n]->coll]++;
    for (int j = 0; j < n; j++)
      CHECK(t[j]->coll != t[n]->coll || strcmp(t[j]->name, t[n]->name), "duplicate name %s", t[n]->name);
  }
  CHECK(per_coll[WF_COLL_ALLREDUCE] >= 3 && per_coll[WF_COLL_BROADCAST] >= 2 && per_coll[WF_COLL_ALLGATHER] >= 1 &&
            per_coll[WF_COLL_ALLTOALL] >= 1 && per_coll[WF_COLL_REDUCESCATTER] >= 2,
        "table misses algorithms (%d entries)", n);

  size_t big = ((size_t)64 << 20) / 4 + 1; /* floats: just over rd's 64 MiB limit */
  float *buf = malloc(big * sizeof(float)); /* never touched: schedules are only built */
  CHECK(buf, "out of memory");
  wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 1, .size = 4, .buf = buf, .segment_bytes = 1 << 20};
  /* automatic: direct (canonical order) at every size and world size */
  wf_settings set = *wf_settings_default();
  a.set = &set;
  int sizes[] = {1, 2, 3, 4, 5, 8};
  {
    for (int k = 0; k < 6; k++) {
      a.size = sizes[k];
      a.rank = a.size - 1;
      CHECK(PICKS(&a, 1, NULL, "direct"), "p=%d 4 bytes: not direct", a.size);
      CHECK(PICKS(&a, 16384, "", "direct"), "p=%d 64 KiB: not direct", a.size);
      CHECK(PICKS(&a, 16385, NULL, "direct"), "p=%d 64 KiB + 4: not direct", a.size);
      CHECK(PICKS(&a, big, NULL, "direct"), "p=%d 64 MiB + 4: not direct", a.size);
    }
  }
  a.set = NULL; /* the defaults */
  a.size = 4;
  a.rank = 1;
  /* forced names, unknown names, declines: a forced name that cannot run
   * falls back to the automatic choice, direct */
  CHECK(PICKS(&a, 1000, "ring", "ring"), "forced ring not honoured");
  CHECK(PICKS(&a, 10, "rd", "rd"), "forced rd not honoured for a small tensor");
  CHECK(PICKS(&a, 1000000, "rd", "rd"), "forced rd not honoured for a 4 MB tensor");
  CHECK(PICKS(&a, big, "ring", "ring"), "forced ring not honoured for a 64 MiB tensor");
  CHECK(PICKS(&a, 10, "direct", "direct"), "forced direct not honoured");
  fprintf(stderr, "test_algo: three warnings (unknown name, declined name, unknown name) are expected next\n");
  weft_status bogus_st;
  CHECK(!strcmp(pick(&a, 10, "bogus", &bogus_st), "") && bogus_st == WEFT_ERR_NOT_FOUND,
        "an unknown name: %s, not NOT_FOUND", weft_status_string(bogus_st));
  CHECK(!strcmp(pick(&a, 10, "tree", &bogus_st), "") && bogus_st == WEFT_ERR_NOT_FOUND,
        "another collective's algorithm: %s, not NOT_FOUND", weft_status_string(bogus_st));
  CHECK(PICKS(&a, big, "rd", "direct"), "rd did not decline above 64 MiB (it needs a scratch that large)");

  /* reducescatter: direct by default, ring when forced */
  size_t rc[4] = {3, 0, 5, 1}, rdsp[4] = {0, 3, 3, 8};
  wf_coll_args r = {.coll = WF_COLL_REDUCESCATTER, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                    .rank = 2, .size = 4, .in = buf, .out = buf + 9, .counts = rc, .displs = rdsp,
                    .segment_bytes = 1 << 20};
  CHECK(PICKS(&r, 0, NULL, "direct"), "reducescatter: not direct by default");
  CHECK(PICKS(&r, 0, "ring", "ring"), "reducescatter: forced ring not honoured");
  CHECK(PICKS(&r, 0, "direct", "direct"), "reducescatter: forced direct not honoured");
  CHECK(!strcmp(pick(&r, 0, "rd", &bogus_st), "") && bogus_st == WEFT_ERR_NOT_FOUND,
        "reducescatter: an unknown name: %s, not NOT_FOUND", weft_status_string(bogus_st));

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
#ifdef TEST_TSAN
static int any_big(int p) { return p == 8; }
static const int k_more_big = 0; /* repeats of BIG cases that plain/ASan already cover */
#else
static int any_big(int p) { (void)p; return 1; }
static const int k_more_big = 1;
#endif

static void test_allreduce(int p) {
  size_t counts[] = {0, 1, (size_t)p - 1, 7, 1000, (size_t)p / 2, (size_t)p + 1};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    for (size_t d = 0; d < NDTOPS; d++) {
      run_allreduce("rd", p, &k_dtops[d], n, 8, V_EXACT);
      for (size_t s = 0; s < 3; s++) {
        run_allreduce("ring", p, &k_dtops[d], n, k_segs[s], V_EXACT);
        run_allreduce("direct", p, &k_dtops[d], n, k_segs[s], V_EXACT);
      }
    }
    for (int s = 0; s < 3; s += 2) {
      run_allreduce("ring", p, &k_dtops[0], n, k_segs[s], V_RANDOM);
      run_allreduce("ring", p, &k_f32max, n, k_segs[s], V_SPECIAL);
      run_allreduce("direct", p, &k_dtops[0], n, k_segs[s], V_RANDOM);
      run_allreduce("direct", p, &k_f32max, n, k_segs[s], V_SPECIAL);
    }
    run_allreduce("rd", p, &k_dtops[0], n, 8, V_RANDOM);
    run_allreduce("rd", p, &k_f32max, n, 8, V_SPECIAL);
    run_allreduce(NULL, p, &k_dtops[0], n, 1 << 20, V_EXACT);
    run_allreduce("ring", p, &k_dtops[0], n, 0, V_EXACT); /* 0: whole blocks */
    run_allreduce("direct", p, &k_dtops[0], n, 0, V_EXACT);
    /* ring subdivisions (WEFT_RING_SUBDIVS): rotated and reversed rings at once */
    static wf_settings sub_set;
    sub_set = *wf_settings_default();
    g_ar_set = &sub_set;
    for (int sd = 2; sd <= 5; sd++) {
      sub_set.ring_subdivs = sd;
      for (size_t d = 0; d < NDTOPS; d++)
        for (size_t s = 0; s < 3; s++) run_allreduce("ring", p, &k_dtops[d], n + (size_t)sd * 13, k_segs[s], V_EXACT);
      run_allreduce("ring", p, &k_dtops[0], n * 3 + 5, k_segs[0], V_RANDOM);
      run_allreduce("ring", p, &k_dtops[0], n, 0, V_EXACT);
    }
    g_ar_set = NULL;
  }
  /* k_dtops[0] float32 sum, [1] int32 max, [2] float64 prod, [3] uint8 sum, [4] int16 min */
  if (!any_big(p)) return;
  run_allreduce("ring", p, &k_dtops[0], BIG, k_segs[1], V_EXACT);
  run_allreduce("rd", p, &k_dtops[0], BIG, 8, V_EXACT);
  run_allreduce("direct", p, &k_dtops[0], BIG, k_segs[1], V_EXACT);
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
  if (!k_more_big) return;
  run_allreduce("direct", p, &k_dtops[3], BIG, k_segs[0], V_EXACT);
  run_allreduce("direct", p, &k_dtops[2], BIG, k_segs[2], V_EXACT);
  run_allreduce("direct", p, &k_dtops[0], BIG, k_segs[2], V_RANDOM);
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
      static wf_settings ag_set; /* ring subdivisions: parts of every block on rotated/reversed rings */
      ag_set = *wf_settings_default();
      g_ar_set = &ag_set;
      for (int sd = 2; sd <= 4; sd++) {
        ag_set.ring_subdivs = sd;
        run_allgather(p, ess[e], pat, sd % 2);
      }
      g_ar_set = NULL;
    }
  for (int pat = 0; pat < 5; pat++)
    for (size_t e = 0; e < 3; e++) run_alltoall(p, ess[e], pat);
  for (int pat = 0; pat < PAT_SPLIT_BIG; pat++)
    for (size_t d = 0; d < NDTOPS; d++)
      for (size_t s = 0; s < 3; s++) {
        run_reducescatter("ring", p, &k_dtops[d], pat, k_segs[s]);
        run_reducescatter("direct", p, &k_dtops[d], pat, k_segs[s]);
      }
  run_reducescatter("ring", p, &k_dtops[0], PAT_UNEVEN, 0); /* 0: whole blocks */
  run_reducescatter("direct", p, &k_dtops[0], PAT_UNEVEN, 0);
  run_reducescatter(NULL, p, &k_dtops[1], PAT_UNEVEN, 8);
  if (!any_big(p)) return;
  run_allgather(p, 4, PAT_SPLIT_BIG, 0);
  run_alltoall(p, 4, 5);
  run_reducescatter("ring", p, &k_dtops[0], PAT_SPLIT_BIG, k_segs[1]);
  run_reducescatter("direct", p, &k_dtops[0], PAT_SPLIT_BIG, k_segs[1]);
  if (!big_p(p)) return;
  run_allgather(p, 1, PAT_SPLIT_BIG, 1);
  run_alltoall(p, 8, 5);
  run_reducescatter("ring", p, &k_dtops[3], PAT_SPLIT_BIG, k_segs[0]);
  run_reducescatter("ring", p, &k_dtops[2], PAT_SPLIT_BIG, k_segs[2]);
  run_reducescatter("ring", p, &k_dtops[5], PAT_SPLIT_BIG, k_segs[2]);
  if (!k_more_big) return;
  run_reducescatter("direct", p, &k_dtops[3], PAT_SPLIT_BIG, k_segs[0]);
  run_reducescatter("direct", p, &k_dtops[5], PAT_SPLIT_BIG, k_segs[2]);
}

/* WEFT_RING_SUBDIVS = 2 on 3+ ranks: the second ring is reversed (TensorFlow's
 * negative subdiv offset), so rank r sends to both r+1 and r-1 and receives
 * from both; with 1, to r+1 only. Counts every peer of rank 1's schedule. */
static void test_ring_subdiv_peers(void) {
  snprintf(g_ctx, sizeof g_ctx, "ring subdivision peers");
  wf_settings set = *wf_settings_default();
  for (int p = 3; p <= 5; p++) {
    for (int sd = 1; sd <= 2; sd++) {
      set.ring_subdivs = sd;
      float buf[64] = {0};
      wf_coll_args a = {.coll = WF_COLL_ALLREDUCE, .dtype = WEFT_DTYPE_FLOAT32, .op = WEFT_OP_SUM, .elem_size = 4,
                        .rank = 1, .size = p, .buf = buf, .count = 64, .segment_bytes = 1 << 20, .set = &set};
      wf_sched s;
      wf_sched_init(&s, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM);
      const char *chosen = NULL;
      CHECK(wf_algo_build(&a, "ring", &s, &chosen) == WEFT_OK, "build: %s", wf_err_msg());
      int to[8] = {0}, from[8] = {0};
      for (size_t i = 0; i < s.nsteps; i++) {
        if (s.steps[i].kind == WF_STEP_SEND) to[s.steps[i].peer]++;
        if (s.steps[i].kind == WF_STEP_RECV) from[s.steps[i].peer]++;
      }
      CHECK(to[2] > 0 && from[0] > 0, "p=%d subdivs=%d: rank 1 does not send to 2 and receive from 0", p, sd);
      if (sd == 1) CHECK(!to[0] && !from[2], "p=%d, one ring: rank 1 sends to 0 or receives from 2", p);
      else CHECK(to[0] > 0 && from[2] > 0, "p=%d subdivs=2: no reversed ring (rank 1 never sends to 0)", p);
      wf_sched_free(&s);
    }
  }
}

int main(void) {
  test_sched();
  test_ring_subdiv_peers();
  test_registry();
  for (int p = 1; p <= MAXP; p++) {
    test_allreduce(p);
    test_broadcast(p);
    test_gather_scatter(p);
  }
  printf("test_algo: OK (%zu simulations)\n", g_sims);
  return 0;
}
