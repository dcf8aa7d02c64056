/* feat_groups.c - process sets (weft_group_create/destroy) on 4 ranks.
 *
 * Cases (run: feat_groups; the naming case alone: feat_groups --names):
 *  - bad member lists fail locally with WEFT_ERR_INVALID_ARGUMENT and a
 *    NULL handle: duplicates, out of range, negative, this rank missing (a
 *    non-member can never hold a handle, so it can never use a group it is
 *    not in), 0 or too many ranks, NULL list; NULL/invalid handles are
 *    WEFT_ERR_MISUSE / -1;
 *  - sets {0,1}, {1,2,3} (listed as 3,1,2) and {0,3}: group rank and size
 *    (the group rank is the position among the members in ascending world
 *    rank order, whatever order they were listed in), checked through an
 *    allgather of world ranks;
 *  - concurrent operations with the same names in the world and in every
 *    set (allreduce "t", allgather "g", broadcast "b", barrier, a
 *    reducescatter in {1,2,3}, an alltoall in {0,3}), results checked
 *    against references computed here;
 *  - a stalled set does not block the others: ranks 1 and 2 submit "stuck"
 *    in {1,2,3}, rank 3 holds it back while the world, {0,1} and {0,3} run
 *    three rounds; "stuck" is still pending on 1 and 2; then rank 3 submits
 *    and it completes with the right sum;
 *  - join inside {1,2,3} with uneven steps (world ranks 1, 2, 3 join after
 *    0, 1, 2 allreduces) while every rank also runs a world allreduce: the
 *    joined members add 0, the last joiner is group rank 2;
 *  - a one-member set per rank;
 *  - create/destroy 10 times ({1,2,3} and {0,3}), an allreduce in each;
 *  - --names: in {1,2,3} world rank 3 submits a different shape: every
 *    member gets WEFT_ERR_MISMATCH and the message names the culprit by its
 *    world rank ("rank 3"), the number every log line and weftrun tag uses. */
#include "feat_common.h"

static weft_group *create(const int *ranks, int n) {
  weft_group *g = NULL;
  weft_status st = weft_group_create(feat_world, ranks, n, &g);
  if (st != WEFT_OK || !g) feat_fatal("weft_group_create: %s: %s", weft_status_string(st), weft_last_error());
  return g;
}

static int member(const int *ranks, int n) {
  for (int i = 0; i < n; i++)
    if (ranks[i] == feat_rank) return 1;
  return 0;
}

static void bad_lists(void) {
  feat_case("bad member lists and handles");
  int me = feat_rank, other = (feat_rank + 1) % feat_size;
  struct {
    const char *what;
    int ranks[4];
    int n;
  } bad[] = {
      {"a duplicate", {me, other, me}, 3},
      {"this rank twice only", {me, me}, 2},
      {"a rank out of range", {me, feat_size}, 2},
      {"a negative rank", {-1, me}, 2},
      {"without this rank", {other}, 1},
      {"no ranks", {me}, 0},
      {"more ranks than the world", {me, other, 0, 1}, feat_size + 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    weft_group *g = (weft_group *)&bad; /* must be reset to NULL */
    weft_status st = weft_group_create(feat_world, bad[i].ranks, bad[i].n, &g);
    if (st != WEFT_ERR_INVALID_ARGUMENT || g != NULL || !*weft_last_error())
      feat_fail("list %s: got %s, handle %p, message \"%s\"", bad[i].what, weft_status_string(st), (void *)g,
                weft_last_error());
  }
  weft_group *g = (weft_group *)&bad;
  weft_status st = weft_group_create(feat_world, NULL, 2, &g);
  if (st != WEFT_ERR_INVALID_ARGUMENT || g != NULL) feat_fail("NULL list: got %s", weft_status_string(st));
  int ok[1] = {me};
  if (weft_group_create(feat_world, ok, 1, NULL) != WEFT_ERR_INVALID_ARGUMENT) feat_fail("NULL out accepted");
  if (weft_group_create(NULL, ok, 1, &g) != WEFT_ERR_MISUSE) feat_fail("NULL world: not WEFT_ERR_MISUSE");
  if (weft_group_rank(NULL) != -1 || weft_group_size(NULL) != -1) feat_fail("rank/size of NULL are not -1");
  if (weft_group_destroy(NULL) != WEFT_ERR_MISUSE) feat_fail("destroying NULL: not WEFT_ERR_MISUSE");
  if (weft_group_destroy(weft_world_group(feat_world)) != WEFT_ERR_MISUSE) feat_fail("destroying the world group");
  int64_t n = 1;
  float x = 0;
  weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &n, &x);
  weft_request *r = (weft_request *)&bad;
  if (weft_allreduce(NULL, "x", &t, &t, WEFT_OP_SUM, NULL, &r) != WEFT_ERR_MISUSE || r)
    feat_fail("an allreduce on a NULL group: not WEFT_ERR_MISUSE with a NULL request");
  feat_case_end();
}

/* Allgather of world ranks: the group's members in group rank order. */
static void check_order(weft_group *g, const int *sorted, int n, const char *gname) {
  int64_t one = 1;
  int32_t me = feat_rank;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &me);
  weft_request *r = NULL;
  feat_submitted(weft_allgather(g, "order", &t, NULL, &r), &r, "order");
  if (feat_wait_ok(r, "order allgather")) {
    weft_tensor out;
    weft_request_output(r, &out);
    if (out.ndim != 1 || out.shape[0] != n) {
      feat_fail("%s: allgather shape [%lld], expected [%d]", gname, (long long)out.shape[0], n);
    } else {
      for (int i = 0; i < n; i++)
        if (((int32_t *)out.data)[i] != sorted[i])
          feat_fail("%s: group rank %d is world rank %d, expected %d", gname, i, ((int32_t *)out.data)[i], sorted[i]);
    }
  }
  weft_request_free(r);
}

typedef struct gops {
  weft_request *ar, *ag, *bc, *bar;
  float ar_v[3];
  float ag_v;
  int32_t bc_v[2];
} gops;

static void submit_common(weft_group *g, gops *o) {
  int64_t three = 3, one = 1, two = 2;
  for (int j = 0; j < 3; j++) o->ar_v[j] = (float)((feat_rank + 1) * (j + 1));
  o->ag_v = (float)(feat_rank * 10);
  o->bc_v[0] = weft_group_rank(g) == 0 ? 1000 + feat_rank : -7;
  o->bc_v[1] = weft_group_rank(g) == 0 ? 2000 + feat_rank : -7;
  weft_tensor ta = feat_tensor(WEFT_DTYPE_FLOAT32, &three, o->ar_v);
  weft_tensor tg = feat_tensor(WEFT_DTYPE_FLOAT32, &one, &o->ag_v);
  weft_tensor tb = feat_tensor(WEFT_DTYPE_INT32, &two, o->bc_v);
  feat_submitted(weft_allreduce(g, "t", &ta, &ta, WEFT_OP_SUM, NULL, &o->ar), &o->ar, "t");
  feat_submitted(weft_allgather(g, "g", &tg, NULL, &o->ag), &o->ag, "g");
  feat_submitted(weft_broadcast(g, "b", &tb, 0, NULL, &o->bc), &o->bc, "b");
  feat_submitted(weft_barrier(g, "bar", NULL, &o->bar), &o->bar, "bar");
}

static void check_common(gops *o, const int *sorted, int n, const char *gname) {
  char what[64];
  snprintf(what, sizeof what, "%s allreduce t", gname);
  if (feat_wait_ok(o->ar, what)) {
    double s = 0;
    for (int i = 0; i < n; i++) s += sorted[i] + 1;
    for (int j = 0; j < 3; j++)
      if (o->ar_v[j] != (float)(s * (j + 1))) feat_fail("%s: t[%d] = %g, expected %g", gname, j, o->ar_v[j], s * (j + 1));
  }
  snprintf(what, sizeof what, "%s allgather g", gname);
  if (feat_wait_ok(o->ag, what)) {
    weft_tensor out;
    weft_request_output(o->ag, &out);
    for (int i = 0; i < n && out.shape[0] == n; i++)
      if (((float *)out.data)[i] != (float)(sorted[i] * 10)) feat_fail("%s: g[%d] = %g", gname, i, ((float *)out.data)[i]);
    if (out.shape[0] != n) feat_fail("%s: g has %lld rows", gname, (long long)out.shape[0]);
  }
  snprintf(what, sizeof what, "%s broadcast b", gname);
  if (feat_wait_ok(o->bc, what) && (o->bc_v[0] != 1000 + sorted[0] || o->bc_v[1] != 2000 + sorted[0]))
    feat_fail("%s: b = {%d, %d}, expected group rank 0's {%d, %d}", gname, o->bc_v[0], o->bc_v[1], 1000 + sorted[0],
              2000 + sorted[0]);
  snprintf(what, sizeof what, "%s barrier", gname);
  feat_wait_ok(o->bar, what);
  weft_request_free(o->ar);
  weft_request_free(o->ag);
  weft_request_free(o->bc);
  weft_request_free(o->bar);
}

static const int k_s01[2] = {0, 1}, k_s123[3] = {1, 2, 3}, k_s03[2] = {0, 3};
static const int k_s123_listed[3] = {3, 1, 2};

static void concurrent(weft_group *s01, weft_group *s123, weft_group *s03) {
  feat_case("same names in the world and in every set, all in flight at once");
  int all[4] = {0, 1, 2, 3};
  gops w, a, b, c;
  submit_common(weft_world_group(feat_world), &w);
  if (s01) submit_common(s01, &a);
  if (s123) submit_common(s123, &b);
  if (s03) submit_common(s03, &c);
  /* reducescatter in {1,2,3}: 7 rows, group rank 0 gets 3, the others 2 */
  int64_t seven = 7;
  int32_t rs_in[7], rs_out[3] = {0, 0, 0};
  weft_request *rs = NULL;
  if (s123) {
    for (int j = 0; j < 7; j++) rs_in[j] = (feat_rank + 1) * (j + 1);
    int64_t mine = weft_group_rank(s123) == 0 ? 3 : 2;
    weft_tensor ti = feat_tensor(WEFT_DTYPE_INT32, &seven, rs_in), to = feat_tensor(WEFT_DTYPE_INT32, &mine, rs_out);
    feat_submitted(weft_reducescatter(s123, "rs", &ti, &to, WEFT_OP_SUM, NULL, &rs), &rs, "rs");
  }
  /* alltoall in {0,3}: 4 rows, two to each member */
  int64_t four = 4;
  int32_t a2a_in[4];
  weft_request *a2a = NULL;
  if (s03) {
    for (int j = 0; j < 4; j++) a2a_in[j] = feat_rank * 10 + j;
    weft_tensor ti = feat_tensor(WEFT_DTYPE_INT32, &four, a2a_in);
    feat_submitted(weft_alltoall(s03, "a2a", &ti, NULL, NULL, &a2a), &a2a, "a2a");
  }
  check_common(&w, all, feat_size, "world");
  if (s01) check_common(&a, k_s01, 2, "{0,1}");
  if (s123) check_common(&b, k_s123, 3, "{1,2,3}");
  if (s03) check_common(&c, k_s03, 2, "{0,3}");
  if (rs && feat_wait_ok(rs, "{1,2,3} reducescatter")) {
    int gr = weft_group_rank(s123), first = gr == 0 ? 0 : 3 + 2 * (gr - 1), cnt = gr == 0 ? 3 : 2;
    for (int j = 0; j < cnt; j++)
      if (rs_out[j] != 9 * (first + j + 1)) feat_fail("rs[%d] = %d, expected %d", j, rs_out[j], 9 * (first + j + 1));
  }
  if (rs) weft_request_free(rs);
  if (a2a && feat_wait_ok(a2a, "{0,3} alltoall")) {
    int me = weft_group_rank(s03);
    weft_tensor out;
    weft_request_output(a2a, &out);
    int32_t expect[4] = {0 * 10 + 2 * me, 0 * 10 + 2 * me + 1, 3 * 10 + 2 * me, 3 * 10 + 2 * me + 1};
    if (out.shape[0] != 4) feat_fail("a2a: %lld rows", (long long)out.shape[0]);
    else
      for (int j = 0; j < 4; j++)
        if (((int32_t *)out.data)[j] != expect[j]) feat_fail("a2a[%d] = %d, expected %d", j, ((int32_t *)out.data)[j], expect[j]);
  }
  if (a2a) weft_request_free(a2a);
  feat_case_end();
}

/* One allreduce of (rank+1) named name in g; checks the members' sum. */
static void quick_sum(weft_group *g, const char *name, const int *members, int n) {
  int64_t one = 1;
  int32_t v = feat_rank + 1;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &v);
  weft_request *r = NULL;
  feat_submitted(weft_allreduce(g, name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
  if (feat_wait_ok(r, name)) {
    int s = 0;
    for (int i = 0; i < n; i++) s += members[i] + 1;
    if (v != s) feat_fail("%s: sum %d, expected %d", name, v, s);
  }
  weft_request_free(r);
}

static void stalled_set(weft_group *s01, weft_group *s123, weft_group *s03) {
  feat_case("a stalled set ({1,2,3} waits for rank 3) does not block the world, {0,1} or {0,3}");
  int all[4] = {0, 1, 2, 3};
  int64_t one = 1;
  int32_t v = feat_rank + 1;
  weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &v);
  weft_request *stuck = NULL;
  if (s123 && feat_rank != 3) feat_submitted(weft_allreduce(s123, "stuck", &t, &t, WEFT_OP_SUM, NULL, &stuck), &stuck, "stuck");
  for (int round = 0; round < 3; round++) {
    char name[32];
    snprintf(name, sizeof name, "free.%d", round);
    quick_sum(weft_world_group(feat_world), name, all, feat_size);
    if (s01) quick_sum(s01, name, k_s01, 2);
    if (s03) quick_sum(s03, name, k_s03, 2);
  }
  if (stuck && weft_test(stuck) != WEFT_IN_PROGRESS)
    feat_fail("'stuck' completed without rank 3: %s", weft_status_string(weft_test(stuck)));
  feat_barrier("stall.release"); /* every rank has checked; now let rank 3 in */
  if (s123 && feat_rank == 3) feat_submitted(weft_allreduce(s123, "stuck", &t, &t, WEFT_OP_SUM, NULL, &stuck), &stuck, "stuck");
  if (stuck) {
    if (feat_wait_ok(stuck, "stuck") && v != 2 + 3 + 4) feat_fail("stuck: sum %d, expected 9", v);
    weft_request_free(stuck);
  }
  feat_case_end();
}

/* Join inside {1,2,3} while the world stays active: world rank 1 joins at
 * once, 2 after one allreduce, 3 after two; everybody also runs a world
 * allreduce in the middle. The set's last joiner is group rank 2. */
static void join_in_set(weft_group *s123) {
  feat_case("join inside {1,2,3} (uneven steps) while the world keeps running");
  int all[4] = {0, 1, 2, 3};
  weft_request *j = NULL;
  int steps = feat_rank - 1; /* world rank 1: 0 steps, 2: 1, 3: 2 */
  for (int s = 0; s < steps; s++) {
    int64_t one = 1;
    int32_t v = feat_rank + 1;
    weft_tensor t = feat_tensor(WEFT_DTYPE_INT32, &one, &v);
    weft_request *r = NULL;
    char name[32];
    snprintf(name, sizeof name, "js.%d", s);
    feat_submitted(weft_allreduce(s123, name, &t, &t, WEFT_OP_SUM, NULL, &r), &r, name);
    int expect = 0; /* joined members add the identity, 0 */
    for (int q = 1; q <= 3; q++)
      if (q - 1 > s) expect += q + 1;
    if (feat_wait_ok(r, name) && v != expect) feat_fail("%s: sum %d, expected %d", name, v, expect);
    weft_request_free(r);
  }
  if (s123) feat_submitted(weft_join(s123, NULL, &j), &j, "join in {1,2,3}");
  quick_sum(weft_world_group(feat_world), "jw", all, feat_size);
  if (j) {
    int last = -1;
    if (feat_wait_ok(j, "join in {1,2,3}") && (weft_request_last_joined(j, &last) != WEFT_OK || last != 2))
      feat_fail("last joined in {1,2,3}: %d, expected group rank 2 (world rank 3)", last);
    weft_request_free(j);
  }
  feat_case_end();
}

static void singleton(void) {
  feat_case("a one-member set per rank");
  int me[1] = {feat_rank};
  weft_group *g = create(me, 1);
  if (weft_group_rank(g) != 0 || weft_group_size(g) != 1)
    feat_fail("rank %d size %d", weft_group_rank(g), weft_group_size(g));
  quick_sum(g, "solo", me, 1);
  weft_status st = weft_group_destroy(g);
  if (st != WEFT_OK) feat_fail("destroy: %s: %s", weft_status_string(st), weft_last_error());
  feat_case_end();
}

static void churn(void) {
  feat_case("create/destroy {1,2,3} and {0,3} 10 times, an allreduce in each");
  for (int it = 0; it < 10; it++) {
    weft_group *a = member(k_s123, 3) ? create(k_s123_listed, 3) : NULL;
    weft_group *b = member(k_s03, 2) ? create(k_s03, 2) : NULL;
    char name[32];
    snprintf(name, sizeof name, "churn.%d", it % 3); /* names reused across incarnations */
    if (a) {
      if (weft_group_size(a) != 3 || weft_group_rank(a) != feat_rank - 1)
        feat_fail("iteration %d: {1,2,3} rank %d size %d", it, weft_group_rank(a), weft_group_size(a));
      quick_sum(a, name, k_s123, 3);
    }
    if (b) quick_sum(b, name, k_s03, 2);
    if (a && weft_group_destroy(a) != WEFT_OK) feat_fail("iteration %d: destroy {1,2,3}: %s", it, weft_last_error());
    if (b && weft_group_destroy(b) != WEFT_OK) feat_fail("iteration %d: destroy {0,3}: %s", it, weft_last_error());
  }
  int all[4] = {0, 1, 2, 3};
  quick_sum(weft_world_group(feat_world), "after.churn", all, feat_size);
  feat_case_end();
}

static void names(void) {
  feat_case("a mismatch in {1,2,3} names the culprit by its world rank");
  weft_group *g = member(k_s123, 3) ? create(k_s123, 3) : NULL;
  if (g) {
    int64_t n = feat_rank == 3 ? 5 : 4;
    float x[5] = {1, 1, 1, 1, 1};
    weft_tensor t = feat_tensor(WEFT_DTYPE_FLOAT32, &n, x);
    weft_request *r = NULL;
    feat_submitted(weft_allreduce(g, "shape", &t, &t, WEFT_OP_SUM, NULL, &r), &r, "shape");
    weft_status st = feat_wait(r, "shape");
    const char *msg = weft_request_error(r);
    if (st != WEFT_ERR_MISMATCH) feat_fail("expected WEFT_ERR_MISMATCH, got %s (%s)", weft_status_string(st), msg);
    else if (!strstr(msg, "rank 3")) feat_fail("the message does not name world rank 3: \"%s\"", msg);
    weft_request_free(r);
    if (weft_group_destroy(g) != WEFT_OK) feat_fail("destroy: %s", weft_last_error());
  }
  feat_case_end();
}

int main(int argc, char **argv) {
  int only_names = argc > 1 && !strcmp(argv[1], "--names");
  feat_setup();
  if (feat_size != 4) {
    feat_case("world size");
    feat_fail("run with 4 ranks (got %d)", feat_size);
    return feat_teardown();
  }
  if (only_names) {
    names();
    return feat_teardown();
  }
  bad_lists();
  feat_case("create {0,1}, {3,1,2}, {0,3}");
  weft_group *s01 = member(k_s01, 2) ? create(k_s01, 2) : NULL;
  weft_group *s123 = member(k_s123, 3) ? create(k_s123_listed, 3) : NULL;
  weft_group *s03 = member(k_s03, 2) ? create(k_s03, 2) : NULL;
  if (s01) check_order(s01, k_s01, 2, "{0,1}");
  if (s123) check_order(s123, k_s123, 3, "{1,2,3}");
  if (s03) check_order(s03, k_s03, 2, "{0,3}");
  if (s123 && (weft_group_size(s123) != 3 || weft_group_rank(s123) != feat_rank - 1))
    feat_fail("{1,2,3}: rank %d size %d", weft_group_rank(s123), weft_group_size(s123));
  feat_case_end();
  concurrent(s01, s123, s03);
  stalled_set(s01, s123, s03);
  join_in_set(s123);
  feat_case("destroy the sets");
  weft_group *gs[3] = {s01, s123, s03};
  for (int i = 0; i < 3; i++)
    if (gs[i] && weft_group_destroy(gs[i]) != WEFT_OK) feat_fail("destroy set %d: %s", i, weft_last_error());
  feat_case_end();
  singleton();
  churn();
  return feat_teardown();
}
