/* mp_fast_colls.c - case "colls" of mp_fast (included by mp_fast.c): the
 * collectives that take the board's large slots (allgather, alltoall,
 * reducescatter, broadcast up to WEFT_FAST_LARGE_BYTES) against references
 * computed here, and the ones that must not (over the limit, uneven first
 * dimensions or splits: diverted, still right).
 *
 *   allgather      every dtype, rows {0, 1, 5}, and for 4 dtypes the most
 *                  that fit and one more,
 *                  rows of 3 elements; rank q's block is mp_fill(q); rows
 *                  that differ by rank (diverted)
 *   alltoall       every dtype, even splits (implicit and explicit; 4 dtypes
 *                  at the limit and over); block j
 *                  of rank q is mp_fill(q, index j * block); uneven splits
 *                  (diverted)
 *   reducescatter  every dtype x op x scales, first dimension n * 4 + 3, and
 *                  for 4 dtypes the largest that fits and one more: rank q's rows of the fold of every
 *                  rank's put_input (mp_fast_ref.c); with an output tensor
 *                  and without
 *   broadcast      the largest input that fits and one element more
 *   allocator      allgather through an output allocator; one returning
 *                  NULL on rank 1: WEFT_ERR_NO_MEMORY there only
 *   slots          12 pending 64 KiB allgathers (2 to 4 large slots): all right
 * Every result goes into the DIGEST (every rank's, allgathered: fast.sh
 * compares it across ranks and with WEFT_FAST=0). */
#ifndef MP_FAST_COLLS_C
#define MP_FAST_COLLS_C

#include "mp_fast_ref.c"

/* The dtypes whose inputs also run at the large slots' limit and just over
 * it (the references are computed element by element: all 11 would take
 * minutes under the sanitizers). */
static int big_dtype(weft_dtype t) {
  return t == WEFT_DTYPE_UINT8 || t == WEFT_DTYPE_BFLOAT16 || t == WEFT_DTYPE_FLOAT32 || t == WEFT_DTYPE_FLOAT64;
}

/* Rows of `row` elements of t that fit in a large slot. */
static size_t rows_fit(weft_dtype t, size_t row) { return g_large_bytes / (row * mp_esize(t)); }

static uint64_t digest_out(uint64_t d, weft_request *r) {
  weft_tensor out;
  if (weft_request_output(r, &out) == WEFT_OK && out.data)
    d = fnv_add(d, out.data, mp_numel(out.ndim, out.shape) * mp_esize(out.dtype));
  return d;
}

/* One allgather of rows x 3 (rank-dependent if uneven), checked. */
static void ag_check(weft_dtype t, size_t rows, int uneven, uint64_t seed, const char *name, uint64_t *digest) {
  size_t row = 3, mine = rows + (uneven ? (size_t)mp_rank : 0);
  int64_t shape[2] = {(int64_t)mine, (int64_t)row};
  void *in = mp_alloc(mine * row * mp_esize(t));
  mp_fill(t, in, 0, mine * row, mp_rank, 0, seed);
  weft_tensor x = {t, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  mp_submitted(weft_allgather(mp_group, name, &x, NULL, &r), &r, name);
  if (mp_wait_ok(r, name)) {
    weft_tensor out;
    size_t total = 0;
    for (int q = 0; q < mp_size; q++) total += rows + (uneven ? (size_t)q : 0);
    if (weft_request_output(r, &out) != WEFT_OK || out.ndim != 2 || out.shape[0] != (int64_t)total ||
        out.shape[1] != 3 || (total && !out.data)) {
      mp_fail("%s: output shape wrong", name);
    } else {
      size_t at = 0;
      for (int q = 0; q < mp_size; q++) {
        size_t k = (rows + (uneven ? (size_t)q : 0)) * row;
        if (!mp_check_fill(t, out.data, at, k, q, 0, seed, name)) break;
        at += k;
      }
      *digest = digest_out(*digest, r);
    }
  }
  weft_request_free(r);
  free(in);
}

/* One alltoall: dim0 = n * per rows of 2; explicit even splits if asked;
 * uneven: rank q sends per + (j == q) rows to j... (diverted). */
static void a2a_check(weft_dtype t, size_t per, int explicit_splits, int uneven, uint64_t seed, const char *name,
                      uint64_t *digest) {
  int n = mp_size;
  size_t row = 2, es = mp_esize(t);
  int64_t *splits = mp_alloc(sizeof(int64_t) * (size_t)n);
  size_t dim0 = 0;
  for (int j = 0; j < n; j++) {
    splits[j] = (int64_t)(per + (uneven && j == mp_rank ? 1 : 0));
    dim0 += (size_t)splits[j];
  }
  int64_t shape[2] = {(int64_t)dim0, (int64_t)row};
  void *in = mp_alloc(dim0 * row * es);
  size_t at = 0;
  for (int j = 0; j < n; j++) { /* block for j: my payload from index j * 1000000 */
    mp_fill(t, in, at, (size_t)splits[j] * row, mp_rank, (size_t)j * 1000000, seed);
    at += (size_t)splits[j] * row;
  }
  weft_tensor x = {t, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  mp_submitted(weft_alltoall(mp_group, name, &x, explicit_splits || uneven ? splits : NULL, NULL, &r), &r, name);
  if (mp_wait_ok(r, name)) {
    weft_tensor out;
    size_t rows = 0;
    for (int q = 0; q < n; q++) rows += per + (uneven && q == mp_rank ? 1 : 0);
    const int64_t *rs = NULL;
    int nrs = 0;
    if (weft_request_output(r, &out) != WEFT_OK || out.ndim != 2 || out.shape[0] != (int64_t)rows ||
        (rows && !out.data) || weft_request_recv_splits(r, &rs, &nrs) != WEFT_OK || nrs != n) {
      mp_fail("%s: output shape or receive splits wrong", name);
    } else {
      at = 0;
      for (int q = 0; q < n; q++) {
        size_t k = per + (uneven && q == mp_rank ? 1 : 0);
        if (rs[q] != (int64_t)k) {
          mp_fail("%s: receive split %d is %lld, expected %zu", name, q, (long long)rs[q], k);
          break;
        }
        if (!mp_check_fill(t, out.data, at, k * row, q, (size_t)mp_rank * 1000000, seed, name)) break;
        at += k * row;
      }
      *digest = digest_out(*digest, r);
    }
  }
  weft_request_free(r);
  free(in);
  free(splits);
}

/* One reducescatter of dim0 rows x 2 of spec s, checked against the fold. */
static void rs_check(const arspec *s, size_t dim0, int with_out, const char *name, uint64_t *digest) {
  int n = mp_size;
  size_t row = 2, es = mp_esize(s->t), total = dim0 * row;
  unsigned char *in = mp_alloc(total * es);
  for (size_t i = 0; i < total; i++) put_input(s, mp_rank, i, in, i);
  size_t first = 0, rows = dim0 / (size_t)n + ((size_t)mp_rank < dim0 % (size_t)n);
  for (int q = 0; q < mp_rank; q++) first += dim0 / (size_t)n + ((size_t)q < dim0 % (size_t)n);
  int64_t shape[2] = {(int64_t)dim0, (int64_t)row}, oshape[2] = {(int64_t)rows, (int64_t)row};
  unsigned char *obuf = with_out ? mp_alloc(rows * row * es) : NULL;
  weft_tensor x = {s->t, 2, shape, in, WEFT_DEVICE_CPU, 0, NULL}, o = {s->t, 2, oshape, obuf, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.prescale = s->pre;
  opt.postscale = s->post;
  weft_request *r = NULL;
  mp_submitted(weft_reducescatter(mp_group, name, &x, with_out ? &o : NULL, s->op, &opt, &r), &r, name);
  if (mp_wait_ok(r, name)) {
    weft_tensor out;
    if (weft_request_output(r, &out) != WEFT_OK || out.ndim != 2 || out.shape[0] != (int64_t)rows ||
        (rows && !out.data) || (with_out && out.data != obuf)) {
      mp_fail("%s: output wrong", name);
    } else {
      unsigned char want[8];
      for (size_t j = 0; j < rows * row; j++) {
        reference(s, n, first * row + j, want);
        if (memcmp(want, (unsigned char *)out.data + j * es, es)) {
          uint64_t g = 0, w = 0;
          memcpy(&g, (unsigned char *)out.data + j * es, es);
          memcpy(&w, want, es);
          mp_fail("%s %s %s dim0 %zu pre %g post %g: element %zu is 0x%llx, expected 0x%llx", name,
                  weft_dtype_name(s->t), weft_reduce_op_name(s->op), dim0, s->pre, s->post, j,
                  (unsigned long long)g, (unsigned long long)w);
          break;
        }
      }
      *digest = digest_out(*digest, r);
    }
  }
  weft_request_free(r);
  free(obuf);
  free(in);
}

typedef struct fail_alloc {
  int calls, fail;
  void *last;
} fail_alloc;
static void *alloc_cb(size_t bytes, void *ctx) {
  fail_alloc *a = ctx;
  a->calls++;
  return a->last = a->fail ? NULL : malloc(bytes ? bytes : 1);
}

static void case_colls(void) {
  uint64_t digest = 1469598103934665603ULL;
  int n = mp_size;
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    weft_dtype d = (weft_dtype)t;
    size_t fit = rows_fit(d, 3);
    mp_case("allgather %s: rows 0 1 5 %zu %zu, uneven", weft_dtype_name(d), fit, fit + 1);
    size_t rows[5] = {0, 1, 5, fit, fit + 1};
    int nc = big_dtype(d) ? 5 : 3;
    for (int c = 0; c < nc; c++) {
      char name[32];
      snprintf(name, sizeof name, "ag.%d", c);
      ag_check(d, rows[c], 0, (uint64_t)(t * 10 + c), name, &digest);
    }
    expect(nc == 5 ? 4 : 3, nc == 5 ? 4 : 3); /* all but fit + 1 */
    ag_check(d, 2, 1, (uint64_t)t, "ag.uneven", &digest);
    mp_case_end();

    size_t per = g_large_bytes / (2 * mp_esize(d)) / (size_t)n; /* rows of 2 per destination that fit */
    mp_case("alltoall %s: 0 1 %zu %zu rows per rank, explicit even splits, uneven", weft_dtype_name(d), per, per + 1);
    size_t pers[4] = {0, 1, per, per + 1};
    nc = big_dtype(d) ? 4 : 2;
    for (int c = 0; c < nc; c++) {
      char name[32];
      snprintf(name, sizeof name, "a2a.%d", c);
      a2a_check(d, pers[c], 0, 0, (uint64_t)(t * 10 + c), name, &digest);
    }
    a2a_check(d, 3, 1, 0, 7, "a2a.explicit", &digest);
    a2a_check(d, 3, 0, 1, 8, "a2a.uneven", &digest);
    expect(nc == 4 ? 4 : 3, nc == 4 ? 4 : 3); /* 0, 1, per and the explicit even splits */
    mp_case_end();
  }
  static const double sc[2][2] = {{1.0, 1.0}, {0.75, 1.5}};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    weft_dtype d = (weft_dtype)t;
    size_t fit = g_large_bytes / (2 * mp_esize(d));
    mp_case("reducescatter %s: every op, scales, first dimension %d, %zu and %zu", weft_dtype_name(d), n * 4 + 3,
            fit, fit + 1);
    for (int op = 0; op < WEFT_OP_COUNT_; op++)
      for (int k = 0; k < 2; k++) {
        if (t == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE) continue;
        arspec s = {d, (weft_reduce_op)op, sc[k][0], sc[k][1], (uint64_t)(t * 100 + op * 10 + k)};
        rs_check(&s, (size_t)n * 4 + 3, k, "rs.small", &digest);
        expect(1, 1);
        if (op == WEFT_OP_SUM && k == 1 && big_dtype(d)) { /* the big ones once per dtype */
          rs_check(&s, fit, !k, "rs.fit", &digest);
          rs_check(&s, fit + 1, k, "rs.over", &digest);
          expect(1, 1);
        }
      }
    mp_case_end();
  }
  mp_case("broadcast: %zu bytes and 4 more, from every root", g_large_bytes);
  for (int root = 0; root < n; root++)
    for (int c = 0; c < 2; c++) {
      size_t count = g_large_bytes / 4 + (size_t)c;
      void *buf = mp_alloc(count * 4);
      int64_t shape[1];
      weft_request *r = bc_submit(mp_group, c ? "bc.over" : "bc.fit", WEFT_DTYPE_INT32, buf, shape, count, root,
                                  mp_rank, 99);
      if (mp_wait_ok(r, "bc")) mp_check_fill(WEFT_DTYPE_INT32, buf, 0, count, root, 0, 99, "bc");
      digest = fnv_add(digest, buf, count * 4);
      weft_request_free(r);
      free(buf);
    }
  expect(n, n);
  mp_case_end();

  mp_case("allgather through an allocator; NULL from it on rank 1 only");
  for (int pass = 0; pass < 2; pass++) {
    fail_alloc fa = {0, pass == 1 && mp_rank == 1, NULL};
    int64_t shape[1] = {1000};
    int32_t *in = mp_alloc(1000 * 4);
    mp_fill(WEFT_DTYPE_INT32, in, 0, 1000, mp_rank, 0, 5);
    weft_tensor x = {WEFT_DTYPE_INT32, 1, shape, in, WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.alloc = alloc_cb;
    o.alloc_ctx = &fa;
    weft_request *r = NULL;
    mp_submitted(weft_allgather(mp_group, "ag.alloc", &x, &o, &r), &r, "ag.alloc");
    weft_status st = mp_wait(r, "ag.alloc");
    weft_tensor out;
    if (fa.fail) {
      if (st != WEFT_ERR_NO_MEMORY) mp_fail("ag.alloc: status %s, expected WEFT_ERR_NO_MEMORY", weft_status_string(st));
    } else if (st != WEFT_OK || fa.calls != 1 || weft_request_output(r, &out) != WEFT_OK || out.data != fa.last) {
      mp_fail("ag.alloc: status %s, %d allocator calls, output not the allocator's", weft_status_string(st), fa.calls);
    } else {
      for (int q = 0; q < n; q++) mp_check_fill(WEFT_DTYPE_INT32, out.data, (size_t)q * 1000, 1000, q, 0, 5, "ag.alloc");
      free(out.data);
    }
    weft_request_free(r);
    free(in);
  }
  expect(2, 2);
  mp_case_end();

  mp_case("12 pending 64 KiB allgathers (%d large slots)", g_large_slots);
  {
    enum { K = 12 };
    weft_request *r[K];
    void *in[K];
    int64_t shape[K][1];
    for (int k = 0; k < K; k++) {
      char name[32];
      snprintf(name, sizeof name, "ag.slots.%d", k);
      shape[k][0] = 16384;
      in[k] = mp_alloc(16384 * 4);
      mp_fill(WEFT_DTYPE_FLOAT32, in[k], 0, 16384, mp_rank, 0, (uint64_t)k);
      weft_tensor x = {WEFT_DTYPE_FLOAT32, 1, shape[k], in[k], WEFT_DEVICE_CPU, 0, NULL};
      r[k] = NULL;
      mp_submitted(weft_allgather(mp_group, name, &x, NULL, &r[k]), &r[k], name);
    }
    for (int k = 0; k < K; k++) {
      weft_tensor out;
      if (mp_wait_ok(r[k], "ag.slots") && weft_request_output(r[k], &out) == WEFT_OK)
        for (int q = 0; q < n; q++)
          if (!mp_check_fill(WEFT_DTYPE_FLOAT32, out.data, (size_t)q * 16384, 16384, q, 0, (uint64_t)k, "ag.slots"))
            break;
      weft_request_free(r[k]);
      free(in[k]);
    }
    expect(g_large_slots, K);
  }
  mp_case_end();
  /* results differ by rank: the digest of every rank's, the same everywhere */
  uint64_t *all = mp_alloc(sizeof(uint64_t) * (size_t)n);
  if (mp_allgather_u64("colls.digest", digest, all)) {
    expect(1, 1);
    mp_say("DIGEST colls np%d %016llx", n, (unsigned long long)fnv_add(1469598103934665603ULL, all, 8 * (size_t)n));
  }
  free(all);
}

#endif /* MP_FAST_COLLS_C */
