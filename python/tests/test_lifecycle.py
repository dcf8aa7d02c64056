"""Joining and leaving: init/shutdown repeated in one process, use before
init, pending work at shutdown, a stalled tensor timing out, and a Python
exception on one rank ending a weftrun job cleanly."""

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import weft
from conftest import ranks, weftrun_path


def test_reinit_repeatedly():
    r, n = ranks()
    for i in range(3):
        weft.shutdown()
        assert not weft.is_initialized()
        with pytest.raises(ValueError, match="not been initialized"):
            weft.rank()
        with pytest.raises(ValueError, match="not been initialized"):
            weft.allreduce(np.ones(2))
        weft.shutdown()  # a second shutdown is harmless
        assert weft.init() is True
        assert weft.init() is False  # already joined
        assert weft.rank() == r and weft.size() == n
        # unnamed operations are numbered from 0 again in the new world
        req = weft.allreduce_async(np.full(2, i + r, np.int64))
        assert req.name == "allreduce.noname.0"
        np.testing.assert_array_equal(req.synchronize(), i * n + n * (n - 1) // 2)


def test_pending_request_fails_with_shutdown():
    r, n = ranks()
    buf = np.ones(10)
    req = weft.allreduce_async(buf, name="never.%d" % r)  # nobody else submits it
    dropped = weft.allgather_async(np.ones(3), name="dropped.%d" % r)
    del dropped  # orphaned: freed when shutdown completes it
    weft.barrier()  # every rank has submitted before any leaves
    weft.shutdown()
    with pytest.raises(weft.WeftError) as e:
        req.synchronize()
    # SHUTDOWN, or PEER_LOST naming the rank when a peer's BYE came first
    assert e.value.status_name in ("WEFT_ERR_SHUTDOWN", "WEFT_ERR_PEER_LOST"), str(e.value)
    if e.value.status_name == "WEFT_ERR_PEER_LOST":
        assert "rank" in str(e.value)
    weft.init()
    np.testing.assert_array_equal(weft.allreduce(np.ones(2)), [n, n])


def test_stalled_tensor_times_out_naming_ranks():
    """Every rank submits a tensor no other rank submits: each fails with a
    timeout naming the missing ranks. (A rank that shut down early would
    fail the others' tensors with PEER_LOST instead: hence the barrier, well
    within the 2 s operation timeout, as the timeouts fire together.)"""
    r, n = ranks()
    weft.shutdown()
    weft.init(timeout=2.0)
    try:
        start = time.monotonic()
        with pytest.raises(weft.WeftError) as e:
            weft.allreduce(np.ones(4), name="stalled.%d" % r)
        assert e.value.status_name == "WEFT_ERR_TIMEOUT", str(e.value)
        assert "stalled.%d" % r in str(e.value)
        others = [k for k in range(n) if k != r]
        assert str(others[0]) in str(e.value).split("stalled")[1], str(e.value)
        assert time.monotonic() - start < 15
        weft.barrier("after-stall")
    finally:
        weft.shutdown()
        weft.init()
    np.testing.assert_array_equal(weft.allreduce(np.ones(2)), [n, n])


def run_job(np_, script, timeout=60):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("WEFT_", "HOROVOD_")) and k not in ("WEFT_TEST_WEFTRUN",):
            del env[k]
    start = time.monotonic()
    proc = subprocess.run([weftrun_path(), "-np", str(np_), sys.executable, "-c", textwrap.dedent(script)],
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - start


def test_exception_on_one_rank_ends_the_job():
    """Only rank 0 runs the nested job; the others wait at the barrier."""
    r, n = ranks()
    if r != 0:
        return
    proc, took = run_job(2, """
        import numpy as np, weft
        weft.init()
        if weft.rank() == 1:
            raise RuntimeError("boom on purpose")
        weft.allreduce(np.ones(3), name="waits-for-rank-1")
    """)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "boom on purpose" in out, out
    assert "rank 1" in out, out  # weftrun names the failed rank
    assert took < 30, out


def test_exit_without_shutdown_is_clean():
    r, n = ranks()
    if r != 0:
        return
    proc, _ = run_job(2, """
        import numpy as np, weft
        weft.init()
        assert weft.allreduce(np.ones(1))[0] == 2
        print("done", weft.rank())
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("done") == 2
