/* test_board.c - the one-host negotiation board (src/negotiate/board.c) alone,
 * in ordinary memory, with threads standing in for local ranks (each opens
 * its own handle: the per-rank submission counts are private to a handle).
 *
 *   geometry  for a grid of (local ranks, WEFT_FAST_BYTES, WEFT_FAST_LARGE_
 *             BYTES): the board the creator sizes opens on every rank with
 *             the page-rounded size, with the pooled and large input sizes
 *             the creator meant (large slots only when larger than pooled)
 *   stress    6 names x 3 ranks x 5000 generations of 64 KiB inputs through
 *             the 4 large slots; 1 arrival in 40 is not eligible (the round
 *             diverts) and 1 waiter in 4 gives up after 2 us (diverting
 *             rounds whose copies still run); every DONE round's inputs are
 *             each member's own, no generation hangs, the board stays on;
 *             afterwards 4 rounds at once still all find a large slot (none
 *             leaked)
 *   unclaimed two ranks in one thread: rank 0's generation 1 of a small
 *             allreduce gives up (diverted: the coordinator would fail it by
 *             timeout, and the name is free again) while rank 1 has not yet
 *             read generation 0; rank 0's generation 2 must not reopen that
 *             round (it turns the board off), and rank 1 still reads both
 *             generation-0 inputs intact (a review found that skipping claims
 *             of inline rounds broke this)
 *   remote    rounds whose inputs stay in the members' memory: what is
 *             published, claims gating completion, reuse, abandonment, a
 *             member with another description diverting */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "negotiate/board.h"
#include "engine/engine.h"
#include "engine/onehost.h"
#include "unit_check.h"
#include "util/strmap.h"
#include "util/time.h"

static size_t rup(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void test_geometry(void) {
  static const int nl[] = {2, 3, 4, 8, 64};
  static const size_t parts[] = {1, 100, 8192, 65536, 1 << 20};
  static const size_t larges[] = {0, 120, 4096, 8192, 8193, 1 << 20, 5 << 20};
  for (size_t i = 0; i < sizeof nl / sizeof nl[0]; i++)
    for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++)
      for (size_t k = 0; k < sizeof larges / sizeof larges[0]; k++) {
        int n = nl[i];
        size_t part = parts[j], large = larges[k];
        size_t bytes = wf_board_bytes(n, part, large), big = wf_board_large_for(n, part, large);
        size_t want_part = rup(part < 64 ? 64 : part, 64);
        CHECK(bytes > 0, "n %d part %zu large %zu: no board", n, part, large);
        /* large slots of large bytes rounded up to a page, at most
         * max(32 MiB / n, 2 MiB) (not falling with n below 2 MiB: no cliff);
         * none unless larger than pooled inputs */
        size_t cap = (32u << 20) / (size_t)n / 4096 * 4096, m;
        if (cap < (2u << 20)) cap = 2u << 20;
        m = large < cap ? large : cap;
        CHECK(big == (m > want_part ? rup(m, 4096) : 0), "n %d part %zu large %zu: large slots of %zu", n, part,
              large, big);
        /* the large slots: as many (2 to 4) as 64 MiB holds, at least two,
         * so at most max(64 MiB, n x 4 MiB) */
        size_t slots = big ? (64u << 20) / (rup(big, 4096) * (size_t)n) : 0;
        if (big && slots < 2) slots = 2;
        if (slots > 4) slots = 4;
        size_t lim = (size_t)n * (4u << 20) > (64u << 20) ? (size_t)n * (4u << 20) : (64u << 20);
        CHECK(slots * (size_t)n * rup(big, 4096) <= lim, "n %d part %zu large %zu: large slots of %zu bytes", n, part,
              large, slots * (size_t)n * rup(big, 4096));
        CHECK(bytes >= slots * (size_t)n * rup(big, 4096), "n %d part %zu large %zu: %zu bytes hold no large slots",
              n, part, large, bytes);
        if (bytes > (64u << 20)) continue; /* 256 pooled 1 MiB inputs of 64 ranks: not allocated here */
        void *mem = calloc(1, rup(bytes, 4096));
        wf_board *b = mem ? wf_board_open(mem, rup(bytes, 4096), n, big) : NULL;
        CHECK(b != NULL, "n %d part %zu large %zu: %zu bytes do not open", n, part, large, bytes);
        if (b) {
          CHECK(wf_board_part_bytes(b) == want_part, "n %d part %zu large %zu: pooled inputs of %zu, not %zu", n, part,
                large, wf_board_part_bytes(b), want_part);
          CHECK(wf_board_large_bytes(b) == (big ? big : want_part), "n %d part %zu large %zu: largest input %zu", n,
                part, large, wf_board_large_bytes(b));
          wf_board_close(b);
        }
        free(mem);
      }
}

#define N 3
#define NAMES 6
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define GENS 200 /* every yield of the spin costs a sanitizer much more */
#else
#define GENS 5000
#endif
#define LEN ((size_t)64 << 10)
static void *g_mem;
static size_t g_bytes, g_large;
static atomic_int g_slow[NAMES][GENS];
static atomic_long g_done, g_diverted;

typedef struct arg {
  int name, rank;
} arg;

static const wf_board_span COPY_ALL = {0, 0}; /* the whole input goes into the slot */

/* What the fast path keeps out of the slot for group rank k of m
 * (wf_fast_unshared, as wf_fast_submit asks it). */
static wf_board_span unshared(const wf_board_desc *d, int k, int m, size_t bytes) {
  weft_group g = {.size = m, .rank = k};
  weft_request r = {.group = &g};
  return wf_fast_unshared(&r, d, bytes);
}

static uint64_t word(int name, int gen, int rank) { return (uint64_t)name << 40 | (uint64_t)gen << 8 | (uint64_t)rank; }

/* A 1-D description: coll of n elements of t (op sum, no root, no scales). */
static wf_board_desc desc1(int coll, weft_dtype t, int64_t n) {
  wf_board_desc d;
  memset(&d, 0, sizeof d);
  d.coll = (uint8_t)coll;
  d.dtype = (uint8_t)t;
  d.op = WEFT_OP_SUM;
  d.ndim = 1;
  d.shape[0] = n;
  d.root = -1;
  d.prescale = d.postscale = 1.0;
  return d;
}

/* m members' views of one board (zeroed memory) with large slots of up to
 * large bytes (0: none); returns the memory (free it after closing the
 * boards), or NULL with every b[k] NULL. */
static void *open_boards(int m, size_t large, wf_board **b) {
  size_t bytes = rup(wf_board_bytes(m, 8192, large), 4096);
  void *mem = calloc(1, bytes);
  for (int k = 0; k < m; k++) b[k] = mem ? wf_board_open(mem, bytes, m, wf_board_large_for(m, 8192, large)) : NULL;
  return mem;
}

static void *rank_main(void *p) {
  arg *a = p;
  wf_board *b = wf_board_open(g_mem, g_bytes, N, g_large);
  uint64_t *buf = malloc(LEN);
  if (!b || !buf) {
    CHECK(0, "rank %d: no board or buffer", a->rank);
    free(buf);
    wf_board_close(b);
    return NULL;
  }
  unsigned seed = (unsigned)(a->name * 100 + a->rank + 1);
  char nm[32];
  snprintf(nm, sizeof nm, "t%d", a->name);
  wf_board_desc d = desc1(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, (int64_t)(LEN / 4)); /* inputs only copied in and read */
  for (int g = 0; g < GENS; g++) {
    for (size_t i = 0; i < LEN / 8; i++) buf[i] = word(a->name, g, a->rank);
    int how = WF_BOARD_SLOW, eligible = rand_r(&seed) % 40 != 0;
    wf_board_ticket t;
    weft_status st = wf_board_arrive(b, 1, nm, a->rank, N, eligible ? &d : NULL, buf, LEN, COPY_ALL, wf_deadline_after(10.0),
                                     &how, &t);
    CHECK(st == WEFT_OK, "name %d gen %d rank %d: arrive status %d", a->name, g, a->rank, (int)st);
    int s = how;
    if (how == WF_BOARD_WAIT) {
      int64_t give_up = wf_now_ns() + (rand_r(&seed) % 4 == 0 ? 2000 : 2000000000);
      for (;;) {
        s = wf_board_state(b, t);
        if (s != WF_BOARD_WAIT) break;
        if (wf_board_wait(b, t, give_up)) {
          s = wf_board_divert(b, t, wf_deadline_after(10.0));
          break;
        }
      }
    }
    if (s == WF_BOARD_DONE) {
      for (int k = 0; k < N; k++) {
        const uint64_t *q = wf_board_part(b, t, k);
        for (size_t i = 0; i < LEN / 8; i += 61)
          if (q[i] != word(a->name, g, k)) {
            CHECK(0, "name %d gen %d rank %d: member %d's input word %zu is %llx", a->name, g, a->rank, k, i,
                  (unsigned long long)q[i]);
            break;
          }
      }
      CHECK(wf_board_claim(b, t, a->rank, wf_deadline_after(10.0)) == WEFT_OK, "claim");
      atomic_fetch_add(&g_done, 1);
    } else { /* the coordinator's part, here: wait until every member knows */
      atomic_fetch_add(&g_diverted, 1);
      atomic_fetch_add(&g_slow[a->name][g], 1);
      int64_t end = wf_now_ns() + 10000000000LL;
      while (atomic_load(&g_slow[a->name][g]) < N && wf_now_ns() < end) sched_yield();
      if (atomic_load(&g_slow[a->name][g]) < N) {
        CHECK(0, "name %d gen %d: rank %d saw the round diverted, not every member did", a->name, g, a->rank);
        break;
      }
    }
    if (wf_board_is_off(b)) {
      CHECK(0, "name %d gen %d: the board turned off", a->name, g);
      break;
    }
  }
  free(buf);
  wf_board_close(b);
  return NULL;
}

/* After the stress: NB names at once, every member eligible, must all get a
 * large slot and complete. */
static void *last_main(void *p) {
  arg *a = p;
  wf_board *b = wf_board_open(g_mem, g_bytes, N, g_large);
  uint64_t *buf = calloc(1, LEN);
  wf_board_desc d = desc1(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, (int64_t)(LEN / 4));
  wf_board_ticket t[4];
  int how[4];
  for (int k = 0; b && buf && k < 4; k++) {
    char nm[32];
    snprintf(nm, sizeof nm, "last%d", k);
    wf_board_arrive(b, 1, nm, a->rank, N, &d, buf, LEN, COPY_ALL, wf_deadline_after(10.0), &how[k], &t[k]);
    CHECK(how[k] != WF_BOARD_SLOW, "rank %d: round %d found no large slot (leaked?)", a->rank, k);
  }
  for (int k = 0; b && buf && k < 4; k++) {
    if (how[k] == WF_BOARD_SLOW) continue;
    int64_t end = wf_deadline_after(10.0); /* once: the loop must not push it back */
    while (wf_board_state(b, t[k]) == WF_BOARD_WAIT && !wf_board_wait(b, t[k], end)) {
    }
    CHECK(wf_board_state(b, t[k]) == WF_BOARD_DONE, "rank %d: round %d not done", a->rank, k);
    wf_board_claim(b, t[k], a->rank, wf_deadline_after(10.0));
  }
  free(buf);
  wf_board_close(b);
  return NULL;
}

static void test_stress(void) {
  g_large = wf_board_large_for(N, 8192, LEN);
  g_bytes = rup(wf_board_bytes(N, 8192, LEN), 4096);
  g_mem = calloc(1, g_bytes);
  CHECK(g_large == LEN && g_mem, "stress board");
  if (!g_mem) return;
  pthread_t th[NAMES * N];
  arg as[NAMES * N];
  for (int i = 0; i < NAMES; i++)
    for (int r = 0; r < N; r++) {
      as[i * N + r] = (arg){i, r};
      pthread_create(&th[i * N + r], NULL, rank_main, &as[i * N + r]);
    }
  for (int i = 0; i < NAMES * N; i++) pthread_join(th[i], NULL);
  printf("stress: %ld arrivals completed on the board, %ld diverted\n", atomic_load(&g_done),
         atomic_load(&g_diverted));
  CHECK(atomic_load(&g_done) > 0 && atomic_load(&g_diverted) > 0, "stress exercised both outcomes");
  for (int r = 0; r < N; r++) {
    as[r] = (arg){0, r};
    pthread_create(&th[r], NULL, last_main, &as[r]);
  }
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  free(g_mem);
}

/* Generation g+2 must not reopen g's round while a member may still read
 * g. An ordered record (unnamed barriers share records in call order): a
 * member may come to g+2 before another read g, so its rounds are claimed,
 * and an unclaimed one turns the board off. A named record's inline rounds
 * are not claimed; g+2 may reuse g's only if every member arrived at g+1,
 * which here (g+1 diverted with rank 1 missing: on the coordinator path it
 * may end in an error without rank 1, a timeout or a stall shutdown) it
 * did not: the board goes off too, rank 1's g stays readable. */
static void test_unclaimed(int ordered) {
  wf_board *b[2];
  void *mem = open_boards(2, 0, b);
  CHECK(b[0] && b[1], "unclaimed: board");
  wf_board_desc d = desc1(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT64, 1);
  d.ordered = (uint8_t)ordered;
  wf_board_ticket t0[2], t;
  int how[2];
  for (int k = 0; b[0] && b[1] && k < 2; k++) {
    uint64_t v = word(9, 0, k);
    wf_board_arrive(b[k], 1, "x", k, 2, &d, &v, 8, COPY_ALL, wf_deadline_after(10.0), &how[k], &t0[k]);
  }
  if (b[0] && b[1]) {
    CHECK(how[1] == WF_BOARD_DONE, "unclaimed: generation 0 not done");
    uint64_t v = word(9, 0, 0);
    CHECK(*(const uint64_t *)wf_board_part(b[0], t0[0], 1) == word(9, 0, 1), "unclaimed: rank 0 reads generation 0");
    wf_board_claim(b[0], t0[0], 0, wf_deadline_after(10.0)); /* rank 1 has not read it yet */
    CHECK(wf_board_claimed(b[0], t0[0]) == (ordered ? 1u : 0u), "unclaimed: rank 0's claim counted %llu (ordered %d)",
          (unsigned long long)wf_board_claimed(b[0], t0[0]), ordered);
    v = word(9, 1, 0);
    wf_board_arrive(b[0], 1, "x", 0, 2, &d, &v, 8, COPY_ALL, wf_deadline_after(10.0), &how[0], &t);
    CHECK(how[0] == WF_BOARD_WAIT, "unclaimed: generation 1 not open");
    CHECK(wf_board_divert(b[0], t, wf_deadline_after(10.0)) == WF_BOARD_SLOW, "unclaimed: generation 1 not diverted");
    v = word(9, 2, 0);
    wf_board_arrive(b[0], 1, "x", 0, 2, &d, &v, 8, COPY_ALL, wf_deadline_after(10.0), &how[0], &t);
    CHECK(how[0] == WF_BOARD_SLOW && wf_board_is_off(b[0]),
          "unclaimed: generation 2 reopened the round rank 1 had not read");
    CHECK(wf_board_state(b[1], t0[1]) == WF_BOARD_DONE, "unclaimed: rank 1's generation 0 is no longer DONE");
    for (int m = 0; m < 2; m++)
      CHECK(*(const uint64_t *)wf_board_part(b[1], t0[1], m) == word(9, 0, m),
            "unclaimed: rank 1 reads member %d's generation-0 input overwritten", m);
  }
  wf_board_close(b[0]);
  wf_board_close(b[1]);
  free(mem);
}

/* A named record's inline rounds take no claims (a member comes to g+1
 * only after its g completed, so every member read g before anyone opens
 * g+2): the claim counts nothing, and generation g+2 reopens the round with
 * the new inputs; a generation's inputs stay until then. */
static void test_named_inline(void) {
  wf_board *b[2];
  void *mem = open_boards(2, 0, b);
  CHECK(b[0] && b[1], "named inline: board");
  wf_board_desc d = desc1(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT64, 1);
  for (int gen = 0; b[0] && b[1] && gen < 6; gen++) {
    wf_board_ticket t[2];
    int how[2];
    for (int k = 0; k < 2; k++) {
      uint64_t v = word(4, gen, k);
      wf_board_arrive(b[k], 1, "y", k, 2, &d, &v, 8, COPY_ALL, WF_BOARD_WITHIN(10.0), &how[k], &t[k]);
    }
    CHECK(how[0] == WF_BOARD_WAIT && how[1] == WF_BOARD_DONE, "named inline: generation %d not done (%d, %d)", gen,
          how[0], how[1]);
    CHECK(!wf_board_is_off(b[0]), "named inline: generation %d turned the board off", gen);
    for (int k = 0; k < 2; k++) {
      CHECK(wf_board_state(b[k], t[k]) == WF_BOARD_DONE, "named inline: rank %d's generation %d not DONE", k, gen);
      for (int m = 0; m < 2; m++)
        CHECK(*(const uint64_t *)wf_board_part(b[k], t[k], m) == word(4, gen, m),
              "named inline: rank %d reads member %d's generation-%d input wrong", k, m, gen);
      CHECK(wf_board_claim(b[k], t[k], k, WF_BOARD_WITHIN(10.0)) == WEFT_OK, "named inline: claim failed");
    }
    CHECK(wf_board_claimed(b[0], t[0]) == 0, "named inline: generation %d counted claims", gen);
  }
  wf_board_close(b[0]);
  wf_board_close(b[1]);
  free(mem);
}

/* Remote rounds: two ranks in one thread, 100 KiB allgather inputs that
 * stay in place. The board publishes each member's pid, address and length
 * (nothing copied: the slot pool is untouched), the claims gate completion
 * (wf_board_wait_claims), the round is reused by generation 2 once both
 * claimed, and an abandoned round says so. A member whose description says
 * otherwise diverts the round. */
static void test_remote(void) {
  wf_board *b[2];
  void *mem = open_boards(2, 0, b);
  CHECK(b[0] && b[1], "remote: board");
  if (!b[0] || !b[1]) goto out;
  enum { ROWS = 25600 }; /* 100 KiB of int32 */
  static int32_t in[2][ROWS];
  wf_board_desc d = desc1(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, ROWS);
  d.remote = 1;
  for (int gen = 0; gen < 3; gen++) {
    wf_board_ticket t[2];
    int how[2];
    for (int k = 0; k < 2; k++) {
      in[k][0] = gen * 10 + k;
      wf_board_arrive(b[k], 1, "ag", k, 2, &d, in[k], sizeof in[k], COPY_ALL, wf_deadline_after(10.0), &how[k], &t[k]);
    }
    CHECK(how[0] == WF_BOARD_WAIT && how[1] == WF_BOARD_DONE, "remote: generation %d: how %d %d", gen, how[0],
          how[1]);
    if (how[1] != WF_BOARD_DONE) break;
    for (int k = 0; k < 2; k++) {
      CHECK(wf_board_is_remote(b[k], t[k]), "remote: generation %d is not a remote round", gen);
      for (int m = 0; m < 2; m++) {
        int pid;
        uint64_t addr, len;
        wf_board_remote(b[k], t[k], m, &pid, &addr, &len);
        CHECK(pid == (int)getpid() && addr == (uint64_t)(uintptr_t)in[m] && len == sizeof in[m],
              "remote: generation %d: member %d published pid %d addr %#llx len %llu", gen, m, pid,
              (unsigned long long)addr, (unsigned long long)len);
      }
    }
    CHECK(!wf_board_wait_claims(b[0], t[0], 2, 0), "remote: generation %d: claimed before any claim", gen);
    wf_board_claim(b[0], t[0], 0, wf_deadline_after(10.0));
    CHECK(!wf_board_wait_claims(b[0], t[0], 2, wf_now_ns() + 2000000), "remote: generation %d: one claim is all",
          gen);
    wf_board_claim(b[1], t[1], 1, wf_deadline_after(10.0));
    CHECK(wf_board_wait_claims(b[1], t[1], 2, 0), "remote: generation %d: both claimed, still waiting", gen);
    CHECK(!wf_board_abandoned(b[1], t[1]), "remote: generation %d: abandoned", gen);
  }
  /* generation 3: rank 0 gives up on it after reading; rank 1 sees that */
  {
    wf_board_ticket t[2];
    int how[2];
    for (int k = 0; k < 2; k++)
      wf_board_arrive(b[k], 1, "ag", k, 2, &d, in[k], sizeof in[k], COPY_ALL, wf_deadline_after(10.0), &how[k], &t[k]);
    if (how[1] == WF_BOARD_DONE) {
      wf_board_claim(b[0], t[0], 0, wf_deadline_after(10.0));
      wf_board_abandon(b[0], t[0]);
      CHECK(wf_board_abandoned(b[1], t[1]), "remote: rank 1 does not see the round abandoned");
    }
  }
  /* a member that does not read across processes: the round diverts */
  {
    wf_board_desc e = d;
    e.remote = 0;
    e.shape[0] = 16; /* inline-sized: a fresh name, both rounds free */
    wf_board_ticket t[2];
    int how[2];
    d.shape[0] = 16;
    wf_board_arrive(b[0], 1, "ag2", 0, 2, &d, in[0], 64, COPY_ALL, wf_deadline_after(10.0), &how[0], &t[0]);
    wf_board_arrive(b[1], 1, "ag2", 1, 2, &e, in[1], 64, COPY_ALL, wf_deadline_after(10.0), &how[1], &t[1]);
    CHECK(how[1] == WF_BOARD_SLOW && wf_board_state(b[0], t[0]) == WF_BOARD_SLOW,
          "remote: differing descriptions did not divert (how %d)", how[1]);
  }
  CHECK(!wf_board_is_off(b[0]), "remote: the board went off");
out:
  wf_board_close(b[0]);
  wf_board_close(b[1]);
  free(mem);
}

/* An alltoall's own block stays out of the slot (wf_fast_unshared): 3 members, in
 * a pooled slot (rows of 4 bytes x 3 x 8) and a large one (x 3 x 4096).
 * Every other block is copied in; the own block's bytes keep what an
 * earlier round left there. */
static void test_own_block(void) {
  enum { M = 3 };
  wf_board *b[M];
  void *mem = open_boards(M, 3 * 4096 * 4, b);
  CHECK(b[0] && b[1] && b[2], "own block: board");
  if (!b[0] || !b[1] || !b[2]) goto out;
  static int32_t in[M][3 * 4096];
  const size_t rows[2] = {3 * 8, 3 * 4096};
  for (int sz = 0; sz < 2; sz++)
    for (int gen = 0; gen < 2; gen++) { /* gen 0 fills every block; gen 1 skips the own ones */
      size_t n = rows[sz];
      wf_board_desc d = desc1(WF_COLL_ALLTOALL, WEFT_DTYPE_INT32, (int64_t)n);
      wf_board_ticket t[M];
      int how[M];
      char nm[16];
      snprintf(nm, sizeof nm, "a2a%d", sz);
      for (int k = 0; k < M; k++) {
        for (size_t i = 0; i < n; i++) in[k][i] = (int32_t)(gen * 1000000 + k * 100000 + (int)i);
        wf_board_arrive(b[k], 1, nm, k, M, &d, in[k], n * 4, gen ? unshared(&d, k, M, n * 4) : COPY_ALL,
                        wf_deadline_after(10.0), &how[k], &t[k]);
      }
      CHECK(how[M - 1] == WF_BOARD_DONE, "own block: size %d gen %d not done (%d)", sz, gen, how[M - 1]);
      if (how[M - 1] != WF_BOARD_DONE) goto out;
      CHECK(sz == 0 || !wf_board_is_remote(b[0], t[0]), "own block: remote round");
      for (int k = 0; k < M; k++) {
        const int32_t *p = wf_board_part(b[0], t[0], k);
        for (int j = 0; j < M; j++) {
          if (gen && j == k) continue; /* the own block: checked below */
          size_t i0 = (size_t)j * (n / M);
          CHECK(p[i0] == in[k][i0] && p[i0 + n / M - 1] == in[k][i0 + n / M - 1],
                "own block: size %d gen %d member %d block %d: %d, expected %d", sz, gen, k, j, p[i0], in[k][i0]);
        }
        if (gen) { /* not written: it holds an earlier round's bytes (or zeros), never this generation's */
          size_t i0 = (size_t)k * (n / M);
          CHECK(p[i0] != in[k][i0], "own block: size %d member %d copied its own block in", sz, k);
        }
      }
      for (int k = 0; k < M; k++) wf_board_claim(b[k], t[k], k, wf_deadline_after(10.0));
    }
out:
  for (int k = 0; k < M; k++) wf_board_close(b[k]);
  free(mem);
}

/* A reducescatter's own rows stay out of the slot (wf_fast_unshared): each
 * member folds them from its own input. 7 rows of 3 float64 over 3 members
 * (rows 3, 2, 2: the first dim0 % n members get one more), and over 1..5
 * members the spans tile the input in member order. A prescaled input goes
 * in scaled and only the slot has that copy: nothing is kept out. */
static void test_rs_own_rows(void) {
  wf_board_desc d = desc1(WF_COLL_REDUCESCATTER, WEFT_DTYPE_FLOAT64, 7);
  d.ndim = 2;
  d.shape[1] = 3;
  const size_t row = 3 * 8, bytes = 7 * row;
  const size_t want_off[3] = {0, 3 * row, 5 * row}, want_len[3] = {3 * row, 2 * row, 2 * row};
  for (size_t dim0 = 0; dim0 < 20; dim0++) /* wf_rs_first: the rows of the ranks before */
    for (int m = 1; m <= 6; m++) {
      size_t sum = 0;
      for (int k = 0; k < m; k++) {
        CHECK(wf_rs_first(dim0, m, k) == sum, "rs own rows: %zu rows over %d, rank %d starts at %zu, expected %zu",
              dim0, m, k, wf_rs_first(dim0, m, k), sum);
        sum += wf_rs_rows(dim0, m, k);
      }
      CHECK(sum == dim0, "rs own rows: %zu rows over %d add up to %zu", dim0, m, sum);
    }
  for (int k = 0; k < 3; k++) {
    wf_board_span sp = unshared(&d, k, 3, bytes);
    CHECK(sp.off == want_off[k] && sp.len == want_len[k], "rs own rows: member %d span [%zu, +%zu), expected [%zu, +%zu)",
          k, sp.off, sp.len, want_off[k], want_len[k]);
  }
  for (int m = 1; m <= 5; m++) {
    size_t next = 0;
    for (int k = 0; k < m; k++) {
      wf_board_span sp = unshared(&d, k, m, bytes);
      CHECK(sp.off == next && sp.len % row == 0, "rs own rows: %d members, member %d starts at %zu, expected %zu", m, k,
            sp.off, next);
      next = sp.off + sp.len;
    }
    CHECK(next == bytes, "rs own rows: %d members' spans end at %zu, expected %zu", m, next, bytes);
  }
  d.prescale = 0.5;
  CHECK(unshared(&d, 1, 3, bytes).len == 0, "rs own rows: a prescaled input kept rows out of the slot");
  d.prescale = 1.0;
  d.shape[0] = 0;
  CHECK(unshared(&d, 0, 3, 0).len == 0, "rs own rows: an empty input kept bytes out");
}

/* Split rounds: 3 members of an int32 sum of 3000 elements in a large slot.
 * Member 2 arrives and does nothing more (a rank descheduled or stopped):
 * members 0 and 1 take and fold every slice between them, each slice once,
 * and both can copy every slice out. The taker is known while a slice is
 * being folded; a waiter sees a slice once it is published; and a later
 * generation of the same round starts with every slice free again. */
static int32_t g_split_in[3][3000];

typedef struct split_waiter {
  wf_board *b;
  wf_board_ticket t;
  _Atomic int woke;
} split_waiter;

static void *split_wait_main(void *p) {
  split_waiter *sw = p;
  int64_t end = wf_deadline_after(10.0);
  /* waits (each wait is bounded) while slice 2 is taken and 0, 1 are done
   * (have = 0b011) */
  while (!(wf_board_slices_done(sw->b, sw->t, 3, NULL, NULL) >> 2 & 1) && wf_now_ns() < end)
    wf_board_wait_slices(sw->b, sw->t, 3, 0, 3, end);
  atomic_store(&sw->woke, (wf_board_slices_done(sw->b, sw->t, 3, NULL, NULL) >> 2 & 1) ? 1 : -1);
  return NULL;
}

static void test_split(void) {
  enum { M = 3, COUNT = 3000 };
  wf_board *b[M];
  void *mem = open_boards(M, COUNT * 4, b);
  CHECK(b[0] && b[1] && b[2], "split: board");
  if (!b[0] || !b[1] || !b[2]) goto out;
  wf_board_desc d = desc1(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT32, COUNT);
  d.split = 1;
  for (int gen = 0; gen < 3; gen++) {
    wf_board_ticket t[M];
    int how[M];
    for (int k = 0; k < M; k++) {
      for (int i = 0; i < COUNT; i++) g_split_in[k][i] = (int32_t)(gen * 100000 + k * 1000 + i);
      wf_board_arrive(b[k], 1, "sum", k, M, &d, g_split_in[k], sizeof g_split_in[k], COPY_ALL, wf_deadline_after(10.0),
                      &how[k], &t[k]);
    }
    CHECK(how[M - 1] == WF_BOARD_DONE, "split: generation %d not done (%d)", gen, how[M - 1]);
    if (how[M - 1] != WF_BOARD_DONE) goto out;
    uint64_t busy;
    int taker;
    CHECK(wf_board_slices_done(b[0], t[0], M, &busy, &taker) == 0 && busy == 0 && taker == -1,
          "split: generation %d does not start with every slice free", gen);
    /* member 0 takes its own slice and member 1's; member 1 then finds
     * slice 1 taken and takes slice 2; nobody takes a slice twice */
    CHECK(wf_board_slice_take(b[0], t[0], 0, 0) && wf_board_slice_take(b[0], t[0], 1, 0), "split: take 0 and 1");
    CHECK(!wf_board_slice_take(b[1], t[1], 1, 1), "split: slice 1 taken twice");
    CHECK(wf_board_slice_take(b[1], t[1], 2, 1), "split: take 2");
    CHECK(!wf_board_slice_take(b[0], t[0], 2, 0), "split: slice 2 taken twice");
    wf_board_slices_done(b[0], t[0], M, &busy, &taker);
    CHECK(busy == 7 && taker == 0, "split: busy %llx taker %d", (unsigned long long)busy, taker);
    for (int s = 0; s < 2; s++) { /* member 0 folds slices 0 and 1 into members 0's and 1's parts */
      int32_t *dst = wf_board_part_mut(b[0], t[0], s);
      for (int i = COUNT * s / M; i < COUNT * (s + 1) / M; i++) {
        int32_t v = 0;
        for (int k = 0; k < M; k++) v += ((const int32_t *)wf_board_part(b[0], t[0], k))[i];
        dst[i] = v;
      }
      wf_board_slice_done(b[0], t[0], s);
    }
    split_waiter sw = {b[0], t[0], 0};
    pthread_t th;
    int started = pthread_create(&th, NULL, split_wait_main, &sw) == 0;
    usleep(20000); /* it sleeps: slice 2 is taken, not done */
    CHECK(!started || atomic_load(&sw.woke) == 0, "split: the waiter returned before slice 2 was done");
    wf_board_slices_done(b[0], t[0], M, &busy, &taker);
    CHECK(busy == 4 && taker == 1, "split: busy %llx taker %d after two folds", (unsigned long long)busy, taker);
    int32_t *dst = wf_board_part_mut(b[1], t[1], 2);
    for (int i = COUNT * 2 / M; i < COUNT; i++) {
      int32_t v = 0;
      for (int k = 0; k < M; k++) v += ((const int32_t *)wf_board_part(b[1], t[1], k))[i];
      dst[i] = v;
    }
    wf_board_slice_done(b[1], t[1], 2);
    if (started) pthread_join(th, NULL);
    CHECK(!started || atomic_load(&sw.woke) == 1, "split: the waiter did not see slice 2 (%d)", atomic_load(&sw.woke));
    CHECK(wf_board_slices_done(b[2], t[2], M, &busy, NULL) == 7 && busy == 0, "split: not every slice done");
    for (int k = 0; k < M; k++) /* every member reads the whole sum out of the slices */
      for (int s = 0; s < M; s++) {
        int i = COUNT * s / M + 5;
        int32_t want = 3 * (gen * 100000 + i) + 3000;
        CHECK(((const int32_t *)wf_board_part(b[k], t[k], s))[i] == want, "split: gen %d member %d slice %d: %d vs %d",
              gen, k, s, ((const int32_t *)wf_board_part(b[k], t[k], s))[i], want);
      }
    for (int k = 0; k < M; k++) wf_board_claim(b[k], t[k], k, wf_deadline_after(10.0));
  }
out:
  for (int k = 0; k < M; k++) wf_board_close(b[k]);
  free(mem);
}

/* WF_SPLIT_OWN rounds: each member folds its own slice from its own input,
 * so its arrival copies in all but that slice (wf_fast_unshared, by
 * wf_board_slice: uneven slices of an odd count here); the slot's bytes
 * there stay as they were (zero: a fresh board). */
static void test_split_own(void) {
  enum { M = 2, COUNT = 3001 };
  static int32_t in[M][COUNT];
  wf_board *b[M];
  void *mem = open_boards(M, COUNT * 4, b);
  CHECK(b[0] && b[1], "split own: board");
  if (!b[0] || !b[1]) goto out;
  wf_board_desc d = desc1(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT32, COUNT);
  d.split = WF_SPLIT_OWN;
  wf_board_ticket t[M];
  int how[M];
  for (int k = 0; k < M; k++) {
    for (int i = 0; i < COUNT; i++) in[k][i] = k * 100000 + i + 1;
    wf_board_arrive(b[k], 1, "own", k, M, &d, in[k], sizeof in[k], unshared(&d, k, M, sizeof in[k]),
                    WF_BOARD_WITHIN(10.0), &how[k], &t[k]);
  }
  CHECK(how[M - 1] == WF_BOARD_DONE, "split own: not done (%d)", how[M - 1]);
  if (how[M - 1] != WF_BOARD_DONE) goto out;
  CHECK(wf_board_split_kind(b[0], t[0]) == WF_SPLIT_OWN, "split own: kind %d", wf_board_split_kind(b[0], t[0]));
  for (int k = 0; k < M; k++) {
    size_t lo, hi;
    wf_board_slice(COUNT, M, k, &lo, &hi);
    const int32_t *p = wf_board_part(b[1 - k], t[1 - k], k);
    int bad = -1;
    for (int i = 0; i < COUNT && bad < 0; i++)
      if (p[i] != ((size_t)i >= lo && (size_t)i < hi ? 0 : in[k][i])) bad = i;
    CHECK(bad < 0, "split own: member %d's part at %d is %d (own slice [%zu, %zu) must stay out)", k, bad,
          bad < 0 ? 0 : p[bad], lo, hi);
  }
  /* member 0 folded its slice; member 1's is free but only member 1 may
   * take it: member 0's wait for it sleeps until its deadline instead of
   * returning at once (a waiter spinning on it would take the owner's core) */
  CHECK(wf_board_slice_take(b[0], t[0], 0, 0), "split own: member 0 cannot take its slice");
  wf_board_slice_done(b[0], t[0], 0);
  int64_t t0 = wf_now_ns();
  wf_board_wait_slices(b[0], t[0], M, 0, 1, t0 + 15 * 1000000LL); /* one sleep: at most 20 ms (SLEEP_NS) */
  CHECK(wf_now_ns() - t0 >= 12 * 1000000LL, "split own: waiting for member 1's slice returned after %lld us",
        (long long)((wf_now_ns() - t0) / 1000));
  for (int k = 0; k < M; k++) wf_board_claim(b[k], t[k], k, WF_BOARD_WITHIN(10.0));
out:
  for (int k = 0; k < M; k++) wf_board_close(b[k]);
  free(mem);
}

/* A record's hash is the in-flight key's ("<group>/<name>"), which the
 * submission hashes once for both; arrivals with and without it meet. */
static void test_hash(void) {
  CHECK(wf_board_hash(7, "layer.12.weight") == wf_str_hash("7/layer.12.weight"), "board hash is not the key's");
  CHECK(wf_board_hash(7, "a") != wf_board_hash(71, ""), "group and name are not kept apart");
  wf_board *b[2];
  void *mem = open_boards(2, 0, b);
  CHECK(b[0] && b[1], "no board");
  if (!b[0] || !b[1]) {
    for (int k = 0; k < 2; k++) wf_board_close(b[k]);
    free(mem);
    return;
  }
  wf_board_desc d = desc1(WF_COLL_ALLREDUCE, WEFT_DTYPE_FLOAT32, 2);
  float x[2] = {1, 2}, y[2] = {10, 20};
  int how0, how1;
  wf_board_ticket t0, t1;
  int64_t dl = wf_deadline_after(5);
  CHECK(wf_board_arrive_h(b[0], 3, "h", wf_str_hash("3/h"), 0, 2, &d, x, sizeof x, COPY_ALL, dl, &how0, &t0) == WEFT_OK,
        "arrive_h failed");
  CHECK(wf_board_arrive(b[1], 3, "h", 1, 2, &d, y, sizeof y, COPY_ALL, dl, &how1, &t1) == WEFT_OK, "arrive failed");
  CHECK(how0 == WF_BOARD_WAIT && how1 == WF_BOARD_DONE && t0.rec == t1.rec,
        "an arrival with its hash and one without did not meet (how %d %d, records %u %u)", how0, how1, t0.rec, t1.rec);
  for (int k = 0; k < 2; k++) wf_board_close(b[k]);
  free(mem);
}

int main(void) {
  test_hash();
  test_geometry();
  test_unclaimed(1);
  test_unclaimed(0);
  test_named_inline();
  test_split_own();
  test_remote();
  test_own_block();
  test_rs_own_rows();
  test_split();
  test_stress();
  return unit_result("test_board");
}
