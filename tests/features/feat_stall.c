/* feat_stall.c - the stall inspector: a tensor some ranks submitted and
 * another never did is reported by name, with the missing rank, and (with
 * a stall shutdown) fails on the waiting ranks in about that time.
 *
 * Modes (the log lines are checked by features.sh from each rank's stderr;
 * this program checks statuses, messages, timing and results):
 *   --mode warn DIR      3 ranks, WEFT_STALL_CHECK_SECONDS=1: ranks 0 and 1
 *                        submit allreduce "stuck", rank 2 only after 3.5 s;
 *                        the allreduce then completes with the right sum.
 *   --mode shutdown DIR  3 ranks, WEFT_STALL_CHECK_SECONDS=1 and
 *                        WEFT_STALL_SHUTDOWN_SECONDS=2: rank 2 never submits
 *                        "stuck"; ranks 0 and 1 get WEFT_ERR_TIMEOUT naming
 *                        'stuck' and rank 2 after 1.5 .. 8 s (about 2 s).
 *   --mode group DIR     4 ranks, same settings, in the process set {1,2,3}:
 *                        world rank 3 never submits "gstuck"; ranks 1 and 2
 *                        get WEFT_ERR_TIMEOUT naming world rank 3.
 * After a shutdown the waiting ranks create DIR/released; the others poll
 * for it before they submit anything else (anything they submitted earlier
 * would itself stall), then every rank checks that the job still works. */
#include <sys/stat.h>

#include "feat_common.h"

static char g_flag[1024];

static void release(void) {
  FILE *f = fopen(g_flag, "w");
  if (!f) feat_fatal("cannot create %s", g_flag);
  fclose(f);
}

static void wait_release(void) {
  double end = feat_now() + 40;
  struct stat sb;
  while (stat(g_flag, &sb) != 0) {
    if (feat_now() > end) feat_fatal("%s never appeared: the waiting ranks did not get their error", g_flag);
    feat_sleep_ms(10);
  }
}

static void job_still_works(void) {
  feat_case("the job works after the stall");
  int64_t one = 1;
  int32_t v = feat_rank + 1;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &v);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(weft_world_group(feat_world), "after", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "after");
  if (feat_wait_ok(r, "after") && v != feat_size * (feat_size + 1) / 2) feat_fail("after: sum %d", v);
  weft_request_free(r);
  feat_case_end();
}

/* Submits allreduce name in g and waits; expects a stall timeout naming
 * missing_world_rank when shutdown, else success after late_seconds. */
static void waiter(weft_group *g, const char *name, int shutdown, const char *needle, double late_seconds,
                   int32_t expect_sum) {
  int64_t one = 1;
  int32_t v = feat_rank + 1;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &v);
  weft_request *r = NULL;
  double t0 = feat_now();
  feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
  weft_status st = feat_wait(r, name);
  double dt = feat_now() - t0;
  const char *msg = weft_request_error(r);
  feat_say("rank %d: '%s' completed after %.2f s: %s %s", feat_rank, name, dt, weft_status_string(st), msg);
  if (shutdown) {
    if (st != WEFT_ERR_TIMEOUT)
      feat_fail("expected WEFT_ERR_TIMEOUT from the stall shutdown, got %s (%s)", weft_status_string(st), msg);
    else if (!strstr(msg, name) || !strstr(msg, needle))
      feat_fail("the timeout message should name '%s' and '%s': \"%s\"", name, needle, msg);
    if (dt < 1.5 || dt > 8.0) feat_fail("the stall shutdown took %.2f s (WEFT_STALL_SHUTDOWN_SECONDS=2)", dt);
  } else {
    if (st != WEFT_OK) feat_fail("'%s': %s: %s", name, weft_status_string(st), msg);
    else if (v != expect_sum) feat_fail("'%s': sum %d, expected %d", name, v, expect_sum);
    if (dt < late_seconds - 0.5) feat_fail("'%s' completed after %.2f s, before the late rank submitted", name, dt);
  }
  weft_request_free(r);
}

int main(int argc, char **argv) {
  if (argc != 4 || strcmp(argv[1], "--mode")) {
    fprintf(stderr, "usage: feat_stall --mode warn|shutdown|group DIR\n");
    return 2;
  }
  const char *mode = argv[2];
  snprintf(g_flag, sizeof g_flag, "%s/released", argv[3]);
  feat_setup();
  weft_group *world = weft_world_group(feat_world);
  if (!strcmp(mode, "warn")) {
    feat_case("stall report: rank 2 submits 'stuck' 3.5 s late");
    if (feat_size != 3) feat_fatal("run with 3 ranks");
    if (feat_rank == 2) {
      feat_sleep_ms(3500);
      waiter(world, "stuck", 0, NULL, 0, 6);
    } else {
      waiter(world, "stuck", 0, NULL, 3.5, 6);
    }
    feat_case_end();
  } else if (!strcmp(mode, "shutdown")) {
    feat_case("stall shutdown: rank 2 never submits 'stuck'");
    if (feat_size != 3) feat_fatal("run with 3 ranks");
    if (feat_rank == 2) {
      wait_release();
    } else {
      waiter(world, "stuck", 1, "rank(s) 2", 0, 0);
      release();
    }
    feat_case_end();
    job_still_works();
  } else if (!strcmp(mode, "group")) {
    feat_case("stall shutdown in {1,2,3}: world rank 3 never submits 'gstuck'");
    if (feat_size != 4) feat_fatal("run with 4 ranks");
    static const int members[3] = {1, 2, 3};
    weft_group *g = NULL;
    if (feat_rank != 0) {
      weft_status st = weft_group_create(feat_world, members, 3, &g);
      if (st != WEFT_OK) feat_fatal("weft_group_create: %s: %s", weft_status_string(st), weft_last_error());
    }
    if (feat_rank == 1 || feat_rank == 2) {
      waiter(g, "gstuck", 1, "rank(s) 3", 0, 0);
      if (feat_rank == 1) release();
    }
    wait_release();
    if (g && weft_group_destroy(g) != WEFT_OK) feat_fail("destroy: %s", weft_last_error());
    feat_case_end();
    job_still_works();
  } else {
    fprintf(stderr, "feat_stall: unknown mode '%s'\n", mode);
    return 2;
  }
  return feat_teardown();
}
