"""weft's numpy API: every collective, dtype and reduce op against
references computed here from every rank's known input."""

import os
import threading
import time

import numpy as np
import pytest

import weft
import weftref
from conftest import ranks

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]
OPS = {weft.SUM: np.add.reduce, weft.MIN: np.minimum.reduce, weft.MAX: np.maximum.reduce,
       weft.PRODUCT: np.multiply.reduce}
OP_NAMES = {weft.SUM: "sum", weft.MIN: "min", weft.MAX: "max", weft.PRODUCT: "product"}


def contribution(r, n_elems, dtype):
    """Rank r's input: small values (products of a few ranks stay exact)."""
    if dtype == np.bool_:
        return (np.arange(n_elems) + r) % 3 == 0
    return ((np.arange(n_elems) * 7 + r * 5) % 3 + 1).astype(dtype)


def test_ranks_and_sizes():
    r, n = ranks()
    assert r == int(os.environ.get("WEFT_RANK", 0))
    assert n == int(os.environ.get("WEFT_SIZE", 1))
    # weftrun runs every rank on this host
    assert (weft.local_rank(), weft.local_size(), weft.cross_rank(), weft.cross_size()) == (r, n, 0, 1)
    assert weft.is_initialized()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", sorted(OPS), ids=["sum", "min", "max", "product"])
def test_allreduce_dtype_op(dtype, op):
    r, n = ranks()
    count = 37
    got = weft.allreduce(contribution(r, count, dtype), op=op)
    expect = OPS[op](np.stack([contribution(k, count, dtype) for k in range(n)]), axis=0)  # exact: small values
    assert got.dtype == np.dtype(dtype) and got.shape == (count,)
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(got, weftref.allreduce([contribution(k, count, dtype) for k in range(n)],
                                                         OP_NAMES[op]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_allreduce_average(dtype):
    r, n = ranks()
    got = weft.allreduce(contribution(r, 10, dtype), op="average")
    assert got.dtype == np.dtype(dtype)
    total = sum(contribution(k, 10, dtype).astype(np.int64) for k in range(n))
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(got, total // n)  # non-negative: truncation == floor
    else:  # the sum is exact; times 1/n (divided in double) as Horovod scales: float32 by float32(1/n) in float32
        f = np.float32(1.0 / n) if dtype == np.float32 else 1.0 / n
        np.testing.assert_array_equal(got, total.astype(dtype) * f)


def test_allreduce_float16_rounds_in_rank_order():
    """float16 values that are not small integers: every fold step rounds, so
    the result is weft's rank-order fold to the last bit (weftref), for
    every op and with scales that round too."""
    r, n = ranks()

    def x_of(k):
        return (np.random.default_rng(40 + k).standard_normal(257) * (k + 1)).astype(np.float16)
    xs = [x_of(k) for k in range(n)]
    for op in ("sum", "average", "min", "max", "product"):
        for pre, post in ((1.0, 1.0), (3.0, 0.1)):
            got = weft.allreduce(x_of(r), op=op, prescale=pre, postscale=post)
            assert got.dtype == np.float16
            np.testing.assert_array_equal(got, weftref.allreduce(xs, op, pre, post), err_msg="%s %s %s" % (op, pre,
                                                                                                      post))


def test_allreduce_scales_inplace_and_out():
    r, n = ranks()

    def x_of(k):  # thirds: the scales and the sums round
        return np.full((3, 4), (k + 1) / 3.0)
    x = x_of(r)
    xs = [x_of(k) for k in range(n)]
    np.testing.assert_array_equal(weft.allreduce(x, prescale=3.0, postscale=0.1),
                                  weftref.allreduce(xs, "sum", 3.0, 0.1))
    assert np.all(x == x_of(r))  # input untouched
    total = weftref.allreduce(xs, "sum")
    out = np.empty_like(x)
    assert weft.allreduce(x, out=out) is out
    np.testing.assert_array_equal(out, total)
    assert weft.allreduce_(x) is x
    np.testing.assert_array_equal(x, total)
    with pytest.raises(ValueError):
        weft.allreduce_(np.ones((4, 4))[:, 1])  # in place needs a contiguous array


def test_allreduce_large_and_scalar_and_empty():
    r, n = ranks()
    x = np.arange(1 << 20, dtype=np.float32) + r
    got = weft.allreduce(x)
    expect = np.arange(1 << 20, dtype=np.float64) * n + n * (n - 1) / 2  # below 2^24: exact in float32
    np.testing.assert_array_equal(got, expect)
    s = weft.allreduce(np.float64(r), op="max")
    assert s.shape == () and s == n - 1
    e = weft.allreduce(np.zeros((0, 3), np.float32))
    assert e.shape == (0, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_allgather_uneven(dtype):
    r, n = ranks()
    mine = np.stack([contribution(r + i, 3, dtype) for i in range(r)]).reshape(r, 3) if r else np.zeros((0, 3), dtype)
    got = weft.allgather(mine)
    expect = np.concatenate([np.stack([contribution(k + i, 3, dtype) for i in range(k)]).reshape(k, 3)
                             if k else np.zeros((0, 3), dtype) for k in range(n)])
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expect)
    assert got.flags.writeable


def test_broadcast_every_root():
    r, n = ranks()
    for root in range(n):
        x = np.full((2, 5), r * 10 + 1, dtype=np.int32)
        got = weft.broadcast(x, root)
        np.testing.assert_array_equal(got, np.full((2, 5), root * 10 + 1))
        assert np.all(x == r * 10 + 1)  # out of place
        assert weft.broadcast_(x, root) is x
        np.testing.assert_array_equal(x, np.full((2, 5), root * 10 + 1))


def test_alltoall_even_and_uneven():
    r, n = ranks()
    x = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) + 100 * r
    out, splits = weft.alltoall(x)
    expect = np.concatenate([(np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) + 100 * k)[2 * r:2 * r + 2]
                             for k in range(n)])
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(splits, [2] * n)

    # rank k sends j+k rows to rank j (some zero), and keeps a spare row unsent
    def sends(k):
        return [(j + k) % 3 for j in range(n)]

    def data(k):
        return np.arange(sum(sends(k)) + 1, dtype=np.int64) + 1000 * k
    out, splits = weft.alltoall(data(r), splits=sends(r))
    pieces = []
    for k in range(n):
        start = sum(sends(k)[:r])
        pieces.append(data(k)[start:start + sends(k)[r]])
    np.testing.assert_array_equal(out, np.concatenate(pieces))
    np.testing.assert_array_equal(splits, [sends(k)[r] for k in range(n)])


def test_reducescatter_uneven():
    r, n = ranks()
    rows = 2 * n + 1  # the first rank gets one extra row
    x = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * (r + 1)
    got = weft.reducescatter(x)
    total = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) * sum(k + 1 for k in range(n))  # integers: exact
    counts = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(counts[:r])
    np.testing.assert_array_equal(got, total[start:start + counts[r]])
    got = weft.reducescatter(x, op="max", postscale=2.0)
    np.testing.assert_array_equal(got, 2 * n * np.arange(rows * 2, dtype=np.float64).reshape(rows, 2)[start:start +
                                                                                                     counts[r]])
    # thirds, average, scales: every step rounds
    xs = [np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (k + 1) / 3 for k in range(n)]
    got = weft.reducescatter(xs[r], op="average", prescale=3.0, postscale=0.1)
    np.testing.assert_array_equal(got, weftref.reducescatter(xs, r, "average", 3.0, 0.1))


def test_async_many_in_flight_out_of_order():
    r, n = ranks()
    reqs = [weft.allreduce_async(np.full(100, i + r, np.int64), name="many.%d" % i) for i in range(20)]
    assert reqs[0].name == "allreduce.many.0"
    for i, req in reversed(list(enumerate(reqs))):
        np.testing.assert_array_equal(req.synchronize(), i * n + n * (n - 1) // 2)
        assert req.poll()
    unnamed = weft.allgather_async(np.array([r]))
    assert unnamed.name.startswith("allgather.noname.")
    np.testing.assert_array_equal(unnamed.wait(), np.arange(n))


def test_gil_released_while_waiting():
    """A thread keeps running while the main thread waits for an allreduce
    that rank 0 delays (the C extension waits with the GIL released)."""
    r, n = ranks()
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
    t = threading.Thread(target=spin)
    t.start()
    try:
        if r == 0:
            time.sleep(0.5)
        ticks[0] = 0
        start = time.monotonic()
        got = weft.allreduce(np.ones(4))
        waited = time.monotonic() - start
    finally:
        stop.set()
        t.join()
    np.testing.assert_array_equal(got, [n] * 4)
    if r != 0 and waited > 0.3:  # this rank really was blocked for a while
        assert ticks[0] > 1000, "only %d ticks in %.2f s: the GIL was held" % (ticks[0], waited)


def test_barrier():
    weft.barrier()
    weft.barrier("named")


def test_grouped_allreduce_join_and_groups():
    r, n = ranks()
    a, b = weft.grouped_allreduce([np.full(3, r, np.int32), np.ones((2, 2))], name="grp")
    np.testing.assert_array_equal(a, [n * (n - 1) // 2] * 3)
    np.testing.assert_array_equal(b, np.full((2, 2), n))
    assert weft.grouped_allreduce([]) == []
    # join: rank r contributes to r + 1 allreduces, then joins
    for i in range(r + 1):
        assert weft.allreduce(np.array([r + 1]), name="j.%d" % i)[0] == sum(k + 1 for k in range(i, n))
    assert weft.join() == n - 1
    # a group of the first and last rank (a single rank when n == 1)
    members = sorted({0, n - 1})
    if r in members:
        g = weft.Group(members)
        assert (g.rank(), g.size(), g.ranks) == (members.index(r), len(members), tuple(members))
        np.testing.assert_array_equal(weft.allreduce(np.array([r]), group=g), [sum(members)])
        np.testing.assert_array_equal(weft.allgather(np.array([r]), group=g), members)
        out, _ = weft.alltoall(np.arange(len(members)) + 10 * r, group=g)
        np.testing.assert_array_equal(out, [10 * k + g.rank() for k in members])
        weft.barrier(group=g)
        g.destroy()
        with pytest.raises(ValueError, match="removed"):
            weft.allreduce(np.ones(1), group=g)


def test_many_threads_wait_on_one_request():
    """Several threads block on the same request (rank 0 submits late); the
    request is released only after the last waiter leaves."""
    r, n = ranks()
    if r == 0:
        time.sleep(0.3)
    req = weft.allreduce_async(np.full(1000, r + 1.0), name="shared-wait")
    if r != 0 and n > 1:
        assert req._handle.wait(timeout=0.01) is False  # still pending: rank 0 has not submitted
    results, errors = [], []

    def waiter():
        try:
            results.append(req.synchronize().sum())
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    assert all(v == 1000 * sum(k + 1.0 for k in range(n)) for v in results)


def _rows(dim0, n, k):
    """Rows of dim 0 rank k of n receives from a reducescatter."""
    return dim0 // n + (1 if k < dim0 % n else 0)


def test_grouped_allgather():
    """One request for several allgathers (mixed dtypes, shapes and per-rank
    row counts, one of them empty on rank 0), each against the rank-ordered
    concatenation of every rank's input."""
    r, n = ranks()

    def inputs(k):
        return [np.full((k + 1, 2), k, np.int32),
                np.arange(k + 2, dtype=np.float64) * (k + 1),
                np.ones((k, 3), np.float32) * k,  # no rows on rank 0
                np.array([k * 10, k * 10 + 1], np.int64)]
    req = weft.grouped_allgather_async(inputs(r), name="gag")
    assert isinstance(req, weft.Request) and req.name == "grouped_allgather.gag"
    got = req.synchronize()
    assert len(got) == 4
    for i, g in enumerate(got):
        expect = np.concatenate([inputs(k)[i] for k in range(n)])
        assert g.dtype == expect.dtype and g.shape == expect.shape, (i, g.shape, expect.shape)
        np.testing.assert_array_equal(g, expect)
    assert weft.grouped_allgather([]) == []
    # unnamed, twice (numbered in call order on every rank), blocking form
    for it in range(2):
        a, = weft.grouped_allgather([np.array([r + it])])
        np.testing.assert_array_equal(a, np.arange(n) + it)


@pytest.mark.parametrize("op", ["sum", "max"])
def test_grouped_reducescatter(op):
    """One request for several reducescatters (uneven rows, other dims,
    dtypes), with scales, each against this rank's slice of the reduction
    computed here."""
    r, n = ranks()
    shapes = [(2 * n + 1, 2), (n,), (3 * n + 2, 1, 2)]
    dtypes = [np.float64, np.int64, np.float32]

    def inputs(k):
        return [((np.arange(int(np.prod(s))) % 5 + 1) * (k + 1)).astype(d).reshape(s) for s, d in zip(shapes, dtypes)]
    got = weft.grouped_reducescatter(inputs(r), op=op, name="grs." + op, prescale=2.0, postscale=0.5)
    assert len(got) == len(shapes)
    for i, g in enumerate(got):
        stacked = np.stack([inputs(k)[i].astype(np.float64) * 2.0 for k in range(n)])
        total = (stacked.sum(axis=0) if op == "sum" else stacked.max(axis=0)) * 0.5
        start = sum(_rows(shapes[i][0], n, k) for k in range(r))
        expect = total[start:start + _rows(shapes[i][0], n, r)]
        assert g.dtype == np.dtype(dtypes[i]) and g.shape == expect.shape, (i, g.shape, expect.shape)
        np.testing.assert_array_equal(g, expect)  # small integers: exact in every dtype
        np.testing.assert_array_equal(g, weftref.reducescatter([inputs(k)[i] for k in range(n)], r, op, 2.0, 0.5))
    assert weft.grouped_reducescatter([]) == []


def test_grouped_mismatch_then_ok():
    """A shape that differs on the last rank fails the whole group on every
    rank with WeftError naming the tensor; the next group works."""
    r, n = ranks()
    if n < 2:
        pytest.skip("needs two ranks")
    cols = 3 if r == n - 1 else 2
    with pytest.raises(weft.WeftError, match=r"grouped_allgather\.gbad\.1"):
        weft.grouped_allgather([np.ones((1, 2)), np.ones((1, cols))], name="gbad")
    with pytest.raises(weft.WeftError, match=r"grouped_reducescatter\.gbad\.0"):
        weft.grouped_reducescatter([np.ones((n, cols)), np.ones(n)], name="gbad")
    a, b = weft.grouped_reducescatter([np.ones((n, 2)), np.arange(n, dtype=np.float64)], name="gok")
    np.testing.assert_array_equal(a, np.full((1, 2), n))
    np.testing.assert_array_equal(b, [r * n])


def test_grouped_in_a_group():
    """Grouped allgather/reducescatter inside a process set (the first and last
    rank)."""
    r, n = ranks()
    members = sorted({0, n - 1})
    if r not in members:
        return
    g = weft.Group(members)
    try:
        a, = weft.grouped_allgather([np.array([r, r])], name="gg", group=g)
        np.testing.assert_array_equal(a, np.repeat(members, 2))
        s, = weft.grouped_reducescatter([np.ones((len(members), 2)) * (r + 1)], name="gg", group=g)
        np.testing.assert_array_equal(s, np.full((1, 2), sum(k + 1 for k in members)))
    finally:
        g.destroy()
