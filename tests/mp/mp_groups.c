/* mp_groups.c - groups resolved through a leader (weft.h: weft_group_resolve,
 * weft_group_create; src/negotiate/resolve.c). Run with a short
 * WEFT_TIMEOUT_SECONDS (the deadline cases wait for it). Every rank checks:
 *  - keyed: key 7 over the whole world: the members are the world's ranks in
 *    order, an allreduce in it sums to the reference, a second resolve gives
 *    the same handle without a message (mp --frames and groups_frames.sh
 *    count the JOINs), another size or device type for it is MISMATCH
 *    (local), destroying it is MISUSE; key 11 over ranks 1.. (rank 0, the
 *    leader, not a member);
 *  - bad arguments: size 0 and world size + 1, device type 5 (local
 *    INVALID_ARGUMENT naming the key), NULL out, NULL world;
 *  - disagreements, on every rank that called, with the message naming ranks
 *    and values: sizes (key 21: the last rank gives size - 1), device types
 *    (key 22: the last rank gives sim), a rank joining a complete group (key
 *    23: size - 1 members first, then the last rank), and later calls of a
 *    failed key get the same error;
 *  - the deadline (key 24: the last rank never calls): TIMEOUT "group 24:
 *    waiting for N members, have ranks 0, 1, ..." on the others, and the
 *    same when the last rank calls afterwards;
 *  - member lists (3 ranks or more): ranks 0..n-3 create {0..n-2} while
 *    ranks n-2 and n-1 create {0..n-1}: every one gets MISMATCH at once
 *    (well within the deadline) naming both lists; a list whose other member
 *    never comes fails with TIMEOUT naming who came;
 *  - the world is healthy after all of it (an allreduce).
 * --frames: only resolves key 31 five times and key 32 twice (the shell
 * counts the JOIN log lines). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.c"

static double g_timeout = 4.0; /* WEFT_TIMEOUT_SECONDS as the test sets it */

/* A world allreduce of float ones in group g: every member sums to its size. */
static void check_sum(weft_group *g, const char *name) {
  int64_t n = 3;
  float x[3] = {1, 2, 3};
  weft_tensor t = {WEFT_DTYPE_FLOAT32, 1, &n, x, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *r = NULL;
  weft_status st = weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &r);
  mp_submitted(st, &r, name);
  if (!mp_wait_ok(r, name)) return;
  int s = weft_group_size(g);
  for (int i = 0; i < 3; i++)
    if (x[i] != (float)((i + 1) * s)) mp_fail("%s: element %d is %g, want %d", name, i, x[i], (i + 1) * s);
  weft_request_free(r);
}

static void world_barrier(const char *name) {
  weft_request *r = NULL;
  mp_submitted(weft_barrier(mp_group, name, NULL, &r), &r, name);
  if (mp_wait_ok(r, name)) weft_request_free(r);
}

/* Expects st == want with a message containing each of the NULL-terminated
 * strings. */
static void expect(weft_status st, weft_status want, const char *what, ...) {
  const char *msg = weft_last_error();
  if (st != want) {
    mp_fail("%s: %s (%s), want %s", what, weft_status_string(st), msg, weft_status_string(want));
    return;
  }
  va_list ap;
  va_start(ap, what);
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(msg, s)) mp_fail("%s: message \"%s\" lacks \"%s\"", what, msg, s);
  va_end(ap);
}

static void keyed_ok(void) {
  mp_case("keyed group 7 over the world");
  weft_group *g = NULL, *again = NULL;
  weft_status st = weft_group_resolve(mp_world, 7, mp_size, WEFT_DEVICE_CPU, &g);
  if (st != WEFT_OK || !g) mp_fatal("resolve 7: %s: %s", weft_status_string(st), weft_last_error());
  if (weft_group_size(g) != mp_size || weft_group_rank(g) != mp_rank)
    mp_fail("group 7: rank %d of %d, want %d of %d", weft_group_rank(g), weft_group_size(g), mp_rank, mp_size);
  check_sum(g, "g7.sum");
  for (int i = 0; i < 3; i++) {
    st = weft_group_resolve(mp_world, 7, mp_size, WEFT_DEVICE_CPU, &again);
    if (st != WEFT_OK || again != g) mp_fail("resolve 7 again: %s, handle %p vs %p", weft_status_string(st),
                                             (void *)again, (void *)g);
  }
  char want[160];
  snprintf(want, sizeof want, "group 7 was resolved here with size %d and device type cpu; this call gives size %d "
           "and device type cpu", mp_size, mp_size + 1 > mp_size ? mp_size : mp_size);
  if (mp_size > 1) {
    st = weft_group_resolve(mp_world, 7, mp_size - 1, WEFT_DEVICE_CPU, &again);
    snprintf(want, sizeof want, "group 7 was resolved here with size %d and device type cpu; this call gives size %d",
             mp_size, mp_size - 1);
    expect(st, WEFT_ERR_MISMATCH, "resolve 7 with another size", want, (char *)NULL);
  }
  st = weft_group_resolve(mp_world, 7, mp_size, WEFT_DEVICE_KIND_SIM, &again);
  expect(st, WEFT_ERR_MISMATCH, "resolve 7 with another device type", "device type cpu; this call gives",
         "device type sim", (char *)NULL);
  expect(weft_group_destroy(g), WEFT_ERR_MISUSE, "destroy a keyed group", "keyed group", (char *)NULL);
  check_sum(g, "g7.sum2"); /* still there */
  mp_case_end();

  if (mp_size >= 3) {
    mp_case("keyed group 11 over ranks 1.. (the leader not a member)");
    if (mp_rank > 0) {
      st = weft_group_resolve(mp_world, 11, mp_size - 1, WEFT_DEVICE_CPU, &g);
      if (st != WEFT_OK) mp_fatal("resolve 11: %s: %s", weft_status_string(st), weft_last_error());
      if (weft_group_size(g) != mp_size - 1 || weft_group_rank(g) != mp_rank - 1)
        mp_fail("group 11: rank %d of %d", weft_group_rank(g), weft_group_size(g));
      check_sum(g, "g11.sum");
    }
    world_barrier("g11.done");
    mp_case_end();
  }
}

static void bad_args(void) {
  mp_case("keyed group: bad arguments");
  weft_group *g = (weft_group *)&g;
  expect(weft_group_resolve(mp_world, 5, 0, WEFT_DEVICE_CPU, &g), WEFT_ERR_INVALID_ARGUMENT, "size 0", "group 5",
         "size 0", (char *)NULL);
  if (g) mp_fail("size 0: the handle was not cleared");
  expect(weft_group_resolve(mp_world, 5, mp_size + 1, WEFT_DEVICE_CPU, &g), WEFT_ERR_INVALID_ARGUMENT,
         "size over the world", "out of range", (char *)NULL);
  expect(weft_group_resolve(mp_world, 5, 1, 5, &g), WEFT_ERR_INVALID_ARGUMENT, "device type 5", "device type 5",
         (char *)NULL);
  expect(weft_group_resolve(mp_world, 5, 1, WEFT_DEVICE_CPU, NULL), WEFT_ERR_INVALID_ARGUMENT, "NULL out",
         (char *)NULL);
  expect(weft_group_resolve(NULL, 5, 1, WEFT_DEVICE_CPU, &g), WEFT_ERR_MISUSE, "NULL world", (char *)NULL);
  mp_case_end();
}

static void disagreements(void) {
  int last = mp_size - 1;
  weft_group *g = NULL;
  char want[256];
  if (mp_size >= 2) {
    weft_status st;
    const char *msg;
    char a[96], b[96];
    /* from 3 ranks: on 2, the last rank's size of 1 is a whole group by
     * itself, which completes when it comes first */
    if (mp_size >= 3) {
      mp_case("keyed group 21: sizes disagree");
      int size = mp_rank == last ? mp_size - 1 : mp_size;
      st = weft_group_resolve(mp_world, 21, size, WEFT_DEVICE_CPU, &g);
      /* whoever came first fixed the size: the last rank "gives" its size, or
       * "gave" it when it came first */
      msg = weft_last_error();
      snprintf(a, sizeof a, "rank %d gives group size %d, rank ", last, mp_size - 1);
      snprintf(b, sizeof b, "gives group size %d, rank %d gave %d", mp_size, last, mp_size - 1);
      if (st != WEFT_ERR_MISMATCH || !strstr(msg, "group 21: rank ") || (!strstr(msg, a) && !strstr(msg, b)))
        mp_fail("group 21: %s: %s", weft_status_string(st), msg);
      st = weft_group_resolve(mp_world, 21, size, WEFT_DEVICE_CPU, &g); /* final */
      if (st != WEFT_ERR_MISMATCH || !strstr(weft_last_error(), "group 21: rank "))
        mp_fail("group 21 again: %s: %s", weft_status_string(st), weft_last_error());
      mp_case_end();
    }

    mp_case("keyed group 22: device types disagree");
    st = weft_group_resolve(mp_world, 22, mp_size, mp_rank == last ? WEFT_DEVICE_KIND_SIM : WEFT_DEVICE_CPU, &g);
    msg = weft_last_error();
    snprintf(a, sizeof a, "rank %d gives device type sim, rank ", last);
    snprintf(b, sizeof b, "gives device type cpu, rank %d gave sim", last);
    if (st != WEFT_ERR_MISMATCH || !strstr(msg, "group 22: rank ") || (!strstr(msg, a) && !strstr(msg, b)))
      mp_fail("group 22: %s: %s", weft_status_string(st), msg);
    mp_case_end();

    mp_case("keyed group 23: a rank joins it complete");
    if (mp_rank != last) {
      st = weft_group_resolve(mp_world, 23, mp_size - 1, WEFT_DEVICE_CPU, &g);
      if (st != WEFT_OK) mp_fail("group 23 member: %s: %s", weft_status_string(st), weft_last_error());
      else check_sum(g, "g23.sum");
    }
    world_barrier("g23.formed");
    if (mp_rank == last) {
      st = weft_group_resolve(mp_world, 23, mp_size - 1, WEFT_DEVICE_CPU, &g);
      int o = snprintf(want, sizeof want, "group 23 is complete: its %d members are ranks ", mp_size - 1);
      for (int r = 0; r < last; r++) o += snprintf(want + o, sizeof want - (size_t)o, "%s%d", r ? ", " : "", r);
      snprintf(want + o, sizeof want - (size_t)o, "; rank %d cannot join it", last);
      expect(st, WEFT_ERR_MISMATCH, "group 23 complete", want, (char *)NULL);
    }
    mp_case_end();
  }

  mp_case("keyed group 24: a member never comes");
  if (mp_size >= 2) {
    double t0 = mp_now();
    int o = snprintf(want, sizeof want, "group 24: waiting for %d members, have rank%s ", mp_size,
                     mp_size - 1 == 1 ? "" : "s");
    for (int r = 0; r < last; r++) o += snprintf(want + o, sizeof want - (size_t)o, "%s%d", r ? ", " : "", r);
    if (mp_rank != last) {
      weft_status st = weft_group_resolve(mp_world, 24, mp_size, WEFT_DEVICE_CPU, &g);
      expect(st, WEFT_ERR_TIMEOUT, "group 24", want, (char *)NULL);
      if (mp_now() - t0 > g_timeout + 10)
        mp_fail("group 24 failed after %.1f s (timeout %g)", mp_now() - t0, g_timeout);
    }
    world_barrier("g24.timed_out");
    if (mp_rank == last) /* too late: the same answer */
      expect(weft_group_resolve(mp_world, 24, mp_size, WEFT_DEVICE_CPU, &g), WEFT_ERR_TIMEOUT, "group 24 late", want,
             (char *)NULL);
  }
  mp_case_end();
}

static void lists(void) {
  if (mp_size < 3) return;
  mp_case("member lists that wait for each other");
  int n = mp_size, short_list[64], long_list[64];
  for (int i = 0; i < n; i++) short_list[i] = long_list[i] = i;
  int in_long = mp_rank >= n - 2;
  weft_group *g = (weft_group *)&g;
  weft_status st = weft_group_create(mp_world, in_long ? long_list : short_list, in_long ? n : n - 1, &g);
  char l1[256], l2[256];
  int o1 = 0, o2 = 0;
  for (int i = 0; i < n - 1; i++) o1 += snprintf(l1 + o1, sizeof l1 - (size_t)o1, "%s%d", i ? ", " : "", i);
  for (int i = 0; i < n; i++) o2 += snprintf(l2 + o2, sizeof l2 - (size_t)o2, "%s%d", i ? ", " : "", i);
  char a[300], b[300];
  snprintf(a, sizeof a, " lists ranks %s (", l1);
  snprintf(b, sizeof b, " lists ranks %s (", l2);
  expect(st, WEFT_ERR_MISMATCH, "crossed lists", "ranks disagree on the members", a, b, (char *)NULL);
  if (g) mp_fail("crossed lists: the handle was not cleared");
  mp_case_end();

  mp_case("a member list whose member never comes");
  if (mp_rank == 0) {
    int pair[2] = {0, n - 1};
    char want[128];
    snprintf(want, sizeof want, "the group of ranks 0, %d: waiting for 2 members, have rank 0", n - 1);
    expect(weft_group_create(mp_world, pair, 2, &g), WEFT_ERR_TIMEOUT, "list {0,last} alone", want, (char *)NULL);
  }
  world_barrier("lists.done");
  mp_case_end();
}

static void frames_only(void) {
  mp_case("repeated resolves (frames counted by the shell)");
  weft_group *g = NULL, *first = NULL;
  for (int i = 0; i < 5; i++) {
    weft_status st = weft_group_resolve(mp_world, 31, mp_size, WEFT_DEVICE_CPU, &g);
    if (st != WEFT_OK) mp_fatal("resolve 31: %s: %s", weft_status_string(st), weft_last_error());
    if (!first) first = g;
    if (g != first) mp_fail("resolve 31 #%d: another handle", i);
  }
  for (int i = 0; i < 2; i++) {
    weft_status st = weft_group_resolve(mp_world, 32, mp_size, WEFT_DEVICE_CPU, &g);
    if (st != WEFT_OK) mp_fatal("resolve 32: %s: %s", weft_status_string(st), weft_last_error());
  }
  check_sum(g, "g32.sum");
  mp_case_end();
}

int main(int argc, char **argv) {
  const char *t = getenv("WEFT_TIMEOUT_SECONDS");
  if (t && atof(t) > 0) g_timeout = atof(t);
  mp_setup();
  if (argc > 1 && !strcmp(argv[1], "--frames")) {
    frames_only();
  } else {
    keyed_ok();
    bad_args();
    disagreements();
    lists();
    mp_case("the world after it all");
    check_sum(mp_group, "world.sum");
    mp_case_end();
  }
  return mp_teardown();
}
