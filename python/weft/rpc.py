"""weft.rpc: remote procedure calls in the shape of torch.distributed.rpc,
over weft's remote execution (weft_remote_*) and the job's existing world.

    import weft.torch as hvd, weft.rpc as rpc
    hvd.init()
    rpc.init_rpc()                                   # collective; names "worker<rank>" unless given
    y = rpc.rpc_sync(1, torch.add, args=(x, 1))      # `to`: a rank, a name ("worker1") or a WorkerInfo
    fut = rpc.rpc_async("worker1", mymodule.f, args=(x,))    # torch.futures.Future subclass
    rref = rpc.remote(1, mymodule.Model, args=(3,))  # the value stays on rank 1
    rpc.rpc_sync(1, mymodule.step, args=(rref, x))   # an RRef argument: on its owner it is the value's handle
    rref.to_here()
    rpc.shutdown()                                   # collective (graceful=True)

Functions travel by qualified name (module and qualname) and are looked up
on the callee by importing the module, so every rank must be able to import
them (module-level functions, classes, methods; not lambdas or nested
functions). Arguments and results are pickled; CPU tensors in them (of
weft's dtypes) travel as weft tensors beside the pickle, sent straight from
their memory, and arrive as tensors over the received memory. An exception
raised by the function is raised in the caller with its type and a message
naming the callee and carrying its traceback. The function runs on the
callee's remote worker thread (one call at a time per rank), never on its
engine thread or its main thread; it may not make rpc calls itself.
docs/design.md (section "Remote execution") and python/README.md say where
this differs from torch.distributed.rpc.
"""

import atexit
import collections
import ctypes
import importlib
import io
import pickle
import struct
import threading
import traceback
import weakref

import torch

from . import _core, _weft
from ._weft import WeftError

__all__ = ["init_rpc", "init", "shutdown", "rpc_sync", "rpc_async", "remote", "RRef", "WorkerInfo",
           "get_worker_info", "is_initialized", "WeftError"]

_TO_WEFT = {
    torch.uint8: _weft.DTYPE_UINT8, torch.int8: _weft.DTYPE_INT8, torch.int16: _weft.DTYPE_INT16,
    torch.int32: _weft.DTYPE_INT32, torch.int64: _weft.DTYPE_INT64, torch.float16: _weft.DTYPE_FLOAT16,
    torch.bfloat16: _weft.DTYPE_BFLOAT16, torch.float32: _weft.DTYPE_FLOAT32,
    torch.float64: _weft.DTYPE_FLOAT64, torch.bool: _weft.DTYPE_BOOL,
}
_FROM_WEFT = {v: k for k, v in _TO_WEFT.items()}
_MAX_TENSORS = _weft.RPC_MAX_INPUTS - 1  # beyond these, tensors are pickled with the arguments
_DELETE_BATCH = 16  # result objects freed on a callee in batches of this many
_SYNC, _REMOTE = 0, 1
_ALIGN = 64


class WorkerInfo(object):
    """A worker: id (its rank) and name."""

    __slots__ = ("id", "name")

    def __init__(self, id, name):
        self.id = id
        self.name = name

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.id, self.name) == (other.id, other.name)

    def __hash__(self):
        return hash((self.id, self.name))

    def __repr__(self):
        return "WorkerInfo(id=%d, name=%s)" % (self.id, self.name)

    def __reduce__(self):
        return (WorkerInfo, (self.id, self.name))


class _State(object):
    def __init__(self, rank, names, timeout):
        self.rank = rank
        self.names = names
        self.by_name = {n: k for k, n in enumerate(names)}
        self.timeout = timeout
        self.lock = threading.RLock()  # (RLock: an RRef's finalizer may run while it is held)
        self.ctx = {}  # callee rank -> context there
        self.ctx_locks = collections.defaultdict(threading.Lock)
        self.result_dels = collections.defaultdict(list)  # callee -> result ids to free there
        self.owned_dels = collections.defaultdict(list)  # owner -> RRef ids whose creator let go
        self.deletes = []  # delete calls in flight
        self.cv = threading.Condition()
        self.pending = []  # futures (and RRef creations) not complete
        self.stop = False
        self.completer = None

    def info(self, k):
        return WorkerInfo(k, self.names[k])


_state = None
_owned = {}  # (owner, local) -> the value of an RRef owned here (or a _RemoteError)
_in_handler = threading.local()
_init_count = 0
_atexit_registered = False


def _require():
    st = _state
    if st is None:
        raise RuntimeError("weft.rpc is not initialized: call weft.rpc.init_rpc() first (on every rank)")
    return st


def is_initialized():
    return _state is not None


# ---------------------------------------------------------------- init and shutdown
def init_rpc(name=None, backend=None, rank=-1, world_size=None, rpc_backend_options=None, timeout=None):
    """Starts rpc on this rank, on weft's world (weft.init / weft.torch.init
    is called if it has not been: no second rendezvous). Collective: every
    rank calls it. name: this worker's name (default "worker<rank>"; letters,
    digits, '_', ':', '-', under 128 characters, unique). rank and
    world_size, if given, must be weft's. timeout (or
    rpc_backend_options.rpc_timeout): the default per-call timeout in
    seconds (None: weft's deadline, WEFT_TIMEOUT_SECONDS). backend is
    ignored (weft's world is the transport)."""
    global _state, _init_count, _atexit_registered
    del backend
    if _state is not None:
        raise RuntimeError("weft.rpc is already initialized on this rank (call shutdown() first)")
    _core.init()
    me, n = _weft.rank(), _weft.size()
    if rank is not None and rank != -1 and int(rank) != me:
        raise ValueError("init_rpc: rank=%d, but this process is weft rank %d" % (rank, me))
    if world_size is not None and int(world_size) != n:
        raise ValueError("init_rpc: world_size=%d, but weft's world has %d ranks" % (world_size, n))
    if name is None:
        name = "worker%d" % me
    name = str(name)
    if not 0 < len(name.encode()) < 128 or not all(c.isalnum() or c in "_:-" for c in name):
        raise ValueError("init_rpc: worker name %r: use 1..127 letters, digits, '_', ':' or '-'" % name)
    if timeout is None and rpc_backend_options is not None:
        timeout = getattr(rpc_backend_options, "rpc_timeout", None)
    timeout = float(timeout) if timeout is not None and timeout > 0 else 0.0
    _init_count += 1
    mine = bytearray(128)
    mine[:len(name.encode())] = name.encode()
    h = _weft.allgather("weft.rpc.names.%d" % _init_count, mine, 0, None, None)
    h.wait()
    raw = bytes(h.output)
    names = [raw[k * 128:(k + 1) * 128].rstrip(b"\0").decode() for k in range(n)]
    seen = {}
    for k, nm in enumerate(names):
        if nm in seen:
            raise ValueError("init_rpc: ranks %d and %d are both named %r" % (seen[nm], k, nm))
        seen[nm] = k
    st = _State(me, names, timeout)
    st.completer = threading.Thread(target=_complete_loop, args=(st,), name="weft.rpc completer", daemon=True)
    st.completer.start()
    _state = st
    _weft.rpc_serve(_dispatch)
    # no rank returns (and calls) before every rank serves with its state set
    _weft.barrier("weft.rpc.init.%d" % _init_count, None).wait()
    if not _atexit_registered:  # runs before weft's own shutdown (registered earlier)
        atexit.register(_at_exit)
        _atexit_registered = True


init = init_rpc


def shutdown(graceful=True, timeout=None):
    """Stops rpc on this rank. graceful (collective): waits for this rank's
    outstanding calls, closes its contexts on the callees, then for every
    rank to get here, so no rank stops serving while others still call it.
    Not graceful: local only, outstanding calls are cancelled. The weft
    world stays up either way."""
    global _state
    st = _state
    if st is None:
        return
    try:
        if graceful:
            with st.cv:
                futs = list(st.pending)
            for f in futs:
                f._call.wait(timeout)
            for task in sorted(st.ctx):
                try:
                    _weft.rpc_context_close(task, st.ctx[task])
                except (WeftError, ValueError):
                    pass  # the callee is gone: nothing of ours is left there
            _weft.barrier("weft.rpc.shutdown.%d" % _init_count, None).wait()
    finally:
        _state = None
        _weft.rpc_serve(None)
        with st.cv:
            st.stop = True
            futs = list(st.pending)
            st.cv.notify_all()
        for f in futs:  # (none after a graceful shutdown) they fail, and their callbacks run
            f._call.cancel()
            f._call.wait(1)
            f._finish()
        st.completer.join(5)
        _owned.clear()


def _at_exit():
    if _state is not None and _weft.is_initialized():
        shutdown(graceful=False)


def get_worker_info(worker_name=None):
    """WorkerInfo of the worker named worker_name (or of that rank, given an
    int); this worker's when None."""
    st = _require()
    if worker_name is None:
        return st.info(st.rank)
    return st.info(_resolve(st, worker_name))


def _resolve(st, to):
    if isinstance(to, WorkerInfo):
        to = to.id
    if isinstance(to, bool) or not isinstance(to, (int, str)):
        raise ValueError("weft.rpc: unknown worker %r (give a rank, a worker name or a WorkerInfo)" % (to,))
    if isinstance(to, str):
        k = st.by_name.get(to)
        if k is None:
            raise ValueError("weft.rpc: unknown worker %r (the workers are %s)" % (to, ", ".join(st.names)))
        return k
    if not 0 <= to < len(st.names):
        raise ValueError("weft.rpc: unknown worker: rank %d (the job has ranks 0..%d)" % (to, len(st.names) - 1))
    return to


# ---------------------------------------------------------------- functions by name
def _qualname(func):
    """(module, qualname, name) that the callee imports func by."""
    mod = getattr(func, "__module__", None)
    qual = getattr(func, "__qualname__", None)
    name = getattr(func, "__name__", None)
    if not callable(func) or mod is None or qual is None or "<" in qual:
        raise ValueError("weft.rpc: %r cannot be called remotely: functions travel by qualified name, so it must be "
                         "a module-level function, class or method that every rank can import" % (func,))
    return mod, qual, name


_resolved = {}


def _lookup(fname):
    fn = _resolved.get(fname)
    if fn is not None:
        return fn
    mod, qual, name = fname
    try:
        obj = importlib.import_module(mod)
        try:
            for part in qual.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            obj = getattr(importlib.import_module(mod), name)
    except Exception as e:
        raise type(e)("weft.rpc: function %s.%s cannot be found on rank %d: %s: %s"
                      % (mod, qual, _weft.rank(), type(e).__name__, e)) from None
    _resolved[fname] = obj
    return obj


# ---------------------------------------------------------------- encoding
class _RemoteError(object):
    """An exception raised by a remote function, on its way to the caller."""

    def __init__(self, exc, where):
        self.module = type(exc).__module__
        self.qualname = type(exc).__qualname__
        self.msg = "On %s:\n%r\n%s" % (where, exc, "".join(traceback.format_exception(type(exc), exc,
                                                                                         exc.__traceback__)))

    def exception(self):
        try:
            t = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                t = getattr(t, part)
            if isinstance(t, type) and issubclass(t, BaseException):
                return t(self.msg)
        except Exception:
            pass
        return RuntimeError("%s.%s: %s" % (self.module, self.qualname, self.msg))


def _weft_tensor(obj):
    """The plain CPU tensor weft can send for obj, or None (pickled instead)."""
    if (type(obj) not in (torch.Tensor, torch.nn.Parameter) or obj.device.type != "cpu" or obj.layout != torch.strided
            or obj.dtype not in _TO_WEFT or obj.dim() > 8):
        return None
    return obj.detach().contiguous()


class _ArgPickler(pickle.Pickler):
    """Pickles a call's header; tensors become inputs beside it, and RRefs
    that the callee owns and this rank created become its store objects
    (the callee runs the call once they are produced)."""

    def __init__(self, f, task, me):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.task, self.me = task, me
        self.inputs, self.keep, self.seen = [], [], {}

    def persistent_id(self, obj):
        if isinstance(obj, RRef):
            if obj._owner == self.task and obj._stored and obj._creator == self.me and len(self.inputs) < _MAX_TENSORS:
                self.inputs.append(("id",) + obj._id)
                return ("r", len(self.inputs), obj._owner, obj._id)
            return ("R", obj._owner, obj._id)
        if not isinstance(obj, torch.Tensor):
            return None
        pid = self.seen.get(id(obj))
        if pid is not None:
            return pid
        t = _weft_tensor(obj) if len(self.inputs) < _MAX_TENSORS else None
        if t is None:
            return None
        self.keep.append((obj, t))
        self.inputs.append((t.data_ptr(), _TO_WEFT[t.dtype], tuple(t.shape)))
        pid = self.seen[id(obj)] = ("t", len(self.inputs), obj.requires_grad, type(obj) is torch.nn.Parameter)
        return pid


def _tensor_of(buf, dtype, shape):
    dt = _FROM_WEFT[dtype]
    if len(buf) == 0:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(buf, dtype=dt).reshape(shape)


def _rebuild(t, requires_grad, parameter):
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_() if requires_grad else t


class _ArgUnpickler(pickle.Unpickler):
    def __init__(self, f, inputs):
        super().__init__(f)
        self.ins, self.made = inputs, {}

    def persistent_load(self, pid):
        if pid[0] in ("r", "R"):
            return RRef._fork(pid[-2], pid[-1])
        t = self.made.get(pid[1])
        if t is None:
            t = self.made[pid[1]] = _rebuild(_tensor_of(*self.ins[pid[1]]), pid[2], pid[3])
        return t


class _ResultPickler(pickle.Pickler):
    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors, self.seen = [], {}

    def persistent_id(self, obj):
        if isinstance(obj, RRef):
            return ("R", obj._owner, obj._id)
        if not isinstance(obj, torch.Tensor):
            return None
        pid = self.seen.get(id(obj))
        if pid is None:
            t = _weft_tensor(obj)
            if t is None:
                return None
            self.tensors.append(t)
            pid = self.seen[id(obj)] = ("t", len(self.tensors) - 1, obj.requires_grad,
                                        type(obj) is torch.nn.Parameter)
        return pid


def _encode(value):
    """(nbytes, fill) of a result: [header length, table length] (2 x u64),
    the pickle, the table ((offset, dtype, shape) per tensor), then the
    tensors' bytes, each at a multiple of 64."""
    f = io.BytesIO()
    p = _ResultPickler(f)
    p.dump(value)
    head = f.getvalue()
    table, off = [], 16 + len(head)
    sizes = [t.numel() * t.element_size() for t in p.tensors]
    # the table's own length moves the offsets: settle it (lengths only grow) before laying out
    tlen = 0
    while True:
        table, off = [], -(-(16 + len(head) + tlen) // _ALIGN) * _ALIGN
        for t, nb in zip(p.tensors, sizes):
            table.append((off, _TO_WEFT[t.dtype], tuple(t.shape)))
            off = -(-(off + nb) // _ALIGN) * _ALIGN
        tbytes = pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL)
        if len(tbytes) <= tlen:
            break
        tlen = len(tbytes)
    tbytes = tbytes.ljust(tlen, b"\0")
    total = table[-1][0] + sizes[-1] if table else 16 + len(head) + tlen
    tensors = p.tensors

    def fill(mv):
        mv[:16] = struct.pack("<QQ", len(head), tlen)
        mv[16:16 + len(head)] = head
        mv[16 + len(head):16 + len(head) + tlen] = tbytes
        if tensors:
            dst = torch.frombuffer(mv, dtype=torch.uint8)
            base = dst.data_ptr()
            for (o, _, _), t, nb in zip(table, tensors, sizes):
                if nb:
                    ctypes.memmove(base + o, t.data_ptr(), nb)
            del dst  # the view must not outlive the call: weft owns the memory
    return total, fill


def _decode(buf):
    mv = memoryview(buf)
    hlen, tlen = struct.unpack_from("<QQ", mv)
    table = pickle.loads(mv[16 + hlen:16 + hlen + tlen]) if tlen else []
    whole = torch.frombuffer(buf, dtype=torch.uint8) if table else None
    tensors = []
    for off, dt, shape in table:
        nb = _weft.dtype_size(dt)
        for d in shape:
            nb *= d
        tensors.append(whole[off:off + nb].view(_FROM_WEFT[dt]).reshape(shape))

    class U(pickle.Unpickler):
        def persistent_load(self, pid):
            if pid[0] == "R":
                return RRef._fork(pid[1], pid[2])
            return _rebuild(tensors[pid[1]], pid[2], pid[3])
    return U(io.BytesIO(mv[16:16 + hlen])).load()


# ---------------------------------------------------------------- the callee
def _dispatch(inputs):
    """Runs one call on this rank's remote worker thread (called from C with
    the GIL): inputs[0] is the header (the call's plain part, then the
    arguments, two pickles), the others its tensors and objects as
    (Buffer, dtype, shape). Returns the encoded result (nbytes, fill); the
    function's exceptions are results too."""
    _in_handler.active = True
    try:
        st = _state
        me = _weft.rank()
        where = st.info(me) if st is not None else "rank %d" % me
        u = _ArgUnpickler(io.BytesIO(inputs[0][0]), inputs)
        mode, out, fname, dels = u.load()
        for key in dels:
            _owned.pop(key, None)
        try:
            if st is None:
                raise RuntimeError("weft.rpc is not running on rank %d (shut down)" % me)
            fn = _lookup(fname)
            args, kwargs = u.load()
            value = fn(*args, **kwargs)
        except Exception as e:
            value = _RemoteError(e, where)
        if mode == _REMOTE:
            _owned[out] = value
            value = value if isinstance(value, _RemoteError) else None
        try:
            return _encode(value)
        except Exception as e:
            return _encode(_RemoteError(TypeError("the result of %s.%s cannot be sent: %s: %s"
                                                  % (fname[0], fname[1], type(e).__name__, e)), where))
    finally:
        _in_handler.active = False


def _rref_value(rref):
    """to_here's function, on the owner."""
    return rref.local_value()


def _rref_call(rref, method, args, kwargs):
    """RRef.rpc_sync() / rpc_async() / remote() proxies' function, on the owner."""
    return getattr(rref.local_value(), method)(*args, **kwargs)


# ---------------------------------------------------------------- the caller
def _context(st, task):
    ctx = st.ctx.get(task)
    if ctx is None:
        with st.ctx_locks[task]:
            ctx = st.ctx.get(task)
            if ctx is None:
                ctx = st.ctx[task] = _weft.rpc_context(task)
    return ctx


def _flush_deletes(st, task, ctx, force=False):
    """Frees fetched results on task in batches (one call, not waited for);
    drops the delete calls that have completed."""
    with st.lock:
        st.deletes = [c for c in st.deletes if not c.poll()]
        ids = st.result_dels[task]
        if not ids or (len(ids) < _DELETE_BATCH and not force):
            return
        st.result_dels[task] = []
        st.deletes.append(_weft.rpc_delete(task, ctx, ids, st.timeout))


def _timeout(st, timeout):
    # torch: -1 (unset) is the default, 0 no limit; weft has no unlimited waits: both are the default
    return float(timeout) if timeout is not None and timeout > 0 else st.timeout


def _start(to, func, args, kwargs, timeout, mode, what):
    """Starts a call; (RemoteCall, description, callee rank, output id)."""
    st = _require()
    if getattr(_in_handler, "active", False):
        raise RuntimeError("weft.rpc: %s cannot be called inside a remote function (it runs on rank %d's remote "
                           "worker thread, which serves one call at a time)" % (what, st.rank))
    task = _resolve(st, to)
    if hasattr(func, "__self__") and not isinstance(func.__self__, type) and hasattr(func, "__func__"):
        args = (func.__self__,) + tuple(args or ())  # a bound method: its object travels as the first argument
        func = func.__func__
    fname = _qualname(func)
    ctx = _context(st, task)
    out = _weft.rpc_id()
    with st.lock:
        dels, st.owned_dels[task] = st.owned_dels[task], []
    f = io.BytesIO()
    p = _ArgPickler(f, task, st.rank)
    p.dump((mode, out, fname, dels))
    p.dump((tuple(args or ()), dict(kwargs or {})))
    desc = "%s %s.%s on %s" % (what, fname[0], fname[1], st.info(task))
    call = _weft.rpc_call(task, ctx, [bytearray(f.getbuffer())] + p.inputs, out, _timeout(st, timeout),
                          mode == _SYNC, desc)
    del p  # the tensors were copied into the call
    _flush_deletes(st, task, ctx)
    return call, desc, task, out


def _failure(call, desc):
    e = WeftError("%s: %s" % (desc, call.error))
    e.status = call.status
    e.status_name = _weft.status_string(call.status)
    return e


def _result(st, call, desc, task, out):
    """The completed call's value, or raises its error."""
    if call.status != _weft.OK:
        raise _failure(call, desc)
    with st.lock:
        st.result_dels[task].append(out)
    value = _decode(call.output)
    if isinstance(value, _RemoteError):
        raise value.exception()
    return value


def rpc_sync(to, func, args=None, kwargs=None, timeout=-1.0):
    """Runs func(*args, **kwargs) on worker `to` (a rank, a worker name or a
    WorkerInfo) and returns its result; raises its exception, or WeftError
    (status ERR_TIMEOUT, ERR_PEER_LOST naming the rank, ...) when the call
    itself fails. timeout: seconds (<= 0: the default)."""
    call, desc, task, out = _start(to, func, args, kwargs, timeout, _SYNC, "rpc_sync")
    call.wait()
    return _result(_state or _require(), call, desc, task, out)


class _Future(torch.futures.Future):
    """rpc_async's future: a torch.futures.Future (wait, then, done, value,
    add_done_callback) completed by the call, either in wait() or by the
    completer thread (which runs then-callbacks)."""

    def __init__(self, st, call, desc, task, out, creation=False):
        super().__init__()
        self._st, self._call, self._desc, self._task, self._out = st, call, desc, task, out
        self._creation = creation
        self._lock = threading.Lock()
        self._set = False

    def _finish(self):
        with self._lock:
            if self._set:
                return
            self._set = True
        with self._st.cv:
            if self in self._st.pending:
                self._st.pending.remove(self)
        try:
            if self._creation:  # an RRef's creation: nothing to fetch
                if self._call.status != _weft.OK:
                    raise _failure(self._call, self._desc)
                value = None
            else:
                value = _result(self._st, self._call, self._desc, self._task, self._out)
        except BaseException as e:
            self.set_exception(e)
            return
        self.set_result(value)

    def wait(self):
        if not self._set:
            self._call.wait()
            self._finish()
        return super().wait()

    def done(self):
        if not self._set and self._call.poll():
            self._finish()
        return super().done()


def _track(st, fut):
    with st.cv:
        st.pending.append(fut)
        st.cv.notify()
    return fut


def _complete_loop(st):
    """Completes futures nobody waits on (their then-callbacks run here)."""
    while True:
        with st.cv:
            while not st.pending and not st.stop:
                st.cv.wait()
            if st.stop:
                return
            futs = list(st.pending)
        # the oldest usually completes first (a callee serves in order); others are polled after it, or every 5 ms
        try:
            futs[0]._call.wait(0.05 if len(futs) == 1 else 0.005)
            for f in futs:
                if f._call.poll():
                    f._finish()
        except Exception:  # never expected; the loop must go on (waiters complete their own futures anyway)
            traceback.print_exc()


def rpc_async(to, func, args=None, kwargs=None, timeout=-1.0):
    """As rpc_sync, without blocking: returns a torch.futures.Future whose
    wait() gives the result (or raises)."""
    call, desc, task, out = _start(to, func, args, kwargs, timeout, _SYNC, "rpc_async")
    return _track(_state, _Future(_state, call, desc, task, out))


# ---------------------------------------------------------------- RRef
class RRef(object):
    """A reference to a value on its owner. remote() makes them (the owner
    keeps func's result; this rank, the creator, holds the reference), and
    RRef(value) wraps a local value. Passed as an argument, an RRef arrives
    as an RRef; on its owner local_value() is the value itself. A call to
    the owner that this rank makes with an RRef it created runs once the
    value exists. The owner keeps the value until the creator's RRef is
    garbage collected (copies elsewhere do not extend that)."""

    __slots__ = ("_owner", "_id", "_stored", "_creator", "_creation", "__weakref__")

    def __init__(self, value=None):
        st = _require()
        self._owner, self._id, self._stored, self._creator, self._creation = st.rank, _weft.rpc_id(), False, \
            st.rank, None
        _owned[self._id] = value
        weakref.finalize(self, _owned.pop, self._id, None)

    @classmethod
    def _fork(cls, owner, oid):
        r = cls.__new__(cls)
        r._owner, r._id, r._stored, r._creator, r._creation = owner, oid, False, -1, None
        return r

    def __reduce__(self):
        return (RRef._fork, (self._owner, self._id))  # plain pickling (not through rpc): a copy

    def owner(self):
        return _require().info(self._owner)

    def owner_name(self):
        return self.owner().name

    def is_owner(self):
        return self._owner == _require().rank

    def confirmed_by_owner(self):
        return self._creation is None or self._creation.done()

    def local_value(self):
        """The value (on the owner only); raises what the function raised."""
        st = _require()
        if self._owner != st.rank:
            raise RuntimeError("RRef.local_value(): %s is owned by %s, not by this worker (%s): use to_here()"
                               % (self._id, st.info(self._owner), st.info(st.rank)))
        if self._creation is not None and not _in_handler.__dict__.get("active"):
            self._creation.wait()  # created by this rank on itself: wait for it
        try:
            value = _owned[self._id]
        except KeyError:
            raise RuntimeError("RRef %s is not (or no longer) held by its owner %s: its creation has not run yet, "
                               "or its creator let go of it" % (self._id, st.info(self._owner))) from None
        if isinstance(value, _RemoteError):
            raise value.exception()
        return value

    def to_here(self, timeout=-1.0):
        """The value, copied here from the owner (blocking)."""
        if self.is_owner():
            return self.local_value()
        return rpc_sync(self._owner, _rref_value, args=(self,), timeout=timeout)

    def _proxy(self, kind, timeout):
        rref = self

        class Proxy(object):
            def __getattr__(self, method):
                def call(*args, **kwargs):
                    return kind(rref._owner, _rref_call, args=(rref, method, args, kwargs), timeout=timeout)
                return call
        return Proxy()

    def rpc_sync(self, timeout=-1.0):
        """rref.rpc_sync().method(*args): method of the value, run on the owner."""
        return self._proxy(rpc_sync, timeout)

    def rpc_async(self, timeout=-1.0):
        return self._proxy(rpc_async, timeout)

    def remote(self, timeout=-1.0):
        return self._proxy(remote, timeout)

    def __repr__(self):
        st = _state
        return "RRef(owner=%s, id=%s)" % (st.info(self._owner) if st else self._owner, self._id)


def _let_go(owner, oid):
    """An RRef this rank created is garbage: the owner drops the value with
    the next call this rank makes to it (and the store object goes then too)."""
    st = _state
    if st is not None:
        with st.lock:
            st.owned_dels[owner].append(oid)
            st.result_dels[owner].append(oid)


def remote(to, func, args=None, kwargs=None, timeout=-1.0):
    """Runs func(*args, **kwargs) on worker `to`, which keeps the result;
    returns an RRef to it at once. Errors (the function's, a timeout) are
    raised by to_here() or local_value()."""
    call, desc, task, out = _start(to, func, args, kwargs, timeout, _REMOTE, "remote")
    st = _state
    r = RRef._fork(task, out)
    r._stored, r._creator = True, st.rank
    r._creation = _track(st, _Future(st, call, desc, task, out, creation=True))
    weakref.finalize(r, _let_go, task, out)
    return r
