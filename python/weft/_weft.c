/* _weft.c - the C core of weft's Python package (module weft._weft): joins
 * and leaves the job (one world per process at a time, repeatable), reports
 * ranks and sizes, and submits collectives, returning a Handle per operation.
 *
 * Tensors are passed without copies: a buffer-protocol object (numpy arrays,
 * bytearray, ...) is viewed in place, and a (data_ptr, dtype, shape) triple
 * is used as it is (the Python layer keeps the owning tensor alive through
 * the `keep` argument, which the handle holds until completion). Only
 * C-contiguous memory is accepted: the Python layer makes copies where a
 * tensor is not contiguous.
 *
 * Local misuse raises ValueError at submission (weft's message); failures
 * found later (ranks disagree, a peer is lost, ...) raise WeftError, a
 * RuntimeError subclass, from Handle.wait(). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "_weft.h"

weft_world *wpy_world;
int wpy_stopping;
int wpy_waiters;
PyObject *wpy_WeftError;
static int g_initializing;

/* ------------------------------------------------------------------ errors */
static PyObject *raise_weft_error(weft_status st, const char *msg) {
  PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  if (!m) return NULL;
  PyObject *exc = PyObject_CallFunctionObjArgs(wpy_WeftError, m, NULL);
  Py_DECREF(m);
  if (!exc) return NULL;
  PyObject *code = PyLong_FromLong((long)st);
  PyObject *name = PyUnicode_FromString(weft_status_string(st));
  if (code && name && !PyObject_SetAttrString(exc, "status", code) && !PyObject_SetAttrString(exc, "status_name", name))
    PyErr_SetObject(wpy_WeftError, exc);
  Py_XDECREF(code);
  Py_XDECREF(name);
  Py_DECREF(exc);
  return NULL;
}

PyObject *wpy_raise(weft_status st, const char *msg) {
  if (!msg || !*msg) msg = weft_status_string(st);
  switch (st) {
    case WEFT_ERR_INVALID_ARGUMENT:
    case WEFT_ERR_MISUSE:
      PyErr_SetString(PyExc_ValueError, msg);
      return NULL;
    case WEFT_ERR_NOT_SUPPORTED:
      PyErr_SetString(PyExc_NotImplementedError, msg);
      return NULL;
    case WEFT_ERR_NO_MEMORY:
      PyErr_SetString(PyExc_MemoryError, msg);
      return NULL;
    default:
      return raise_weft_error(st, msg);
  }
}

static int require_world(void) {
  if (wpy_stopping) {
    raise_weft_error(WEFT_ERR_SHUTDOWN, "weft is shutting down");
    return -1;
  }
  if (!wpy_world) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ tensors */
/* The weft dtype of a struct-module format character with this item size. */
static int dtype_of_format(const char *f, Py_ssize_t itemsize) {
  if (!f) return WEFT_DTYPE_UINT8; /* no format: plain bytes */
  if (*f == '@' || *f == '=' || *f == '<') f++;
  else if (*f == '>' || *f == '!') return -1; /* big-endian data on a little-endian host */
  if (f[0] == '\0' || f[1] != '\0') return -1;
  switch (f[0]) {
    case 'B': return WEFT_DTYPE_UINT8;
    case 'b': return WEFT_DTYPE_INT8;
    case 'H': return WEFT_DTYPE_UINT16;
    case 'h': return WEFT_DTYPE_INT16;
    case 'i':
    case 'l':
    case 'q':
      return itemsize == 4 ? WEFT_DTYPE_INT32 : itemsize == 8 ? WEFT_DTYPE_INT64 : -1;
    case 'e': return WEFT_DTYPE_FLOAT16;
    case 'f': return WEFT_DTYPE_FLOAT32;
    case 'd': return WEFT_DTYPE_FLOAT64;
    case '?': return WEFT_DTYPE_BOOL;
    default: return -1;
  }
}

/* Fills t from a buffer-protocol object or a (data_ptr, dtype, shape)
 * triple. -1 with a Python error on failure (t then holds nothing). */
int wpy_parse_tensor(PyObject *o, int writable, const char *what, wpy_tensor *t) {
  memset(t, 0, sizeof *t);
  t->t.device = WEFT_DEVICE_CPU;
  t->t.shape = t->shape;
  if (PyTuple_Check(o)) {
    Py_ssize_t nt = PyTuple_GET_SIZE(o);
    if (nt != 3 && nt != 6) {
      PyErr_Format(PyExc_TypeError,
                   "%s: expected (data_ptr, dtype, shape) or (data_ptr, dtype, shape, device, device_kind, "
                   "stream), got a tuple of %zd", what, nt);
      return -1;
    }
    if (nt == 6) { /* a device tensor: index, WEFT_DEVICE_KIND_*, the producer's stream (0: default) */
      long dev = PyLong_AsLong(PyTuple_GET_ITEM(o, 3));
      if (dev == -1 && PyErr_Occurred()) return -1;
      long kind = PyLong_AsLong(PyTuple_GET_ITEM(o, 4));
      if (kind == -1 && PyErr_Occurred()) return -1;
      void *stream = PyLong_AsVoidPtr(PyTuple_GET_ITEM(o, 5));
      if (!stream && PyErr_Occurred()) return -1;
      if (dev < WEFT_DEVICE_CPU || dev > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "%s: device index %ld", what, dev);
        return -1;
      }
      t->t.device = (int)dev;
      t->t.device_kind = (int)kind;
      t->t.stream = stream;
    }
    void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(o, 0));
    if (!ptr && PyErr_Occurred()) return -1;
    long dt = PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
    if (dt == -1 && PyErr_Occurred()) return -1;
    if (dt < 0 || dt >= WEFT_DTYPE_COUNT_) {
      PyErr_Format(PyExc_ValueError, "%s: unknown weft dtype %ld", what, dt);
      return -1;
    }
    PyObject *seq = PySequence_Fast(PyTuple_GET_ITEM(o, 2), "shape must be a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(seq);
    if (nd > WEFT_MAX_DIMS) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "%s: %zd dimensions (weft allows at most %d)", what, nd, WEFT_MAX_DIMS);
      return -1;
    }
    for (Py_ssize_t d = 0; d < nd; d++) {
      long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
      if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(seq);
        return -1;
      }
      t->shape[d] = v;
    }
    Py_DECREF(seq);
    t->t.dtype = (weft_dtype)dt;
    t->t.ndim = (int)nd;
    t->t.data = ptr;
    return 0;
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(o, &t->view, flags) < 0) return -1;
  t->has_view = 1;
  int dt = dtype_of_format(t->view.format, t->view.itemsize);
  if (dt < 0 || t->view.ndim > WEFT_MAX_DIMS) {
    PyErr_Format(PyExc_ValueError, "%s: unsupported buffer (format '%s', %d dimensions)", what,
                 t->view.format ? t->view.format : "B", t->view.ndim);
    PyBuffer_Release(&t->view);
    t->has_view = 0;
    return -1;
  }
  t->t.dtype = (weft_dtype)dt;
  t->t.ndim = t->view.ndim;
  for (int d = 0; d < t->view.ndim; d++) t->shape[d] = t->view.shape ? t->view.shape[d] : t->view.len;
  t->t.data = t->view.buf;
  return 0;
}

wpy_op *wpy_op_new(int kind, PyObject *keep) {
  wpy_op *op = PyMem_Calloc(1, sizeof *op);
  if (!op) {
    PyErr_NoMemory();
    return NULL;
  }
  op->kind = kind;
  if (keep && keep != Py_None) {
    Py_INCREF(keep);
    op->keep = keep;
  }
  return op;
}

/* Finishes a submission: a Handle on success; otherwise the error (its
 * message copied before op's cleanup can run Python code) and op freed. */
PyObject *wpy_submitted(wpy_op *op, weft_status st, weft_request *req, const char *name) {
  if (st != WEFT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    wpy_op_free(op);
    return wpy_raise(st, msg);
  }
  op->req = req;
  return wpy_handle_new(op, name);
}

void wpy_options(weft_op_options *o, double prescale, double postscale, int priority) {
  weft_op_options init = WEFT_OP_OPTIONS_INIT;
  *o = init;
  o->prescale = prescale;
  o->postscale = postscale;
  o->priority = priority;
}

/* The device keywords every operation takes: stream, the consumer stream (an
 * int, a cudaStream_t; 0: complete only once the result is on the device),
 * and alloc, a callable nbytes -> (data_ptr, owner) for the outputs weft
 * sizes (allgather, alltoall, reducescatter without an output) of device
 * tensors (None: host outputs come from malloc). 0 or -1 with an error. */
int wpy_device_options(wpy_op *op, weft_op_options *o, PyObject *stream, PyObject *alloc) {
  if (stream && stream != Py_None) {
    o->consumer_stream = PyLong_AsVoidPtr(stream);
    if (!o->consumer_stream && PyErr_Occurred()) return -1;
  }
  if (alloc && alloc != Py_None) {
    if (!PyCallable_Check(alloc)) {
      PyErr_SetString(PyExc_TypeError, "alloc must be callable (nbytes -> (data_ptr, owner))");
      return -1;
    }
    Py_INCREF(alloc);
    op->dev_alloc = alloc;
    op->dev_outs = PyDict_New();
    if (!op->dev_outs) return -1;
    o->alloc = wpy_device_alloc;
    o->alloc_ctx = op;
  }
  return 0;
}

/* ------------------------------------------------------------------ operations */
/* What every operation entry point starts with: a live world, the group
 * (None: the world), and a sweep of finished ops whose Python handle is gone.
 * NULL with an exception set on failure. */
weft_group *wpy_op_group(PyObject *group) {
  if (require_world() < 0) return NULL;
  weft_group *g = wpy_group_of(group);
  if (g) wpy_sweep_orphans(0);
  return g;
}

static PyObject *py_allreduce(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "input", "output", "op", "prescale", "postscale", "priority", "keep", "group",
                           "stream", NULL};
  const char *name;
  PyObject *in, *out, *keep = NULL, *group = NULL, *stream = NULL;
  int rop = WEFT_OP_SUM, prio = 0;
  double pre = 1.0, post = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|iddiOOO:allreduce", kwlist, &name, &in, &out, &rop, &pre, &post,
                                   &prio, &keep, &group, &stream))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_ALLREDUCE, keep);
  if (!op) return NULL;
  if (wpy_parse_tensor(in, 0, "allreduce input", &op->in) < 0 ||
      wpy_parse_tensor(out, 1, "allreduce output", &op->out) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_op_options o;
  wpy_options(&o, pre, post, prio);
  if (wpy_device_options(op, &o, stream, NULL) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = weft_allreduce(g, name, &op->in.t, &op->out.t, (weft_reduce_op)rop, &o,
                                  &req);
  return wpy_submitted(op, st, req, name);
}

static PyObject *py_allgather(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "input", "priority", "keep", "group", "stream", "alloc", NULL};
  const char *name;
  PyObject *in, *keep = NULL, *group = NULL, *stream = NULL, *alloc = NULL;
  int prio = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|iOOOO:allgather", kwlist, &name, &in, &prio, &keep, &group, &stream,
                                   &alloc))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_ALLGATHER, keep);
  if (!op) return NULL;
  if (wpy_parse_tensor(in, 0, "allgather input", &op->in) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_op_options o;
  wpy_options(&o, 1.0, 1.0, prio);
  o.alloc = wpy_output_alloc;
  op->lib_alloc = 1;
  if (wpy_device_options(op, &o, stream, alloc) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = weft_allgather(g, name, &op->in.t, &o, &req);
  return wpy_submitted(op, st, req, name);
}

static PyObject *py_broadcast(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "tensor", "root", "priority", "keep", "group", "stream", NULL};
  const char *name;
  PyObject *t, *keep = NULL, *group = NULL, *stream = NULL;
  int root, prio = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOi|iOOO:broadcast", kwlist, &name, &t, &root, &prio, &keep, &group,
                                   &stream))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_BROADCAST, keep);
  if (!op) return NULL;
  if (wpy_parse_tensor(t, 1, "broadcast tensor", &op->in) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_op_options o;
  wpy_options(&o, 1.0, 1.0, prio);
  if (wpy_device_options(op, &o, stream, NULL) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = weft_broadcast(g, name, &op->in.t, root, &o, &req);
  return wpy_submitted(op, st, req, name);
}

static PyObject *py_alltoall(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "input", "splits", "priority", "keep", "group", "stream", "alloc", NULL};
  const char *name;
  PyObject *in, *splits = Py_None, *keep = NULL, *group = NULL, *stream = NULL, *alloc = NULL;
  int prio = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|OiOOOO:alltoall", kwlist, &name, &in, &splits, &prio, &keep, &group,
                                   &stream, &alloc))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  int size = weft_group_size(g);
  int64_t *sp = NULL;
  if (splits != Py_None) {
    PyObject *seq = PySequence_Fast(splits, "alltoall: splits must be a sequence of ints");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != size) {
      PyErr_Format(PyExc_ValueError, "alltoall('%s'): splits has %zd entries; it needs one per rank (%d)", name,
                   PySequence_Fast_GET_SIZE(seq), size);
      Py_DECREF(seq);
      return NULL;
    }
    sp = PyMem_Calloc((size_t)size, sizeof *sp);
    for (int j = 0; sp && j < size; j++) {
      sp[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
      if (sp[j] == -1 && PyErr_Occurred()) {
        PyMem_Free(sp);
        Py_DECREF(seq);
        return NULL;
      }
    }
    Py_DECREF(seq);
    if (!sp) return PyErr_NoMemory();
  }
  wpy_op *op = wpy_op_new(WPY_ALLTOALL, keep);
  if (!op || wpy_parse_tensor(in, 0, "alltoall input", &op->in) < 0) {
    PyMem_Free(sp);
    wpy_op_free(op);
    return NULL;
  }
  weft_op_options o;
  wpy_options(&o, 1.0, 1.0, prio);
  o.alloc = wpy_output_alloc;
  op->lib_alloc = 1;
  if (wpy_device_options(op, &o, stream, alloc) < 0) {
    PyMem_Free(sp);
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = weft_alltoall(g, name, &op->in.t, sp, &o, &req);
  PyMem_Free(sp); /* copied at submission */
  return wpy_submitted(op, st, req, name);
}

static PyObject *py_reducescatter(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "input", "output", "op", "prescale", "postscale", "priority", "keep", "group",
                           "stream", "alloc", NULL};
  const char *name;
  PyObject *in, *out = Py_None, *keep = NULL, *group = NULL, *stream = NULL, *alloc = NULL;
  int rop = WEFT_OP_SUM, prio = 0;
  double pre = 1.0, post = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|OiddiOOOO:reducescatter", kwlist, &name, &in, &out, &rop, &pre,
                                   &post, &prio, &keep, &group, &stream, &alloc))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_REDUCESCATTER, keep);
  if (!op) return NULL;
  if (wpy_parse_tensor(in, 0, "reducescatter input", &op->in) < 0 ||
      (out != Py_None && wpy_parse_tensor(out, 1, "reducescatter output", &op->out) < 0)) {
    wpy_op_free(op);
    return NULL;
  }
  weft_op_options o;
  wpy_options(&o, pre, post, prio);
  if (wpy_device_options(op, &o, stream, out == Py_None ? alloc : NULL) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  if (op->dev_alloc) op->lib_alloc = 1; /* a device output weft sizes: from alloc */
  weft_request *req = NULL;
  weft_status st = weft_reducescatter(g, name, &op->in.t, out != Py_None ? &op->out.t : NULL,
                                      (weft_reduce_op)rop, &o, &req);
  return wpy_submitted(op, st, req, name);
}

static PyObject *py_barrier(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "group", NULL};
  const char *name = NULL;
  PyObject *group = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zO:barrier", kwlist, &name, &group)) return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_BARRIER, NULL);
  if (!op) return NULL;
  weft_request *req = NULL;
  weft_status st = weft_barrier(g, name, NULL, &req);
  return wpy_submitted(op, st, req, name ? name : "barrier");
}

static PyObject *py_join(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"group", NULL};
  PyObject *group = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:join", kwlist, &group)) return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(WPY_JOIN, NULL);
  if (!op) return NULL;
  weft_request *req = NULL;
  weft_status st = weft_join(g, NULL, &req);
  return wpy_submitted(op, st, req, "join");
}

/* send(tensor, dst, key=0, keep=None, group=None) / recv(tensor, src, key=0,
 * keep=None, group=None): weft_send / weft_recv (src -2: any source). */
static PyObject *p2p(PyObject *args, PyObject *kw, int recv) {
  static char *kwlist[] = {"tensor", "peer", "key", "keep", "group", NULL};
  PyObject *t, *keep = NULL, *group = NULL;
  int peer;
  unsigned long long key = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, recv ? "Oi|KOO:recv" : "Oi|KOO:send", kwlist, &t, &peer, &key, &keep,
                                   &group))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  wpy_op *op = wpy_op_new(recv ? WPY_RECV : WPY_SEND, keep);
  if (!op) return NULL;
  if (wpy_parse_tensor(t, recv, recv ? "recv tensor" : "send tensor", &op->in) < 0) {
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = recv ? weft_recv(g, &op->in.t, peer, key, NULL, &req) : weft_send(g, &op->in.t, peer, key, NULL, &req);
  return wpy_submitted(op, st, req, recv ? "recv" : "send");
}
static PyObject *py_send(PyObject *self, PyObject *args, PyObject *kw) { return (void)self, p2p(args, kw, 0); }
static PyObject *py_recv(PyObject *self, PyObject *args, PyObject *kw) { return (void)self, p2p(args, kw, 1); }

/* ------------------------------------------------------------------ world */
static PyObject *py_init(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"rank", "size", "addr", "secret", "timeout", NULL};
  weft_config cfg = WEFT_CONFIG_INIT;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|iizzd:init", kwlist, &cfg.rank, &cfg.size, &cfg.addr, &cfg.secret,
                                   &cfg.timeout_seconds))
    return NULL;
  if (wpy_world && !wpy_stopping) Py_RETURN_FALSE; /* already initialized: like Horovod, a no-op */
  if (g_initializing || wpy_stopping) {
    PyErr_SetString(PyExc_RuntimeError, "weft init/shutdown is already running in another thread");
    return NULL;
  }
  g_initializing = 1;
  weft_world *w = NULL;
  weft_status st;
  char msg[1024];
  /* rendezvous blocks for as long as the other ranks take to start */
  Py_BEGIN_ALLOW_THREADS
  st = weft_init(&cfg, &w);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  g_initializing = 0;
  if (st != WEFT_OK) return st == WEFT_ERR_INVALID_ARGUMENT ? wpy_raise(st, msg) : raise_weft_error(st, msg);
  wpy_world = w;
  wpy_world_gen++;
  Py_RETURN_TRUE;
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (!wpy_world || wpy_stopping) Py_RETURN_NONE;
  wpy_stopping = 1;
  /* threads blocked in weft_wait leave it within one wait slice */
  while (wpy_waiters > 0) {
    Py_BEGIN_ALLOW_THREADS
    usleep(1000);
    Py_END_ALLOW_THREADS
  }
  wpy_remote_shutdown(); /* weft_finalize requires every remote call handle freed */
  weft_world *w = wpy_world;
  weft_status st;
  Py_BEGIN_ALLOW_THREADS
  st = weft_finalize(w);
  Py_END_ALLOW_THREADS
  wpy_world = NULL;
  wpy_stopping = 0;
  wpy_sweep_orphans(1); /* finalize completed everything */
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  Py_RETURN_NONE;
}

static PyObject *py_is_initialized(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(wpy_world && !wpy_stopping);
}

static PyObject *world_int(int (*fn)(const weft_world *)) {
  if (!wpy_world) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return NULL;
  }
  return PyLong_FromLong(fn(wpy_world));
}

#define WORLD_GETTER(fn)                                          \
  static PyObject *py_##fn(PyObject *self, PyObject *unused) {  \
    (void)self;                                                   \
    (void)unused;                                                 \
    return world_int(weft_##fn);                                  \
  }
WORLD_GETTER(rank)
WORLD_GETTER(size)
WORLD_GETTER(local_rank)
WORLD_GETTER(local_size)
WORLD_GETTER(cross_rank)
WORLD_GETTER(cross_size)

/* elastic_hosts_updated() -> int: weft_elastic_hosts_updated's WEFT_HOSTS_* bits (0: none). */
static PyObject *py_elastic_hosts_updated(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (require_world() != 0) return NULL;
  int upd = 0;
  weft_status st;
  Py_BEGIN_ALLOW_THREADS
  st = weft_elastic_hosts_updated(wpy_world, &upd);
  Py_END_ALLOW_THREADS
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  return PyLong_FromLong(upd);
}

static PyObject *py_generation(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (require_world() != 0) return NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)weft_generation(wpy_world));
}

static PyObject *py_abort(PyObject *self, PyObject *args) {
  (void)self;
  const char *reason;
  if (!PyArg_ParseTuple(args, "s:abort", &reason)) return NULL;
  if (!wpy_world) Py_RETURN_NONE;
  weft_status st = weft_abort(wpy_world, reason);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  Py_RETURN_NONE;
}

/* None while healthy, else (status, message) of the world's first failure. */
static PyObject *py_async_error(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (!wpy_world) Py_RETURN_NONE;
  weft_status st = weft_async_error(wpy_world);
  if (st == WEFT_OK) Py_RETURN_NONE;
  return Py_BuildValue("(is)", (int)st, weft_last_error());
}

static PyObject *py_dtype_size(PyObject *self, PyObject *args) {
  (void)self;
  int dt;
  if (!PyArg_ParseTuple(args, "i:dtype_size", &dt)) return NULL;
  return PyLong_FromSize_t(weft_dtype_size((weft_dtype)dt));
}

/* device_available(kind) -> (count, None) when the backend of that
 * WEFT_DEVICE_KIND_* loads, else (0, the reason). Needs no world. */
static PyObject *py_device_available(PyObject *self, PyObject *args) {
  (void)self;
  int kind, count = 0;
  if (!PyArg_ParseTuple(args, "i:device_available", &kind)) return NULL;
  weft_status st;
  char msg[1024];
  Py_BEGIN_ALLOW_THREADS /* the first call dlopens a runtime */
  st = weft_device_available(kind, &count);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  if (st == WEFT_ERR_INVALID_ARGUMENT) return wpy_raise(st, msg);
  if (st != WEFT_OK) return Py_BuildValue("(is)", 0, msg);
  return Py_BuildValue("(iO)", count, Py_None);
}

static PyObject *py_status_string(PyObject *self, PyObject *args) {
  (void)self;
  int st;
  if (!PyArg_ParseTuple(args, "i:status_string", &st)) return NULL;
  return PyUnicode_FromString(weft_status_string((weft_status)st));
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef methods[] = {
    {"init", KW py_init, METH_VARARGS | METH_KEYWORDS,
     "init(rank=-1, size=-1, addr=None, secret=None, timeout=0.0) -> bool: join the job (blocking; the\n"
     "environment fills what is not given). False if already initialized."},
    {"shutdown", py_shutdown, METH_NOARGS, "shutdown(): leave the job; pending operations fail with SHUTDOWN."},
    {"is_initialized", py_is_initialized, METH_NOARGS, "is_initialized() -> bool"},
    {"rank", py_rank, METH_NOARGS, "rank() -> int"},
    {"size", py_size, METH_NOARGS, "size() -> int"},
    {"local_rank", py_local_rank, METH_NOARGS, "local_rank() -> int: rank among this host's ranks"},
    {"local_size", py_local_size, METH_NOARGS, "local_size() -> int: ranks on this host"},
    {"cross_rank", py_cross_rank, METH_NOARGS, "cross_rank() -> int: this host's index"},
    {"cross_size", py_cross_size, METH_NOARGS, "cross_size() -> int: number of hosts"},
    {"elastic_hosts_updated", py_elastic_hosts_updated, METH_NOARGS,
     "elastic_hosts_updated() -> int: weftrun's host updates since this world's generation (HOSTS_* bits; 0: none)"},
    {"generation", py_generation, METH_NOARGS, "generation() -> int: the world's elastic generation (0: not elastic)"},
    {"abort", py_abort, METH_VARARGS, "abort(reason): fail every pending and future operation here and on peers."},
    {"async_error", py_async_error, METH_NOARGS, "async_error() -> None or (status, message)"},
    {"dtype_size", py_dtype_size, METH_VARARGS, "dtype_size(dtype) -> bytes per element (0: unknown)"},
    {"status_string", py_status_string, METH_VARARGS, "status_string(status) -> 'WEFT_ERR_...'"},
    {"device_available", py_device_available, METH_VARARGS,
     "device_available(kind) -> (device count, None) when that WEFT_DEVICE_KIND_* can be used here, else\n"
     "(0, the reason)"},
    {"allreduce", KW py_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(name, input, output, op=SUM, prescale=1.0, postscale=1.0, priority=0, keep=None) -> Handle\n"
     "Every operation also takes group=None and, for device tensors, stream (the consumer stream as an int:\n"
     "completion is then an event on it) and, where weft sizes the output, alloc (nbytes -> (data_ptr, owner))."},
    {"allgather", KW py_allgather, METH_VARARGS | METH_KEYWORDS,
     "allgather(name, input, priority=0, keep=None) -> Handle (output: Handle.output/.shape)"},
    {"broadcast", KW py_broadcast, METH_VARARGS | METH_KEYWORDS,
     "broadcast(name, tensor, root, priority=0, keep=None) -> Handle (in place)"},
    {"alltoall", KW py_alltoall, METH_VARARGS | METH_KEYWORDS,
     "alltoall(name, input, splits=None, priority=0, keep=None) -> Handle (output, recv_splits)"},
    {"reducescatter", KW py_reducescatter, METH_VARARGS | METH_KEYWORDS,
     "reducescatter(name, input, output=None, op=SUM, prescale=1.0, postscale=1.0, priority=0, keep=None) -> Handle"},
    {"send", KW py_send, METH_VARARGS | METH_KEYWORDS,
     "send(tensor, dst, key=0, keep=None, group=None) -> Handle: weft_send to group rank dst"},
    {"recv", KW py_recv, METH_VARARGS | METH_KEYWORDS,
     "recv(tensor, src, key=0, keep=None, group=None) -> Handle: weft_recv from group rank src (ANY_SOURCE: any);\n"
     "Handle.source names the sender once complete"},
    {"barrier", KW py_barrier, METH_VARARGS | METH_KEYWORDS, "barrier(name=None, group=None) -> Handle"},
    {"join", KW py_join, METH_VARARGS | METH_KEYWORDS,
     "join(group=None) -> Handle: this rank has no more data; Handle.last_joined once all have joined"},
    {"grouped_allreduce", KW wpy_grouped_allreduce, METH_VARARGS | METH_KEYWORDS,
     "grouped_allreduce(name, inputs, outputs, op=SUM, prescale=1.0, postscale=1.0, priority=0, keep=None,\n"
     "group=None) -> one Handle for all (tensor i is named '<name>.<i>')"},
    {"grouped_allgather", KW wpy_grouped_allgather, METH_VARARGS | METH_KEYWORDS,
     "grouped_allgather(name, inputs, priority=0, keep=None, group=None) -> one Handle for all (tensor i is\n"
     "named '<name>.<i>'); its output and shape are lists, one entry per tensor"},
    {"grouped_reducescatter", KW wpy_grouped_reducescatter, METH_VARARGS | METH_KEYWORDS,
     "grouped_reducescatter(name, inputs, outputs=None, op=SUM, prescale=1.0, postscale=1.0, priority=0,\n"
     "keep=None, group=None) -> one Handle for all; outputs: a tensor or None (library-allocated: then in the\n"
     "Handle's output and shape lists) per input"},
    {"timeline_start", KW wpy_timeline_start, METH_VARARGS | METH_KEYWORDS,
     "timeline_start(path, mark_cycles=False): write a Chrome-trace timeline ('%r' in path: one per rank)"},
    {"timeline_stop", wpy_timeline_stop, METH_NOARGS, "timeline_stop(): finish the timeline file"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "weft._weft",
    "C core of weft's Python package (see weft/__init__.py for the user-facing API).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__weft(void) {
  if (PyType_Ready(&wpy_HandleType) < 0 || PyType_Ready(&wpy_BufferType) < 0 || PyType_Ready(&wpy_GroupType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  wpy_WeftError = PyErr_NewExceptionWithDoc(
      "weft.WeftError",
      "An error found by weft after submission (ranks disagree, a peer was lost, a timeout, shutdown).\n"
      "Attributes: status (int) and status_name ('WEFT_ERR_MISMATCH', ...).",
      PyExc_RuntimeError, NULL);
  if (!wpy_WeftError) goto fail;
  Py_INCREF(wpy_WeftError);
  if (PyModule_AddObject(m, "WeftError", wpy_WeftError) < 0) goto fail;
  Py_INCREF(&wpy_HandleType);
  if (PyModule_AddObject(m, "Handle", (PyObject *)&wpy_HandleType) < 0) goto fail;
  Py_INCREF(&wpy_BufferType);
  if (PyModule_AddObject(m, "Buffer", (PyObject *)&wpy_BufferType) < 0) goto fail;
  Py_INCREF(&wpy_GroupType);
  if (PyModule_AddObject(m, "Group", (PyObject *)&wpy_GroupType) < 0) goto fail;
  static const struct {
    const char *name;
    long value;
  } consts[] = {
      {"DTYPE_UINT8", WEFT_DTYPE_UINT8},     {"DTYPE_INT8", WEFT_DTYPE_INT8},
      {"DTYPE_UINT16", WEFT_DTYPE_UINT16},   {"DTYPE_INT16", WEFT_DTYPE_INT16},
      {"DTYPE_INT32", WEFT_DTYPE_INT32},     {"DTYPE_INT64", WEFT_DTYPE_INT64},
      {"DTYPE_FLOAT16", WEFT_DTYPE_FLOAT16}, {"DTYPE_BFLOAT16", WEFT_DTYPE_BFLOAT16},
      {"DTYPE_FLOAT32", WEFT_DTYPE_FLOAT32}, {"DTYPE_FLOAT64", WEFT_DTYPE_FLOAT64},
      {"DTYPE_BOOL", WEFT_DTYPE_BOOL},       {"OP_SUM", WEFT_OP_SUM},
      {"OP_AVERAGE", WEFT_OP_AVERAGE},       {"OP_MIN", WEFT_OP_MIN},
      {"OP_MAX", WEFT_OP_MAX},               {"OP_PRODUCT", WEFT_OP_PRODUCT},
      {"HOSTS_REMOVED", WEFT_HOSTS_REMOVED}, {"HOSTS_ADDED", WEFT_HOSTS_ADDED},
      {"OK", WEFT_OK},                       {"IN_PROGRESS", WEFT_IN_PROGRESS},
      {"ERR_INVALID_ARGUMENT", WEFT_ERR_INVALID_ARGUMENT}, {"ERR_MISUSE", WEFT_ERR_MISUSE},
      {"ERR_TIMEOUT", WEFT_ERR_TIMEOUT},     {"ERR_PEER_LOST", WEFT_ERR_PEER_LOST},
      {"ERR_MISMATCH", WEFT_ERR_MISMATCH},   {"ERR_ABORTED", WEFT_ERR_ABORTED},
      {"ERR_SHUTDOWN", WEFT_ERR_SHUTDOWN},   {"ERR_NOT_SUPPORTED", WEFT_ERR_NOT_SUPPORTED},
      {"DEVICE_CPU", WEFT_DEVICE_CPU},       {"DEVICE_KIND_CUDA", WEFT_DEVICE_KIND_CUDA},
      {"DEVICE_KIND_SIM", WEFT_DEVICE_KIND_SIM}, {"ANY_SOURCE", WEFT_ANY_SOURCE},
      {"ERR_CANCELLED", WEFT_ERR_CANCELLED},
  };
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
    if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0) goto fail;
  if (PyModule_AddStringConstant(m, "LIBRARY_VERSION", weft_version()) < 0) goto fail;
  if (wpy_remote_add(m) < 0) goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
