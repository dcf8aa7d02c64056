"""weft's Python extension with device tensors, on machines without a GPU:
weft's CUDA backend is pointed (WEFT_CUDA_LIBRARY) at tests/gpu's
fake_cudart (FAKE_CUDART_MODE=ok), a stand-in runtime whose "device memory"
is host memory it tracks, so the device path of weft._weft runs for real:
(pointer, dtype, shape, device, kind, stream) tensors, the consumer stream
keyword, and the output allocator weft calls from its engine thread with the
GIL (what weft.torch uses for torch's caching allocator), whose owners become
the Handle's outputs and are released with it. Expected values are computed
here from each rank's known input. Run as N ranks under weftrun (gpu.pyfake)."""

import ctypes
import gc
import os

import numpy as np
import pytest

from weft import _weft

LIB = os.environ.get("WEFT_CUDA_LIBRARY", "")
if not LIB.endswith("fake_cudart.so"):
    pytest.fail("WEFT_CUDA_LIBRARY must name tests/gpu's fake_cudart (got %r)" % LIB, pytrace=False)
_weft.init()
RANK, SIZE = _weft.rank(), _weft.size()
count, why = _weft.device_available(_weft.DEVICE_KIND_CUDA)
assert count == 1, why
fake = ctypes.CDLL(LIB)  # the library weft loaded: the same handle
STREAM = ctypes.c_void_p()
assert fake.cudaStreamCreateWithFlags(ctypes.byref(STREAM), 1) == 0
LIVE = {"n": 0}


class DevBuf(object):
    """n bytes of the fake's device memory, freed when dropped."""

    def __init__(self, n):
        p = ctypes.c_void_p()
        assert fake.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(max(n, 1))) == 0
        self.ptr, self.n = p.value, n
        LIVE["n"] += 1

    def array(self, dtype, count):
        if count == 0:
            return np.zeros(0, dtype)
        return np.ctypeslib.as_array((ctypes.c_char * max(self.n, 1)).from_address(self.ptr)).view(dtype)[:count]

    def __del__(self):
        fake.cudaFree(ctypes.c_void_p(self.ptr))
        LIVE["n"] -= 1


def alloc(nbytes):
    b = DevBuf(nbytes)
    return (b.ptr if nbytes else 0), b


def dev_tensor(values):
    b = DevBuf(values.nbytes)
    b.array(values.dtype, values.size)[:] = values
    code = {np.float32: _weft.DTYPE_FLOAT32, np.int32: _weft.DTYPE_INT32}[values.dtype.type]
    return b, (b.ptr, code, values.shape, 0, _weft.DEVICE_KIND_CUDA, STREAM.value)


def vals(r, n, seed=0):
    return ((np.arange(n) * 7 + r * 5 + seed) % 11 - 5).astype(np.float32)


@pytest.fixture(autouse=True)
def no_leak():
    gc.collect()
    before = LIVE["n"]
    yield
    gc.collect()
    assert LIVE["n"] == before, "device buffers from the allocator were not released"


@pytest.mark.parametrize("n", [1, 37, 100003])
def test_allreduce_in_place(n):
    b, t = dev_tensor(vals(RANK, n))
    _weft.allreduce("ar.%d" % n, t, t, _weft.OP_SUM, keep=b, stream=STREAM.value).wait()
    assert np.array_equal(b.array(np.float32, n), sum(vals(r, n) for r in range(SIZE)))


@pytest.mark.parametrize("n", [0, 1, 37, 4099])
def test_allgather_output_from_the_allocator(n):
    rows = n + RANK if n else 0
    b, t = dev_tensor(vals(RANK, rows, 1))
    h = _weft.allgather("ag.%d" % n, t, keep=b, stream=STREAM.value, alloc=alloc)
    h.wait()
    want = np.concatenate([vals(r, n + r if n else 0, 1) for r in range(SIZE)])
    assert h.shape == (want.size,)
    if want.size == 0:
        assert h.output is None  # nothing allocated for no bytes
    else:
        assert isinstance(h.output, DevBuf)
        assert np.array_equal(h.output.array(np.float32, want.size), want)
    del h


def test_alltoall_and_reducescatter_from_the_allocator():
    n = 5
    b, t = dev_tensor(vals(RANK, n * SIZE, 2))
    h = _weft.alltoall("a2a", t, keep=b, alloc=alloc)
    h.wait()
    want = np.concatenate([vals(r, n * SIZE, 2)[RANK * n:(RANK + 1) * n] for r in range(SIZE)])
    assert np.array_equal(h.output.array(np.float32, want.size), want) and h.recv_splits == (n,) * SIZE
    h = _weft.reducescatter("rs", t, None, _weft.OP_SUM, keep=b, alloc=alloc)
    h.wait()
    total = sum(vals(r, n * SIZE, 2) for r in range(SIZE))
    assert np.array_equal(h.output.array(np.float32, n), total[RANK * n:(RANK + 1) * n])


def test_grouped_allgather_from_the_allocator():
    bufs = [dev_tensor(vals(RANK, 3 + k, 10 + k)) for k in range(4)]
    h = _weft.grouped_allgather("gag", [t for _, t in bufs], keep=[b for b, _ in bufs], alloc=alloc)
    h.wait()
    for k in range(4):
        want = np.concatenate([vals(r, 3 + k, 10 + k) for r in range(SIZE)])
        assert np.array_equal(h.output[k].array(np.float32, want.size), want)


def test_failing_allocator_fails_the_request_and_the_world_goes_on():
    b, t = dev_tensor(vals(RANK, 8, 3))

    def broken(nbytes):
        raise MemoryError("no device memory today")
    h = _weft.allgather("ag.broken", t, keep=b, alloc=broken)
    with pytest.raises(_weft.WeftError) as e:
        h.wait()
    assert "allocat" in str(e.value)
    _weft.allreduce("ar.after", t, t, _weft.OP_SUM, keep=b).wait()
    assert np.array_equal(b.array(np.float32, 8), sum(vals(r, 8, 3) for r in range(SIZE)))


def test_cuda_built_when_the_backend_loads():
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    import weft.torch as hvd
    assert hvd.cuda_built()


def test_device_available():
    assert _weft.device_available(_weft.DEVICE_KIND_SIM)[0] >= 1
    with pytest.raises(ValueError):
        _weft.device_available(99)


def test_host_and_device_kinds_mismatch():
    if SIZE < 2:
        return
    host = vals(RANK, 4)
    b, t = dev_tensor(vals(RANK, 4))
    h = _weft.allreduce("kinds", host if RANK == 0 else t, host if RANK == 0 else t, _weft.OP_SUM, keep=b)
    with pytest.raises(_weft.WeftError) as e:
        h.wait()
    assert "rank 0" in str(e.value) and "rank 1" in str(e.value)
    _weft.barrier("after.kinds").wait()
