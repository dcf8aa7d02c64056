/* elastic_train.c - elastic data-parallel SGD with weft, in C: the
 * training survives the loss of workers and takes in new ones.
 *
 * The model of sgd_demo.c (linear regression, 4096 samples x 16 features,
 * known weights plus small noise); each step's global mini-batch of 240
 * rows is shared equally by the current ranks (240 divides by 1..6) and
 * their gradients averaged, so the trajectory does not depend on how many
 * ranks there are. The training state (weights and step) is committed every
 * COMMIT steps, in memory.
 *
 *   weftrun -np 2 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh \
 *       ./elastic_train
 *
 * At each commit rank 0 asks weftrun whether new workers wait to join
 * (weft_elastic_hosts_updated) and broadcasts the answer; on an update every
 * rank weft_finalizes and weft_inits again: the new world has the newcomers.
 * When a world fails (a worker died: WEFT_ERR_PEER_LOST, ...), the
 * survivors go back to the last commit and form a new world the same way.
 * After every weft_init rank 0's state is broadcast: a new worker starts
 * from it. Without weftrun's elastic mode it trains as a plain job.
 *
 * Options: --steps N (default 300), --step-ms X (sleep X ms per step, as a
 * longer computation would take), --kill-worker W --kill-step S (worker W,
 * WEFT_ELASTIC_ID, kills itself at step S: a failure to recover from),
 * --expect-size N (exit 1 unless the last world had N ranks).
 * Exits non-zero if the final loss is not near the noise floor. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"

#define N_SAMPLES 4096
#define N_FEATURES 16
#define BATCH 240
#define COMMIT 10
#define LEARNING_RATE 0.1
#define NOISE 0.01
#define LOSS_THRESHOLD 2e-4

static uint64_t g_rng = 0x5eed5eedull;
static double X[N_SAMPLES][N_FEATURES], Y[N_SAMPLES];

static double uniform(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static void make_data(void) {
  double w_true[N_FEATURES];
  for (int f = 0; f < N_FEATURES; f++) w_true[f] = 2 * uniform() - 1;
  for (int s = 0; s < N_SAMPLES; s++) {
    Y[s] = NOISE * (2 * uniform() - 1) * 1.7320508; /* uniform noise of standard deviation NOISE */
    for (int f = 0; f < N_FEATURES; f++) {
      X[s][f] = 2 * uniform() - 1;
      Y[s] += X[s][f] * w_true[f];
    }
  }
}

static double loss(const double *w) {
  double sum = 0;
  for (int s = 0; s < N_SAMPLES; s++) {
    double e = -Y[s];
    for (int f = 0; f < N_FEATURES; f++) e += X[s][f] * w[f];
    sum += e * e;
  }
  return sum / N_SAMPLES;
}

/* This rank's share of step t's mini-batch: the gradient of the mean squared error over it. */
static void share_gradient(const double *w, int t, int rank, int size, double *g) {
  int share = BATCH / size, first = (t * BATCH + rank * share) % N_SAMPLES;
  memset(g, 0, N_FEATURES * sizeof *g);
  for (int k = 0; k < share; k++) {
    const int s = (first + k) % N_SAMPLES;
    double e = -Y[s];
    for (int f = 0; f < N_FEATURES; f++) e += X[s][f] * w[f];
    for (int f = 0; f < N_FEATURES; f++) g[f] += 2 * e * X[s][f] / share;
  }
}

/* Runs one collective to completion (st: its submission's status; *req:
 * read only after the call that set it); the error text in msg. */
static weft_status run(weft_status st, weft_request **req, char *msg, size_t cap) {
  if (st != WEFT_OK) {
    snprintf(msg, cap, "%s", weft_last_error());
    return st;
  }
  st = weft_wait(*req, 60);
  if (st != WEFT_OK) snprintf(msg, cap, "%s", weft_request_error(*req));
  weft_request_free(*req);
  return st;
}

static int opt(int argc, char **argv, int *i, const char *name, int *out) {
  if (strcmp(argv[*i], name) || *i + 1 >= argc) return 0;
  *out = atoi(argv[++*i]);
  return 1;
}

int main(int argc, char **argv) {
  int steps = 300, step_ms = 0, kill_worker = -1, kill_step = -1, expect_size = 0;
  for (int i = 1; i < argc; i++)
    if (!opt(argc, argv, &i, "--steps", &steps) && !opt(argc, argv, &i, "--step-ms", &step_ms) &&
        !opt(argc, argv, &i, "--kill-worker", &kill_worker) && !opt(argc, argv, &i, "--kill-step", &kill_step) &&
        !opt(argc, argv, &i, "--expect-size", &expect_size)) {
      fprintf(stderr, "elastic_train: unknown argument %s\n", argv[i]);
      return 2;
    }
  const char *idv = getenv("WEFT_ELASTIC_ID");
  int worker = idv ? atoi(idv) : -1;
  make_data();
  double w[N_FEATURES] = {0}, committed[N_FEATURES] = {0};
  int t = 0, committed_t = 0, size = 0, rank = 0;
  for (;;) {
    weft_world *world = NULL;
    weft_status st = weft_init(NULL, &world);
    if (st != WEFT_OK) {
      fprintf(stderr, "elastic_train: worker %d: no world: %s\n", worker, weft_last_error());
      return 1;
    }
    rank = weft_rank(world);
    size = weft_size(world);
    weft_group *g = weft_world_group(world);
    char msg[1024] = "", name[64];
    /* the state from rank 0: every member continues from it, a new worker starts from it */
    double state[N_FEATURES + 1];
    memcpy(state, w, sizeof w);
    state[N_FEATURES] = t;
    int64_t sshape[1] = {N_FEATURES + 1}, gshape[1] = {N_FEATURES}, fshape[1] = {1};
    weft_tensor ts = {WEFT_DTYPE_FLOAT64, 1, sshape, state, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    snprintf(name, sizeof name, "state.%llu", (unsigned long long)weft_generation(world));
    st = run(weft_broadcast(g, name, &ts, 0, NULL, &req), &req, msg, sizeof msg);
    if (st == WEFT_OK) {
      memcpy(w, state, sizeof w);
      t = (int)state[N_FEATURES];
      if (rank == 0)
        printf("generation %llu: %d rank%s from step %d, loss %.3g\n", (unsigned long long)weft_generation(world),
               size, size == 1 ? "" : "s", t, loss(w));
    }
    int reform = 0;
    while (st == WEFT_OK && t < steps && !reform) {
      if (worker == kill_worker && t == kill_step) {
        printf("worker %d: dying at step %d\n", worker, t);
        fflush(stdout);
        raise(SIGKILL);
      }
      double grad[N_FEATURES];
      share_gradient(w, t, rank, size, grad);
      weft_tensor tg = {WEFT_DTYPE_FLOAT64, 1, gshape, grad, WEFT_DEVICE_CPU, 0, NULL};
      st = run(weft_allreduce(g, "grad", &tg, &tg, WEFT_OP_AVERAGE, NULL, &req), &req, msg, sizeof msg);
      if (st != WEFT_OK) break;
      for (int f = 0; f < N_FEATURES; f++) w[f] -= LEARNING_RATE * grad[f];
      t++;
      if (step_ms > 0) nanosleep(&(struct timespec){0, step_ms * 1000000L}, NULL);
      if (t % COMMIT || t == steps) continue;
      memcpy(committed, w, sizeof w); /* commit, then look for new workers */
      committed_t = t;
      double updated = 0;
      int upd = 0;
      if (rank == 0 && weft_elastic_hosts_updated(world, &upd) != WEFT_OK)
        fprintf(stderr, "elastic_train: cannot ask for host updates: %s\n", weft_last_error());
      updated = upd;
      weft_tensor tf = {WEFT_DTYPE_FLOAT64, 1, fshape, &updated, WEFT_DEVICE_CPU, 0, NULL};
      snprintf(name, sizeof name, "updated.%d", t);
      st = run(weft_broadcast(g, name, &tf, 0, NULL, &req), &req, msg, sizeof msg);
      reform = st == WEFT_OK && updated != 0;
    }
    weft_finalize(world);
    if (st == WEFT_OK && !reform) break; /* trained */
    if (st == WEFT_OK) continue;         /* new workers: a larger world, from this commit */
    if (!idv) {                          /* not elastic: nothing to recover with */
      fprintf(stderr, "elastic_train: step %d failed: %s\n", t, msg);
      return 1;
    }
    printf("worker %d: the world failed at step %d (%s: %s); back to the commit of step %d\n", worker, t,
           weft_status_string(st), msg, committed_t);
    memcpy(w, committed, sizeof w);
    t = committed_t;
  }
  double l = loss(w);
  if (rank == 0) printf("trained %d steps on %d rank%s: loss %.3g\n", steps, size, size == 1 ? "" : "s", l);
  if (expect_size && size != expect_size) {
    fprintf(stderr, "elastic_train: worker %d finished in a world of %d ranks, expected %d\n", worker, size,
            expect_size);
    return 1;
  }
  return l < LOSS_THRESHOLD ? 0 : 1;
}
