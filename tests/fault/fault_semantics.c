/* fault_semantics.c - the fault matrix's wrong-input cases, one rank program
 * run under weftrun: `fault_semantics CASE`. Like fault_peers.c it writes
 * PASS/FAIL/MEASURE lines to $FAULT_DIR/verdict.<rank>.
 *
 *  shape        (item 4) np 3: rank 2 allreduces [4, 6] where the others
 *               have [4, 5]: every rank gets WEFT_ERR_MISMATCH with the same
 *               message naming the tensor, both shapes and both ranks; the
 *               next collective works.
 *  mismatch     (item 5) np 3: rank 1 disagrees on dtype, reduce op,
 *               broadcast root, the collective itself, alltoall row shape,
 *               reducescatter op: same checks. Local misuse (unknown op or
 *               dtype, root out of range, bad alltoall splits) is rejected
 *               at once with WEFT_ERR_INVALID_ARGUMENT and nothing is
 *               submitted; then an uneven alltoall delivers the right rows.
 *  order        (item 6) np 3: A,B on even ranks vs B,A on odd ranks, then
 *               24 tensors in a different order on every rank: all complete
 *               with the right sums.
 *  never        (item 6) np 3, WEFT_TIMEOUT_SECONDS=3: rank 1 never submits
 *               'ghost': ranks 0 and 2 get WEFT_ERR_TIMEOUT naming rank 1
 *               and 'ghost', the same message, after 3 to 4 s; the job goes
 *               on.
 *  wrongsecret, wrongjob, wrongsize, duprank  (item 10): one rank joins with
 *               another secret / job id / world size / another rank's
 *               number; init fails fast with a specific message (rank 0,
 *               which cannot tell a wrong secret from an attacker, fails at
 *               WEFT_INIT_TIMEOUT_SECONDS naming the missing rank).
 *  shm_unusable (item 12) under WEFT_TRANSPORT=shm with /dev/shm full or
 *               read-only: init fails within 1 s naming /dev/shm and the
 *               way out (WEFT_TRANSPORT=tcp).
 *  rendezvous   (items 8, 9) np 2: rank 0 publishes its address (and the
 *               job's secret, for the attacker's replay) in $FAULT_DIR; rank
 *               1 joins only when $FAULT_DIR/go exists and times its
 *               weft_init against FAULT_INIT_BOUND; then a checked
 *               allreduce. */
#include "fault_rank_util.h"

static weft_tensor tensor(weft_dtype t, int ndim, const int64_t *shape, void *data) {
  return (weft_tensor){t, ndim, shape, data, WEFT_DEVICE_CPU, 0, NULL};
}

/* Waits for a request that must fail with `want` on every rank with one
 * message naming the tensor and every fragment in frags (NULL-terminated)
 * and ranks a and b. Returns the time from t0. */
static void expect_same_error(weft_request *req, weft_status st, double t0, weft_status want, const char *name,
                              const char *const *frags, int a, int b) {
  char msg[2048] = "";
  if (st == WEFT_OK) {
    st = fr_wait(req, 30, name);
    snprintf(msg, sizeof msg, "%s", weft_request_error(req));
    weft_request_free(req);
  } else {
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    fx_fail("%s: rejected at submission (%s: %s); only the coordinator can see a disagreement", name,
            weft_status_string(st), msg);
  }
  double dt = fx_now() - t0;
  if (st != want) fx_fail("%s: %s (\"%s\"), expected %s", name, weft_status_string(st), msg, weft_status_string(want));
  if (!fx_has(msg, name)) fx_fail("%s: message \"%s\" does not name the tensor", name, msg);
  for (; frags && *frags; frags++)
    if (!fx_has(msg, *frags)) fx_fail("%s: message \"%s\" lacks \"%s\"", name, msg, *frags);
  if (a >= 0 && (!fx_names_rank(msg, a) || !fx_names_rank(msg, b)))
    fx_fail("%s: message \"%s\" does not name ranks %d and %d", name, msg, a, b);
  char hname[300];
  snprintf(hname, sizeof hname, "%s.same", name);
  fr_same_message(hname, msg, ~0ULL);
  fx_measure(ITEM, name, 1.0, dt);
  fx_info("%s: \"%s\"", name, msg);
}

/* ------------------------------------------------------------ item 4 */
static int case_shape(void) {
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  float buf[24] = {0};
  int64_t shape[2] = {4, R == 2 ? 6 : 5};
  weft_tensor t = tensor(WEFT_DTYPE_FLOAT32, 2, shape, buf);
  weft_request *req = NULL;
  double t0 = fx_now();
  weft_status st = weft_allreduce(G, "shape.w", &t, &t, WEFT_OP_SUM, NULL, &req);
  const char *frags[] = {"[4, 5]", "[4, 6]", NULL};
  expect_same_error(req, st, t0, WEFT_ERR_MISMATCH, "shape.w", frags, 0, 2);
  if (fr_allreduce_ok("shape.next", 1000)) fx_pass("rank %d: the collective after the mismatch worked", R);
  fr_finalize(1.0);
  return fr_end();
}

/* ------------------------------------------------------------ item 5 */

/* Submits this rank's side of cross-rank mismatch k (rank 1 differs). */
static weft_status submit_mismatch(int k, const char *name, float *buf, weft_request **req) {
  int odd = R == 1;
  int64_t s6[1] = {6}, a2[2] = {3, odd ? 4 : 2};
  weft_tensor f6 = tensor(WEFT_DTYPE_FLOAT32, 1, s6, buf), i6 = tensor(WEFT_DTYPE_INT32, 1, s6, buf);
  weft_tensor at = tensor(WEFT_DTYPE_FLOAT32, 2, a2, buf);
  switch (k) {
    case 0:
      return weft_allreduce(G, name, odd ? &i6 : &f6, odd ? &i6 : &f6, WEFT_OP_SUM, NULL, req);
    case 1:
      return weft_allreduce(G, name, &f6, &f6, odd ? WEFT_OP_MAX : WEFT_OP_SUM, NULL, req);
    case 2:
      return weft_broadcast(G, name, &f6, odd ? 2 : 0, NULL, req);
    case 3:
      return odd ? weft_allgather(G, name, &f6, NULL, req) : weft_allreduce(G, name, &f6, &f6, WEFT_OP_SUM, NULL, req);
    case 4:
      return weft_alltoall(G, name, &at, NULL, NULL, req);
    default:
      return weft_reducescatter(G, name, &f6, NULL, odd ? WEFT_OP_MIN : WEFT_OP_SUM, NULL, req);
  }
}

/* A call that must be rejected locally: WEFT_ERR_INVALID_ARGUMENT, *req
 * NULL, a message naming the tensor. Re-arms the sentinel for the next. */
static void expect_invalid(const char *what, weft_status st, weft_request **req) {
  if (st != WEFT_ERR_INVALID_ARGUMENT)
    fx_fail("%s: %s, expected WEFT_ERR_INVALID_ARGUMENT", what, weft_status_string(st));
  else if (!fx_has(weft_last_error(), what))
    fx_fail("%s: message \"%s\" does not name the tensor", what, weft_last_error());
  if (*req) fx_fail("%s: *req is not NULL after a rejected call", what);
  *req = (weft_request *)1;
}

static void local_misuse(void) {
  float buf[64] = {0};
  int64_t s6[1] = {6}, s5[1] = {5}, bad[1] = {(int64_t)N + 1}, a[2] = {2 * (int64_t)N, 2};
  weft_tensor f6 = tensor(WEFT_DTYPE_FLOAT32, 1, s6, buf), f5 = tensor(WEFT_DTYPE_FLOAT32, 1, s5, buf);
  weft_tensor u6 = tensor((weft_dtype)77, 1, s6, buf), nd = tensor(WEFT_DTYPE_FLOAT32, 1, bad, buf);
  weft_tensor at = tensor(WEFT_DTYPE_FLOAT32, 2, a, buf);
  int64_t neg[64], big[64];
  for (int j = 0; j < N; j++) neg[j] = j == 1 ? -1 : 0, big[j] = 2;
  big[0] = 2 * (int64_t)N; /* sums to more than dim 0 */
  /* req starts as a sentinel: a rejected call must set it to NULL */
  weft_request *req = (weft_request *)1;
  expect_invalid("local.op", weft_allreduce(G, "local.op", &f6, &f6, (weft_reduce_op)99, NULL, &req), &req);
  expect_invalid("local.rsop", weft_reducescatter(G, "local.rsop", &f6, NULL, (weft_reduce_op)99, NULL, &req), &req);
  expect_invalid("local.dtype", weft_allreduce(G, "local.dtype", &u6, &u6, WEFT_OP_SUM, NULL, &req), &req);
  expect_invalid("local.shape", weft_allreduce(G, "local.shape", &f6, &f5, WEFT_OP_SUM, NULL, &req), &req);
  expect_invalid("local.root", weft_broadcast(G, "local.root", &f6, -1, NULL, &req), &req);
  expect_invalid("local.rootn", weft_broadcast(G, "local.rootn", &f6, N, NULL, &req), &req);
  expect_invalid("local.splitneg", weft_alltoall(G, "local.splitneg", &at, neg, NULL, &req), &req);
  expect_invalid("local.splitsum", weft_alltoall(G, "local.splitsum", &at, big, NULL, &req), &req);
  expect_invalid("local.splitdiv", weft_alltoall(G, "local.splitdiv", &nd, NULL, NULL, &req), &req);
  req = NULL;
  if (weft_alltoall(G, "local.msg", &at, big, NULL, &req) != WEFT_ERR_INVALID_ARGUMENT ||
      !fx_has(weft_last_error(), "weft_alltoall") || !fx_has(weft_last_error(), "local.msg"))
    fx_fail("bad splits: message \"%s\" does not name weft_alltoall and the tensor", weft_last_error());
  if (weft_allreduce(G, "local.msg", &f6, &f6, (weft_reduce_op)99, NULL, &req) != WEFT_ERR_INVALID_ARGUMENT ||
      !fx_has(weft_last_error(), "op"))
    fx_fail("unknown op: message \"%s\" does not mention the op", weft_last_error());
}

/* An uneven alltoall: rank s sends (s + j) % 3 rows to rank j, row k of
 * that block holding s * 1000 + j * 100 + k in both columns. */
static void uneven_alltoall(void) {
  int64_t rows = 2 * (int64_t)N, splits[64];
  float *buf = calloc((size_t)rows * 2, sizeof *buf);
  if (!buf) fr_fatal("out of memory");
  int64_t off = 0;
  for (int j = 0; j < N; j++) {
    splits[j] = (R + j) % 3;
    for (int64_t k = 0; k < splits[j]; k++)
      buf[(off + k) * 2] = buf[(off + k) * 2 + 1] = (float)(R * 1000 + j * 100 + k);
    off += splits[j];
  }
  int64_t shape[2] = {rows, 2};
  weft_tensor in = tensor(WEFT_DTYPE_FLOAT32, 2, shape, buf);
  weft_request *req = NULL;
  weft_status st = weft_alltoall(G, "uneven", &in, splits, NULL, &req);
  if (st == WEFT_OK) st = fr_wait(req, 30, "uneven");
  if (st != WEFT_OK) {
    fx_fail("uneven alltoall: %s: %s", weft_status_string(st), req ? weft_request_error(req) : weft_last_error());
  } else {
    weft_tensor out;
    const int64_t *rs;
    int nrs = 0;
    if (weft_request_output(req, &out) != WEFT_OK || weft_request_recv_splits(req, &rs, &nrs) != WEFT_OK || nrs != N)
      fx_fail("uneven alltoall: no output or received splits");
    else {
      const float *o = out.data;
      int64_t at = 0;
      for (int s = 0; s < N; s++) {
        if (rs[s] != (s + R) % 3)
          fx_fail("uneven alltoall: %lld rows from rank %d, expected %d", (long long)rs[s], s, (s + R) % 3);
        for (int64_t k = 0; k < rs[s] && k < 3; k++, at++)
          if (o[at * 2] != (float)(s * 1000 + R * 100 + k) || o[at * 2 + 1] != o[at * 2])
            fx_fail("uneven alltoall: row %lld from rank %d is %g, expected %d", (long long)k, s, o[at * 2],
                    s * 1000 + R * 100 + (int)k);
      }
    }
  }
  if (req) weft_request_free(req);
  free(buf);
}

static int case_mismatch(void) {
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  static const char *const frags[][3] = {{"float32", "int32", NULL}, {"sum", "max", NULL},
                                         {"root 0", "root 2", NULL}, {"allreduce", "allgather", NULL},
                                         {"[3, 2]", "[3, 4]", NULL}, {"sum", "min", NULL}};
  for (int k = 0; k < 6; k++) {
    float buf[64] = {0};
    char name[32];
    snprintf(name, sizeof name, "mm.%d", k);
    weft_request *req = NULL;
    double t0 = fx_now();
    weft_status st = submit_mismatch(k, name, buf, &req);
    expect_same_error(req, st, t0, WEFT_ERR_MISMATCH, name, frags[k], 0, 1);
  }
  local_misuse();
  uneven_alltoall();
  if (fr_allreduce_ok("mm.after", 1000) && !fx_failures) fx_pass("rank %d: every mismatch reported alike", R);
  fr_finalize(1.0);
  return fr_end();
}

/* ------------------------------------------------------------ item 6 */
static int case_order(void) {
  fr_join();
  enum { NT = 24 };
  int64_t *bufs[NT];
  int order[NT];
  weft_request *reqs[NT];
  for (int i = 0; i < NT; i++) {
    int n = 1 + (i * 37) % 700; /* different sizes: some fuse, some do not */
    bufs[i] = malloc(sizeof(int64_t) * (size_t)n);
    if (!bufs[i]) fr_fatal("out of memory");
    for (int k = 0; k < n; k++) bufs[i][k] = (int64_t)R * 100000 + i * 1000 + k;
    order[i] = i;
  }
  double t0 = fx_now();
  /* A,B vs B,A first: the two-tensor case of the matrix */
  int first = R % 2 ? 1 : 0;
  for (int s = 0; s < 2; s++) {
    int i = s ? 1 - first : first;
    int64_t shape[1] = {1 + (i * 37) % 700};
    weft_tensor t = tensor(WEFT_DTYPE_INT64, 1, shape, bufs[i]);
    char name[16];
    snprintf(name, sizeof name, "t.%d", i);
    if (weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &reqs[i]) != WEFT_OK)
      fr_fatal("submit: %s", weft_last_error());
  }
  /* then the other 22 shuffled with a seed of this rank's own */
  unsigned seed = 12345u + (unsigned)R * 7919u;
  for (int i = NT - 1; i > 2; i--) {
    seed = seed * 1103515245u + 12345u;
    int j = 2 + (int)((seed >> 8) % (unsigned)(i - 1));
    int x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  for (int s = 2; s < NT; s++) {
    int i = order[s];
    int64_t shape[1] = {1 + (i * 37) % 700};
    weft_tensor t = tensor(WEFT_DTYPE_INT64, 1, shape, bufs[i]);
    char name[16];
    snprintf(name, sizeof name, "t.%d", i);
    if (weft_allreduce(G, name, &t, &t, WEFT_OP_SUM, NULL, &reqs[i]) != WEFT_OK)
      fr_fatal("submit: %s", weft_last_error());
  }
  for (int i = 0; i < NT; i++) {
    char name[16];
    snprintf(name, sizeof name, "t.%d", i);
    weft_status st = fr_wait(reqs[i], 30, name);
    if (st != WEFT_OK) fx_fail("%s: %s: %s", name, weft_status_string(st), weft_request_error(reqs[i]));
    int n = 1 + (i * 37) % 700;
    for (int k = 0; st == WEFT_OK && k < n; k++) {
      int64_t want = 100000LL * N * (N - 1) / 2 + (int64_t)N * (i * 1000 + k);
      if (bufs[i][k] != want) {
        fx_fail("%s: element %d is %lld, expected %lld", name, k, (long long)bufs[i][k], (long long)want);
        break;
      }
    }
    weft_request_free(reqs[i]);
    free(bufs[i]);
  }
  fx_measure(ITEM, "any_order_completes", 10.0, fx_now() - t0);
  if (!fx_failures) fx_pass("rank %d: %d tensors in this rank's own order all completed correctly", R, NT);
  fr_finalize(1.0);
  return fr_end();
}

static int case_never(void) {
  const int absent = 1;
  double timeout = fx_env_num("WEFT_TIMEOUT_SECONDS", 300);
  fr_join();
  if (N < 3) fr_fatal("needs 3 ranks");
  if (!fr_allreduce_ok("warmup", 100)) fr_fatal("warm-up allreduce failed");
  char f[32], msg[2048] = "";
  if (R != absent) {
    float buf[8] = {0};
    int64_t shape[1] = {8};
    weft_tensor t = tensor(WEFT_DTYPE_FLOAT32, 1, shape, buf);
    weft_request *req = NULL;
    double t0 = fx_now();
    if (weft_allreduce(G, "ghost", &t, &t, WEFT_OP_SUM, NULL, &req) != WEFT_OK)
      fr_fatal("submit: %s", weft_last_error());
    weft_status st = fr_wait(req, timeout + 10, "ghost");
    double dt = fx_now() - t0;
    snprintf(msg, sizeof msg, "%s", weft_request_error(req));
    weft_request_free(req);
    fx_info("ghost: %s after %.2f s: \"%s\"", weft_status_string(st), dt, msg);
    if (st != WEFT_ERR_TIMEOUT) fx_fail("ghost ended %s, expected WEFT_ERR_TIMEOUT", weft_status_string(st));
    if (!fx_has(msg, "ghost") || !fx_names_rank(msg, absent))
      fx_fail("message \"%s\" does not name 'ghost' and rank %d", msg, absent);
    if (dt < timeout - 0.2) fx_fail("the timeout came early: %.2f s, WEFT_TIMEOUT_SECONDS=%g", dt, timeout);
    fx_measure(ITEM, "never_submitted_timeout", timeout + 1.0, dt);
    snprintf(f, sizeof f, "ghost_done.%d", R);
    fx_put(f, "1");
  } else {
    /* submits nothing until the others have their verdict: anything it
     * submitted meanwhile would run into the same short deadline */
    for (int r = 0; r < N; r++) {
      snprintf(f, sizeof f, "ghost_done.%d", r);
      if (r != absent && fx_wait_file(f, timeout + 15) != 0) fx_fail("rank %d never got its ghost verdict", r);
    }
  }
  uint64_t mask = ~0ULL & ~(1ULL << absent);
  fr_same_message("ghost.same", msg, mask);
  if (fr_allreduce_ok("after.ghost", 1000) && !fx_failures) fx_pass("rank %d: the job went on after the timeout", R);
  fr_finalize(1.0);
  return fr_end();
}

/* ------------------------------------------------------------ item 10 */

/* Joins with cfg; init must fail with `want` or `want2` (want WEFT_OK: any
 * error) within [lo, hi] s and a message holding every fragment. */
static int expect_init_failure(const weft_config *cfg, weft_status want, weft_status want2, double lo, double hi,
                               const char *const *frags, const char *what) {
  double t0 = fx_now();
  weft_world *w = NULL;
  weft_status st = weft_init(cfg, &w);
  double dt = fx_now() - t0;
  char msg[2048];
  snprintf(msg, sizeof msg, "%s", weft_last_error());
  fx_info("%s: weft_init %s after %.3f s: \"%s\"", what, weft_status_string(st), dt, msg);
  if (st == WEFT_OK) {
    fx_fail("%s: weft_init succeeded", what);
    weft_finalize(w);
    return fr_end();
  }
  if (w) fx_fail("%s: *out not NULL after a failed weft_init", what);
  if (want != WEFT_OK && st != want && st != want2)
    fx_fail("%s: %s, expected %s", what, weft_status_string(st), weft_status_string(want));
  for (; frags && *frags; frags++)
    if (!fx_has(msg, *frags)) fx_fail("%s: message \"%s\" lacks \"%s\"", what, msg, *frags);
  if (dt < lo) fx_fail("%s: failed after %.3f s, before %.1f s", what, dt, lo);
  fx_measure(ITEM, what, hi, dt);
  if (!fx_failures) fx_pass("%s", what);
  return fr_end();
}

static int case_join_wrong(const char *how) {
  double init_to = fx_env_num("WEFT_INIT_TIMEOUT_SECONDS", 60);
  weft_config cfg = WEFT_CONFIG_INIT;
  int odd = R == 1 || (!strcmp(how, "duprank") && R == 2);
  if (!strcmp(how, "wrongsecret") || !strcmp(how, "wrongjob")) {
    if (R == 1 && how[5] == 's') cfg.secret = "not-this-job's-secret";
    if (R == 1 && how[5] == 'j') setenv("WEFT_JOB_ID", "another-job", 1);
    if (odd) {
      const char *f[] = {"rejected our credentials", NULL};
      return expect_init_failure(&cfg, WEFT_ERR_AUTH, WEFT_ERR_AUTH, 0, 1.0, f, "init_wrong_peer");
    }
    /* rank 0 cannot tell a wrong secret from an attacker: it keeps waiting
     * and fails at its deadline naming the missing rank and the reason */
    const char *f[] = {"1", "MAC", NULL};
    return expect_init_failure(&cfg, WEFT_ERR_TIMEOUT, WEFT_ERR_TIMEOUT, init_to - 0.2, init_to + 1.0, f,
                               "init_rank0_deadline");
  }
  if (!strcmp(how, "wrongsize")) {
    if (odd) {
      cfg.size = N + 1;
      cfg.rank = R;
      const char *f[] = {"world size", NULL};
      return expect_init_failure(&cfg, WEFT_ERR_AUTH, WEFT_ERR_MISMATCH, 0, 1.0, f, "init_wrong_size_peer");
    }
    char sz[64], mine[64];
    snprintf(sz, sizeof sz, "world size %d", N + 1);
    snprintf(mine, sizeof mine, "rank 0 has %d", N);
    const char *f[] = {sz, mine, NULL};
    return expect_init_failure(&cfg, WEFT_ERR_MISMATCH, WEFT_ERR_MISMATCH, 0, 1.0, f, "init_wrong_size_rank0");
  }
  /* duprank: rank 2 claims to be rank 1 */
  if (R == 2) cfg.rank = 1, cfg.size = N;
  const char *f[] = {"rank 1", "twice", NULL};
  return expect_init_failure(&cfg, R == 0 ? WEFT_ERR_INVALID_ARGUMENT : WEFT_ERR_ABORTED, WEFT_ERR_ABORTED, 0, 1.0, f,
                             R == 0 ? "init_duprank_rank0" : "init_duprank_peer");
}

/* ------------------------------------------------------------ item 12 */
/* WEFT_TRANSPORT=shm with /dev/shm full or read-only (fault_test.sh mounts
 * it so in a private mount namespace): every rank's init fails at once with
 * a message that says what to do. */
static int case_shm_unusable(void) {
  const char *f[] = {"/dev/shm", "WEFT_TRANSPORT=tcp", NULL};
  return expect_init_failure(NULL, WEFT_OK, WEFT_OK, 0, 1.0, f, "init_shm_unusable");
}

/* ------------------------------------------------------------ items 8, 9 */
static int case_rendezvous(void) {
  ITEM = getenv("FAULT_ITEM") ? getenv("FAULT_ITEM") : "8";
  if (R == 0) {
    fx_put("secret", "%s", getenv("WEFT_SECRET") ? getenv("WEFT_SECRET") : "");
    fx_put("jobid", "%s", getenv("WEFT_JOB_ID") ? getenv("WEFT_JOB_ID") : "");
    fx_put("addr", "%s", getenv("WEFT_ADDR") ? getenv("WEFT_ADDR") : "");
  } else if (fx_wait_file("go", 30) != 0) {
    fr_fatal("no go from the test script");
  }
  double t0 = fx_now();
  fr_join();
  double dt = fx_now() - t0;
  if (R != 0)
    fx_measure(ITEM, getenv("FAULT_WHAT") ? getenv("FAULT_WHAT") : "rendezvous", fx_env_num("FAULT_INIT_BOUND", 10),
               dt);
  if (fr_allreduce_ok("after.rendezvous", 1000) && !fx_failures) fx_pass("rank %d: the job completed", R);
  fr_finalize(1.0);
  return fr_end();
}

int main(int argc, char **argv) {
  const char *c = argc >= 2 ? argv[1] : "";
  if (!strcmp(c, "shape")) return fr_begin("4"), case_shape();
  if (!strcmp(c, "mismatch")) return fr_begin("5"), case_mismatch();
  if (!strcmp(c, "order")) return fr_begin("6"), case_order();
  if (!strcmp(c, "never")) return fr_begin("6"), case_never();
  if (!strcmp(c, "wrongsecret") || !strcmp(c, "wrongjob") || !strcmp(c, "wrongsize") || !strcmp(c, "duprank"))
    return fr_begin("10"), case_join_wrong(c);
  if (!strcmp(c, "rendezvous")) return fr_begin("8"), case_rendezvous();
  if (!strcmp(c, "shm_unusable")) return fr_begin("12"), case_shm_unusable();
  fprintf(stderr,
          "usage: fault_semantics shape|mismatch|order|never|wrongsecret|wrongjob|wrongsize|duprank|rendezvous|"
                  "shm_unusable\n");
  return 2;
}
