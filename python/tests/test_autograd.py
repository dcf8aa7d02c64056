"""Gradients through weft.torch's collectives, against gradients derived by
hand for the global loss sum_k L_k, where rank k's loss weights its output
by a rank-dependent tensor W(k) that every rank can compute: allreduce and
alltoall, whose Horovod gradients are those derivatives. Also SyncBatchNorm
against BatchNorm on the concatenated global batch. (allgather, broadcast
and reducescatter follow Horovod's conventions instead, which are not the
derivative of that loss: test_hvd_gradients.py.)

A gradient that weft reduces is compared exactly with weftref's reduction
of the ranks' W(k) (the backward of an allreduce is the same allreduce of
the output gradients, which are exactly W(r) here); one that only moves data
(alltoall) exactly with the moved W."""

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402
import weftref  # noqa: E402

OP_NAMES = {hvd.Sum: "sum", hvd.Average: "average"}


def W(k, *shape):
    """Rank k's loss weights (deterministic, distinct per rank)."""
    g = torch.Generator().manual_seed(1000 + k)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def x_of(k, *shape):
    g = torch.Generator().manual_seed(2000 + k)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 0.5),
                                         (hvd.Average, 3.0, 1.5)])
def test_allreduce_grad(op, pre, post):
    r, n = ranks()
    x = x_of(r, 4, 3).requires_grad_()
    y = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
    assert torch.equal(y.detach(), weftref.allreduce_t([x_of(k, 4, 3) for k in range(n)], OP_NAMES[op], pre, post))
    (y * W(r, 4, 3)).sum().backward()
    # y = c * sum_k x_k on every rank => dL/dx_r = c * sum_k W(k): the same allreduce of the W(k)
    expect = weftref.allreduce_t([W(k, 4, 3) for k in range(n)], OP_NAMES[op], pre, post)
    assert torch.equal(x.grad, expect), (x.grad, expect)


def test_grouped_allreduce_grad():
    r, n = ranks()
    xs = [x_of(r, 3).requires_grad_(), x_of(r + 10, 2, 2).requires_grad_()]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    (sum((y * W(r + 20 * i, *y.shape)).sum() for i, y in enumerate(ys))).backward()
    for i, x in enumerate(xs):
        assert torch.equal(x.grad, weftref.allreduce_t([W(k + 20 * i, *x.shape) for k in range(n)], "sum"))


def test_alltoall_grad_with_unsent_rows():
    r, n = ranks()

    def sends(k):  # rank k sends (j + k) % 2 + 1 rows to rank j, keeps one row unsent
        return [(j + k) % 2 + 1 for j in range(n)]
    rows = sum(sends(r)) + 1
    x = x_of(r, rows, 3).requires_grad_()
    y, received = hvd.alltoall(x, splits=sends(r))
    assert received.tolist() == [sends(k)[r] for k in range(n)]
    (y * W(r, y.shape[0], 3)).sum().backward()
    # row i of x goes to rank j at offset (rows rank j receives before ours) + (i - start_j)
    expect = torch.zeros(rows, 3, dtype=torch.float64)
    start = 0
    for j in range(n):
        count = sends(r)[j]
        before = sum(sends(k)[j] for k in range(r))
        recv_rows = sum(sends(k)[j] for k in range(n))
        expect[start:start + count] = W(j, recv_rows, 3)[before:before + count]
        start += count
    assert torch.equal(x.grad, expect)
    # without splits: the output alone, as in Horovod
    z = hvd.alltoall(x_of(r, 2 * n, 1).requires_grad_())
    assert isinstance(z, torch.Tensor) and z.shape == (2 * n, 1)


def test_sync_batch_norm_matches_global_batch():
    r, n = ranks()
    per = 4
    torch.manual_seed(7)
    weight = torch.randn(3, dtype=torch.float64)
    bias = torch.randn(3, dtype=torch.float64)
    xs = [x_of(k, per, 3, 5) * (k + 1) + k for k in range(n)]  # ranks see different distributions
    ws = [W(k, per, 3, 5) for k in range(n)]

    sbn = hvd.SyncBatchNorm(3).double()
    ref = torch.nn.BatchNorm1d(3).double()
    with torch.no_grad():
        for m in (sbn, ref):
            m.weight.copy_(weight)
            m.bias.copy_(bias)
    x = xs[r].clone().requires_grad_()
    y = sbn(x)
    (y * ws[r]).sum().backward()

    xg = torch.cat(xs).requires_grad_()
    yg = ref(xg)
    (yg * torch.cat(ws)).sum().backward()

    # SyncBatchNorm's statistics (sums over ranks, then mean and variance)
    # round differently from BatchNorm's one pass over the whole batch, so
    # not bit for bit: in float64, with values of order 1, the two differ by
    # at most 1e-15 (measured, 2 and 3 ranks); 1e-12 leaves a margin of 1000
    # and is far below any real error (a rank's statistics left out moves the
    # outputs by order 0.1)
    assert torch.allclose(y, yg[r * per:(r + 1) * per], rtol=0, atol=1e-12)
    assert torch.allclose(x.grad, xg.grad[r * per:(r + 1) * per], rtol=0, atol=1e-12)
    # weight/bias gradients are per rank; their sum is the global one
    assert torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), ref.weight.grad, rtol=0, atol=1e-12)
    assert torch.allclose(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), ref.bias.grad, rtol=0, atol=1e-12)
    assert torch.allclose(sbn.running_mean, ref.running_mean, rtol=0, atol=1e-12)
    assert torch.allclose(sbn.running_var, ref.running_var, rtol=0, atol=1e-12)
    sbn.eval()
    ref.eval()
    assert torch.allclose(sbn(xs[r]), ref(xs[r]), rtol=0, atol=1e-12)
