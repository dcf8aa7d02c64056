/* remote_bench.c - weft's side of bench/remote_vs_torch_rpc.sh: remote
 * calls from rank 0 to rank 1, one at a time, as torch.distributed.rpc's
 * rpc_sync makes them (bench/torch_rpc.py is the other side).
 *
 *   weftrun -np 2 remote_bench ITERS SIZE[,SIZE...]
 *
 * SIZE 0: an empty call (a function of no inputs and no outputs); else a
 * call of a function taking one uint8 tensor of SIZE bytes, sent with the
 * call (inline, or on the bulk path when large), returning nothing. Each
 * call is timed from weft_remote_execute to the end of weft_remote_wait;
 * after 3 warm-up calls (size 0: 20) rank 0 prints one line per size:
 *   weft,SIZE,ITERS,median_us,min_us,MBps (SIZE / median)
 * Uses only the public API (weft.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static weft_status fn_noop(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)in, (void)out;
  return WEFT_OK;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int check(weft_status st, const char *what) {
  if (st == WEFT_OK) return 0;
  fprintf(stderr, "remote_bench: %s: %s: %s\n", what, weft_status_string(st), weft_last_error());
  return 1;
}

static int barrier(weft_world *w) {
  weft_request *r;
  if (check(weft_barrier(weft_world_group(w), NULL, NULL, &r), "barrier")) return 1;
  weft_status st = weft_wait(r, -1);
  weft_request_free(r);
  return check(st, "barrier");
}

/* ITERS timed calls of size bytes to rank 1 (after warm-up ones); the line. */
static int run_size(weft_world *w, uint64_t ctx, size_t size, int iters, uint8_t *buf) {
  int64_t shape[1] = {(int64_t)size};
  weft_tensor t = {WEFT_DTYPE_UINT8, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_remote_input in[1] = {{.tensor = &t}};
  int warm = size ? 3 : 20;
  double *dt = calloc((size_t)iters, sizeof *dt);
  if (!dt) return 1;
  for (int i = -warm; i < iters; i++) {
    weft_remote_call *c;
    double t0 = now_us();
    if (check(weft_remote_execute(w, 1, ctx, size ? "sink" : "noop", size ? 1 : 0, in, 0, NULL, 0, NULL, &c),
              "execute")) {
      free(dt);
      return 1;
    }
    weft_status st = weft_remote_wait(c, -1);
    double t1 = now_us();
    if (st != WEFT_OK) fprintf(stderr, "remote_bench: call: %s\n", weft_remote_call_error(c));
    weft_remote_call_free(c);
    if (st != WEFT_OK) {
      free(dt);
      return 1;
    }
    if (i >= 0) dt[i] = t1 - t0;
  }
  qsort(dt, (size_t)iters, sizeof *dt, cmp_d);
  double med = iters % 2 ? dt[iters / 2] : (dt[iters / 2 - 1] + dt[iters / 2]) / 2;
  printf("weft,%zu,%d,%.2f,%.2f,%.1f\n", size, iters, med, dt[0], size ? (double)size / med : 0.0);
  fflush(stdout);
  free(dt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: weftrun -np 2 remote_bench ITERS SIZE[,SIZE...]\n");
    return 2;
  }
  int iters = atoi(argv[1]);
  weft_world *w;
  if (check(weft_init(NULL, &w), "weft_init")) return 1;
  int rc = weft_size(w) != 2;
  if (rc) fprintf(stderr, "remote_bench: run it with 2 ranks\n");
  rc = rc || check(weft_remote_register(w, "noop", 0, 0, fn_noop, NULL), "register") ||
       check(weft_remote_register(w, "sink", 1, 0, fn_noop, NULL), "register") || barrier(w);
  if (!rc && weft_rank(w) == 0) {
    uint64_t ctx;
    rc = check(weft_remote_context_create(w, 1, 0, &ctx), "context");
    char *list = strdup(argv[2]);
    for (char *s = strtok(list, ","); s && !rc; s = strtok(NULL, ",")) {
      size_t size = strtoull(s, NULL, 10);
      int n = size >= ((size_t)16 << 20) ? (iters / 10 > 5 ? iters / 10 : 5) : iters;
      uint8_t *buf = malloc(size ? size : 1);
      if (!buf) return 1;
      memset(buf, 1, size);
      rc = run_size(w, ctx, size, n, buf);
      free(buf);
    }
    free(list);
  }
  if (!rc) rc = barrier(w);
  weft_finalize(w);
  return rc;
}
