/* mp_steps.c - step sequences (weft_step_next/retire/refresh, weft.h).
 * Default cases (1 or more ranks):
 *  - every rank gets the same step id for a graph key, again and again
 *    until it is retired; retiring it on every rank gives id + 1 everywhere;
 *    retiring another id (INVALID_ARGUMENT) or an unknown key (NOT_FOUND)
 *    changes nothing; two keys have their own sequences;
 *  - refresh: the leader's gives a new id, then the members' fetch it: the
 *    same new id everywhere;
 *  - 3 or more ranks: a group {1 .. n-1}, led by rank 1, agrees on its own.
 * --frames: ranks call weft_step_next of key 99 five times, retire, and
 *   next three times; steps_frames.sh counts the STEP_REQs in the debug log
 *   (one per member that is not the leader).
 * --die (supervised): rank 0, the world group's leader, stalls its engine
 *   thread in a completion callback and dies by SIGKILL there, while the
 *   others' requests for a new key wait for it: they fail within 12 s with
 *   WEFT_ERR_PEER_LOST naming rank 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_harness.c"

static int64_t next_id(weft_group *g, int64_t key) {
  int64_t id = -2;
  weft_status st = weft_step_next(g, key, &id);
  if (st != WEFT_OK) mp_fail("weft_step_next(%lld): %s: %s", (long long)key, weft_status_string(st), weft_last_error());
  return id;
}

static void retire_ok(weft_group *g, int64_t key, int64_t id) {
  weft_status st = weft_step_retire(g, key, id);
  if (st != WEFT_OK) mp_fail("weft_step_retire(%lld, %lld): %s: %s", (long long)key, (long long)id,
                             weft_status_string(st), weft_last_error());
}

static void same_ids(void) {
  mp_case("every rank gets the same step id until it is retired; retire advances it");
  int64_t a = next_id(mp_group, 7);
  if (a < 0 || (uint64_t)a >= (1ull << 57)) mp_fail("step id %lld is out of 0 .. 2^57-1", (long long)a);
  mp_same_everywhere("steps.a", (uint64_t)a);
  for (int i = 0; i < 3; i++)
    if (next_id(mp_group, 7) != a) mp_fail("the id of key 7 changed without a retire");
  weft_status st = weft_step_retire(mp_group, 7, a + 5);
  if (st != WEFT_ERR_INVALID_ARGUMENT || !strstr(weft_last_error(), "is not graph key 7's current step id"))
    mp_fail("retiring another id: %s \"%s\"", weft_status_string(st), weft_last_error());
  st = weft_step_retire(mp_group, 12345, 0);
  if (st != WEFT_ERR_NOT_FOUND || !strstr(weft_last_error(), "graph key 12345 has no step sequence"))
    mp_fail("retiring an unknown key: %s \"%s\"", weft_status_string(st), weft_last_error());
  if (next_id(mp_group, 7) != a) mp_fail("a refused retire changed the id");
  mp_same_everywhere("steps.a2", (uint64_t)a); /* every rank fetched before any retires */
  retire_ok(mp_group, 7, a);
  int64_t b = next_id(mp_group, 7);
  if (b != (int64_t)(((uint64_t)a + 1) & ((1ull << 57) - 1))) mp_fail("after retire: %lld, want %lld + 1", (long long)b, (long long)a);
  mp_same_everywhere("steps.b", (uint64_t)b);
  int64_t c = next_id(mp_group, 8); /* another key: its own sequence */
  mp_same_everywhere("steps.c", (uint64_t)c);
  if (next_id(mp_group, 7) != b) mp_fail("key 8 changed key 7");
  mp_case_end();
}

static void refresh(void) {
  mp_case("refresh: the leader starts the key again, then the members fetch it");
  int64_t old = next_id(mp_group, 7);
  mp_same_everywhere("steps.r0", (uint64_t)old);
  if (mp_rank == 0) {
    weft_status st = weft_step_refresh(mp_group, 7);
    if (st != WEFT_OK) mp_fail("leader refresh: %s: %s", weft_status_string(st), weft_last_error());
  }
  mp_same_everywhere("steps.r1", 1); /* the leader refreshed first */
  if (mp_rank != 0) {
    weft_status st = weft_step_refresh(mp_group, 7);
    if (st != WEFT_OK) mp_fail("member refresh: %s: %s", weft_status_string(st), weft_last_error());
  }
  int64_t now = next_id(mp_group, 7);
  if (now == old) mp_fail("the refreshed id %lld equals the old one", (long long)now);
  mp_same_everywhere("steps.r2", (uint64_t)now);
  mp_case_end();
}

static void subgroup(void) {
  if (mp_size < 3) return;
  mp_case("a group led by rank 1 agrees on its own sequence");
  weft_group *g = NULL;
  int64_t id = 0;
  if (mp_rank >= 1) {
    int *ranks = mp_alloc(sizeof(int) * (size_t)mp_size);
    for (int i = 1; i < mp_size; i++) ranks[i - 1] = i;
    weft_status st = weft_group_create(mp_world, ranks, mp_size - 1, &g);
    free(ranks);
    if (st != WEFT_OK) mp_fatal("group_create: %s: %s", weft_status_string(st), weft_last_error());
    id = next_id(g, 7);
  }
  uint64_t *all = mp_alloc(sizeof(uint64_t) * (size_t)mp_size);
  if (mp_allgather_u64("steps.sub", (uint64_t)id, all))
    for (int r = 2; r < mp_size; r++)
      if (all[r] != all[1]) mp_fail("rank %d has %llu, rank 1 %llu", r, (unsigned long long)all[r], (unsigned long long)all[1]);
  free(all);
  if (g) {
    weft_status st = weft_group_destroy(g);
    if (st != WEFT_OK) mp_fail("group_destroy: %s: %s", weft_status_string(st), weft_last_error());
  }
  mp_case_end();
}

static void frames(void) {
  mp_case("cached: one STEP_REQ per member and key");
  int64_t a = next_id(mp_group, 99);
  for (int i = 0; i < 4; i++)
    if (next_id(mp_group, 99) != a) mp_fail("key 99 changed");
  mp_same_everywhere("frames.a", (uint64_t)a);
  retire_ok(mp_group, 99, a);
  for (int i = 0; i < 3; i++)
    if (next_id(mp_group, 99) != a + 1) mp_fail("key 99 did not advance");
  mp_case_end();
}

static void die_in_callback(weft_request *r, weft_status st, void *ud) {
  (void)r, (void)st, (void)ud;
  mp_sleep_ms(300);
  mp_die_by_sigkill();
}

static int die_rank(void) {
  mp_setup();
  mp_case("ready");
  mp_same_everywhere("steps.die.ready", 1);
  mp_case_end();
  /* rank 0's engine thread runs the barrier's callback, which stalls it and
   * then kills the process: the others' STEP_REQs arrive while it cannot
   * answer, so they are pending when it dies */
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  if (mp_rank == 0) o.callback = die_in_callback;
  weft_request *r = NULL;
  mp_submitted(weft_barrier(mp_group, "steps.die", &o, &r), &r, "steps.die");
  if (mp_rank == 0) {
    mp_case("rank 0: SIGKILL while the others ask it");
    mp_wait(r, "steps.die");
    mp_sleep_ms(5000);
    mp_fatal("still alive");
  }
  mp_wait_ok(r, "steps.die");
  weft_request_free(r);
  mp_case("a STEP_REQ to a leader that dies fails naming it");
  double t0 = mp_now();
  int64_t id = 0;
  weft_status st = weft_step_next(mp_group, 5, &id);
  double dt = mp_now() - t0;
  if (st != WEFT_ERR_PEER_LOST || !mp_contains(weft_last_error(), "rank 0"))
    mp_fail("weft_step_next: %s \"%s\" after %.2f s, want PEER_LOST naming rank 0", weft_status_string(st),
            weft_last_error(), dt);
  else if (dt > 12) mp_fail("failed only after %.1f s", dt);
  else mp_say("INFO rank %d: failed after %.2f s: %s", mp_rank, dt, weft_last_error());
  mp_case_end();
  weft_world *w = mp_world;
  mp_world = NULL;
  weft_finalize(w);
  return mp_exit_status();
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && !strcmp(argv[1], "--die")) return mp_supervised(die_rank);
  mp_setup();
  if (argc > 1 && !strcmp(argv[1], "--frames")) {
    frames();
    return mp_teardown();
  }
  same_ids();
  refresh();
  subgroup();
  return mp_teardown();
}
