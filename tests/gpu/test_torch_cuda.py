"""weft.torch with CUDA tensors (tests/gpu; run as N ranks under weftrun,
skipped by gpu_run.sh's probe where torch sees no GPU or weft's CUDA backend
does not load). Every rank uses cuda:(local rank mod the device count), so
ranks share a GPU on a one-GPU machine. Expected values are computed here
from what each rank contributes (integer-valued, exact in every dtype), and
results on CUDA must equal the same operations on CPU tensors.

Covers: every collective, sync / async / in place / grouped / autograd, the
dtypes float16, bfloat16, float32, float64, int32, int64, counts 0, 1, odd
and large; completion on torch's current stream (a side stream as producer
and consumer); a process set; DistributedOptimizer training a small model on
CUDA equal to the same training on CPU; broadcast_parameters and
broadcast_optimizer_state with CUDA state; SyncBatchNorm on CUDA equal to
the CPU one; Adasum on CUDA equal to CPU; a CPU tensor on one rank where
the others pass CUDA ones (a mismatch error naming both ranks).

Plain functions and asserts: it runs under pytest or, where pytest is
missing (a bare GPU machine), as a script (python3 test_torch_cuda.py under
weftrun: every test_* in order, exit 1 at the first failure, 77 without a
GPU)."""

import sys

import torch

import weft.torch as hvd

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
if not torch.cuda.is_available() or not hvd.cuda_built():
    if __name__ == "__main__":
        print("no GPU: torch sees %d, weft: %s" % (torch.cuda.device_count(), hvd.mpi_ops._cuda_status()[1]))
        sys.exit(77)
    import pytest
    pytest.skip("no GPU", allow_module_level=True)
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
DEV = torch.device("cuda", torch.cuda.current_device())
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]
COUNTS = [0, 1, 37, 1 << 20]


def val(rank, n, dtype, seed=0):
    """Rank-dependent integers in [-8, 8]: exact sums in every dtype."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def ref_sum(n, dtype, seed=0):
    return sum(val(r, n, torch.int64, seed) for r in range(SIZE)).to(dtype)


def raises(fn, *args, **kw):
    """The WeftError fn raises (an AssertionError if it returns)."""
    try:
        fn(*args, **kw)
    except hvd.HorovodInternalError as e:
        return e
    raise AssertionError("%s did not raise" % fn.__name__)


def test_allreduce():
    for dtype in DTYPES:
        for n in COUNTS:
            allreduce_case(dtype, n)


def allreduce_case(dtype, n):
    x = val(RANK, n, dtype, 1).to(DEV)
    y = hvd.allreduce(x, op=hvd.Sum, name="ar.%s.%d" % (dtype, n))
    assert y.device == DEV and y.dtype == dtype
    assert torch.equal(y.cpu(), ref_sum(n, dtype, 1))
    assert torch.equal(x.cpu(), val(RANK, n, dtype, 1))  # out of place: input kept
    hvd.allreduce_(x, op=hvd.Sum, name="ar_.%s.%d" % (dtype, n))
    assert torch.equal(x.cpu(), ref_sum(n, dtype, 1))


def test_allgather_broadcast_alltoall_reducescatter():
    for dtype in [torch.float16, torch.bfloat16, torch.float32, torch.int32]:
        for n in COUNTS:
            gather_case(dtype, n)


def gather_case(dtype, n):
    rows = n + RANK  # ranks differ in dim 0
    x = val(RANK, rows, dtype, 2).to(DEV)
    g = hvd.allgather(x, name="ag.%s.%d" % (dtype, n))
    assert g.device == DEV
    assert torch.equal(g.cpu(), torch.cat([val(r, n + r, dtype, 2) for r in range(SIZE)]))
    b = hvd.broadcast(val(RANK, n, dtype, 3).to(DEV), root_rank=SIZE - 1, name="bc.%s.%d" % (dtype, n))
    assert torch.equal(b.cpu(), val(SIZE - 1, n, dtype, 3))
    a = val(RANK, n * SIZE, dtype, 4).to(DEV)
    out = hvd.alltoall(a, name="a2a.%s.%d" % (dtype, n))
    assert out.device == DEV
    want = torch.cat([val(r, n * SIZE, dtype, 4)[RANK * n:(RANK + 1) * n] for r in range(SIZE)])
    assert torch.equal(out.cpu(), want)
    s = hvd.reducescatter(val(RANK, n * SIZE, dtype, 5).to(DEV), op=hvd.Sum, name="rs.%s.%d" % (dtype, n))
    assert s.device == DEV
    assert torch.equal(s.cpu(), ref_sum(n * SIZE, dtype, 5)[RANK * n:(RANK + 1) * n])


def test_async_grouped_and_fused():
    xs = [val(RANK, 1000 + k, torch.float32, 10 + k).to(DEV) for k in range(6)]
    hs = [hvd.allreduce_async(x, op=hvd.Sum, name="fuse.%d" % k) for k, x in enumerate(xs)]
    for k, h in enumerate(hs):
        assert torch.equal(hvd.synchronize(h).cpu(), ref_sum(1000 + k, torch.float32, 10 + k))
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grp")
    for k, y in enumerate(ys):
        assert torch.equal(y.cpu(), ref_sum(1000 + k, torch.float32, 10 + k))
    gs = hvd.grouped_allgather(xs[:3], name="grp.ag")
    for k, g in enumerate(gs):
        assert torch.equal(g.cpu(), torch.cat([val(r, 1000 + k, torch.float32, 10 + k) for r in range(SIZE)]))
    hvd.grouped_allreduce_(xs, op=hvd.Sum, name="grp_")
    for k, x in enumerate(xs):
        assert torch.equal(x.cpu(), ref_sum(1000 + k, torch.float32, 10 + k))


def test_side_stream_orders_producer_and_consumer():
    """The input is written by a kernel queued on a side stream right before
    the call; the result is read by work queued on that stream after it
    (no host synchronisation in between)."""
    s = torch.cuda.Stream()
    n = 1 << 22
    with torch.cuda.stream(s):
        x = torch.full((n,), float(RANK + 1), device=DEV)
        for _ in range(20):  # keep the stream busy
            x = x * 1.0
        h = hvd.allreduce_async_(x, op=hvd.Sum, name="side")
        hvd.synchronize(h)
        y = x * 2  # queued on s after completion: must see the result
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), torch.full((n,), 2.0 * SIZE * (SIZE + 1) / 2))


def test_autograd():
    x = val(RANK, 8, torch.float32, 20).to(DEV).requires_grad_()
    y = hvd.allreduce(x, op=hvd.Sum, name="grad.ar")
    (y * torch.arange(8.0, device=DEV)).sum().backward()
    assert x.grad.device == DEV
    assert torch.equal(x.grad.cpu(), torch.arange(8.0) * SIZE)
    z = val(RANK, 3, torch.float32, 21).to(DEV).requires_grad_()
    hvd.allgather(z, name="grad.ag").sum().backward()
    assert torch.equal(z.grad.cpu(), torch.ones(3))


def test_process_set():
    if SIZE < 2:
        return
    ps = hvd.add_process_set([0, SIZE - 1])
    if RANK in (0, SIZE - 1):
        y = hvd.allreduce(torch.full((5,), float(RANK), device=DEV), op=hvd.Sum, process_set=ps, name="ps")
        assert torch.equal(y.cpu(), torch.full((5,), float(SIZE - 1)))
    hvd.remove_process_set(ps)


def test_cpu_cuda_mismatch():
    if SIZE < 2:
        return
    t = torch.ones(4) if RANK == 0 else torch.ones(4, device=DEV)
    e = raises(hvd.allreduce, t, name="kinds")
    assert "rank 0" in str(e) and "rank 1" in str(e), str(e)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def train(device, steps=5):
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Sum)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + RANK)
        x, y = torch.randint(-4, 5, (8, 6), generator=g).float(), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_distributed_optimizer_cuda_equals_cpu():
    cpu, gpu = train("cpu"), train(DEV)
    for a, b in zip(cpu, gpu):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (a - b).abs().max()


def test_broadcast_parameters_and_optimizer_state():
    torch.manual_seed(RANK)
    model = torch.nn.Linear(4, 3).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 4, device=DEV)).sum().backward()
    opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = torch.cat([p.detach().flatten() for p in model.parameters()] +
                     [s["exp_avg"].flatten() for s in opt.state.values()])
    assert mine.device == DEV
    everyone = hvd.allgather(mine.unsqueeze(0), name="bcast.check")
    assert all(torch.equal(everyone[0], everyone[r]) for r in range(SIZE))


def test_sync_batch_norm_cuda_equals_cpu():
    def run(device):
        torch.manual_seed(1)
        bn = hvd.SyncBatchNorm(5).to(device)
        g = torch.Generator().manual_seed(RANK)
        x = torch.randint(-4, 5, (6, 5, 3), generator=g).float().to(device).requires_grad_()
        y = bn(x)
        (y * y).sum().backward()
        return y.detach().cpu(), x.grad.cpu(), bn.running_mean.cpu(), bn.running_var.cpu()
    for a, b in zip(run("cpu"), run(DEV)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_adasum_cuda_equals_cpu():
    if SIZE & (SIZE - 1):
        return
    x = val(RANK, 33, torch.float32, 30)
    a = hvd.allreduce(x, op=hvd.Adasum, name="adasum.cpu")
    b = hvd.allreduce(x.to(DEV), op=hvd.Adasum, name="adasum.cuda")
    assert b.device == DEV and torch.equal(a, b.cpu())


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            if RANK == 0:
                print("ok", name, flush=True)
    hvd.shutdown()
