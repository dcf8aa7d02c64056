/* _weft.h - declarations shared by the C files of weft's Python extension
 * (_weft.c: the module, the world and operation submission; _weft_handle.c:
 * request handles, library-allocated output buffers, waiting; _weft_group.c:
 * groups and the timeline; _weft_remote.c: remote execution for weft.rpc;
 * _weft_grouped.c: the grouped operations).
 *
 * The extension is written against weft.h only: no torch or numpy headers.
 * Tensors arrive either through the buffer protocol (numpy, bytearray, ...) or
 * as a (data pointer, weft dtype, shape) triple that the Python layer builds
 * from torch's tensor.data_ptr(), or a (data pointer, dtype, shape, device
 * index, device kind, producer stream) 6-tuple for device tensors (CUDA:
 * the stream is a cudaStream_t as an int, torch's current stream). Every
 * function here runs with the GIL held unless it says otherwise. */
#ifndef WEFT_PY_WEFT_H
#define WEFT_PY_WEFT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "weft.h"

/* Operation kinds, as the handle needs to know how to collect results. */
enum { WPY_ALLREDUCE, WPY_ALLGATHER, WPY_BROADCAST, WPY_ALLTOALL, WPY_REDUCESCATTER, WPY_BARRIER, WPY_JOIN, WPY_SEND,
       WPY_RECV };

/* One tensor argument while its operation runs. When it came through the
 * buffer protocol, `view` is held (keeping the exporter alive and, for numpy,
 * unresizable) until the operation completes. */
typedef struct wpy_tensor {
  weft_tensor t;
  int64_t shape[WEFT_MAX_DIMS];
  Py_buffer view;
  int has_view;
} wpy_tensor;

/* The state of one submitted operation. It belongs to its Handle; when the
 * Handle is dropped while the operation is still pending, it moves to the
 * orphan list and is released once the operation completes (the engine may
 * still write into the buffers it references until then). */
typedef struct wpy_op {
  weft_request *req;
  int kind;
  int lib_alloc;        /* outputs come from wpy_output_alloc (allgather, alltoall) */
  wpy_tensor in, out;
  wpy_tensor *ins, *outs; /* grouped ops: n inputs and outputs (an output without data: library-allocated) */
  int n;
  int grouped;          /* a weft_grouped_* request: outputs per tensor (weft_request_output_at) */
  PyObject *keep;       /* objects kept alive until completion, or NULL */
  PyObject *dev_alloc;  /* device outputs: a callable nbytes -> (data_ptr, owner), or NULL */
  PyObject *dev_outs;   /* dict data_ptr -> owner of what dev_alloc returned (NULL until it runs) */
  struct wpy_op *next;  /* orphan list link */
} wpy_op;

/* The world of this process (NULL when not initialized) and the shutdown
 * gate: while `wpy_stopping` is set no new operation starts and waiting
 * threads step out of weft_wait (weft_finalize destroys the world's condition
 * variable, so nobody may be blocked on it then). */
extern weft_world *wpy_world;
extern int wpy_stopping;
extern int wpy_waiters;
/* Counts worlds: a Group made in an earlier world is refused, not used. */
extern unsigned long wpy_world_gen;

extern PyObject *wpy_WeftError;
extern PyTypeObject wpy_HandleType;
extern PyTypeObject wpy_BufferType;
extern PyTypeObject wpy_GroupType;

/* The weft group an operation's `group` argument names: the world's for
 * None, else a live Group of this world. NULL with a Python error. Requires
 * an initialized world. */
weft_group *wpy_group_of(PyObject *group);

/* Module functions of _weft_group.c. */
PyObject *wpy_timeline_start(PyObject *self, PyObject *args, PyObject *kw);
PyObject *wpy_timeline_stop(PyObject *self, PyObject *unused);

/* Submission helpers of _weft.c, for _weft_grouped.c too: a new op of kind
 * (keep: objects held until it completes); a Handle for a submitted request
 * or the error (op freed); per-operation options; the device keywords
 * (stream, alloc); the group of an operation (a live world, None: the
 * world's; sweeps finished orphans). NULL / -1 with a Python error. */
wpy_op *wpy_op_new(int kind, PyObject *keep);
PyObject *wpy_submitted(wpy_op *op, weft_status st, weft_request *req, const char *name);
void wpy_options(weft_op_options *o, double prescale, double postscale, int priority);
int wpy_device_options(wpy_op *op, weft_op_options *o, PyObject *stream, PyObject *alloc);
weft_group *wpy_op_group(PyObject *group);

/* Module functions of _weft_grouped.c. */
PyObject *wpy_grouped_allreduce(PyObject *self, PyObject *args, PyObject *kw);
PyObject *wpy_grouped_allgather(PyObject *self, PyObject *args, PyObject *kw);
PyObject *wpy_grouped_reducescatter(PyObject *self, PyObject *args, PyObject *kw);

/* Fills t from a buffer-protocol object or a (data_ptr, dtype, shape[,
 * device, device_kind, stream]) tuple; -1 with a Python error (t then holds
 * nothing). `what` names the argument in messages. */
int wpy_parse_tensor(PyObject *o, int writable, const char *what, wpy_tensor *t);

/* A Buffer object owning malloc'd data (freed with it); NULL (data still the
 * caller's) on failure. */
PyObject *wpy_buffer_adopt(void *data, Py_ssize_t len);

/* _weft_remote.c: adds RemoteCall and the rpc_* functions to the module (-1
 * on failure); at shutdown, before weft_finalize and with no thread waiting,
 * frees every remote call handle and stops serving. */
int wpy_remote_add(PyObject *m);
void wpy_remote_shutdown(void);

/* Releases a tensor argument's buffer view, if it holds one. */
void wpy_tensor_release(wpy_tensor *t);

/* Raises the Python exception for a failed weft call: ValueError for local
 * misuse, NotImplementedError for a missing feature, WeftError otherwise
 * (with .status and .status_name attributes). Returns NULL. */
PyObject *wpy_raise(weft_status st, const char *msg);

/* Allocator for library-sized outputs (engine thread, no GIL): plain malloc,
 * so the memory can later be handed to a Buffer object. */
void *wpy_output_alloc(size_t bytes, void *ctx);
/* Allocator for library-sized outputs of device tensors (engine thread):
 * takes the GIL and calls op->dev_alloc (ctx is the op), which allocates
 * through the framework (torch's caching allocator) and returns (data_ptr,
 * owner); the owner is kept in op->dev_outs until the Handle collects it. */
void *wpy_device_alloc(size_t bytes, void *ctx);
/* The owner of device output memory p from wpy_device_alloc (a new
 * reference), or None. */
PyObject *wpy_device_owner(wpy_op *op, const void *p);

/* Wraps a submitted request in a new Handle that owns op (and frees it on
 * failure). */
PyObject *wpy_handle_new(wpy_op *op, const char *name);

/* Releases what op holds (views, keep, request, unclaimed output memory) and
 * frees it. The request must be complete or the world finalized. */
void wpy_op_free(wpy_op *op);

/* Releases the orphans whose operations have completed; all of them when
 * `all` (after weft_finalize, when everything has completed). */
void wpy_sweep_orphans(int all);

#endif /* WEFT_PY_WEFT_H */
