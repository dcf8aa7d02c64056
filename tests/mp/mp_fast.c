/* mp_fast.c - the one-host fast path (src/engine/onehost.c, src/negotiate/board.c): small
 * allreduces, broadcasts and barriers of groups whose members all share this
 * host complete in shared memory; the rest, and every round not complete
 * within WEFT_FAST_WAIT_SECONDS, take the coordinator path.
 *
 * Usage (under weftrun -np N, every rank on this host): mp_fast CASE [ARG]
 *   bits       every dtype x op x scales x counts {0, 1, 7, max, max + 1}
 *              (max = the most elements in WEFT_FAST_BYTES), and for 4
 *              dtypes the most in WEFT_FAST_ALLREDUCE_BYTES and one more,
 *              equal a left
 *              fold in rank order computed here, bit for bit; broadcasts of
 *              the same counts from every root; named and unnamed barriers
 *   colls      allgather, alltoall, reducescatter and broadcast through the
 *              large slots (mp_fast_colls.c)
 *   mismatch   shape, dtype, over-the-limit, op, root, prescale and kind
 *              mismatches: WEFT_ERR_MISMATCH with the same message on every
 *              rank ("MSG" lines, compared by fast.sh with WEFT_FAST=0); then
 *              the names again, correct and fast
 *   skew       one rank submits 0.8 s late (last rank, then rank 0): right
 *              result, the early ranks' requests diverted; then fast again
 *   order      six names (allreduce, broadcast, barrier) submitted and
 *              waited for (weft_wait or weft_test) in rank-dependent orders
 *   join       rank r runs r + 2 steps then joins: right sums, fast before
 *   stall | stall-poll DIR   rank 2 (of 3) never submits 'stuck': the others
 *              (waiting, or polling weft_test only) fail with the stall
 *              shutdown naming it; then the job works (DIR/released syncs)
 *   kill K     rank K submits a large allgather and SIGKILLs itself; the
 *              others submit it 200 ms later and fail naming rank K within
 *              15 s; then rank K is gone while the others wait on a fast
 *              allreduce: they fail naming it within 15 s; nothing of the job
 *              left in /dev/shm
 *   stop K     rank K submits a large allgather (a remote round: fast.sh
 *              sets WEFT_FAST_CMA_BYTES) and stops
 *              before the others arrive; they read its input and wait for
 *              its claim: each fails naming rank K within 15 s (its lost
 *              heartbeats), finalize is prompt
 *   stopsplit K  rank K submits a 512 KiB allreduce (a split round) and
 *              stops; the others arrive 200 ms later and complete it within
 *              2 s, K's input summed (they fold its slice); their next op
 *              fails naming rank K (WEFT_FAST_WAIT_SECONDS=5: the two may
 *              arrive far apart on a loaded machine)
 *   killdone K  the others submit an allreduce and look away; rank K
 *              arrives last, sees it complete and SIGKILLs itself; the
 *              others look 500 ms later, after their engines failed the
 *              world: the allreduce still completes, every input summed;
 *              their next op fails naming rank K
 *   detached   a freed pending fast request, then its name again; a
 *              weft_test loop; callback requests (engine path) alongside
 *   threads T  T threads per rank with their own names, grouped allreduces
 *              mixed in
 *   groups     process sets {1..N-1} and {0, N-1} next to the world group,
 *              and a set of one rank
 *   names      1100 unnamed barriers and 40 new names (the board's table of
 *              names fills up): still right
 *   many       100 pending allreduces over 64 bytes (the board has 64 data
 *              slots for those) and 100 under: all right
 *   deadline DIR  WEFT_TIMEOUT_SECONDS=2, WEFT_FAST_WAIT_SECONDS=30: a fast
 *              request rank 1 never submits fails with WEFT_ERR_TIMEOUT by
 *              its deadline on rank 0 (DIR/released syncs)
 *   finalize   finalize with fast requests pending (kept and detached); a
 *              short weft_wait on a pending one
 *   hosts      under hier_hosts.sh: each fake host's group is fast, the world
 *              group (spanning hosts) never
 * Every value is checked here (references: mp_fast_ref.c; the cases where a
 * rank does not come or goes away: mp_fast_lost.c). Each rank also prints
 * "FASTEXPECT done=A-B diverted=C-D": the range its finalize line "one-host fast path: N
 * completed in shared memory, M diverted to the coordinator" must fall in
 * (fast.sh checks it; -1: no bound), and "DIGEST" lines that must be equal
 * with WEFT_FAST=0. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mp_harness.c"
#include "mp_fast_ref.c"

static size_t g_fast_bytes = 8192;
static long g_done_min, g_done_max, g_div_min, g_div_max = -1;
static pthread_mutex_t g_expect_mu = PTHREAD_MUTEX_INITIALIZER;

static void expect(long dmin, long dmax) {
  pthread_mutex_lock(&g_expect_mu);
  g_done_min += dmin;
  g_done_max += dmax;
  pthread_mutex_unlock(&g_expect_mu);
}
static size_t g_ar_bytes = 262144;     /* WEFT_FAST_ALLREDUCE_BYTES */
static size_t g_split_bytes = 16384;   /* WEFT_FAST_SPLIT_BYTES */
static size_t g_large_bytes = 2 << 20; /* WEFT_FAST_LARGE_BYTES (clamped in main, as the library does) */
static int g_large_slots = 4;          /* the board's large slots (main, as the library has them) */
static size_t maxc(weft_dtype t) { return g_fast_bytes / mp_esize(t); }
/* 1 if an allreduce of count elements of t is small enough for the board:
 * split rounds (from WEFT_FAST_SPLIT_BYTES on 3+ ranks, beyond
 * WEFT_FAST_ALLREDUCE_BYTES on 2) up to the large slots, whole folds up to
 * WEFT_FAST_ALLREDUCE_BYTES */
static int ar_fits(weft_dtype t, size_t count) {
  size_t b = count * mp_esize(t), cap = g_ar_bytes > g_fast_bytes ? g_ar_bytes : g_fast_bytes;
  int split = g_split_bytes && b >= g_split_bytes && (mp_size >= 3 || b > g_ar_bytes);
  return b <= (split && g_large_bytes > cap ? g_large_bytes : cap);
}

#include "mp_fast_colls.c"
#include "mp_fast_lost.c"

/* ------------------------------------------------------------ cases */
static void case_bits(void) {
  uint64_t digest = 1469598103934665603ULL;
  static const double sc[2][2] = {{1.0, 1.0}, {0.75, 1.5}};
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    mp_case("allreduce %s: every op, scales, counts 0 1 7 %zu %zu", weft_dtype_name((weft_dtype)t), maxc(t),
            maxc(t) + 1);
    for (int op = 0; op < WEFT_OP_COUNT_; op++)
      for (int k = 0; k < 2; k++) {
        if (t == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE) continue;
        size_t counts[5] = {0, 1, 7, maxc(t), maxc(t) + 1};
        arop a[5];
        for (int c = 0; c < 5; c++) {
          a[c] = (arop){{(weft_dtype)t, (weft_reduce_op)op, sc[k][0], sc[k][1], (uint64_t)(t * 100 + op * 10 + k)},
                        counts[c], {0}, NULL, NULL, NULL, ""};
          ar_submit(&a[c], mp_group, mp_rank, (c + k) & 1, "ar.%d", c);
        }
        for (int c = 0; c < 5; c++) ar_finish(&a[c], mp_size, &digest);
        expect(4 + ar_fits((weft_dtype)t, counts[4]), 4 + ar_fits((weft_dtype)t, counts[4]));
      }
    mp_case_end();
  }
  for (int t = 0; t < WEFT_DTYPE_COUNT_; t++) {
    if (!big_dtype((weft_dtype)t)) continue;
    size_t arc = g_ar_bytes / mp_esize(t), lc = g_large_bytes / mp_esize(t), sc0 = 16384 / mp_esize(t);
    /* around WEFT_FAST_ALLREDUCE_BYTES, the default WEFT_FAST_SPLIT_BYTES
     * (whole folds below it, split rounds from it on 3+ ranks; the same
     * counts whatever the variable says: fast.sh compares the bits across
     * jobs) and, for float32 only (the references cost), the large slots
     * (split rounds up to them, the coordinator beyond); two at a time: the
     * board has 4 large slots */
    int nc = t == WEFT_DTYPE_FLOAT32 ? 6 : 4;
    size_t cs[6] = {arc, arc + 1, sc0 - 1, sc0 + 1, lc, lc + 1};
    /* the sum unscaled (a split round's members then fold their own slices
     * from their own inputs where the cores suffice: WF_SPLIT_OWN), the max
     * scaled (a scaled copy goes in: any member folds any slice) */
    mp_case("allreduce %s sum, and max scaled: counts %zu %zu %zu %zu%s", weft_dtype_name(t), cs[0], cs[1], cs[2],
            cs[3], nc == 6 ? ", and the large slots' limit and one more" : "");
    for (int op = 0; op < 2; op++) {
      arop a[6];
      long fits = 0;
      for (int c = 0; c < nc; c++) {
        a[c] = (arop){{(weft_dtype)t, op ? WEFT_OP_MAX : WEFT_OP_SUM, op ? 0.75 : 1.0, op ? 1.5 : 1.0,
                       (uint64_t)(t * 100 + op * 10 + c)},
                      cs[c], {0}, NULL, NULL, NULL, ""};
        ar_submit(&a[c], mp_group, mp_rank, c & 1, "ar.big.%d", c);
        fits += ar_fits((weft_dtype)t, cs[c]);
        if (c & 1) {
          ar_finish(&a[c - 1], mp_size, &digest);
          ar_finish(&a[c], mp_size, &digest);
        }
      }
      expect(fits, fits);
    }
    mp_case_end();
  }
  static const weft_dtype bct[] = {WEFT_DTYPE_UINT8, WEFT_DTYPE_INT16, WEFT_DTYPE_FLOAT16, WEFT_DTYPE_FLOAT32,
                                   WEFT_DTYPE_INT64, WEFT_DTYPE_BOOL};
  for (size_t d = 0; d < sizeof bct / sizeof bct[0]; d++) {
    weft_dtype t = bct[d];
    mp_case("broadcast %s from every root, counts 0 1 7 %zu %zu", weft_dtype_name(t), maxc(t), maxc(t) + 1);
    for (int root = 0; root < mp_size; root++) {
      size_t counts[5] = {0, 1, 7, maxc(t), maxc(t) + 1};
      void *buf[5];
      int64_t shape[5][1];
      weft_request *r[5];
      char name[5][32];
      for (int c = 0; c < 5; c++) {
        snprintf(name[c], sizeof name[c], "bc.%d", c);
        buf[c] = mp_alloc(counts[c] * mp_esize(t));
        r[c] = bc_submit(mp_group, name[c], t, buf[c], shape[c], counts[c], root, mp_rank, 77 + d);
      }
      for (int c = 0; c < 5; c++) {
        if (mp_wait_ok(r[c], name[c])) mp_check_fill(t, buf[c], 0, counts[c], root, 0, 77 + d, name[c]);
        digest = fnv_add(digest, buf[c], counts[c] * mp_esize(t));
        weft_request_free(r[c]);
        free(buf[c]);
      }
      expect(5, 5); /* max + 1 too: broadcasts take the large slots */
    }
    mp_case_end();
  }
  mp_case("barriers: 3 named, 3 unnamed");
  for (int i = 0; i < 3; i++) barrier_wait(mp_group, "bar");
  for (int i = 0; i < 3; i++) barrier_wait(mp_group, NULL);
  expect(6, 6);
  mp_case_end();
  mp_say("DIGEST bits np%d %016llx", mp_size, (unsigned long long)digest);
}

enum { MM_SHAPE, MM_DTYPE, MM_BIG, MM_OP, MM_ROOT, MM_PRESCALE, MM_KIND, MM_COUNT };
static const char *const mm_names[MM_COUNT] = {"shape", "dtype", "big", "op", "root", "prescale", "kind"};

static void case_mismatch(void) {
  int odd = mp_rank == 1;
  for (int k = 0; k < MM_COUNT; k++) {
    mp_case("mismatch '%s' (rank 1 differs, %s arrives last)", mm_names[k], k & 1 ? "rank 0" : "rank 1");
    char name[32];
    snprintf(name, sizeof name, "mm.%s", mm_names[k]);
    if (mp_rank == (k & 1 ? 0 : 1)) mp_sleep_ms(30);
    static float buf[8192 / 4 + 1];
    memset(buf, 0, sizeof buf);
    int64_t shape[1] = {4};
    weft_tensor x = {WEFT_DTYPE_FLOAT32, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    weft_reduce_op op = WEFT_OP_SUM;
    weft_request *r = NULL;
    weft_status st;
    if (k == MM_SHAPE && odd) shape[0] = 5;
    if (k == MM_DTYPE && odd) x.dtype = WEFT_DTYPE_INT32;
    if (k == MM_BIG) shape[0] = (int64_t)maxc(WEFT_DTYPE_FLOAT32) + odd;
    if (k == MM_OP && odd) op = WEFT_OP_MAX;
    if (k == MM_PRESCALE && odd) o.prescale = 2.0;
    if (k == MM_ROOT) st = weft_broadcast(mp_group, name, &x, odd, NULL, &r);
    else if (k == MM_KIND && odd) st = weft_allgather(mp_group, name, &x, NULL, &r);
    else st = weft_allreduce(mp_group, name, &x, &x, op, &o, &r);
    mp_submitted(st, &r, name);
    st = mp_wait(r, name);
    const char *msg = weft_request_error(r);
    if (st != WEFT_ERR_MISMATCH) mp_fail("status %s (%s), expected WEFT_ERR_MISMATCH", weft_status_string(st), msg);
    else if (!strstr(msg, name)) mp_fail("the message does not name '%s': %s", name, msg);
    mp_say("MSG %s: %s %s", name, weft_status_string(st), msg);
    mp_same_everywhere("mm.same", mp_fnv(msg));
    expect(1, 1); /* that allgather */
    weft_request_free(r);
    if (ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, (uint64_t)k, name)) expect(1, 1);
    mp_case_end();
  }
  mp_case("after the mismatches: 10 allreduces right (and fast)");
  for (int i = 0; i < 10; i++)
    if (ar_one(mp_group, mp_rank, mp_size, i & 1 ? WEFT_DTYPE_INT32 : WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 33,
               (uint64_t)i, "after"))
      expect(1, 1);
  mp_case_end();
}

static void case_skew(void) {
  for (int pass = 0; pass < 2; pass++) {
    int late = pass ? 0 : mp_size - 1;
    mp_case("skew: rank %d submits 0.8 s late", late);
    barrier_wait(mp_group, "sk.sync");
    expect(0, 1);
    if (mp_rank == late) mp_sleep_ms(800);
    else g_div_min++; /* this rank's request waits 0.2 s, then goes to the coordinator */
    double t0 = mp_now();
    ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 9, 500 + (uint64_t)pass, "sk");
    if (mp_rank != late && mp_now() - t0 < 0.5) mp_fail("'sk' completed %.2f s after submission", mp_now() - t0);
    mp_case_end();
  }
  mp_case("after the skew: 20 allreduces right, fast again");
  for (int i = 0; i < 20; i++)
    ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT32, WEFT_OP_SUM, 5, 600 + (uint64_t)i, "sk.after");
  expect(10, 20); /* a round may still miss 0.2 s on a loaded machine */
  mp_case_end();
}

#define NORDER 6
static void case_order(void) {
  for (int it = 0; it < 6; it++) {
    mp_case("order: iteration %d", it);
    arop a[NORDER];
    weft_request *req[NORDER];
    int64_t shape[NORDER][1];
    unsigned char bcbuf[NORDER][800];
    int root = (it * 7 + 3) % mp_size;
    for (int j = 0; j < NORDER; j++) {
      int k = (j + mp_rank + it) % NORDER; /* rotated per rank and iteration, reversed on odd ranks */
      if (mp_rank & 1) k = NORDER - 1 - k;
      char name[16];
      snprintf(name, sizeof name, "o.%d", k);
      if (k == 0 || k == 1 || k == 4) {
        static const weft_dtype ty[5] = {WEFT_DTYPE_INT32, WEFT_DTYPE_FLOAT32, 0, 0, WEFT_DTYPE_FLOAT64};
        static const weft_reduce_op oo[5] = {WEFT_OP_SUM, WEFT_OP_MAX, 0, 0, WEFT_OP_AVERAGE};
        a[k] = (arop){{ty[k], oo[k], k == 4 ? 2.0 : 1.0, k == 4 ? 0.5 : 1.0, (uint64_t)(it * 10 + k)},
                      (size_t)(5 + k), {0}, NULL, NULL, NULL, ""};
        ar_submit(&a[k], mp_group, mp_rank, k == 1, "%s", name);
        req[k] = a[k].req;
      } else if (k == 3) {
        req[k] = NULL;
        mp_submitted(weft_barrier(mp_group, name, NULL, &req[k]), &req[k], name);
      } else {
        weft_dtype t = k == 2 ? WEFT_DTYPE_INT64 : WEFT_DTYPE_UINT8;
        req[k] = bc_submit(mp_group, name, t, bcbuf[k], shape[k], 100, k == 2 ? root : mp_size - 1 - root, mp_rank,
                           (uint64_t)(it * 10 + k));
      }
    }
    for (int j = 0; j < NORDER; j++) {
      int k = (j * 5 + mp_rank * 2 + 1) % NORDER;
      if ((j + mp_rank) & 1) { /* poll */
        double end = mp_now() + MP_WAIT_SECONDS;
        while (weft_test(req[k]) == WEFT_IN_PROGRESS)
          if (mp_now() > end) mp_fatal("o.%d: weft_test never completed", k);
      }
      if (k == 0 || k == 1 || k == 4) {
        ar_finish(&a[k], mp_size, NULL);
        continue;
      }
      char name[16];
      snprintf(name, sizeof name, "o.%d", k);
      int from = k == 2 ? root : mp_size - 1 - root;
      if (mp_wait_ok(req[k], name) && k != 3)
        mp_check_fill(k == 2 ? WEFT_DTYPE_INT64 : WEFT_DTYPE_UINT8, bcbuf[k], 0, 100, from, 0, (uint64_t)(it * 10 + k),
                      name);
      weft_request_free(req[k]);
    }
    expect(NORDER, NORDER);
    mp_case_end();
  }
}

/* Rank q's element i of tensor k in step s: a small integer. */
static int64_t join_val(int q, int s, int k, int i) {
  return (int64_t)(mp_hash((uint64_t)q, (uint64_t)(s * 100 + k * 10 + i), 99) % 201) - 100;
}

static void case_join(void) {
  int steps = mp_rank + 2;
  for (int s = 0; s < steps; s++) {
    mp_case("join: step %d (ranks < %d joined)", s, s - 1);
    int32_t vi[5];
    double vd[3];
    int64_t s5[1] = {5}, s3[1] = {3};
    for (int i = 0; i < 5; i++) vi[i] = (int32_t)join_val(mp_rank, s, 0, i);
    for (int i = 0; i < 3; i++) vd[i] = (double)join_val(mp_rank, s, 1, i);
    weft_tensor ti = {WEFT_DTYPE_INT32, 1, s5, vi, WEFT_DEVICE_CPU, 0, NULL};
    weft_tensor td = {WEFT_DTYPE_FLOAT64, 1, s3, vd, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r[3] = {NULL, NULL, NULL};
    mp_submitted(weft_allreduce(mp_group, "j.sum", &ti, &ti, WEFT_OP_SUM, NULL, &r[0]), &r[0], "j.sum");
    mp_submitted(weft_allreduce(mp_group, "j.avg", &td, &td, WEFT_OP_AVERAGE, NULL, &r[1]), &r[1], "j.avg");
    mp_submitted(weft_barrier(mp_group, "j.bar", NULL, &r[2]), &r[2], "j.bar");
    int ok = mp_wait_ok(r[0], "j.sum") & mp_wait_ok(r[1], "j.avg") & mp_wait_ok(r[2], "j.bar");
    for (int i = 0; ok && i < 5; i++) {
      int64_t want = 0;
      for (int q = 0; q < mp_size; q++) want += q + 2 > s ? join_val(q, s, 0, i) : 0;
      if (vi[i] != want) ok = mp_fail("j.sum[%d] = %d, expected %lld", i, vi[i], (long long)want);
    }
    for (int i = 0; ok && i < 3; i++) {
      int64_t sum = 0;
      for (int q = 0; q < mp_size; q++) sum += q + 2 > s ? join_val(q, s, 1, i) : 0;
      double want = (double)sum * (1.0 / mp_size);
      if (vd[i] != want) ok = mp_fail("j.avg[%d] = %.17g, expected %.17g", i, vd[i], want);
    }
    for (int i = 0; i < 3; i++) weft_request_free(r[i]);
    if (s < 2) expect(3, 3); /* every rank still active: the board */
    mp_case_end();
  }
  mp_case("join: last joined, then the job works");
  weft_request *j = NULL;
  mp_submitted(weft_join(mp_group, NULL, &j), &j, "join");
  int last = -1;
  if (mp_wait_ok(j, "join") && (weft_request_last_joined(j, &last) != WEFT_OK || last != mp_size - 1))
    mp_fail("last joined %d, expected %d", last, mp_size - 1);
  weft_request_free(j);
  ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT64, WEFT_OP_SUM, 7, 5, "j.after");
  ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_FLOAT32, WEFT_OP_MIN, 7, 6, "j.sum");
  mp_case_end();
}

static atomic_int g_cb_calls;
static void on_done(weft_request *r, weft_status st, void *ud) {
  (void)r, (void)ud;
  if (st == WEFT_OK) atomic_fetch_add(&g_cb_calls, 1);
}

static void case_detached(void) {
  mp_case("detached: a freed pending fast request, then its name again");
  arop d = {{WEFT_DTYPE_INT32, WEFT_OP_SUM, 1, 1, 11}, 7, {0}, NULL, NULL, NULL, ""};
  if (mp_rank != 0) mp_sleep_ms(50); /* rank 0's request is pending when it frees it */
  ar_submit(&d, mp_group, mp_rank, 0, "det");
  if (mp_rank == 0) {
    /* d.in must stay valid until the request completes: freed below */
    if (weft_request_free(d.req) != WEFT_OK) mp_fail("weft_request_free: %s", weft_last_error());
  } else {
    ar_finish(&d, mp_size, NULL);
  }
  barrier_wait(mp_group, "det.sync");
  arop d2 = {{WEFT_DTYPE_INT32, WEFT_OP_SUM, 1, 1, 11}, 7, {0}, NULL, NULL, NULL, ""};
  if (mp_rank == 0) { /* the detached one completes in the background; its name is then free */
    double t0 = mp_now();
    for (;;) {
      d2.in = mp_alloc(28);
      for (size_t i = 0; i < 7; i++) put_input(&d2.s, 0, i, d2.in, i);
      d2.out = d2.in;
      d2.shape[0] = 7;
      weft_tensor x = {WEFT_DTYPE_INT32, 1, d2.shape, d2.in, WEFT_DEVICE_CPU, 0, NULL};
      snprintf(d2.name, sizeof d2.name, "det");
      weft_status st = weft_allreduce(mp_group, "det", &x, &x, WEFT_OP_SUM, NULL, &d2.req);
      if (st == WEFT_OK) break;
      free(d2.in);
      if (st != WEFT_ERR_INVALID_ARGUMENT || mp_now() - t0 > 20) mp_fatal("resubmitting 'det': %s", weft_last_error());
      mp_sleep_ms(1);
    }
    mp_say("INFO rank 0: the detached 'det' completed within %.3f s of the barrier", mp_now() - t0);
    d.req = NULL;
    d.out = d.in;
    unsigned char want[4];
    for (size_t i = 0; i < 7; i++) {
      reference(&d.s, mp_size, i, want);
      if (memcmp(want, d.in + 4 * i, 4)) {
        mp_fail("the detached request's result: element %zu wrong", i);
        break;
      }
    }
    free(d.in);
  } else {
    ar_submit(&d2, mp_group, mp_rank, 0, "det");
  }
  ar_finish(&d2, mp_size, NULL);
  expect(3, 3);
  mp_case_end();

  mp_case("detached: a weft_test loop completes a fast request");
  arop p = {{WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1, 1, 12}, 9, {0}, NULL, NULL, NULL, ""};
  ar_submit(&p, mp_group, mp_rank, 1, "poll");
  double end = mp_now() + MP_WAIT_SECONDS;
  while (weft_test(p.req) == WEFT_IN_PROGRESS)
    if (mp_now() > end) mp_fatal("'poll' never completed under weft_test");
  ar_finish(&p, mp_size, NULL);
  expect(1, 1);
  mp_case_end();

  mp_case("detached: callback requests (engine path) next to a fast one");
  for (int mix = 0; mix < 2; mix++) {
    atomic_store(&g_cb_calls, 0);
    int with_cb = !mix || mp_rank == 0;
    arop c = {{WEFT_DTYPE_INT64, WEFT_OP_MAX, 1, 1, 13 + (uint64_t)mix}, 6, {0}, NULL, NULL, NULL, ""};
    c.in = mp_alloc(48);
    c.out = c.in;
    for (size_t i = 0; i < 6; i++) put_input(&c.s, mp_rank, i, c.in, i);
    c.shape[0] = 6;
    snprintf(c.name, sizeof c.name, mix ? "cbmix" : "cb");
    weft_tensor x = {WEFT_DTYPE_INT64, 1, c.shape, c.in, WEFT_DEVICE_CPU, 0, NULL};
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.callback = with_cb ? on_done : NULL;
    mp_submitted(weft_allreduce(mp_group, c.name, &x, &x, WEFT_OP_MAX, &o, &c.req), &c.req, c.name);
    arop f = {{WEFT_DTYPE_INT16, WEFT_OP_SUM, 1, 1, 15 + (uint64_t)mix}, 6, {0}, NULL, NULL, NULL, ""};
    ar_submit(&f, mp_group, mp_rank, 0, "plain");
    ar_finish(&f, mp_size, NULL);
    ar_finish(&c, mp_size, NULL);
    for (int i = 0; with_cb && atomic_load(&g_cb_calls) != 1 && i < 2000; i++) mp_sleep_ms(1);
    if (with_cb && atomic_load(&g_cb_calls) != 1)
      mp_fail("%s: the callback ran %d times", c.name, atomic_load(&g_cb_calls));
    expect(1, 1);
  }
  mp_case_end();
}

static int32_t grouped_val(int q, int k, int i, uint64_t seed) {
  return (int32_t)(mp_hash((uint64_t)q, (uint64_t)(k * 10 + i), seed) % 1000);
}

typedef struct thr_arg {
  int tid, iters;
} thr_arg;

static void *thread_main(void *p) {
  thr_arg *a = p;
  mp_case("threads: thread %d, %d iterations", a->tid, a->iters);
  char na[32], nb[32], ng[32];
  snprintf(na, sizeof na, "t%d.a", a->tid);
  snprintf(nb, sizeof nb, "t%d.b", a->tid);
  snprintf(ng, sizeof ng, "t%d.g", a->tid);
  for (int it = 0; it < a->iters; it++) {
    uint64_t seed = (uint64_t)(a->tid * 1000 + it);
    weft_request *g = NULL;
    int32_t gin[3][6], gout[3][6];
    int64_t gs[3][1] = {{3}, {4}, {6}};
    if (it % 5 == 2) { /* grouped (engine path) next to the plain ones */
      weft_tensor ins[3], outs[3];
      for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 6; i++) gin[k][i] = grouped_val(mp_rank, k, i, seed);
        ins[k] = (weft_tensor){WEFT_DTYPE_INT32, 1, gs[k], gin[k], WEFT_DEVICE_CPU, 0, NULL};
        outs[k] = ins[k];
        outs[k].data = gout[k];
      }
      mp_submitted(weft_grouped_allreduce(mp_group, ng, 3, ins, outs, WEFT_OP_SUM, NULL, &g), &g, ng);
    }
    arop x = {{WEFT_DTYPE_INT64, WEFT_OP_SUM, 1, 1, seed}, 6, {0}, NULL, NULL, NULL, ""};
    ar_submit(&x, mp_group, mp_rank, it & 1, "%s", na);
    float bbuf[5];
    int64_t bs[1];
    int root = (it + a->tid) % mp_size;
    weft_request *b = bc_submit(mp_group, nb, WEFT_DTYPE_FLOAT32, bbuf, bs, 5, root, mp_rank, seed);
    if (mp_wait_ok(b, nb)) mp_check_fill(WEFT_DTYPE_FLOAT32, bbuf, 0, 5, root, 0, seed, nb);
    weft_request_free(b);
    ar_finish(&x, mp_size, NULL);
    if (g) {
      if (mp_wait_ok(g, ng))
        for (int k = 0; k < 3; k++)
          for (int i = 0; i < gs[k][0]; i++) {
            int32_t want = 0;
            for (int q = 0; q < mp_size; q++) want += grouped_val(q, k, i, seed);
            if (gout[k][i] != want) {
              mp_fail("%s.%d[%d] = %d, expected %d", ng, k, i, gout[k][i], want);
              break;
            }
          }
      weft_request_free(g);
    }
    expect(2, 2);
  }
  mp_case_end();
  return NULL;
}

static void case_threads(int nthreads) {
  pthread_t th[8];
  thr_arg args[8];
  if (nthreads < 1 || nthreads > 8) mp_fatal("threads: 1..8");
  for (int i = 0; i < nthreads; i++) {
    args[i] = (thr_arg){i, 30};
    if (pthread_create(&th[i], NULL, thread_main, &args[i])) mp_fatal("pthread_create");
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
}

static void case_groups(void) {
  if (mp_size < 3) mp_fatal("groups needs 3 ranks or more");
  int n1 = mp_size - 1, m1[64], m2[2] = {0, mp_size - 1};
  for (int i = 0; i < n1; i++) m1[i] = i + 1;
  weft_group *g1 = NULL, *g2 = NULL;
  mp_case("groups: create {1..%d} and {0, %d}", mp_size - 1, mp_size - 1);
  if (mp_rank >= 1 && weft_group_create(mp_world, m1, n1, &g1) != WEFT_OK) mp_fatal("create g1: %s", weft_last_error());
  if ((mp_rank == 0 || mp_rank == mp_size - 1) && weft_group_create(mp_world, m2, 2, &g2) != WEFT_OK)
    mp_fatal("create g2: %s", weft_last_error());
  expect((g1 != NULL) + (g2 != NULL), (g1 != NULL) + (g2 != NULL)); /* their creation barriers */
  mp_case_end();
  mp_case("groups: a group of this rank alone");
  weft_group *solo = NULL;
  if (weft_group_create(mp_world, &mp_rank, 1, &solo) != WEFT_OK)
    mp_fatal("create {%d}: %s", mp_rank, weft_last_error());
  for (int i = 0; i < 3; i++) ar_one(solo, 0, 1, WEFT_DTYPE_BFLOAT16, WEFT_OP_AVERAGE, 9, 80 + (uint64_t)i, "g.a");
  if (weft_group_destroy(solo) != WEFT_OK) mp_fail("destroy {%d}: %s", mp_rank, weft_last_error());
  expect(5, 5);
  mp_case_end();
  for (int it = 0; it < 8; it++) {
    mp_case("groups: iteration %d", it);
    arop a1, a2, aw;
    if (g1) {
      a1 = (arop){{WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1, 1, 40 + (uint64_t)it}, 33, {0}, NULL, NULL, NULL, ""};
      ar_submit(&a1, g1, weft_group_rank(g1), 0, "g.a"); /* the same name in every group */
    }
    if (g2) {
      a2 = (arop){{WEFT_DTYPE_INT16, WEFT_OP_PRODUCT, 1, 1, 50 + (uint64_t)it}, 12, {0}, NULL, NULL, NULL, ""};
      ar_submit(&a2, g2, weft_group_rank(g2), 1, "g.a");
    }
    aw = (arop){{WEFT_DTYPE_FLOAT64, WEFT_OP_AVERAGE, 1, 1, 60 + (uint64_t)it}, 5, {0}, NULL, NULL, NULL, ""};
    ar_submit(&aw, mp_group, mp_rank, 0, "g.a");
    if (g1) {
      float b[10];
      int64_t bs[1];
      weft_request *r =
          bc_submit(g1, "g.b", WEFT_DTYPE_FLOAT32, b, bs, 10, it % n1, weft_group_rank(g1), 70 + (uint64_t)it);
      if (mp_wait_ok(r, "g.b")) mp_check_fill(WEFT_DTYPE_FLOAT32, b, 0, 10, it % n1, 0, 70 + (uint64_t)it, "g.b");
      weft_request_free(r);
      ar_finish(&a1, n1, NULL);
      expect(2, 2);
    }
    if (g2) {
      ar_finish(&a2, 2, NULL);
      expect(1, 1);
    }
    ar_finish(&aw, mp_size, NULL);
    expect(1, 1);
    mp_case_end();
  }
  mp_case("groups: destroy");
  if (g2 && weft_group_destroy(g2) != WEFT_OK) mp_fail("destroy g2: %s", weft_last_error());
  if (g1 && weft_group_destroy(g1) != WEFT_OK) mp_fail("destroy g1: %s", weft_last_error());
  expect((g1 != NULL) + (g2 != NULL), (g1 != NULL) + (g2 != NULL));
  mp_case_end();
}

/* More pending inputs than the board has data slots (64, for inputs over
 * 64 bytes): the rest take the coordinator path; all right. */
static void case_many(void) {
  enum { N = 100 };
  static arop big[N], small[N];
  mp_case("many: %d pending 1 KiB allreduces and %d pending 16-byte ones", N, N);
  for (int i = 0; i < N; i++) {
    big[i] = (arop){{WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 1, 1, 900 + (uint64_t)i}, 256, {0}, NULL, NULL, NULL, ""};
    small[i] = (arop){{WEFT_DTYPE_INT32, WEFT_OP_MAX, 1, 1, 1900 + (uint64_t)i}, 4, {0}, NULL, NULL, NULL, ""};
    ar_submit(&big[i], mp_group, mp_rank, i & 1, "m.big.%d", i);
    ar_submit(&small[i], mp_group, mp_rank, 0, "m.small.%d", i);
  }
  for (int i = N - 1; i >= 0; i--) {
    ar_finish(&big[i], mp_size, NULL);
    ar_finish(&small[i], mp_size, NULL);
  }
  expect(N + 64, 2 * N); /* small ones live in their records; the first 64 big ones get a slot at least */
  mp_case_end();
}

/* Ranks on hosts faked by hier_hosts.sh (MP_HIER_HOSTS): the world spans
 * hosts (the coordinator path), each host's group is local (its own board). */
static void case_hosts(void) {
  const char *hosts = getenv("MP_HIER_HOSTS");
  if (!hosts) mp_fatal("run under hier_hosts.sh");
  char list[256], *save = NULL, *mine = NULL, *names[64] = {NULL};
  snprintf(list, sizeof list, "%s", hosts);
  int n = 0, members[64], nm = 0;
  for (char *h = strtok_r(list, ",", &save); h && n < 64; h = strtok_r(NULL, ",", &save)) names[n++] = h;
  if (n != mp_size) mp_fatal("MP_HIER_HOSTS names %d hosts for %d ranks", n, mp_size);
  mine = names[mp_rank];
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], mine)) members[nm++] = i;
  weft_group *hg = NULL;
  mp_case("hosts: %s has %d of the %d ranks", mine, nm, mp_size);
  if (weft_group_create(mp_world, members, nm, &hg) != WEFT_OK) mp_fatal("create: %s", weft_last_error());
  int me = weft_group_rank(hg);
  for (int it = 0; it < 10; it++) {
    arop h = {{WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 1, 1, 300 + (uint64_t)it}, 20, {0}, NULL, NULL, NULL, ""};
    /* integers: across hosts the fold is hierarchical (design.md), not in rank order */
    arop w = {{WEFT_DTYPE_INT64, WEFT_OP_SUM, 1, 1, 400 + (uint64_t)it}, 20, {0}, NULL, NULL, NULL, ""};
    ar_submit(&h, hg, me, 0, "h.a"); /* one name in both groups */
    ar_submit(&w, mp_group, mp_rank, 0, "h.a");
    ar_finish(&h, nm, NULL);
    ar_finish(&w, mp_size, NULL);
  }
  barrier_wait(mp_group, "h.world");
  if (weft_group_destroy(hg) != WEFT_OK) mp_fail("destroy: %s", weft_last_error());
  if (nm > 1) expect(12, 12); /* the host group's ops, its create and destroy barriers; none of the world's */
  mp_case_end();
  if (nm == 1) {
    mp_say("FASTEXPECT rank %d: none (alone on %s: no board)", mp_rank, mine);
    exit(mp_teardown());
  }
}

static void case_names(void) {
  mp_case("names: an early name, 1100 unnamed barriers, 40 new names, the early name again");
  ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT32, WEFT_OP_SUM, 3, 1, "n.early");
  for (int i = 0; i < 1100; i++) barrier_wait(mp_group, NULL);
  for (int i = 0; i < 40; i++) {
    char name[32];
    snprintf(name, sizeof name, "n.%d", i);
    ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT32, WEFT_OP_SUM, 3, (uint64_t)i + 2, name);
  }
  ar_one(mp_group, mp_rank, mp_size, WEFT_DTYPE_INT32, WEFT_OP_SUM, 3, 1, "n.early");
  expect(2, 1142); /* the early name keeps its record: fast both times */
  mp_case_end();
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mp_fast bits|colls|mismatch|skew|order|join|stall|stall-poll DIR|kill K|stop K|stopsplit K|killdone K|detached|threads T|groups|"
                    "names|many|hosts|finalize|deadline DIR\n");
    return 2;
  }
  const char *c = argv[1], *arg = argc > 2 ? argv[2] : NULL;
  const char *fb = getenv("WEFT_FAST_BYTES");
  if (fb && *fb) g_fast_bytes = strtoull(fb, NULL, 0);
  const char *ab = getenv("WEFT_FAST_ALLREDUCE_BYTES");
  if (ab && *ab) g_ar_bytes = strtoull(ab, NULL, 0);
  const char *sb = getenv("WEFT_FAST_SPLIT_BYTES");
  if (sb && *sb) g_split_bytes = strtoull(sb, NULL, 0);
  const char *lb = getenv("WEFT_FAST_LARGE_BYTES");
  if (lb && *lb) g_large_bytes = strtoull(lb, NULL, 0);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(c, "kill") || !strcmp(c, "stop") || !strcmp(c, "stopsplit") || !strcmp(c, "killdone")) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) {
      close(fds[1]);
      return supervise(child, fds[0]);
    }
    close(fds[0]);
    g_pipe = fds[1];
    return case_lost(arg ? atoi(arg) : -1, c[0] == 'k' ? SIGKILL : SIGSTOP,
                     !strcmp(c, "stopsplit") ? LOST_SPLIT : !strcmp(c, "killdone") ? LOST_DONE : LOST_ALLGATHER);
  }
  mp_setup();
  /* the library's clamp (wf_board_large_for): max(32 MiB / local ranks,
   * 2 MiB), so the default 2 MiB holds on any number of ranks */
  size_t lcap = ((size_t)32 << 20) / (size_t)mp_size / 4096 * 4096;
  if (lcap < ((size_t)2 << 20)) lcap = (size_t)2 << 20;
  if (g_large_bytes > lcap) g_large_bytes = lcap;
  /* and as many large slots (2 to 4) as 64 MiB holds */
  size_t per = (g_large_bytes + 4095) / 4096 * 4096 * (size_t)mp_size;
  g_large_slots = per ? (int)(((size_t)64 << 20) / per) : 4;
  if (g_large_slots < 2) g_large_slots = 2;
  if (g_large_slots > 4) g_large_slots = 4;
  if (!strcmp(c, "bits")) case_bits();
  else if (!strcmp(c, "mismatch")) case_mismatch();
  else if (!strcmp(c, "skew")) case_skew();
  else if (!strcmp(c, "order")) case_order();
  else if (!strcmp(c, "join")) case_join();
  else if (!strcmp(c, "stall") || !strcmp(c, "stall-poll")) case_stall(!strcmp(c, "stall-poll"), arg ? arg : ".");
  else if (!strcmp(c, "detached")) case_detached();
  else if (!strcmp(c, "threads")) case_threads(arg ? atoi(arg) : 3);
  else if (!strcmp(c, "groups")) case_groups();
  else if (!strcmp(c, "names")) case_names();
  else if (!strcmp(c, "many")) case_many();
  else if (!strcmp(c, "hosts")) case_hosts();
  else if (!strcmp(c, "finalize")) return case_finalize();
  else if (!strcmp(c, "deadline")) case_deadline(arg ? arg : ".");
  else if (!strcmp(c, "colls")) case_colls();
  else mp_fatal("unknown case '%s'", c);
  mp_say("FASTEXPECT rank %d: done=%ld-%ld diverted=%ld-%ld", mp_rank, g_done_min, g_done_max, g_div_min, g_div_max);
  return mp_teardown();
}

