/* dev_cuda.c - the CUDA runtime as a device backend, loaded at run time
 * with dlopen: weft needs no CUDA header or library to build, and a
 * machine without CUDA builds and runs everything else.
 *
 * The few runtime functions and types used are declared here, as the CUDA
 * 11, 12 and 13 runtime API documents them (cudaError_t is an int, streams and
 * events are pointers, cudaPointerAttributes is {type, device,
 * devicePointer, hostPointer}, room reserved after it for later fields).
 *
 * Loading, first success wins: a libcudart already in the process (torch
 * loads one; sharing it keeps one CUDA context and lets a caller's stream be
 * used here), then WEFT_CUDA_LIBRARY when set (an explicit choice beats the
 * search path), then the usual names. If none loads, the error names every
 * try and dlerror's reason; if one loads but cannot run (no device, driver
 * too old), the runtime's own error text says so. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "util/err.h"
#include "util/params.h"

typedef int cu_err; /* cudaError_t */
#define CU_SUCCESS 0
#define CU_ERR_INVALID_VALUE 1
#define CU_ERR_MEMORY_ALLOCATION 2
#define CU_ERR_INSUFFICIENT_DRIVER 35
#define CU_ERR_NO_DEVICE 100
#define CU_ERR_INVALID_DEVICE 101
#define CU_ERR_NOT_READY 600
#define CU_MEMCPY_H2D 1 /* cudaMemcpyKind */
#define CU_MEMCPY_D2H 2
#define CU_MEMCPY_D2D 3
#define CU_STREAM_NON_BLOCKING 0x01
#define CU_EVENT_DISABLE_TIMING 0x02
enum { CU_MEM_UNREGISTERED = 0, CU_MEM_HOST = 1, CU_MEM_DEVICE = 2, CU_MEM_MANAGED = 3 };

typedef struct cu_ptr_attrs { /* cudaPointerAttributes, CUDA 11 to 13 */
  int type;
  int device;
  void *device_pointer;
  void *host_pointer;
  long reserved[16]; /* 12.x and 13 have reserved[8]; later runtimes may write more */
} cu_ptr_attrs;

static const char *const k_libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
#define N_LIBS (sizeof k_libs / sizeof k_libs[0])

typedef struct wf_cuda {
  wf_device base; /* first */
  void *lib;
  char lib_name[256];
  int runtime, driver, count;
  cu_err (*MallocHost)(void **, size_t);
  cu_err (*FreeHost)(void *);
  cu_err (*Malloc)(void **, size_t);
  cu_err (*Free)(void *);
  cu_err (*MemcpyAsync)(void *, const void *, size_t, int, void *);
  cu_err (*StreamCreateWithFlags)(void **, unsigned);
  cu_err (*StreamDestroy)(void *);
  cu_err (*EventCreateWithFlags)(void **, unsigned);
  cu_err (*EventDestroy)(void *);
  cu_err (*EventRecord)(void *, void *);
  cu_err (*EventQuery)(void *);
  cu_err (*StreamWaitEvent)(void *, void *, unsigned);
  cu_err (*PointerGetAttributes)(cu_ptr_attrs *, const void *);
  cu_err (*GetDevice)(int *);
  cu_err (*SetDevice)(int);
  cu_err (*GetDeviceCount)(int *);
  const char *(*GetErrorString)(cu_err);
  cu_err (*RuntimeGetVersion)(int *);
  cu_err (*DriverGetVersion)(int *);
  cu_err (*GetLastError)(void);
  cu_err (*GetDeviceProperties)(void *, int); /* optional: names for weft-info */
} wf_cuda;

/* The status a CUDA error maps to. */
static weft_status cu_status(cu_err e) {
  switch (e) {
    case CU_ERR_MEMORY_ALLOCATION: return WEFT_ERR_NO_MEMORY;
    case CU_ERR_INVALID_VALUE:
    case CU_ERR_INVALID_DEVICE:
    case 17:  /* cudaErrorInvalidDevicePointer */
    case 400: /* cudaErrorInvalidResourceHandle */
      return WEFT_ERR_INVALID_ARGUMENT;
    case CU_ERR_INSUFFICIENT_DRIVER:
    case CU_ERR_NO_DEVICE:
      return WEFT_ERR_NOT_SUPPORTED;
    default: return WEFT_ERR_SYSTEM;
  }
}

/* Fails a call with CUDA's text; clears the runtime's last error, which a
 * non-sticky failure leaves behind for the next unrelated call to see. */
static weft_status cu_fail(wf_cuda *c, cu_err e, const char *call) {
  const char *text = c->GetErrorString ? c->GetErrorString(e) : NULL;
  if (c->GetLastError) (void)c->GetLastError();
  return wf_err(cu_status(e), "cuda device: %s failed: %s (CUDA error %d)", call, text ? text : "?", e);
}

#define CU_CALL(c, call, text)                                                                      \
  do {                                                                                              \
    cu_err cu_call_e_ = (call);                                                                     \
    if (cu_call_e_ != CU_SUCCESS) return cu_fail((c), cu_call_e_, (text));                          \
  } while (0)

static weft_status cu_host_alloc(wf_device *d, size_t len, void **out) {
  wf_cuda *c = (wf_cuda *)d;
  *out = NULL;
  CU_CALL(c, c->MallocHost(out, len ? len : 1), "cudaMallocHost");
  return WEFT_OK;
}
static weft_status cu_host_free(wf_device *d, void *p) {
  wf_cuda *c = (wf_cuda *)d;
  if (p) CU_CALL(c, c->FreeHost(p), "cudaFreeHost");
  return WEFT_OK;
}
static weft_status cu_mem_alloc(wf_device *d, size_t len, void **out) {
  wf_cuda *c = (wf_cuda *)d;
  *out = NULL;
  CU_CALL(c, c->Malloc(out, len ? len : 1), "cudaMalloc");
  return WEFT_OK;
}
static weft_status cu_mem_free(wf_device *d, void *p) {
  wf_cuda *c = (wf_cuda *)d;
  if (p) CU_CALL(c, c->Free(p), "cudaFree");
  return WEFT_OK;
}

static weft_status cu_copy(wf_device *d, void *dst, const void *src, size_t len, wf_copy_dir dir, wf_dev_stream *s) {
  wf_cuda *c = (wf_cuda *)d;
  int kind = dir == WF_COPY_H2D ? CU_MEMCPY_H2D : dir == WF_COPY_D2H ? CU_MEMCPY_D2H : dir == WF_COPY_D2D ? CU_MEMCPY_D2D : -1;
  if (kind < 0) return wf_err(WEFT_ERR_INVALID_ARGUMENT, "cuda device: bad copy direction %d", (int)dir);
  if (!len) return WEFT_OK;
  CU_CALL(c, c->MemcpyAsync(dst, src, len, kind, s), "cudaMemcpyAsync");
  return WEFT_OK;
}

static weft_status cu_stream_create(wf_device *d, wf_dev_stream **out) {
  wf_cuda *c = (wf_cuda *)d;
  void *s = NULL;
  *out = NULL;
  CU_CALL(c, c->StreamCreateWithFlags(&s, CU_STREAM_NON_BLOCKING), "cudaStreamCreateWithFlags");
  *out = s;
  return WEFT_OK;
}
static weft_status cu_stream_destroy(wf_device *d, wf_dev_stream *s) {
  wf_cuda *c = (wf_cuda *)d;
  if (s) CU_CALL(c, c->StreamDestroy(s), "cudaStreamDestroy");
  return WEFT_OK;
}
static weft_status cu_event_create(wf_device *d, wf_dev_event **out) {
  wf_cuda *c = (wf_cuda *)d;
  void *e = NULL;
  *out = NULL;
  CU_CALL(c, c->EventCreateWithFlags(&e, CU_EVENT_DISABLE_TIMING), "cudaEventCreateWithFlags");
  *out = e;
  return WEFT_OK;
}
static weft_status cu_event_destroy(wf_device *d, wf_dev_event *e) {
  wf_cuda *c = (wf_cuda *)d;
  if (!e) return wf_err(WEFT_ERR_MISUSE, "cuda device: NULL event");
  CU_CALL(c, c->EventDestroy(e), "cudaEventDestroy");
  return WEFT_OK;
}
static weft_status cu_event_record(wf_device *d, wf_dev_event *e, wf_dev_stream *s) {
  wf_cuda *c = (wf_cuda *)d;
  if (!e) return wf_err(WEFT_ERR_MISUSE, "cuda device: NULL event");
  CU_CALL(c, c->EventRecord(e, s), "cudaEventRecord");
  return WEFT_OK;
}
static weft_status cu_event_query(wf_device *d, wf_dev_event *e) {
  wf_cuda *c = (wf_cuda *)d;
  if (!e) return wf_err(WEFT_ERR_MISUSE, "cuda device: NULL event");
  cu_err r = c->EventQuery(e);
  if (r == CU_SUCCESS) return WEFT_OK;
  if (r == CU_ERR_NOT_READY) return WEFT_IN_PROGRESS;
  return cu_fail(c, r, "cudaEventQuery");
}
static weft_status cu_stream_wait_event(wf_device *d, wf_dev_stream *s, wf_dev_event *e) {
  wf_cuda *c = (wf_cuda *)d;
  if (!e) return wf_err(WEFT_ERR_MISUSE, "cuda device: NULL event");
  CU_CALL(c, c->StreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
  return WEFT_OK;
}

static weft_status cu_pointer(wf_device *d, const void *p, wf_dev_ptr *out) {
  wf_cuda *c = (wf_cuda *)d;
  cu_ptr_attrs a;
  memset(&a, 0, sizeof a);
  out->type = WF_MEM_HOST;
  out->device = -1;
  if (!p) return WEFT_OK;
  cu_err e = c->PointerGetAttributes(&a, p);
  if (e == CU_ERR_INVALID_VALUE) { /* runtimes before 11: memory CUDA does not know */
    (void)c->GetLastError();
    return WEFT_OK;
  }
  if (e != CU_SUCCESS) return cu_fail(c, e, "cudaPointerGetAttributes");
  switch (a.type) {
    case CU_MEM_HOST: out->type = WF_MEM_PINNED; break;
    case CU_MEM_DEVICE: out->type = WF_MEM_DEVICE; break;
    case CU_MEM_MANAGED: out->type = WF_MEM_MANAGED; break;
    default: return WEFT_OK; /* unregistered: plain host memory */
  }
  out->device = a.device;
  return WEFT_OK;
}

static weft_status cu_get_device(wf_device *d, int *index) {
  wf_cuda *c = (wf_cuda *)d;
  CU_CALL(c, c->GetDevice(index), "cudaGetDevice");
  return WEFT_OK;
}
static weft_status cu_set_device(wf_device *d, int index) {
  wf_cuda *c = (wf_cuda *)d;
  CU_CALL(c, c->SetDevice(index), "cudaSetDevice");
  return WEFT_OK;
}

static weft_status cu_info(wf_device *d, wf_device_info *out) {
  wf_cuda *c = (wf_cuda *)d;
  memset(out, 0, sizeof *out);
  out->runtime_version = c->runtime;
  out->driver_version = c->driver;
  snprintf(out->library, sizeof out->library, "%s", c->lib_name);
  CU_CALL(c, c->GetDeviceCount(&out->count), "cudaGetDeviceCount");
  /* cudaDeviceProp starts with char name[256] in every version; the rest
   * (about 1 KiB in CUDA 12) is never read, so its layout does not matter
   * as long as the buffer is larger */
  char *prop = c->GetDeviceProperties ? calloc(1, 16384) : NULL;
  for (int i = 0; prop && i < out->count && i < WF_DEVICE_INFO_NAMES; i++) {
    if (c->GetDeviceProperties(prop, i) == CU_SUCCESS)
      snprintf(out->names[i], sizeof out->names[i], "%.*s", (int)sizeof out->names[i] - 1, prop);
    else
      (void)c->GetLastError();
  }
  free(prop);
  return WEFT_OK;
}

static void cu_destroy(wf_device *d) { free(d); } /* the library stays loaded: CUDA may still run threads */

static const wf_device_ops k_cuda_ops = {
    .name = "cuda",
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .copy = cu_copy,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .stream_wait_event = cu_stream_wait_event,
    .pointer = cu_pointer,
    .get_device = cu_get_device,
    .set_device = cu_set_device,
    .info = cu_info,
    .destroy = cu_destroy,
};

int wf_dev_cuda_loaded(void) {
  for (size_t i = 0; i < N_LIBS; i++) {
    void *h = dlopen(k_libs[i], RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      dlclose(h); /* only the reference RTLD_NOLOAD took */
      return 1;
    }
  }
  return 0;
}

/* Opens the runtime into c->lib / c->lib_name, or fails naming every try:
 * names[] (when given: only those, the tests' way to choose), else one
 * already loaded, WEFT_CUDA_LIBRARY, the usual names. */
static weft_status cu_open(wf_cuda *c, const char *const *names, size_t nnames) {
  const char *tries[N_LIBS + 1];
  size_t ntries = 0;
  const char *path = "";
  if (names) {
    for (size_t i = 0; i < nnames && ntries < N_LIBS + 1; i++) tries[ntries++] = names[i];
  } else {
    for (size_t i = 0; i < N_LIBS; i++)
      if ((c->lib = dlopen(k_libs[i], RTLD_NOW | RTLD_NOLOAD))) {
        snprintf(c->lib_name, sizeof c->lib_name, "%s (already loaded)", k_libs[i]);
        return WEFT_OK;
      }
    path = wf_param_str("WEFT_CUDA_LIBRARY");
    if (*path) tries[ntries++] = path;
    for (size_t i = 0; i < N_LIBS; i++) tries[ntries++] = k_libs[i];
  }
  char list[300], why[700];
  size_t nl = 0, nw = 0;
  list[0] = why[0] = '\0';
  for (size_t i = 0; i < ntries; i++) {
    dlerror();
    if ((c->lib = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL))) {
      snprintf(c->lib_name, sizeof c->lib_name, "%s", tries[i]);
      return WEFT_OK;
    }
    const char *e = dlerror();
    int k = nl < sizeof list ? snprintf(list + nl, sizeof list - nl, "%s%s", i ? ", " : "", tries[i]) : 0;
    nl += k > 0 ? (size_t)k : 0;
    k = nw < sizeof why ? snprintf(why + nw, sizeof why - nw, "%s%s", i ? "; " : "", e ? e : tries[i]) : 0;
    nw += k > 0 ? (size_t)k : 0;
  }
  return wf_err(WEFT_ERR_NOT_SUPPORTED, "CUDA runtime not available: none of %s could be loaded (%s)%s", list, why,
                names || *path ? "" : "; WEFT_CUDA_LIBRARY may name the library's path");
}

/* dlsym's result as a function pointer (POSIX guarantees the conversion). */
#define CU_SYM(c, field, name, missing)                                                             \
  do {                                                                                              \
    void *cu_sym_p_ = dlsym((c)->lib, (name));                                                      \
    memcpy(&(c)->field, &cu_sym_p_, sizeof cu_sym_p_);                                              \
    if (!cu_sym_p_ && !(missing)) (missing) = (name);                                               \
  } while (0)

static weft_status cu_resolve(wf_cuda *c) {
  const char *missing = NULL;
  CU_SYM(c, MallocHost, "cudaMallocHost", missing);
  CU_SYM(c, FreeHost, "cudaFreeHost", missing);
  CU_SYM(c, Malloc, "cudaMalloc", missing);
  CU_SYM(c, Free, "cudaFree", missing);
  CU_SYM(c, MemcpyAsync, "cudaMemcpyAsync", missing);
  CU_SYM(c, StreamCreateWithFlags, "cudaStreamCreateWithFlags", missing);
  CU_SYM(c, StreamDestroy, "cudaStreamDestroy", missing);
  CU_SYM(c, EventCreateWithFlags, "cudaEventCreateWithFlags", missing);
  CU_SYM(c, EventDestroy, "cudaEventDestroy", missing);
  CU_SYM(c, EventRecord, "cudaEventRecord", missing);
  CU_SYM(c, EventQuery, "cudaEventQuery", missing);
  CU_SYM(c, StreamWaitEvent, "cudaStreamWaitEvent", missing);
  CU_SYM(c, PointerGetAttributes, "cudaPointerGetAttributes", missing);
  CU_SYM(c, GetDevice, "cudaGetDevice", missing);
  CU_SYM(c, SetDevice, "cudaSetDevice", missing);
  CU_SYM(c, GetDeviceCount, "cudaGetDeviceCount", missing);
  CU_SYM(c, GetErrorString, "cudaGetErrorString", missing);
  CU_SYM(c, RuntimeGetVersion, "cudaRuntimeGetVersion", missing);
  CU_SYM(c, DriverGetVersion, "cudaDriverGetVersion", missing);
  CU_SYM(c, GetLastError, "cudaGetLastError", missing);
  const char *optional = NULL; /* CUDA 12 names it _v2; the old name stays for old binaries */
  CU_SYM(c, GetDeviceProperties, "cudaGetDeviceProperties_v2", optional);
  if (!c->GetDeviceProperties) CU_SYM(c, GetDeviceProperties, "cudaGetDeviceProperties", optional);
  if (missing)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "CUDA runtime not usable: %s was loaded but has no %s (not a libcudart?)",
                  c->lib_name, missing);
  return WEFT_OK;
}

weft_status wf_dev_cuda_create_from(const char *const *names, size_t nnames, wf_device **out) {
  *out = NULL;
  wf_cuda *c = calloc(1, sizeof *c);
  if (!c) return wf_err(WEFT_ERR_NO_MEMORY, "cuda device: out of memory");
  c->base.ops = &k_cuda_ops;
  c->base.kind = WF_DEVICE_CUDA;
  weft_status st = cu_open(c, names, nnames);
  if (st == WEFT_OK) st = cu_resolve(c);
  if (st == WEFT_OK) {
    (void)c->RuntimeGetVersion(&c->runtime);
    (void)c->DriverGetVersion(&c->driver); /* 0: no driver */
    cu_err e = c->GetDeviceCount(&c->count);
    if (e != CU_SUCCESS) {
      const char *text = c->GetErrorString(e);
      (void)c->GetLastError();
      st = wf_err(WEFT_ERR_NOT_SUPPORTED,
                  "CUDA runtime %d.%d (%s) loaded, but cudaGetDeviceCount failed: %s (CUDA error %d; driver "
                  "version %d.%d%s)",
                  c->runtime / 1000, c->runtime % 1000 / 10, c->lib_name, text ? text : "?", e, c->driver / 1000,
                  c->driver % 1000 / 10, c->driver ? "" : ": no driver");
    } else if (c->count == 0) {
      st = wf_err(WEFT_ERR_NOT_SUPPORTED, "CUDA runtime %d.%d (%s) loaded, but it sees no device",
                  c->runtime / 1000, c->runtime % 1000 / 10, c->lib_name);
    }
  }
  if (st != WEFT_OK) { /* a loaded library stays: unloading CUDA is not safe */
    free(c);
    return st;
  }
  *out = &c->base;
  return WEFT_OK;
}

weft_status wf_dev_cuda_create(wf_device **out) { return wf_dev_cuda_create_from(NULL, 0, out); }
