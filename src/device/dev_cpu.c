/* dev_cpu.c - the identity device: host memory everywhere, copies are
 * memcpy finished before the call returns, every event is complete. It lets
 * the staging path run unchanged on CPU tensors (and tests compare it). */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "util/err.h"

/* Streams and events carry no state: one non-NULL token each. */
static char g_stream_token, g_event_token;

static weft_status cpu_alloc(wf_device *d, size_t len, void **out) {
  (void)d;
  *out = NULL;
  if (posix_memalign(out, 64, len ? len : 1) != 0) {
    *out = NULL;
    return wf_err(WEFT_ERR_NO_MEMORY, "cpu device: cannot allocate %zu bytes", len);
  }
  return WEFT_OK;
}

static weft_status cpu_free(wf_device *d, void *p) {
  (void)d;
  free(p);
  return WEFT_OK;
}

static weft_status cpu_copy(wf_device *d, void *dst, const void *src, size_t len, wf_copy_dir dir,
                            wf_dev_stream *stream) {
  (void)d, (void)stream;
  if (dir != WF_COPY_H2D && dir != WF_COPY_D2H && dir != WF_COPY_D2D)
    return wf_err(WEFT_ERR_INVALID_ARGUMENT, "cpu device: bad copy direction %d", (int)dir);
  if (len && (!dst || !src)) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "cpu device: copy of %zu bytes with NULL", len);
  if (len) memmove(dst, src, len);
  return WEFT_OK;
}

static weft_status cpu_stream_create(wf_device *d, wf_dev_stream **out) {
  (void)d;
  *out = (wf_dev_stream *)&g_stream_token;
  return WEFT_OK;
}

static weft_status cpu_stream_destroy(wf_device *d, wf_dev_stream *s) {
  (void)d, (void)s;
  return WEFT_OK;
}

static weft_status cpu_event_create(wf_device *d, wf_dev_event **out) {
  (void)d;
  *out = (wf_dev_event *)&g_event_token;
  return WEFT_OK;
}

static weft_status cpu_event_destroy(wf_device *d, wf_dev_event *ev) {
  (void)d, (void)ev;
  return WEFT_OK;
}

static weft_status cpu_event_record(wf_device *d, wf_dev_event *ev, wf_dev_stream *s) {
  (void)d, (void)s;
  return ev ? WEFT_OK : wf_err(WEFT_ERR_MISUSE, "cpu device: NULL event");
}

static weft_status cpu_event_query(wf_device *d, wf_dev_event *ev) {
  (void)d;
  return ev ? WEFT_OK : wf_err(WEFT_ERR_MISUSE, "cpu device: NULL event");
}

static weft_status cpu_stream_wait_event(wf_device *d, wf_dev_stream *s, wf_dev_event *ev) {
  (void)d, (void)s;
  return ev ? WEFT_OK : wf_err(WEFT_ERR_MISUSE, "cpu device: NULL event");
}

static weft_status cpu_pointer(wf_device *d, const void *p, wf_dev_ptr *out) {
  (void)d, (void)p;
  out->type = WF_MEM_HOST;
  out->device = -1;
  return WEFT_OK;
}

static weft_status cpu_get_device(wf_device *d, int *index) {
  (void)d;
  *index = 0;
  return WEFT_OK;
}

static weft_status cpu_set_device(wf_device *d, int index) {
  (void)d;
  return index == 0 ? WEFT_OK : wf_err(WEFT_ERR_INVALID_ARGUMENT, "cpu device: no device %d (only 0)", index);
}

static weft_status cpu_info(wf_device *d, wf_device_info *out) {
  (void)d;
  memset(out, 0, sizeof *out);
  out->count = 1;
  strcpy(out->names[0], "host");
  return WEFT_OK;
}

static void cpu_destroy(wf_device *d) { free(d); }

static const wf_device_ops k_cpu_ops = {
    .name = "cpu",
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .mem_alloc = cpu_alloc,
    .mem_free = cpu_free,
    .copy = cpu_copy,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .stream_wait_event = cpu_stream_wait_event,
    .pointer = cpu_pointer,
    .get_device = cpu_get_device,
    .set_device = cpu_set_device,
    .info = cpu_info,
    .destroy = cpu_destroy,
};

weft_status wf_dev_cpu_create(wf_device **out) {
  wf_device *d = calloc(1, sizeof *d);
  if (!d) return wf_err(WEFT_ERR_NO_MEMORY, "cpu device: out of memory");
  d->ops = &k_cpu_ops;
  d->kind = WF_DEVICE_CPU;
  *out = d;
  return WEFT_OK;
}
