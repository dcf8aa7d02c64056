/* barrier_floor.c - what one operation of a one-host collective that waits
 * for every rank costs on this machine when it does nothing else: n
 * processes (not pinned, as weftrun starts ranks) sum one 8-byte value each
 * through shared memory, over and over: no names, no validation, no
 * library. A rank writes its value into its cell (one per generation parity:
 * nobody can be two generations ahead), arrives on a shared counter; the
 * last arrival starts the next generation; the others wait for it, then
 * every rank sums every cell and checks the sum. Every collective of weft
 * checks that all ranks agree before any completes, so no rank finishes an
 * operation before every rank has reached it. This loop is a practical
 * floor, not a proven bound: it is the best of three simple ways to wait.
 *
 * Waiting is tried up to three ways, and the fastest counts: poll with a
 * pause (only when the ranks do not outnumber the CPUs: else a poller holds
 * the CPU its waited-for rank needs for a whole time slice, milliseconds),
 * poll yielding the CPU each time, and sleep on a futex at once.
 *
 * usage: barrier_floor NRANKS [ms per way]
 * prints "FLOOR n=<n> us=<best per op> [poll=<us>] yield=<us> futex=<us>";
 * a rank stuck for RANK_LIMIT_S seconds dies (SIGALRM), and one that dies
 * takes the others with it: the tool always ends.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 16
#define RANK_LIMIT_S 20 /* a run takes well under a second */
#define LINE 128

typedef struct {
  _Alignas(LINE) _Atomic uint32_t arrived;
  _Alignas(LINE) _Atomic uint32_t gen; /* futex word */
  _Atomic uint32_t sleepers;
  _Alignas(LINE) struct {
    _Alignas(LINE) double v[2];
  } cell[MAX_RANKS];
  _Atomic int bad; /* a wrong sum seen */
  double t[MAX_RANKS]; /* each rank's time for its loop */
} shared;

enum { POLL, YIELD, FUTEX, NWAYS };
static const char *const way_name[NWAYS] = {"poll", "yield", "futex"};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pause_cpu(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* One rank: ops operations; the time of the whole loop. */
static double run_rank(shared *s, int n, int me, long ops, int way) {
  double t0 = now_s();
  for (long i = 0; i < ops; i++) {
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
    s->cell[me].v[g & 1] = (double)(me + 1) * (double)(i + 1);
    if (atomic_fetch_add_explicit(&s->arrived, 1, memory_order_acq_rel) == (uint32_t)n - 1) {
      atomic_store_explicit(&s->arrived, 0, memory_order_relaxed);
      atomic_store_explicit(&s->gen, g + 1, memory_order_seq_cst);
      if (atomic_load_explicit(&s->sleepers, memory_order_seq_cst))
        syscall(SYS_futex, (uint32_t *)&s->gen, FUTEX_WAKE, n, NULL, NULL, 0);
    } else {
      while (atomic_load_explicit(&s->gen, memory_order_acquire) == g) {
        if (way == POLL) {
          pause_cpu();
        } else if (way == YIELD) {
          sched_yield();
        } else {
          atomic_fetch_add_explicit(&s->sleepers, 1, memory_order_seq_cst);
          if (atomic_load_explicit(&s->gen, memory_order_seq_cst) == g)
            syscall(SYS_futex, (uint32_t *)&s->gen, FUTEX_WAIT, g, NULL, NULL, 0);
          atomic_fetch_sub_explicit(&s->sleepers, 1, memory_order_relaxed);
        }
      }
    }
    double sum = 0, want = (double)(i + 1) * (double)n * (double)(n + 1) / 2.0;
    for (int r = 0; r < n; r++) sum += s->cell[r].v[g & 1];
    if (sum != want) atomic_store(&s->bad, 1);
  }
  return now_s() - t0;
}

/* Runs n ranks for ops operations each, their times into s->t; 0, or -1 with a
 * message if a rank could not start or did not finish (the others are
 * killed: they would wait for it forever). */
static int run_ranks(shared *s, int n, long ops, int way) {
  pid_t pids[MAX_RANKS];
  int forked = 0, ok = 1;
  for (; forked < n; forked++) {
    pid_t p = fork();
    if (p < 0) {
      perror("barrier_floor: fork");
      ok = 0;
      break;
    }
    if (p == 0) {
      alarm(RANK_LIMIT_S);
      s->t[forked] = run_rank(s, n, forked, ops, way);
      _exit(0);
    }
    pids[forked] = p;
  }
  if (!ok) /* the ranks that started wait for the one that did not */
    for (int k = 0; k < forked; k++) kill(pids[k], SIGKILL);
  for (int left = forked; left > 0; left--) {
    int st;
    if (!ok) {
      wait(NULL);
      continue;
    }
    if (wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    fprintf(stderr, "barrier_floor: a rank did not finish (%s way)\n", way_name[way]);
    ok = 0;
    for (int k = 0; k < forked; k++) kill(pids[k], SIGKILL); /* the others would wait for it */
  }
  return ok ? 0 : -1;
}

/* n ranks running for about ms milliseconds; the slowest rank's time per op. */
static double measure(shared *s, int n, int way, double ms) {
  /* calibrate on one short run, then a timed run */
  long ops = 200;
  for (int pass = 0; pass < 2; pass++) {
    atomic_store(&s->arrived, 0);
    atomic_store(&s->sleepers, 0);
    if (run_ranks(s, n, ops, way)) return -1;
    double worst = 0;
    for (int r = 0; r < n; r++)
      if (s->t[r] > worst) worst = s->t[r];
    double per = worst / (double)ops;
    if (pass == 1) return per;
    ops = (long)(ms * 1e-3 / per);
    if (ops < 20000) ops = 20000;
  }
  return -1;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  double ms = argc > 2 ? atof(argv[2]) : 200;
  if (n < 2 || n > MAX_RANKS) {
    fprintf(stderr, "barrier_floor: NRANKS must be 2..%d\n", MAX_RANKS);
    return 2;
  }
  shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("barrier_floor: mmap");
    return 1;
  }
  double us[NWAYS] = {0}, best = 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int first = cpus > 0 && n > cpus ? YIELD : POLL;
  for (int w = first; w < NWAYS; w++) {
    double per = measure(s, n, w, ms);
    if (per < 0) return 1; /* said why */
    us[w] = per * 1e6;
    if (w == first || us[w] < best) best = us[w];
  }
  if (atomic_load(&s->bad)) {
    fprintf(stderr, "barrier_floor: a rank summed the wrong values\n");
    return 1;
  }
  printf("FLOOR n=%d us=%.3f", n, best);
  for (int w = first; w < NWAYS; w++) printf(" %s=%.3f", way_name[w], us[w]);
  printf("\n");
  return 0;
}
