/* mp_reduce.c - allreduce and reducescatter: every dtype x every reduce op,
 * element counts {0, 1, size-1, 7, large}, integer wrap-around and full-range
 * values, prescale/postscale on floats, in-place and out-of-place, caller-
 * and library-owned reducescatter output; checked element by element against
 * a reference that every rank computes from the inputs of all ranks.
 *
 * Usage (under weftrun -np N): mp_reduce [--large COUNT] [--seed S]
 *
 * Values are chosen so that the reference is exact: small integers for float
 * sums/min/max, products of +-1/+-2 (powers of two), scales of 0.5 and 2
 * (exact under any rounding rule: the exact scaling rules, Horovod's, are
 * checked bit for bit by unit.test_reduce and mp.fast_bits). Only AVERAGE
 * on floats (a division by the group size, rounded in the type) is compared
 * with a tolerance of about two units in the last place. Integer AVERAGE is
 * the wrapped sum divided by the size exactly, truncating toward zero (not
 * Horovod's sum * (1.0 / size), which can land below the quotient); bool
 * reduces as logic (sum/max: or, min/product: and) and has no average
 * (rejected at submission with WEFT_ERR_INVALID_ARGUMENT). */
#include "mp_harness.c"

enum { COLL_ALLREDUCE, COLL_REDUCESCATTER };
/* NORMAL: values that never overflow; FULL: integers near or over the type's
 * limits so that sums and products wrap and min/max see the extremes. */
enum { KIND_NORMAL, KIND_FULL };

typedef struct spec {
  int coll;
  weft_dtype dt;
  weft_reduce_op op;
  int kind;
  double pre, post;
  uint64_t seed;
  uint64_t key[16];                    /* per rank, from the seed: one mix per element after that */
  size_t nexp;                         /* tables below cover elements [0, nexp), nexp <= PERIOD */
  int64_t *exp_i;                      /* expected results, integer dtypes */
  double *exp_f;                       /* expected results, float dtypes */
  unsigned char *exp_bytes, *in_bytes; /* expected results and this rank's input, stored in the dtype */
} spec;

/* Inputs repeat with this period in the element index, so that the
 * reference is computed once per period, not once per element of the large
 * count (which would cost size hashes per element and dominate the run).
 * A prime: no segment, chunk or slice offset of the library is a multiple of
 * it, so a misplaced block still shows. Every output element is checked. */
#define PERIOD 65521u

/* A uniform value in [0, m) from the high half of h (no division). */
static inline uint64_t below(uint64_t h, uint64_t m) { return ((h >> 32) * m) >> 32; }

static void spec_keys(spec *s) {
  for (int r = 0; r < mp_size && r < 16; r++) s->key[r] = mp_hash((uint64_t)r, 0, s->seed);
}

/* The pseudo-random word behind rank r's element i: cheap, since the
 * reference evaluates it size times per element. */
static inline uint64_t elem_hash(const spec *s, int r, size_t i) {
  return mp_mix(s->key[r] ^ ((uint64_t)i * 0xd1b54a32d192ed03ULL));
}

static size_t g_large = 1000003;
static uint64_t g_seed = 1;

/* Half-range of the small integers: sums of every rank stay below 64, well
 * inside int8 and inside the exact-integer range of bfloat16 (256). */
static int small_range(void) { return 60 / (mp_size > 5 ? mp_size : 5); }

/* Rank r's input at element i, for integer and bool dtypes. */
static int64_t input_int(const spec *s, int r, size_t i) {
  i %= PERIOD;
  uint64_t h = elem_hash(s, r, i);
  weft_dtype t = s->dt;
  int R = small_range();
  if (t == WEFT_DTYPE_BOOL) {
    /* Biased so that the or (and) over ranks is 0 (1) about half the time. */
    int one_rare = below(h, (uint64_t)(2 * mp_size)) == 0;
    return (s->op == WEFT_OP_MIN || s->op == WEFT_OP_PRODUCT) ? !one_rare : one_rare;
  }
  if (s->kind == KIND_FULL) {
    if (s->op == WEFT_OP_SUM || s->op == WEFT_OP_AVERAGE) {
      /* Near the maximum on even elements, near the minimum on odd ones:
       * sums of two or more ranks wrap one way or the other. */
      int bits = (int)mp_esize(t) * 8;
      uint64_t span = below(h, 16);
      if (mp_is_unsigned(t)) {
        uint64_t max = bits == 64 ? UINT64_MAX : ((1ULL << bits) - 1);
        return mp_wrap(t, (i & 1) ? span : max - span);
      }
      uint64_t max = (1ULL << (bits - 1)) - 1;
      return (i & 1) ? mp_wrap(t, (max + 1) + span) : mp_wrap(t, max - span);
    }
    /* min/max/product: the whole range (odd, so products do not vanish). */
    return mp_wrap(t, h | 1);
  }
  if (s->op == WEFT_OP_PRODUCT) {
    if (i % 13 == 5 && (size_t)r == i % (size_t)mp_size) return 0;
    if (mp_is_unsigned(t)) return 1 + (int64_t)below(h, 3); /* 3^5 = 243 fits uint8 */
    static const int64_t pm[4] = {-2, -1, 1, 2};
    return pm[below(h, 4)];
  }
  if (mp_is_unsigned(t)) return (int64_t)below(h, (uint64_t)(2 * R + 1));
  return (int64_t)below(h, (uint64_t)(2 * R + 1)) - R;
}

/* Rank r's input at element i for float dtypes (before prescale). */
static double input_flt(const spec *s, int r, size_t i) {
  i %= PERIOD;
  uint64_t h = elem_hash(s, r, i);
  if (s->op == WEFT_OP_PRODUCT) {
    if (i % 13 == 5 && (size_t)r == i % (size_t)mp_size) return 0;
    static const double pm[4] = {-2, -1, 1, 2};
    return pm[below(h, 4)];
  }
  int R = small_range();
  return (double)((int64_t)below(h, (uint64_t)(2 * R + 1)) - R);
}

static int64_t combine_int(weft_dtype t, weft_reduce_op op, int64_t a, int64_t b) {
  if (t == WEFT_DTYPE_BOOL) {
    if (op == WEFT_OP_MIN || op == WEFT_OP_PRODUCT) return a && b;
    return a || b;
  }
  switch (op) {
    case WEFT_OP_SUM:
    case WEFT_OP_AVERAGE: return mp_wrap(t, (uint64_t)a + (uint64_t)b);
    case WEFT_OP_PRODUCT: return mp_wrap(t, (uint64_t)a * (uint64_t)b);
    case WEFT_OP_MIN: return a < b ? a : b;
    case WEFT_OP_MAX: return a > b ? a : b;
    default: return 0;
  }
}

/* The exact result at element i, integer dtypes. */
static int64_t expect_int(const spec *s, size_t i) {
  int64_t acc = input_int(s, 0, i);
  for (int r = 1; r < mp_size; r++) acc = combine_int(s->dt, s->op, acc, input_int(s, r, i));
  if (s->op == WEFT_OP_AVERAGE) /* exact truncating division in the type */
    acc = mp_is_unsigned(s->dt) ? (int64_t)((uint64_t)acc / (uint64_t)mp_size) : acc / mp_size;
  return acc;
}

/* The result at element i for float dtypes, computed in double; exact
 * except for AVERAGE. */
static double expect_flt(const spec *s, size_t i) {
  double acc = s->pre * input_flt(s, 0, i);
  for (int r = 1; r < mp_size; r++) {
    double x = s->pre * input_flt(s, r, i);
    switch (s->op) {
      case WEFT_OP_SUM:
      case WEFT_OP_AVERAGE: acc += x; break;
      case WEFT_OP_PRODUCT: acc *= x; break;
      case WEFT_OP_MIN: acc = x < acc ? x : acc; break;
      case WEFT_OP_MAX: acc = x > acc ? x : acc; break;
      default: break;
    }
  }
  if (s->op == WEFT_OP_AVERAGE) acc /= mp_size;
  return acc * s->post;
}

/* Two units in the last place of each float type, relative. */
static double avg_tolerance(weft_dtype t) {
  switch (t) {
    case WEFT_DTYPE_FLOAT16: return 0x1p-9;
    case WEFT_DTYPE_BFLOAT16: return 0x1p-6;
    case WEFT_DTYPE_FLOAT32: return 0x1p-22;
    default: return 0x1p-51;
  }
}

/* Copies n elements of a periodic table (element i is tab[i % PERIOD])
 * starting at element `first`, into dst. */
static void copy_periodic(void *dst, const unsigned char *tab, size_t es, size_t first, size_t n) {
  unsigned char *d = dst;
  while (n > 0) {
    size_t off = first % PERIOD, len = PERIOD - off < n ? PERIOD - off : n;
    memcpy(d, tab + off * es, len * es);
    d += len * es;
    first += len;
    n -= len;
  }
}

static void fill_input(const spec *s, void *buf, size_t n) { copy_periodic(buf, s->in_bytes, mp_esize(s->dt), 0, n); }

/* Tabulates the expected results of one period (or of max_count elements
 * if fewer). */
static void tabulate(spec *s, size_t max_count) {
  size_t es = mp_esize(s->dt);
  s->nexp = max_count < PERIOD ? max_count : PERIOD;
  s->exp_bytes = mp_alloc(s->nexp * es);
  s->in_bytes = mp_alloc(s->nexp * es);
  if (mp_is_float(s->dt)) {
    s->exp_f = mp_alloc(s->nexp * sizeof(double));
    for (size_t i = 0; i < s->nexp; i++) {
      s->exp_f[i] = expect_flt(s, i);
      mp_set_f(s->dt, s->exp_bytes, i, s->exp_f[i]);
      mp_set_f(s->dt, s->in_bytes, i, input_flt(s, mp_rank, i));
    }
  } else {
    s->exp_i = mp_alloc(s->nexp * sizeof(int64_t));
    for (size_t i = 0; i < s->nexp; i++) {
      s->exp_i[i] = expect_int(s, i);
      mp_set_i(s->dt, s->exp_bytes, i, s->exp_i[i]);
      mp_set_i(s->dt, s->in_bytes, i, input_int(s, mp_rank, i));
    }
  }
}

/* The element-by-element comparison behind check_result. */
static int check_elements(const spec *s, const void *buf, size_t first, size_t n, const char *what) {
  for (size_t k = 0; k < n; k++) {
    size_t i = first + k;
    if (mp_is_float(s->dt)) {
      double want = s->exp_f[i % PERIOD], got = mp_get_f(s->dt, buf, k);
      int ok = s->op == WEFT_OP_AVERAGE ? fabs(got - want) <= avg_tolerance(s->dt) * fabs(want) : got == want;
      if (!ok) return mp_fail("%s: element %zu is %.17g, expected %.17g", what, i, got, want);
    } else {
      int64_t want = s->exp_i[i % PERIOD], got = mp_get_i(s->dt, buf, k);
      if (got != want)
        return mp_fail("%s: element %zu is %lld, expected %lld", what, i, (long long)got, (long long)want);
    }
  }
  return 1;
}

/* Checks n result elements; element k of buf is global element first + k.
 * Fast path: whole periods compared as bytes; any difference (or a float
 * average, -0.0 ...) is decided element by element. */
static int check_result(const spec *s, const void *buf, size_t first, size_t n, const char *what) {
  size_t es = mp_esize(s->dt);
  const unsigned char *b = buf;
  while (n > 0) {
    size_t off = first % PERIOD, len = PERIOD - off < n ? PERIOD - off : n;
    if (memcmp(b, s->exp_bytes + off * es, len * es) != 0 && !check_elements(s, b, first, len, what)) return 0;
    b += len * es;
    first += len;
    n -= len;
  }
  return 1;
}

/* One in-flight collective of a case. */
typedef struct job {
  char name[128];
  int ndim;
  int64_t in_shape[2], out_shape[2];
  void *in, *out;         /* out may equal in (in place) or be NULL (library-owned) */
  size_t first, rows_out; /* reducescatter: this rank's first element and element count */
  weft_request *req;
} job;

/* Rows of dim 0 that rank r receives in a reducescatter of dim0 rows, and
 * the first of them. */
static void rs_slice(int64_t dim0, int r, int64_t *first, int64_t *rows) {
  int64_t base = dim0 / mp_size, extra = dim0 % mp_size;
  *rows = base + (r < extra);
  *first = r * base + (r < extra ? r : extra);
}

/* Inner (row) size of a reducescatter's rows for count index ci: rows of
 * 3 and 2 elements for two of the counts, scalars otherwise. Allreduce
 * tensors have count elements whatever their shape. */
static int64_t rs_inner(int ci) { return ci == 3 ? 3 : ci == 2 ? 2 : 1; }

static size_t elements_of(int coll, int ci, size_t count) {
  return coll == COLL_REDUCESCATTER ? count * (size_t)rs_inner(ci) : count;
}

/* Submits one collective of the case for count index ci. */
static void submit(const spec *s, int ci, size_t count, job *j) {
  size_t es = mp_esize(s->dt);
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.prescale = s->pre;
  opt.postscale = s->post;
  snprintf(j->name, sizeof j->name, "%s.%s.%s.k%d.p%g.q%g.c%d",
           s->coll == COLL_ALLREDUCE ? "allreduce" : "reducescatter", weft_dtype_name(s->dt),
           weft_reduce_op_name(s->op), s->kind, s->pre, s->post, ci);
  /* Shapes vary: a 0-d scalar for one element, a 2-d tensor, 1-d. */
  int64_t inner = 1;
  if (s->coll == COLL_ALLREDUCE) {
    if (count == 1) {
      j->ndim = 0;
    } else if (ci == 2) {
      j->ndim = 2;
      j->in_shape[0] = 1;
      j->in_shape[1] = (int64_t)count;
    } else {
      j->ndim = 1;
      j->in_shape[0] = (int64_t)count;
    }
    memcpy(j->out_shape, j->in_shape, sizeof j->in_shape);
  } else {
    inner = rs_inner(ci);
    j->ndim = inner > 1 ? 2 : 1;
    j->in_shape[0] = (int64_t)count;
    j->in_shape[1] = inner;
    count *= (size_t)inner;
  }
  j->in = mp_alloc(count * es);
  fill_input(s, j->in, count);
  weft_tensor in = {s->dt, j->ndim, j->in_shape, j->in, WEFT_DEVICE_CPU, 0, NULL};
  weft_status st;
  if (s->coll == COLL_ALLREDUCE) {
    /* Alternate in place and out of place (the large count is in place). */
    int in_place = (ci + (int)s->op) % 2 == 0 || count >= g_large;
    j->out = in_place ? j->in : mp_alloc(count * es);
    if (!in_place) memset(j->out, 0xA5, count * es);
    j->first = 0;
    j->rows_out = count;
    weft_tensor out = {s->dt, j->ndim, j->out_shape, j->out, WEFT_DEVICE_CPU, 0, NULL};
    st = weft_allreduce(mp_group, j->name, &in, &out, s->op, &opt, &j->req);
  } else {
    int64_t first, rows;
    rs_slice(j->in_shape[0], mp_rank, &first, &rows);
    j->first = (size_t)(first * inner);
    j->rows_out = (size_t)(rows * inner);
    j->out_shape[0] = rows;
    j->out_shape[1] = inner;
    /* Alternate caller-owned and library-owned output. */
    j->out = (ci + (int)s->op) % 2 == 0 ? NULL : mp_alloc(j->rows_out * es);
    if (j->out) memset(j->out, 0xA5, j->rows_out * es);
    weft_tensor out = {s->dt, j->ndim, j->out_shape, j->out, WEFT_DEVICE_CPU, 0, NULL};
    st = weft_reducescatter(mp_group, j->name, &in, &out, s->op, &opt, &j->req);
  }
  mp_submitted(st, &j->req, j->name);
}

static void finish(const spec *s, job *j) {
  if (mp_wait_ok(j->req, j->name)) {
    if (s->coll == COLL_ALLREDUCE) mp_check_algo(j->req, "ALLREDUCE", NULL, j->name); /* a forced one ran */
    weft_tensor out;
    weft_status st = weft_request_output(j->req, &out);
    if (st != WEFT_OK) {
      mp_fail("%s: weft_request_output: %s", j->name, weft_status_string(st));
    } else if (out.dtype != s->dt || out.ndim != j->ndim ||
               (j->ndim > 0 && memcmp(out.shape, j->out_shape, (size_t)j->ndim * 8) != 0)) {
      mp_fail("%s: output descriptor has dtype %d ndim %d, expected dtype %d ndim %d and the slice's shape", j->name,
              (int)out.dtype, out.ndim, (int)s->dt, j->ndim);
    } else if (j->out && out.data != j->out) {
      mp_fail("%s: output data %p is not the caller's buffer %p", j->name, out.data, j->out);
    } else if (!out.data && j->rows_out > 0) {
      mp_fail("%s: library-owned output is NULL", j->name);
    } else {
      check_result(s, out.data, j->first, j->rows_out, j->name);
    }
  }
  weft_request_free(j->req);
  if (j->out != j->in) free(j->out);
  free(j->in);
}

/* Average is not defined for bool: rejected at submission on every rank
 * (so nothing is left waiting for this rank). */
static void run_bool_average(const spec *s) {
  mp_case("%s bool average is rejected locally", s->coll == COLL_ALLREDUCE ? "allreduce" : "reducescatter");
  uint8_t in[4] = {1, 0, 1, 0}, out[4];
  int64_t shape[1] = {(int64_t)mp_size}, oshape[1] = {1};
  weft_tensor ti = {WEFT_DTYPE_BOOL, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor to = {WEFT_DTYPE_BOOL, 1, s->coll == COLL_ALLREDUCE ? shape : oshape, out, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = (weft_request *)(void *)in;
  weft_status st = s->coll == COLL_ALLREDUCE
                       ? weft_allreduce(mp_group, "bool.average", &ti, &to, WEFT_OP_AVERAGE, NULL, &req)
                       : weft_reducescatter(mp_group, "bool.average", &ti, &to, WEFT_OP_AVERAGE, NULL, &req);
  if (st != WEFT_ERR_INVALID_ARGUMENT || req != NULL)
    mp_fatal("status %s, expected WEFT_ERR_INVALID_ARGUMENT with *req NULL", weft_status_string(st));
  if (!weft_last_error()[0]) mp_fail("no message");
  mp_case_end();
}

/* Runs one case over a list of counts, all in flight at once. */
static void run_case(const spec *s_in, const size_t *counts, int ncounts) {
  spec keyed = *s_in;
  const spec *s = &keyed;
  spec_keys(&keyed);
  if (s->dt == WEFT_DTYPE_BOOL && s->op == WEFT_OP_AVERAGE) {
    run_bool_average(s);
    return;
  }
  size_t max_count = 0;
  for (int c = 0; c < ncounts; c++)
    if (elements_of(s->coll, c, counts[c]) > max_count) max_count = elements_of(s->coll, c, counts[c]);
  tabulate(&keyed, max_count);
  job jobs[8];
  memset(jobs, 0, sizeof jobs);
  mp_case("%s %s %s%s pre=%g post=%g", s->coll == COLL_ALLREDUCE ? "allreduce" : "reducescatter",
          weft_dtype_name(s->dt), weft_reduce_op_name(s->op), s->kind == KIND_FULL ? " full-range" : "", s->pre,
          s->post);
  for (int c = 0; c < ncounts; c++) submit(s, c, counts[c], &jobs[c]);
  for (int c = 0; c < ncounts; c++) finish(s, &jobs[c]);
  mp_case_end();
  free(keyed.exp_i);
  free(keyed.exp_f);
  free(keyed.exp_bytes);
  free(keyed.in_bytes);
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--large"))
      g_large = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--seed"))
      g_seed = strtoull(argv[i + 1], NULL, 0);
  }
  mp_setup();
  if (mp_size > 16) mp_fatal("this test supports at most 16 ranks");
  size_t counts[5] = {0, 1, (size_t)mp_size - 1, 7, g_large};
  size_t mid = g_large < 65537 ? g_large : 65537;
  size_t full_counts[3] = {1, 7, mid};
  size_t scale_counts[2] = {7, mid};
  static const double scales[3][2] = {{0.5, 1.0}, {1.0, 2.0}, {0.5, 2.0}};
  uint64_t seed = g_seed * 1000003;

  for (int coll = COLL_ALLREDUCE; coll <= COLL_REDUCESCATTER; coll++) {
    for (int dt = 0; dt < WEFT_DTYPE_COUNT_; dt++)
      for (int op = 0; op < WEFT_OP_COUNT_; op++) {
        spec s = {.coll = coll,
                  .dt = (weft_dtype)dt,
                  .op = (weft_reduce_op)op,
                  .kind = KIND_NORMAL,
                  .pre = 1,
                  .post = 1,
                  .seed = ++seed};
        run_case(&s, counts, 5);
      }
    for (int dt = 0; dt < WEFT_DTYPE_COUNT_; dt++) {
      if (mp_is_float((weft_dtype)dt) || dt == WEFT_DTYPE_BOOL) continue;
      for (int op = 0; op < WEFT_OP_COUNT_; op++) {
        /* int64's wrapped sum is not exact in double: its average would
         * test double rounding, not the library. */
        if (dt == WEFT_DTYPE_INT64 && op == WEFT_OP_AVERAGE) continue;
        spec s = {.coll = coll,
                  .dt = (weft_dtype)dt,
                  .op = (weft_reduce_op)op,
                  .kind = KIND_FULL,
                  .pre = 1,
                  .post = 1,
                  .seed = ++seed};
        run_case(&s, full_counts, 3);
      }
    }
    for (int dt = 0; dt < WEFT_DTYPE_COUNT_; dt++) {
      if (!mp_is_float((weft_dtype)dt)) continue;
      for (int op = 0; op < WEFT_OP_COUNT_; op++)
        for (int v = 0; v < 3; v++) {
          spec s = {.coll = coll,
                    .dt = (weft_dtype)dt,
                    .op = (weft_reduce_op)op,
                    .kind = KIND_NORMAL,
                    .pre = scales[v][0],
                    .post = scales[v][1],
                    .seed = ++seed};
          run_case(&s, scale_counts, 2);
        }
    }
  }
  return mp_teardown();
}
