/* _weft_group.c - process sets (weft groups) and the timeline for weft's
 * Python extension. A Group wraps a weft_group of the current world; it
 * remembers which world made it, so one kept across shutdown/init is refused
 * instead of being used after weft_finalize freed it. Creating and
 * destroying a group are collective over its members and block (GIL
 * released). */
#include <stdio.h>
#include <string.h>

#include "_weft.h"

typedef struct {
  PyObject_HEAD
  weft_group *group; /* NULL once destroyed */
  unsigned long gen; /* wpy_world_gen when created */
  PyObject *ranks;   /* tuple of the member world ranks, as given */
} wpy_group;

unsigned long wpy_world_gen;

static int group_live(wpy_group *g) {
  if (!wpy_world) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return 0;
  }
  if (!g->group || g->gen != wpy_world_gen) {
    PyErr_SetString(PyExc_ValueError, "this process set was removed, or belongs to a world that was shut down");
    return 0;
  }
  return 1;
}

weft_group *wpy_group_of(PyObject *group) {
  if (!group || group == Py_None) return weft_world_group(wpy_world);
  if (!PyObject_TypeCheck(group, &wpy_GroupType)) {
    PyErr_Format(PyExc_TypeError, "group must be a weft._weft.Group or None, not %s", Py_TYPE(group)->tp_name);
    return NULL;
  }
  wpy_group *g = (wpy_group *)group;
  return group_live(g) ? g->group : NULL;
}

/* Group(ranks): joins the new group (blocking until every member has). */
static PyObject *group_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"ranks", NULL};
  PyObject *ranks_obj;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O:Group", kwlist, &ranks_obj)) return NULL;
  if (!wpy_world || wpy_stopping) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return NULL;
  }
  PyObject *ranks = PySequence_Tuple(ranks_obj);
  if (!ranks) return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(ranks);
  int *list = PyMem_Calloc(n ? (size_t)n : 1, sizeof *list);
  if (!list) {
    Py_DECREF(ranks);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long v = PyLong_AsLong(PyTuple_GET_ITEM(ranks, i));
    if (v == -1 && PyErr_Occurred()) {
      PyMem_Free(list);
      Py_DECREF(ranks);
      return NULL;
    }
    list[i] = (int)v;
  }
  weft_group *grp = NULL;
  weft_status st;
  char msg[1024];
  weft_world *w = wpy_world;
  wpy_waiters++; /* shutdown must not finalize under us */
  Py_BEGIN_ALLOW_THREADS
  st = weft_group_create(w, list, (int)n, &grp);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  wpy_waiters--;
  PyMem_Free(list);
  if (st != WEFT_OK) {
    Py_DECREF(ranks);
    return wpy_raise(st, msg);
  }
  wpy_group *g = (wpy_group *)type->tp_alloc(type, 0);
  if (!g) {
    Py_DECREF(ranks);
    return NULL; /* the group stays with the world until finalize */
  }
  g->group = grp;
  g->gen = wpy_world_gen;
  g->ranks = ranks;
  return (PyObject *)g;
}

static PyObject *group_destroy(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_group *g = (wpy_group *)self;
  if (!group_live(g)) return NULL;
  weft_group *grp = g->group;
  weft_status st;
  char msg[1024];
  wpy_waiters++;
  Py_BEGIN_ALLOW_THREADS
  st = weft_group_destroy(grp);
  snprintf(msg, sizeof msg, "%s", st == WEFT_OK ? "" : weft_last_error());
  Py_END_ALLOW_THREADS
  wpy_waiters--;
  if (st != WEFT_OK) return wpy_raise(st, msg);
  g->group = NULL;
  Py_RETURN_NONE;
}

static PyObject *group_rank(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_group *g = (wpy_group *)self;
  return group_live(g) ? PyLong_FromLong(weft_group_rank(g->group)) : NULL;
}

static PyObject *group_size(PyObject *self, PyObject *unused) {
  (void)unused;
  wpy_group *g = (wpy_group *)self;
  return group_live(g) ? PyLong_FromLong(weft_group_size(g->group)) : NULL;
}

static PyObject *group_ranks(PyObject *self, void *c) {
  (void)c;
  PyObject *r = ((wpy_group *)self)->ranks;
  Py_INCREF(r);
  return r;
}

static void group_dealloc(PyObject *self) {
  /* Destroying is collective, so it cannot happen here: an undestroyed
   * group lives on in the world until weft_finalize. */
  Py_XDECREF(((wpy_group *)self)->ranks);
  Py_TYPE(self)->tp_free(self);
}

static PyMethodDef group_methods[] = {
    {"destroy", group_destroy, METH_NOARGS, "destroy(): leave and free the group (collective over its members)."},
    {"rank", group_rank, METH_NOARGS, "rank() -> this rank's index in the group"},
    {"size", group_size, METH_NOARGS, "size() -> number of members"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef group_getset[] = {
    {"ranks", group_ranks, NULL, "the member world ranks, as given", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject wpy_GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weft._weft.Group",
    .tp_basicsize = sizeof(wpy_group),
    .tp_dealloc = group_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Group(ranks): a process set of the listed world ranks (this rank among them). Creating it is\n"
              "collective over the members and blocks until all have joined.",
    .tp_methods = group_methods,
    .tp_getset = group_getset,
    .tp_new = group_new,
};

/* ------------------------------------------------------------------ timeline */
PyObject *wpy_timeline_start(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"path", "mark_cycles", NULL};
  const char *path;
  int mark = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|p:timeline_start", kwlist, &path, &mark)) return NULL;
  if (!wpy_world) {
    PyErr_SetString(PyExc_ValueError, "weft has not been initialized; call init() first");
    return NULL;
  }
  weft_status st = weft_timeline_start(wpy_world, path, mark);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  Py_RETURN_NONE;
}

PyObject *wpy_timeline_stop(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (!wpy_world) Py_RETURN_NONE;
  weft_status st = weft_timeline_stop(wpy_world);
  if (st != WEFT_OK) return wpy_raise(st, weft_last_error());
  Py_RETURN_NONE;
}
