/* mp_permute.c - weft_permute (TensorFlow's CollectivePermute): rank r's
 * tensor goes to perm[r]. Results: every rank checks every element of what
 * it received against the payload of the rank q with perm[q] == r, which it
 * computes itself (the inverse is computed here, not taken from weft), for
 * the identity, a cycle, the reverse cycle, a swap of neighbours and a
 * seeded random permutation, several dtypes, 0 elements, a 0-d scalar, a
 * large tensor and in place. Errors: a perm that is no permutation (out of
 * range, a duplicate, wrong length) is refused locally at once with a
 * message naming the entries; ranks passing different perms all get
 * WEFT_ERR_MISMATCH naming rank 0, the differing rank, the first index and
 * both values; a dtype and a shape that differ too; after each error a
 * permute succeeds (the world stays healthy).
 *
 * Usage (under weftrun -np N): mp_permute [--large N] [--seed S] */
#include "mp_harness.c"

static int64_t g_large = 1000003;
static uint64_t g_seed = 11;

/* kind 0: identity, 1: r -> r + 1, 2: r -> r - 1, 3: swap 2k <-> 2k+1 (an
 * odd last rank stays), 4: a seeded shuffle (the same on every rank). */
static void make_perm(int kind, int n, uint64_t seed, int *perm) {
  for (int r = 0; r < n; r++) {
    switch (kind) {
      case 0: perm[r] = r; break;
      case 1: perm[r] = (r + 1) % n; break;
      case 2: perm[r] = (r + n - 1) % n; break;
      case 3: perm[r] = (r ^ 1) < n ? (r ^ 1) : r; break;
      default: perm[r] = r; break;
    }
  }
  if (kind == 4)
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates from the seed */
      int j = (int)(mp_hash(77, (uint64_t)i, seed) % (uint64_t)(i + 1));
      int t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
}

static const char *const k_kinds[5] = {"identity", "cycle", "reverse cycle", "swap", "shuffle"};

static void test_results(void) {
  static const weft_dtype dts[5] = {WEFT_DTYPE_FLOAT32, WEFT_DTYPE_INT64, WEFT_DTYPE_UINT8, WEFT_DTYPE_FLOAT16,
                                    WEFT_DTYPE_BOOL};
  int *perm = mp_alloc(sizeof(int) * (size_t)mp_size);
  for (int kind = 0; kind < 5; kind++) {
    for (int d = 0; d < 5; d++) {
      weft_dtype dt = dts[(d + kind) % 5];
      uint64_t seed = g_seed * 7919 + (uint64_t)(kind * 8 + d);
      make_perm(kind, mp_size, seed, perm);
      int src = -1; /* who sends to this rank: computed here */
      for (int q = 0; q < mp_size; q++)
        if (perm[q] == mp_rank) src = q;
      enum { NC = 7 };
      /* 0 elements, a 0-d scalar, 1, [5, 3], 37 in place; for two dtypes
       * large, and large in place (beyond a ring's slots: the send must not
       * read what the receive wrote) */
      int64_t shapes[NC][2] = {{0, 0}, {1, 0}, {1, 0}, {5, 3}, {37, 0}, {g_large, 0}, {g_large, 0}};
      int ndims[NC] = {1, 0, 1, 2, 1, 1, 1};
      int nc = (d < 2) ? NC : NC - 2;
      weft_request *req[NC];
      void *in[NC], *out[NC];
      size_t cnt[NC];
      char name[NC][64];
      mp_case("permute %s %s", k_kinds[kind], weft_dtype_name(dt));
      for (int c = 0; c < nc; c++) {
        int inplace = c == 4 || c == 6;
        cnt[c] = mp_numel(ndims[c], shapes[c]);
        in[c] = mp_alloc(cnt[c] * mp_esize(dt));
        mp_fill(dt, in[c], 0, cnt[c], mp_rank, 0, seed + (uint64_t)c * 131);
        out[c] = inplace ? in[c] : mp_alloc(cnt[c] * mp_esize(dt));
        if (!inplace) memset(out[c], dt == WEFT_DTYPE_BOOL ? 0 : 0x5A, cnt[c] * mp_esize(dt));
        snprintf(name[c], sizeof name[c], "permute.k%d.%s.c%d", kind, weft_dtype_name(dt), c);
        weft_tensor ti = {dt, ndims[c], shapes[c], in[c], WEFT_DEVICE_CPU, 0, NULL};
        weft_tensor to = {dt, ndims[c], shapes[c], out[c], WEFT_DEVICE_CPU, 0, NULL};
        mp_submitted(weft_permute(mp_group, name[c], &ti, &to, perm, mp_size, NULL, &req[c]), &req[c], name[c]);
      }
      for (int c = 0; c < nc; c++) {
        if (mp_wait_ok(req[c], name[c])) {
          weft_tensor o;
          if (weft_request_output(req[c], &o) != WEFT_OK || o.data != out[c] || o.ndim != ndims[c])
            mp_fail("%s: weft_request_output is not the caller's output tensor", name[c]);
          if (strcmp(weft_request_algorithm(req[c]), "direct"))
            mp_fail("%s: algorithm '%s', expected 'direct'", name[c], weft_request_algorithm(req[c]));
          mp_check_fill(dt, out[c], 0, cnt[c], src, 0, seed + (uint64_t)c * 131, name[c]);
          /* the input is untouched (unless in place) */
          if (out[c] != in[c]) mp_check_fill(dt, in[c], 0, cnt[c], mp_rank, 0, seed + (uint64_t)c * 131, name[c]);
        }
        weft_request_free(req[c]);
        if (out[c] != in[c]) free(out[c]);
        free(in[c]);
      }
      mp_case_end();
    }
  }
  free(perm);
}

/* One small permute of len (<= 16) 4-byte elements (element i of rank q
 * is q * 100 + i) under name with perm: its status, the error in msg; an
 * int32 one that succeeds has its result checked. */
static weft_status run_one(const char *name, weft_dtype dt, int64_t len, const int *perm, char *msg, size_t msglen) {
  int64_t shape[1] = {len};
  int32_t inb[16], outb[16];
  for (int i = 0; i < 16; i++) inb[i] = mp_rank * 100 + i;
  weft_tensor ti = {dt, 1, shape, inb, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor to = {dt, 1, shape, outb, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  mp_submitted(weft_permute(mp_group, name, &ti, &to, perm, mp_size, NULL, &req), &req, name);
  weft_status st = mp_wait(req, name);
  snprintf(msg, msglen, "%s", weft_request_error(req));
  if (st == WEFT_OK && dt == WEFT_DTYPE_INT32) {
    int src = -1;
    for (int q = 0; q < mp_size; q++)
      if (perm[q] == mp_rank) src = q;
    for (int64_t i = 0; i < len; i++)
      if (outb[i] != src * 100 + i) {
        snprintf(msg, msglen, "element %lld is %d, expected %d (from rank %d)", (long long)i, outb[i],
                 (int)(src * 100 + i), src);
        st = WEFT_ERR_INTERNAL;
        break;
      }
  }
  weft_request_free(req);
  return st;
}

static void healthy_after(const char *what) {
  int *perm = mp_alloc(sizeof(int) * (size_t)mp_size);
  make_perm(1, mp_size, 0, perm);
  char msg[512], name[96];
  snprintf(name, sizeof name, "permute.after.%s", what);
  weft_status st = run_one(name, WEFT_DTYPE_INT32, 9, perm, msg, sizeof msg);
  if (st != WEFT_OK) mp_fail("a permute after %s: %s: %s", what, weft_status_string(st), msg);
  free(perm);
}

static void test_local_errors(void) {
  mp_case("permute: no permutation, refused locally");
  int n = mp_size;
  int *perm = mp_alloc(sizeof(int) * (size_t)(n + 1));
  int64_t shape[1] = {4};
  float buf[4] = {0}, obuf[4];
  weft_tensor ti = {WEFT_DTYPE_FLOAT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor to = {WEFT_DTYPE_FLOAT32, 1, shape, obuf, WEFT_DEVICE_CPU, 0, NULL};
  for (int c = 0; c < 5; c++) {
    char want[160];
    int len = n;
    const int *pp = perm;
    make_perm(0, n + 1, 0, perm);
    if (c == 0) { /* out of range */
      perm[n - 1] = n;
      snprintf(want, sizeof want, "perm[%d] = %d is not a rank of the group (0..%d)", n - 1, n, n - 1);
    } else if (c == 1) { /* negative */
      perm[n - 1] = -1;
      snprintf(want, sizeof want, "perm[%d] = -1 is not a rank of the group", n - 1);
    } else if (c == 2) { /* a duplicate */
      if (n < 2) continue;
      perm[n - 1] = 0;
      snprintf(want, sizeof want, "perm[0] and perm[%d] are both 0 (rank 0 would receive two tensors)", n - 1);
    } else if (c == 3) { /* the wrong length */
      len = n + 1;
      snprintf(want, sizeof want, "perm has %d entries for a group of %d ranks", n + 1, n);
    } else {
      pp = NULL;
      snprintf(want, sizeof want, "perm is NULL");
    }
    weft_request *req = (weft_request *)&req; /* must come back NULL */
    weft_status st = weft_permute(mp_group, "permute.bad", &ti, &to, pp, len, NULL, &req);
    const char *msg = weft_last_error();
    if (st != WEFT_ERR_INVALID_ARGUMENT || req)
      mp_fail("case %d: status %s, req %p; expected WEFT_ERR_INVALID_ARGUMENT and NULL", c, weft_status_string(st),
              (void *)req);
    else if (!strstr(msg, want) || !strstr(msg, "weft_permute('permute.bad')"))
      mp_fail("case %d: message '%s' does not name the tensor and say '%s'", c, msg, want);
  }
  free(perm);
  healthy_after("local errors");
  mp_case_end();
}

/* The last rank passes another perm, dtype or shape than the others. */
static void test_mismatch(void) {
  if (mp_size < 2) return;
  int last = mp_size - 1;
  int *perm = mp_alloc(sizeof(int) * (size_t)mp_size), *p0 = mp_alloc(sizeof(int) * (size_t)mp_size);
  char msg[1024], want[256];

  mp_case("permute: perms differ between ranks");
  /* the others: the identity; the last rank: a cycle (perm[0] is 0 and 1) */
  make_perm(0, mp_size, 0, p0);
  int *theirs = mp_alloc(sizeof(int) * (size_t)mp_size), i0 = -1;
  make_perm(1, mp_size, 0, theirs);
  memcpy(perm, mp_rank == last ? theirs : p0, sizeof(int) * (size_t)mp_size);
  for (int i = 0; i < mp_size && i0 < 0; i++)
    if (theirs[i] != p0[i]) i0 = i;
  if (i0 < 0) mp_fatal("test setup: the two perms are equal on %d ranks", mp_size);
  weft_status st = run_one("permute.mismatch.perm", WEFT_DTYPE_FLOAT32, 4, perm, msg, sizeof msg);
  snprintf(want, sizeof want, "mismatched permutations: rank 0 has perm[%d] = %d, rank %d has perm[%d] = %d", i0,
           p0[i0], last, i0, theirs[i0]);
  free(theirs);
  if (st != WEFT_ERR_MISMATCH || !strstr(msg, want) || !strstr(msg, "permute.mismatch.perm"))
    mp_fail("status %s, message '%s'; expected WEFT_ERR_MISMATCH with '%s'", weft_status_string(st), msg, want);
  healthy_after("perm mismatch");
  mp_case_end();

  mp_case("permute: dtypes differ between ranks");
  make_perm(1, mp_size, 0, perm);
  st = run_one("permute.mismatch.dtype", mp_rank == last ? WEFT_DTYPE_INT32 : WEFT_DTYPE_FLOAT32, 4, perm, msg,
               sizeof msg);
  snprintf(want, sizeof want, "mismatched dtypes: rank 0 has float32, rank %d has int32", last);
  if (st != WEFT_ERR_MISMATCH || !strstr(msg, want))
    mp_fail("status %s, message '%s'; expected WEFT_ERR_MISMATCH with '%s'", weft_status_string(st), msg, want);
  mp_case_end();

  mp_case("permute: shapes differ between ranks");
  st = run_one("permute.mismatch.shape", WEFT_DTYPE_FLOAT32, mp_rank == last ? 5 : 4, perm, msg, sizeof msg);
  snprintf(want, sizeof want, "mismatched permute shapes: rank 0 has [4], rank %d has [5]", last);
  if (st != WEFT_ERR_MISMATCH || !strstr(msg, want))
    mp_fail("status %s, message '%s'; expected WEFT_ERR_MISMATCH with '%s'", weft_status_string(st), msg, want);
  healthy_after("shape mismatch");
  mp_case_end();
  free(perm);
  free(p0);
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--large"))
      g_large = strtoll(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--seed"))
      g_seed = strtoull(argv[i + 1], NULL, 0);
  }
  mp_setup();
  test_results();
  test_local_errors();
  test_mismatch();
  return mp_teardown();
}
