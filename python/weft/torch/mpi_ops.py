"""weft.torch's collectives with Horovod's signatures and semantics (CPU and
CUDA tensors). Tensors go to weft without copies when contiguous (their
data_ptr() is passed as it is); non-contiguous ones are made contiguous
first, and in-place operations copy the result back. Every Request keeps the
tensors it uses alive until the operation completes.

CUDA tensors (_basics._desc, _device_kw): weft reads the input after the
work queued so far on torch's current stream, and the request completes
once the result's copy back is queued with that stream made to wait for it,
so synchronize() returns without waiting for the GPU and later work on the
stream sees the result; outputs weft sizes (allgather, alltoall,
reducescatter) come from torch's caching allocator on that stream.

The differentiable forms (allreduce, allgather, broadcast, alltoall,
reducescatter and their grouped forms) have Horovod 0.28's gradients
(horovod/torch/mpi_ops.py), conventions rather than always the derivative of
the distributed computation: allreduce's is the allreduce of the gradient
(same op and scales); allgather's this rank's rows of the gradient averaged
over the process set; broadcast's that average on the root and zero
elsewhere; reducescatter's the allgather of the gradient times the set's
size (op Sum only), then times prescale, then times postscale; alltoall's the
alltoall back with the received splits. Grouped forms alike, per tensor.

The basics (ranks, sizes, init, join, the capability queries), process sets
and the helpers the collectives share live in weft.torch._basics; every name
of it is re-exported here, so `from weft.torch.mpi_ops import X` works for
all of them as before."""

# warnings, _core, WeftError and the _basics names are re-exports: every name this
# module had before _basics was split out still imports from it
import warnings  # noqa: F401

import torch

from .. import _core, _weft
from .._core import GroupRequest, Request, WeftError, op_name, reducescatter_rows
from . import adasum as _adasum
from .compression import Compression
from ._basics import (  # noqa: F401
    HorovodInternalError, Average, Sum, Adasum, Min, Max, Product, _WEFT_OPS, _DTYPES, size, rank, local_size,
    local_rank, shutdown, is_initialized, mpi_threads_supported, mpi_built, mpi_enabled, gloo_built, gloo_enabled,
    nccl_built, ddl_built, ccl_built, cuda_built, rocm_built, _cross_set, cross_rank, cross_size, is_homogeneous,
    start_timeline, stop_timeline, join, ProcessSet, global_process_set, _process_sets, add_process_set,
    remove_process_set, _resolve_set, _check_process_set, init, _code, _desc, _from_buffer, _resolve_op, _copy_back,
    _returns, poll, synchronize, barrier, _device_kw, _record, _cuda_status)


# ---------------------------------------------------------------- allreduce
def _weft_name(prefix, name, group):
    """The weft name: op_name(prefix, name, group), or name itself when
    prefix is None (a caller-made full name)."""
    return name if prefix is None else op_name(prefix, name, group)


def _allreduce_async(tensor, inplace, name, op, prescale, postscale, process_set, fn, prefix="allreduce"):
    if op == Adasum:
        return _adasum_async([tensor], inplace, _weft_name(prefix, name, _resolve_set(process_set, fn)[0]), False,
                             prescale, postscale, process_set, fn, single=True)
    code = _code(tensor, fn)
    group, _, _ = _resolve_set(process_set, fn)
    wname = _weft_name(prefix, name, group)
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    if inplace:
        dst = src
        finish = _returns(tensor) if src is tensor else _copy_back(tensor, src)
    else:
        dst = torch.empty_like(src)
        finish = _returns(dst)
    h = _weft.allreduce(wname, _desc(src, code), _desc(dst, code), _WEFT_OPS[op], float(prescale), float(postscale),
                        0, (src, dst), group, **_device_kw(src))
    _record(dst)
    return Request(h, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce (default op: Average) into a new tensor; returns a handle for poll/synchronize."""
    op = _resolve_op(op, average, "allreduce_async")
    return _allreduce_async(tensor, False, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce; returns a handle for poll/synchronize."""
    op = _resolve_op(op, average, "allreduce_async_")
    return _allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce_async_")


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return _allreduce_async(tensor, False, name, op, prescale, postscale, process_set, "allreduce").synchronize()

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        return (_AllreduceFn.apply(grad, None, op, prescale, postscale, process_set),
                None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """op (default Average) of tensor over all ranks, times the scale factors,
    as a new tensor (differentiable). The input is not modified."""
    op = _resolve_op(op, average, "allreduce")
    compressed, ctx = compression.compress(tensor)
    reduced = _AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce; returns tensor."""
    op = _resolve_op(op, average, "allreduce_")
    return _allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce_").synchronize()


def _grouped_allreduce_async(tensors, inplace, name, op, prescale, postscale, process_set, fn):
    """One weft request for all tensors (enqueued atomically, fused);
    tensor i is named '<name>.<i>'."""
    tensors = list(tensors)
    if not tensors:
        return GroupRequest([])
    if op == Adasum:
        return _adasum_async(tensors, inplace, name, True, prescale, postscale, process_set, fn)
    group, _, _ = _resolve_set(process_set, fn)
    codes = [_code(t, fn) for t in tensors]
    srcs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    dsts = srcs if inplace else [torch.empty_like(t) for t in srcs]
    h = _weft.grouped_allreduce(op_name("grouped_allreduce", name, group), [_desc(t, c) for t, c in zip(srcs, codes)],
                                [_desc(t, c) for t, c in zip(dsts, codes)], _WEFT_OPS[op], float(prescale),
                                float(postscale), 0, (srcs, dsts), group, **_device_kw(srcs[0]))
    _record(*dsts)

    def finish(_h):
        if not inplace:
            return dsts
        with torch.no_grad():
            for t, src in zip(tensors, srcs):
                if src is not t:
                    t.copy_(src)
        return tensors
    return Request(h, finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    op = _resolve_op(op, average, "grouped_allreduce_async")
    return _grouped_allreduce_async(tensors, False, name, op, prescale_factor, postscale_factor, process_set,
                                    "grouped_allreduce_async")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average, "grouped_allreduce_async_")
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor, process_set,
                                    "grouped_allreduce_async_")


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(_grouped_allreduce_async(tensors, False, name, op, prescale, postscale, process_set,
                                              "grouped_allreduce").synchronize())

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        return (None, None, None, None, None) + tuple(
            _GroupedAllreduceFn.apply(None, op, prescale, postscale, process_set, *grads))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """allreduce of each tensor of a list (differentiable); returns a list."""
    op = _resolve_op(op, average, "grouped_allreduce")
    compressed = [compression.compress(t) for t in tensors]
    reduced = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                        *[c for c, _ in compressed])
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    op = _resolve_op(op, average, "grouped_allreduce_")
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor, process_set,
                                    "grouped_allreduce_").synchronize()


def _adasum_async(tensors, inplace, name, grouped, prescale, postscale, process_set, fn, single=False):
    """op=Adasum (see adasum.py): every member's tensors gathered (one
    grouped allgather, flattened, times prescale first), then folded locally
    in the fixed recursive-halving order, times postscale; identical bits on
    every rank."""
    for t in tensors:
        _code(t, fn)
    _, _, set_size = _resolve_set(process_set, fn)
    _adasum.check(tensors, set_size, fn)
    flat = []
    for t in tensors:
        f = t.detach().reshape(1, -1)
        flat.append(f * prescale if prescale != 1.0 else f)
    if single:
        gathered = _allgather_async(flat[0], name, process_set, fn, prefix=None)
    else:
        gathered = grouped_allgather_async(flat, "adasum.%s" % name if name is not None else None, process_set)

    def finish(outs):
        outs = [outs] if single else outs
        results = []
        for t, g in zip(tensors, outs):
            r = _adasum.combine(g, t.shape, t.dtype)
            if postscale != 1.0:
                r = r * postscale
            if inplace:
                with torch.no_grad():
                    t.copy_(r)
                r = t
            results.append(r)
        return results[0] if single else results
    return GroupRequest([gathered], combine=lambda outs: finish(outs[0]))


# ---------------------------------------------------------------- sparse
class _SparseHandle(object):
    """sparse_allreduce_async's handle: poll()/synchronize() as any handle,
    and callable (Horovod's handle is a function returning the result)."""

    def __init__(self, requests, finish):
        self._requests = requests
        self._finish = finish
        self._result = None
        self._done = False

    def poll(self):
        return all(r.poll() for r in self._requests)

    def synchronize(self):
        if not self._done:
            outs = [r.synchronize() for r in self._requests]
            self._result = self._finish(*outs)
            self._done = True
        return self._result

    wait = __call__ = synchronize


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers this rank's indices (as
    (nnz, ndim) rows, named '<name>.indices') and values ('<name>.values') as
    they are (not coalesced) and returns a handle whose result
    (synchronize(handle), or handle() as in Horovod) is the sparse tensor of
    every member's entries in set order (duplicates not summed: coalesce()
    sums them); for Average the values are divided by the set's size."""
    fn = "sparse_allreduce_async"
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("%s: expected a sparse COO tensor" % fn)
    op = _resolve_op(op, None, fn, False)
    _, _, set_size = _resolve_set(process_set, fn)
    t = tensor
    indices_req = _allgather_async(t._indices().transpose(0, 1).contiguous(), "%s.indices" % name, process_set, fn)
    values_req = _allgather_async(t._values(), "%s.values" % name, process_set, fn)

    def finish(indices, values):
        values = (values / set_size) if op == Average else values
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return t.new(indices.transpose(0, 1), values, t.size())
    return _SparseHandle([indices_req, values_req], finish)


# ---------------------------------------------------------------- allgather
def _allgather_async(tensor, name, process_set, fn, prefix="allgather"):
    code = _code(tensor, fn)
    group, _, _ = _resolve_set(process_set, fn)
    wname = _weft_name(prefix, name, group)
    src = tensor.contiguous()
    h = _weft.allgather(wname, _desc(src, code), 0, (src,), group, **_device_kw(src, alloc=True))
    dtype, device = tensor.dtype, tensor.device
    return Request(h, lambda h: _from_buffer(h.output, dtype, h.shape, device))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather; synchronize() returns the rank-ordered concatenation along dim 0."""
    return _allgather_async(tensor, name, process_set, "allgather_async")


def _allgather_grads(grads, dims, process_set):
    """Horovod's allgather backward, for one or several tensors: each
    gradient averaged over the process set (one grouped allreduce), narrowed
    to this rank's rows (the offset: the rows of the set's ranks before it)."""
    fn = "allgather backward"
    _, set_rank, _ = _resolve_set(process_set, fn)
    averaged = _grouped_allreduce_async(grads, False, None, Average, 1.0, 1.0, process_set, fn).synchronize()
    all_dims = _allgather_async(torch.tensor([dims], dtype=torch.int64), None, process_set, fn).synchronize()
    offsets = all_dims[:set_rank].sum(0).tolist()
    return [a.narrow(0, int(o), d) for a, o, d in zip(averaged, offsets, dims)]


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim0 = tensor.shape[0] if tensor.dim() else 0
        ctx.process_set = process_set
        return _allgather_async(tensor, name, process_set, "allgather").synchronize()

    @staticmethod
    def backward(ctx, grad):
        return _allgather_grads([grad], [ctx.dim0], ctx.process_set)[0], None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation along dim 0 of every rank's tensor, in rank order (dim 0
    may differ between ranks). Differentiable."""
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """One weft request for all tensors (enqueued atomically, fused); tensor i
    is named '<name>.<i>'. synchronize() returns the list of gathered tensors."""
    fn = "grouped_allgather_async"
    tensors = list(tensors)
    if not tensors:
        return GroupRequest([])
    group, _, _ = _resolve_set(process_set, fn)
    codes = [_code(t, fn) for t in tensors]
    srcs = [t.contiguous() for t in tensors]
    h = _weft.grouped_allgather(op_name("grouped_allgather", name, group), [_desc(t, c) for t, c in zip(srcs, codes)],
                                0, (srcs,), group, **_device_kw(srcs[0], alloc=True))
    dtypes = [t.dtype for t in tensors]
    device = srcs[0].device
    return Request(h, lambda h: [_from_buffer(b, d, s, device) for b, d, s in zip(h.output, dtypes, h.shape)])


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(grouped_allgather_async(tensors, name, process_set).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_allgather_grads(list(grads), ctx.dims, ctx.process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of a list (differentiable); returns a list."""
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


# ---------------------------------------------------------------- broadcast
def _broadcast_async(tensor, inplace, root_rank, name, process_set, fn, prefix="broadcast"):
    code = _code(tensor, fn)
    group, _, _ = _resolve_set(process_set, fn)
    wname = _weft_name(prefix, name, group)
    root = int(root_rank)
    if group is not None:  # roots are world ranks, as in Horovod; weft wants the index in the group
        if root not in process_set.ranks:
            raise ValueError("%s: root_rank %d is not a member of %r" % (fn, root, process_set))
        root = process_set.ranks.index(root)
    if inplace:
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
        finish = _returns(tensor) if buf is tensor else _copy_back(tensor, buf)
    else:
        buf = tensor.detach().clone(memory_format=torch.contiguous_format)
        finish = _returns(buf)
    h = _weft.broadcast(wname, _desc(buf, code), root, 0, (buf,), group, **_device_kw(buf))
    _record(buf)
    return Request(h, finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's tensor into a new tensor."""
    return _broadcast_async(tensor, False, root_rank, name, process_set, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts an in-place broadcast of root_rank's tensor."""
    return _broadcast_async(tensor, True, root_rank, name, process_set, "broadcast_async_")


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _broadcast_async(tensor, False, root_rank, name, process_set, "broadcast").synchronize()

    @staticmethod
    def backward(ctx, grad):
        # Horovod: the gradient averaged over the process set on the root
        # (a world rank), zero elsewhere
        averaged = _allreduce_async(grad, False, None, Average, 1.0, 1.0, ctx.process_set,
                                    "broadcast backward").synchronize()
        if rank() != ctx.root_rank:
            averaged.zero_()
        return averaged, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every rank, as a new tensor (differentiable)."""
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites tensor with root_rank's; returns it."""
    return _broadcast_async(tensor, True, root_rank, name, process_set, "broadcast_").synchronize()


# ---------------------------------------------------------------- alltoall
def _split_list(splits, fn):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dtype == torch.bool:
            raise ValueError("%s: splits must be integers, got %s" % (fn, splits.dtype))
        return [int(s) for s in splits.reshape(-1).tolist()]
    return [int(s) for s in splits]


def _alltoall_async(tensor, splits, name, process_set, fn, prefix="alltoall"):
    code = _code(tensor, fn)
    group, _, _ = _resolve_set(process_set, fn)
    wname = _weft_name(prefix, name, group)
    src = tensor.contiguous()
    h = _weft.alltoall(wname, _desc(src, code), _split_list(splits, fn), 0, (src,), group,
                       **_device_kw(src, alloc=True))
    dtype, device = tensor.dtype, tensor.device
    return Request(h, lambda h: (_from_buffer(h.output, dtype, h.shape, device),
                                 torch.tensor(h.recv_splits, dtype=torch.int32)))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize() returns (output, received_splits)."""
    return _alltoall_async(tensor, splits, name, process_set, "alltoall_async")


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        sp = _split_list(splits, "alltoall")
        out, received = _alltoall_async(tensor, sp, name, process_set, "alltoall").synchronize()
        ctx.dim0 = tensor.shape[0] if tensor.dim() else 0
        ctx.sent = sum(sp) if sp is not None else ctx.dim0
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _grad_splits):
        back, _ = _alltoall_async(grad, ctx.received, None, ctx.process_set, "alltoall backward").synchronize()
        if ctx.sent < ctx.dim0:  # rows that were not sent get no gradient
            back = torch.cat([back, back.new_zeros((ctx.dim0 - ctx.sent,) + tuple(back.shape[1:]))])
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows [sum(splits[:j]), +splits[j]) of tensor (dim 0) to rank j
    (even splits when None) and returns the rows received, in rank order.
    As in Horovod, with splits given the result is (output, received_splits)
    (an int32 tensor of the rows received from each rank); without, the
    output alone. Differentiable (the gradient is the reverse alltoall)."""
    out, received = _AlltoallFn.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ---------------------------------------------------------------- reducescatter
def _reducescatter_async(tensor, name, op, prescale, postscale, process_set, fn, prefix="reducescatter"):
    code = _code(tensor, fn)
    group, set_rank, set_size = _resolve_set(process_set, fn)
    wname = _weft_name(prefix, name, group)
    src = tensor.contiguous()
    out = None
    if src.dim() > 0:
        rows = reducescatter_rows(src.shape[0], set_size, set_rank)
        out = torch.empty((rows,) + tuple(src.shape[1:]), dtype=src.dtype, device=src.device)
    h = _weft.reducescatter(wname, _desc(src, code), None if out is None else _desc(out, code), _WEFT_OPS[op],
                            float(prescale), float(postscale), 0, (src, out), group,
                            **_device_kw(src, alloc=out is None))
    _record(out)
    if out is not None:
        return Request(h, _returns(out))
    dtype, device = src.dtype, src.device
    return Request(h, lambda h: _from_buffer(h.output, dtype, h.shape, device))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter; synchronize() returns this rank's slice."""
    op = _resolve_op(op, None, "reducescatter_async", False)
    return _reducescatter_async(tensor, name, op, prescale_factor, postscale_factor, process_set,
                                "reducescatter_async")


def _reducescatter_grad_scaled(grad, op, prescale, postscale, process_set):
    """Horovod's reducescatter backward before its allgather: the gradient
    times the set's size (op Sum only), then times prescale, then times
    postscale, each a torch multiplication in the gradient's dtype, in that
    order (the roundings are Horovod's)."""
    if op == Sum:
        grad = grad * _resolve_set(process_set, "reducescatter backward")[2]
    if prescale != 1.0:
        grad = grad * prescale
    if postscale != 1.0:
        grad = grad * postscale
    return grad


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.args = (op, prescale, postscale, process_set)
        return _reducescatter_async(tensor, name, op, prescale, postscale, process_set, "reducescatter").synchronize()

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        scaled = _reducescatter_grad_scaled(grad, op, prescale, postscale, process_set)
        gathered = _allgather_async(scaled, None, process_set, "reducescatter backward").synchronize()
        return gathered, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's slice (dim 0; the first dim0 % size ranks get one extra
    row) of op over ranks of tensor (differentiable)."""
    op = _resolve_op(op, None, "reducescatter", False)
    compressed, ctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """One weft request for all tensors (enqueued atomically, fused); tensor i
    is named '<name>.<i>'. synchronize() returns the list of this rank's slices."""
    fn = "grouped_reducescatter_async"
    op = _resolve_op(op, None, fn, False)
    tensors = list(tensors)
    if not tensors:
        return GroupRequest([])
    group, set_rank, set_size = _resolve_set(process_set, fn)
    codes = [_code(t, fn) for t in tensors]
    srcs = [t.contiguous() for t in tensors]
    # 0-d tensors get no output here: the library sizes it (the ranks reject them anyway)
    outs = [torch.empty((reducescatter_rows(t.shape[0], set_size, set_rank),) + tuple(t.shape[1:]), dtype=t.dtype,
                        device=t.device)
            if t.dim() > 0 else None for t in srcs]
    h = _weft.grouped_reducescatter(op_name("grouped_reducescatter", name, group),
                                    [_desc(t, c) for t, c in zip(srcs, codes)],
                                    [None if o is None else _desc(o, c) for o, c in zip(outs, codes)],
                                    _WEFT_OPS[op], float(prescale_factor), float(postscale_factor), 0, (srcs, outs),
                                    group, **_device_kw(srcs[0], alloc=any(o is None for o in outs)))
    _record(*outs)

    def finish(h):
        return [o if o is not None else _from_buffer(h.output[i], t.dtype, h.shape[i], t.device)
                for i, (t, o) in enumerate(zip(srcs, outs))]
    return Request(h, finish)


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.args = (op, prescale, postscale, process_set)
        return tuple(grouped_reducescatter_async(tensors, name, op, process_set, prescale,
                                                 postscale).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.args
        scaled = [_reducescatter_grad_scaled(g, op, prescale, postscale, process_set) for g in grads]
        gathered = grouped_allgather_async(scaled, None, process_set).synchronize()
        return (None, None, None, None, None) + tuple(gathered)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor of a list (differentiable); returns a list."""
    op = _resolve_op(op, None, "grouped_reducescatter", False)
    compressed = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                         *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, compressed)]
