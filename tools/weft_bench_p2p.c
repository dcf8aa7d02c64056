/* weft_bench_p2p.c - weft-bench's point-to-point ops, nccl-tests style:
 *  - sendrecv: a ring shift, every rank sends size bytes to rank+1 and
 *    receives as much from rank-1 per iteration (nccl-tests' sendrecv_perf);
 *    algbw = size / time, busbw = algbw;
 *  - pingpong: rank 0 sends size bytes to rank 1, which sends them back;
 *    time = half the round trip (one-way latency), algbw = size / time; the
 *    other ranks only take part in the synchronisation.
 * time is the mean over iterations, the max over ranks. With --check every
 * iteration's payload depends on (sender, iteration, byte) and every byte
 * received is compared. Uses only the public API (weft.h). */
#include "weft_bench_p2p.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pat(int sender, int it, size_t i) { return (uint8_t)(sender * 31 + it * 7 + (int)(i % 251)); }

static void fill(uint8_t *b, size_t n, int sender, int it) {
  for (size_t i = 0; i < n; i++) b[i] = pat(sender, it, i);
}

static int64_t count_wrong(const uint8_t *b, size_t n, int sender, int it) {
  int64_t w = 0;
  for (size_t i = 0; i < n; i++) w += b[i] != pat(sender, it, i);
  return w;
}

/* A collective on the world: max (time) or sum (wrong) of one value. */
static int reduce1(weft_world *w, const char *name, weft_dtype t, void *v, weft_reduce_op op) {
  int64_t one[1] = {1};
  weft_tensor x = {t, 1, one, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  weft_status st = weft_allreduce(weft_world_group(w), name, &x, &x, op, NULL, &r);
  if (st == WEFT_OK) st = weft_wait(r, -1);
  if (st != WEFT_OK) fprintf(stderr, "weft-bench: %s: %s: %s\n", name, weft_status_string(st), r ? weft_request_error(r) : weft_last_error());
  if (r) weft_request_free(r);
  return st == WEFT_OK ? 0 : -1;
}

static int wait_free(weft_request *r, const char *what) {
  weft_status st = weft_wait(r, -1);
  if (st != WEFT_OK) fprintf(stderr, "weft-bench: %s: %s: %s\n", what, weft_status_string(st), weft_request_error(r));
  weft_request_free(r);
  return st == WEFT_OK ? 0 : -1;
}

/* One iteration; *wrong counts bad bytes received (check). */
static int iter(weft_world *w, const p2p_bench_args *a, uint8_t *sbuf, uint8_t *rbuf, size_t elems, int it,
                int64_t *wrong) {
  weft_group *g = weft_world_group(w);
  int rank = weft_rank(w), size = weft_size(w);
  size_t bytes = elems * weft_dtype_size(a->dtype);
  int64_t shape[1] = {(int64_t)elems};
  weft_tensor st = {a->dtype, 1, shape, sbuf, WEFT_DEVICE_CPU, 0, NULL};
  weft_tensor rt = {a->dtype, 1, shape, rbuf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *s = NULL, *r = NULL;
  if (a->pingpong) {
    if (rank > 1) return 0;
    int peer = 1 - rank;
    if (rank == 0) {
      if (a->check) fill(sbuf, bytes, 0, it);
      /* as MPI_Send then MPI_Recv (bench/p2p_mpi.c): the receive is posted
       * while the peer turns the message around, off the critical path */
      if (weft_send(g, &st, peer, 1, NULL, &s) || weft_recv(g, &rt, peer, 1, NULL, &r)) goto submit_failed;
      if (wait_free(s, "send") | wait_free(r, "recv")) return -1;
      if (a->check) *wrong += count_wrong(rbuf, bytes, 0, it); /* rank 1 sends back what it got */
    } else {
      if (weft_recv(g, &rt, peer, 1, NULL, &r)) goto submit_failed;
      if (wait_free(r, "recv")) return -1;
      if (a->check) *wrong += count_wrong(rbuf, bytes, 0, it);
      weft_tensor back = {a->dtype, 1, shape, rbuf, WEFT_DEVICE_CPU, 0, NULL};
      if (weft_send(g, &back, peer, 1, NULL, &s)) goto submit_failed;
      if (wait_free(s, "send")) return -1;
    }
    return 0;
  }
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  if (a->check) fill(sbuf, bytes, rank, it);
  if (weft_recv(g, &rt, from, 2, NULL, &r) || weft_send(g, &st, to, 2, NULL, &s)) goto submit_failed;
  if (wait_free(s, "send") | wait_free(r, "recv")) return -1;
  if (a->check) *wrong += count_wrong(rbuf, bytes, from, it);
  return 0;
submit_failed:
  fprintf(stderr, "weft-bench: submitting a transfer: %s\n", weft_last_error());
  if (r) weft_request_free(r);
  if (s) weft_request_free(s);
  return -1;
}

int weft_bench_p2p(weft_world *w, const p2p_bench_args *a) {
  int rank = weft_rank(w), size = weft_size(w);
  const char *op = a->pingpong ? "pingpong" : "sendrecv";
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "weft-bench: --op %s needs at least 2 ranks\n", op);
    return -1;
  }
  size_t es = weft_dtype_size(a->dtype), maxb = 0;
  for (int i = 0; i < a->nsizes; i++)
    if (a->sizes[i] > maxb) maxb = a->sizes[i];
  uint8_t *sbuf = malloc(maxb + 1), *rbuf = malloc(maxb + 1);
  if (!sbuf || !rbuf) {
    fprintf(stderr, "weft-bench: out of memory\n");
    free(sbuf), free(rbuf);
    return -1;
  }
  memset(sbuf, 1, maxb + 1);
  memset(rbuf, 0, maxb + 1);
  if (rank == 0) {
    const char *tr = getenv("WEFT_TRANSPORT");
    printf("# weft-bench: weft %s, world size %d, transport %s\n", weft_version(), size,
           tr && *tr ? tr : "auto (shm between ranks of one host, tcp across hosts)");
    printf("# op %s, dtype %s, iters %d%s, warmup %d, check %s\n", op, weft_dtype_name(a->dtype), a->iters,
           a->time_target > 0 ? " (or the time target)" : "", a->warmup, a->check ? "on" : "off");
    if (a->csv) printf("op,dtype,ranks,bytes,count,iters,time_us,algbw_gbps,busbw_gbps,wrong\n");
    else
      printf("#\n# %12s %13s %13s %13s %13s %7s\n", "size(B)", "count(elts)", "time(us)", "algbw(GB/s)",
             "busbw(GB/s)", a->check ? "#wrong" : "");
    fflush(stdout);
  }
  int rc = 0, any_wrong = 0;
  for (int si = 0; si < a->nsizes && rc == 0; si++) {
    size_t elems = a->sizes[si] / es, bytes = elems * es;
    int64_t wrong = 0;
    char name[96];
    for (int it = 0; it < a->warmup && rc == 0; it++) rc = iter(w, a, sbuf, rbuf, elems, it, &wrong);
    int iters = a->iters;
    if (a->time_target > 0 && rc == 0) { /* one timed iteration decides how many fit */
      double t0 = now_s();
      rc = iter(w, a, sbuf, rbuf, elems, 0, &wrong);
      double t = now_s() - t0;
      snprintf(name, sizeof name, "bench.p2p.estimate.%zu", bytes);
      if (rc == 0) rc = reduce1(w, name, WEFT_DTYPE_FLOAT64, &t, WEFT_OP_MAX);
      iters = t > 0 ? (int)(a->time_target / t) : 1000;
      if (iters < 5) iters = 5;
      if (iters > 1000000) iters = 1000000;
    }
    if (rc) break;
    snprintf(name, sizeof name, "bench.p2p.start.%zu", bytes);
    weft_request *bar = NULL;
    if (weft_barrier(weft_world_group(w), name, NULL, &bar) != WEFT_OK || wait_free(bar, "barrier")) {
      rc = -1;
      break;
    }
    wrong = 0;
    double t0 = now_s();
    for (int it = 0; it < iters && rc == 0; it++) rc = iter(w, a, sbuf, rbuf, elems, it, &wrong);
    double t = (now_s() - t0) / iters;
    if (a->pingpong) t /= 2; /* one way */
    if (rc) break;
    snprintf(name, sizeof name, "bench.p2p.time.%zu", bytes);
    if (reduce1(w, name, WEFT_DTYPE_FLOAT64, &t, WEFT_OP_MAX)) { rc = -1; break; }
    snprintf(name, sizeof name, "bench.p2p.wrong.%zu", bytes);
    if (a->check && reduce1(w, name, WEFT_DTYPE_INT64, &wrong, WEFT_OP_SUM)) { rc = -1; break; }
    any_wrong |= wrong != 0;
    double algbw = (double)bytes / t / 1e9;
    if (rank == 0) {
      char wr[32] = "";
      if (a->check) snprintf(wr, sizeof wr, "%lld", (long long)wrong);
      if (a->csv)
        printf("%s,%s,%d,%zu,%zu,%d,%.3f,%.4f,%.4f,%s\n", op, weft_dtype_name(a->dtype), size, bytes, elems, iters,
               t * 1e6, algbw, algbw, wr);
      else
        printf("%14zu %13zu %13.2f %13.3f %13.3f %7s\n", bytes, elems, t * 1e6, algbw, algbw, wr);
      fflush(stdout);
    }
  }
  if (rank == 0 && any_wrong) printf("# FAILED: wrong data received\n");
  free(sbuf);
  free(rbuf);
  return rc < 0 ? -1 : any_wrong;
}
