/* test_strmap.c - the string map against a reference array: random puts,
 * gets and deletes; steady add/delete churn must not grow the table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/strmap.h"

#define NKEYS 5000
static int fails;
#define CHECK(c, ...)                   \
  do {                                  \
    if (!(c)) {                         \
      fails++;                          \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fprintf(stderr, "\n");            \
    }                                   \
  } while (0)

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

int main(void) {
  static void *ref[NKEYS];
  static int vals[NKEYS];
  wf_strmap m;
  wf_strmap_init(&m);
  char key[32];
  for (int it = 0; it < 200000; it++) {
    int k = (int)(next() % NKEYS);
    snprintf(key, sizeof key, "t/%d", k);
    switch (next() % 3) {
      case 0:
        CHECK(wf_strmap_put(&m, key, &vals[k]) == 0, "put %s", key);
        ref[k] = &vals[k];
        break;
      case 1:
        CHECK(wf_strmap_del(&m, key) == ref[k], "del %s", key);
        ref[k] = NULL;
        break;
      default:
        CHECK(wf_strmap_get(&m, key) == ref[k], "get %s", key);
    }
  }
  size_t live = 0;
  for (int k = 0; k < NKEYS; k++) {
    snprintf(key, sizeof key, "t/%d", k);
    CHECK(wf_strmap_get(&m, key) == ref[k], "final get %s", key);
    live += ref[k] != NULL;
  }
  CHECK(m.len == live, "len %zu, expected %zu", m.len, live);
  wf_strmap_free(&m);

  /* churn: at most 8 live keys, a million distinct names over time */
  wf_strmap_init(&m);
  for (int i = 0; i < 1000000; i++) {
    snprintf(key, sizeof key, "c/%d", i);
    CHECK(wf_strmap_put(&m, key, &vals[0]) == 0, "churn put");
    if (i >= 8) {
      snprintf(key, sizeof key, "c/%d", i - 8);
      CHECK(wf_strmap_del(&m, key) == &vals[0], "churn del");
    }
  }
  CHECK(m.cap <= 64, "churn grew the table to %zu slots for 8 live keys", m.cap);
  wf_strmap_free(&m);
  if (fails) return 1;
  printf("PASS test_strmap\n");
  return 0;
}
