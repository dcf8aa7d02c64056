/* time.c - monotonic and wall clock helpers. */
#include "util/time.h"

#include <limits.h>
#include <time.h>

int64_t wf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * WF_NS_PER_SEC + ts.tv_nsec;
}

int64_t wf_deadline_after(double seconds) {
  const double year = 365.0 * 24 * 3600;
  if (!(seconds > 0)) seconds = 0;
  if (seconds > year) seconds = year;
  return wf_now_ns() + (int64_t)(seconds * 1e9);
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
