/* consumer.c - a program built against an installed weft (pkg-config and
 * find_package): a 1-rank world, one allreduce. */
#include <stdio.h>
#include <weft.h>

int main(void) {
  weft_world *w;
  if (weft_init(NULL, &w) != WEFT_OK) {
    fprintf(stderr, "weft_init: %s\n", weft_last_error());
    return 1;
  }
  int v[3] = {1, 2, 3};
  int64_t shape[1] = {3};
  weft_tensor t = {WEFT_DTYPE_INT32, 1, shape, v, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r;
  weft_status st = weft_allreduce(weft_world_group(w), "v", &t, &t, WEFT_OP_SUM, NULL, &r);
  if (st == WEFT_OK) st = weft_wait(r, 10);
  if (st == WEFT_OK) weft_request_free(r);
  weft_finalize(w);
  if (st != WEFT_OK || v[0] != 1 || v[2] != 3) {
    fprintf(stderr, "consumer: %s\n", weft_status_string(st));
    return 1;
  }
  printf("consumer ok (weft %s)\n", weft_version());
  return 0;
}
