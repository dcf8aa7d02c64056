/* _weft_handle.c - request handles of weft's Python extension: polling,
 * waiting with the GIL released (in short slices, so Ctrl-C and other signals
 * are seen), collecting outputs, and keeping tensors alive until the engine is
 * done with them, even when the Python handle is dropped early (orphans).
 *
 * Outputs whose size is only known after negotiation (allgather, alltoall)
 * are malloc'd by wpy_output_alloc on the engine thread and then adopted by a
 * Buffer object, which numpy.frombuffer / torch.frombuffer wrap without a
 * copy. Those of device tensors come from the framework instead
 * (wpy_device_alloc: torch's caching allocator, called with the GIL from the
 * engine thread); the Handle's output is then the owner the allocator
 * returned (a torch tensor), and nothing here frees device memory. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_weft.h"

/* ------------------------------------------------------------------ Buffer */
/* A writable, byte-addressed block of malloc'd memory exported through the
 * buffer protocol; freed when the last reference (and export) goes. */
typedef struct {
  PyObject_HEAD
  void *data;
  Py_ssize_t len;
} wpy_buffer;

PyObject *wpy_buffer_adopt(void *data, Py_ssize_t len) {
  wpy_buffer *b = PyObject_New(wpy_buffer, &wpy_BufferType);
  if (!b) return NULL; /* caller still owns data */
  b->data = data;
  b->len = len;
  return (PyObject *)b;
}

static int buffer_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  wpy_buffer *b = (wpy_buffer *)self;
  return PyBuffer_FillInfo(view, self, b->data, b->len, 0, flags);
}

static void buffer_dealloc(PyObject *self) {
  free(((wpy_buffer *)self)->data);
  PyObject_Free(self);
}

static Py_ssize_t buffer_length(PyObject *self) { return ((wpy_buffer *)self)->len; }

static PyBufferProcs buffer_procs = {buffer_getbuffer, NULL};
static PySequenceMethods buffer_seq = {.sq_length = buffer_length};

PyTypeObject wpy_BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.Buffer",
    .tp_basicsize = sizeof(wpy_buffer),
    .tp_dealloc = buffer_dealloc,
    .tp_as_buffer = &buffer_procs,
    .tp_as_sequence = &buffer_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory weft allocated for an operation's output (buffer protocol, writable).",
};

void *wpy_output_alloc(size_t bytes, void *ctx) {
  (void)ctx;
  return malloc(bytes ? bytes : 1); /* never NULL for 0 bytes: NULL means failure */
}

void *wpy_device_alloc(size_t bytes, void *ctx) {
  wpy_op *op = ctx;
  void *p = NULL;
  /* The engine thread blocks here until it gets the GIL: a Python thread
   * holding it never waits on the engine (submission and weft_test do not
   * block; weft_wait, group creation and finalize release the GIL). */
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *r = PyObject_CallFunction(op->dev_alloc, "n", (Py_ssize_t)bytes);
  if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
    p = PyLong_AsVoidPtr(PyTuple_GET_ITEM(r, 0));
    PyObject *key = p ? PyLong_FromVoidPtr(p) : NULL;
    if (key && PyDict_SetItem(op->dev_outs, key, PyTuple_GET_ITEM(r, 1)) < 0) p = NULL;
    Py_XDECREF(key);
  } else if (r) {
    PyErr_SetString(PyExc_TypeError, "a device output allocator must return (data_ptr, owner)");
  }
  Py_XDECREF(r);
  if (PyErr_Occurred()) { /* weft fails the request: the allocator returned NULL */
    PyErr_WriteUnraisable(op->dev_alloc);
    p = NULL;
  }
  PyGILState_Release(g);
  return p;
}

PyObject *wpy_device_owner(wpy_op *op, const void *p) {
  PyObject *key = PyLong_FromVoidPtr((void *)p);
  if (!key) return NULL;
  PyObject *owner = op->dev_outs && p ? PyDict_GetItemWithError(op->dev_outs, key) : NULL;
  Py_DECREF(key);
  if (!owner && PyErr_Occurred()) return NULL;
  if (!owner) owner = Py_None; /* 0 bytes: nothing was allocated */
  Py_INCREF(owner);
  return owner;
}

/* ------------------------------------------------------------------ ops */
void wpy_tensor_release(wpy_tensor *t) {
  if (t->has_view) PyBuffer_Release(&t->view);
  t->has_view = 0;
}

static void release_tensors(wpy_op *op) {
  wpy_tensor_release(&op->in);
  wpy_tensor_release(&op->out);
  for (int i = 0; i < op->n; i++) {
    if (op->ins) wpy_tensor_release(&op->ins[i]);
    if (op->outs) wpy_tensor_release(&op->outs[i]);
  }
}

/* Frees the library-allocated outputs of a completed grouped op that no
 * Buffer adopted (those whose output tensor had no data). */
static void free_grouped_outputs(wpy_op *op) {
  if (op->dev_alloc) return; /* the framework's, held by op->dev_outs */
  for (int i = 0; i < op->n; i++) {
    weft_tensor o;
    if (!op->outs[i].t.data && weft_request_output_at(op->req, i, &o) != WEFT_ERR_MISUSE) free(o.data);
  }
}

void wpy_op_free(wpy_op *op) {
  if (!op) return;
  if (op->grouped && op->lib_alloc && op->req && op->outs && weft_test(op->req) != WEFT_IN_PROGRESS) {
    free_grouped_outputs(op);
    op->lib_alloc = 0;
  }
  release_tensors(op);
  PyMem_Free(op->ins);
  PyMem_Free(op->outs);
  Py_CLEAR(op->keep);
  Py_CLEAR(op->dev_outs);
  if (op->req) {
    weft_tensor o;
    /* output memory from wpy_output_alloc that no Buffer adopted */
    if (op->lib_alloc && !op->dev_alloc && weft_test(op->req) != WEFT_IN_PROGRESS && weft_request_output(op->req, &o) != WEFT_ERR_MISUSE)
      free(o.data);
    weft_request_free(op->req);
  }
  Py_CLEAR(op->dev_alloc);
  PyMem_Free(op);
}

static wpy_op *g_orphans;

void wpy_sweep_orphans(int all) {
  wpy_op **pp = &g_orphans;
  while (*pp) {
    wpy_op *op = *pp;
    if (all || weft_test(op->req) != WEFT_IN_PROGRESS) {
      *pp = op->next;
      wpy_op_free(op);
    } else {
      pp = &op->next;
    }
  }
}

static void orphan(wpy_op *op) {
  op->next = g_orphans;
  g_orphans = op;
}

/* ------------------------------------------------------------------ Handle */
typedef struct {
  PyObject_HEAD
  wpy_op *op;         /* NULL once released */
  weft_status status; /* WEFT_IN_PROGRESS until completion is observed */
  int waiters;        /* threads inside weft_wait on op->req (req must outlive them) */
  PyObject *name;     /* str */
  PyObject *error;    /* str, set when the operation failed */
  PyObject *output;   /* Buffer for library-sized outputs */
  PyObject *shape;    /* the output's shape (tuple) for those */
  PyObject *splits;   /* alltoall: rows received from each rank (tuple) */
  int last_joined;    /* join: the rank that joined last */
  int source;         /* recv: the group rank it received from */
} wpy_handle;

PyObject *wpy_handle_new(wpy_op *op, const char *name) {
  wpy_handle *h = PyObject_New(wpy_handle, &wpy_HandleType);
  if (!h) {
    orphan(op); /* the engine owns the buffers until the request completes */
    return NULL;
  }
  h->op = op;
  h->status = WEFT_IN_PROGRESS;
  h->waiters = 0;
  h->last_joined = -1;
  h->source = -1;
  h->error = h->output = h->shape = h->splits = NULL;
  h->name = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
  if (!h->name) {
    Py_DECREF(h);
    return NULL;
  }
  return (PyObject *)h;
}

static PyObject *shape_tuple(const weft_tensor *o) {
  PyObject *t = PyTuple_New(o->ndim);
  for (int d = 0; t && d < o->ndim; d++) {
    PyObject *v = PyLong_FromLongLong((long long)o->shape[d]);
    if (!v) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, d, v);
  }
  return t;
}

static size_t tensor_bytes(const weft_tensor *o) {
  size_t n = weft_dtype_size(o->dtype);
  for (int d = 0; d < o->ndim; d++) n *= (size_t)o->shape[d];
  return n;
}

/* Takes the outputs of a library-sized operation into Python objects. */
static int collect_outputs(wpy_handle *h) {
  wpy_op *op = h->op;
  weft_tensor o;
  weft_request_output(op->req, &o);
  size_t bytes = tensor_bytes(&o);
  if (op->dev_alloc) { /* device memory from the framework's allocator: its owner is the output */
    op->lib_alloc = 0;
    if (h->status != WEFT_OK) return 0;
    h->output = wpy_device_owner(op, o.data);
    if (!h->output) return -1;
  } else if (op->lib_alloc) {
    op->lib_alloc = 0; /* ours now, adopted or freed below */
    if (h->status != WEFT_OK) {
      free(o.data);
      return 0;
    }
    h->output = wpy_buffer_adopt(o.data, (Py_ssize_t)bytes);
    if (!h->output) {
      free(o.data);
      return -1;
    }
  } else {
    if (h->status != WEFT_OK) return 0;
    /* library-owned (reducescatter without an output tensor): copy out */
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) {
      PyErr_NoMemory();
      return -1;
    }
    if (bytes) memcpy(copy, o.data, bytes);
    h->output = wpy_buffer_adopt(copy, (Py_ssize_t)bytes);
    if (!h->output) {
      free(copy);
      return -1;
    }
  }
  h->shape = shape_tuple(&o);
  if (!h->shape) return -1;
  if (op->kind == WPY_ALLTOALL) {
    const int64_t *s = NULL;
    int n = 0;
    weft_request_recv_splits(op->req, &s, &n);
    h->splits = PyTuple_New(n);
    for (int j = 0; h->splits && j < n; j++) {
      PyObject *v = PyLong_FromLongLong((long long)s[j]);
      if (!v) return -1;
      PyTuple_SET_ITEM(h->splits, j, v);
    }
    if (!h->splits) return -1;
  }
  return 0;
}

/* Grouped allgather / reducescatter: output and shape become lists, one
 * entry per tensor: a Buffer and its shape for library-allocated outputs,
 * None and the shape for outputs the caller gave. */
static int collect_grouped(wpy_handle *h) {
  wpy_op *op = h->op;
  if (h->status != WEFT_OK) { /* nothing to hand out: free what the library allocated */
    if (op->lib_alloc) free_grouped_outputs(op);
    op->lib_alloc = 0;
    return 0;
  }
  op->lib_alloc = 0; /* ours now: adopted below, or freed on failure */
  int rc = 0;
  h->output = PyList_New(op->n);
  h->shape = PyList_New(op->n);
  for (int i = 0; i < op->n; i++) {
    weft_tensor o;
    weft_request_output_at(op->req, i, &o);
    int mine = !op->outs[i].t.data;
    PyObject *buf = NULL, *shape = NULL;
    if (rc == 0 && h->output && h->shape) {
      if (!mine) buf = (Py_INCREF(Py_None), Py_None);
      else if (op->dev_alloc) buf = wpy_device_owner(op, o.data);
      else buf = wpy_buffer_adopt(o.data, (Py_ssize_t)tensor_bytes(&o));
      shape = shape_tuple(&o);
    }
    if (buf) {
      PyList_SET_ITEM(h->output, i, buf);
    } else {
      if (mine && !op->dev_alloc) free(o.data);
      rc = -1;
    }
    if (shape) PyList_SET_ITEM(h->shape, i, shape);
    else rc = -1;
  }
  if (rc < 0) { /* no half-filled lists reach Python */
    Py_CLEAR(h->output);
    Py_CLEAR(h->shape);
    if (!PyErr_Occurred()) PyErr_NoMemory();
  }
  return rc;
}

/* Frees the request once completion is recorded and no thread waits on it. */
static void maybe_release(wpy_handle *h) {
  if (h->op && h->status != WEFT_IN_PROGRESS && h->waiters == 0) {
    wpy_op_free(h->op);
    h->op = NULL;
  }
}

/* Records the final status st; -1 with a Python error if collecting failed. */
static int complete(wpy_handle *h, weft_status st) {
  wpy_op *op = h->op;
  h->status = st;
  if (st != WEFT_OK) {
    const char *m = weft_request_error(op->req);
    if (!*m) m = weft_status_string(st);
    h->error = PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace");
  }
  int rc = h->error || st == WEFT_OK ? 0 : -1;
  int library_sized = op->kind == WPY_ALLGATHER || op->kind == WPY_ALLTOALL ||
                      (op->kind == WPY_REDUCESCATTER && !op->out.t.data);
  if (op->grouped) {
    if (collect_grouped(h) < 0) rc = -1;
  } else if (library_sized && collect_outputs(h) < 0) {
    rc = -1;
  }
  if (op->kind == WPY_RECV && st == WEFT_OK) weft_request_source(op->req, &h->source);
  if (op->kind == WPY_JOIN && st == WEFT_OK) {
    int last = -1;
    weft_request_last_joined(op->req, &last);
    h->last_joined = last;
  }
  /* the engine is done with the caller's memory */
  release_tensors(op);
  Py_CLEAR(op->keep);
  maybe_release(h);
  return rc;
}

static PyObject *raise_failed(wpy_handle *h) {
  PyObject *exc = PyObject_CallFunctionObjArgs(wpy_WeftError, h->error, NULL);
  if (!exc) return NULL;
  PyObject *code = PyLong_FromLong((long)h->status);
  PyObject *sname = PyUnicode_FromString(weft_status_string(h->status));
  if (code && sname && !PyObject_SetAttrString(exc, "status", code) &&
      !PyObject_SetAttrString(exc, "status_name", sname))
    PyErr_SetObject(wpy_WeftError, exc);
  Py_XDECREF(code);
  Py_XDECREF(sname);
  Py_DECREF(exc);
  return NULL;
}

static PyObject *handle_poll(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_handle *h = (wpy_handle *)self;
  if (h->status == WEFT_IN_PROGRESS) {
    weft_status st = weft_test(h->op->req);
    if (st == WEFT_IN_PROGRESS) Py_RETURN_FALSE;
    if (complete(h, st) < 0) return NULL;
  }
  Py_RETURN_TRUE;
}

/* cancel(): withdraw the operation if its collective has not started
 * (weft_request_cancel); it then completes with WEFT_ERR_CANCELLED on every
 * rank. Raises when it cannot be cancelled. */
static PyObject *handle_cancel(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_handle *h = (wpy_handle *)self;
  if (h->status != WEFT_IN_PROGRESS) return wpy_raise(WEFT_ERR_MISUSE, "cancel: the operation is already complete");
  weft_status st = weft_request_cancel(h->op->req);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  Py_RETURN_NONE;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sits out a shutdown in progress: weft_finalize completes every request, so
 * the next weft_wait returns at once. */
static void wait_out_shutdown(void) {
  while (wpy_stopping) {
    Py_BEGIN_ALLOW_THREADS
    usleep(2000);
    Py_END_ALLOW_THREADS
  }
}

/* wait(timeout=None): True when complete (raises WeftError if it failed),
 * False if timeout seconds passed first. The GIL is released while blocked. */
static PyObject *handle_wait(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  wpy_handle *h = (wpy_handle *)self;
  PyObject *tmo = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &tmo)) return NULL;
  double limit = -1;
  if (tmo != Py_None) {
    limit = PyFloat_AsDouble(tmo);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (!(limit >= 0)) {
      PyErr_SetString(PyExc_ValueError, "wait: timeout must be >= 0 or None");
      return NULL;
    }
  }
  double start = now_seconds();
  while (h->status == WEFT_IN_PROGRESS) {
    if (wpy_stopping) {
      wait_out_shutdown();
      continue;
    }
    /* short slices: signals are only handled between them */
    double slice = 0.05;
    if (limit >= 0) {
      double left = limit - (now_seconds() - start);
      if (left <= 0) Py_RETURN_FALSE;
      if (left < slice) slice = left;
    }
    weft_request *req = h->op->req;
    weft_status st;
    h->waiters++;
    wpy_waiters++;
    Py_BEGIN_ALLOW_THREADS
    st = weft_wait(req, slice);
    Py_END_ALLOW_THREADS
    h->waiters--;
    wpy_waiters--;
    if (h->status == WEFT_IN_PROGRESS && st != WEFT_IN_PROGRESS) {
      if (complete(h, st) < 0) return NULL;
    } else {
      maybe_release(h); /* another thread completed it while we waited */
    }
    if (h->status == WEFT_IN_PROGRESS && PyErr_CheckSignals() < 0) return NULL;
  }
  maybe_release(h);
  if (h->status != WEFT_OK) return raise_failed(h);
  Py_RETURN_TRUE;
}

static void handle_dealloc(PyObject *self) {
  wpy_handle *h = (wpy_handle *)self;
  if (h->op) {
    if (h->status == WEFT_IN_PROGRESS && weft_test(h->op->req) == WEFT_IN_PROGRESS) orphan(h->op);
    else wpy_op_free(h->op);
  }
  Py_XDECREF(h->name);
  Py_XDECREF(h->error);
  Py_XDECREF(h->output);
  Py_XDECREF(h->shape);
  Py_XDECREF(h->splits);
  PyObject_Free(self);
}

static PyObject *get_obj(PyObject *o) {
  if (!o) Py_RETURN_NONE;
  Py_INCREF(o);
  return o;
}

static PyObject *handle_name(PyObject *self, void *c) {
  (void)c;
  return get_obj(((wpy_handle *)self)->name);
}
static PyObject *handle_done(PyObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(((wpy_handle *)self)->status != WEFT_IN_PROGRESS);
}
static PyObject *handle_status(PyObject *self, void *c) {
  (void)c;
  return PyLong_FromLong((long)((wpy_handle *)self)->status);
}
static PyObject *handle_error(PyObject *self, void *c) {
  (void)c;
  return get_obj(((wpy_handle *)self)->error);
}
static PyObject *handle_output(PyObject *self, void *c) {
  (void)c;
  return get_obj(((wpy_handle *)self)->output);
}
static PyObject *handle_shape(PyObject *self, void *c) {
  (void)c;
  return get_obj(((wpy_handle *)self)->shape);
}
static PyObject *handle_splits(PyObject *self, void *c) {
  (void)c;
  return get_obj(((wpy_handle *)self)->splits);
}

static PyObject *handle_last_joined(PyObject *self, void *c) {
  (void)c;
  wpy_handle *h = (wpy_handle *)self;
  if (h->last_joined < 0) Py_RETURN_NONE;
  return PyLong_FromLong(h->last_joined);
}

static PyObject *handle_source(PyObject *self, void *c) {
  (void)c;
  wpy_handle *h = (wpy_handle *)self;
  if (h->source < 0) Py_RETURN_NONE;
  return PyLong_FromLong(h->source);
}

static PyGetSetDef handle_getset[] = {
    {"name", handle_name, NULL, "the operation's name, as every rank submitted it", NULL},
    {"done", handle_done, NULL, "True once completion has been observed (poll or wait)", NULL},
    {"status", handle_status, NULL, "weft status code (1 = in progress, 0 = ok, < 0 = error)", NULL},
    {"error", handle_error, NULL, "the error message, or None", NULL},
    {"output", handle_output, NULL,
     "Buffer holding a library-sized output (allgather, alltoall), or None; grouped allgather/reducescatter: a "
     "list, one Buffer (or None: the caller's output) per tensor", NULL},
    {"shape", handle_shape, NULL, "shape of that output, or None; grouped: a list of shapes", NULL},
    {"recv_splits", handle_splits, NULL, "alltoall: rows received from each rank, or None", NULL},
    {"last_joined", handle_last_joined, NULL, "join: the group rank that joined last, or None", NULL},
    {"source", handle_source, NULL, "recv: the group rank it received from, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef handle_methods[] = {
    {"poll", handle_poll, METH_NOARGS, "poll() -> bool: True once the operation has completed (never raises for it)."},
    {"cancel", handle_cancel, METH_NOARGS,
     "cancel(): withdraw the operation if its collective has not started; it (and every rank's) then fails\n"
     "with WEFT_ERR_CANCELLED. Raises if it is complete or running, or cannot be cancelled."},
    {"wait", (PyCFunction)(void (*)(void))handle_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool: block (GIL released) until completion; raise WeftError if it failed;\n"
     "False if timeout seconds passed first."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject wpy_HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.Handle",
    .tp_basicsize = sizeof(wpy_handle),
    .tp_dealloc = handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A submitted weft operation. Keeps its tensors alive until it completes.",
    .tp_methods = handle_methods,
    .tp_getset = handle_getset,
};
