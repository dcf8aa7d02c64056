/* _weft_grouped.c - the grouped operations of weft's Python extension
 * (grouped_allreduce, grouped_allgather, grouped_reducescatter): n tensors
 * submitted as one request (weft_grouped_*), their outputs given or
 * allocated by the library per tensor. The module table is _weft.c's. */
#include <stdio.h>

#include "_weft.h"

/* Parses a sequence of n tensor arguments into ts (zeroed, n entries):
 * entries not parsed keep no view, so releasing all n is always right. */
static int parse_tensors(PyObject *seq, Py_ssize_t n, int writable, const char *what, wpy_tensor *ts) {
  for (Py_ssize_t i = 0; i < n; i++)
    if (wpy_parse_tensor(PySequence_Fast_GET_ITEM(seq, i), writable, what, &ts[i]) < 0) return -1;
  return 0;
}

PyObject *wpy_grouped_allreduce(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "inputs", "outputs", "op", "prescale", "postscale", "priority", "keep", "group",
                           "stream", NULL};
  const char *name;
  PyObject *ins, *outs, *keep = NULL, *group = NULL, *stream = NULL;
  int rop = WEFT_OP_SUM, prio = 0;
  double pre = 1.0, post = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|iddiOOO:grouped_allreduce", kwlist, &name, &ins, &outs, &rop, &pre,
                                   &post, &prio, &keep, &group, &stream))
    return NULL;
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  PyObject *in_seq = PySequence_Fast(ins, "grouped_allreduce: inputs must be a sequence of tensors");
  PyObject *out_seq = in_seq ? PySequence_Fast(outs, "grouped_allreduce: outputs must be a sequence of tensors") : NULL;
  wpy_op *op = out_seq ? wpy_op_new(WPY_ALLREDUCE, keep) : NULL;
  int nin = 0;
  if (op) {
    nin = (int)PySequence_Fast_GET_SIZE(in_seq);
    if (PySequence_Fast_GET_SIZE(out_seq) != nin) {
      PyErr_Format(PyExc_ValueError, "grouped_allreduce('%s'): %d inputs but %zd outputs", name, nin,
                   PySequence_Fast_GET_SIZE(out_seq));
    } else {
      op->n = nin;
      op->ins = PyMem_Calloc(nin ? (size_t)nin : 1, sizeof *op->ins);
      op->outs = PyMem_Calloc(nin ? (size_t)nin : 1, sizeof *op->outs);
      if (!op->ins || !op->outs) PyErr_NoMemory();
      else if (parse_tensors(in_seq, nin, 0, "grouped_allreduce input", op->ins) == 0)
        parse_tensors(out_seq, nin, 1, "grouped_allreduce output", op->outs);
    }
  }
  Py_XDECREF(in_seq);
  Py_XDECREF(out_seq);
  if (PyErr_Occurred()) {
    wpy_op_free(op);
    return NULL;
  }
  weft_tensor *tin = PyMem_Calloc(nin ? (size_t)nin : 1, sizeof *tin);
  weft_tensor *tout = PyMem_Calloc(nin ? (size_t)nin : 1, sizeof *tout);
  if (!tin || !tout) {
    PyMem_Free(tin);
    PyMem_Free(tout);
    wpy_op_free(op);
    return PyErr_NoMemory();
  }
  for (int i = 0; i < nin; i++) {
    tin[i] = op->ins[i].t;
    tout[i] = op->outs[i].t;
  }
  weft_op_options o;
  wpy_options(&o, pre, post, prio);
  if (wpy_device_options(op, &o, stream, NULL) < 0) {
    PyMem_Free(tin);
    PyMem_Free(tout);
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = weft_grouped_allreduce(g, name, nin, tin, tout, (weft_reduce_op)rop, &o, &req);
  PyMem_Free(tin); /* descriptors are copied at submission */
  PyMem_Free(tout);
  return wpy_submitted(op, st, req, name);
}

/* Grouped allgather and reducescatter: n tensors, one request. Outputs
 * whose size only the negotiation reveals (every allgather output; a
 * reducescatter output given as None) come from wpy_output_alloc and are
 * collected per tensor at completion (the Handle's output and shape are then
 * lists). */
static PyObject *grouped_sized(int kind, const char *fn, const char *name, PyObject *ins, PyObject *outs, int rop,
                               double pre, double post, int prio, PyObject *keep, PyObject *group, PyObject *stream,
                               PyObject *alloc) {
  weft_group *g = wpy_op_group(group);
  if (!g) return NULL;
  char what[96];
  PyObject *in_seq = PySequence_Fast(ins, "inputs must be a sequence of tensors");
  PyObject *out_seq = in_seq && outs && outs != Py_None ? PySequence_Fast(outs, "outputs must be a sequence") : NULL;
  wpy_op *op = in_seq && (!outs || outs == Py_None || out_seq) ? wpy_op_new(kind, keep) : NULL;
  int n = 0;
  if (op) {
    n = (int)PySequence_Fast_GET_SIZE(in_seq);
    op->n = n;
    op->grouped = 1;
    op->lib_alloc = 1;
    op->ins = PyMem_Calloc(n ? (size_t)n : 1, sizeof *op->ins);
    op->outs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *op->outs);
    if (!op->ins || !op->outs) {
      PyErr_NoMemory();
    } else if (out_seq && PySequence_Fast_GET_SIZE(out_seq) != n) {
      PyErr_Format(PyExc_ValueError, "%s('%s'): %d inputs but %zd outputs", fn, name, n,
                   PySequence_Fast_GET_SIZE(out_seq));
    } else {
      snprintf(what, sizeof what, "%s input", fn);
      if (parse_tensors(in_seq, n, 0, what, op->ins) == 0 && out_seq) {
        snprintf(what, sizeof what, "%s output", fn);
        for (int i = 0; i < n; i++) {
          PyObject *o = PySequence_Fast_GET_ITEM(out_seq, i);
          if (o != Py_None && wpy_parse_tensor(o, 1, what, &op->outs[i]) < 0) break;
        }
      }
    }
  }
  Py_XDECREF(in_seq);
  Py_XDECREF(out_seq);
  if (!op || PyErr_Occurred()) {
    wpy_op_free(op);
    return NULL;
  }
  weft_tensor *tin = PyMem_Calloc(n ? (size_t)n : 1, sizeof *tin);
  weft_tensor *tout = PyMem_Calloc(n ? (size_t)n : 1, sizeof *tout);
  if (!tin || !tout) {
    PyMem_Free(tin);
    PyMem_Free(tout);
    wpy_op_free(op);
    return PyErr_NoMemory();
  }
  for (int i = 0; i < n; i++) {
    tin[i] = op->ins[i].t;
    tout[i] = op->outs[i].t; /* data NULL: the library allocates it */
  }
  weft_op_options o;
  wpy_options(&o, pre, post, prio);
  o.alloc = wpy_output_alloc;
  if (wpy_device_options(op, &o, stream, alloc) < 0) {
    PyMem_Free(tin);
    PyMem_Free(tout);
    wpy_op_free(op);
    return NULL;
  }
  weft_request *req = NULL;
  weft_status st = kind == WPY_ALLGATHER
                       ? weft_grouped_allgather(g, name, n, tin, &o, &req)
                       : weft_grouped_reducescatter(g, name, n, tin, tout, (weft_reduce_op)rop, &o, &req);
  PyMem_Free(tin); /* descriptors are copied at submission */
  PyMem_Free(tout);
  return wpy_submitted(op, st, req, name);
}

PyObject *wpy_grouped_allgather(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "inputs", "priority", "keep", "group", "stream", "alloc", NULL};
  const char *name;
  PyObject *ins, *keep = NULL, *group = NULL, *stream = NULL, *alloc = NULL;
  int prio = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|iOOOO:grouped_allgather", kwlist, &name, &ins, &prio, &keep, &group,
                                   &stream, &alloc))
    return NULL;
  return grouped_sized(WPY_ALLGATHER, "grouped_allgather", name, ins, NULL, WEFT_OP_SUM, 1.0, 1.0, prio, keep, group,
                       stream, alloc);
}

PyObject *wpy_grouped_reducescatter(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"name", "inputs", "outputs", "op", "prescale", "postscale", "priority", "keep", "group",
                           "stream", "alloc", NULL};
  const char *name;
  PyObject *ins, *outs = Py_None, *keep = NULL, *group = NULL, *stream = NULL, *alloc = NULL;
  int rop = WEFT_OP_SUM, prio = 0;
  double pre = 1.0, post = 1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|OiddiOOOO:grouped_reducescatter", kwlist, &name, &ins, &outs, &rop,
                                   &pre, &post, &prio, &keep, &group, &stream, &alloc))
    return NULL;
  return grouped_sized(WPY_REDUCESCATTER, "grouped_reducescatter", name, ins, outs, rop, pre, post, prio, keep, group,
                       stream, alloc);
}
