"""weft: collective communication for distributed training, from Python.

This module works on numpy arrays (and anything with the buffer protocol);
`weft.torch` is the Horovod-compatible API for PyTorch (`import weft.torch as
hvd`), and `weft.rpc` remote calls in torch.distributed.rpc's shape, in the
same job. Run scripts under the launcher: `weftrun -np 4 python3 train.py`.

    import numpy as np, weft
    weft.init()
    total = weft.allreduce(np.ones(3, np.float32))          # sum over ranks
    parts = weft.allgather(np.arange(weft.rank() + 1))      # rank-ordered concatenation
    weft.shutdown()

Every operation has an `_async` form returning a Request (poll/synchronize),
and takes `group=`: a weft.Group (a process set, made collectively by its
members with weft.Group([ranks])) to run among those ranks only; None is
every rank.
Operations are matched across ranks by name; without one, unnamed calls are
numbered in call order, so every rank must issue them in the same order.
Local misuse raises ValueError at once; errors found across ranks (shapes or
dtypes that disagree, a lost peer, a timeout) raise WeftError (a RuntimeError)
from synchronize, with weft's message, and the job stays usable after a
mismatch.
"""

from . import _weft
from ._core import (WeftError, Request, GroupRequest, op_name, init, shutdown, is_initialized, rank, size,
                    local_rank, local_size, cross_rank, cross_size, reducescatter_rows)

__version__ = "0.1.0"
library_version = _weft.LIBRARY_VERSION

#: Horovod's name for the error raised from synchronize.
HorovodInternalError = WeftError

#: Group(ranks): a process set; collective over its members (blocking).
#: group.rank(), group.size(), group.ranks, group.destroy() (collective).
Group = _weft.Group

SUM = _weft.OP_SUM
AVERAGE = _weft.OP_AVERAGE
MIN = _weft.OP_MIN
MAX = _weft.OP_MAX
PRODUCT = _weft.OP_PRODUCT
_OPS = {"sum": SUM, "average": AVERAGE, "avg": AVERAGE, "mean": AVERAGE, "min": MIN, "max": MAX,
        "product": PRODUCT, "prod": PRODUCT}


def _op(op):
    if isinstance(op, str):
        try:
            return _OPS[op.lower()]
        except KeyError:
            raise ValueError("unknown reduce op %r (sum, average, min, max, product)" % op)
    if op in (SUM, AVERAGE, MIN, MAX, PRODUCT):
        return op
    raise ValueError("unknown reduce op %r (weft.SUM, AVERAGE, MIN, MAX, PRODUCT)" % (op,))


def _np():
    import numpy
    return numpy


def _array(x):
    """x as a C-contiguous numpy array (copied only if it is not one)."""
    return _np().asarray(x, order="C")


def _writable(x, fn):
    np = _np()
    if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or not x.flags.writeable:
        raise ValueError("%s works in place: it needs a writable C-contiguous numpy array" % fn)
    return x


def _gathered(dtype):
    np = _np()

    def finish(h):
        return np.frombuffer(h.output, dtype=dtype).reshape(h.shape)
    return finish


# ---------------------------------------------------------------- allreduce
def allreduce_async(x, op=SUM, name=None, prescale=1.0, postscale=1.0, out=None, priority=0, group=None):
    """Starts out = postscale * op over ranks of (prescale * x); returns a
    Request whose synchronize() gives out (a new array unless given)."""
    a = _array(x)
    if out is None:
        out = _np().empty_like(a)
    h = _weft.allreduce(op_name("allreduce", name, group), a, out, _op(op), float(prescale), float(postscale),
                        int(priority), None, group)
    return Request(h, lambda _h: out)


def allreduce(x, op=SUM, name=None, prescale=1.0, postscale=1.0, out=None, group=None):
    """Elementwise reduction of x over all ranks (default: sum)."""
    return allreduce_async(x, op, name, prescale, postscale, out, group=group).synchronize()


def allreduce_async_(x, op=SUM, name=None, prescale=1.0, postscale=1.0, priority=0, group=None):
    _writable(x, "allreduce_")
    return allreduce_async(x, op, name, prescale, postscale, out=x, priority=priority, group=group)


def allreduce_(x, op=SUM, name=None, prescale=1.0, postscale=1.0, group=None):
    """In-place allreduce of a writable C-contiguous array; returns it."""
    return allreduce_async_(x, op, name, prescale, postscale, group=group).synchronize()


def grouped_allreduce_async(xs, op=SUM, name=None, prescale=1.0, postscale=1.0, priority=0, group=None):
    """Starts one allreduce of several arrays, enqueued atomically and fused
    (array i is named '<name>.<i>'); synchronize() gives the list of results."""
    arrays = [_array(x) for x in xs]
    if not arrays:
        return GroupRequest([])
    outs = [_np().empty_like(a) for a in arrays]
    h = _weft.grouped_allreduce(op_name("grouped_allreduce", name, group), arrays, outs, _op(op), float(prescale),
                                float(postscale), int(priority), None, group)
    return Request(h, lambda _h: outs)


def grouped_allreduce(xs, op=SUM, name=None, prescale=1.0, postscale=1.0, group=None):
    """allreduce of each array of a list, as one fused operation."""
    return grouped_allreduce_async(xs, op, name, prescale, postscale, group=group).synchronize()


# ---------------------------------------------------------------- allgather
def allgather_async(x, name=None, priority=0, group=None):
    a = _array(x)
    h = _weft.allgather(op_name("allgather", name, group), a, int(priority), None, group)
    return Request(h, _gathered(a.dtype))


def allgather(x, name=None, group=None):
    """Concatenation along dim 0 of every rank's x, in rank order (dim 0 may
    differ between ranks; the other dimensions must agree)."""
    return allgather_async(x, name, group=group).synchronize()


def grouped_allgather_async(xs, name=None, priority=0, group=None):
    """Starts one allgather of several arrays, enqueued atomically and fused
    (array i is named '<name>.<i>'); synchronize() gives the list of results."""
    arrays = [_array(x) for x in xs]
    if not arrays:
        return GroupRequest([])
    h = _weft.grouped_allgather(op_name("grouped_allgather", name, group), arrays, int(priority), None, group)
    np = _np()

    def finish(h):
        return [np.frombuffer(b, dtype=a.dtype).reshape(s) for a, b, s in zip(arrays, h.output, h.shape)]
    return Request(h, finish)


def grouped_allgather(xs, name=None, group=None):
    """allgather of each array of a list, as one fused operation."""
    return grouped_allgather_async(xs, name, group=group).synchronize()


# ---------------------------------------------------------------- broadcast
def broadcast_async_(x, root, name=None, priority=0, group=None):
    _writable(x, "broadcast_")
    h = _weft.broadcast(op_name("broadcast", name, group), x, int(root), int(priority), None, group)
    return Request(h, lambda _h: x)


def broadcast_(x, root, name=None, group=None):
    """Overwrites x in place with root's x (root: the index in the group);
    returns it."""
    return broadcast_async_(x, root, name, group=group).synchronize()


def broadcast_async(x, root, name=None, priority=0, group=None):
    return broadcast_async_(_np().array(x, order="C", copy=True), root, name, priority, group)


def broadcast(x, root, name=None, group=None):
    """root's x, on every rank (a new array; x is not modified)."""
    return broadcast_async(x, root, name, group=group).synchronize()


# ---------------------------------------------------------------- alltoall
def alltoall_async(x, splits=None, name=None, priority=0, group=None):
    a = _array(x)
    if splits is not None:
        splits = [int(s) for s in _np().asarray(splits).reshape(-1)]
    h = _weft.alltoall(op_name("alltoall", name, group), a, splits, int(priority), None, group)
    np = _np()
    gathered = _gathered(a.dtype)
    return Request(h, lambda h: (gathered(h), np.array(h.recv_splits, dtype=np.int64)))


def alltoall(x, splits=None, name=None, group=None):
    """Sends rows [sum(splits[:j]), +splits[j]) of x to rank j (even splits
    when None) and returns (received rows in rank order, rows received from
    each rank)."""
    return alltoall_async(x, splits, name, group=group).synchronize()


# ---------------------------------------------------------------- reducescatter
def reducescatter_async(x, op=SUM, name=None, prescale=1.0, postscale=1.0, priority=0, group=None):
    a = _array(x)
    np = _np()
    out = None
    if a.ndim > 0:
        if group is None:
            rows = reducescatter_rows(a.shape[0], size(), rank())
        else:
            rows = reducescatter_rows(a.shape[0], group.size(), group.rank())
        out = np.empty((rows,) + a.shape[1:], dtype=a.dtype)
    h = _weft.reducescatter(op_name("reducescatter", name, group), a, out, _op(op), float(prescale), float(postscale),
                            int(priority), None, group)
    if out is not None:
        return Request(h, lambda _h: out)
    return Request(h, _gathered(a.dtype))


def reducescatter(x, op=SUM, name=None, prescale=1.0, postscale=1.0, group=None):
    """This rank's slice (dim 0) of the reduction of x over ranks: the first
    dim0 % size ranks get one extra row."""
    return reducescatter_async(x, op, name, prescale, postscale, group=group).synchronize()


def grouped_reducescatter_async(xs, op=SUM, name=None, prescale=1.0, postscale=1.0, priority=0, group=None):
    """Starts one reducescatter of several arrays, enqueued atomically and
    fused (array i is named '<name>.<i>'); synchronize() gives the list of
    this rank's slices."""
    arrays = [_array(x) for x in xs]
    if not arrays:
        return GroupRequest([])
    np = _np()
    n, r = (size(), rank()) if group is None else (group.size(), group.rank())
    # 0-d arrays get no output here: the library sizes it (the ranks reject them anyway)
    outs = [np.empty((reducescatter_rows(a.shape[0], n, r),) + a.shape[1:], dtype=a.dtype) if a.ndim > 0 else None
            for a in arrays]
    h = _weft.grouped_reducescatter(op_name("grouped_reducescatter", name, group), arrays, outs, _op(op),
                                    float(prescale), float(postscale), int(priority), None, group)

    def finish(h):
        return [o if o is not None else np.frombuffer(h.output[i], dtype=a.dtype).reshape(h.shape[i])
                for i, (a, o) in enumerate(zip(arrays, outs))]
    return Request(h, finish)


def grouped_reducescatter(xs, op=SUM, name=None, prescale=1.0, postscale=1.0, group=None):
    """reducescatter of each array of a list, as one fused operation."""
    return grouped_reducescatter_async(xs, op, name, prescale, postscale, group=group).synchronize()


# ---------------------------------------------------------------- barrier, join, timeline, failures
def barrier_async(name=None, group=None):
    # always named here: weft numbers unnamed barriers per world, not per group
    return Request(_weft.barrier(op_name("barrier", name, group), group))


def barrier(name=None, group=None):
    """Returns when every rank has called barrier (matched by name, or by
    call order when None)."""
    barrier_async(name, group).synchronize()


def join_async(group=None):
    return Request(_weft.join(group), lambda h: h.last_joined)


def join(group=None):
    """This rank has no more data (uneven epochs): until every rank has
    joined it contributes the op's identity (zeros for sum) to the others'
    allreduces and takes part in their barriers; other collectives fail while
    a rank has joined. Returns the rank that joined last."""
    return join_async(group).synchronize()


def start_timeline(path, mark_cycles=False):
    """Writes a Chrome-trace timeline (chrome://tracing, Perfetto) to path:
    rank 0 only, unless path contains '%r' (one file per rank)."""
    _weft.timeline_start(str(path), bool(mark_cycles))


def stop_timeline():
    """Finishes the timeline file."""
    _weft.timeline_stop()


def abort(reason):
    """Fails every pending and future operation here and on every peer."""
    _weft.abort(str(reason))


def async_error():
    """None while the job is healthy, else (status, message) of its first
    asynchronous failure (a lost peer, an abort)."""
    return _weft.async_error()


__all__ = ["WeftError", "HorovodInternalError", "Request", "init", "shutdown", "is_initialized", "rank", "size",
           "local_rank", "local_size", "cross_rank", "cross_size", "SUM", "AVERAGE", "MIN", "MAX", "PRODUCT",
           "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "allgather", "allgather_async",
           "broadcast", "broadcast_async", "broadcast_", "broadcast_async_", "alltoall", "alltoall_async",
           "reducescatter", "reducescatter_async", "barrier", "barrier_async", "abort", "async_error", "Group",
           "grouped_allreduce", "grouped_allreduce_async", "grouped_allgather", "grouped_allgather_async",
           "grouped_reducescatter", "grouped_reducescatter_async", "join", "join_async", "start_timeline",
           "stop_timeline"]
