/* sgd_demo.c - data-parallel SGD with weft, in C: linear regression on a
 * generated data set (4096 samples x 32 features, fixed seed, known true
 * weights plus small noise), trained by mini-batch SGD on the mean squared
 * error.
 *
 * Every step each rank computes the gradient on its equal share of the
 * global mini-batch and weft averages the gradients (allreduce AVERAGE).
 * Because the shares are equal, the average of the share gradients is the
 * gradient of the whole mini-batch, so the training trajectory is the same
 * with 1, 2, 4, ... ranks (up to rounding in the last bits): compare the
 * printed losses and the weight checksum between runs.
 *
 *   ./sgd_demo                        # 1 rank, no launcher needed
 *   weftrun -np 4 ./sgd_demo          # 4 ranks
 *
 * Exits non-zero if the final loss is not close to the noise floor. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define N_SAMPLES 4096
#define N_FEATURES 32
#define BATCH 256 /* global mini-batch; each of the n ranks takes BATCH / n rows */
#define EPOCHS 20
#define LEARNING_RATE 0.1
#define NOISE 0.01
/* The loss floor is the noise variance (1e-4); the threshold leaves room for
 * SGD's own noise but fails any run that did not converge. */
#define LOSS_THRESHOLD 2e-4

static uint64_t g_rng = 0x5eed5eedull;

static double uniform(void) { /* splitmix64 -> [0, 1) */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1p-53;
}

static double gaussian(void) { /* Box-Muller */
  double u = uniform(), v = uniform();
  return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

/* Every rank generates the whole data set in the same order, so the data
 * does not depend on the number of ranks. */
static void make_data(double *x, double *y, double *w_true) {
  for (int j = 0; j < N_FEATURES; j++) w_true[j] = 2.0 * uniform() - 1.0;
  for (int i = 0; i < N_SAMPLES; i++) {
    double dot = 0;
    for (int j = 0; j < N_FEATURES; j++) {
      x[i * N_FEATURES + j] = 2.0 * uniform() - 1.0;
      dot += x[i * N_FEATURES + j] * w_true[j];
    }
    y[i] = dot + NOISE * gaussian();
  }
}

static double residual(const double *x, const double *y, const double *w, int i) {
  double p = 0;
  for (int j = 0; j < N_FEATURES; j++) p += x[i * N_FEATURES + j] * w[j];
  return p - y[i];
}

/* Averages buf (n doubles) over the ranks, in place; blocks. */
static int average(weft_world *world, const char *name, double *buf, int64_t n) {
  weft_tensor t = {WEFT_DTYPE_FLOAT64, 1, &n, buf, WEFT_DEVICE_CPU, 0, NULL};
  weft_request *req = NULL;
  weft_status st = weft_allreduce(weft_world_group(world), name, &t, &t, WEFT_OP_AVERAGE, NULL, &req);
  if (st < 0) {
    fprintf(stderr, "sgd_demo: rank %d: weft_allreduce(%s): %s: %s\n", weft_rank(world), name,
            weft_status_string(st), weft_last_error());
    return -1;
  }
  st = weft_wait(req, -1);
  if (st != WEFT_OK)
    fprintf(stderr, "sgd_demo: rank %d: %s failed: %s: %s\n", weft_rank(world), name, weft_status_string(st),
            weft_request_error(req));
  weft_request_free(req);
  return st == WEFT_OK ? 0 : -1;
}

/* Rows of batch b that rank r owns: its equal share of the global batch.
 * Over an epoch these shares form the rank's shard of the data. */
static int share_begin(int b, int rank, int size) { return b * BATCH + rank * (BATCH / size); }

/* Mean squared error over the whole data set: each rank's mean over its
 * shard, averaged over the (equal-sized) shards. */
static int global_loss(weft_world *world, const double *x, const double *y, const double *w, double *loss) {
  int rank = weft_rank(world), size = weft_size(world), share = BATCH / size;
  double sum = 0;
  for (int b = 0; b < N_SAMPLES / BATCH; b++)
    for (int i = share_begin(b, rank, size); i < share_begin(b, rank, size) + share; i++) {
      double r = residual(x, y, w, i);
      sum += r * r;
    }
  *loss = sum / (N_SAMPLES / size);
  return average(world, "sgd.loss", loss, 1);
}

int main(void) {
  weft_world *world = NULL;
  double *x = malloc(sizeof(double) * N_SAMPLES * N_FEATURES), *y = malloc(sizeof(double) * N_SAMPLES);
  double w_true[N_FEATURES], w[N_FEATURES] = {0}, grad[N_FEATURES], loss = 0;
  int rc = 1;
  if (!x || !y) {
    fprintf(stderr, "sgd_demo: out of memory\n");
    goto out;
  }
  /* No launcher environment: weft runs this as a 1-rank world. */
  weft_status st = weft_init(NULL, &world);
  if (st != WEFT_OK) {
    fprintf(stderr, "sgd_demo: weft_init: %s: %s\n", weft_status_string(st), weft_last_error());
    goto out;
  }
  int rank = weft_rank(world), size = weft_size(world);
  if (BATCH % size != 0) { /* every rank decides alike: nobody waits */
    if (rank == 0) fprintf(stderr, "sgd_demo: the number of ranks (%d) must divide %d\n", size, BATCH);
    goto out;
  }
  make_data(x, y, w_true);
  int share = BATCH / size;
  if (global_loss(world, x, y, w, &loss)) goto out;
  if (rank == 0) printf("sgd_demo: %d ranks, %d samples x %d features, batch %d (%d per rank)\nepoch  0  loss %.10e\n",
                        size, N_SAMPLES, N_FEATURES, BATCH, share, loss);
  for (int epoch = 1; epoch <= EPOCHS; epoch++) {
    for (int b = 0; b < N_SAMPLES / BATCH; b++) {
      /* gradient of this rank's mean squared error: (2/m) X^T (X w - y) */
      for (int j = 0; j < N_FEATURES; j++) grad[j] = 0;
      for (int i = share_begin(b, rank, size); i < share_begin(b, rank, size) + share; i++) {
        double r = residual(x, y, w, i);
        for (int j = 0; j < N_FEATURES; j++) grad[j] += x[i * N_FEATURES + j] * r;
      }
      for (int j = 0; j < N_FEATURES; j++) grad[j] *= 2.0 / share;
      if (average(world, "sgd.grad", grad, N_FEATURES)) goto out;
      for (int j = 0; j < N_FEATURES; j++) w[j] -= LEARNING_RATE * grad[j];
    }
    if (global_loss(world, x, y, w, &loss)) goto out;
    if (rank == 0) printf("epoch %2d  loss %.10e\n", epoch, loss);
  }
  double checksum = 0, err = 0;
  for (int j = 0; j < N_FEATURES; j++) {
    checksum += w[j] * (j + 1);
    err = fmax(err, fabs(w[j] - w_true[j]));
  }
  if (rank == 0) {
    printf("final loss %.10e  weights checksum %.10e  max |w - w_true| %.3e\n", loss, checksum, err);
    printf("%s: final loss %s %g\n", loss < LOSS_THRESHOLD ? "PASS" : "FAIL", loss < LOSS_THRESHOLD ? "<" : ">=",
           LOSS_THRESHOLD);
  }
  rc = loss < LOSS_THRESHOLD ? 0 : 1;
out:
  if (world) {
    st = weft_finalize(world);
    if (st != WEFT_OK) {
      fprintf(stderr, "sgd_demo: weft_finalize: %s: %s\n", weft_status_string(st), weft_last_error());
      rc = 1;
    }
  }
  free(x);
  free(y);
  return rc;
}
