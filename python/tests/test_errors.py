"""Errors: local misuse raises ValueError at once; disagreements between
ranks raise WeftError on every rank, and the job stays usable; signals
interrupt a wait."""

import signal
import time

import numpy as np
import pytest

import weft
from conftest import ranks


def still_works():
    r, n = ranks()
    np.testing.assert_array_equal(weft.allreduce(np.array([r, 1])), [n * (n - 1) // 2, n])


def test_mismatched_shapes_fail_everywhere():
    r, n = ranks()
    with pytest.raises(weft.WeftError) as e:
        weft.allreduce(np.ones(r + 2, np.float32), name="shapes")
    assert e.value.status_name == "WEFT_ERR_MISMATCH"
    assert "allreduce.shapes" in str(e.value) and "shape" in str(e.value)
    assert isinstance(e.value, RuntimeError) and weft.HorovodInternalError is weft.WeftError
    still_works()


def test_mismatched_dtypes_ops_and_roots():
    r, n = ranks()
    with pytest.raises(weft.WeftError, match="float32|float64"):
        weft.allreduce(np.ones(3, np.float32 if r == 0 else np.float64), name="dtypes")
    with pytest.raises(weft.WeftError):
        weft.allreduce(np.ones(3), op="sum" if r == 0 else "max", name="ops")
    with pytest.raises(weft.WeftError, match="root"):
        weft.broadcast(np.ones(3), root=0 if r == 0 else 1, name="roots")
    with pytest.raises(weft.WeftError):
        weft.allgather(np.ones((2, 1 + r)), name="trailing")
    with pytest.raises(weft.WeftError):
        weft.allgather(np.float32(1.0), name="scalar")  # 0-d
    still_works()


def test_local_misuse_is_value_error():
    r, n = ranks()
    x = np.arange(2 * n, dtype=np.float32)
    with pytest.raises(ValueError, match="one per rank"):
        weft.alltoall(x, splits=[1] * (n + 1))
    with pytest.raises(ValueError, match="negative"):
        weft.alltoall(x, splits=[-1] + [1] * (n - 1))
    with pytest.raises(ValueError, match="more than"):
        weft.alltoall(x, splits=[2 * n + 1] + [0] * (n - 1))
    with pytest.raises(ValueError, match="divide"):
        weft.alltoall(np.arange(2 * n + 1))
    with pytest.raises(ValueError, match="root"):
        weft.broadcast(x, n)
    with pytest.raises(ValueError, match="bool"):
        weft.allreduce(np.ones(3, bool), op="average")
    with pytest.raises(ValueError, match="unsupported"):
        weft.allreduce(np.ones(3, np.uint32))
    with pytest.raises(ValueError, match="unsupported"):
        weft.allreduce(np.ones(3, np.complex64))
    with pytest.raises(ValueError, match="reduce op"):
        weft.allreduce(x, op="median")
    with pytest.raises(ValueError):
        weft.allreduce(x, name="x" * 300)
    still_works()


def test_duplicate_name_in_flight():
    """Rank `late` submits last, so everywhere else the first request is
    surely still in flight when the duplicate comes."""
    r, n = ranks()
    checked = 0
    for name, late in (("dup", 0), ("dup2", n - 1)):
        if r == late:
            time.sleep(0.3)
        first = weft.allreduce_async(np.ones(3), name=name)
        if r != late:
            with pytest.raises(ValueError, match="already in use"):
                weft.allreduce_async(np.ones(3), name=name)
            checked += 1
        np.testing.assert_array_equal(first.synchronize(), [n] * 3)
        # once complete, the name is free again
        np.testing.assert_array_equal(weft.allreduce(np.ones(3), name=name), [n] * 3)
    assert checked >= 1


def test_name_in_use_until_synchronized():
    """A name stays in use after its operation completed, until synchronize:
    every rank rejects the duplicate alike (small tensors complete at once in
    shared memory, on some ranks sooner than on others), and the ranks that
    did not submit it are not disturbed."""
    r, n = ranks()
    first = weft.allreduce_async(np.ones(3), name="unseen")
    time.sleep(0.3)  # complete everywhere by now; not looked at
    with pytest.raises(ValueError, match="already in use"):
        weft.allreduce_async(np.full(3, 2.0), name="unseen")
    np.testing.assert_array_equal(first.synchronize(), [n] * 3)
    # synchronized: free again, on every rank, and the job is in step
    np.testing.assert_array_equal(weft.allreduce(np.full(3, 2.0), name="unseen"), [2 * n] * 3)
    # one rank alone tries a name in use: only it gets the error
    other = weft.allreduce_async(np.ones(2), name="unseen.one")
    time.sleep(0.1)
    if r == n - 1:
        with pytest.raises(ValueError, match="already in use"):
            weft.allreduce_async(np.ones(2), name="unseen.one")
    np.testing.assert_array_equal(other.synchronize(), [n] * 2)
    still_works()


def test_error_is_raised_again_on_second_synchronize():
    r, n = ranks()
    req = weft.allreduce_async(np.ones(r + 1), name="twice")
    for _ in range(2):
        with pytest.raises(weft.WeftError, match="twice"):
            req.synchronize()
    assert req.poll()
    still_works()


class Interrupted(Exception):
    pass


def test_signal_interrupts_wait():
    """A wait for an operation no other rank submits is interrupted by a
    signal handler's exception within a wait slice; the dropped request stays
    safe (its buffers are kept until it completes at shutdown)."""
    r, n = ranks()

    def on_alarm(signum, frame):
        raise Interrupted()
    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        req = weft.allreduce_async(np.ones(1000), name="lonely.%d" % r)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            req.synchronize()
        assert time.monotonic() - start < 2.0
        assert not req.poll()
        del req  # orphaned while pending
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    still_works()


def test_cancel_then_reuse():
    """Request.cancel(): the operation fails on every rank with
    WEFT_ERR_CANCELLED naming who cancelled (also on a rank that submits it
    afterwards), the job stays usable and the name works again. 4 MiB: past
    the one-host board (WEFT_FAST_LARGE_BYTES), so through the coordinator."""
    r, n = ranks()
    x = np.ones(1 << 20, np.float32)
    if n > 1:
        h = weft.allreduce_async(x, name="cancelme") if r < n - 1 else None
        weft.barrier(name="cancel.submitted")
        if r == 0:
            h.cancel()
        if h is not None:
            with pytest.raises(weft.WeftError, match="cancelled by rank 0") as e:
                h.synchronize()
            assert e.value.status_name == "WEFT_ERR_CANCELLED"
        weft.barrier(name="cancel.done")
        if r == n - 1:
            with pytest.raises(weft.WeftError, match="cancelled by rank 0"):
                weft.allreduce(x, name="cancelme")
        weft.barrier(name="cancel.late")
    np.testing.assert_array_equal(weft.allreduce(x, name="cancelme")[:2], [n, n])
    done = weft.allreduce_async(np.ones(3), name="cancel.complete")
    done.synchronize()
    with pytest.raises(ValueError, match="already complete"):
        done.cancel()
    still_works()
