/* mp_onehost_scale.c - many ranks on one host (8, 16, 32 on a 2-core machine:
 * correctness only) through the one-host board (src/negotiate/board.c, its
 * arrival tree; src/engine/onehost.c): every collective small and at 1 MiB,
 * a few iterations each under one name (so the board's generations and
 * round reuse run), each waited before the next, against references
 * computed here in closed form.
 *
 * Usage (under weftrun -np N, every rank on this host; through fast.sh case
 * "scale", which checks each rank's finalize line):
 *   mp_onehost_scale
 *
 *   allreduce      float32 sum of 2 elements (8 B) and of 262144 (1 MiB):
 *                  rank r's element i is r + 1 + i % 97, so the sum is
 *                  n (n + 1) / 2 + n (i % 97), exact in any order
 *   broadcast      8 B and 1 MiB from root (iteration % n): the root's values
 *   allgather      16 elements (64 B) per rank, and 1 MiB in all (1 MiB / n
 *                  per rank): block q holds rank q's values q * 4096 + i % 4093
 *   reducescatter  float32 sum, 1 KiB and 1 MiB inputs (first dimension a
 *                  multiple of n): this rank's rows of the sum
 *   alltoall       n elements (one per destination) and 1 MiB: block j of
 *                  rank q's input holds q * 1000 + j * 10 + e % 7; rank me
 *                  receives block me of every rank
 *   barrier        named, and unnamed
 * Each rank prints "FASTEXPECT rank R: done=A-A diverted=0-0": every one of
 * these operations must complete on the board (WEFT_FAST_WAIT_SECONDS=30),
 * the 1 MiB ones included at any n (the large slots' size does not fall
 * with the ranks). */
#include "mp_harness.c"

enum { ITERS = 2, MIB_FLOATS = 262144 };

static long g_ops;

/* Waits for r, then frees it; 1 if it succeeded. */
static int done(weft_request *r, const char *what) {
  int ok = mp_wait_ok(r, what);
  weft_request_free(r);
  g_ops++;
  return ok;
}

static float ar_val(int r, size_t i) { return (float)(r + 1) + (float)(i % 97); }
static float ar_sum(int n, size_t i) { return (float)(n * (n + 1) / 2) + (float)n * (float)(i % 97); }

static int check_floats(const float *got, size_t count, float (*want)(int, size_t), int arg, const char *what) {
  for (size_t i = 0; i < count; i++)
    if (got[i] != want(arg, i))
      return mp_fail("%s: element %zu is %g, expected %g", what, i, (double)got[i], (double)want(arg, i));
  return 1;
}

static void allreduce(size_t count, const char *name) {
  mp_case("allreduce %s: %zu floats, %d iterations", name, count, ITERS);
  float *x = mp_alloc(count * 4), *y = mp_alloc(count * 4);
  int64_t shape[1] = {(int64_t)count};
  for (int it = 0; it < ITERS; it++) {
    for (size_t i = 0; i < count; i++) x[i] = ar_val(mp_rank, i), y[i] = -1.0f;
    weft_tensor in = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
    weft_tensor out = {WEFT_DTYPE_FLOAT32, 1, shape, y, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    mp_submitted(weft_allreduce(mp_group, name, &in, &out, WEFT_OP_SUM, NULL, &r), &r, name);
    if (done(r, name)) check_floats(y, count, ar_sum, mp_size, name);
  }
  free(x);
  free(y);
  mp_case_end();
}

static float bc_val(int root, size_t i) { return (float)(root * 7 + 1) + (float)(i % 1009); }

static void broadcast(size_t count, const char *name) {
  mp_case("broadcast %s: %zu floats, %d iterations", name, count, ITERS);
  float *x = mp_alloc(count * 4);
  int64_t shape[1] = {(int64_t)count};
  for (int it = 0; it < ITERS; it++) {
    int root = (it * 5 + 3) % mp_size;
    for (size_t i = 0; i < count; i++) x[i] = mp_rank == root ? bc_val(root, i) : -2.0f;
    weft_tensor io = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    mp_submitted(weft_broadcast(mp_group, name, &io, root, NULL, &r), &r, name);
    if (done(r, name)) check_floats(x, count, bc_val, root, name);
  }
  free(x);
  mp_case_end();
}

static float ag_val(int q, size_t i) { return (float)(q * 4096) + (float)(i % 4093); }

static void allgather(size_t per, const char *name) {
  mp_case("allgather %s: %zu floats per rank, %d iterations", name, per, ITERS);
  float *x = mp_alloc(per * 4);
  int64_t shape[1] = {(int64_t)per};
  for (size_t i = 0; i < per; i++) x[i] = ag_val(mp_rank, i);
  for (int it = 0; it < ITERS; it++) {
    weft_tensor in = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    mp_submitted(weft_allgather(mp_group, name, &in, NULL, &r), &r, name);
    weft_status st = mp_wait(r, name);
    weft_tensor out;
    if (st != WEFT_OK) {
      mp_fail("%s: %s: %s", name, weft_status_string(st), weft_request_error(r));
    } else if (weft_request_output(r, &out) != WEFT_OK || out.ndim != 1 ||
               out.shape[0] != (int64_t)(per * (size_t)mp_size)) {
      mp_fail("%s: output of the wrong shape", name);
    } else {
      for (int q = 0; q < mp_size; q++)
        if (!check_floats((const float *)out.data + (size_t)q * per, per, ag_val, q, name)) break;
    }
    weft_request_free(r);
    g_ops++;
  }
  free(x);
  mp_case_end();
}

/* The sum's rows this rank gets: rows / n each (rows a multiple of n). */
static void reducescatter(size_t count, const char *name) {
  mp_case("reducescatter %s: %zu floats in, %d iterations", name, count, ITERS);
  float *x = mp_alloc(count * 4);
  size_t mine = count / (size_t)mp_size, first = mine * (size_t)mp_rank;
  float *y = mp_alloc(mine * 4);
  int64_t shape[1] = {(int64_t)count}, oshape[1] = {(int64_t)mine};
  for (size_t i = 0; i < count; i++) x[i] = ar_val(mp_rank, i);
  for (int it = 0; it < ITERS; it++) {
    for (size_t i = 0; i < mine; i++) y[i] = -1.0f;
    weft_tensor in = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
    weft_tensor out = {WEFT_DTYPE_FLOAT32, 1, oshape, y, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    mp_submitted(weft_reducescatter(mp_group, name, &in, &out, WEFT_OP_SUM, NULL, &r), &r, name);
    if (done(r, name))
      for (size_t i = 0; i < mine; i++)
        if (y[i] != ar_sum(mp_size, first + i)) {
          mp_fail("%s: row %zu is %g, expected %g", name, first + i, (double)y[i], (double)ar_sum(mp_size, first + i));
          break;
        }
  }
  free(x);
  free(y);
  mp_case_end();
}

static float a2a_val(int q, int j, size_t e) { return (float)(q * 1000 + j * 10) + (float)(e % 7); }

static void alltoall(size_t block, const char *name) {
  mp_case("alltoall %s: %zu floats per destination, %d iterations", name, block, ITERS);
  size_t count = block * (size_t)mp_size;
  float *x = mp_alloc(count * 4);
  int64_t shape[1] = {(int64_t)count};
  for (int j = 0; j < mp_size; j++)
    for (size_t e = 0; e < block; e++) x[(size_t)j * block + e] = a2a_val(mp_rank, j, e);
  for (int it = 0; it < ITERS; it++) {
    weft_tensor in = {WEFT_DTYPE_FLOAT32, 1, shape, x, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *r = NULL;
    mp_submitted(weft_alltoall(mp_group, name, &in, NULL, NULL, &r), &r, name);
    weft_status st = mp_wait(r, name);
    weft_tensor out;
    if (st != WEFT_OK) {
      mp_fail("%s: %s: %s", name, weft_status_string(st), weft_request_error(r));
    } else if (weft_request_output(r, &out) != WEFT_OK || out.ndim != 1 || out.shape[0] != (int64_t)count) {
      mp_fail("%s: output of the wrong shape", name);
    } else {
      const float *o = out.data;
      for (int q = 0, bad = 0; q < mp_size && !bad; q++)
        for (size_t e = 0; e < block && !bad; e++)
          if (o[(size_t)q * block + e] != a2a_val(q, mp_rank, e))
            bad = mp_fail("%s: element %zu of rank %d's block is %g, expected %g", name, e, q,
                          (double)o[(size_t)q * block + e], (double)a2a_val(q, mp_rank, e));
    }
    weft_request_free(r);
    g_ops++;
  }
  free(x);
  mp_case_end();
}

static void barriers(void) {
  mp_case("barriers: named and unnamed, %d iterations", ITERS);
  for (int it = 0; it < ITERS; it++) {
    weft_request *r = NULL;
    mp_submitted(weft_barrier(mp_group, "scale.barrier", NULL, &r), &r, "scale.barrier");
    done(r, "scale.barrier");
    r = NULL;
    mp_submitted(weft_barrier(mp_group, NULL, NULL, &r), &r, "unnamed barrier");
    done(r, "unnamed barrier");
  }
  mp_case_end();
}

int main(void) {
  mp_setup();
  size_t n = (size_t)mp_size;
  allreduce(2, "scale.ar.8B");
  allreduce(MIB_FLOATS, "scale.ar.1M");
  broadcast(2, "scale.bc.8B");
  broadcast(MIB_FLOATS, "scale.bc.1M");
  allgather(16, "scale.ag.64B");
  allgather(MIB_FLOATS / n, "scale.ag.1M");
  reducescatter(256 / n * n, "scale.rs.1K");
  reducescatter(MIB_FLOATS / n * n, "scale.rs.1M");
  alltoall(1, "scale.a2a.small");
  alltoall(MIB_FLOATS / n, "scale.a2a.1M");
  barriers();
  mp_say("FASTEXPECT rank %d: done=%ld-%ld diverted=0-0", mp_rank, g_ops, g_ops);
  return mp_teardown();
}
