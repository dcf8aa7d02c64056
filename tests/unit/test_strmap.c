/* test_strmap.c - the string map against a reference array: random puts,
 * gets and deletes; steady add/delete churn must not grow the table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "unit_check.h"
#include "util/strmap.h"

#define NKEYS 5000

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
  /* borrowed keys, insert-if-absent, get-or-insert, delete-if-value */
  wf_strmap_init(&m);
  static char names[64][32];
  for (int i = 0; i < 64; i++) {
    snprintf(names[i], sizeof names[i], "layer.%d.weight", i);
    CHECK(wf_strmap_insert(&m, names[i], &vals[i], 1) == 0, "insert %s", names[i]);
    CHECK(wf_strmap_insert(&m, names[i], &vals[0], 1) == 1, "second insert of %s", names[i]);
  }
  for (int i = 0; i < 64; i += 2) {
    CHECK(!wf_strmap_del_val(&m, names[i], &vals[i + 1]), "del_val %s with the wrong value", names[i]);
    CHECK(wf_strmap_del_val(&m, names[i], &vals[i]), "del_val %s", names[i]);
  }
  for (int i = 0; i < 64; i++) {
    void *found = NULL;
    snprintf(key, sizeof key, "layer.%d.weight", i); /* a different pointer, same string */
    int rc = wf_strmap_get_or_insert(&m, key, &vals[100 + i], 0, &found);
    if (i % 2) CHECK(rc == 1 && found == &vals[i], "get_or_insert found %s", key);
    else CHECK(rc == 0 && wf_strmap_get(&m, names[i]) == &vals[100 + i], "get_or_insert inserted %s", key);
  }
  CHECK(m.len == 64, "len %zu after get_or_insert, expected 64", m.len);
  wf_strmap_free(&m); /* frees the copied keys only (ASan: no leak, no bad free) */
  /* the hash of a key given its length is the hash of the string, and every
   * byte of it counts, the tail after the last 8-byte word included */
  char s[48];
  for (int n = 0; n < 41; n++) {
    for (int i = 0; i < n; i++) s[i] = (char)('a' + (i * 7 + n) % 26);
    s[n] = '\0';
    uint64_t h = wf_str_hash(s);
    CHECK(wf_str_hash_n(s, (size_t)n) == h, "hash_n of %d bytes differs from the string's hash", n);
    for (int i = 0; i < n; i++) {
      s[i] ^= 0x20;
      CHECK(wf_str_hash(s) != h, "byte %d of a %d-byte key does not change its hash", i, n);
      s[i] ^= 0x20;
    }
  }
  /* the _h variants with the caller's hash meet the plain ones */
  wf_strmap_init(&m);
  for (int i = 0; i < 64; i++)
    CHECK(wf_strmap_insert_h(&m, names[i], wf_str_hash(names[i]), &vals[i], 1) == 0, "insert_h %s", names[i]);
  for (int i = 0; i < 64; i++) {
    snprintf(key, sizeof key, "layer.%d.weight", i);
    CHECK(wf_strmap_get(&m, key) == &vals[i], "get after insert_h %s", key);
    int gone = i % 2 ? wf_strmap_del_val_h(&m, key, wf_str_hash(key), &vals[i]) : wf_strmap_del_val(&m, key, &vals[i]);
    CHECK(gone && !wf_strmap_get(&m, key), "delete (%s) of %s", i % 2 ? "del_val_h" : "del_val", key);
  }
  CHECK(m.len == 0, "len %zu after deleting every key", m.len);
  wf_strmap_free(&m);
  return unit_result("test_strmap");
}
