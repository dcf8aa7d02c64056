/* time.h - monotonic clock helpers. Deadlines are absolute wf_now_ns() values. */
#ifndef WF_UTIL_TIME_H
#define WF_UTIL_TIME_H
#include <stdint.h>

#define WF_NS_PER_SEC 1000000000LL
#define WF_NO_DEADLINE INT64_MAX

/* Nanoseconds from CLOCK_MONOTONIC. */
int64_t wf_now_ns(void);
/* Deadline seconds from now (<= 0 or huge: WF_NO_DEADLINE is never returned;
 * callers always get a finite deadline, capped at one year). */
int64_t wf_deadline_after(double seconds);
/* Milliseconds until deadline, clamped to [0, INT32_MAX] (for poll/epoll). */
int wf_ms_until(int64_t deadline_ns);
/* Microseconds since the Unix epoch (timeline metadata). */
int64_t wf_epoch_us(void);

#endif
