/* weft_bench_dev.h - weft-bench's device buffers (weft_bench_dev.c). */
#ifndef WEFT_BENCH_DEV_H
#define WEFT_BENCH_DEV_H
#include <stddef.h>

#include "weft.h"

typedef struct bench_dev bench_dev;

/* The device of kind "sim" or "cuda" for this rank (local rank mod the
 * device count), with its streams. -1 with the reason on stderr. */
int bdev_open(const char *kind, int local_rank, bench_dev **out);
void bdev_describe(const bench_dev *b, char *buf, size_t len); /* "cuda:0" */
void *bdev_alloc(bench_dev *b, size_t bytes);                  /* NULL on failure */
void bdev_free(bench_dev *b, void *p);
/* Marks t as a tensor on this device, produced on the rank's stream. */
void bdev_tensor(const bench_dev *b, weft_tensor *t);
/* Synchronous copies (0, or -1 on failure: weft_last_error says why). */
int bdev_put(bench_dev *b, void *dev, const void *host, size_t bytes);
int bdev_get(bench_dev *b, void *host, const void *dev, size_t bytes);
void bdev_close(bench_dev *b);

#endif
