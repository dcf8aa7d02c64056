/* weft_bench_dev.c - weft-bench's device tensors (--device sim|cuda): the
 * benchmark's buffers in device memory of weft's sim or CUDA backend
 * (src/device; CUDA loaded at run time), filled and read back through the
 * backend's own copies outside the timed part, each rank on device
 * (local rank mod the device count) with its own producer stream. Requests
 * complete when the result is on the device (no consumer stream), so the
 * time per iteration includes the copies down and up. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "weft_bench_dev.h"

struct bench_dev {
  wf_device *d;
  int kind, index;
  wf_dev_stream *stream; /* the producer's: given with every tensor */
  wf_dev_stream *io;     /* fills and read-backs */
  wf_dev_event *ev;
};

static int sync_stream(bench_dev *b, wf_dev_stream *s) {
  if (b->d->ops->event_record(b->d, b->ev, s) != WEFT_OK) return -1;
  struct timespec pause = {0, 20000};
  for (long spins = 0; spins < 3000000; spins++) { /* a minute at most */
    weft_status st = b->d->ops->event_query(b->d, b->ev);
    if (st == WEFT_OK) return 0;
    if (st != WEFT_IN_PROGRESS) return -1;
    nanosleep(&pause, NULL);
  }
  return -1;
}

int bdev_open(const char *kind, int local_rank, bench_dev **out) {
  static bench_dev dev;
  bench_dev *b = &dev;
  *out = NULL;
  wf_device_kind k;
  if (wf_device_kind_parse(kind, &k) != WEFT_OK || k == WF_DEVICE_CPU) {
    fprintf(stderr, "weft-bench: --device %s: sim or cuda (or cpu: host memory)\n", kind);
    return -1;
  }
  if (wf_device_get(k, &b->d) != WEFT_OK) {
    fprintf(stderr, "weft-bench: --device %s: %s\n", kind, weft_last_error());
    return -1;
  }
  wf_device_info info = {0};
  if (b->d->ops->info(b->d, &info) != WEFT_OK || info.count < 1) {
    fprintf(stderr, "weft-bench: --device %s: no device (%s)\n", kind, weft_last_error());
    return -1;
  }
  b->kind = k == WF_DEVICE_SIM ? WEFT_DEVICE_KIND_SIM : WEFT_DEVICE_KIND_CUDA;
  b->index = local_rank % info.count;
  if (b->d->ops->set_device(b->d, b->index) != WEFT_OK || b->d->ops->stream_create(b->d, &b->stream) != WEFT_OK ||
      b->d->ops->stream_create(b->d, &b->io) != WEFT_OK || b->d->ops->event_create(b->d, &b->ev) != WEFT_OK) {
    fprintf(stderr, "weft-bench: --device %s: %s\n", kind, weft_last_error());
    return -1;
  }
  *out = b;
  return 0;
}

void bdev_describe(const bench_dev *b, char *buf, size_t len) {
  snprintf(buf, len, "%s:%d", b->kind == WEFT_DEVICE_KIND_SIM ? "sim" : "cuda", b->index);
}

void *bdev_alloc(bench_dev *b, size_t bytes) {
  void *p = NULL;
  if (b->d->ops->mem_alloc(b->d, bytes ? bytes : 1, &p) != WEFT_OK) return NULL;
  return p;
}

void bdev_free(bench_dev *b, void *p) {
  if (p) b->d->ops->mem_free(b->d, p);
}

void bdev_tensor(const bench_dev *b, weft_tensor *t) {
  t->device = b->index;
  t->device_kind = b->kind;
  t->stream = b->stream;
}

int bdev_put(bench_dev *b, void *dev, const void *host, size_t bytes) {
  if (bytes && b->d->ops->copy(b->d, dev, host, bytes, WF_COPY_H2D, b->io) != WEFT_OK) return -1;
  /* the producer stream (what weft waits for) is ordered after the fill */
  return sync_stream(b, b->io);
}

int bdev_get(bench_dev *b, void *host, const void *dev, size_t bytes) {
  if (bytes && b->d->ops->copy(b->d, host, dev, bytes, WF_COPY_D2H, b->io) != WEFT_OK) return -1;
  return sync_stream(b, b->io);
}

void bdev_close(bench_dev *b) {
  if (!b) return;
  sync_stream(b, b->stream);
  b->d->ops->event_destroy(b->d, b->ev);
  b->d->ops->stream_destroy(b->d, b->stream);
  b->d->ops->stream_destroy(b->d, b->io);
}
