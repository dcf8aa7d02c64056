/* mp_gather.c - the data-movement collectives: allgather (different dim 0
 * per rank, including 0 rows, 1-d/2-d/3-d, output library-owned and from a
 * caller allocator), broadcast from every root, alltoall (uneven splits with
 * zeros, unused trailing rows, NULL = even splits; received splits checked),
 * and barrier (named and unnamed; nobody leaves before everyone arrived).
 * Every element is checked against the sender's deterministic payload.
 *
 * Usage (under weftrun -np N): mp_gather [--large ROWS] [--seed S] */
#include "mp_harness.c"

static int64_t g_large = 1000003;
static uint64_t g_seed = 7;

/* ------------------------------------------------------------- allocator */
/* A caller allocator that records what the engine asked for. It runs on the
 * engine thread; the waiting thread reads the record after completion, which
 * the library must order (a data race here is a library bug under TSan). */
typedef struct alloc_rec {
  atomic_int calls;
  size_t bytes;
  void *ptr;
  int fail; /* return NULL */
} alloc_rec;

static void *rec_alloc(size_t bytes, void *ctx) {
  alloc_rec *a = ctx;
  atomic_fetch_add(&a->calls, 1);
  if (a->fail) return NULL;
  a->bytes = bytes;
  a->ptr = malloc(bytes ? bytes : 1);
  return a->ptr;
}

/* Checks an output descriptor against dtype/ndim/shape; 1 if it matches. */
static int check_desc(const char *what, const weft_tensor *out, weft_dtype dt, int ndim, const int64_t *shape) {
  if (out->dtype != dt || out->ndim != ndim)
    return mp_fail("%s: output dtype %d ndim %d, expected %d and %d", what, (int)out->dtype, out->ndim, (int)dt, ndim);
  for (int d = 0; d < ndim; d++)
    if (!out->shape || out->shape[d] != shape[d])
      return mp_fail("%s: output dim %d is %lld, expected %lld", what, d, out->shape ? (long long)out->shape[d] : -1LL,
                     (long long)shape[d]);
  if (!out->data && mp_numel(ndim, shape) > 0) return mp_fail("%s: output data is NULL", what);
  return 1;
}

/* ------------------------------------------------------------- allgather */
typedef struct ag_case {
  weft_dtype dt;
  int ndim;      /* 1..3; dims 1.. are {5} or {2, 3} */
  int rows_kind; /* 0: r % 3, 1: (3r + 1) % 4, 2: all zero, 3: large */
  int use_alloc;
} ag_case;

static int64_t ag_rows(const ag_case *c, int r) {
  switch (c->rows_kind) {
    case 0: return r % 3;
    case 1: return (3 * r + 1) % 4;
    case 2: return 0;
    default: return g_large / mp_size + 7 * r;
  }
}

typedef struct ag_job {
  ag_case c;
  char name[96];
  int64_t shape[3];
  size_t inner;
  void *in;
  alloc_rec rec;
  weft_request *req;
  uint64_t seed;
} ag_job;

static void ag_submit(ag_job *j, int idx) {
  static const int64_t inner2[1] = {5}, inner3[2] = {2, 3};
  j->shape[0] = ag_rows(&j->c, mp_rank);
  j->inner = 1;
  for (int d = 1; d < j->c.ndim; d++) {
    j->shape[d] = j->c.ndim == 2 ? inner2[d - 1] : inner3[d - 1];
    j->inner *= (size_t)j->shape[d];
  }
  j->seed = g_seed * 7919 + (uint64_t)idx;
  snprintf(j->name, sizeof j->name, "allgather.%d.%s.d%d.k%d.a%d", idx, weft_dtype_name(j->c.dt), j->c.ndim,
           j->c.rows_kind, j->c.use_alloc);
  size_t n = (size_t)j->shape[0] * j->inner;
  j->in = mp_alloc(n * mp_esize(j->c.dt));
  mp_fill(j->c.dt, j->in, 0, n, mp_rank, 0, j->seed);
  weft_tensor in = {j->c.dt, j->c.ndim, j->shape, j->in, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  if (j->c.use_alloc) {
    opt.alloc = rec_alloc;
    opt.alloc_ctx = &j->rec;
  }
  weft_status st = weft_allgather(mp_group, j->name, &in, &opt, &j->req);
  mp_submitted(st, &j->req, j->name);
}

static void ag_finish(ag_job *j) {
  size_t es = mp_esize(j->c.dt);
  int64_t total = 0;
  for (int r = 0; r < mp_size; r++) total += ag_rows(&j->c, r);
  int64_t want_shape[3] = {total, j->shape[1], j->shape[2]};
  void *data = NULL;
  if (mp_wait_ok(j->req, j->name)) {
    mp_check_algo(j->req, "ALLGATHER", NULL, j->name); /* a forced one ran */
    weft_tensor out;
    weft_status st = weft_request_output(j->req, &out);
    if (st != WEFT_OK)
      mp_fail("%s: weft_request_output: %s", j->name, weft_status_string(st));
    else if (check_desc(j->name, &out, j->c.dt, j->c.ndim, want_shape))
      data = out.data;
    if (j->c.use_alloc) {
      size_t want_bytes = (size_t)total * j->inner * es;
      if (atomic_load(&j->rec.calls) != 1)
        mp_fail("%s: allocator called %d times, expected once", j->name, atomic_load(&j->rec.calls));
      else if (j->rec.bytes != want_bytes)
        mp_fail("%s: allocator asked for %zu bytes, expected %zu", j->name, j->rec.bytes, want_bytes);
      if (data && data != j->rec.ptr) mp_fail("%s: output %p is not the allocated %p", j->name, data, j->rec.ptr);
    }
  }
  /* Memory from the allocator belongs to the caller: it must survive the
   * request (checked after the free; ASan catches a library free). */
  if (!j->c.use_alloc && data) {
    size_t off = 0;
    for (int r = 0; r < mp_size; r++) {
      size_t n = (size_t)ag_rows(&j->c, r) * j->inner;
      if (!mp_check_fill(j->c.dt, data, off, n, r, 0, j->seed, j->name)) break;
      off += n;
    }
  }
  weft_request_free(j->req);
  if (j->c.use_alloc && data) {
    size_t off = 0;
    for (int r = 0; r < mp_size; r++) {
      size_t n = (size_t)ag_rows(&j->c, r) * j->inner;
      if (!mp_check_fill(j->c.dt, data, off, n, r, 0, j->seed, j->name)) break;
      off += n;
    }
  }
  if (j->c.use_alloc) free(j->rec.ptr);
  free(j->in);
}

static void test_allgather(void) {
  enum { MAXJ = 64 };
  static ag_job jobs[MAXJ];
  int n = 0;
  memset(jobs, 0, sizeof jobs);
  /* Every dtype, 1-d, both row patterns, both output modes. */
  for (int dt = 0; dt < WEFT_DTYPE_COUNT_; dt++)
    for (int k = 0; k < 2; k++) jobs[n++].c = (ag_case){(weft_dtype)dt, 1, k, (dt + k) % 2};
  /* 2-d and 3-d, zeros everywhere, large. */
  static const weft_dtype some[4] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_INT8, WEFT_DTYPE_BFLOAT16, WEFT_DTYPE_INT64};
  for (int i = 0; i < 4; i++)
    for (int nd = 2; nd <= 3; nd++)
      for (int k = 0; k < 3; k++) jobs[n++].c = (ag_case){some[i], nd, k, (i + nd + k) % 2};
  jobs[n++].c = (ag_case){WEFT_DTYPE_FLOAT32, 1, 3, 0};
  jobs[n++].c = (ag_case){WEFT_DTYPE_UINT16, 2, 3, 1};

  /* Submitted in groups of 8 so that several are in flight at once. */
  for (int b = 0; b < n; b += 8) {
    int e = b + 8 < n ? b + 8 : n;
    for (int i = b; i < e; i++) ag_submit(&jobs[i], i);
    for (int i = b; i < e; i++) {
      mp_case("allgather %s %d-d rows=%s %s output", weft_dtype_name(jobs[i].c.dt), jobs[i].c.ndim,
              (const char *[]){"r%3", "(3r+1)%4", "zero", "large"}[jobs[i].c.rows_kind],
              jobs[i].c.use_alloc ? "allocator" : "library");
      ag_finish(&jobs[i]);
      mp_case_end();
    }
  }

  /* An allocator that fails on every rank: the request fails with
   * WEFT_ERR_NO_MEMORY everywhere, and the next allgather works. */
  mp_case("allgather allocator returns NULL -> WEFT_ERR_NO_MEMORY");
  ag_job j;
  memset(&j, 0, sizeof j);
  j.c = (ag_case){WEFT_DTYPE_INT32, 1, 1, 1};
  j.rec.fail = 1;
  ag_submit(&j, 99);
  weft_status st = mp_wait(j.req, j.name);
  if (st != WEFT_ERR_NO_MEMORY)
    mp_fail("status %s (%s), expected WEFT_ERR_NO_MEMORY", weft_status_string(st), weft_request_error(j.req));
  else if (!weft_request_error(j.req)[0])
    mp_fail("no error message");
  weft_request_free(j.req);
  free(j.in);
  memset(&j, 0, sizeof j);
  j.c = (ag_case){WEFT_DTYPE_INT32, 2, 0, 1};
  ag_submit(&j, 100);
  ag_finish(&j);
  mp_case_end();
}

/* ------------------------------------------------------------- broadcast */
static void test_broadcast(void) {
  static const weft_dtype dts[4] = {WEFT_DTYPE_UINT8, WEFT_DTYPE_FLOAT16, WEFT_DTYPE_INT64, WEFT_DTYPE_BOOL};
  for (int root = 0; root < mp_size; root++) {
    for (int d = 0; d < 4; d++) {
      /* counts: 0, a 0-d scalar, size-1, [7, 3], and the large one for
       * two of the dtypes. */
      enum { NC = 5 };
      int64_t shapes[NC][2] = {{0, 0}, {1, 0}, {mp_size - 1, 0}, {7, 3}, {g_large, 0}};
      int ndims[NC] = {1, 0, 1, 2, 1};
      int nc = (d == 0 || d == 2) ? NC : NC - 1;
      weft_dtype dt = dts[(d + root) % 4];
      weft_request *req[NC];
      void *buf[NC];
      size_t cnt[NC];
      char name[NC][64];
      uint64_t seed = g_seed * 104729 + (uint64_t)(root * 16 + d);
      mp_case("broadcast root %d %s", root, weft_dtype_name(dt));
      for (int c = 0; c < nc; c++) {
        cnt[c] = mp_numel(ndims[c], shapes[c]);
        buf[c] = mp_alloc(cnt[c] * mp_esize(dt));
        if (mp_rank == root)
          mp_fill(dt, buf[c], 0, cnt[c], root, 0, seed + (uint64_t)c * 131);
        else
          memset(buf[c], dt == WEFT_DTYPE_BOOL ? 0 : 0x5A, cnt[c] * mp_esize(dt));
        snprintf(name[c], sizeof name[c], "broadcast.r%d.%s.c%d", root, weft_dtype_name(dt), c);
        weft_tensor t = {dt, ndims[c], shapes[c], buf[c], WEFT_DEVICE_CPU, 0, NULL};
        weft_status st = weft_broadcast(mp_group, name[c], &t, root, NULL, &req[c]);
        mp_submitted(st, &req[c], name[c]);
      }
      for (int c = 0; c < nc; c++) {
        if (mp_wait_ok(req[c], name[c])) {
          weft_tensor out;
          if (weft_request_output(req[c], &out) != WEFT_OK || out.data != buf[c])
            mp_fail("%s: weft_request_output is not the caller's tensor", name[c]);
          mp_check_fill(dt, buf[c], 0, cnt[c], root, 0, seed + (uint64_t)c * 131, name[c]);
        }
        weft_request_free(req[c]);
        free(buf[c]);
      }
      mp_case_end();
    }
  }
}

/* ------------------------------------------------------------- alltoall */
typedef struct a2a_case {
  weft_dtype dt;
  int ndim; /* 1..3 */
  int kind; /* 0: uneven with zeros, 1: NULL splits, 2: all zero, 3: large uneven, 4: NULL with 0 rows */
  int use_alloc;
} a2a_case;

/* Rows rank r sends to rank j. */
static int64_t a2a_split(const a2a_case *c, int r, int j) {
  switch (c->kind) {
    case 0: return (r + 2 * j + c->ndim) % 3;
    case 1: return 2;
    case 2:
    case 4: return 0;
    default: return g_large / (4 * mp_size * mp_size) + 37 * r + j;
  }
}

/* Rows of rank r's input (at least the sum of its splits). */
static int64_t a2a_rows(const a2a_case *c, int r) {
  int64_t sum = 0;
  for (int j = 0; j < mp_size; j++) sum += a2a_split(c, r, j);
  return (c->kind == 0 || c->kind == 2) ? sum + (r % 2) + (c->kind == 2) : sum; /* unused trailing rows */
}

static void a2a_run(const a2a_case *c, int idx) {
  static const int64_t inner2[1] = {4}, inner3[2] = {3, 2};
  int64_t shape[3] = {a2a_rows(c, mp_rank), 0, 0};
  size_t inner = 1, es = mp_esize(c->dt);
  for (int d = 1; d < c->ndim; d++) {
    shape[d] = c->ndim == 2 ? inner2[d - 1] : inner3[d - 1];
    inner *= (size_t)shape[d];
  }
  uint64_t seed = g_seed * 1299709 + (uint64_t)idx;
  char name[96];
  snprintf(name, sizeof name, "alltoall.%d.%s.d%d.k%d.a%d", idx, weft_dtype_name(c->dt), c->ndim, c->kind,
           c->use_alloc);
  mp_case("alltoall %s %d-d %s %s output", weft_dtype_name(c->dt), c->ndim,
          (const char *[]){"uneven", "NULL splits", "zero splits", "large", "NULL splits 0 rows"}[c->kind],
          c->use_alloc ? "allocator" : "library");
  size_t n = (size_t)shape[0] * inner;
  void *in = mp_alloc(n * es);
  mp_fill(c->dt, in, 0, n, mp_rank, 0, seed);
  int64_t *splits = mp_alloc((size_t)mp_size * 8);
  for (int j = 0; j < mp_size; j++) splits[j] = a2a_split(c, mp_rank, j);
  int null_splits = c->kind == 1 || c->kind == 4;
  weft_tensor t = {c->dt, c->ndim, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  alloc_rec rec;
  memset(&rec, 0, sizeof rec);
  if (c->use_alloc) {
    opt.alloc = rec_alloc;
    opt.alloc_ctx = &rec;
  }
  weft_request *req = NULL;
  weft_status st = weft_alltoall(mp_group, name, &t, null_splits ? NULL : splits, &opt, &req);
  /* The descriptors are copied at submission: scribble over ours. */
  for (int j = 0; j < mp_size; j++) splits[j] = -99;
  shape[1] = -99;
  mp_submitted(st, &req, name);

  int64_t total = 0;
  for (int r = 0; r < mp_size; r++) total += a2a_split(c, r, mp_rank);
  int64_t want_shape[3] = {total, c->ndim > 1 ? (c->ndim == 2 ? inner2[0] : inner3[0]) : 0,
                           c->ndim > 2 ? inner3[1] : 0};
  void *data = NULL;
  if (mp_wait_ok(req, name)) {
    weft_tensor out;
    st = weft_request_output(req, &out);
    if (st != WEFT_OK)
      mp_fail("weft_request_output: %s", weft_status_string(st));
    else if (check_desc(name, &out, c->dt, c->ndim, want_shape))
      data = out.data;
    const int64_t *rs = NULL;
    int nrs = -1;
    st = weft_request_recv_splits(req, &rs, &nrs);
    if (st != WEFT_OK || !rs || nrs != mp_size) {
      mp_fail("weft_request_recv_splits: %s, n %d", weft_status_string(st), nrs);
    } else {
      for (int r = 0; r < mp_size; r++)
        if (rs[r] != a2a_split(c, r, mp_rank))
          mp_fail("received %lld rows from rank %d, expected %lld", (long long)rs[r], r,
                  (long long)a2a_split(c, r, mp_rank));
    }
    if (c->use_alloc) {
      if (atomic_load(&rec.calls) != 1)
        mp_fail("allocator called %d times", atomic_load(&rec.calls));
      else if (rec.bytes != (size_t)total * inner * es)
        mp_fail("allocator asked for %zu bytes", rec.bytes);
      if (data && data != rec.ptr) mp_fail("output is not the allocated buffer");
    }
    if (data) {
      size_t off = 0;
      for (int r = 0; r < mp_size; r++) {
        int64_t first_row = 0;
        for (int k = 0; k < mp_rank; k++) first_row += a2a_split(c, r, k);
        size_t rows = (size_t)a2a_split(c, r, mp_rank);
        if (!mp_check_fill(c->dt, data, off, rows * inner, r, (size_t)first_row * inner, seed, name)) break;
        off += rows * inner;
      }
    }
  }
  weft_request_free(req);
  if (c->use_alloc) free(rec.ptr);
  free(splits);
  free(in);
  mp_case_end();
}

static void test_alltoall(void) {
  int idx = 0;
  for (int dt = 0; dt < WEFT_DTYPE_COUNT_; dt++) {
    a2a_case c = {(weft_dtype)dt, 1 + dt % 3, dt % 2 ? 0 : 1, dt % 2};
    a2a_run(&c, idx++);
  }
  static const a2a_case more[] = {
      {WEFT_DTYPE_INT32, 1, 0, 0},   {WEFT_DTYPE_INT32, 2, 0, 1},    {WEFT_DTYPE_FLOAT64, 3, 0, 0},
      {WEFT_DTYPE_FLOAT32, 2, 1, 1}, {WEFT_DTYPE_UINT8, 1, 2, 0},    {WEFT_DTYPE_INT16, 2, 2, 1},
      {WEFT_DTYPE_FLOAT64, 2, 3, 0}, {WEFT_DTYPE_BFLOAT16, 1, 3, 1}, {WEFT_DTYPE_INT8, 3, 4, 0},
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) a2a_run(&more[i], idx++);
}

/* ------------------------------------------------------------- barrier */
static void test_barrier(void) {
  /* Ranks arrive staggered; every rank's leave time must be after every
   * rank's arrival (CLOCK_MONOTONIC is shared by the processes of a host). */
  for (int named = 1; named >= 0; named--) {
    mp_case("barrier %s: nobody leaves before all arrived", named ? "named" : "unnamed (call order)");
    mp_sleep_ms(40 * (mp_size - 1 - mp_rank));
    double arrive = mp_now();
    weft_request *req = NULL;
    weft_status st = weft_barrier(mp_group, named ? "barrier.stagger" : NULL, NULL, &req);
    mp_submitted(st, &req, "barrier");
    mp_wait_ok(req, "barrier");
    double leave = mp_now();
    weft_request_free(req);
    uint64_t *arr = mp_alloc((size_t)mp_size * 8);
    uint64_t a = (uint64_t)(arrive * 1e9), l = (uint64_t)(leave * 1e9);
    if (mp_allgather_u64(named ? "barrier.arrive.n" : "barrier.arrive.u", a, arr)) {
      for (int r = 0; r < mp_size; r++)
        if (arr[r] > l)
          mp_fail("left at %llu ns but rank %d arrived at %llu ns", (unsigned long long)l, r,
                  (unsigned long long)arr[r]);
    }
    free(arr);
    mp_case_end();
  }
  /* Several unnamed barriers in flight at once, matched by call order. */
  mp_case("barrier: 5 unnamed barriers in flight");
  weft_request *reqs[5];
  for (int i = 0; i < 5; i++) {
    weft_status st = weft_barrier(mp_group, NULL, NULL, &reqs[i]);
    mp_submitted(st, &reqs[i], "unnamed barrier");
  }
  for (int i = 0; i < 5; i++) {
    mp_wait_ok(reqs[i], "unnamed barrier");
    weft_request_free(reqs[i]);
  }
  mp_case_end();
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--large"))
      g_large = strtoll(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--seed"))
      g_seed = strtoull(argv[i + 1], NULL, 0);
  }
  mp_setup();
  test_barrier();
  test_allgather();
  test_broadcast();
  test_alltoall();
  return mp_teardown();
}
