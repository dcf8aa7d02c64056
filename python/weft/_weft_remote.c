/* _weft_remote.c - weft's remote execution (weft_remote_*) for the Python
 * layer (weft.rpc): serving Python functions on this rank, starting calls on
 * other ranks, and RemoteCall objects to poll, wait on and collect.
 *
 * Serving: rpc_serve(dispatch) registers "weft.rpc.<n>" (n = 1 ..
 * WPY_RPC_MAX_IN inputs, one output) with one C function that runs on the
 * callee's remote worker thread (never its engine thread): it takes the GIL,
 * copies the inputs into Buffers (the store's memory is valid only during
 * the call), calls dispatch(inputs) -> (nbytes, fill), allocates the output
 * (uint8[nbytes], the store's memory) and calls fill(memoryview) to write it.
 * The Python layer catches the user function's exceptions itself and encodes
 * them in the output, so a C-level failure here means weft.rpc itself failed.
 *
 * Calling: rpc_call(task, ctx, inputs, out, timeout, fetch) is one execute
 * (inputs: tensors sent inline, or ("id", owner, local) objects on the
 * callee), chained, when fetch is set, with a fetch of its output (which the
 * callee serves once the output is produced): one RemoteCall for both, whose
 * output is a Buffer adopted from the fetch (malloc'd on the service thread,
 * no GIL). Every RemoteCall is on a list: shutdown frees their weft handles
 * before weft_finalize (which requires that). */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_weft.h"

#define WPY_RPC_MAX_IN 65 /* the header and up to 64 tensors or objects */

static PyObject *g_dispatch;            /* dispatch(inputs) -> (nbytes, fill), or NULL: not serving */
static unsigned long g_registered_gen;  /* the world in which the functions are registered (0: none) */

/* ------------------------------------------------------------------ serving (worker thread) */
static size_t tensor_nbytes(const weft_tensor *t) {
  size_t n = weft_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

/* A Python error raised while serving becomes the call's failure message. */
static weft_status fail_from_python(weft_remote_result *out, const char *what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *s = value ? PyObject_Str(value) : NULL;
  const char *m = s ? PyUnicode_AsUTF8(s) : NULL;
  char msg[900];
  snprintf(msg, sizeof msg, "weft.rpc on rank %d: %s: %s", wpy_world ? weft_rank(wpy_world) : -1, what,
           m ? m : "(no message)");
  PyErr_Clear();
  Py_XDECREF(s);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  weft_remote_result_fail(out, msg);
  return WEFT_ERR_INTERNAL;
}

static weft_status serve_fn(void *ctx, int n_in, const weft_tensor *in, weft_remote_result *out) {
  (void)ctx;
  weft_status st = WEFT_OK;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *fn = g_dispatch, *ins = NULL, *r = NULL, *mv = NULL, *done = NULL;
  if (!fn) {
    char msg[160];
    snprintf(msg, sizeof msg, "weft.rpc is not running on rank %d (rpc.init not called there, or shut down)",
             wpy_world ? weft_rank(wpy_world) : -1);
    weft_remote_result_fail(out, msg);
    PyGILState_Release(g);
    return WEFT_ERR_NOT_FOUND;
  }
  Py_INCREF(fn);
  ins = PyList_New(n_in);
  for (int i = 0; ins && i < n_in; i++) {
    size_t nb = tensor_nbytes(&in[i]);
    void *p = malloc(nb ? nb : 1);
    PyObject *buf = p ? wpy_buffer_adopt(p, (Py_ssize_t)nb) : PyErr_NoMemory();
    if (!buf) {
      free(p);
      Py_CLEAR(ins);
      break;
    }
    if (nb) memcpy(p, in[i].data, nb);
    PyObject *shape = PyTuple_New(in[i].ndim);
    for (int d = 0; shape && d < in[i].ndim; d++) {
      PyObject *v = PyLong_FromLongLong(in[i].shape[d]);
      if (!v) Py_CLEAR(shape);
      else PyTuple_SET_ITEM(shape, d, v);
    }
    PyObject *item = shape ? Py_BuildValue("(OiO)", buf, (int)in[i].dtype, shape) : NULL;
    Py_XDECREF(shape);
    Py_DECREF(buf);
    if (!item) {
      Py_CLEAR(ins);
      break;
    }
    PyList_SET_ITEM(ins, i, item);
  }
  if (!ins) {
    st = fail_from_python(out, "taking the inputs");
    goto done;
  }
  r = PyObject_CallFunctionObjArgs(fn, ins, NULL);
  Py_ssize_t nbytes;
  PyObject *fill;
  if (!r || !PyArg_ParseTuple(r, "nO:dispatch", &nbytes, &fill) || nbytes < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative size");
    st = fail_from_python(out, "dispatch");
    goto done;
  }
  int64_t shape[1] = {nbytes};
  void *data;
  st = weft_remote_result_alloc(out, 0, WEFT_DTYPE_UINT8, 1, shape, &data);
  if (st != WEFT_OK) {
    weft_remote_result_fail(out, "no memory for the result");
    goto done;
  }
  mv = PyMemoryView_FromMemory(data, nbytes, PyBUF_WRITE);
  done = mv ? PyObject_CallFunctionObjArgs(fill, mv, NULL) : NULL;
  if (!done) st = fail_from_python(out, "writing the result");
  if (mv) { /* no Python object may keep pointing at the store's memory */
    PyObject *rel = PyObject_CallMethod(mv, "release", NULL);
    if (!rel && st == WEFT_OK) st = fail_from_python(out, "a view of the result outlived the call");
    Py_XDECREF(rel);
    PyErr_Clear();
  }
done:
  Py_XDECREF(done);
  Py_XDECREF(mv);
  Py_XDECREF(r);
  Py_XDECREF(ins);
  Py_DECREF(fn);
  PyGILState_Release(g);
  return st;
}

/* rpc_serve(dispatch): serve with dispatch (None: stop serving; calls then
 * fail naming this rank). Registers the functions once per world. */
static PyObject *py_rpc_serve(PyObject *self, PyObject *arg) {
  (void)self;
  if (arg != Py_None && !PyCallable_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "rpc_serve: dispatch must be callable or None");
    return NULL;
  }
  if (arg != Py_None && !wpy_world) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return NULL;
  }
  if (arg != Py_None && g_registered_gen != wpy_world_gen) {
    for (int n = 1; n <= WPY_RPC_MAX_IN; n++) {
      char name[32];
      snprintf(name, sizeof name, "weft.rpc.%d", n);
      weft_status st = weft_remote_register(wpy_world, name, n, 1, serve_fn, NULL);
      if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
    }
    g_registered_gen = wpy_world_gen;
  }
  PyObject *old = g_dispatch;
  g_dispatch = arg == Py_None ? NULL : (Py_INCREF(arg), arg);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ RemoteCall */
typedef struct wpy_rcall {
  PyObject_HEAD
  weft_remote_call *exec, *fetch; /* NULL once freed (or never made) */
  weft_status status;             /* WEFT_IN_PROGRESS until completion is observed */
  int waiters;                    /* threads inside weft_remote_wait on it (the handles must outlive them) */
  PyObject *what, *error, *output;
  struct wpy_rcall *prev, *next;  /* the list shutdown walks */
} wpy_rcall;

static wpy_rcall *g_calls;
static PyTypeObject RemoteCallType;

static void unlist(wpy_rcall *c) {
  if (c->prev) c->prev->next = c->next;
  else if (g_calls == c) g_calls = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void free_handles(wpy_rcall *c) {
  if (c->fetch) {
    weft_tensor o;
    /* fetched memory comes from wpy_output_alloc: ours unless a Buffer adopted it */
    if (!c->output && weft_remote_test(c->fetch) == WEFT_OK && weft_remote_call_output(c->fetch, &o) == WEFT_OK)
      free(o.data);
    weft_remote_call_free(c->fetch);
  }
  if (c->exec) weft_remote_call_free(c->exec);
  c->exec = c->fetch = NULL;
  unlist(c);
}

void wpy_remote_shutdown(void) {
  while (g_calls) {
    wpy_rcall *c = g_calls;
    if (c->status == WEFT_IN_PROGRESS) {
      c->status = WEFT_ERR_SHUTDOWN;
      Py_XSETREF(c->error, PyUnicode_FromString("weft was shut down with this call pending"));
    }
    free_handles(c);
  }
  Py_CLEAR(g_dispatch);
}

/* Records completion: the first failure's message (the execute's before the
 * fetch's, which only repeats it), or the fetched output. */
static int complete(wpy_rcall *c) {
  weft_status se = c->exec ? weft_remote_test(c->exec) : WEFT_OK;
  weft_status sf = c->fetch ? weft_remote_test(c->fetch) : WEFT_OK;
  weft_remote_call *bad = se != WEFT_OK ? c->exec : sf != WEFT_OK ? c->fetch : NULL;
  c->status = bad ? weft_remote_test(bad) : WEFT_OK;
  int rc = 0;
  if (bad) {
    const char *m = weft_remote_call_error(bad);
    c->error = PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace");
    if (!c->error) rc = -1;
  } else if (c->fetch) {
    weft_tensor o;
    weft_remote_call_output(c->fetch, &o);
    c->output = wpy_buffer_adopt(o.data, (Py_ssize_t)tensor_nbytes(&o));
    if (!c->output) {
      free(o.data);
      rc = -1;
    }
  }
  if (c->waiters == 0) free_handles(c);
  return rc;
}

static int pending(wpy_rcall *c) {
  return (c->exec && weft_remote_test(c->exec) == WEFT_IN_PROGRESS) ||
         (c->fetch && weft_remote_test(c->fetch) == WEFT_IN_PROGRESS);
}

static PyObject *rcall_poll(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_rcall *c = (wpy_rcall *)self;
  if (c->status == WEFT_IN_PROGRESS) {
    if (pending(c)) Py_RETURN_FALSE;
    if (complete(c) < 0) return NULL;
  }
  Py_RETURN_TRUE;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* wait(timeout=None) -> bool: True once complete (failed or not: see status
 * and error), False if timeout seconds passed first. GIL released while
 * blocked, in short slices (signals, shutdown). */
static PyObject *rcall_wait(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  wpy_rcall *c = (wpy_rcall *)self;
  double limit = -1;
  PyObject *tmo = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &tmo)) return NULL;
  if (tmo != Py_None && (limit = PyFloat_AsDouble(tmo)) == -1 && PyErr_Occurred()) return NULL;
  double start = now_seconds();
  while (c->status == WEFT_IN_PROGRESS) {
    if (wpy_stopping) { /* shutdown frees the handles: leave, it completes the call */
      Py_BEGIN_ALLOW_THREADS
      usleep(2000);
      Py_END_ALLOW_THREADS
      continue;
    }
    if (!pending(c)) {
      if (complete(c) < 0) return NULL;
      break;
    }
    double slice = 0.05;
    if (limit >= 0) {
      double left = limit - (now_seconds() - start);
      if (left <= 0) Py_RETURN_FALSE;
      if (left < slice) slice = left;
    }
    weft_remote_call *h = c->exec && weft_remote_test(c->exec) == WEFT_IN_PROGRESS ? c->exec : c->fetch;
    c->waiters++;
    wpy_waiters++;
    Py_BEGIN_ALLOW_THREADS
    weft_remote_wait(h, slice);
    Py_END_ALLOW_THREADS
    c->waiters--;
    wpy_waiters--;
    if (c->status != WEFT_IN_PROGRESS && c->waiters == 0) free_handles(c); /* completed by another thread */
    if (c->status == WEFT_IN_PROGRESS && PyErr_CheckSignals() < 0) return NULL;
  }
  Py_RETURN_TRUE;
}

static PyObject *rcall_cancel(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_rcall *c = (wpy_rcall *)self;
  if (c->status != WEFT_IN_PROGRESS) Py_RETURN_FALSE;
  if (c->exec && weft_remote_test(c->exec) == WEFT_IN_PROGRESS) weft_remote_cancel(c->exec);
  if (c->fetch && weft_remote_test(c->fetch) == WEFT_IN_PROGRESS) weft_remote_cancel(c->fetch);
  Py_RETURN_TRUE;
}

static void rcall_dealloc(PyObject *self) {
  wpy_rcall *c = (wpy_rcall *)self;
  free_handles(c); /* a pending call is cancelled */
  Py_XDECREF(c->what);
  Py_XDECREF(c->error);
  Py_XDECREF(c->output);
  PyObject_Free(self);
}

static PyObject *get_or_none(PyObject *o) {
  if (!o) Py_RETURN_NONE;
  Py_INCREF(o);
  return o;
}
static PyObject *rcall_status(PyObject *self, void *x) {
  (void)x;
  return PyLong_FromLong((long)((wpy_rcall *)self)->status);
}
static PyObject *rcall_error(PyObject *self, void *x) {
  (void)x;
  return get_or_none(((wpy_rcall *)self)->error);
}
static PyObject *rcall_output(PyObject *self, void *x) {
  (void)x;
  return get_or_none(((wpy_rcall *)self)->output);
}
static PyObject *rcall_what(PyObject *self, void *x) {
  (void)x;
  return get_or_none(((wpy_rcall *)self)->what);
}

static PyGetSetDef rcall_getset[] = {
    {"status", rcall_status, NULL, "weft status (1: in progress, 0: ok, < 0: the error)", NULL},
    {"error", rcall_error, NULL, "the error message once failed, else None", NULL},
    {"output", rcall_output, NULL, "the fetched output (a Buffer) once complete, else None", NULL},
    {"what", rcall_what, NULL, "what the call is, for messages", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef rcall_methods[] = {
    {"poll", rcall_poll, METH_NOARGS, "poll() -> bool: True once complete (never raises for a failed call)"},
    {"wait", (PyCFunction)(void (*)(void))rcall_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool: block (GIL released) until complete; False if timeout passed first"},
    {"cancel", rcall_cancel, METH_NOARGS, "cancel() -> bool: give up on a pending call (weft_remote_cancel)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RemoteCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.RemoteCall",
    .tp_basicsize = sizeof(wpy_rcall),
    .tp_dealloc = rcall_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A remote execute (and the fetch of its output) or delete in flight.",
    .tp_methods = rcall_methods,
    .tp_getset = rcall_getset,
};

static wpy_rcall *rcall_new(const char *what) {
  wpy_rcall *c = PyObject_New(wpy_rcall, &RemoteCallType);
  if (!c) return NULL;
  c->exec = c->fetch = NULL;
  c->status = WEFT_IN_PROGRESS;
  c->waiters = 0;
  c->error = c->output = NULL;
  c->prev = NULL;
  c->next = g_calls;
  if (g_calls) g_calls->prev = c;
  g_calls = c;
  c->what = PyUnicode_FromString(what);
  if (!c->what) {
    Py_DECREF(c);
    return NULL;
  }
  return c;
}

/* ------------------------------------------------------------------ calling */
static int live_world(void) {
  if (wpy_stopping || !wpy_world) {
    PyErr_SetString(PyExc_ValueError, wpy_stopping ? "weft is shutting down" : "weft has not been initialized");
    return -1;
  }
  return 0;
}

static int parse_id(PyObject *o, weft_remote_id *id) {
  long long owner;
  unsigned long long local;
  if (!PyArg_ParseTuple(o, "LK", &owner, &local)) return -1;
  id->owner = (int32_t)owner;
  id->local = (uint64_t)local;
  return 0;
}

/* rpc_id() -> (owner, local): a fresh object id of this rank. */
static PyObject *py_rpc_id(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (live_world() < 0) return NULL;
  weft_remote_id id;
  weft_status st = weft_remote_id_new(wpy_world, &id);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  return Py_BuildValue("(iK)", (int)id.owner, (unsigned long long)id.local);
}

/* rpc_context(task) -> ctx: a context on task (blocking, GIL released). */
static PyObject *py_rpc_context(PyObject *self, PyObject *args) {
  (void)self;
  int task;
  if (!PyArg_ParseTuple(args, "i:rpc_context", &task) || live_world() < 0) return NULL;
  uint64_t ctx = 0;
  weft_status st;
  char msg[1024];
  weft_world *w = wpy_world;
  wpy_waiters++;
  Py_BEGIN_ALLOW_THREADS
  st = weft_remote_context_create(w, task, 0, &ctx);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  wpy_waiters--;
  if (st != WEFT_OK) return wpy_raise(st, msg);
  return PyLong_FromUnsignedLongLong((unsigned long long)ctx);
}

/* rpc_context_close(task, ctx): blocking, GIL released. */
static PyObject *py_rpc_context_close(PyObject *self, PyObject *args) {
  (void)self;
  int task;
  unsigned long long ctx;
  if (!PyArg_ParseTuple(args, "iK:rpc_context_close", &task, &ctx) || live_world() < 0) return NULL;
  weft_status st;
  char msg[1024];
  weft_world *w = wpy_world;
  wpy_waiters++;
  Py_BEGIN_ALLOW_THREADS
  st = weft_remote_context_close(w, task, ctx);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  wpy_waiters--;
  if (st != WEFT_OK) return wpy_raise(st, msg);
  Py_RETURN_NONE;
}

static void remote_options(weft_remote_options *o, double timeout) {
  weft_remote_options init = WEFT_REMOTE_OPTIONS_INIT;
  *o = init;
  o->timeout_seconds = timeout > 0 ? timeout : 0.0;
  o->alloc = wpy_output_alloc;
}

/* rpc_call(task, ctx, inputs, out, timeout, fetch, what) -> RemoteCall.
 * inputs: a sequence of tensors (buffer objects or (data_ptr, dtype, shape)
 * triples, copied at the call) or ("id", owner, local) objects on task;
 * the function is weft.rpc.<len(inputs)>. */
static PyObject *py_rpc_call(PyObject *self, PyObject *args) {
  (void)self;
  int task, fetch;
  unsigned long long ctx;
  PyObject *ins, *outo;
  double timeout;
  const char *what;
  if (!PyArg_ParseTuple(args, "iKOOdps:rpc_call", &task, &ctx, &ins, &outo, &timeout, &fetch, &what) ||
      live_world() < 0)
    return NULL;
  weft_remote_id out;
  if (parse_id(outo, &out) < 0) return NULL;
  PyObject *seq = PySequence_Fast(ins, "rpc_call: inputs must be a sequence");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n < 1 || n > WPY_RPC_MAX_IN) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "rpc_call: %zd inputs (1..%d)", n, WPY_RPC_MAX_IN);
    return NULL;
  }
  wpy_tensor *ts = PyMem_Calloc((size_t)n, sizeof *ts);
  weft_remote_input *in = PyMem_Calloc((size_t)n, sizeof *in);
  wpy_rcall *c = NULL;
  if (!ts || !in) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 3 && PyUnicode_Check(PyTuple_GET_ITEM(o, 0))) {
      PyObject *pair = PyTuple_GetSlice(o, 1, 3);
      int rc = pair ? parse_id(pair, &in[i].id) : -1;
      Py_XDECREF(pair);
      if (rc < 0) goto out;
    } else {
      if (wpy_parse_tensor(o, 0, "rpc argument", &ts[i]) < 0) goto out;
      in[i].tensor = &ts[i].t;
    }
  }
  char fname[32];
  snprintf(fname, sizeof fname, "weft.rpc.%zd", n);
  weft_remote_options opt;
  remote_options(&opt, timeout);
  if (!(c = rcall_new(what))) goto out;
  weft_status st = weft_remote_execute(wpy_world, task, ctx, fname, (int)n, in, 1, &out, 0, &opt, &c->exec);
  if (st == WEFT_OK && fetch) st = weft_remote_fetch(wpy_world, task, ctx, out, &opt, &c->fetch);
  if (st != WEFT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    Py_CLEAR(c); /* frees (and cancels) what was started */
    wpy_raise(st, msg);
  }
out:
  for (Py_ssize_t i = 0; ts && i < n; i++) wpy_tensor_release(&ts[i]); /* inline tensors were copied */
  PyMem_Free(ts);
  PyMem_Free(in);
  Py_DECREF(seq);
  return (PyObject *)c;
}

/* rpc_delete(task, ctx, ids, timeout) -> RemoteCall: frees objects on task. */
static PyObject *py_rpc_delete(PyObject *self, PyObject *args) {
  (void)self;
  int task;
  unsigned long long ctx;
  PyObject *ids;
  double timeout;
  if (!PyArg_ParseTuple(args, "iKOd:rpc_delete", &task, &ctx, &ids, &timeout) || live_world() < 0) return NULL;
  PyObject *seq = PySequence_Fast(ids, "rpc_delete: ids must be a sequence of (owner, local)");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  weft_remote_id *v = PyMem_Calloc(n ? (size_t)n : 1, sizeof *v);
  wpy_rcall *c = NULL;
  if (!v) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (parse_id(PySequence_Fast_GET_ITEM(seq, i), &v[i]) < 0) goto out;
  weft_remote_options opt;
  remote_options(&opt, timeout);
  if (!(c = rcall_new("delete"))) goto out;
  weft_status st = weft_remote_delete(wpy_world, task, ctx, (int)n, v, &opt, &c->exec);
  if (st != WEFT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    Py_CLEAR(c);
    wpy_raise(st, msg);
  }
out:
  PyMem_Free(v);
  Py_DECREF(seq);
  return (PyObject *)c;
}

/* rpc_stats() -> dict of weft_remote_stats. */
static PyObject *py_rpc_stats(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (live_world() < 0) return NULL;
  weft_remote_stats s;
  weft_status st = weft_remote_stats_get(wpy_world, &s);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  return Py_BuildValue("{sLsLsLsLsL}", "objects", (long long)s.objects, "contexts", (long long)s.contexts,
                       "calls_pending", (long long)s.calls_pending, "orphans_freed", (long long)s.orphans_freed,
                       "collected", (long long)s.collected);
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef remote_methods[] = {
    {"rpc_serve", py_rpc_serve, METH_O, "rpc_serve(dispatch or None): serve weft.rpc calls on this rank"},
    {"rpc_id", py_rpc_id, METH_NOARGS, "rpc_id() -> (owner, local): a fresh remote object id"},
    {"rpc_context", py_rpc_context, METH_VARARGS, "rpc_context(task) -> ctx (blocking)"},
    {"rpc_context_close", py_rpc_context_close, METH_VARARGS, "rpc_context_close(task, ctx) (blocking)"},
    {"rpc_call", py_rpc_call, METH_VARARGS,
     "rpc_call(task, ctx, inputs, out, timeout, fetch, what) -> RemoteCall: execute weft.rpc.<n> (and fetch out)"},
    {"rpc_delete", py_rpc_delete, METH_VARARGS, "rpc_delete(task, ctx, ids, timeout) -> RemoteCall"},
    {"rpc_stats", py_rpc_stats, METH_NOARGS, "rpc_stats() -> dict (weft_remote_stats)"},
    {NULL, NULL, 0, NULL},
};

int wpy_remote_add(PyObject *m) {
  if (PyType_Ready(&RemoteCallType) < 0) return -1;
  Py_INCREF(&RemoteCallType);
  if (PyModule_AddObject(m, "RemoteCall", (PyObject *)&RemoteCallType) < 0) return -1;
  if (PyModule_AddIntConstant(m, "RPC_MAX_INPUTS", WPY_RPC_MAX_IN) < 0) return -1;
  for (PyMethodDef *d = remote_methods; d->ml_name; d++) {
    PyObject *f = PyCFunction_New(d, NULL);
    if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
      Py_XDECREF(f);
      return -1;
    }
  }
  return 0;
}
