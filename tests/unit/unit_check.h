/* unit_check.h - the failure counter of the single-process unit tests:
 * CHECK records a failure (any thread) with its place and message and goes
 * on, so one run reports every failure; unit_result ends main. */
#ifndef WF_TESTS_UNIT_CHECK_H
#define WF_TESTS_UNIT_CHECK_H
#include <stdatomic.h>
#include <stdio.h>

static atomic_int unit_failures;

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      atomic_fetch_add(&unit_failures, 1);                                \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
      fprintf(stderr, __VA_ARGS__);                                       \
      fprintf(stderr, "\n");                                              \
    }                                                                     \
  } while (0)

/* main's exit status: 0 and "<name>: OK", or 1 and the failure count. */
static inline int unit_result(const char *name) {
  int n = atomic_load(&unit_failures);
  if (n) {
    fprintf(stderr, "%s: %d failure(s)\n", name, n);
    return 1;
  }
  printf("%s: OK\n", name);
  return 0;
}

#endif
