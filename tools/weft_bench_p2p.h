/* weft_bench_p2p.h - weft-bench's point-to-point ops (weft_bench_p2p.c). */
#ifndef WEFT_BENCH_P2P_H
#define WEFT_BENCH_P2P_H
#include <stddef.h>

#include "weft.h"

typedef struct p2p_bench_args {
  int pingpong;          /* 1: ping-pong between ranks 0 and 1; 0: ring shift (sendrecv) */
  weft_dtype dtype;
  const size_t *sizes;   /* bytes */
  int nsizes, iters, warmup, check, csv;
  double time_target;    /* > 0: iterations chosen to take about this long per size */
} p2p_bench_args;

/* Runs the sizes on every rank of w; rank 0 prints nccl-tests columns.
 * 0: ok; 1: wrong data seen (--check); -1: an error (printed). */
int weft_bench_p2p(weft_world *w, const p2p_bench_args *a);

#endif
