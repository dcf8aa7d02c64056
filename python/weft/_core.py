"""Framework-independent Python layer of weft, shared by the numpy API (weft)
and the Horovod-compatible torch API (weft.torch): joining and leaving the job,
operation names, and the Request objects that async operations return."""

import array
import atexit
import itertools
import threading

from . import _weft
from ._weft import WeftError

_lock = threading.Lock()
_finish_lock = threading.Lock()
_counters = {}
_atexit_registered = False


def op_name(prefix, name, group=None):
    """The name every rank must agree on: '<prefix>.<name>', or
    '<prefix>.noname.<n>' where n counts unnamed <prefix> operations in this
    group (None: the world) since init, so ranks that issue the same unnamed
    calls in the same order agree, as in Horovod. Counting per group keeps a
    process set's unnamed operations from shifting the world's numbering on
    its members only."""
    if name is not None:
        name = str(name)
        if not name:
            raise ValueError("%s: name must not be empty (use None for a generated name)" % prefix)
        return "%s.%s" % (prefix, name)
    key = (prefix, group)
    with _lock:
        counter = _counters.get(key)
        if counter is None:
            counter = _counters[key] = itertools.count()
        n = next(counter)
    return "%s.noname.%d" % (prefix, n)


def init(rank=None, size=None, addr=None, secret=None, timeout=None):
    """Joins the job (blocking until every rank has joined). Arguments left
    None come from the environment (weftrun sets WEFT_RANK, WEFT_SIZE,
    WEFT_ADDR, ...; HOROVOD_* and Open MPI's variables are accepted too); a
    process started without them is a job of one. Calling init again while
    initialized does nothing. Returns True if this call joined."""
    global _atexit_registered, _placement
    joined = _weft.init(rank=-1 if rank is None else int(rank),
                        size=-1 if size is None else int(size),
                        addr=addr, secret=secret,
                        timeout=0.0 if timeout is None else float(timeout))
    if joined:
        with _lock:
            _counters.clear()  # unnamed operations are counted per world
        _placement = None
        if not _atexit_registered:
            atexit.register(_weft.shutdown)
            _atexit_registered = True
        if _weft.cross_size() > 1:
            _placement = _gather_placement()
    return joined


# Every rank's (local_rank, local_size), gathered at init when the job spans
# hosts (cross_size() > 1, which every rank sees alike); None on one host,
# where it is (rank, size) for all. Horovod's placement (cross ranks by local
# rank, is_homogeneous) is computed from it by weft.torch.
_placement = None


def _gather_placement():
    mine = array.array("q", [_weft.local_rank(), _weft.local_size()])
    h = _weft.allgather("weft.placement", mine, 0, None, None)
    h.wait()
    out = array.array("q")
    out.frombytes(bytes(h.output))
    return [(out[2 * k], out[2 * k + 1]) for k in range(len(out) // 2)]


def placement():
    """Every rank's (local_rank, local_size), in rank order (raises
    WeftError when weft is not initialized)."""
    n = _weft.size()
    if _placement is None or len(_placement) != n:
        return [(k, n) for k in range(n)]  # one host
    return list(_placement)


shutdown = _weft.shutdown
is_initialized = _weft.is_initialized
rank = _weft.rank
size = _weft.size
local_rank = _weft.local_rank
local_size = _weft.local_size
cross_rank = _weft.cross_rank
cross_size = _weft.cross_size


class Request(object):
    """An operation in flight. poll() tells whether it has completed;
    synchronize() (alias wait()) blocks until it has, with the GIL released,
    and returns its result or raises WeftError. The request keeps the tensors
    it uses alive until then."""

    __slots__ = ("_handle", "_finish", "_result", "_done", "__weakref__")

    def __init__(self, handle, finish=None):
        self._handle = handle
        self._finish = finish
        self._result = None
        self._done = False

    @property
    def name(self):
        return self._handle.name

    def poll(self):
        return self._done or self._handle.poll()

    def cancel(self):
        """Withdraws the operation if its collective has not started
        (weft_request_cancel): synchronize() then raises WeftError with
        status WEFT_ERR_CANCELLED on every rank, naming who cancelled."""
        self._handle.cancel()

    def synchronize(self):
        if not self._done:
            self._handle.wait()  # several threads may wait at once (GIL released)
            with _finish_lock:  # exactly one of them builds the result
                if not self._done:
                    finish, self._finish = self._finish, None
                    self._result = finish(self._handle) if finish is not None else None
                    self._done = True
        return self._result

    wait = synchronize

    def __repr__(self):
        state = "done" if self._done or self._handle.done else "pending"
        return "<weft request %r %s>" % (self._handle.name, state)


class GroupRequest(object):
    """Several requests completed together (grouped operations)."""

    __slots__ = ("_requests", "_combine")

    def __init__(self, requests, combine=list):
        self._requests = list(requests)
        self._combine = combine

    def poll(self):
        return all(r.poll() for r in self._requests)

    def synchronize(self):
        return self._combine([r.synchronize() for r in self._requests])

    wait = synchronize


def reducescatter_rows(dim0, n, r):
    """Rows of dim 0 that rank r of n receives from a reducescatter: the first
    dim0 % n ranks get one extra."""
    return dim0 // n + (1 if r < dim0 % n else 0)


__all__ = ["WeftError", "Request", "GroupRequest", "op_name", "init", "shutdown", "is_initialized",
           "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size", "reducescatter_rows"]
