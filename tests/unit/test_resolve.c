/* test_resolve.c - the group leader's table (src/negotiate/resolve.c) in one
 * process, on a clock the test steps: keyed groups (complete in rank order,
 * answered again to a member, refused to an outsider, size and device
 * disagreements failing every joiner, final for the key, the deadline naming
 * who came, distinct ids), member lists (complete, crossing lists failing
 * both at once, late members of a failed list answered the same, a list
 * short at its deadline naming where the missing rank waits instead), and
 * what every reply encodes to (the wire's own checks). Expected replies are
 * written out here from resolve.h's rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/resolve.h"
#include "unit_check.h"
#include "wire/wire.h"

#define S 1000000000ll /* ns */

static wf_group_msg keyed(int32_t key, int32_t size, int32_t device) {
  return (wf_group_msg){.kind = WF_GROUP_KEYED, .key = key, .size = size, .device = device};
}

static uint32_t g_lists[8][8];
static wf_group_msg listed(int slot, const uint32_t *ranks, int n) {
  memcpy(g_lists[slot], ranks, sizeof(uint32_t) * (size_t)n);
  return (wf_group_msg){.kind = WF_GROUP_LISTED, .size = n, .device = WEFT_DEVICE_CPU, .nranks = (uint32_t)n,
                        .ranks = g_lists[slot]};
}

/* Every reply in out encodes (the wire's checks hold) and goes to a rank. */
static void check_encodes(const wf_resolve_replies *out) {
  for (size_t i = 0; i < out->n; i++) {
    wf_buf b = {0};
    CHECK(wf_encode_group_reply(&b, 0, &out->v[i].msg) == WEFT_OK, "reply %zu to %d does not encode", i,
          out->v[i].to);
    wf_buf_free(&b);
  }
}

/* The reply to rank `to` in out, or NULL. */
static const wf_group_msg *to(const wf_resolve_replies *out, int rank) {
  for (size_t i = 0; i < out->n; i++)
    if (out->v[i].to == rank) return &out->v[i].msg;
  return NULL;
}

static void join(wf_resolver *r, int rank, wf_group_msg m, int64_t now, wf_resolve_replies *out) {
  CHECK(wf_resolver_join(r, rank, &m, now, out) == WEFT_OK, "join from %d", rank);
  check_encodes(out);
}

static void test_keyed(void) {
  wf_resolver *r = wf_resolver_create(4, 10.0);
  wf_resolve_replies out = {0};
  join(r, 2, keyed(7, 3, WEFT_DEVICE_CPU), 0, &out);
  join(r, 0, keyed(7, 3, WEFT_DEVICE_CPU), 1, &out);
  CHECK(out.n == 0, "group 7 answered before it is complete (%zu replies)", out.n);
  CHECK(wf_resolver_next_deadline(r) == 10 * S, "deadline %lld", (long long)wf_resolver_next_deadline(r));
  join(r, 3, keyed(7, 3, WEFT_DEVICE_CPU), 2, &out);
  CHECK(out.n == 3, "group 7: %zu replies, want 3", out.n);
  uint32_t id = 0;
  for (int rank = 0; rank < 4; rank++) {
    const wf_group_msg *m = to(&out, rank);
    if (rank == 1) {
      CHECK(!m, "rank 1 did not join but got a reply");
      continue;
    }
    CHECK(m && m->status == 0 && m->nranks == 3 && m->ranks[0] == 0 && m->ranks[1] == 2 && m->ranks[2] == 3 &&
              m->id >= 1 && m->id <= 0xffffff,
          "group 7's reply to %d", rank);
    if (m && !id) id = m->id;
    CHECK(m && m->id == id, "group 7: ids differ");
  }
  CHECK(wf_resolver_next_deadline(r) == INT64_MAX, "a complete group keeps a deadline");
  wf_resolve_replies_clear(&out);
  /* a member again: the same answer; an outsider: refused naming the members */
  join(r, 2, keyed(7, 3, WEFT_DEVICE_CPU), 3, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == 0 && out.v[0].msg.id == id, "member again");
  wf_resolve_replies_clear(&out);
  join(r, 1, keyed(7, 3, WEFT_DEVICE_CPU), 3, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_MISMATCH && out.v[0].msg.error &&
            !strcmp(out.v[0].msg.error, "group 7 is complete: its 3 members are ranks 0, 2, 3; rank 1 cannot join it"),
        "outsider: %s", out.n ? out.v[0].msg.error : "no reply");
  wf_resolve_replies_clear(&out);
  join(r, 0, keyed(7, 2, WEFT_DEVICE_CPU), 3, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_MISMATCH && strstr(out.v[0].msg.error, "again with size 2"),
        "member with another size");
  wf_resolve_replies_clear(&out);

  /* sizes disagree: every joiner so far and the new one; final */
  join(r, 0, keyed(8, 4, WEFT_DEVICE_CPU), 4, &out);
  join(r, 3, keyed(8, 4, WEFT_DEVICE_CPU), 4, &out);
  join(r, 1, keyed(8, 3, WEFT_DEVICE_CPU), 5, &out);
  const char *want8 = "group 8: rank 1 gives group size 3, rank 0 gave 4 (joined: ranks 0, 3)";
  CHECK(out.n == 3, "group 8: %zu replies", out.n);
  for (int rank = 0; rank < 4; rank++)
    if (rank != 2)
      CHECK(to(&out, rank) && to(&out, rank)->status == WEFT_ERR_MISMATCH && !strcmp(to(&out, rank)->error, want8),
            "group 8 to %d: %s", rank, to(&out, rank) ? to(&out, rank)->error : "none");
  wf_resolve_replies_clear(&out);
  join(r, 2, keyed(8, 4, WEFT_DEVICE_CPU), 6, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_MISMATCH && !strcmp(out.v[0].msg.error, want8), "group 8 late");
  wf_resolve_replies_clear(&out);

  /* device types */
  join(r, 1, keyed(9, 2, WEFT_DEVICE_KIND_SIM), 6, &out);
  join(r, 0, keyed(9, 2, WEFT_DEVICE_CPU), 6, &out);
  CHECK(out.n == 2 && !strcmp(out.v[0].msg.error, "group 9: rank 0 gives device type cpu, rank 1 gave sim (joined: "
                                                  "ranks 1)"),
        "group 9: %s", out.n ? out.v[0].msg.error : "none");
  wf_resolve_replies_clear(&out);

  /* the deadline: 10 s after the first joiner, naming who came; final */
  join(r, 3, keyed(10, 4, WEFT_DEVICE_CPU), 20 * S, &out);
  join(r, 1, keyed(10, 4, WEFT_DEVICE_CPU), 21 * S, &out);
  CHECK(wf_resolver_next_deadline(r) == 30 * S, "group 10 deadline");
  CHECK(wf_resolver_tick(r, 30 * S - 1, &out) == WEFT_OK && out.n == 0, "failed 1 ns early");
  CHECK(wf_resolver_tick(r, 30 * S, &out) == WEFT_OK && out.n == 2, "group 10: %zu replies at the deadline", out.n);
  const char *want10 = "group 10: waiting for 4 members, have ranks 1, 3 (deadline 10 s)";
  CHECK(out.n && out.v[0].msg.status == WEFT_ERR_TIMEOUT && !strcmp(out.v[0].msg.error, want10), "group 10: %s",
        out.n ? out.v[0].msg.error : "none");
  check_encodes(&out);
  wf_resolve_replies_clear(&out);
  join(r, 0, keyed(10, 4, WEFT_DEVICE_CPU), 31 * S, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_TIMEOUT && !strcmp(out.v[0].msg.error, want10), "10 late");
  wf_resolve_replies_clear(&out);

  /* one member: complete at once; two keys get different ids */
  join(r, 2, keyed(11, 1, WEFT_DEVICE_KIND_CUDA), 32 * S, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == 0 && out.v[0].msg.id != id, "group 11 (size 1)");
  wf_resolve_replies_free(&out);
  wf_resolver_destroy(r);
}

static void test_listed(void) {
  wf_resolver *r = wf_resolver_create(5, 10.0);
  wf_resolve_replies out = {0};
  static const uint32_t l012[] = {0, 1, 2}, l0123[] = {0, 1, 2, 3}, l03[] = {0, 3};
  /* a list completes when all its members joined, then goes */
  join(r, 1, listed(0, l012, 3), 0, &out);
  join(r, 0, listed(0, l012, 3), 0, &out);
  CHECK(out.n == 0, "list answered early");
  join(r, 2, listed(0, l012, 3), 0, &out);
  CHECK(out.n == 3 && to(&out, 0) && to(&out, 0)->status == 0 && to(&out, 0)->nranks == 3, "list {0,1,2}");
  CHECK(wf_resolver_next_deadline(r) == INT64_MAX, "a complete list stays");
  wf_resolve_replies_clear(&out);

  /* crossing lists: rank 2 waits in {0,1,2,3} while rank 0 waits in {0,1,2} */
  join(r, 0, listed(0, l012, 3), S, &out);
  join(r, 3, listed(1, l0123, 4), S, &out); /* 3 is not in {0,1,2}: no crossing yet */
  CHECK(out.n == 0, "crossing too early");
  join(r, 2, listed(1, l0123, 4), S, &out);
  const char *want = "ranks disagree on the members: rank 2 lists ranks 0, 1, 2, 3 (so do ranks 2, 3), rank 0 lists "
                     "ranks 0, 1, 2 (so do ranks 0); each waits for the other";
  CHECK(out.n == 3, "crossing: %zu replies, want 3", out.n);
  for (int rank = 0; rank < 4; rank++)
    if (rank != 1)
      CHECK(to(&out, rank) && to(&out, rank)->status == WEFT_ERR_MISMATCH && !strcmp(to(&out, rank)->error, want),
            "crossing to %d: %s", rank, to(&out, rank) ? to(&out, rank)->error : "none");
  wf_resolve_replies_clear(&out);
  /* rank 1's JOIN for {0,1,2} was on its way: the same answer, not a new wait */
  join(r, 1, listed(0, l012, 3), 2 * S, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_MISMATCH && !strcmp(out.v[0].msg.error, want), "late member");
  wf_resolve_replies_clear(&out);
  /* rank 0 tries {0,1,2} again: a new attempt (it had the answer) */
  join(r, 0, listed(0, l012, 3), 3 * S, &out);
  CHECK(out.n == 0, "a new attempt was answered from the failed list");
  /* the failed {0,1,2,3} waits for its members 0 and 1 until its deadline */
  CHECK(wf_resolver_tick(r, 11 * S, &out) == WEFT_OK && out.n == 0, "a failed list answered at its deadline");

  /* rank 3 creates {0,3} while rank 0 still waits in the new {0,1,2}: at the
   * deadline the missing rank's other list is named */
  join(r, 3, listed(2, l03, 2), 4 * S, &out);
  CHECK(out.n == 0, "{0,3}: answered early");
  CHECK(wf_resolver_tick(r, 13 * S, &out) == WEFT_OK, "tick");
  const wf_group_msg *m0 = to(&out, 0);
  CHECK(m0 && m0->status == WEFT_ERR_TIMEOUT &&
            !strcmp(m0->error, "the group of ranks 0, 1, 2: waiting for 3 members, have rank 0 (deadline 10 s)"),
        "{0,1,2} at its deadline: %s", m0 ? m0->error : "none");
  wf_resolve_replies_clear(&out);
  CHECK(wf_resolver_tick(r, 14 * S, &out) == WEFT_OK && out.n == 1, "{0,3} at its deadline");
  CHECK(out.n && !strcmp(out.v[0].msg.error,
                         "the group of ranks 0, 3: waiting for 2 members, have rank 3 (deadline 10 s)"),
        "{0,3}: %s", out.n ? out.v[0].msg.error : "none");
  wf_resolve_replies_clear(&out);

  /* a missing member waiting in another list is named (rank 0 is not in
   * {1,3}: nobody waits for rank 0 there, so no crossing) */
  static const uint32_t l13[] = {1, 3};
  join(r, 0, listed(2, l03, 2), 20 * S, &out);
  join(r, 3, listed(1, l13, 2), 20 * S, &out);
  CHECK(out.n == 0, "no crossing: 0 is not in {1,3}");
  CHECK(wf_resolver_tick(r, 30 * S, &out) == WEFT_OK && out.n == 2, "both at the deadline: %zu", out.n);
  m0 = to(&out, 0);
  CHECK(m0 && strstr(m0->error, "have rank 0 (deadline 10 s); rank 3 is creating the group of ranks 1, 3 instead"),
        "{0,3}: %s", m0 ? m0->error : "none");
  /* a rank creating the same list twice at once */
  wf_resolve_replies_clear(&out);
  join(r, 4, listed(3, (const uint32_t[]){1, 4}, 2), 40 * S, &out);
  join(r, 4, listed(3, (const uint32_t[]){1, 4}, 2), 40 * S, &out);
  CHECK(out.n == 1 && out.v[0].msg.status == WEFT_ERR_INVALID_ARGUMENT && strstr(out.v[0].msg.error, "already"),
        "twice at once");
  wf_resolve_replies_free(&out);
  wf_resolver_destroy(r);
}

int main(void) {
  test_keyed();
  test_listed();
  return unit_result("test_resolve");
}
