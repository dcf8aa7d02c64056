/* link_probe.c - a weft rank for the launcher tests of the status channel
 * (src/bootstrap/launcher_link.c): `link_probe`, two ranks under weftrun.
 * After weft_init each rank prints "rank R env=<WEFT_LAUNCHER_FD or
 * <unset>> fd4=<closed|cloexec|inherit>". Rank 1 then exits 3 at once;
 * rank 0 runs barriers until its world fails (rank 1 lost), which makes its
 * library write the status line, and exits 5. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "weft.h"

int main(void) {
  weft_world *w = NULL;
  if (weft_init(NULL, &w) != WEFT_OK) {
    fprintf(stderr, "link_probe: weft_init: %s\n", weft_last_error());
    return 2;
  }
  const char *env = getenv("WEFT_LAUNCHER_FD");
  int fl = fcntl(4, F_GETFD);
  printf("rank %d env=%s fd4=%s\n", weft_rank(w), env ? env : "<unset>",
         fl < 0 ? "closed" : (fl & FD_CLOEXEC) ? "cloexec" : "inherit");
  fflush(stdout);
  if (weft_rank(w) == 1) _exit(3);
  for (int i = 0; i < 100000; i++) {
    char name[32];
    snprintf(name, sizeof name, "b%d", i);
    weft_request *req = NULL;
    weft_status st = weft_barrier(weft_world_group(w), name, NULL, &req);
    if (st == WEFT_OK) st = weft_wait(req, 30);
    if (req) weft_request_free(req);
    if (st != WEFT_OK) break;
  }
  fprintf(stderr, "rank 0 failed: %s\n", weft_status_string(weft_async_error(w)));
  weft_finalize(w);
  return 5;
}
