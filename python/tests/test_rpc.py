"""weft.rpc (torch.distributed.rpc's shape over weft_remote_*): every rank
calls its neighbour (and itself) at once, so every rank is caller and
callee. rpc_sync with tensors of every dtype (0-size, non-contiguous, 0-d,
aliased) and objects, by rank, name and WorkerInfo; rpc_async futures
(wait, then, done); remote() and RRefs (to_here, methods through
rref.rpc_sync(), an RRef argument to its owner ordered after the slow
call that makes it, remote on itself and local_value); remote exceptions
raised with their type; functions that are not importable on the callee;
unknown workers; per-call timeouts; nested calls refused; RRefs freed on
their owner when the creator lets go; rpc interleaved with weft.torch
allreduces. Expected values are computed here from the ranks."""

import gc
import sys
import threading
import time
import types

import pytest

from conftest import ranks, require

torch = require("torch")
import weft  # noqa: E402
import weft.rpc as rpc  # noqa: E402
import weft.torch as hvd  # noqa: E402

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]


# ---------------------------------------------------------------- functions the callee runs
def where():
    return weft.rank(), threading.current_thread() is threading.main_thread()


def describe(x):
    """A tensor's dtype, shape and a copy of its values, computed on the callee."""
    return str(x.dtype), tuple(x.shape), x.clone(), x.is_contiguous()


def combine(a, b, scale=1, tag=None):
    return {"sum": a + b * scale, "tag": tag, "rank": weft.rank(), "same": a is b}


class Accumulator(object):
    def __init__(self, n):
        self.total = torch.zeros(n, dtype=torch.float64)
        self.pushes = 0

    def push(self, g):
        self.total += g
        self.pushes += 1
        return self.total.clone()


def slow_tensor(seconds, value):
    time.sleep(seconds)
    return torch.full((4,), float(value))


def plus_rref(rref, y):
    return rref.local_value() + y  # only right once the slow call that made rref has run


def pushes(rref):
    return rref.local_value().pushes


class BadInput(Exception):
    pass


def raise_value_error(x):
    raise ValueError("bad value %d" % x)


def raise_custom(x):
    raise BadInput("custom %d" % x)


def sleep_for(seconds):
    time.sleep(seconds)
    return seconds


def nested(peer):
    return rpc.rpc_sync(peer, where)


def owner_of(rref):
    return rref.owner().id


def owned_count():
    return len(rpc._owned)


def not_picklable():
    return threading.Lock()


# ---------------------------------------------------------------- setup
@pytest.fixture(scope="module", autouse=True)
def rpc_world():
    weft.init()
    rpc.init_rpc()
    yield
    rpc.shutdown()


def neighbour():
    r, size = ranks()
    return (r + 1) % size


def payload(dtype, n, seed):
    if dtype == torch.bool:
        return (torch.arange(n) + seed) % 3 == 0
    return ((torch.arange(n) * 7 + seed * 5) % 90).to(dtype)


# ---------------------------------------------------------------- tests
def test_where_and_names():
    r, size = ranks()
    peer = neighbour()
    info = rpc.get_worker_info()
    assert (info.id, info.name) == (r, "worker%d" % r)
    assert rpc.get_worker_info("worker%d" % peer) == rpc.WorkerInfo(peer, "worker%d" % peer)
    for to in (peer, "worker%d" % peer, rpc.get_worker_info("worker%d" % peer)):
        assert rpc.rpc_sync(to, where) == (peer, False)  # on the callee, not on its main thread
    assert rpc.rpc_sync(r, where) == (r, False)  # a call to itself
    with pytest.raises(ValueError, match="unknown worker: rank %d" % size):
        rpc.rpc_sync(size, where)
    with pytest.raises(ValueError, match="unknown worker 'nobody'"):
        rpc.rpc_sync("nobody", where)


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d)[6:] for d in DTYPES])
def test_tensors_every_dtype(dtype):
    r, _ = ranks()
    peer = neighbour()
    for n in (0, 1, 1000):
        x = payload(dtype, n, r)
        name, shape, values, contiguous = rpc.rpc_sync(peer, describe, args=(x,))
        assert (name, shape, contiguous) == (str(dtype), (n,), True)
        assert values.dtype == dtype and torch.equal(values, payload(dtype, n, r))
    scalar = payload(dtype, 1, r).reshape(())
    assert torch.equal(rpc.rpc_sync(peer, describe, args=(scalar,))[2], scalar)


def test_noncontiguous_aliased_and_objects():
    r, _ = ranks()
    peer = neighbour()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + r
    t = base.t()  # 4 x 3, not contiguous
    assert not t.is_contiguous()
    name, shape, values, _ = rpc.rpc_sync(peer, describe, args=(t,))
    assert shape == (4, 3) and torch.equal(values, base.t())
    a = torch.ones(5) * r
    out = rpc.rpc_sync(peer, combine, args=(a, a), kwargs={"scale": 3, "tag": ("x", [r, {"k": None}])})
    assert out["same"] is True  # the same tensor twice arrives as one tensor
    assert torch.equal(rpc.rpc_sync(peer, torch.add, args=(a, 1)), a + 1)  # a builtin, found by its name
    assert torch.equal(out["sum"], torch.ones(5) * r * 4)
    assert out["tag"] == ("x", [r, {"k": None}]) and out["rank"] == peer
    big = torch.randn(300000, dtype=torch.float64)
    assert torch.equal(rpc.rpc_sync(peer, describe, args=(big,))[2], big)
    assert rpc.rpc_sync(peer, combine, args=(2, 3)) == {"sum": 2 + 3, "tag": None, "rank": peer, "same": False}


def test_rpc_async_futures():
    r, size = ranks()
    futs = [rpc.rpc_async(k, combine, args=(torch.full((3,), float(r)), torch.full((3,), float(k))), kwargs={"scale": 2})
            for k in range(size)]
    chained = futs[-1].then(lambda f: f.value()["rank"] * 10)
    for k, f in enumerate(futs):
        out = f.wait()
        assert out["rank"] == k and torch.equal(out["sum"], torch.full((3,), float(r + 2 * k)))
        assert f.done()
    assert chained.wait() == (size - 1) * 10
    # nobody waits: the completer thread completes it and runs the callback
    seen = []
    f = rpc.rpc_async(neighbour(), sleep_for, args=(0.05,))
    f.then(lambda fut: seen.append(fut.value()))
    t0 = time.time()
    while not seen and time.time() - t0 < 10:
        time.sleep(0.01)
    assert seen == [0.05] and f.done()


def test_remote_and_rrefs():
    r, _ = ranks()
    peer = neighbour()
    acc = rpc.remote(peer, Accumulator, args=(3,))
    assert acc.owner() == rpc.get_worker_info("worker%d" % peer) and acc.owner_name() == "worker%d" % peer
    assert not acc.is_owner()
    with pytest.raises(RuntimeError, match="use to_here"):
        acc.local_value()
    for k in range(1, 4):
        total = acc.rpc_sync().push(torch.full((3,), float(k + r), dtype=torch.float64))
    assert torch.equal(total, torch.full((3,), float(6 + 3 * r), dtype=torch.float64))
    assert rpc.rpc_sync(peer, pushes, args=(acc,)) == 3
    here = acc.to_here()  # a copy of the object
    assert here.pushes == 3 and torch.equal(here.total, total)
    # chained: plus_rref is sent while slow_tensor still runs; the owner runs it once the value exists
    t = rpc.remote(peer, slow_tensor, args=(0.3, r))
    y = rpc.rpc_async(peer, plus_rref, args=(t, torch.ones(4)))
    assert torch.equal(y.wait(), torch.full((4,), float(r + 1)))
    assert torch.equal(t.to_here(), torch.full((4,), float(r)))
    # on itself: the owner's value is the object
    mine = rpc.remote(r, Accumulator, args=(2,))
    assert mine.is_owner() and isinstance(mine.local_value(), Accumulator)
    local = rpc.RRef({"v": r})
    assert local.is_owner() and local.to_here() == {"v": r}
    assert rpc.rpc_sync(peer, owner_of, args=(local,)) == r  # an RRef argument arrives as an RRef


def test_remote_exceptions():
    r, _ = ranks()
    peer = neighbour()
    with pytest.raises(ValueError, match="bad value %d" % r) as e:
        rpc.rpc_sync(peer, raise_value_error, args=(r,))
    assert "On WorkerInfo(id=%d, name=worker%d)" % (peer, peer) in str(e.value)
    assert "raise_value_error" in str(e.value)  # the callee's traceback
    with pytest.raises(BadInput, match="custom 7"):
        rpc.rpc_async(peer, raise_custom, args=(7,)).wait()
    bad = rpc.remote(peer, raise_custom, args=(8,))
    with pytest.raises(BadInput, match="custom 8"):
        bad.to_here()
    with pytest.raises(TypeError, match="cannot be sent"):
        rpc.rpc_sync(peer, not_picklable)
    assert rpc.rpc_sync(peer, combine, args=(1, 1))["sum"] == 2  # the callee still serves


def test_functions_not_importable():
    peer = neighbour()
    with pytest.raises(ValueError, match="qualified name"):
        rpc.rpc_sync(peer, lambda: 1)
    # a module that only this rank has
    mod = types.ModuleType("weft_rpc_only_on_rank_%d" % weft.rank())
    exec("def f():\n    return 1\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    with pytest.raises(ModuleNotFoundError, match=r"%s\.f cannot be found on rank %d" % (mod.__name__, peer)):
        rpc.rpc_sync(peer, mod.f)

    def renamed():
        return 2
    renamed.__module__, renamed.__qualname__, renamed.__name__ = __name__, "no_such_function", "no_such_function"
    with pytest.raises(AttributeError, match="no_such_function cannot be found on rank %d" % peer):
        rpc.rpc_sync(peer, renamed)


def test_timeout():
    peer = neighbour()
    t0 = time.time()
    with pytest.raises(weft.WeftError) as e:
        rpc.rpc_sync(peer, sleep_for, args=(2.5,), timeout=0.3)
    took = time.time() - t0  # well before the function ends
    assert e.value.status_name == "WEFT_ERR_TIMEOUT" and 0.25 < took < 2.0, (e.value, took)
    assert "sleep_for on WorkerInfo(id=%d" % peer in str(e.value)
    f = rpc.rpc_async(peer, sleep_for, args=(0.6,), timeout=0.2)
    with pytest.raises(weft.WeftError, match="sleep_for"):
        f.wait()
    assert rpc.rpc_sync(peer, sleep_for, args=(0.01,)) == 0.01  # later calls work (after the sleepers)


def test_nested_call_refused():
    r, _ = ranks()
    with pytest.raises(RuntimeError, match="cannot be called inside a remote function"):
        rpc.rpc_sync(neighbour(), nested, args=(r,))


def test_rref_freed_when_creator_lets_go():
    peer = neighbour()
    gc.collect()
    hvd.barrier()
    before = rpc.rpc_sync(peer, owned_count)
    refs = [rpc.remote(peer, Accumulator, args=(1,)) for _ in range(5)]
    for x in refs:
        x.to_here()
    hvd.barrier()  # every rank's 5 are there
    assert rpc.rpc_sync(peer, owned_count) == before + 5
    del refs, x
    gc.collect()
    hvd.barrier()
    rpc.rpc_sync(peer, owned_count)  # carries the ids let go; the owner drops them
    hvd.barrier()
    assert rpc.rpc_sync(peer, owned_count) == before


def test_interleaved_with_collectives():
    r, size = ranks()
    peer = neighbour()
    acc = rpc.remote(peer, Accumulator, args=(4,))
    for step in range(10):
        fut = acc.rpc_async().push(torch.full((4,), float(step), dtype=torch.float64))
        s = hvd.allreduce(torch.full((4,), float(r + step)), op=hvd.Sum, name="rpc_interleave.%d" % step)
        assert torch.equal(s, torch.full((4,), float(sum(range(size)) + size * step)))
        total = fut.wait()
        assert torch.equal(total, torch.full((4,), float(sum(range(step + 1))), dtype=torch.float64))
