/* remote_busy.c - how soon a rank's remote frames are acted on while its
 * worker runs a function (the one-host rings, docs/design.md section 11):
 * rank 0 starts a 1.5 s function on rank 1, then after DELAY_US sends a
 * keepalive (acted on without the worker) and times it.
 *
 *   weftrun -np 2 remote_busy [DELAY_US]   (default 2000)
 *
 * Prints "busy,DELAY_US,keepalive_us". Uses only the public API (weft.h). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static weft_status fn_slow(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in, (void)in, (void)out;
  usleep(1500000);
  return WEFT_OK;
}

static int barrier(weft_world *w) {
  weft_request *r;
  if (weft_barrier(weft_world_group(w), NULL, NULL, &r) != WEFT_OK) return 1;
  weft_status st = weft_wait(r, -1);
  weft_request_free(r);
  return st != WEFT_OK;
}

int main(int argc, char **argv) {
  int delay = argc > 1 ? atoi(argv[1]) : 2000;
  weft_world *w;
  if (weft_init(NULL, &w) != WEFT_OK) return 1;
  int rc = weft_size(w) != 2 || weft_remote_register(w, "slow", 0, 0, fn_slow, NULL) != WEFT_OK || barrier(w);
  if (!rc && weft_rank(w) == 0) {
    uint64_t ctx;
    weft_remote_call *c = NULL;
    rc = weft_remote_context_create(w, 1, 0, &ctx) != WEFT_OK ||
         weft_remote_execute(w, 1, ctx, "slow", 0, NULL, 0, NULL, 0, NULL, &c) != WEFT_OK;
    if (!rc) {
      usleep((useconds_t)delay);
      double t0 = now_us();
      rc = weft_remote_keepalive(w, 1, ctx) != WEFT_OK;
      printf("busy,%d,%.1f\n", delay, now_us() - t0);
      rc |= weft_remote_wait(c, -1) != WEFT_OK;
    }
    weft_remote_call_free(c);
    if (rc) fprintf(stderr, "remote_busy: %s\n", weft_last_error());
  }
  rc |= barrier(w);
  weft_finalize(w);
  return rc;
}
