"""weft.torch as horovod.torch: every collective and dtype (bfloat16 too),
in-place and async forms, zero-copy and non-contiguous tensors, op
constants, grouped forms, object and state broadcasts, and the parts that
report themselves as missing."""

import warnings

import pytest

from conftest import ranks, require

torch = require("torch")
import numpy as np  # noqa: E402
import weft.torch as hvd  # noqa: E402
import weftref  # noqa: E402
from weft import Request  # noqa: E402

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
IDS = [str(d).replace("torch.", "") for d in DTYPES]


def value(r, n_elems, dtype):
    """Rank r's input: small values, exact in every dtype and product."""
    if dtype == torch.bool:
        return (torch.arange(n_elems) + r) % 3 == 0
    return ((torch.arange(n_elems) * 7 + r * 5) % 3 + 1).to(dtype)


OP_NAMES = {hvd.Sum: "sum", hvd.Min: "min", hvd.Max: "max", hvd.Product: "product", hvd.Average: "average"}


def reference(op, dtype, n_elems, n):
    """What weft computes from every rank's value(): weftref's rank-order
    fold in weft's arithmetic for the dtype (exact, every dtype)."""
    return weftref.allreduce_t([value(k, n_elems, dtype) for k in range(n)], OP_NAMES[op])


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_allreduce_every_dtype_and_op(dtype):
    r, n = ranks()
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product] + ([] if dtype == torch.bool else [hvd.Average])
    for op in ops:
        got = hvd.allreduce(value(r, 33, dtype), op=op)
        assert got.dtype == dtype
        expect = reference(op, dtype, 33, n)
        assert torch.equal(got, expect), (op, got, expect)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64],
                         ids=["float16", "bfloat16", "float32", "float64"])
def test_reductions_round_as_weft_defines(dtype):
    """Values that are not small integers, with scales that round: every
    fold step and scale rounds, and the result is weftref's rank-order fold
    to the last bit (a fold in another order, a scale applied at another
    step, a 16-bit sum kept in float32: each fails)."""
    r, n = ranks()

    def x_of(k):
        g = torch.Generator().manual_seed(60 + k)
        return (torch.randn(2 * n + 1, 7, generator=g, dtype=torch.float64) * (k + 1)).to(dtype)
    xs = [x_of(k) for k in range(n)]
    for op in (hvd.Sum, hvd.Average, hvd.Product, hvd.Min, hvd.Max):
        got = hvd.allreduce(x_of(r), op=op, prescale_factor=3.0, postscale_factor=0.1)
        assert torch.equal(got, weftref.allreduce_t(xs, OP_NAMES[op], 3.0, 0.1)), op
    for op in (hvd.Sum, hvd.Average):
        got = hvd.reducescatter(x_of(r), op=op, prescale_factor=3.0, postscale_factor=0.1)
        assert torch.equal(got, weftref.reducescatter_t(xs, r, OP_NAMES[op], 3.0, 0.1)), op


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_gather_broadcast_alltoall_every_dtype(dtype):
    r, n = ranks()
    got = hvd.allgather(value(r, r + 1, dtype))
    assert torch.equal(got, torch.cat([value(k, k + 1, dtype) for k in range(n)]))
    got = hvd.broadcast(value(r, 5, dtype), root_rank=n - 1)
    assert torch.equal(got, value(n - 1, 5, dtype))
    out, received = hvd.alltoall(value(r, 2 * n, dtype), splits=torch.full((n,), 2, dtype=torch.int32))
    assert torch.equal(out, torch.cat([value(k, 2 * n, dtype)[2 * r:2 * r + 2] for k in range(n)]))
    assert received.dtype == torch.int32 and received.tolist() == [2] * n
    if dtype != torch.bool:
        got = hvd.reducescatter(value(r, 2 * n + 1, dtype), op=hvd.Sum)
        expect = weftref.reducescatter_t([value(k, 2 * n + 1, dtype) for k in range(n)], r)
        assert got.dtype == dtype and torch.equal(got, expect), (got, expect)


def test_inplace_zero_copy_and_noncontiguous():
    r, n = ranks()
    t = torch.full((4, 3), float(r + 1))
    ptr = t.data_ptr()
    out = hvd.allreduce_(t, op=hvd.Sum)
    assert out is t and t.data_ptr() == ptr  # reduced where it lies
    assert torch.all(t == sum(k + 1.0 for k in range(n)))
    base = torch.zeros(4, 6)
    column = base[:, 2]  # non-contiguous view
    column.fill_(r + 1)
    hvd.allreduce_(column, op=hvd.Max)
    assert torch.all(base[:, 2] == n) and torch.all(base[:, :2] == 0) and torch.all(base[:, 3:] == 0)
    view = torch.arange(12.0).reshape(3, 4).t() * (r + 1)  # transposed input, out of place
    got = hvd.allreduce(view, op=hvd.Sum)
    assert torch.equal(got, torch.arange(12.0).reshape(3, 4).t() * sum(k + 1 for k in range(n)))
    b = torch.zeros(3, 4)[:, 1]
    b.fill_(r)
    hvd.broadcast_(b, root_rank=0)
    assert torch.all(b == 0)


def test_async_poll_synchronize_and_names():
    r, n = ranks()
    h = hvd.allreduce_async(torch.ones(5) * r, name="async.one", op=hvd.Sum)
    assert h.name == "allreduce.async.one"
    assert torch.equal(hvd.synchronize(h), torch.full((5,), float(n * (n - 1) // 2)))
    assert hvd.poll(h)
    t = torch.ones(3)
    h = hvd.allreduce_async_(t, op=hvd.Sum)
    assert h.name.startswith("allreduce.noname.")
    assert hvd.synchronize(h) is t and torch.all(t == n)
    h = hvd.allgather_async(torch.tensor([r]))
    assert hvd.synchronize(h).tolist() == list(range(n))
    t = torch.tensor([float(r)])
    assert hvd.synchronize(hvd.broadcast_async_(t, 0)) is t and t.item() == 0
    assert hvd.synchronize(hvd.broadcast_async(torch.tensor([float(r)]), n - 1)).item() == n - 1
    out, received = hvd.synchronize(hvd.alltoall_async(torch.arange(n) + 10 * r))
    assert out.tolist() == [10 * k + r for k in range(n)] and received.tolist() == [1] * n
    got = hvd.synchronize(hvd.reducescatter_async(torch.ones(n, 2) * (r + 1), op=hvd.Sum))
    assert torch.all(got == sum(k + 1 for k in range(n))) and got.shape == (1, 2)


def test_ops_average_alias_scales_and_adasum():
    r, n = ranks()

    def x_of(k):  # thirds: every scale and the division round
        return torch.full((3,), (k + 1) / 3.0)
    x = x_of(r)
    xs = [x_of(k) for k in range(n)]
    mean, total = weftref.allreduce_t(xs, "average"), weftref.allreduce_t(xs, "sum")
    assert not torch.equal(mean, total)
    assert torch.equal(hvd.allreduce(x), mean)  # default Average
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert torch.equal(hvd.allreduce(x, average=False), total)
        assert torch.equal(hvd.allreduce(x, average=True), mean)
    assert any(issubclass(i.category, DeprecationWarning) for i in w)
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    if n & (n - 1):  # Adasum (test_hvd_adasum.py) needs a power-of-two rank count, as Horovod's
        with pytest.raises(NotImplementedError, match="power"):
            hvd.allreduce(x, op=hvd.Adasum)
    else:
        assert hvd.allreduce(x, op=hvd.Adasum).shape == x.shape
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.1)
    assert torch.equal(got, weftref.allreduce_t(xs, "sum", 3.0, 0.1)), got
    got = hvd.allreduce(x, op=hvd.Average, prescale_factor=3.0, postscale_factor=0.1)
    assert torch.equal(got, weftref.allreduce_t(xs, "average", 3.0, 0.1)), got
    ints = hvd.allreduce(torch.tensor([r * 3 + 1]), op=hvd.Average)  # integer average truncates
    assert ints.item() == sum(k * 3 + 1 for k in range(n)) // n


def test_compression_fp16():
    """Compression.fp16 as Horovod defines it: a floating-point tensor is
    cast to float16, allreduced in float16 (weft folds float16 in rank
    order, rounding after every step) and cast back to its dtype; other
    dtypes travel as they are. The values are not exact in float16, so the
    result differs from the uncompressed one and a compressor that sends
    the tensor as it is fails."""
    r, n = ranks()

    def x_of(k, dtype):
        return (torch.randn(64, generator=torch.Generator().manual_seed(300 + k), dtype=torch.float64) *
                (k + 1)).to(dtype)
    for dtype in (torch.float32, torch.float64):
        for op in (hvd.Sum, hvd.Average):
            got = hvd.allreduce(x_of(r, dtype), op=op, compression=hvd.Compression.fp16)
            assert got.dtype == dtype
            expect = weftref.allreduce_t([x_of(k, dtype).to(torch.float16) for k in range(n)], OP_NAMES[op])
            assert torch.equal(got, expect.to(dtype)), (dtype, op, (got - expect.to(dtype)).abs().max().item())
            uncompressed = weftref.allreduce_t([x_of(k, dtype) for k in range(n)], OP_NAMES[op])
            assert not torch.equal(got, uncompressed)
    # integers as they are: 4097 + r is not a float16 value (float16 holds integers exactly up to 2048)
    ints = hvd.allreduce(torch.tensor([4097 + r, -4097 - r], dtype=torch.int32), op=hvd.Sum,
                         compression=hvd.Compression.fp16)
    s = sum(4097 + k for k in range(n))
    assert ints.dtype == torch.int32 and ints.tolist() == [s, -s]


def test_grouped_forms():
    r, n = ranks()
    xs = [torch.full((2,), float(r)), torch.full((3, 2), float(2 * r)), torch.tensor([r], dtype=torch.int64)]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum)
    s = n * (n - 1) // 2
    assert [o.tolist() for o in out] == [[float(s)] * 2, [[2.0 * s] * 2] * 3, [s]]
    h = hvd.grouped_allreduce_async(xs, op=hvd.Max, name="grp")
    assert [o.max().item() for o in hvd.synchronize(h)] == [n - 1, 2 * (n - 1), n - 1]
    ys = [torch.ones(2), torch.ones(4)]
    assert hvd.grouped_allreduce_(ys, op=hvd.Sum)[0] is ys[0] and torch.all(ys[1] == n)
    ys = [torch.ones(2), torch.ones(4)]
    for y in hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum)):
        assert torch.all(y == n)
    gathered = hvd.grouped_allgather([torch.tensor([r]), torch.full((r + 1, 2), r)])
    assert gathered[0].tolist() == list(range(n)) and gathered[1].shape == (n * (n + 1) // 2, 2)
    scattered = hvd.grouped_reducescatter([torch.ones(n, 3), torch.ones(2 * n)], op=hvd.Sum)
    assert scattered[0].shape == (1, 3) and torch.all(scattered[0] == n) and scattered[1].tolist() == [n, n]


def test_grouped_allgather_reducescatter_one_request():
    """The grouped allgather/reducescatter are one weft request each (weft's
    atomic grouped ops), and every result matches a reference computed here
    from every rank's known input, numpy-side."""
    r, n = ranks()

    def gins(k):
        return [np.full((k + 1, 2), k, np.int32), np.arange(k + 2, dtype=np.float64) * (k + 1)]
    h = hvd.grouped_allgather_async([torch.from_numpy(a) for a in gins(r)], name="tg")
    assert isinstance(h, Request) and h.name == "grouped_allgather.tg"
    for i, g in enumerate(hvd.synchronize(h)):
        np.testing.assert_array_equal(g.numpy(), np.concatenate([gins(k)[i] for k in range(n)]))

    shapes = [(2 * n + 1, 3), (n,)]

    def sins(k):
        return [(np.arange(int(np.prod(s)), dtype=np.float64).reshape(s) % 4 + 1) * (k + 1) for s in shapes]
    h = hvd.grouped_reducescatter_async([torch.from_numpy(a) for a in sins(r)], name="ts", op=hvd.Average,
                                        prescale_factor=3.0)
    assert isinstance(h, Request)
    for i, g in enumerate(hvd.synchronize(h)):
        expect = weftref.reducescatter([sins(k)[i] for k in range(n)], r, "average", prescale=3.0)
        np.testing.assert_array_equal(g.numpy(), expect)


def test_broadcast_parameters_and_optimizer_state():
    r, n = ranks()
    torch.manual_seed(100 + r)  # different initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    model(torch.randn(5, 4))  # BatchNorm running stats differ too
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(100)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    ref(torch.randn(5, 4))
    for (k, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(ref.state_dict().items())):
        assert torch.equal(a, b), k
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=n - 1)

    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    model(torch.randn(5, 4)).sum().backward()
    opt.step()  # state (exp_avg, step) differs per rank
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01  # rank 0's, as it is
    states = hvd.allgather_object({k: {s: v.tolist() if torch.is_tensor(v) else v for s, v in st.items()}
                                   for k, st in opt.state_dict()["state"].items()})
    assert all(s == states[0] for s in states)


def test_broadcast_and_allgather_object():
    r, n = ranks()
    obj = {"rank": r, "data": list(range(r * 100))}
    got = hvd.broadcast_object(obj if r == n - 1 else None, root_rank=n - 1)
    assert got == {"rank": n - 1, "data": list(range((n - 1) * 100))}
    assert hvd.allgather_object(("r", r, "x" * r)) == [("r", k, "x" * k) for k in range(n)]


def test_basics():
    r, n = ranks()
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (r, n, r, n)
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
    assert hvd.is_initialized() and hvd.is_homogeneous()
    for fn in (hvd.mpi_built, hvd.mpi_enabled, hvd.gloo_built, hvd.gloo_enabled, hvd.nccl_built, hvd.ccl_built,
               hvd.cuda_built, hvd.rocm_built, hvd.mpi_threads_supported):
        assert fn() is False
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    ps = hvd.global_process_set
    assert (ps.size(), ps.rank(), ps.included()) == (n, r, True)
    hvd.barrier()


def test_join_uneven_work():
    """Rank r has r + 1 batches: joined ranks contribute zeros, Average
    still divides by the full size, and join returns the last rank."""
    r, n = ranks()
    for i in range(r + 1):
        got = hvd.allreduce(torch.tensor([float(r + 1)]), op=hvd.Sum, name="join.step.%d" % i)
        assert got.item() == sum(k + 1 for k in range(i, n))  # ranks < i have joined
        avg = hvd.allreduce(torch.tensor([float(r + 1)]), name="join.avg.%d" % i)
        zeros_of_joined = [torch.tensor([float(k + 1) if k >= i else 0.0]) for k in range(n)]
        assert torch.equal(avg, weftref.allreduce_t(zeros_of_joined, "average"))
    assert hvd.join() == n - 1
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n  # everyone is back


def test_timeline(tmp_path):
    r, n = ranks()
    path = hvd.broadcast_object(str(tmp_path / "timeline.json"), root_rank=0)  # rank 0's directory
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(100), name="traced.tensor")
    hvd.stop_timeline()
    hvd.barrier()
    if r == 0:
        import json
        with open(path) as f:
            text = f.read()
        json.loads(text)  # complete JSON once stopped
        assert "traced.tensor" in text and "ALLREDUCE" in text.upper()


def test_process_sets():
    r, n = ranks()
    evens = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([k for k in range(n) if k % 2 == 1]))
    try:
        mine, other = (evens, odds) if r % 2 == 0 else (odds, evens)
        assert mine.included() and not other.included()
        assert mine.rank() == mine.ranks.index(r) and mine.size() == len(mine.ranks)
        got = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=mine)
        assert got.item() == sum(mine.ranks)
        got = hvd.allreduce(torch.tensor([float(r)]), process_set=mine)  # Average over the set's size
        assert torch.equal(got, weftref.allreduce_t([torch.tensor([float(k)]) for k in mine.ranks], "average"))
        assert hvd.allgather(torch.tensor([r]), process_set=mine).tolist() == mine.ranks
        root = mine.ranks[-1]  # a world rank, as in Horovod
        assert hvd.broadcast(torch.tensor([float(r)]), root, process_set=mine).item() == root
        rs = hvd.reducescatter(torch.ones(len(mine.ranks), 2), op=hvd.Sum, process_set=mine)
        assert rs.shape == (1, 2) and torch.all(rs == len(mine.ranks))
        x = torch.ones(3, requires_grad=True)
        hvd.allreduce(x, op=hvd.Sum, process_set=mine).sum().backward()
        assert torch.all(x.grad == len(mine.ranks))
        hvd.barrier(process_set=mine)
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(torch.ones(1), process_set=other)
        with pytest.raises(ValueError, match="not registered"):
            hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([r]))
        with pytest.raises(ValueError, match="root_rank"):
            hvd.broadcast(torch.ones(1), root_rank=other.ranks[0] if other.ranks else n, process_set=mine)
    finally:
        assert hvd.remove_process_set(odds) and hvd.remove_process_set(evens)
    assert not hvd.remove_process_set(evens)
    # every rank listed: the world itself, registered or not
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=hvd.ProcessSet(range(n))).item() == n


def test_errors():
    r, n = ranks()
    with pytest.raises(hvd.HorovodInternalError, match="shape"):
        hvd.allreduce(torch.ones(r + 1), name="torch.shapes")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(torch.ones(2, dtype=torch.float32 if r else torch.bfloat16), name="torch.dtypes")
    with pytest.raises(ValueError, match="one per rank"):
        hvd.alltoall(torch.ones(4), splits=[1] * (n + 1))
    with pytest.raises(ValueError, match="dtype"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError):
        hvd.allreduce([1.0, 2.0])
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(torch.eye(2).to_sparse())
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n
