/* mpi_single.c - one process that looks launched by an MPI launcher of one
 * (OMPI_COMM_WORLD_SIZE=1, or PMI_SIZE=1, set by the test; no WEFT_*
 * variables): weft_init must give a world of one without MPI or WEFT_ADDR,
 * and an allreduce must return the input. With --expect-fail SUBSTR (a
 * launcher of several ranks on a build without MPI) weft_init must instead
 * fail with WEFT_ERR_NOT_SUPPORTED and a message containing SUBSTR.
 * Exit status 0 on success. Built with and without MPI. */
#include <stdio.h>
#include <string.h>

#include "weft.h"

int main(int argc, char **argv) {
  const char *expect = argc == 3 && !strcmp(argv[1], "--expect-fail") ? argv[2] : NULL;
  weft_world *w = NULL;
  weft_status st = weft_init(NULL, &w);
  if (expect) {
    if (st == WEFT_ERR_NOT_SUPPORTED && strstr(weft_last_error(), expect)) {
      printf("PASS: weft_init failed as expected: %s\n", weft_last_error());
      return 0;
    }
    printf("FAIL: weft_init returned %s (%s); expected NOT_SUPPORTED naming '%s'\n", weft_status_string(st),
           st == WEFT_OK ? "" : weft_last_error(), expect);
    if (st == WEFT_OK) weft_finalize(w);
    return 1;
  }
  if (st != WEFT_OK) {
    printf("FAIL: weft_init: %s: %s\n", weft_status_string(st), weft_last_error());
    return 1;
  }
  int fails = 0;
  if (weft_rank(w) != 0 || weft_size(w) != 1) {
    printf("FAIL: rank %d of %d, expected 0 of 1\n", weft_rank(w), weft_size(w));
    fails++;
  }
  double buf[5] = {1.5, -2, 3, 1e6, 0}, want[5];
  memcpy(want, buf, sizeof want);
  int64_t shape[1] = {5};
  weft_tensor t = {WEFT_DTYPE_FLOAT64, 1, shape, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  st = weft_allreduce(weft_world_group(w), "single", &t, &t, WEFT_OP_SUM, NULL, &req);
  if (st == WEFT_OK) st = weft_wait(req, 60);
  if (st != WEFT_OK) {
    printf("FAIL: allreduce: %s: %s\n", weft_status_string(st), weft_last_error());
    fails++;
  } else if (memcmp(buf, want, sizeof want)) {
    printf("FAIL: allreduce of one rank changed its input\n");
    fails++;
  }
  if (req) weft_request_free(req);
  st = weft_finalize(w);
  if (st != WEFT_OK) {
    printf("FAIL: weft_finalize: %s\n", weft_status_string(st));
    fails++;
  }
  if (!fails) printf("PASS: a launcher's single process is a world of one\n");
  return fails != 0;
}
