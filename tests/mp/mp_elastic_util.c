/* mp_elastic_util.c - what the elastic tests (mp_elastic.c,
 * mp_elastic_grow.c) share: a monotonic clock in seconds, and the
 * deterministic gradient of parameter i of worker id at step t (integers in
 * -6..6, so sums are exact in float64 in any order). Included. */
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double grad(int t, int id, int i, double p) {
  long long v = (long long)t * 31 + (long long)id * 17 + (long long)i * 7 + (long long)p;
  return (double)(((v % 13) + 13) % 13 - 6);
}
