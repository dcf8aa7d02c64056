/* time.c - monotonic and wall clock helpers. */
#include "util/time.h"

#include <limits.h>
#include <stdatomic.h>
#include <time.h>

int64_t wf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * WF_NS_PER_SEC + ts.tv_nsec;
}

static int64_t clip_ns(double seconds) {
  const double year = 365.0 * 24 * 3600;
  if (!(seconds > 0)) seconds = 0;
  if (seconds > year) seconds = year;
  return (int64_t)(seconds * 1e9);
}

int64_t wf_deadline_after(double seconds) { return wf_now_ns() + clip_ns(seconds); }

int64_t wf_deadline_after_coarse(double seconds) {
  static _Atomic int64_t tick; /* the coarse clock's resolution; 0: not read yet */
  int64_t res = atomic_load_explicit(&tick, memory_order_relaxed);
  struct timespec ts;
  if (!res) {
    /* its time is the last tick's, behind CLOCK_MONOTONIC by less than one */
    res = clock_getres(CLOCK_MONOTONIC_COARSE, &ts) == 0 ? (int64_t)ts.tv_sec * WF_NS_PER_SEC + ts.tv_nsec : -1;
    atomic_store_explicit(&tick, res, memory_order_relaxed);
  }
  if (res < 0 || res > 100000000 || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return wf_deadline_after(seconds);
  return (int64_t)ts.tv_sec * WF_NS_PER_SEC + ts.tv_nsec + res + clip_ns(seconds);
}

int wf_ms_until(int64_t deadline_ns) {
  int64_t d = deadline_ns - wf_now_ns();
  if (d <= 0) return 0;
  int64_t ms = (d + 999999) / 1000000;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

int64_t wf_epoch_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
