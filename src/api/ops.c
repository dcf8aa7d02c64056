/* ops.c - the collective entry points: validate arguments (local misuse is
 * rejected here, at once, with a message), copy the descriptors into a new
 * request, register its name as in flight, and hand it to the engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/submit.h"
#include "util/err.h"
#include "util/strmap.h"
#include "util/time.h"

#define INVALID(...) wf_err(WEFT_ERR_INVALID_ARGUMENT, __VA_ARGS__)

static weft_status check_group(const char *fn, weft_group *g) {
  if (!g || g->magic != WF_GROUP_MAGIC || !g->world || g->world->magic != WF_WORLD_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "%s: not a live group handle", fn);
  if (g->rank < 0) return INVALID("%s: this rank is not a member of group %u", fn, g->id);
  return WEFT_OK;
}

static weft_status check_name(const char *fn, const char *name) {
  if (!name) return INVALID("%s: name is NULL", fn);
  size_t n = strlen(name);
  if (n == 0 || n > WF_NAME_MAX) return INVALID("%s: name must be 1..%d bytes, got %zu", fn, WF_NAME_MAX, n);
  return WEFT_OK;
}

/* The options' instance fields (zero when the struct predates them). */
static uint64_t opt_instance(const weft_op_options *o, const uint64_t **deps, int *nd) {
  *deps = NULL;
  *nd = 0;
  if (!o || o->struct_size < offsetof(weft_op_options, n_depends) + sizeof(int)) return 0;
  *deps = o->depends_on;
  *nd = o->n_depends;
  return o->instance_key;
}

/* The name an operation goes by: *name, checked, or for an instance the
 * reserved "\x01instance <key>" (util/err.h), written into buf; and its
 * dependencies checked. */
static weft_status op_name(const char *fn, const char **name, const weft_op_options *o, char buf[32]) {
  const uint64_t *deps;
  int nd;
  uint64_t key = opt_instance(o, &deps, &nd);
  if (key) {
    if (*name)
      return INVALID("%s('%s'): give a name or an instance key (%llu), not both", fn, *name, (unsigned long long)key);
    snprintf(buf, 32, "%cinstance %llu", WF_INSTANCE_MARK, (unsigned long long)key);
    *name = buf;
  } else {
    WF_CHECK(check_name(fn, *name));
    if ((*name)[0] == WF_INSTANCE_MARK)
      return INVALID("%s: names starting with byte 0x01 are reserved for instances (weft_op_options.instance_key)", fn);
  }
  if (nd < 0 || nd > WEFT_MAX_DEPENDS)
    return INVALID("%s('%s'): n_depends must be 0..%d, got %d", fn, *name, WEFT_MAX_DEPENDS, nd);
  if (nd && !deps) return INVALID("%s('%s'): n_depends is %d but depends_on is NULL", fn, *name, nd);
  for (int i = 0; i < nd; i++) {
    if (!deps[i]) return INVALID("%s('%s'): depends_on[%d] is 0, which is no instance key", fn, *name, i);
    if (deps[i] == key) return INVALID("%s('%s'): it depends on itself (depends_on[%d])", fn, *name, i);
  }
  return WEFT_OK;
}

/* Grouped ops and joins take neither an instance key nor dependencies. */
static weft_status no_instance(const char *fn, const char *name, const weft_op_options *o) {
  const uint64_t *deps;
  int nd;
  if (opt_instance(o, &deps, &nd) || nd)
    return INVALID("%s('%s'): instance keys and dependencies are not supported here", fn, name ? name : "");
  return WEFT_OK;
}

/* Checks a tensor descriptor; *elems gets its element count. */
static weft_status check_tensor(const char *fn, const char *name, const char *what, const weft_tensor *t,
                                size_t *elems) {
  if (!t) return INVALID("%s('%s'): %s tensor is NULL", fn, name, what);
  if ((unsigned)t->dtype >= WEFT_DTYPE_COUNT_)
    return INVALID("%s('%s'): %s tensor has unknown dtype %d", fn, name, what, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > WEFT_MAX_DIMS)
    return INVALID("%s('%s'): %s tensor has %d dimensions (0..%d allowed)", fn, name, what, t->ndim, WEFT_MAX_DIMS);
  if (t->ndim > 0 && !t->shape) return INVALID("%s('%s'): %s tensor has ndim %d but shape is NULL", fn, name, what, t->ndim);
  size_t n = 1, es = weft_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return INVALID("%s('%s'): %s tensor has negative dimension %d (%lld)", fn, name, what, d,
                     (long long)t->shape[d]);
    /* no division: this runs for every tensor of every op */
    size_t b;
    if (__builtin_mul_overflow(n, (size_t)t->shape[d], &n) || __builtin_mul_overflow(n, es, &b) || b > SIZE_MAX / 4)
      return INVALID("%s('%s'): %s tensor is too large", fn, name, what);
  }
  if (n > 0 && !t->data) return INVALID("%s('%s'): %s tensor has %zu elements but data is NULL", fn, name, what, n);
  if (t->device < WEFT_DEVICE_CPU)
    return INVALID("%s('%s'): %s tensor has device %d (WEFT_DEVICE_CPU, or a device index >= 0)", fn, name, what,
                   t->device);
  if (t->device >= 0) WF_CHECK(wf_submit_check_device(fn, name, what, t, n * es)); /* loads, and is its memory */
  *elems = n;
  return WEFT_OK;
}

/* Input and output of one op live on the same device (kind and index). */
static weft_status check_same_device(const char *fn, const char *name, const weft_tensor *in, const weft_tensor *out) {
  if (wf_submit_device_code(in) == wf_submit_device_code(out)) return WEFT_OK;
  char a[48], b[48];
  return INVALID("%s('%s'): input is on %s but output is on %s: both must be on the same device", fn, name,
                 wf_submit_device_str(in, a, sizeof a), wf_submit_device_str(out, b, sizeof b));
}

static weft_status check_opts(const char *fn, const char *name, const weft_op_options *o) {
  if (!o) return WEFT_OK;
  if (o->struct_size < offsetof(weft_op_options, alloc_ctx) + sizeof(void *))
    return INVALID("%s('%s'): options struct_size %zu is too small (use WEFT_OP_OPTIONS_INIT)", fn, name,
                   o->struct_size);
  if (!isfinite(o->prescale) || !isfinite(o->postscale))
    return INVALID("%s('%s'): prescale/postscale must be finite (got %g, %g)", fn, name, o->prescale, o->postscale);
  return WEFT_OK;
}

#define BEGIN(fn)                                                              \
  wf_err_clear();                                                              \
  if (!req) return INVALID(fn ": req is NULL");                                \
  *req = NULL;                                                                 \
  WF_CHECK(check_group(fn, g))

/* Checks an allreduce and builds its request (not yet submitted). */
static weft_status make_allreduce(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                                  weft_reduce_op op, const weft_op_options *opt, weft_request **rp) {
  size_t n, m;
  char nbuf[32];
  WF_CHECK(op_name("weft_allreduce", &name, opt, nbuf));
  WF_CHECK(check_tensor("weft_allreduce", name, "input", in, &n));
  WF_CHECK(check_tensor("weft_allreduce", name, "output", out, &m));
  WF_CHECK(check_opts("weft_allreduce", name, opt));
  WF_CHECK(check_same_device("weft_allreduce", name, in, out));
  if ((unsigned)op >= WEFT_OP_COUNT_) return INVALID("weft_allreduce('%s'): unknown reduce op %d", name, (int)op);
  if (in->dtype != out->dtype)
    return INVALID("weft_allreduce('%s'): input is %s but output is %s", name, weft_dtype_name(in->dtype),
                   weft_dtype_name(out->dtype));
  int same = in->ndim == out->ndim;
  for (int d = 0; same && d < in->ndim; d++) same = in->shape[d] == out->shape[d];
  if (!same) return INVALID("weft_allreduce('%s'): input and output shapes differ", name);
  if (in->dtype == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE)
    return INVALID("weft_allreduce('%s'): average is not defined for bool tensors", name);
  if (n && in->data != out->data) {
    const char *a = in->data, *b = out->data;
    size_t bytes = n * weft_dtype_size(in->dtype);
    if (a < b + bytes && b < a + bytes)
      return INVALID("weft_allreduce('%s'): input and output overlap without being the same buffer", name);
  }
  weft_request *r = wf_request_make(g, WF_COLL_ALLREDUCE, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->out = *out;
  r->out.shape = r->in_shape;
  r->msg.reduce_op = (uint8_t)op;
  *rp = r;
  return WEFT_OK;
}

weft_status weft_allreduce(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                           weft_reduce_op op, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_allreduce");
  weft_request *r = NULL;
  WF_CHECK(make_allreduce(g, name, in, out, op, opt, &r));
  return wf_submit(r, req);
}

/* Checks an allgather and builds its request (not yet submitted). */
static weft_status make_allgather(weft_group *g, const char *name, const weft_tensor *in, const weft_op_options *opt,
                                  weft_request **rp) {
  size_t n;
  char nbuf[32];
  WF_CHECK(op_name("weft_allgather", &name, opt, nbuf));
  WF_CHECK(check_tensor("weft_allgather", name, "input", in, &n));
  WF_CHECK(check_opts("weft_allgather", name, opt));
  weft_request *r = wf_request_make(g, WF_COLL_ALLGATHER, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  *rp = r;
  return WEFT_OK;
}

weft_status weft_allgather(weft_group *g, const char *name, const weft_tensor *in, const weft_op_options *opt,
                           weft_request **req) {
  BEGIN("weft_allgather");
  weft_request *r = NULL;
  WF_CHECK(make_allgather(g, name, in, opt, &r));
  return wf_submit(r, req);
}

weft_status weft_broadcast(weft_group *g, const char *name, const weft_tensor *inout, int root,
                           const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_broadcast");
  size_t n;
  char nbuf[32];
  WF_CHECK(op_name("weft_broadcast", &name, opt, nbuf));
  WF_CHECK(check_tensor("weft_broadcast", name, "input", inout, &n));
  WF_CHECK(check_opts("weft_broadcast", name, opt));
  if (root < 0 || root >= g->size)
    return INVALID("weft_broadcast('%s'): root %d is not a rank of the group (size %d)", name, root, g->size);
  weft_request *r = wf_request_make(g, WF_COLL_BROADCAST, name, inout, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->msg.root = root;
  return wf_submit(r, req);
}

weft_status weft_alltoall(weft_group *g, const char *name, const weft_tensor *in, const int64_t *splits,
                          const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_alltoall");
  size_t n;
  char nbuf[32];
  WF_CHECK(op_name("weft_alltoall", &name, opt, nbuf));
  WF_CHECK(check_tensor("weft_alltoall", name, "input", in, &n));
  WF_CHECK(check_opts("weft_alltoall", name, opt));
  int size = g->size;
  int64_t dim0 = in->ndim ? in->shape[0] : 1;
  if (splits) {
    int64_t sum = 0;
    for (int j = 0; j < size; j++) {
      if (splits[j] < 0)
        return INVALID("weft_alltoall('%s'): splits[%d] is negative (%lld)", name, j, (long long)splits[j]);
      sum += splits[j];
      if (sum > dim0) break;
    }
    if (sum > dim0)
      return INVALID("weft_alltoall('%s'): splits sum to more than the first dimension (%lld)", name, (long long)dim0);
  } else if (in->ndim && dim0 % size) {
    return INVALID("weft_alltoall('%s'): without splits the first dimension (%lld) must divide by the group size %d",
                   name, (long long)dim0, size);
  }
  weft_request *r = wf_request_make(g, WF_COLL_ALLTOALL, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->msg.nsplits = (uint32_t)size;
  r->msg.splits = malloc(sizeof(int64_t) * (size_t)size);
  if (!r->msg.splits) {
    free(r->deps);
    free(r);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  for (int j = 0; j < size; j++) r->msg.splits[j] = splits ? splits[j] : (in->ndim ? dim0 / size : 0);
  return wf_submit(r, req);
}

/* TensorFlow's CollectivePermute (permuter.cc): this rank's tensor goes to
 * perm[rank]; the tensor of the rank q with perm[q] == rank comes back. A
 * perm that is no permutation is this rank's own misuse, refused here; the
 * coordinator checks the same again and that every rank passed the same. */
weft_status weft_permute(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                         const int *perm, int n, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_permute");
  size_t ni, no;
  WF_CHECK(check_name("weft_permute", name));
  WF_CHECK(check_tensor("weft_permute", name, "input", in, &ni));
  WF_CHECK(check_tensor("weft_permute", name, "output", out, &no));
  WF_CHECK(check_opts("weft_permute", name, opt));
  if (in->device >= 0 || out->device >= 0)
    return wf_err(WEFT_ERR_NOT_SUPPORTED, "weft_permute('%s'): device tensors are not supported (host memory only)",
                  name);
  if (in->dtype != out->dtype)
    return INVALID("weft_permute('%s'): input is %s but output is %s", name, weft_dtype_name(in->dtype),
                   weft_dtype_name(out->dtype));
  int same = in->ndim == out->ndim;
  for (int d = 0; same && d < in->ndim; d++) same = in->shape[d] == out->shape[d];
  if (!same) return INVALID("weft_permute('%s'): input and output shapes differ", name);
  if (ni && in->data != out->data) {
    const char *a = in->data, *b = out->data;
    size_t bytes = ni * weft_dtype_size(in->dtype);
    if (a < b + bytes && b < a + bytes)
      return INVALID("weft_permute('%s'): input and output overlap without being the same buffer", name);
  }
  if (!perm) return INVALID("weft_permute('%s'): perm is NULL", name);
  if (n != g->size)
    return INVALID("weft_permute('%s'): perm has %d entries for a group of %d ranks", name, n, g->size);
  int *first = malloc(sizeof(int) * (size_t)n); /* first[v]: the index that sends to v, or -1 */
  if (!first) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) first[i] = -1;
  for (int i = 0; i < n; i++) {
    weft_status st = WEFT_OK;
    if (perm[i] < 0 || perm[i] >= n)
      st = INVALID("weft_permute('%s'): perm[%d] = %d is not a rank of the group (0..%d)", name, i, perm[i], n - 1);
    else if (first[perm[i]] >= 0)
      st = INVALID("weft_permute('%s'): perm is no permutation: perm[%d] and perm[%d] are both %d (rank %d would "
                   "receive two tensors)", name, first[perm[i]], i, perm[i], perm[i]);
    if (st != WEFT_OK) {
      free(first);
      return st;
    }
    first[perm[i]] = i;
  }
  free(first);
  weft_request *r = wf_request_make(g, WF_COLL_PERMUTE, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->out = *out;
  r->out.shape = r->in_shape;
  r->msg.nsplits = (uint32_t)n;
  r->msg.splits = malloc(sizeof(int64_t) * (size_t)n);
  if (!r->msg.splits) {
    free(r);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  for (int i = 0; i < n; i++) r->msg.splits[i] = perm[i];
  return wf_submit(r, req);
}

/* Checks a reducescatter and builds its request (not yet submitted). */
static weft_status make_reducescatter(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                                      weft_reduce_op op, const weft_op_options *opt, weft_request **rp) {
  size_t n, m = 0;
  char nbuf[32];
  WF_CHECK(op_name("weft_reducescatter", &name, opt, nbuf));
  WF_CHECK(check_tensor("weft_reducescatter", name, "input", in, &n));
  WF_CHECK(check_opts("weft_reducescatter", name, opt));
  if ((unsigned)op >= WEFT_OP_COUNT_) return INVALID("weft_reducescatter('%s'): unknown reduce op %d", name, (int)op);
  if (in->dtype == WEFT_DTYPE_BOOL && op == WEFT_OP_AVERAGE)
    return INVALID("weft_reducescatter('%s'): average is not defined for bool tensors", name);
  weft_request *r = NULL;
  if (out && out->data && in->ndim > 0) {
    WF_CHECK(check_tensor("weft_reducescatter", name, "output", out, &m));
    WF_CHECK(check_same_device("weft_reducescatter", name, in, out));
    int64_t rows = in->shape[0] / g->size + (g->rank < in->shape[0] % g->size);
    int ok = out->dtype == in->dtype && out->ndim == in->ndim && out->shape[0] == rows;
    for (int d = 1; ok && d < in->ndim; d++) ok = out->shape[d] == in->shape[d];
    if (!ok)
      return INVALID("weft_reducescatter('%s'): output must be %s with this rank's %lld rows and the input's other "
                     "dimensions", name, weft_dtype_name(in->dtype), (long long)rows);
  }
  if (out && out->data && n) {
    const char *a = in->data, *b = out->data;
    size_t ib = n * weft_dtype_size(in->dtype), ob = (size_t)m * weft_dtype_size(in->dtype);
    if (a < b + ob && b < a + ib)
      return INVALID("weft_reducescatter('%s'): the output overlaps the input (the input is read while the output is "
                     "written)", name);
  }
  r = wf_request_make(g, WF_COLL_REDUCESCATTER, name, in, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  if (out && out->data && in->ndim > 0) {
    r->out = *out;
    for (int d = 0; d < out->ndim; d++) r->out_shape[d] = out->shape[d];
    r->out.shape = r->out_shape;
  }
  r->msg.reduce_op = (uint8_t)op;
  *rp = r;
  return WEFT_OK;
}

weft_status weft_reducescatter(weft_group *g, const char *name, const weft_tensor *in, const weft_tensor *out,
                               weft_reduce_op op, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_reducescatter");
  weft_request *r = NULL;
  WF_CHECK(make_reducescatter(g, name, in, out, op, opt, &r));
  return wf_submit(r, req);
}

weft_status weft_barrier(weft_group *g, const char *name, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_barrier");
  char auto_name[64];
  uint64_t nth = 0;
  const uint64_t *deps;
  int nd;
  if (!name && !opt_instance(opt, &deps, &nd)) {
    nth = atomic_fetch_add_explicit(&g->barrier_count, 1, memory_order_relaxed);
    snprintf(auto_name, sizeof auto_name, "barrier.%llu", (unsigned long long)nth); /* per group */
    name = auto_name;
  }
  char nbuf[32];
  WF_CHECK(op_name("weft_barrier", &name, opt, nbuf));
  WF_CHECK(check_opts("weft_barrier", name, opt));
  weft_request *r = wf_request_make(g, WF_COLL_BARRIER, name, NULL, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  if (name == auto_name) r->auto_barrier = nth + 1;
  return wf_submit(r, req);
}

weft_status weft_join(weft_group *g, const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_join");
  WF_CHECK(check_opts("weft_join", "weft.join", opt));
  WF_CHECK(no_instance("weft_join", "weft.join", opt));
  weft_request *r = wf_request_make(g, WF_COLL_JOIN, "weft.join", NULL, opt);
  if (!r) return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  r->last_joined = -1;
  return wf_submit(r, req);
}

/* Checks a grouped op's common arguments and allocates its parent and child
 * array. */
static weft_status begin_grouped(const char *fn, weft_group *g, wf_coll coll, const char *name, int n,
                                 const void *ins, const weft_op_options *opt, weft_request **parent,
                                 weft_request ***kids) {
  WF_CHECK(check_name(fn, name));
  if (n < 1 || n > 65536) return INVALID("%s('%s'): n must be 1..65536, got %d", fn, name, n);
  if (!ins) return INVALID("%s('%s'): the tensor array is NULL", fn, name);
  if (strlen(name) + 7 > WF_NAME_MAX) return INVALID("%s('%s'): name too long for a group", fn, name);
  WF_CHECK(check_opts(fn, name, opt));
  WF_CHECK(no_instance(fn, name, opt));
  *parent = wf_request_make(g, coll, name, NULL, opt);
  *kids = calloc((size_t)n, sizeof **kids);
  if (!*parent || !*kids) {
    free(*parent);
    free(*kids);
    return wf_err(WEFT_ERR_NO_MEMORY, "out of memory");
  }
  return WEFT_OK;
}

/* Frees a grouped op that failed before submission. */
static weft_status abandon_grouped(weft_status st, weft_request *parent, weft_request **kids, int n) {
  for (int i = 0; i < n; i++)
    if (kids[i]) {
      free(kids[i]->msg.splits);
      free(kids[i]);
    }
  free(kids);
  free(parent);
  return st;
}

/* The options a child of a grouped op gets: the parent's, without its
 * callback (it runs once, for the whole group). */
static weft_op_options child_options(const weft_op_options *opt) {
  weft_op_options o = WEFT_OP_OPTIONS_INIT;
  if (opt) memcpy(&o, opt, opt->struct_size < sizeof o ? opt->struct_size : sizeof o); /* an older, smaller struct */
  o.struct_size = sizeof o;
  o.callback = NULL;
  o.user_data = NULL;
  return o;
}

weft_status weft_grouped_allreduce(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                   const weft_tensor *outs, weft_reduce_op op, const weft_op_options *opt,
                                   weft_request **req) {
  BEGIN("weft_grouped_allreduce");
  if (!outs && ins) return INVALID("weft_grouped_allreduce('%s'): outs is NULL", name ? name : "");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_allreduce", g, WF_COLL_ALLREDUCE, name, n, ins, opt, &parent, &kids));
  /* every tensor checked, and its child request built, before anything is
   * enqueued: the group goes in whole or not at all */
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_allreduce(g, cname, &ins[i], &outs[i], op, &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return wf_submit_grouped("weft_grouped_allreduce", g, parent, kids, n, req);
}

weft_status weft_grouped_allgather(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                   const weft_op_options *opt, weft_request **req) {
  BEGIN("weft_grouped_allgather");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_allgather", g, WF_COLL_ALLGATHER, name, n, ins, opt, &parent, &kids));
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_allgather(g, cname, &ins[i], &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return wf_submit_grouped("weft_grouped_allgather", g, parent, kids, n, req);
}

weft_status weft_grouped_reducescatter(weft_group *g, const char *name, int n, const weft_tensor *ins,
                                       const weft_tensor *outs, weft_reduce_op op, const weft_op_options *opt,
                                       weft_request **req) {
  BEGIN("weft_grouped_reducescatter");
  weft_request *parent, **kids;
  WF_CHECK(begin_grouped("weft_grouped_reducescatter", g, WF_COLL_REDUCESCATTER, name, n, ins, opt, &parent, &kids));
  weft_op_options child_opt = child_options(opt);
  for (int i = 0; i < n; i++) {
    char cname[WF_NAME_MAX + 1];
    snprintf(cname, sizeof cname, "%s.%d", name, i);
    weft_status st = make_reducescatter(g, cname, &ins[i], outs ? &outs[i] : NULL, op, &child_opt, &kids[i]);
    if (st != WEFT_OK) return abandon_grouped(st, parent, kids, n);
  }
  return wf_submit_grouped("weft_grouped_reducescatter", g, parent, kids, n, req);
}

weft_status weft_request_output_at(weft_request *req, int i, weft_tensor *out) {
  wf_err_clear();
  if (!req || atomic_load_explicit(&req->magic, memory_order_relaxed) != WF_REQ_MAGIC)
    return wf_err(WEFT_ERR_MISUSE, "weft_request_output_at: not a live request handle");
  if (i < 0 || i >= req->nkids)
    return INVALID("weft_request_output_at('%s'): index %d out of range (the request has %d tensors)", req->msg.name,
                   i, req->nkids);
  return weft_request_output(req->kids[i], out);
}
