/* mpi_coexist.c - weft inside an application that uses MPI itself (run
 * under mpirun, no WEFT_ADDR): the application initialises MPI, weft
 * bootstraps from it (duplicating MPI_COMM_WORLD), and the application's
 * MPI_Allreduce calls on MPI_COMM_WORLD run while weft allreduces are in
 * flight on weft's engine thread (over MPI with WEFT_TRANSPORT=mpi). Twice:
 * weft_init works again after weft_finalize in the same process. Every
 * result is checked against a reference computed from the ranks' known
 * inputs (integers, exact in float64). The application calls MPI_Finalize.
 *
 * Usage: mpi_coexist [--level multiple|funneled]
 *   multiple (default): MPI_THREAD_MULTIPLE; everything above must work.
 *   funneled: MPI_THREAD_FUNNELED; with WEFT_TRANSPORT=mpi weft_init must
 *   fail with WEFT_ERR_NOT_SUPPORTED naming MPI_THREAD_MULTIPLE; with any
 *   other transport (MPI for the bootstrap only) it must work. */
#include <mpi.h>

#include "../mp/mp_harness.c"

#define ITERS 12

static void check_world(void) {
  int mr = -1, ms = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mr);
  MPI_Comm_size(MPI_COMM_WORLD, &ms);
  mp_rank = weft_rank(mp_world);
  mp_size = weft_size(mp_world);
  mp_group = weft_world_group(mp_world);
  if (mp_rank != mr || mp_size != ms) mp_fail("weft says rank %d of %d, MPI says %d of %d", mp_rank, mp_size, mr, ms);
}

/* One weft allreduce of n float64 in flight while the application runs
 * MPI_Allreduce on MPI_COMM_WORLD from this thread. */
static void interleave(int cycle, int it) {
  size_t n = it % 4 == 3 ? ((size_t)1 << 20) + 7 : 1000 + (size_t)it * 37; /* 8 MiB now and then */
  double *buf = mp_alloc(n * sizeof *buf);
  for (size_t k = 0; k < n; k++) buf[k] = (double)(mp_rank * 1000 + (int)(k % 1000) + it);
  int64_t shape[1] = {(int64_t)n};
  weft_tensor t = {WEFT_DTYPE_FLOAT64, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  char name[64];
  snprintf(name, sizeof name, "coexist.%d.%d", cycle, it);
  weft_request *req = NULL;
  weft_status st = weft_allreduce(mp_group, name, &t, &t, WEFT_OP_SUM, NULL, &req);
  if (st != WEFT_OK) mp_fatal("weft_allreduce %s: %s: %s", name, weft_status_string(st), weft_last_error());
  /* the application's own collectives while weft's is in flight */
  for (int j = 0; j < 3; j++) {
    long long mine = mp_rank + it + j, sum = -1;
    int rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    long long want = (long long)mp_size * (mp_size - 1) / 2 + (long long)mp_size * (it + j);
    if (rc != MPI_SUCCESS || sum != want) mp_fail("MPI_Allreduce %d/%d: %lld, expected %lld", it, j, sum, want);
  }
  st = weft_wait(req, MP_WAIT_SECONDS);
  if (st != WEFT_OK) mp_fatal("waiting for %s: %s: %s", name, weft_status_string(st), weft_last_error());
  weft_request_free(req);
  double ranksum = 1000.0 * mp_size * (mp_size - 1) / 2;
  for (size_t k = 0; k < n; k++) {
    double want = ranksum + (double)mp_size * (double)((int)(k % 1000) + it);
    if (buf[k] != want) {
      mp_fail("%s element %zu is %.1f, expected %.1f", name, k, buf[k], want);
      break;
    }
  }
  free(buf);
}

static int run_multiple(void) {
  for (int cycle = 0; cycle < 2; cycle++) {
    mp_case("cycle %d: weft_init inside the application's MPI", cycle);
    weft_status st = weft_init(NULL, &mp_world);
    if (st != WEFT_OK) mp_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
    check_world();
    mp_case_end();
    mp_case("cycle %d: weft allreduces interleaved with MPI_Allreduce on MPI_COMM_WORLD", cycle);
    for (int it = 0; it < ITERS; it++) interleave(cycle, it);
    mp_case_end();
    mp_case("cycle %d: weft_finalize", cycle);
    st = weft_finalize(mp_world);
    mp_world = NULL;
    if (st != WEFT_OK) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
    /* MPI_COMM_WORLD still works after weft left */
    int one = 1, n = 0;
    MPI_Allreduce(&one, &n, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (n != mp_size) mp_fail("MPI_Allreduce after weft_finalize: %d, expected %d", n, mp_size);
    mp_case_end();
  }
  return 0;
}

static int run_funneled(void) {
  const char *tp = getenv("WEFT_TRANSPORT");
  int want_fail = tp && !strcmp(tp, "mpi");
  mp_case("MPI_THREAD_FUNNELED, WEFT_TRANSPORT=%s: weft_init %s", tp ? tp : "(default)",
          want_fail ? "fails naming MPI_THREAD_MULTIPLE" : "works (MPI for the bootstrap only)");
  weft_status st = weft_init(NULL, &mp_world);
  if (want_fail) {
    if (st == WEFT_OK) {
      mp_fail("weft_init succeeded");
      weft_finalize(mp_world);
    } else if (st != WEFT_ERR_NOT_SUPPORTED || !strstr(weft_last_error(), "MPI_THREAD_MULTIPLE")) {
      mp_fail("weft_init: %s: %s", weft_status_string(st), weft_last_error());
    }
    mp_world = NULL;
    mp_case_end();
    return 0;
  }
  if (st != WEFT_OK) mp_fatal("weft_init: %s: %s", weft_status_string(st), weft_last_error());
  check_world();
  for (int it = 0; it < 4; it++) interleave(0, it);
  st = weft_finalize(mp_world);
  mp_world = NULL;
  if (st != WEFT_OK) mp_fail("weft_finalize: %s: %s", weft_status_string(st), weft_last_error());
  mp_case_end();
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int want = MPI_THREAD_MULTIPLE;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--level") && i + 1 < argc && !strcmp(argv[i + 1], "funneled")) want = MPI_THREAD_FUNNELED, i++;
    else if (!strcmp(argv[i], "--level") && i + 1 < argc && !strcmp(argv[i + 1], "multiple")) i++;
    else {
      fprintf(stderr, "usage: mpi_coexist [--level multiple|funneled]\n");
      return 2;
    }
  }
  int provided = -1;
  if (MPI_Init_thread(&argc, &argv, want, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &mp_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mp_size);
  if (want == MPI_THREAD_MULTIPLE && provided < MPI_THREAD_MULTIPLE) {
    /* a failure, not a pass: nothing of this test ran (and WEFT_TRANSPORT=mpi
     * cannot run on such an MPI either) */
    mp_say("FAIL rank %d: this MPI provides thread level %d, not MPI_THREAD_MULTIPLE: nothing checked", mp_rank,
           provided);
    MPI_Finalize();
    return 1;
  }
  if (want == MPI_THREAD_MULTIPLE) run_multiple();
  else run_funneled();
  int n = atomic_load(&mp_failures);
  mp_say("%s rank %d: %d failure(s)", n ? "FAILED" : "DONE", mp_rank, n);
  MPI_Finalize();
  return n ? 1 : 0;
}
