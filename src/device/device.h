/* device.h - the accelerator interface the engine stages device tensors
 * through (a table of functions, like transport.h; Horovod's
 * PushHorovodOperationCudaOnCPU is the use: record an event on the
 * producer's stream, copy the tensor down into pinned host memory on a
 * staging stream made to wait on it, run the host collective, copy the
 * result up, and complete, or hand the consumer an event, when the copy up
 * is done).
 *
 * Backends (one wf_device each, made once per process by wf_device_get):
 *  - cpu:  the identity. Host memory everywhere, copies are memcpy done
 *          before the call returns, every event is complete.
 *  - sim:  a simulated accelerator for machines without a GPU (dev_sim.c,
 *          its test API in device/sim.h). Its memory is stored scrambled,
 *          so code that touches it without the sim's copies reads and
 *          writes wrong values; its streams are worker threads running
 *          queued work in order after a random delay; its events are real.
 *  - cuda: the CUDA runtime, dlopen'ed at run time (dev_cuda.c); no CUDA
 *          header or library is needed to build weft. A libcudart the
 *          process already loaded wins, then WEFT_CUDA_LIBRARY, then the
 *          usual names (libcudart.so.13, .so.12, .so.11.0, .so).
 *
 * Handles: a stream or event is an opaque pointer owned by the backend
 * (CUDA: the cudaStream_t / cudaEvent_t itself, so a user's CUDA stream is
 * passed as it is). A NULL stream is the backend's default (CUDA's legacy
 * default stream). Streams made by stream_create never synchronise
 * implicitly with the default stream (cudaStreamNonBlocking).
 *
 * Contract of every op: returns a weft_status; a failure sets the thread's
 * message (util/err.h) with the backend's own error text. No op blocks on
 * queued device work except host_free/mem_free of memory that work still
 * uses (the backend's rule: CUDA frees synchronise the device) and
 * stream_destroy (sim: joins its worker, bounded). The engine learns of
 * completion only by polling event_query: nothing here waits for a whole
 * device.
 *
 * Threading: every op may be called from any thread, concurrently; the
 * current device (get/set_device) is per thread, as in CUDA, and memory,
 * streams and events belong to the device current when they are made (the
 * engine's thread sets a tensor's device before staging it). Events may be
 * recorded on one thread and queried or waited for on another.
 *
 * Ownership: a buffer passed to an asynchronous copy must stay valid, and
 * the host side unchanged (h2d) or unread (d2h), until an event recorded
 * after the copy on the same stream completes. */
#ifndef WF_DEVICE_H
#define WF_DEVICE_H
#include <stddef.h>

#include "weft.h"

typedef enum { WF_DEVICE_CPU = 0, WF_DEVICE_SIM = 1, WF_DEVICE_CUDA = 2 } wf_device_kind;
#define WF_DEVICE_KINDS 3

typedef struct wf_device wf_device;
typedef struct wf_dev_stream wf_dev_stream; /* opaque: cudaStream_t, a sim stream, ... */
typedef struct wf_dev_event wf_dev_event;   /* opaque: cudaEvent_t, a sim event, ... */

typedef enum {
  WF_COPY_H2D = 1, /* host (pageable or pinned) -> device: cudaMemcpyHostToDevice */
  WF_COPY_D2H = 2, /* device -> host: cudaMemcpyDeviceToHost */
  WF_COPY_D2D = 3  /* device -> device */
} wf_copy_dir;

/* What a pointer is, to its backend. */
typedef enum {
  WF_MEM_HOST = 0,    /* ordinary host memory, or not known to the backend at all */
  WF_MEM_PINNED = 1,  /* host memory from host_alloc (or registered with the backend) */
  WF_MEM_DEVICE = 2,  /* device memory: only the backend's copies may touch it */
  WF_MEM_MANAGED = 3  /* CUDA managed memory: usable on both sides */
} wf_mem_type;

typedef struct wf_dev_ptr {
  wf_mem_type type;
  int device; /* the device it lives on (DEVICE, MANAGED) or was allocated from (PINNED); -1 for HOST */
} wf_dev_ptr;

#define WF_DEVICE_INFO_NAMES 8
typedef struct wf_device_info {
  int count;           /* devices visible */
  int runtime_version; /* CUDA: 12040 = 12.4; 0 where it means nothing */
  int driver_version;
  char library[256];   /* what was loaded (CUDA: the libcudart name or path), or "" */
  char names[WF_DEVICE_INFO_NAMES][96]; /* the first devices' names */
} wf_device_info;

typedef struct wf_device_ops {
  const char *name; /* "cpu", "sim", "cuda" */
  /* Pinned (page-locked) host memory, for asynchronous copies. Blocking. */
  weft_status (*host_alloc)(wf_device *d, size_t len, void **out);
  weft_status (*host_free)(wf_device *d, void *p);
  /* Device memory on the thread's current device (tests, a fallback
   * output allocator). Blocking. */
  weft_status (*mem_alloc)(wf_device *d, size_t len, void **out);
  weft_status (*mem_free)(wf_device *d, void *p);
  /* Queues a copy of len bytes on stream (NULL: default). Must not block
   * (CUDA may, for pageable host memory). Arguments are checked at once;
   * a device pointer outside the backend's memory is an error. */
  weft_status (*copy)(wf_device *d, void *dst, const void *src, size_t len, wf_copy_dir dir, wf_dev_stream *stream);
  weft_status (*stream_create)(wf_device *d, wf_dev_stream **out);
  /* Queued work still completes; the handle is invalid on return. */
  weft_status (*stream_destroy)(wf_device *d, wf_dev_stream *stream);
  /* Events carry no timing. An event never recorded is complete. */
  weft_status (*event_create)(wf_device *d, wf_dev_event **out);
  /* May be called while the event is pending (resources go when it completes). */
  weft_status (*event_destroy)(wf_device *d, wf_dev_event *ev);
  /* The event completes once all work queued on stream before this call
   * has; a later record replaces an earlier one. Must not block. */
  weft_status (*event_record)(wf_device *d, wf_dev_event *ev, wf_dev_stream *stream);
  /* Never blocks: WEFT_OK when complete, WEFT_IN_PROGRESS when not, or an
   * error (the work failed; the message has the backend's text). */
  weft_status (*event_query)(wf_device *d, wf_dev_event *ev);
  /* Work queued on stream after this call starts only after ev's latest
   * record (at the time of this call) completes. Must not block. */
  weft_status (*stream_wait_event)(wf_device *d, wf_dev_stream *stream, wf_dev_event *ev);
  /* What p is. Any p, even garbage, answers without touching it. */
  weft_status (*pointer)(wf_device *d, const void *p, wf_dev_ptr *out);
  /* The calling thread's current device. */
  weft_status (*get_device)(wf_device *d, int *index);
  weft_status (*set_device)(wf_device *d, int index);
  /* Versions, device count and names (weft-info). */
  weft_status (*info)(wf_device *d, wf_device_info *out);
  /* Frees the backend (registry shutdown, private sims). */
  void (*destroy)(wf_device *d);
} wf_device_ops;

struct wf_device {
  const wf_device_ops *ops;
  wf_device_kind kind;
};

/* ------------------------------------------------------------- registry */
/* The process's device of that kind, made on first use (thread-safe; the
 * first call loads a backend, later calls return it). A backend that cannot
 * be made (CUDA: no library, no device, driver too old) fails with
 * WEFT_ERR_NOT_SUPPORTED and the same message every time, *out NULL. */
weft_status wf_device_get(wf_device_kind kind, wf_device **out);
/* Frees every device the registry made (tests' leak checks; nothing may use
 * them afterwards). A CUDA library stays loaded. */
void wf_device_shutdown(void);
/* The public kinds (bits 1u << WEFT_DEVICE_KIND_*) this process could
 * stage tensors from without loading anything: SIM (built in) always; CUDA
 * when the registry has made a CUDA device or a CUDA runtime is already
 * loaded in the process (wf_dev_cuda_loaded). Never initialises a device. */
unsigned wf_device_kinds_present(void);
/* "cpu", "sim", "cuda"; NULL for a bad kind. */
const char *wf_device_kind_name(wf_device_kind kind);
/* The kind named name (case-insensitive); WEFT_ERR_INVALID_ARGUMENT else. */
weft_status wf_device_kind_parse(const char *name, wf_device_kind *out);

/* WEFT_OK if [p, p + len) is device memory of d (an in-range device
 * pointer), else WEFT_ERR_INVALID_ARGUMENT naming what (for the message:
 * "input of tensor x") and what p is instead. */
weft_status wf_device_check_ptr(wf_device *d, const void *p, size_t len, const char *what);

/* ------------------------------------------------------------- backends */
/* Used by the registry; a sim may also be made privately (device/sim.h). */
weft_status wf_dev_cpu_create(wf_device **out);
weft_status wf_dev_sim_create(wf_device **out);
/* Loads the CUDA runtime; WEFT_ERR_NOT_SUPPORTED naming every library
 * tried and why, or the runtime's reason when it loads but cannot run. */
weft_status wf_dev_cuda_create(wf_device **out);
/* Tests: tries only names[] (no library already loaded, no
 * WEFT_CUDA_LIBRARY), so the failing paths can be reached anywhere. */
weft_status wf_dev_cuda_create_from(const char *const *names, size_t nnames, wf_device **out);
/* 1 if one of the usual CUDA runtime libraries is loaded in the process
 * (dlopen RTLD_NOLOAD: nothing is loaded, no device initialised). */
int wf_dev_cuda_loaded(void);

#endif
