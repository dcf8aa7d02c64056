/* param_server.c - a parameter server with weft's remote execution, in C:
 * linear regression (2048 samples x 16 features, fixed seed, known true
 * weights plus small noise) trained by asynchronous SGD.
 *
 * Rank 0 is the server: it holds the weights and registers "apply", which
 * takes a gradient, takes one SGD step and returns a copy of the new
 * weights (kept on the server as a remote object). Every other rank is a
 * worker: it pushes the gradient of its shard's mini-batch with
 * weft_remote_execute, fetches the weights that call produced, and deletes
 * them there. With one rank, rank 0 is server and worker (it calls itself).
 *
 *   ./param_server                    # 1 rank, no launcher needed
 *   weftrun -np 3 ./param_server      # a server and 2 workers
 *
 * Exits non-zero if the server's final loss is not close to the noise floor. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define N_SAMPLES 2048
#define N_FEATURES 16
#define BATCH 64
#define STEPS 300 /* per worker */
#define LEARNING_RATE 0.05
#define NOISE 0.01
#define LOSS_OK 1e-3

static double X[N_SAMPLES][N_FEATURES], Y[N_SAMPLES];

static uint64_t next_rand(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}
static double uniform(uint64_t *s) { return (double)(next_rand(s) >> 11) / 9007199254740992.0 * 2 - 1; }

static void make_data(void) {
  uint64_t s = 42;
  double w[N_FEATURES];
  for (int j = 0; j < N_FEATURES; j++) w[j] = uniform(&s);
  for (int i = 0; i < N_SAMPLES; i++) {
    Y[i] = NOISE * uniform(&s) * sqrt(3.0);
    for (int j = 0; j < N_FEATURES; j++) {
      X[i][j] = uniform(&s);
      Y[i] += w[j] * X[i][j];
    }
  }
}

static double loss(const double *w) {
  double l = 0;
  for (int i = 0; i < N_SAMPLES; i++) {
    double e = -Y[i];
    for (int j = 0; j < N_FEATURES; j++) e += w[j] * X[i][j];
    l += e * e;
  }
  return l / N_SAMPLES;
}

/* ---- the server's state and function (runs on its remote worker thread) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* apply runs on weft's thread, main reads at the end */
static double g_w[N_FEATURES];
static int g_steps;

static weft_status apply(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx, (void)n_in;
  const double *grad = in[0].data;
  int64_t shape[1] = {N_FEATURES};
  double *copy;
  weft_status st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_FLOAT64, 1, shape, (void **)&copy);
  if (st != WEFT_OK) return st;
  pthread_mutex_lock(&g_mu);
  for (int j = 0; j < N_FEATURES; j++) g_w[j] -= LEARNING_RATE * grad[j];
  g_steps++;
  memcpy(copy, g_w, sizeof g_w);
  pthread_mutex_unlock(&g_mu);
  return WEFT_OK;
}

static int check(weft_status st, const char *what) {
  if (st != WEFT_OK) fprintf(stderr, "param_server: %s: %s: %s\n", what, weft_status_string(st), weft_last_error());
  return st == WEFT_OK;
}

static int work(weft_world *w, int rank, int workers) {
  uint64_t ctx;
  if (!check(weft_remote_context_create(w, 0, 0, &ctx), "context")) return 0;
  double wk[N_FEATURES] = {0}, grad[N_FEATURES];
  int64_t shape[1] = {N_FEATURES};
  weft_tensor g = {WEFT_DTYPE_FLOAT64, 1, shape, grad, WEFT_DEVICE_CPU, 0, NULL};
  uint64_t s = 1000 + (uint64_t)rank;
  int shard = N_SAMPLES / workers, first = (rank == 0 ? 0 : rank - 1) * shard;
  for (int step = 0; step < STEPS; step++) {
    memset(grad, 0, sizeof grad);
    for (int b = 0; b < BATCH; b++) {
      int i = first + (int)(next_rand(&s) % (uint64_t)shard);
      double e = -Y[i];
      for (int j = 0; j < N_FEATURES; j++) e += wk[j] * X[i][j];
      for (int j = 0; j < N_FEATURES; j++) grad[j] += 2 * e * X[i][j] / BATCH;
    }
    weft_remote_id out;
    weft_remote_input in[1] = {{.tensor = &g}};
    weft_remote_call *c, *f, *d;
    if (!check(weft_remote_id_new(w, &out), "id") ||
        !check(weft_remote_execute(w, 0, ctx, "apply", 1, in, 1, &out, 0, NULL, &c), "push") ||
        !check(weft_remote_fetch(w, 0, ctx, out, NULL, &f), "pull")) /* chained on the push's output */
      return 0;
    weft_status st = weft_remote_wait(f, -1);
    weft_tensor t;
    if (st == WEFT_OK && weft_remote_call_output(f, &t) == WEFT_OK) memcpy(wk, t.data, sizeof wk);
    else fprintf(stderr, "param_server: pull: %s\n", weft_remote_call_error(f));
    int ok = st == WEFT_OK && weft_remote_wait(c, -1) == WEFT_OK;
    weft_remote_call_free(c);
    weft_remote_call_free(f);
    if (!ok || !check(weft_remote_delete(w, 0, ctx, 1, &out, NULL, &d), "delete")) return 0;
    ok = weft_remote_wait(d, -1) == WEFT_OK;
    weft_remote_call_free(d);
    if (!ok) return 0;
  }
  printf("rank %d: %d steps pushed, loss on its weights %.6f\n", rank, STEPS, loss(wk));
  return check(weft_remote_context_close(w, 0, ctx), "close");
}

int main(void) {
  weft_world *w;
  if (!check(weft_init(NULL, &w), "weft_init")) return 1;
  int rank = weft_rank(w), size = weft_size(w);
  make_data();
  int ok = 1;
  if (rank == 0) ok = check(weft_remote_register(w, "apply", 1, 1, apply, NULL), "register");
  weft_request *r;
  /* the workers start once the server serves */
  ok = ok && check(weft_barrier(weft_world_group(w), "registered", NULL, &r), "barrier") &&
       check(weft_wait(r, -1), "barrier");
  if (ok) weft_request_free(r);
  if (ok && (rank > 0 || size == 1)) ok = work(w, rank, size == 1 ? 1 : size - 1);
  ok = ok && check(weft_barrier(weft_world_group(w), "done", NULL, &r), "barrier") && check(weft_wait(r, -1), "barrier");
  if (ok) weft_request_free(r);
  int result = 0;
  if (rank == 0) {
    pthread_mutex_lock(&g_mu);
    double l = loss(g_w);
    pthread_mutex_unlock(&g_mu);
    printf("server: %d steps applied, final loss %.6f (noise floor %.6f)\n", g_steps, l, NOISE * NOISE);
    result = !ok || g_steps != STEPS * (size == 1 ? 1 : size - 1) || !(l < LOSS_OK);
  } else {
    result = !ok;
  }
  weft_finalize(w);
  return result;
}
