/* mp_hier.c - allreduce, allgather and broadcast on a job spread over
 * several hosts, faked on one machine: run every rank through
 * hier_hosts.sh HOSTS (WEFT_HOSTNAME per rank; MP_HIER_HOSTS tells this
 * program the layout). Checks:
 *  - the world sees the layout: weft_cross_size / cross_rank / local_rank
 *    match the host list;
 *  - allreduce (float32 and float64 sums of mixed magnitudes, where another
 *    order gives other bits; int32 max; float32 product) equals, bit for
 *    bit, a reference computed here in the expected order: --expect hier:
 *    per host the left fold of its ranks in rank order, then the left fold
 *    of the hosts in host order (hosts numbered by their lowest rank);
 *    --expect direct: the left fold of all ranks. Counts 1, 7, 1000 and
 *    --large; 4 tensors of one grouped allreduce (fused) likewise;
 *    Every allreduce must also report that algorithm (weft_request_algorithm:
 *    "hier" or "direct"), which the bits alone do not show for every case
 *    (one element, max);
 *  - allgather with different rows per rank (some 0) and broadcast from
 *    every root (small: tree sizes, large: chain sizes) deliver exact data,
 *    and with WEFT_ALGO_<COLL> set ran that algorithm (no silent fallback).
 *
 * Usage: hier_hosts.sh HOSTS mp_hier --expect hier|direct [--large N] */
#include "mp_harness.c"

static int64_t g_large = 1000003;
static int g_expect_hier = 1;
static int g_host_of[1024], g_nhosts;

/* Host index of every rank from MP_HIER_HOSTS, numbered by lowest rank. */
static void parse_hosts(void) {
  mp_case("layout");
  const char *list = getenv("MP_HIER_HOSTS");
  if (!list || !*list) mp_fatal("MP_HIER_HOSTS is not set: run through hier_hosts.sh");
  char names[1024][64];
  int n = 0;
  for (const char *p = list; *p && n < 1024;) {
    size_t k = strcspn(p, ",");
    if (k == 0 || k >= 64) mp_fatal("bad host list '%s'", list);
    memcpy(names[n], p, k);
    names[n][k] = '\0';
    n++;
    p += k;
    if (*p == ',') p++;
  }
  if (n != mp_size) mp_fatal("host list '%s' names %d ranks, the world has %d", list, n, mp_size);
  g_nhosts = 0;
  for (int i = 0; i < n; i++) {
    g_host_of[i] = -1;
    for (int j = 0; j < i; j++)
      if (!strcmp(names[i], names[j])) g_host_of[i] = g_host_of[j];
    if (g_host_of[i] < 0) g_host_of[i] = g_nhosts++;
  }
  int local = 0;
  for (int j = 0; j < mp_rank; j++) local += g_host_of[j] == g_host_of[mp_rank];
  if (weft_cross_size(mp_world) != g_nhosts || weft_cross_rank(mp_world) != g_host_of[mp_rank] ||
      weft_local_rank(mp_world) != local)
    mp_fail("world says cross %d/%d local %d, the host list %d/%d local %d", weft_cross_rank(mp_world),
            weft_cross_size(mp_world), weft_local_rank(mp_world), g_host_of[mp_rank], g_nhosts, local);
  mp_case_end();
}

/* ------------------------------------------------------------- allreduce */
/* Mixed magnitudes (random sign, full mantissa, exponents -24..24; narrow
 * for products), a function of (rank, index, seed). */
static double mixed(int rank, size_t i, uint64_t seed, int prod) {
  uint64_t h = mp_hash((uint64_t)rank, i, seed);
  int e = prod ? (int)(h % 5) - 2 : (int)(h % 49) - 24;
  double m = 1.0 + (double)(h >> 11) / 9007199254740992.0;
  return ldexp((h >> 8 & 1) ? -m : m, e);
}

typedef struct ar_kind {
  weft_dtype dt;
  weft_reduce_op op;
  const char *name;
} ar_kind;

static void fill(const ar_kind *k, void *buf, int rank, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    if (k->dt == WEFT_DTYPE_INT32)
      ((int32_t *)buf)[i] = (int32_t)mp_hash((uint64_t)rank, i, seed);
    else if (k->dt == WEFT_DTYPE_FLOAT32)
      ((float *)buf)[i] = (float)mixed(rank, i, seed, k->op == WEFT_OP_PRODUCT);
    else
      ((double *)buf)[i] = mixed(rank, i, seed, k->op == WEFT_OP_PRODUCT);
  }
}

/* acc = acc op x, n elements (plain loops; no NaNs in the data). */
static void combine(const ar_kind *k, void *acc, const void *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (k->dt == WEFT_DTYPE_INT32) {
      int32_t *a = acc, b = ((const int32_t *)x)[i];
      if (b > a[i]) a[i] = b; /* max */
    } else if (k->dt == WEFT_DTYPE_FLOAT32) {
      float *a = acc, b = ((const float *)x)[i];
      a[i] = k->op == WEFT_OP_PRODUCT ? a[i] * b : a[i] + b;
    } else {
      double *a = acc, b = ((const double *)x)[i];
      a[i] = a[i] + b;
    }
  }
}

/* The expected result of seed's allreduce over n elements. */
static void *reference(const ar_kind *k, size_t n, uint64_t seed) {
  size_t es = mp_esize(k->dt), bytes = n * es;
  void *ref = mp_alloc(bytes), *part = mp_alloc(bytes), *x = mp_alloc(bytes);
  if (!g_expect_hier) {
    fill(k, ref, 0, n, seed);
    for (int r = 1; r < mp_size; r++) {
      fill(k, x, r, n, seed);
      combine(k, ref, x, n);
    }
  } else {
    for (int h = 0; h < g_nhosts; h++) {
      int first = 1;
      for (int r = 0; r < mp_size; r++) {
        if (g_host_of[r] != h) continue;
        fill(k, first ? part : x, r, n, seed);
        if (!first) combine(k, part, x, n);
        first = 0;
      }
      if (h == 0) memcpy(ref, part, bytes);
      else combine(k, ref, part, n);
    }
  }
  free(part);
  free(x);
  return ref;
}

static void check_same(const ar_kind *k, const void *got, const void *want, size_t n, const char *what) {
  size_t es = mp_esize(k->dt);
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)got + i * es, (const char *)want + i * es, es)) {
      double g = k->dt == WEFT_DTYPE_INT32 ? mp_get_i(k->dt, got, i) : mp_get_f(k->dt, got, i);
      double w = k->dt == WEFT_DTYPE_INT32 ? mp_get_i(k->dt, want, i) : mp_get_f(k->dt, want, i);
      mp_fail("%s: element %zu of %zu is %.17g, the %s order gives %.17g", what, i, n, g,
              g_expect_hier ? "hierarchical" : "rank", w);
      return;
    }
}

/* req, an allreduce (or a grouped one), ran the expected algorithm. */
static void check_algo(weft_request *req, const char *name) {
  const char *want = g_expect_hier ? "hier" : "direct", *ran = weft_request_algorithm(req);
  if (strcmp(ran, want)) mp_fail("%s: ran '%s', expected %s", name, ran, want);
}

static void test_allreduce(const ar_kind *k, size_t n, uint64_t seed) {
  mp_case("allreduce %s count=%zu", k->name, n);
  size_t bytes = n * mp_esize(k->dt);
  void *buf = mp_alloc(bytes);
  fill(k, buf, mp_rank, n, seed);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {k->dt, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  char name[96];
  snprintf(name, sizeof name, "ar.%s.%zu", k->name, n);
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &t, &t, k->op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    void *ref = reference(k, n, seed);
    check_same(k, buf, ref, n, name);
    free(ref);
    check_algo(req, name);
  }
  weft_request_free(req);
  free(buf);
  mp_case_end();
}

/* Four allreduces submitted as one group (fused by the coordinator): each
 * tensor gets the bits it gets alone. */
static void test_fused(const ar_kind *k) {
  mp_case("grouped allreduce %s", k->name);
  enum { K = 4 };
  size_t counts[K] = {3, 1000, 1, 4097}, es = mp_esize(k->dt);
  int64_t shapes[K][1];
  weft_tensor ts[K];
  void *bufs[K];
  for (int j = 0; j < K; j++) {
    bufs[j] = mp_alloc(counts[j] * es);
    fill(k, bufs[j], mp_rank, counts[j], 100 + (uint64_t)j);
    shapes[j][0] = (int64_t)counts[j];
    ts[j] = (weft_tensor){k->dt, 1, shapes[j], bufs[j], WEFT_DEVICE_CPU, 0, NULL};
  }
  char name[64];
  snprintf(name, sizeof name, "grouped.%s", k->name);
  weft_request *req = NULL;
  mp_submitted(weft_grouped_allreduce(mp_group, name, K, ts, ts, k->op, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    for (int j = 0; j < K; j++) {
      void *ref = reference(k, counts[j], 100 + (uint64_t)j);
      check_same(k, bufs[j], ref, counts[j], name);
      free(ref);
    }
    check_algo(req, name);
  }
  weft_request_free(req);
  for (int j = 0; j < K; j++) free(bufs[j]);
  mp_case_end();
}

/* ------------------------------------------------------------- allgather */
static int64_t ag_rows(int r, int large) { return large ? g_large / mp_size / 3 + r : (r * 2 + 1) % 3; }

static void test_allgather(int large) {
  mp_case("allgather %s", large ? "large" : "small");
  int64_t rows = ag_rows(mp_rank, large), shape[2] = {rows, 3};
  size_t n = (size_t)rows * 3;
  float *in = mp_alloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) in[i] = (float)(mp_hash((uint64_t)mp_rank, i, 77) % 1000000);
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  const char *name = large ? "ag.large" : "ag.small";
  weft_request *req = NULL;
  mp_submitted(weft_allgather(mp_group, name, &t, NULL, &req), &req, name);
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    int64_t total = 0;
    for (int r = 0; r < mp_size; r++) total += ag_rows(r, large);
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 2 || out.shape[0] != total || out.shape[1] != 3) {
      mp_fail("%s: output shape wrong (want %lld x 3)", name, (long long)total);
    } else {
      const float *o = out.data;
      size_t pos = 0;
      for (int r = 0; r < mp_size; r++)
        for (size_t i = 0; i < (size_t)ag_rows(r, large) * 3; i++, pos++)
          if (o[pos] != (float)(mp_hash((uint64_t)r, i, 77) % 1000000)) {
            mp_fail("%s: element %zu of rank %d's block is wrong", name, i, r);
            r = mp_size;
            break;
          }
    }
    mp_check_algo(req, "ALLGATHER", NULL, name);
  }
  weft_request_free(req);
  free(in);
  mp_case_end();
}

/* ------------------------------------------------------------- broadcast */
static void test_broadcast(size_t n) {
  mp_case("broadcast count=%zu from every root", n);
  uint32_t *buf = mp_alloc(n * sizeof(uint32_t));
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  for (int root = 0; root < mp_size; root++) {
    for (size_t i = 0; i < n; i++) buf[i] = (uint32_t)mp_hash((uint64_t)mp_rank, i, (uint64_t)root);
    char name[64];
    snprintf(name, sizeof name, "bc.%zu.%d", n, root);
    weft_request *req = NULL;
    mp_submitted(weft_broadcast(mp_group, name, &t, root, NULL, &req), &req, name);
    if (mp_wait_ok(req, name)) {
      for (size_t i = 0; i < n; i++)
        if (buf[i] != (uint32_t)mp_hash((uint64_t)root, i, (uint64_t)root)) {
          mp_fail("%s: element %zu is not the root's", name, i);
          break;
        }
      mp_check_algo(req, "BROADCAST", NULL, name);
    }
    weft_request_free(req);
  }
  free(buf);
  mp_case_end();
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--large") && i + 1 < argc) {
      g_large = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--expect") && i + 1 < argc) {
      const char *e = argv[++i];
      if (strcmp(e, "hier") && strcmp(e, "direct")) {
        fprintf(stderr, "mp_hier: --expect wants hier or direct, not '%s'\n", e);
        return 2;
      }
      g_expect_hier = !strcmp(e, "hier");
    } else {
      fprintf(stderr, "usage: hier_hosts.sh HOSTS mp_hier --expect hier|direct [--large N]\n");
      return 2;
    }
  }
  if (g_large < 1) g_large = 1;
  mp_setup();
  parse_hosts();
  static const ar_kind kinds[] = {{WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, "float32.sum"},
                                  {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, "float64.sum"},
                                  {WEFT_DTYPE_INT32, WEFT_OP_MAX, "int32.max"},
                                  {WEFT_DTYPE_FLOAT32, WEFT_OP_PRODUCT, "float32.prod"}};
  for (int k = 0; k < 4; k++) {
    size_t counts[] = {1, 7, 1000};
    for (int c = 0; c < 3; c++) test_allreduce(&kinds[k], counts[c], (uint64_t)(k * 10 + c));
  }
  test_allreduce(&kinds[0], (size_t)g_large, 99);
  test_fused(&kinds[0]);
  test_fused(&kinds[1]);
  test_allgather(0);
  test_allgather(1);
  test_broadcast(5);
  test_broadcast(1000);
  test_broadcast((size_t)g_large / 2); /* above WEFT_SMALL_BROADCAST_BYTES: the chain */
  return mp_teardown();
}
