/* mp_elastic.c - elastic training under `weftrun --min-np ...`: a tiny
 * deterministic model survives the loss of a worker.
 *
 * Every worker (its stable id: WEFT_ELASTIC_ID) trains L float64
 * parameters for --steps steps. Step t: gradient g[i] = ((t*31 + id*17 +
 * i*7 + P[i]) mod 13) - 6 (integers, so float64 sums are exact in any
 * order), allreduce (sum) over the world, P += G. After every
 * --commit-every steps the state (P, next step) is committed in process
 * memory. Worker --die-worker SIGKILLs itself at the start of step
 * --die-step (before it submits). The survivors' allreduce fails (the
 * error is printed; it must name the lost rank); they weft_finalize, then
 * weft_init again: the next world (generation 2, one rank fewer), restore
 * their commit, broadcast it from the new rank 0 (so every rank starts from
 * the same state), and finish. The final P must equal, bit for bit, a
 * reference computed here independently from the schedule: all workers up
 * to the last commit before --die-step, then the survivors.
 * Also checked: weft_generation (1 first, then 2) and the new world's size.
 * With --expect-stop (the --min-np 3 case), a survivor whose weft_init is
 * refused prints it and exits 3; weftrun's message is checked by
 * elastic.sh.
 *
 * Timing (bench/elastic.sh reads these lines): the dying worker prints
 * "elastic-die-at <CLOCK_MONOTONIC seconds>"; the new world's rank 0 prints
 * "elastic-reformed-at <seconds>" after its first successful allreduce;
 * worker 0 also when it saw the failure, finalized and was placed again
 * ("elastic-failed-at", "elastic-finalized-at", "elastic-init-at") and
 * the training loop's time ("elastic-train-seconds"). Without
 * WEFT_ELASTIC_ID (plain weftrun, no death) it trains the same way: the
 * baseline of elastic mode's steady-state cost.
 *
 * After every weft_finalize the process has as many fds and threads as
 * before its first weft_init (nothing of the old world left).
 * --slow-worker W --slow-seconds X: worker W, after the failure, sleeps X s
 * before asking for its place: weftrun leaves it out after
 * --elastic-timeout and stops it; the others go on without it (the
 * reference too).
 *
 * --die2-worker W --die2-step S: a second death, of worker W at step S of
 * generation 2 (the survivors re-form generation 3), or with S = -1 right
 * after its weft_finalize, before it asks again (while re-forming). Each
 * failure must name the lost rank (its rank in that generation).
 *
 * --fail-at-exit W: worker W exits 7 after training, the others 1 s later
 * with 0 (a failure nobody recovered from must fail the job: elastic.sh).
 *
 * Usage: mp_elastic --steps N --commit-every K --die-worker W --die-step S
 *                   [--workers P] [--expect-stop] [--slow-worker W --slow-seconds X]
 *                   [--die2-worker W --die2-step S] */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

#define L 33

static int g_steps = 60, g_commit = 10, g_die_worker = 2, g_die_step = 23, g_workers = 3, g_expect_stop;
static int g_slow_worker = -1, g_slow_seconds = 0;
static int g_fail_at_exit = -1; /* this worker exits 7 after training, the others 1 s later with 0 */
static int g_die2_worker = -1, g_die2_step = -2; /* a second death: in generation 2 at a step, or -1: re-forming */
static int g_id = -1;

/* Entries in a /proc/self directory (fds, threads): a finalized world
 * leaves none of its own behind. */
static int count_dir(const char *path) {
  DIR *d = opendir(path);
  int n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n - (strstr(path, "/fd") ? 1 : 0); /* opendir's own fd */
}

#include "mp_elastic_util.c"

/* One step of the reference: the members' gradients summed in id order. */
static void ref_step(double *p, int t, const int *members, int n) {
  double g[L] = {0};
  for (int k = 0; k < n; k++)
    for (int i = 0; i < L; i++) g[i] += grad(t, members[k], i, p[i]);
  for (int i = 0; i < L; i++) p[i] += g[i];
}

/* The members of generation gen (1, 2, 3), in id order; their count. */
static int members(int gen, int *m) {
  int n = 0;
  for (int w = 0; w < g_workers; w++) {
    int gone = gen >= 2 && (w == g_die_worker || w == g_slow_worker || (w == g_die2_worker && g_die2_step == -1));
    if (gen >= 3 && w == g_die2_worker) gone = 1;
    if (!gone) m[n++] = w;
  }
  return n;
}

/* The schedule: generation 1 up to the last commit before the first death,
 * generation 2 from there (to the last commit before a second death in it),
 * then generation 3. */
static void reference(double *p) {
  int m[64];
  int c1 = (g_die_step / g_commit) * g_commit, c2 = g_die2_step >= 0 ? (g_die2_step / g_commit) * g_commit : g_steps;
  for (int i = 0; i < L; i++) p[i] = 0;
  int n = members(1, m);
  for (int t = 0; t < c1 && t < g_steps; t++) ref_step(p, t, m, n);
  n = members(2, m);
  for (int t = c1; t < c2 && t < g_steps; t++) ref_step(p, t, m, n);
  n = members(3, m);
  for (int t = c2; t < g_steps; t++) ref_step(p, t, m, n);
}

static void die(const char *when) {
  printf("elastic-die-at %.6f (worker %d, %s)\n", now_s(), g_id, when);
  fflush(stdout);
  raise(SIGKILL);
}

static int arg_int(int argc, char **argv, int *i, const char *name, int *out) {
  if (strcmp(argv[*i], name) || *i + 1 >= argc) return 0;
  *out = atoi(argv[++*i]);
  return 1;
}

/* Waits for req and frees it; the status, with the error in msg. */
static weft_status finish(weft_request *req, char *msg, size_t cap) {
  weft_status st = weft_wait(req, 60);
  if (st != WEFT_OK) snprintf(msg, cap, "%s", weft_request_error(req));
  weft_request_free(req);
  return st;
}

static void *idle_thread(void *arg) { return arg; }

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (arg_int(argc, argv, &i, "--steps", &g_steps) || arg_int(argc, argv, &i, "--commit-every", &g_commit) ||
        arg_int(argc, argv, &i, "--die-worker", &g_die_worker) || arg_int(argc, argv, &i, "--die-step", &g_die_step) ||
        arg_int(argc, argv, &i, "--workers", &g_workers) || arg_int(argc, argv, &i, "--slow-worker", &g_slow_worker) ||
        arg_int(argc, argv, &i, "--slow-seconds", &g_slow_seconds) ||
        arg_int(argc, argv, &i, "--fail-at-exit", &g_fail_at_exit) ||
        arg_int(argc, argv, &i, "--die2-worker", &g_die2_worker) || arg_int(argc, argv, &i, "--die2-step", &g_die2_step))
      continue;
    if (!strcmp(argv[i], "--expect-stop")) {
      g_expect_stop = 1;
      continue;
    }
    fprintf(stderr, "mp_elastic: unknown argument %s\n", argv[i]);
    return 2;
  }
  const char *idv = getenv("WEFT_ELASTIC_ID");
  int elastic = idv != NULL; /* without: plain weftrun (bench/elastic.sh's baseline), no death allowed */
  if (!idv) idv = getenv("WEFT_RANK");
  if (!idv || (!elastic && g_die_worker < g_workers)) {
    printf("FAIL: WEFT_ELASTIC_ID is not set: run under weftrun --min-np\n");
    return 1;
  }
  g_id = atoi(idv);
  double train_start = 0;
  double p[L] = {0}, committed[L] = {0};
  int t = 0, committed_t = 0, failures = 0, reformed = 0;
  uint64_t last_gen = 0;
  /* A thread made and joined first: a sanitizer's runtime (TSan) starts a
   * background thread of its own at the process's first pthread_create, which
   * must not count as one the world left behind. */
  pthread_t warm;
  if (pthread_create(&warm, NULL, idle_thread, NULL) == 0) pthread_join(warm, NULL);
  int fds0 = count_dir("/proc/self/fd"), threads0 = count_dir("/proc/self/task");
  for (;;) {
    weft_world *w = NULL;
    weft_status st = weft_init(NULL, &w);
    if (st != WEFT_OK) {
      printf("%s: worker %d: weft_init after %d failure(s): %s: %s\n", g_expect_stop ? "NOTE" : "FAIL", g_id,
             failures, weft_status_string(st), weft_last_error());
      return 3;
    }
    int rank = weft_rank(w), size = weft_size(w);
    if (failures && g_id == 0) printf("elastic-init-at %.6f\n", now_s());
    uint64_t gen = weft_generation(w);
    int mem[64], expect_size = members((int)gen, mem);
    if (!elastic) last_gen = (uint64_t)-1; /* generation 0 */
    if (gen != last_gen + 1 || size != expect_size) {
      printf("FAIL: worker %d: generation %llu (expected %llu), size %d (expected %d)\n", g_id,
             (unsigned long long)gen, (unsigned long long)last_gen + 1, size, expect_size);
      return 1;
    }
    last_gen = gen;
    weft_group *g = weft_world_group(w);
    char msg[1024] = "", name[64];
    /* sync: the new rank 0's commit (P and its step) to everyone */
    double state[L + 1];
    memcpy(state, p, sizeof p);
    state[L] = (double)t;
    int64_t shape[1] = {L + 1}, gshape[1] = {L};
    weft_tensor ts = {WEFT_DTYPE_FLOAT64, 1, shape, state, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    snprintf(name, sizeof name, "sync.%llu", (unsigned long long)gen);
    st = weft_broadcast(g, name, &ts, 0, NULL, &req);
    if (st == WEFT_OK) st = finish(req, msg, sizeof msg);
    if (st == WEFT_OK) {
      memcpy(p, state, sizeof p);
      t = (int)state[L];
    }
    if (!train_start) train_start = now_s();
    for (; st == WEFT_OK && t < g_steps; t++) {
      if (t == g_die_step && g_id == g_die_worker) die("training");
      if (t == g_die2_step && g_id == g_die2_worker && gen == 2) die("training, generation 2");
      double gr[L];
      for (int i = 0; i < L; i++) gr[i] = grad(t, g_id, i, p[i]);
      weft_tensor tg = {WEFT_DTYPE_FLOAT64, 1, gshape, gr, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_allreduce(g, "grad", &tg, &tg, WEFT_OP_SUM, NULL, &req);
      if (st == WEFT_OK) st = finish(req, msg, sizeof msg);
      else snprintf(msg, sizeof msg, "%s", weft_last_error());
      if (st != WEFT_OK) break;
      if (failures && !reformed) {
        reformed = 1;
        if (rank == 0) printf("elastic-reformed-at %.6f\n", now_s());
      }
      for (int i = 0; i < L; i++) p[i] += gr[i];
      if ((t + 1) % g_commit == 0) {
        memcpy(committed, p, sizeof p);
        committed_t = t + 1;
      }
    }
    if (st == WEFT_OK) {
      if (g_id == 0) printf("elastic-train-seconds %.6f\n", now_s() - train_start);
      weft_finalize(w);
      break;
    }
    failures++;
    double failed_at = now_s();
    char want[32];
    int lost = gen == 1 ? g_die_worker : g_die2_worker, lost_rank = -1;
    for (int k = 0; k < expect_size; k++)
      if (mem[k] == lost) lost_rank = k; /* its rank in this generation */
    snprintf(want, sizeof want, "rank %d", lost_rank);
    printf("worker %d: generation %llu failed at step %d: %s: %s\n", g_id, (unsigned long long)gen, t,
           weft_status_string(st), msg);
    int expected = gen == 1 || (gen == 2 && g_die2_step >= 0);
    if (!expected || lost_rank < 0 || !strstr(msg, want)) {
      printf("FAIL: worker %d: an unexpected failure of generation %llu (expected: naming %s)\n", g_id,
             (unsigned long long)gen, lost_rank < 0 ? "nobody" : want);
      weft_finalize(w);
      return 1;
    }
    weft_finalize(w); /* releases the old world: shm, sockets, threads */
    if (g_id == 0) printf("elastic-failed-at %.6f\nelastic-finalized-at %.6f\n", failed_at, now_s());
    int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
    if (fds != fds0 || threads != threads0) {
      printf("FAIL: worker %d: after finalizing generation %llu: %d fds and %d threads, before the first world %d "
             "and %d\n", g_id, (unsigned long long)gen, fds, threads, fds0, threads0);
      return 1;
    }
    memcpy(p, committed, sizeof p);
    t = committed_t;
    if (g_id == g_die2_worker && g_die2_step == -1) die("re-forming");
    if (g_id == g_slow_worker) { /* a straggler: weftrun leaves it out after --elastic-timeout and stops it */
      printf("worker %d: sleeping %d s before asking for a place\n", g_id, g_slow_seconds);
      fflush(stdout);
      sleep((unsigned)g_slow_seconds);
    }
  }
  if (g_expect_stop) {
    printf("FAIL: worker %d finished, but the job should have stopped (fewer than --min-np)\n", g_id);
    return 1;
  }
  double ref[L];
  reference(ref);
  if (memcmp(ref, p, sizeof p) != 0) {
    for (int i = 0; i < L; i++)
      if (ref[i] != p[i]) {
        printf("FAIL: worker %d: parameter %d is %.17g, the reference %.17g\n", g_id, i, p[i], ref[i]);
        break;
      }
    return 1;
  }
  if (!failures && g_die_worker < g_workers) {
    printf("FAIL: worker %d finished without the expected failure\n", g_id);
    return 1;
  }
  printf("PASS: worker %d: %d steps, %d re-formation(s), final parameters equal the reference (p[0] = %g)\n", g_id,
         g_steps, failures, p[0]);
  if (g_fail_at_exit >= 0) {
    fflush(stdout);
    if (g_id == g_fail_at_exit) return 7;
    sleep(1);
  }
  return 0;
}
