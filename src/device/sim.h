/* sim.h - the simulated accelerator's test-facing API (dev_sim.c).
 *
 * The sim fails the way a GPU fails:
 *  - its device memory is stored scrambled (every byte XORed with a nonzero
 *    key derived from its address), so code that reads or writes it as host
 *    memory, without the sim's copies, gets wrong values, deterministically;
 *  - each stream is a worker thread that runs its queued operations
 *    (copies, kernels, event records, waits for events) strictly in order,
 *    each after a random delay in [delay_min_us, delay_max_us] (default
 *    0 to 2000), so work that is not ordered after a stream's queued work
 *    loses the race;
 *  - its events are real: a record completes when the stream's worker
 *    reaches it; query never blocks.
 * It does not model the legacy default stream's implicit synchronisation:
 * the NULL stream is one more ordinary stream.
 *
 * Every wf_sim_* function takes a wf_device made by wf_dev_sim_create (or
 * wf_device_get(WF_DEVICE_SIM)); anything else is WEFT_ERR_MISUSE. */
#ifndef WF_DEVICE_SIM_H
#define WF_DEVICE_SIM_H
#include <stddef.h>

#include "device/device.h"

/* A kernel: runs on the stream's worker thread, in order with the stream's
 * other work. It touches device memory only through wf_sim_read/write. */
typedef void (*wf_sim_kernel)(void *arg);

/* The random delay before each queued operation, in microseconds, for the
 * operations queued from now on (min <= max, max <= 10 s). */
weft_status wf_sim_set_delay(wf_device *d, unsigned min_us, unsigned max_us);
/* Seeds the delays (streams made later draw from it). */
weft_status wf_sim_set_seed(wf_device *d, unsigned long long seed);
/* Number of simulated devices (1..16; default 2; set before any allocation). */
weft_status wf_sim_set_count(wf_device *d, int count);

/* Queues fn(arg) on stream (NULL: default). Must not block. */
weft_status wf_sim_launch(wf_device *d, wf_dev_stream *stream, wf_sim_kernel fn, void *arg);

/* Synchronous access to device memory through the sim's own path (the one
 * its copies use), now, ordered with nothing: for kernels and for checks.
 * [dptr, dptr + len) must lie in one live allocation. */
weft_status wf_sim_write(wf_device *d, void *dptr, const void *src, size_t len);
weft_status wf_sim_read(wf_device *d, void *dst, const void *dptr, size_t len);

typedef struct wf_sim_stats {
  long outstanding; /* queued operations not yet finished, all streams */
  long allocations; /* live device allocations */
  long pinned;      /* live pinned host buffers */
  long streams;     /* live streams made by stream_create */
  long events;      /* live events (destroyed but pending ones count until done) */
  long host_allocs; /* host_alloc calls that succeeded since the sim was made (a pool's bound) */
} wf_sim_stats;
weft_status wf_sim_stats_get(wf_device *d, wf_sim_stats *out);

#endif
