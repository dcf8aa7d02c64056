/* dev_sim_api.c - the simulated accelerator's test-facing API (device/sim.h):
 * its settings, kernels, synchronous access to its memory, its counters. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device/sim.h"
#include "device/sim_impl.h"
#include "util/err.h"

static weft_status not_sim(void) { return wf_err(WEFT_ERR_MISUSE, "not a sim device"); }

weft_status wf_sim_set_delay(wf_device *d, unsigned min_us, unsigned max_us) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  if (min_us > max_us || max_us > SIM_MAX_DELAY_US)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: delay [%u, %u] us (min <= max <= %u)", min_us, max_us,
                  SIM_MAX_DELAY_US);
  pthread_mutex_lock(&s->mu);
  s->delay_min = min_us;
  s->delay_max = max_us;
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}

weft_status wf_sim_set_seed(wf_device *d, unsigned long long seed) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  pthread_mutex_lock(&s->mu);
  s->seed = seed;
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}

weft_status wf_sim_set_count(wf_device *d, int count) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  if (count < 1 || count > 16) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: count %d (1..16)", count);
  pthread_mutex_lock(&s->mu);
  s->count = count;
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}

weft_status wf_sim_launch(wf_device *d, wf_dev_stream *h, wf_sim_kernel fn, void *arg) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  if (!fn) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "sim device: NULL kernel");
  sim_op *op = calloc(1, sizeof *op);
  if (!op) return wf_err(WEFT_ERR_NO_MEMORY, "sim device: out of memory");
  op->kind = OP_KERNEL;
  op->fn = fn;
  op->arg = arg;
  sim_stream *st = NULL;
  pthread_mutex_lock(&s->mu);
  weft_status rc = wf_sim_stream_of(s, h, &st);
  if (rc == WEFT_OK) wf_sim_enqueue(s, st, op);
  pthread_mutex_unlock(&s->mu);
  if (rc != WEFT_OK) free(op);
  return rc;
}

/* wf_sim_read/write: hold the allocation while copying outside the lock. */
static weft_status sync_access(wf_sim *s, void *dst, const void *src, size_t len, wf_copy_dir dir) {
  if (!len) return WEFT_OK;
  sim_alloc *held = NULL;
  pthread_mutex_lock(&s->mu);
  const void *dev = dir == WF_COPY_H2D ? dst : src;
  weft_status rc = wf_sim_check_side(s, dev, len, 1, dir == WF_COPY_H2D ? "destination" : "source", dir, &held);
  if (rc == WEFT_OK) held->refs++;
  pthread_mutex_unlock(&s->mu);
  if (rc != WEFT_OK) return rc;
  wf_sim_copy_bytes(s, dst, src, len, dir);
  pthread_mutex_lock(&s->mu);
  wf_sim_alloc_unref(s, held);
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}

weft_status wf_sim_write(wf_device *d, void *dptr, const void *src, size_t len) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  return sync_access(s, dptr, src, len, WF_COPY_H2D);
}

weft_status wf_sim_read(wf_device *d, void *dst, const void *dptr, size_t len) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  return sync_access(s, dst, dptr, len, WF_COPY_D2H);
}

weft_status wf_sim_stats_get(wf_device *d, wf_sim_stats *out) {
  wf_sim *s = wf_sim_of(d);
  if (!s) return not_sim();
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->mu);
  out->outstanding = s->outstanding;
  out->host_allocs = s->host_allocs;
  for (size_t i = 0; i < s->nallocs; i++) {
    if (s->allocs[i]->freed) continue;
    if (s->allocs[i]->pinned) out->pinned++;
    else out->allocations++;
  }
  for (size_t i = 0; i < s->nstreams; i++) out->streams += !s->streams[i]->is_default;
  out->events = (long)s->nevents;
  pthread_mutex_unlock(&s->mu);
  return WEFT_OK;
}
