/* switch_cost.c - what it costs to hand a core from one process to another
 * on this machine: two processes pinned to one CPU take turns with
 * sched_yield. Four ranks on two cores need at least one such switch per
 * core per collective (every rank must run between the first submission
 * and the last completion), so this bounds their small-message latency
 * from below whatever the library does. bench/compare.sh reports it.
 *
 * usage: switch_cost [rounds]   prints "SWITCH us=<per switch> rounds=<n>"
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 200000;
  if (rounds < 1000) rounds = 1000;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    perror("switch_cost: sched_setaffinity");
    return 1;
  }
  pid_t child = fork(); /* inherits the affinity: both on the one CPU */
  if (child < 0) {
    perror("switch_cost: fork");
    return 1;
  }
  double t0 = now_s();
  for (long i = 0; i < rounds; i++) sched_yield(); /* each yield runs the other, which yields back */
  double dt = now_s() - t0;
  if (child == 0) _exit(0);
  int st;
  waitpid(child, &st, 0);
  /* a round of the parent is two switches: to the child and back */
  printf("SWITCH us=%.3f rounds=%ld\n", dt / (double)rounds / 2.0 * 1e6, rounds);
  return 0;
}
