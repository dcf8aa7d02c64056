"""What weft.torch.mpi_ops (which re-exports all of it) builds its
collectives on: Horovod's basics (ranks and sizes, the build and
capability queries, cross ranks, timeline, join, init), process sets
(ProcessSet, add_process_set, remove_process_set and how a set resolves to a
weft group), Horovod's reduction op values, the dtype map, and the helpers
the collectives share (dtype codes, op resolution, outputs over weft's
memory, finishers, poll, synchronize, barrier)."""

import warnings

import torch

from .. import _core, _weft
from .._core import Request, WeftError, op_name


HorovodInternalError = WeftError

# Horovod's values for the reduction ops.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_WEFT_OPS = {Average: _weft.OP_AVERAGE, Sum: _weft.OP_SUM, Min: _weft.OP_MIN, Max: _weft.OP_MAX,
             Product: _weft.OP_PRODUCT}

_DTYPES = {
    torch.uint8: _weft.DTYPE_UINT8, torch.int8: _weft.DTYPE_INT8, torch.int16: _weft.DTYPE_INT16,
    torch.int32: _weft.DTYPE_INT32, torch.int64: _weft.DTYPE_INT64, torch.float16: _weft.DTYPE_FLOAT16,
    torch.bfloat16: _weft.DTYPE_BFLOAT16, torch.float32: _weft.DTYPE_FLOAT32,
    torch.float64: _weft.DTYPE_FLOAT64, torch.bool: _weft.DTYPE_BOOL,
}

# ---------------------------------------------------------------- basics
size = _core.size
rank = _core.rank
local_size = _core.local_size
local_rank = _core.local_rank
shutdown = _core.shutdown
is_initialized = _core.is_initialized


def mpi_threads_supported():
    return False


def mpi_built():
    return False


def mpi_enabled():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


_cuda = None


def cuda_built():
    """True when weft's CUDA backend loads here (the CUDA runtime, found at
    run time, and at least one device): CUDA tensors can then be passed to
    every operation. Unlike Horovod's (how it was compiled), weft's answer
    is about this process: weft needs no CUDA to build."""
    return _cuda_status()[0]


def _cuda_status():
    """(available, why not) of weft's CUDA backend, asked once."""
    global _cuda
    if _cuda is None:
        count, why = _weft.device_available(_weft.DEVICE_KIND_CUDA)
        _cuda = (count > 0, why)
    return _cuda


def rocm_built():
    return False


def _cross_set():
    """The world ranks with this rank's local rank, in rank order: Horovod's
    cross communicator (one rank per host that has this local rank)."""
    placement = _core.placement()
    mine = placement[rank()][0]
    return [k for k, (lr, _) in enumerate(placement) if lr == mine]


def cross_rank():
    """This rank's index among the ranks with its local rank (Horovod's
    cross rank: on even hosts, this host's index). weft's numpy API
    (weft.cross_rank) is this host's index instead."""
    return _cross_set().index(rank())


def cross_size():
    """The number of ranks with this rank's local rank, i.e. of hosts that
    run a rank with this local rank (Horovod's cross size; on even hosts,
    the number of hosts; on uneven ones it differs between local ranks)."""
    return len(_cross_set())


def is_homogeneous():
    """True when every host runs the same number of ranks (the same answer
    on every rank)."""
    return len(set(ls for _, ls in _core.placement())) == 1


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (chrome://tracing, Perfetto) to
    file_path: rank 0 writes it, unless the path contains '%r' (then every
    rank writes its own, '%r' replaced by the rank)."""
    _weft.timeline_start(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Finishes the timeline file (valid JSON from then on)."""
    _weft.timeline_stop()


def join(device=-1):
    """This rank has no more data: until every rank has joined, it takes part
    in the others' allreduces with zeros (Average still divides by the full
    size) and in their barriers; allgather, broadcast, alltoall and
    reducescatter fail while a rank has joined. Returns the rank that joined
    last. device is accepted for Horovod compatibility (the join itself
    moves no tensor)."""
    request = Request(_weft.join(None), lambda h: h.last_joined)
    return request.synchronize()


# ---------------------------------------------------------------- process sets
class ProcessSet(object):
    """A set of ranks (world ranks, sorted) that runs collectives among
    themselves; register it with add_process_set() or init(process_sets=...)
    on every rank before use. rank() and size() are this rank's index in the
    set and the set's size. Broadcast roots are given as world ranks."""

    def __init__(self, ranks):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None
        self._group = None

    def size(self):
        return size() if self.ranks is None else len(self.ranks)

    def rank(self):
        if self.ranks is None:
            return rank()
        return self.ranks.index(rank()) if rank() in self.ranks else -1

    def included(self):
        return self.ranks is None or rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(%s)" % ("global" if self.ranks is None else self.ranks)


global_process_set = ProcessSet(None)
_process_sets = [global_process_set]


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of world ranks) and
    returns it. Call it on every rank, in the same order; the members
    create weft's group together (blocking until all of them have)."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None:
        return global_process_set
    if any(r < 0 or r >= size() for r in ps.ranks) or len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError("add_process_set: %r must list distinct ranks of 0..%d" % (ps, size() - 1))
    if ps._group is not None or ps in _process_sets:
        raise ValueError("add_process_set: %r is already registered" % (ps,))
    if ps.included():
        ps._group = _weft.Group(ps.ranks)
    ps.process_set_id = max(p.process_set_id for p in _process_sets) + 1
    _process_sets.append(ps)
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (every rank, in the same order; collective
    over its members). No operation may be in flight in it. Returns True if
    it was registered."""
    if process_set is global_process_set or process_set not in _process_sets:
        return False
    _process_sets.remove(process_set)
    group, process_set._group = process_set._group, None
    process_set.process_set_id = None
    if group is not None:
        group.destroy()
    return True


def _resolve_set(ps, fn):
    """(weft group or None for the world, this rank's index in the set, set size)."""
    if ps is None or ps is global_process_set:
        return None, rank(), size()
    if not isinstance(ps, ProcessSet):
        raise TypeError("%s: process_set must be a ProcessSet, not %s" % (fn, type(ps).__name__))
    if ps.ranks == list(range(size())) and ps._group is None:
        return None, rank(), size()  # every rank: the world itself
    if ps._group is None:
        if ps.included() and ps not in _process_sets:
            raise ValueError("%s: %r is not registered; call add_process_set() first" % (fn, ps))
        raise ValueError("%s: rank %d is not a member of %r" % (fn, rank(), ps))
    return ps._group, ps._group.rank(), ps._group.size()


def _check_process_set(ps, fn):
    _resolve_set(ps, fn)


def init(comm=None, process_sets=None):
    """Joins the job (ranks and the rendezvous address come from weftrun's
    environment) and registers the given process sets (ProcessSets or lists
    of world ranks). process_sets="dynamic" (Horovod's dynamic process sets)
    registers none: weft's process sets can always be added and removed
    later with add_process_set/remove_process_set. comm (an MPI
    communicator or rank list) is not supported."""
    if comm is not None:
        raise NotImplementedError("init(comm=...): weft takes its ranks from the launcher's environment")
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError("init: process_sets must be a list of process sets or \"dynamic\", not %r"
                             % (process_sets,))
        process_sets = None
    if _core.init():
        for ps in _process_sets[1:]:  # groups of an earlier world are gone
            ps._group, ps.process_set_id = None, None
        del _process_sets[1:]
    for ps in process_sets or []:
        add_process_set(ps)


# ---------------------------------------------------------------- helpers
def _code(t, fn):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (fn, type(t).__name__))
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: weft supports CPU and CUDA tensors; got a tensor on %s" % (fn, t.device))
    if t.layout != torch.strided:
        raise ValueError("%s: sparse tensors are not supported; densify with .to_dense()" % fn)
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError("%s: dtype %s is not supported (uint8, int8, int16, int32, int64, float16, bfloat16, "
                         "float32, float64, bool)" % (fn, t.dtype))


def _desc(t, code):
    """weft's view of tensor t: (data_ptr, dtype code, shape), and for a CUDA
    tensor its device index, the CUDA kind and torch's current stream there
    (the producer: weft reads t only after the work queued on it so far)."""
    if t.device.type == "cuda":
        return (t.data_ptr(), code, tuple(t.shape), t.device.index, _weft.DEVICE_KIND_CUDA,
                torch.cuda.current_stream(t.device).cuda_stream)
    return (t.data_ptr(), code, tuple(t.shape))


def _device_kw(t, alloc=False):
    """The device keywords of a weft operation on tensor t (none for CPU
    tensors). CUDA: stream, torch's current stream, is the consumer stream:
    the request completes as soon as the copy of the result back to the GPU
    is queued and that stream made to wait for it, so synchronize() does not
    wait for the GPU and work queued on that stream afterwards sees the
    result. alloc: outputs weft sizes come from torch's caching allocator
    on that stream (an allocator weft calls, with the GIL, from its thread)."""
    if t.device.type != "cuda":
        return {}
    stream = torch.cuda.current_stream(t.device)
    kw = {"stream": stream.cuda_stream}
    if alloc:
        device = t.device

        def allocate(nbytes):
            with torch.cuda.stream(stream):
                buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            return buf.data_ptr(), buf
        kw["alloc"] = allocate
    return kw


def _record(*tensors):
    """CUDA tensors weft writes after the request completes (the copy back
    runs on weft's stream, ordered before the consumer stream's later work):
    their memory is not reused before the current stream has passed that
    point, even if they were allocated on another stream."""
    for t in tensors:
        if t is not None and t.device.type == "cuda":
            t.record_stream(torch.cuda.current_stream(t.device))


def _from_buffer(buf, dtype, shape, device=None):
    """A tensor over weft-allocated output memory (no copy): a Buffer of host
    memory, or for CUDA tensors the uint8 tensor _device_kw's allocator made
    (None when the output has no bytes)."""
    if isinstance(buf, torch.Tensor):
        return buf.view(dtype).view(shape) if buf.numel() else torch.empty(shape, dtype=dtype, device=buf.device)
    if buf is None or len(buf) == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.frombuffer(buf, dtype=dtype).view(shape)


def _resolve_op(op, average, fn, allow_adasum=True):
    if average is not None:
        if op is not None:
            raise ValueError("%s: the op parameter supersedes average; give only one of them" % fn)
        warnings.warn("%s: parameter `average` is deprecated; use op=Average or op=Sum" % fn, DeprecationWarning,
                      stacklevel=3)
        op = Average if average else Sum
    elif op is None:
        op = Average
    if op == Adasum:
        if not allow_adasum:
            raise NotImplementedError("%s: op=Adasum is for allreduce (and its grouped forms) only" % fn)
        return op
    if op not in _WEFT_OPS:
        raise ValueError("%s: unknown reduction op %r" % (fn, op))
    return op


def _copy_back(tensor, buf):
    """Finisher of in-place operations on non-contiguous tensors."""
    def finish(_h):
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor
    return finish


def _returns(t):
    return lambda _h: t


def poll(handle):
    """True if the operation behind handle has completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for the operation (GIL released) and returns its output; raises
    HorovodInternalError (WeftError) if it failed."""
    return handle.synchronize()


def barrier(process_set=global_process_set):
    group, _, _ = _resolve_set(process_set, "barrier")
    # always named here: weft numbers unnamed barriers per world, not per group
    Request(_weft.barrier(op_name("barrier", None, group), group)).synchronize()
