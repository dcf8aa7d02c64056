/* test_request.c - request memory (request.c): every request handed out is
 * zeroed (but for the name and key's tails), whether fresh or recycled from a freed one, on the thread that
 * freed it or another; a thread's kept requests do not outlive it (its exit
 * frees them: ASan/valgrind would report them; sanitizer builds keep none). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"
#include "unit_check.h"

#define ROUNDS 64

/* Zero but for the name and the key, which need only be empty strings
 * (wf_request_new leaves the rest of them: every submission writes both). */
static int all_zero(const weft_request *r) {
  const unsigned char *p = (const unsigned char *)r;
  size_t skip_from = offsetof(weft_request, msg.name) + 1, skip_to = offsetof(weft_request, in);
  for (size_t i = 0; i < sizeof *r; i++)
    if (p[i] && (i < skip_from || i >= skip_to)) return 0;
  return r->key[0] == '\0';
}

/* new, dirty every byte, release: k at a time, so more than the cache holds */
static void churn(const char *who) {
  weft_request *rs[9];
  for (int round = 0; round < ROUNDS; round++) {
    int k = 1 + round % 9;
    for (int i = 0; i < k; i++) {
      rs[i] = wf_request_new();
      CHECK(rs[i] != NULL, "%s: wf_request_new returned NULL", who);
      if (!rs[i]) return;
      CHECK(all_zero(rs[i]), "%s: round %d: request %d is not zeroed", who, round, i);
      memset(rs[i], 0xA5 ^ i, sizeof *rs[i]);
    }
    for (int i = 0; i < k; i++) wf_request_release(rs[i]);
  }
}

/* Released here, made on the main thread. */
static void *release_all(void *arg) {
  weft_request **rs = arg;
  for (int i = 0; i < 6; i++) wf_request_release(rs[i]);
  churn("thread after cross-thread release");
  return NULL;
}

static void *churn_thread(void *arg) {
  (void)arg;
  churn("thread");
  return NULL; /* its exit frees what it kept */
}

int main(void) {
  churn("main");

  weft_request *rs[6];
  for (int i = 0; i < 6; i++) {
    rs[i] = wf_request_new();
    CHECK(rs[i] != NULL, "wf_request_new returned NULL");
    if (!rs[i]) return unit_result("test_request");
    memset(rs[i], 0x5A, sizeof *rs[i]);
  }
  pthread_t t;
  CHECK(pthread_create(&t, NULL, release_all, rs) == 0, "pthread_create");
  pthread_join(t, NULL);

  pthread_t ts[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&ts[i], NULL, churn_thread, NULL) == 0, "pthread_create");
  for (int i = 0; i < 4; i++) pthread_join(ts[i], NULL);

  churn("main again");
  return unit_result("test_request");
}
