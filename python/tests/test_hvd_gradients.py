"""Gradients through weft.torch's collectives are Horovod 0.28's
(horovod/torch/mpi_ops.py), which are conventions, not always the exact
derivative of the distributed computation:

  allreduce        backward = allreduce(grad) with the same op, prescale and postscale
  allgather        backward = allreduce(grad, Average) over the process set, this rank's rows (narrow)
  broadcast        backward = allreduce(grad, Average) over the process set on the root, zero elsewhere
  reducescatter    backward = allgather(grad * set size (op Sum only) * prescale * postscale),
                   the factors applied one after the other, in that order, as Horovod does
  alltoall         backward = alltoall(grad) back, with the splits this rank received
  grouped forms    each tensor as its single form

Each check writes Horovod's formula out on the inputs every rank can compute
(rank k's output gradient is W(k), known to all): reductions through
weftref (numpy, never weft), scaling through the same torch operations
Horovod's backward runs. So comparisons are exact. Every case runs on the
world and in a process set (ranks 1.. : a single rank with 2 ranks, a proper
subset with 3), where the average divides by the set's size and the rows are
the set rank's."""

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402
import weftref  # noqa: E402

OP_NAMES = {hvd.Sum: "sum", hvd.Average: "average"}


def W(k, *shape, dtype=torch.float64):
    """Rank k's output gradient (deterministic, distinct per rank)."""
    g = torch.Generator().manual_seed(1000 + k)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def x_of(k, *shape, dtype=torch.float64):
    g = torch.Generator().manual_seed(2000 + k)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.fixture(params=["world", "subset"])
def pset(request):
    """(process_set, its world ranks): the world, or ranks 1..n-1."""
    r, n = ranks()
    if request.param == "world":
        yield hvd.global_process_set, list(range(n))
        return
    members = list(range(1, n))
    ps = hvd.add_process_set(members)
    try:
        yield ps, members
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)


def member(members):
    return ranks()[0] in members


@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 3.0, 0.5),
                                         (hvd.Average, 1.5, 3.0)])
def test_allreduce_grad(pset, op, pre, post):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    x = x_of(r, 4, 3, dtype=torch.float32).requires_grad_()
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
    (y * W(r, 4, 3, dtype=torch.float32)).sum().backward()
    expect = weftref.allreduce_t([W(k, 4, 3, dtype=torch.float32) for k in members], OP_NAMES[op], pre, post)
    assert torch.equal(x.grad, expect), (x.grad, expect)


def test_grouped_allreduce_grad(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    xs = [x_of(r, 3).requires_grad_(), x_of(r + 10, 2, 2).requires_grad_()]
    ys = hvd.grouped_allreduce(xs, op=hvd.Average, prescale_factor=2.0, process_set=ps)
    sum((y * W(r + 20 * i, *y.shape)).sum() for i, y in enumerate(ys)).backward()
    for i, x in enumerate(xs):
        expect = weftref.allreduce_t([W(k + 20 * i, *x.shape) for k in members], "average", 2.0)
        assert torch.equal(x.grad, expect)


def rows_of(k):
    return k % 3 + 1  # uneven: 1, 2, 3, 1, ...


def allgather_expect(members, r, total, shape_tail, seed=0):
    """Horovod: allreduce(grad, Average) over the set, narrowed to this
    rank's rows (offset: the rows of the set's ranks before it)."""
    avg = weftref.allreduce_t([W(k + seed, total, *shape_tail) for k in members], "average")
    start = sum(rows_of(k) for k in members[:members.index(r)])
    return avg.narrow(0, start, rows_of(r))


def test_allgather_grad_is_averaged_and_narrowed(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    total = sum(rows_of(k) for k in members)
    x = x_of(r, rows_of(r), 2).requires_grad_()
    y = hvd.allgather(x, process_set=ps)
    assert torch.equal(y.detach(), torch.cat([x_of(k, rows_of(k), 2) for k in members]))
    (y * W(r, total, 2)).sum().backward()
    expect = allgather_expect(members, r, total, (2,))
    assert torch.equal(x.grad, expect), (x.grad, expect)
    if len(members) > 1:  # the sum (weft's old convention) is not what Horovod gives
        assert not torch.equal(x.grad, weftref.allreduce_t([W(k, total, 2) for k in members], "sum")
                               .narrow(0, sum(rows_of(k) for k in members[:members.index(r)]), rows_of(r)))


def test_grouped_allgather_grad(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    total = sum(rows_of(k) for k in members)
    xs = [x_of(r, rows_of(r), 2).requires_grad_(), x_of(r + 10, rows_of(r)).requires_grad_()]
    ys = hvd.grouped_allgather(xs, process_set=ps)
    ((ys[0] * W(r, total, 2)).sum() + (ys[1] * W(r + 30, total)).sum()).backward()
    assert torch.equal(xs[0].grad, allgather_expect(members, r, total, (2,)))
    assert torch.equal(xs[1].grad, allgather_expect(members, r, total, (), seed=30))


def test_broadcast_grad_is_average_on_root_zero_elsewhere(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    root = members[-1]  # a world rank, as Horovod's root_rank
    x = x_of(r, 5).requires_grad_()
    y = hvd.broadcast(x, root_rank=root, process_set=ps)
    assert torch.equal(y.detach(), x_of(root, 5))
    (y * W(r, 5)).sum().backward()
    if r == root:
        expect = weftref.allreduce_t([W(k, 5) for k in members], "average")
    else:
        expect = torch.zeros(5, dtype=torch.float64)
    assert torch.equal(x.grad, expect), (x.grad, expect)


def horovod_reducescatter_grad(grad, op, set_size, pre, post):
    """Horovod 0.28's HorovodReducescatter.backward, before its allgather:
    grad *= size (Sum only), then *= prescale, then *= postscale."""
    g = grad.clone()
    if op == hvd.Sum:
        g *= set_size
    if pre != 1.0:
        g *= pre
    if post != 1.0:
        g *= post
    return g


RS_CASES = [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 3.0, 1.5), (hvd.Average, 3.0, 1.5),
            (hvd.Average, 1.0, 0.1)]


@pytest.mark.parametrize("op,pre,post", RS_CASES)
def test_reducescatter_grad(pset, op, pre, post):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    m = len(members)
    dim0 = 2 * m + 1  # uneven: the first dim0 % m ranks of the set get one more row
    counts = [weftref.rows(dim0, m, i) for i in range(m)]
    me = members.index(r)
    # float32: the factors round after each multiplication, so their order shows in the bits
    x = x_of(r, dim0, 2, dtype=torch.float32).requires_grad_()
    y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
    assert torch.equal(y.detach(), weftref.reducescatter_t([x_of(k, dim0, 2, dtype=torch.float32) for k in members],
                                                           me, OP_NAMES[op], pre, post))
    (y * W(r, counts[me], 2, dtype=torch.float32)).sum().backward()
    expect = torch.cat([horovod_reducescatter_grad(W(k, counts[i], 2, dtype=torch.float32), op, m, pre, post)
                        for i, k in enumerate(members)])
    assert torch.equal(x.grad, expect), (x.grad, expect)


def test_grouped_reducescatter_grad(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    m = len(members)
    me = members.index(r)
    shapes = [(m + 1, 2), (2 * m,)]
    for op, pre, post in [(hvd.Sum, 3.0, 1.5), (hvd.Average, 2.0, 1.0)]:
        xs = [x_of(r + 10 * i, *s, dtype=torch.float32).requires_grad_() for i, s in enumerate(shapes)]
        ys = hvd.grouped_reducescatter(xs, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
        sum((y * W(r + 20 * i, *y.shape, dtype=torch.float32)).sum() for i, y in enumerate(ys)).backward()
        for i, (x, s) in enumerate(zip(xs, shapes)):
            counts = [weftref.rows(s[0], m, j) for j in range(m)]
            assert ys[i].shape[0] == counts[me]
            expect = torch.cat([horovod_reducescatter_grad(W(k + 20 * i, counts[j], *s[1:], dtype=torch.float32),
                                                           op, m, pre, post) for j, k in enumerate(members)])
            assert torch.equal(x.grad, expect), (i, op, x.grad, expect)


def test_alltoall_grad_is_the_alltoall_back(pset):
    ps, members = pset
    r, _ = ranks()
    if not member(members):
        return
    m = len(members)
    me = members.index(r)

    def sends(i):  # set rank i sends (j + i) % 2 + 1 rows to set rank j
        return [(j + i) % 2 + 1 for j in range(m)]
    x = x_of(r, sum(sends(me)), 3).requires_grad_()
    y, received = hvd.alltoall(x, splits=sends(me), process_set=ps)
    assert received.tolist() == [sends(i)[me] for i in range(m)]
    (y * W(r, y.shape[0], 3)).sum().backward()
    # the rows sent to set rank j come back from j's gradient, at the offset they arrived at
    parts = []
    for j, k in enumerate(members):
        before = sum(sends(i)[j] for i in range(me))
        recv_rows = sum(sends(i)[j] for i in range(m))
        parts.append(W(k, recv_rows, 3)[before:before + sends(me)[j]])
    assert torch.equal(x.grad, torch.cat(parts))
