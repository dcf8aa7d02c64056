/* mp_errors.c - errors, cross-rank and local:
 *  - every kind of cross-rank mismatch (dtype, operation kind, shape of each
 *    collective, broadcast root, reduce op, prescale, postscale, 0-d tensors
 *    for allgather/alltoall/reducescatter): WEFT_ERR_MISMATCH on every rank,
 *    a message naming the tensor, both ranks and both values, the same
 *    message on every rank (hashes compared with an allgather), and then a
 *    successful collective reusing the name;
 *  - a mismatch in flight together with valid collectives;
 *  - a name already in flight is rejected at once with
 *    WEFT_ERR_INVALID_ARGUMENT, and reusable once its completion was seen
 *    (weft_wait, weft_test) or, freed while pending, once complete; a request
 *    that completed but was not looked at keeps its name on every rank;
 *  - local misuse (NULL/empty/overlong name, NULL data, bad ndim/dims/dtype/
 *    op/root/splits, inconsistent in/out) -> WEFT_ERR_INVALID_ARGUMENT with
 *    *req NULL and a message; NULL and foreign handles -> WEFT_ERR_MISUSE;
 *  - basic API facts (status strings, dtype sizes and names, version).
 * On one rank nobody can disagree: the run checks what one rank can get
 * wrong on its own, the 0-d tensors the coordinator rejects (status, message,
 * the name reusable after) and one of them in flight between two valid
 * allreduces, and the duplicate name, held in flight by an allgather whose
 * output allocator waits until the duplicates were tried; the other
 * mismatch cases need two ranks and are not run (nor reported).
 *
 * Usage (under weftrun -np N): mp_errors */
#include "mp_harness.c"

/* A sentinel stored in *req before each call: a rejection must set NULL. */
static char g_sentinel_storage;
#define SENTINEL ((weft_request *)(void *)&g_sentinel_storage)

/* ------------------------------------------------------------- mismatches */
enum {
  MM_DTYPE,
  MM_KIND,
  MM_SHAPE_ALLREDUCE,
  MM_SHAPE_ALLGATHER,
  MM_SHAPE_BROADCAST,
  MM_SHAPE_REDUCESCATTER,
  MM_SHAPE_ALLTOALL,
  MM_ROOT,
  MM_OP_ALLREDUCE,
  MM_OP_REDUCESCATTER,
  MM_PRESCALE,
  MM_POSTSCALE,
  MM_PRESCALE_RS,
  MM_0D_ALLGATHER,
  MM_0D_ALLTOALL,
  MM_0D_REDUCESCATTER,
  MM_DTYPE_ALLGATHER,
  MM_COUNT
};

static const char *const mm_names[MM_COUNT] = {"dtype",
                                               "op kind",
                                               "allreduce shape",
                                               "allgather shape",
                                               "broadcast shape",
                                               "reducescatter shape",
                                               "alltoall shape",
                                               "broadcast root",
                                               "allreduce reduce op",
                                               "reducescatter reduce op",
                                               "prescale",
                                               "postscale",
                                               "reducescatter prescale",
                                               "0-d allgather",
                                               "0-d alltoall",
                                               "0-d reducescatter",
                                               "allgather dtype"};

/* Large enough for every case (elements of at most 8 bytes). */
static int64_t g_buf[2][256];

/* Submits this rank's side of mismatch case k; `odd` says whether this rank
 * is the one that differs. Fills want[] with the values the message must
 * name. */
static weft_status mm_submit(int k, int odd, const char *name, weft_request **req, char want[2][32]) {
  int64_t s37[2] = {37, 0}, s41[2] = {41, 0}, s4[1] = {4}, n_rows[2] = {mp_size, odd ? 37 : 41};
  int64_t ag[2] = {2, odd ? 37 : 41};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, odd ? s37 : s41, g_buf[0], WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor o = t;
  o.data = g_buf[1];
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  memset(g_buf, 0, sizeof g_buf);
  want[0][0] = want[1][0] = 0;
  switch (k) {
    case MM_DTYPE:
      t.dtype = odd ? WEFT_DTYPE_FLOAT32 : WEFT_DTYPE_INT32;
      t.shape = s4;
      snprintf(want[0], 32, "float32");
      snprintf(want[1], 32, "int32");
      return weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, req);
    case MM_KIND:
      t.dtype = WEFT_DTYPE_INT32;
      t.shape = s4;
      snprintf(want[0], 32, "allgather");
      snprintf(want[1], 32, "allreduce");
      return odd ? weft_allgather(mp_group, name, &t, NULL, req)
                 : weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, req);
    case MM_SHAPE_ALLREDUCE:
      snprintf(want[0], 32, "37");
      snprintf(want[1], 32, "41");
      return weft_allreduce(mp_group, name, &t, &o, WEFT_OP_SUM, NULL, req);
    case MM_SHAPE_ALLGATHER:
      t.ndim = 2;
      t.shape = ag;
      snprintf(want[0], 32, "37");
      snprintf(want[1], 32, "41");
      return weft_allgather(mp_group, name, &t, NULL, req);
    case MM_SHAPE_BROADCAST:
      snprintf(want[0], 32, "37");
      snprintf(want[1], 32, "41");
      return weft_broadcast(mp_group, name, &t, 0, NULL, req);
    case MM_SHAPE_REDUCESCATTER: {
      int64_t rows = t.shape[0] / mp_size + (mp_rank < t.shape[0] % mp_size);
      o.shape = &rows;
      snprintf(want[0], 32, "37");
      snprintf(want[1], 32, "41");
      return weft_reducescatter(mp_group, name, &t, &o, WEFT_OP_SUM, NULL, req);
    }
    case MM_SHAPE_ALLTOALL:
      t.ndim = 2;
      t.shape = n_rows;
      snprintf(want[0], 32, "37");
      snprintf(want[1], 32, "41");
      return weft_alltoall(mp_group, name, &t, NULL, NULL, req);
    case MM_ROOT:
      t.shape = s4;
      snprintf(want[0], 32, "root %d", mp_size - 1);
      snprintf(want[1], 32, "root 0");
      return weft_broadcast(mp_group, name, &t, odd ? mp_size - 1 : 0, NULL, req);
    case MM_OP_ALLREDUCE:
      t.shape = s4;
      snprintf(want[0], 32, "%s", weft_reduce_op_name(WEFT_OP_MAX));
      snprintf(want[1], 32, "%s", weft_reduce_op_name(WEFT_OP_SUM));
      return weft_allreduce(mp_group, name, &t, &t, odd ? WEFT_OP_MAX : WEFT_OP_SUM, NULL, req);
    case MM_OP_REDUCESCATTER: {
      int64_t in_shape[1] = {mp_size}, one[1] = {1};
      t.shape = in_shape;
      o.shape = one;
      snprintf(want[0], 32, "%s", weft_reduce_op_name(WEFT_OP_PRODUCT));
      snprintf(want[1], 32, "%s", weft_reduce_op_name(WEFT_OP_MIN));
      return weft_reducescatter(mp_group, name, &t, &o, odd ? WEFT_OP_PRODUCT : WEFT_OP_MIN, NULL, req);
    }
    case MM_PRESCALE:
      t.shape = s4;
      opt.prescale = odd ? 0.5 : 0.25;
      snprintf(want[0], 32, "0.5");
      snprintf(want[1], 32, "0.25");
      return weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, &opt, req);
    case MM_POSTSCALE:
      t.shape = s4;
      opt.postscale = odd ? 0.75 : 1.5;
      snprintf(want[0], 32, "0.75");
      snprintf(want[1], 32, "1.5");
      return weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, &opt, req);
    case MM_PRESCALE_RS: {
      int64_t in_shape[1] = {mp_size}, one[1] = {1};
      t.shape = in_shape;
      o.shape = one;
      opt.prescale = odd ? 0.125 : 0.5;
      snprintf(want[0], 32, "0.125");
      snprintf(want[1], 32, "0.5");
      return weft_reducescatter(mp_group, name, &t, &o, WEFT_OP_SUM, &opt, req);
    }
    case MM_0D_ALLGATHER: {
      int64_t three[1] = {3};
      t.ndim = odd ? 0 : 1;
      t.shape = three;
      snprintf(want[0], 32, "allgather");
      return weft_allgather(mp_group, name, &t, NULL, req);
    }
    case MM_0D_ALLTOALL: {
      int64_t n[1] = {mp_size};
      t.ndim = odd ? 0 : 1;
      t.shape = n;
      snprintf(want[0], 32, "alltoall");
      return weft_alltoall(mp_group, name, &t, NULL, NULL, req);
    }
    case MM_0D_REDUCESCATTER: {
      /* The scalar's "slice" is given as a scalar too. */
      int64_t n[1] = {mp_size}, one[1] = {1};
      t.ndim = odd ? 0 : 1;
      t.shape = n;
      o.ndim = odd ? 0 : 1;
      o.shape = one;
      snprintf(want[0], 32, "reducescatter");
      return weft_reducescatter(mp_group, name, &t, &o, WEFT_OP_SUM, NULL, req);
    }
    case MM_DTYPE_ALLGATHER: {
      int64_t rows[1] = {mp_rank % 2 + 1};
      t.shape = rows;
      t.dtype = odd ? WEFT_DTYPE_INT16 : WEFT_DTYPE_FLOAT64;
      snprintf(want[0], 32, "int16");
      snprintf(want[1], 32, "float64");
      return weft_allgather(mp_group, name, &t, NULL, req);
    }
    default: return WEFT_ERR_INTERNAL;
  }
}

/* A correct int32 sum allreduce under `name` (the name of a failed
 * collective must be usable again). */
static void followup_ok(const char *name) {
  int32_t v[3] = {mp_rank, 2 * mp_rank, 7};
  int64_t shape[1] = {3};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req);
  mp_submitted(st, &req, name);
  if (mp_wait_ok(req, "follow-up allreduce")) {
    int32_t s = mp_size * (mp_size - 1) / 2;
    if (v[0] != s || v[1] != 2 * s || v[2] != 7 * mp_size)
      mp_fail("follow-up allreduce gave {%d, %d, %d}, expected {%d, %d, %d}", v[0], v[1], v[2], s, 2 * s, 7 * mp_size);
  }
  weft_request_free(req);
}

/* The cases one rank alone gets: a 0-d tensor where a dim 0 is needed. */
static int zero_d_case(int k) { return k == MM_0D_ALLGATHER || k == MM_0D_ALLTOALL || k == MM_0D_REDUCESCATTER; }

static void test_mismatches(void) {
  for (int k = 0; k < MM_COUNT; k++) {
    if (mp_size == 1 && !zero_d_case(k)) continue; /* needs a second rank to disagree */
    int odd_rank = k % mp_size, odd = mp_rank == odd_rank;
    /* The message names rank 0 and the first rank that differs from it. */
    int other = odd_rank == 0 ? 1 : 0;
    char name[64], hname[80], want[2][32], rank_a[24], rank_b[24];
    snprintf(name, sizeof name, "mismatch.%d", k);
    snprintf(hname, sizeof hname, "%s.hash", name);
    snprintf(rank_a, sizeof rank_a, "rank %d", odd_rank);
    snprintf(rank_b, sizeof rank_b, "rank %d", other);
    mp_case("mismatch: %s (rank %d differs)", mm_names[k], odd_rank);
    weft_request *req = NULL;
    weft_status st = mm_submit(k, odd, name, &req, want);
    mp_submitted(st, &req, name);
    st = mp_wait(req, name);
    const char *msg = weft_request_error(req);
    if (!msg) msg = "(no message)";
    int zero_d = zero_d_case(k);
    if (st != WEFT_ERR_MISMATCH) {
      mp_fail("status %s (\"%s\"), expected WEFT_ERR_MISMATCH", weft_status_string(st), msg);
    } else {
      if (!mp_contains(msg, name)) mp_fail("message \"%s\" does not name the tensor %s", msg, name);
      for (int w = 0; w < 2; w++)
        if (want[w][0] && !mp_contains(msg, want[w])) mp_fail("message \"%s\" does not name \"%s\"", msg, want[w]);
      if (!mp_contains(msg, rank_a)) mp_fail("message \"%s\" does not name %s", msg, rank_a);
      if (!zero_d && !mp_contains(msg, rank_b)) mp_fail("message \"%s\" does not name %s", msg, rank_b);
    }
    if (strcmp(weft_request_algorithm(req), ""))
      mp_fail("a rejected collective names algorithm '%s'", weft_request_algorithm(req));
    /* Identical on every rank: status and message. */
    mp_same_everywhere(hname, mp_fnv(msg) ^ (uint64_t)(int64_t)st);
    weft_request_free(req);
    followup_ok(name);
    mp_case_end();
  }

  /* A mismatch in flight among valid collectives fails alone (one rank: a
   * 0-d allgather, which it gets wrong alone). */
  int bad_kind = mp_size == 1 ? MM_0D_ALLGATHER : MM_DTYPE;
  mp_case("mismatch (%s) in flight between two valid allreduces", mm_names[bad_kind]);
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  int64_t s4[1] = {4};
  weft_tensor ta = {WEFT_DTYPE_INT32, 1, s4, a, WEFT_DEVICE_CPU, 0, NULL}, tb = {WEFT_DTYPE_INT32, 1, s4, b, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *ra = NULL, *rm = NULL, *rb = NULL;
  char want[2][32];
  mp_submitted(weft_allreduce(mp_group, "batch.before", &ta, &ta, WEFT_OP_SUM, NULL, &ra), &ra, "batch.before");
  mp_submitted(mm_submit(bad_kind, mp_rank == mp_size - 1, "batch.bad", &rm, want), &rm, "batch.bad");
  mp_submitted(weft_allreduce(mp_group, "batch.after", &tb, &tb, WEFT_OP_MAX, NULL, &rb), &rb, "batch.after");
  weft_status st = mp_wait(rm, "batch.bad");
  if (st != WEFT_ERR_MISMATCH) mp_fail("batch.bad: %s, expected WEFT_ERR_MISMATCH", weft_status_string(st));
  if (mp_wait_ok(ra, "batch.before"))
    for (int i = 0; i < 4; i++)
      if (a[i] != (i + 1) * mp_size) mp_fail("batch.before element %d is %d", i, a[i]);
  if (mp_wait_ok(rb, "batch.after"))
    for (int i = 0; i < 4; i++)
      if (b[i] != 5 + i) mp_fail("batch.after element %d is %d", i, b[i]);
  weft_request_free(ra);
  weft_request_free(rm);
  weft_request_free(rb);
  mp_case_end();
}

/* ------------------------------------------------------------- duplicates */
/* `checker` submits `name` and, while it is certainly in flight (the other
 * ranks hold back their submission for 300 ms), submits the name again
 * (another allreduce, then a barrier): both must be rejected at once. */
static void dup_round(const char *name, int checker_is_zero) {
  int checker = checker_is_zero ? mp_rank == 0 : mp_rank != 0;
  mp_case("duplicate in-flight name %s rejected on %s", name, checker_is_zero ? "rank 0" : "ranks != 0");
  int32_t v[2] = {mp_rank, 1}, w[2] = {0, 0};
  int64_t shape[1] = {2};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL},
              t2 = {WEFT_DTYPE_INT32, 1, shape, w, WEFT_DEVICE_CPU, 0, NULL};
  if (!checker) mp_sleep_ms(300);
  weft_request *req = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req), &req, name);
  if (checker) {
    weft_request *dup = SENTINEL;
    double t0 = mp_now();
    weft_status st = weft_allreduce(mp_group, name, &t2, &t2, WEFT_OP_SUM, NULL, &dup);
    double dt = mp_now() - t0;
    if (st != WEFT_ERR_INVALID_ARGUMENT)
      mp_fail("second allreduce: %s, expected WEFT_ERR_INVALID_ARGUMENT", weft_status_string(st));
    else if (dup != NULL)
      mp_fail("rejected submission left *req non-NULL");
    else if (!weft_last_error()[0])
      mp_fail("rejection without a message");
    if (dt > 1.0) mp_fail("rejection took %.2f s: not at once", dt);
    if (st == WEFT_OK) weft_request_free(dup);
    dup = SENTINEL;
    st = weft_barrier(mp_group, name, NULL, &dup);
    if (st != WEFT_ERR_INVALID_ARGUMENT || dup != NULL)
      mp_fail("barrier with the in-flight name: %s, expected WEFT_ERR_INVALID_ARGUMENT", weft_status_string(st));
    if (st == WEFT_OK) weft_request_free(dup);
  }
  if (mp_wait_ok(req, name)) {
    int32_t s = mp_size * (mp_size - 1) / 2;
    if (v[0] != s || v[1] != mp_size) mp_fail("result {%d, %d}, expected {%d, %d}", v[0], v[1], s, mp_size);
  }
  /* Complete (not yet freed): no longer in flight, so the name is free. */
  weft_request *again = NULL;
  weft_tensor t3 = {WEFT_DTYPE_INT32, 1, shape, w, WEFT_DEVICE_CPU, 0, NULL};
  w[0] = 1;
  w[1] = mp_rank;
  weft_status st = weft_allreduce(mp_group, name, &t3, &t3, WEFT_OP_MAX, NULL, &again);
  mp_submitted(st, &again, "the name again after completion");
  if (mp_wait_ok(again, name) && (w[0] != 1 || w[1] != mp_size - 1)) mp_fail("reused name: wrong result");
  weft_request_free(again);
  weft_request_free(req);
  mp_case_end();
}

/* A name is in use until the caller has seen its request complete, not
 * merely until it completed: every rank submits `name` (small: on one host
 * it completes at once in shared memory), gives it 300 ms to complete
 * everywhere, and submits the name again without having looked: rejected on
 * every rank alike. Seen complete (weft_wait, or weft_test polled until
 * done), the name is free; so is the name of a request freed while pending
 * (detached), once it completes. */
static void dup_unobserved(const char *name) {
  mp_case("name %s in use until its completion is seen", name);
  int32_t v[2] = {mp_rank, 1}, w[2] = {0, 0};
  int64_t shape[1] = {2};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL},
              t2 = {WEFT_DTYPE_INT32, 1, shape, w, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL, *dup = SENTINEL;
  mp_submitted(weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req), &req, name);
  mp_sleep_ms(300); /* complete everywhere by now (it is not looked at) */
  weft_status st = weft_allreduce(mp_group, name, &t2, &t2, WEFT_OP_SUM, NULL, &dup);
  if (st != WEFT_ERR_INVALID_ARGUMENT || dup != NULL)
    mp_fail("the name of a request not yet seen complete was taken again: %s", weft_status_string(st));
  else if (!strstr(weft_last_error(), "in use"))
    mp_fail("rejection message does not say the name is in use: %s", weft_last_error());
  if (st == WEFT_OK) weft_request_free(dup);
  if (mp_wait_ok(req, name)) {
    int32_t sum = mp_size * (mp_size - 1) / 2;
    if (v[0] != sum || v[1] != mp_size) mp_fail("result {%d, %d}, expected {%d, %d}", v[0], v[1], sum, mp_size);
  }
  /* seen by weft_wait: free again (the handle not yet freed) */
  weft_request *again = NULL;
  mp_submitted(weft_allreduce(mp_group, name, &t2, &t2, WEFT_OP_SUM, NULL, &again), &again, "after weft_wait");
  /* seen by weft_test polling */
  double end = mp_now() + 60;
  while (again && weft_test(again) == WEFT_IN_PROGRESS && mp_now() < end) mp_sleep_ms(1);
  if (again && weft_test(again) != WEFT_OK) mp_fail("allreduce after weft_wait: %s", weft_last_error());
  weft_request *third = NULL;
  mp_submitted(weft_barrier(mp_group, name, NULL, &third), &third, "after weft_test");
  /* freed while pending (detached): the name goes when it completes */
  if (third) weft_request_free(third);
  /* nobody waits on it: it completes when the engine gets to it */
  weft_request *fourth = NULL;
  end = mp_now() + 30;
  weft_status fst;
  while ((fst = weft_barrier(mp_group, name, NULL, &fourth)) == WEFT_ERR_INVALID_ARGUMENT && mp_now() < end)
    mp_sleep_ms(5);
  mp_submitted(fst, &fourth, "after a detached request completed");
  mp_wait_ok(fourth, name);
  weft_request_free(fourth);
  weft_request_free(again);
  weft_request_free(req);
  mp_case_end();
}

/* One rank: nothing holds a collective in flight but the engine itself. An
 * allgather whose output allocator (engine thread) waits until this thread
 * has tried the duplicates keeps its name in flight for exactly as long. */
static atomic_int g_dups_tried;

static void *held_alloc(size_t bytes, void *ctx) {
  (void)ctx;
  double end = mp_now() + 10.0; /* bounded: a failed check must not hang */
  while (!atomic_load(&g_dups_tried) && mp_now() < end) mp_sleep_ms(1);
  return malloc(bytes ? bytes : 1);
}

static void dup_round_held(const char *name) {
  mp_case("duplicate in-flight name %s rejected (held in flight by its allocator)", name);
  atomic_store(&g_dups_tried, 0);
  int32_t v[2] = {7, 8}, w[2] = {0, 0};
  int64_t shape[1] = {2};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL}, t2 = {WEFT_DTYPE_INT32, 1, shape, w, WEFT_DEVICE_CPU, 0, NULL};
  weft_op_options opt = WEFT_OP_OPTIONS_INIT;
  opt.alloc = held_alloc;
  weft_request *req = NULL;
  mp_submitted(weft_allgather(mp_group, name, &t, &opt, &req), &req, name);
  weft_request *dup = SENTINEL;
  weft_status st = weft_allreduce(mp_group, name, &t2, &t2, WEFT_OP_SUM, NULL, &dup);
  if (st != WEFT_ERR_INVALID_ARGUMENT || dup != NULL || !weft_last_error()[0])
    mp_fail("second submission (allreduce): %s, expected WEFT_ERR_INVALID_ARGUMENT, *req NULL and a message",
            weft_status_string(st));
  if (st == WEFT_OK) weft_request_free(dup);
  dup = SENTINEL;
  st = weft_barrier(mp_group, name, NULL, &dup);
  if (st != WEFT_ERR_INVALID_ARGUMENT || dup != NULL)
    mp_fail("barrier with the in-flight name: %s, expected WEFT_ERR_INVALID_ARGUMENT", weft_status_string(st));
  if (st == WEFT_OK) weft_request_free(dup);
  if (weft_test(req) != WEFT_IN_PROGRESS) mp_fail("the held allgather completed before its allocator returned");
  if (strcmp(weft_request_algorithm(req), "")) mp_fail("a pending request names an algorithm");
  atomic_store(&g_dups_tried, 1);
  if (mp_wait_ok(req, name)) {
    if (!weft_request_algorithm(req)[0]) mp_fail("the completed allgather names no algorithm");
    weft_tensor out;
    if (weft_request_output(req, &out) != WEFT_OK || out.ndim != 1 || out.shape[0] != 2 ||
        ((int32_t *)out.data)[0] != 7 || ((int32_t *)out.data)[1] != 8)
      mp_fail("the held allgather's output is wrong");
    else
      free(out.data); /* from held_alloc: the caller's */
  }
  /* Complete (not yet freed): no longer in flight, so the name is free. */
  weft_request *again = NULL;
  w[0] = 1;
  mp_submitted(weft_allreduce(mp_group, name, &t2, &t2, WEFT_OP_MAX, NULL, &again), &again, "the name again");
  if (mp_wait_ok(again, name) && (w[0] != 1 || w[1] != 0)) mp_fail("reused name: wrong result");
  weft_request_free(again);
  weft_request_free(req);
  mp_case_end();
}

/* ------------------------------------------------------------- misuse */

/* Expects a local rejection: status, *req NULL, a message. */
static void expect_reject(const char *what, weft_status st, weft_request *req, weft_status want) {
  if (st != want) {
    mp_fail("%s: %s, expected %s", what, weft_status_string(st), weft_status_string(want));
    if (st == WEFT_OK && req && req != SENTINEL) weft_request_free(req); /* detached */
    return;
  }
  if (req != NULL && want == WEFT_ERR_INVALID_ARGUMENT) mp_fail("%s: *req not set to NULL", what);
  if (!weft_last_error()[0]) mp_fail("%s: weft_last_error() is empty", what);
}

static void test_misuse(void) {
  mp_case("local misuse -> WEFT_ERR_INVALID_ARGUMENT, nothing submitted");
  float data[8] = {0};
  int64_t s8[1] = {8}, neg[1] = {-1}, s2x4[2] = {2, 4};
  weft_tensor good = {WEFT_DTYPE_FLOAT32, 1, s8, data, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor t;
  weft_request *r;
  char longname[300];
  memset(longname, 'n', 256);
  longname[256] = 0;
  weft_status E = WEFT_ERR_INVALID_ARGUMENT;

#define TRY(what, call)             \
  do {                              \
    r = SENTINEL;                   \
    weft_status st_ = (call);       \
    expect_reject(what, st_, r, E); \
  } while (0)
  TRY("NULL name", weft_allreduce(mp_group, NULL, &good, &good, WEFT_OP_SUM, NULL, &r));
  TRY("empty name", weft_allreduce(mp_group, "", &good, &good, WEFT_OP_SUM, NULL, &r));
  TRY("256-byte name", weft_allreduce(mp_group, longname, &good, &good, WEFT_OP_SUM, NULL, &r));
  TRY("NULL name allgather", weft_allgather(mp_group, NULL, &good, NULL, &r));
  TRY("NULL name broadcast", weft_broadcast(mp_group, NULL, &good, 0, NULL, &r));
  TRY("NULL name alltoall", weft_alltoall(mp_group, NULL, &good, NULL, NULL, &r));
  TRY("NULL in tensor", weft_allreduce(mp_group, "misuse", NULL, &good, WEFT_OP_SUM, NULL, &r));
  t = good;
  t.data = NULL;
  TRY("NULL data, 8 elements (allreduce)", weft_allreduce(mp_group, "misuse", &t, &t, WEFT_OP_SUM, NULL, &r));
  TRY("NULL data, 8 elements (allgather)", weft_allgather(mp_group, "misuse", &t, NULL, &r));
  TRY("NULL data, 8 elements (broadcast)", weft_broadcast(mp_group, "misuse", &t, 0, NULL, &r));
  TRY("NULL out data (allreduce)", weft_allreduce(mp_group, "misuse", &good, &t, WEFT_OP_SUM, NULL, &r));
  t = good;
  t.shape = neg;
  TRY("negative dim", weft_allreduce(mp_group, "misuse", &t, &t, WEFT_OP_SUM, NULL, &r));
  TRY("negative dim (allgather)", weft_allgather(mp_group, "misuse", &t, NULL, &r));
  static const int64_t ones[WEFT_MAX_DIMS + 1] = {8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  t = good;
  t.shape = ones; /* room for every dim it claims */
  t.ndim = -1;
  TRY("ndim -1", weft_allreduce(mp_group, "misuse", &t, &t, WEFT_OP_SUM, NULL, &r));
  t.ndim = WEFT_MAX_DIMS + 1;
  TRY("ndim 17", weft_broadcast(mp_group, "misuse", &t, 0, NULL, &r));
  t = good;
  t.shape = NULL;
  TRY("NULL shape with ndim 1", weft_allreduce(mp_group, "misuse", &t, &t, WEFT_OP_SUM, NULL, &r));
  t = good;
  t.dtype = WEFT_DTYPE_COUNT_;
  TRY("dtype 11", weft_allreduce(mp_group, "misuse", &t, &t, WEFT_OP_SUM, NULL, &r));
  t.dtype = (weft_dtype)-1;
  TRY("dtype -1", weft_allgather(mp_group, "misuse", &t, NULL, &r));
  TRY("reduce op 5", weft_allreduce(mp_group, "misuse", &good, &good, WEFT_OP_COUNT_, NULL, &r));
  TRY("reduce op -1", weft_allreduce(mp_group, "misuse", &good, &good, (weft_reduce_op)-1, NULL, &r));
  TRY("root -1", weft_broadcast(mp_group, "misuse", &good, -1, NULL, &r));
  TRY("root == size", weft_broadcast(mp_group, "misuse", &good, mp_size, NULL, &r));
  t = good;
  t.dtype = WEFT_DTYPE_INT32;
  TRY("allreduce in/out dtypes differ", weft_allreduce(mp_group, "misuse", &good, &t, WEFT_OP_SUM, NULL, &r));
  t = good;
  t.ndim = 2;
  t.shape = s2x4;
  TRY("allreduce in/out shapes differ", weft_allreduce(mp_group, "misuse", &good, &t, WEFT_OP_SUM, NULL, &r));
  int64_t *splits = mp_alloc((size_t)mp_size * 8);
  for (int j = 0; j < mp_size; j++) splits[j] = j == 0 ? 9 : 0;
  TRY("splits summing over dim 0", weft_alltoall(mp_group, "misuse", &good, splits, NULL, &r));
  for (int j = 0; j < mp_size; j++) splits[j] = j == mp_size - 1 ? -1 : 1;
  TRY("a negative split", weft_alltoall(mp_group, "misuse", &good, splits, NULL, &r));
  free(splits);
  if (8 % mp_size != 0)
    TRY("NULL splits, dim 0 not divisible by size", weft_alltoall(mp_group, "misuse", &good, NULL, NULL, &r));
  {
    int64_t rows = 8 / mp_size + (mp_rank < 8 % mp_size) + 1;
    t = good;
    t.shape = &rows;
    TRY("reducescatter output not the slice's shape",
        weft_reducescatter(mp_group, "misuse", &good, &t, WEFT_OP_SUM, NULL, &r));
  }
  t = good;
  t.data = data + 1;
  t.shape = (const int64_t[1]){4};
  {
    weft_tensor in4 = t;
    in4.data = data;
    TRY("allreduce in/out partly overlapping", weft_allreduce(mp_group, "misuse", &in4, &t, WEFT_OP_SUM, NULL, &r));
  }
  {
    weft_op_options o = WEFT_OP_OPTIONS_INIT;
    o.prescale = NAN;
    TRY("NaN prescale", weft_allreduce(mp_group, "misuse", &good, &good, WEFT_OP_SUM, &o, &r));
    o.prescale = 1.0;
    o.postscale = INFINITY;
    TRY("infinite postscale", weft_allreduce(mp_group, "misuse", &good, &good, WEFT_OP_SUM, &o, &r));
    o.postscale = 1.0;
    o.struct_size = 0;
    TRY("options struct_size 0", weft_allgather(mp_group, "misuse", &good, &o, &r));
  }
  if (weft_allreduce(mp_group, "misuse", &good, &good, WEFT_OP_SUM, NULL, NULL) != WEFT_ERR_INVALID_ARGUMENT)
    mp_fail("NULL req: not WEFT_ERR_INVALID_ARGUMENT");
  /* Handles (rule 2): NULL and foreign handles are WEFT_ERR_MISUSE. */
  E = WEFT_ERR_MISUSE;
  TRY("NULL group", weft_allreduce(NULL, "misuse", &good, &good, WEFT_OP_SUM, NULL, &r));
#undef TRY
  uint64_t foreign[64];
  memset(foreign, 0x11, sizeof foreign);
  if (weft_test(NULL) != WEFT_ERR_MISUSE) mp_fail("weft_test(NULL) is not WEFT_ERR_MISUSE");
  if (weft_wait(NULL, 0.1) != WEFT_ERR_MISUSE) mp_fail("weft_wait(NULL) is not WEFT_ERR_MISUSE");
  if (weft_request_free(NULL) != WEFT_ERR_MISUSE) mp_fail("weft_request_free(NULL) is not WEFT_ERR_MISUSE");
  if (weft_test((weft_request *)foreign) != WEFT_ERR_MISUSE) mp_fail("weft_test(foreign) is not WEFT_ERR_MISUSE");
  if (weft_request_free((weft_request *)foreign) != WEFT_ERR_MISUSE)
    mp_fail("weft_request_free(foreign) is not WEFT_ERR_MISUSE");
  if (weft_finalize(NULL) != WEFT_ERR_MISUSE) mp_fail("weft_finalize(NULL) is not WEFT_ERR_MISUSE");
  if (weft_finalize((weft_world *)foreign) != WEFT_ERR_MISUSE) mp_fail("weft_finalize(foreign) is not WEFT_ERR_MISUSE");
  if (weft_abort(NULL, "x") != WEFT_ERR_MISUSE) mp_fail("weft_abort(NULL) is not WEFT_ERR_MISUSE");
  if (weft_rank(NULL) != -1 || weft_size(NULL) != -1) mp_fail("weft_rank/size(NULL) is not -1");
  if (weft_barrier(NULL, "x", NULL, &r) != WEFT_ERR_MISUSE) mp_fail("weft_barrier(NULL group) is not WEFT_ERR_MISUSE");
  if (weft_async_error(mp_world) != WEFT_OK) mp_fail("weft_async_error after local misuse: not WEFT_OK");
  if (!weft_request_algorithm(NULL) || strcmp(weft_request_algorithm(NULL), ""))
    mp_fail("weft_request_algorithm(NULL) is not \"\"");
  if (strcmp(weft_request_algorithm((weft_request *)foreign), ""))
    mp_fail("weft_request_algorithm(foreign) is not \"\"");
  mp_case_end();

  /* The boundaries that are legal: a 255-byte name, NULL data with zero
   * elements. They are real collectives (every rank runs them). */
  mp_case("legal boundaries: 255-byte name, NULL data with 0 elements");
  longname[255] = 0;
  int64_t zero[1] = {0};
  weft_tensor empty = {WEFT_DTYPE_FLOAT64, 1, zero, NULL, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r1 = NULL, *r2 = NULL, *r3 = NULL;
  mp_submitted(weft_allreduce(mp_group, longname, &good, &good, WEFT_OP_SUM, NULL, &r1), &r1, "255-byte name");
  mp_submitted(weft_allreduce(mp_group, "empty.null", &empty, &empty, WEFT_OP_SUM, NULL, &r2), &r2, "NULL empty");
  mp_submitted(weft_allgather(mp_group, "empty.gather", &empty, NULL, &r3), &r3, "NULL empty allgather");
  if (mp_wait_ok(r1, "255-byte name") && !weft_request_algorithm(r1)[0]) mp_fail("the allreduce names no algorithm");
  mp_wait_ok(r2, "NULL data with 0 elements");
  if (mp_wait_ok(r3, "NULL data allgather")) {
    weft_tensor out;
    if (weft_request_output(r3, &out) != WEFT_OK || out.ndim != 1 || out.shape[0] != 0)
      mp_fail("allgather of empty tensors: output is not [0]");
  }
  weft_request_free(r1);
  weft_request_free(r2);
  weft_request_free(r3);
  /* a barrier runs no algorithm: "" (on one host's fast path: "board") */
  weft_request *rb = NULL;
  mp_submitted(weft_barrier(mp_group, "algo.barrier", NULL, &rb), &rb, "algo.barrier");
  if (mp_wait_ok(rb, "algo.barrier") && strcmp(weft_request_algorithm(rb), "") &&
      (mp_size == 1 || strcmp(weft_request_algorithm(rb), "board")))
    mp_fail("a barrier names algorithm '%s'", weft_request_algorithm(rb));
  weft_request_free(rb);
  mp_case_end();
}

/* ------------------------------------------------------------- basics */
static void test_basics(void) {
  mp_case("API basics: status strings, dtype sizes and names, version");
  static const size_t sizes[WEFT_DTYPE_COUNT_] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  for (int d = 0; d < WEFT_DTYPE_COUNT_; d++) {
    if (weft_dtype_size((weft_dtype)d) != sizes[d])
      mp_fail("weft_dtype_size(%d) is %zu", d, weft_dtype_size((weft_dtype)d));
    const char *n = weft_dtype_name((weft_dtype)d);
    if (!n || !strcmp(n, "unknown")) mp_fail("weft_dtype_name(%d) is %s", d, n ? n : "NULL");
  }
  if (weft_dtype_size(WEFT_DTYPE_COUNT_) != 0) mp_fail("weft_dtype_size(11) is not 0");
  if (strcmp(weft_dtype_name(WEFT_DTYPE_COUNT_), "unknown")) mp_fail("weft_dtype_name(11) is not \"unknown\"");
  if (strcmp(weft_reduce_op_name(WEFT_OP_COUNT_), "unknown")) mp_fail("weft_reduce_op_name(5) is not \"unknown\"");
  for (int s = WEFT_ERR_CANCELLED; s <= WEFT_IN_PROGRESS; s++) {
    const char *a = weft_status_string((weft_status)s);
    if (!a || !a[0] || !strcmp(a, "WEFT_ERR_UNKNOWN")) mp_fail("weft_status_string(%d) is %s", s, a ? a : "NULL");
    for (int u = WEFT_ERR_CANCELLED; a && u < s; u++)
      if (!strcmp(a, weft_status_string((weft_status)u))) mp_fail("statuses %d and %d share the name %s", u, s, a);
  }
  if (!weft_status_string((weft_status)-999)) mp_fail("weft_status_string(-999) is NULL");
  char v[32];
  snprintf(v, sizeof v, "%d.%d.%d", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
  if (strcmp(weft_version(), v)) mp_fail("weft_version() is %s, the header says %s", weft_version(), v);
  int lr = weft_local_rank(mp_world), ls = weft_local_size(mp_world);
  int cr = weft_cross_rank(mp_world), cs = weft_cross_size(mp_world);
  if (ls < 1 || lr < 0 || lr >= ls || cs < 1 || cr < 0 || cr >= cs || ls * cs != mp_size)
    mp_fail("local %d/%d cross %d/%d inconsistent with size %d (one host expected)", lr, ls, cr, cs, mp_size);
  mp_case_end();
}

int main(void) {
  mp_setup();
  test_basics();
  test_misuse();
  test_mismatches(); /* one rank: the cases it can get wrong alone */
  if (mp_size >= 2) {
    dup_round("dup.others", 0);
    dup_round("dup.zero", 1);
  } else {
    dup_round_held("dup.held");
  }
  dup_unobserved("dup.unseen");
  return mp_teardown();
}
