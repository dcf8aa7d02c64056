/* test_board_steps.c - the one-host board's arrival tree (src/negotiate/board.c,
 * "the arrival tree"): how many steps a small operation takes per rank as
 * the members grow, and that the tree gets the rounds right when the members
 * really race. Boards in ordinary memory, one handle per simulated rank.
 *
 *   steps     n = 2 .. 64 members, one thread: every small collective
 *             (inline: allreduce 8 B, broadcast 8 B, allgather 64 B,
 *             alltoall and reducescatter of n bytes, barrier; pooled: 1 KiB
 *             allgather and reducescatter) for 20 generations (5 under a
 *             sanitizer), the members arriving in 5 orders in turn
 *             (ascending, descending, shuffles). Exactly the last arrival gets
 *             WF_BOARD_DONE, the others WF_BOARD_WAIT and then DONE, every
 *             member reads every input intact; each arrival's steps (the
 *             exchanges on shared lines it made: wf_board_ticket.steps) are at
 *             most ceil(log2 n) + 2 and the generation's critical path (the
 *             longest chain of serialised exchanges: .depth of the deciding
 *             arrival) at most 2 ceil(log2 n) + 2. Under the old scheme every
 *             arrival queued on the record's one lock, a chain of n.
 *   race      8 and 33 threads, 150 generations (40 under a sanitizer) of an 8-byte allreduce
 *             (inline), and 8 and 17 threads of a 1 KiB allgather (pooled
 *             slots), waiting as the fast path does: every generation
 *             completes on the board with every member's input and the
 *             board stays on; then the pooled ones again with waiters that
 *             give up (divert) now and then, racing the writers that copy
 *             in without the lock: every member sees the same outcome per
 *             generation, DONE ones read right, and no pooled slot is left
 *             taken afterwards. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate/board.h"
#include "unit_check.h"
#include "util/err.h"
#include "util/time.h"

#define MAXN 64
static const wf_board_span COPY_ALL = {0, 0};

static size_t rup(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void *open_boards(int m, wf_board **b) {
  size_t bytes = rup(wf_board_bytes(m, 8192, 0), 4096);
  void *mem = calloc(1, bytes);
  for (int k = 0; k < m; k++) b[k] = mem ? wf_board_open(mem, bytes, m, 0) : NULL;
  return mem;
}

static wf_board_desc desc_of(int coll, weft_dtype t, int ndim, int64_t n, int root) {
  wf_board_desc d;
  memset(&d, 0, sizeof d);
  d.coll = (uint8_t)coll;
  d.dtype = (uint8_t)t;
  d.op = WEFT_OP_SUM;
  d.ndim = (uint8_t)ndim;
  d.shape[0] = n;
  d.root = root;
  d.prescale = d.postscale = 1.0;
  return d;
}

static int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n) l++;
  return l;
}

/* Member k's byte j of generation g's input (names apart by c). */
static uint8_t byte_of(int c, int g, int k, int j) { return (uint8_t)(c * 67 + g * 31 + k * 7 + j * 3 + 1); }

static unsigned rnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 16;
}

enum { NCOLL = 8, INMAX = 1024 };
/* generations per collective and n (each of the 5 arrival orders alike), and
 * per race: fewer under a sanitizer, which makes every arrival many times
 * slower */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define STEP_GENS 5
#define RACE_GENS_ 40
#else
#define STEP_GENS 20
#define RACE_GENS_ 150
#endif

static void test_steps(void) {
  printf("members  max steps per arrival  critical path\n");
  for (int n = 2; n <= MAXN; n++) {
    wf_board *b[MAXN];
    void *mem = open_boards(n, b);
    CHECK(mem && b[0] && b[n - 1], "n %d: no board", n);
    if (!mem || !b[0] || !b[n - 1]) {
      free(mem);
      continue;
    }
    int lg = ceil_log2(n), max_steps = 0, max_depth = 0;
    unsigned seed = (unsigned)n * 2654435761u;
    for (int c = 0; c < NCOLL; c++) {
      wf_board_desc d;
      size_t len; /* each member's input (a broadcast's non-roots: none) */
      const char *name;
      switch (c) {
        case 0: d = desc_of(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT64, 1, 1, -1), len = 8, name = "ar"; break;
        case 1: d = desc_of(WF_COLL_BROADCAST, WEFT_DTYPE_INT64, 1, 1, n - 1), len = 8, name = "bc"; break;
        case 2: d = desc_of(WF_COLL_ALLGATHER, WEFT_DTYPE_INT64, 1, 8, -1), len = 64, name = "ag"; break;
        case 3: d = desc_of(WF_COLL_ALLTOALL, WEFT_DTYPE_UINT8, 1, n, -1), len = (size_t)n, name = "a2a"; break;
        case 4: d = desc_of(WF_COLL_REDUCESCATTER, WEFT_DTYPE_UINT8, 1, n, -1), len = (size_t)n, name = "rs"; break;
        case 5: d = desc_of(WF_COLL_BARRIER, WEFT_DTYPE_UINT8, 0, 0, -1), len = 0, name = "barrier"; break;
        /* pooled slots: 1 KiB inputs */
        case 6: d = desc_of(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, 1, 256, -1), len = 1024, name = "ag1k"; break;
        default: d = desc_of(WF_COLL_REDUCESCATTER, WEFT_DTYPE_INT32, 1, 256, -1), len = 1024, name = "rs1k"; break;
      }
      for (int g = 0; g < STEP_GENS; g++) { /* the 5 orders in turn */
        int order[MAXN];
        for (int k = 0; k < n; k++) order[k] = k;
        int o = g % 5;
        if (o == 1)
          for (int k = 0; k < n; k++) order[k] = n - 1 - k;
        for (int k = n - 1; o >= 2 && k > 0; k--) {
          int j = (int)(rnd(&seed) % (unsigned)(k + 1)), x = order[k];
          order[k] = order[j];
          order[j] = x;
        }
        wf_board_ticket t[MAXN];
        int how[MAXN];
        for (int i = 0; i < n; i++) {
          int k = order[i];
          static uint8_t in[INMAX];
          for (int j = 0; j < INMAX; j++) in[j] = byte_of(c, g, k, j);
          size_t l = c == 1 && k != d.root ? 0 : len;
          weft_status st = wf_board_arrive(b[k], 1, name, k, n, &d, l ? in : NULL, l, COPY_ALL,
                                           WF_BOARD_WITHIN(10.0), &how[k], &t[k]);
          CHECK(st == WEFT_OK, "n %d %s gen %d: rank %d's arrival failed: %s", n, name, g, k, wf_err_msg());
          CHECK(how[k] == (i == n - 1 ? WF_BOARD_DONE : WF_BOARD_WAIT),
                "n %d %s gen %d: arrival %d (rank %d) got %d", n, name, g, i, k, how[k]);
          CHECK(t[k].steps <= lg + 2, "n %d %s gen %d: rank %d took %d steps (log2 n = %d)", n, name, g, k,
                t[k].steps, lg);
          if (t[k].steps > max_steps) max_steps = t[k].steps;
        }
        int last = order[n - 1];
        CHECK(t[last].depth >= 1 && t[last].depth <= 2 * lg + 2,
              "n %d %s gen %d: the critical path was %d exchanges (log2 n = %d)", n, name, g, t[last].depth, lg);
        if (t[last].depth > max_depth) max_depth = t[last].depth;
        for (int k = 0; k < n; k++) {
          CHECK(wf_board_state(b[k], t[k]) == WF_BOARD_DONE, "n %d %s gen %d: rank %d's round not DONE", n, name, g,
                k);
          for (int m = 0; m < n && len; m++) {
            if (c == 1 && m != d.root) continue;
            const uint8_t *p = wf_board_part(b[k], t[k], m);
            int bad = -1;
            for (int j = 0; j < (int)len && bad < 0; j++)
              if (p[j] != byte_of(c, g, m, j)) bad = j;
            CHECK(bad < 0, "n %d %s gen %d: rank %d reads member %d's byte %d wrong", n, name, g, k, m, bad);
          }
        }
        for (int k = 0; k < n; k++) wf_board_claim(b[k], t[k], k, WF_BOARD_WITHIN(10.0));
      }
    }
    CHECK(!wf_board_is_off(b[0]), "n %d: the board turned off", n);
    if (n <= 4 || n == 8 || n == 16 || n == 32 || n == 33 || n == 64)
      printf("%7d  %21d  %13d\n", n, max_steps, max_depth);
    for (int k = 0; k < n; k++) wf_board_close(b[k]);
    free(mem);
  }
}

/* ------------------------------------------------------------------ race */

enum { RACE_GENS = RACE_GENS_, RACE_INTS = 256 };

typedef struct race_arg {
  wf_board *b;
  int n, rank, pooled, divert; /* divert: give up on 1 generation in this many (0: never) */
  _Atomic int *seen;           /* per generation: 0, or 1 + what the first member to look saw */
  pthread_barrier_t *coord;    /* a diverted generation completes once every member came (the coordinator) */
} race_arg;

static uint32_t race_word(int g, int k, int j) { return (uint32_t)g << 20 | (uint32_t)k << 12 | (uint32_t)j; }

static void *race_main(void *p) {
  race_arg *a = p;
  wf_board_desc d = a->pooled ? desc_of(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, 1, RACE_INTS, -1)
                              : desc_of(WF_COLL_ALLREDUCE, WEFT_DTYPE_INT32, 1, 2, -1);
  int ints = a->pooled ? RACE_INTS : 2;
  unsigned seed = (unsigned)a->rank * 7919u + 1u;
  for (int g = 0; g < RACE_GENS; g++) {
    uint32_t v[RACE_INTS];
    for (int j = 0; j < ints; j++) v[j] = race_word(g, a->rank, j);
    wf_board_ticket t;
    int how;
    weft_status st = wf_board_arrive(a->b, 7, a->pooled ? "race-pooled" : "race", a->rank, a->n, &d, v,
                                     (size_t)ints * 4, COPY_ALL, WF_BOARD_WITHIN(30.0), &how, &t);
    CHECK(st == WEFT_OK, "race n %d gen %d: rank %d's arrival failed", a->n, g, a->rank);
    if (st != WEFT_OK) return NULL;
    if (how == WF_BOARD_WAIT && a->divert && rnd(&seed) % (unsigned)a->divert == 0)
      wf_board_divert(a->b, t, WF_BOARD_WITHIN(10.0)); /* a waiter gives up */
    int64_t until = wf_now_ns() + 30000000000LL;
    while (how != WF_BOARD_SLOW && wf_board_state(a->b, t) == WF_BOARD_WAIT && wf_now_ns() < until)
      wf_board_wait(a->b, t, until);
    int got = how == WF_BOARD_SLOW ? WF_BOARD_SLOW : wf_board_state(a->b, t);
    CHECK(got != WF_BOARD_WAIT, "race n %d gen %d: rank %d's round never left OPEN", a->n, g, a->rank);
    int expect = 0;
    if (!atomic_compare_exchange_strong(&a->seen[g], &expect, got + 1))
      CHECK(expect == got + 1, "race n %d gen %d: rank %d saw %d, another member %d", a->n, g, a->rank, got,
            expect - 1);
    CHECK(a->divert || got == WF_BOARD_DONE, "race n %d gen %d: rank %d's round diverted", a->n, g, a->rank);
    if (got != WF_BOARD_DONE) { /* the coordinator's, in the library: done once every member submitted */
      pthread_barrier_wait(a->coord);
      continue;
    }
    for (int m = 0; m < a->n; m++) {
      const uint32_t *in = wf_board_part(a->b, t, m);
      int bad = -1;
      for (int j = 0; j < ints && bad < 0; j++)
        if (in[j] != race_word(g, m, j)) bad = j;
      CHECK(bad < 0, "race n %d gen %d: rank %d reads member %d's input wrong at %d", a->n, g, a->rank, m, bad);
    }
    wf_board_claim(a->b, t, a->rank, WF_BOARD_WITHIN(10.0));
  }
  return NULL;
}

/* n threads race (pooled: 1 KiB allgather inputs, else 8 bytes inline);
 * with divert, waiters give up now and then: every member sees the same
 * outcome per generation, and afterwards no pooled slot is left taken. */
static void test_race(int n, int pooled, int divert) {
  wf_board *b[MAXN];
  void *mem = open_boards(n, b);
  CHECK(mem && b[0], "race n %d: no board", n);
  if (!mem || !b[0]) return;
  static _Atomic int seen[RACE_GENS];
  for (int g = 0; g < RACE_GENS; g++) atomic_store(&seen[g], 0);
  race_arg a[MAXN];
  pthread_t th[MAXN];
  int started[MAXN];
  pthread_barrier_t coord;
  pthread_barrier_init(&coord, NULL, (unsigned)n);
  for (int k = 0; k < n; k++) {
    a[k] = (race_arg){b[k], n, k, pooled, divert, seen, &coord};
    started[k] = pthread_create(&th[k], NULL, race_main, &a[k]) == 0;
    CHECK(started[k], "race n %d: no thread %d", n, k);
  }
  for (int k = 0; k < n; k++)
    if (started[k]) pthread_join(th[k], NULL);
  pthread_barrier_destroy(&coord);
  int diverted = 0;
  for (int g = 0; g < RACE_GENS; g++) diverted += atomic_load(&seen[g]) == WF_BOARD_SLOW + 1;
  printf("race: %d members, %s inputs, %d of %d generations diverted\n", n, pooled ? "pooled" : "inline", diverted,
         RACE_GENS);
  CHECK(!wf_board_is_off(b[0]), "race n %d: the board turned off", n);
  /* every pooled slot free again: 256 rounds open at once each get one */
  wf_board_desc d = desc_of(WF_COLL_ALLGATHER, WEFT_DTYPE_INT32, 1, RACE_INTS, -1);
  static uint32_t v[RACE_INTS];
  int taken = 0;
  for (int i = 0; i < 256; i++) {
    char name[32];
    snprintf(name, sizeof name, "slot%d", i);
    wf_board_ticket t;
    int how;
    wf_board_arrive(b[0], 9, name, 0, n, &d, v, sizeof v, COPY_ALL, WF_BOARD_WITHIN(10.0), &how, &t);
    taken += how == WF_BOARD_WAIT;
  }
  CHECK(taken == 256, "race n %d pooled %d divert %d: %d of 256 rounds found a pooled slot (leaked)", n, pooled,
        divert, taken);
  for (int k = 0; k < n; k++) wf_board_close(b[k]);
  free(mem);
}

int main(void) {
  test_steps();
  test_race(8, 0, 0);
  test_race(33, 0, 0);
  test_race(8, 1, 0);
  test_race(8, 1, 40);
  test_race(17, 1, 60);
  return unit_result("test_board_steps");
}
