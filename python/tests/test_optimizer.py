"""DistributedOptimizer: training on sharded data across ranks must equal
training one model on the whole batch (computed here, locally, as the
reference), with and without grouping, gradient accumulation, fp16
compression and unused parameters; plus its misuse checks."""

import pytest

torch = pytest.importorskip("torch")
import weft.torch as hvd  # noqa: E402
from conftest import ranks  # noqa: E402

BATCH = 12  # divides by 1, 2, 3, 4


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def data(step):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(BATCH, 6, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def shard(t, r, n):
    per = BATCH // n
    return t[r * per:(r + 1) * per]


def loss_fn(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def train_reference(opt_factory, steps):
    model = make_model()
    opt = opt_factory(model.parameters())
    for s in range(steps):
        x, y = data(s)
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        opt.step()
    return model


def train_distributed(opt_factory, steps, **kwargs):
    r, n = ranks()
    model = make_model(seed=r)  # different start: broadcast_parameters must fix it
    opt = opt_factory(model.parameters())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **kwargs)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for s in range(steps):
        x, y = data(s)
        opt.zero_grad()
        loss_fn(model, shard(x, r, n), shard(y, r, n)).backward()
        opt.step()
    return model, opt


def assert_same(model, ref, atol):
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=atol, rtol=0), (name, (a - b).abs().max().item())


def sgd(params):
    return torch.optim.SGD(params, lr=0.5, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


@pytest.mark.parametrize("factory", [sgd, adam], ids=["sgd", "adam"])
def test_equals_full_batch_training(factory):
    model, opt = train_distributed(factory, 3)
    assert isinstance(opt, type(factory(make_model().parameters())))  # still an SGD/Adam
    assert_same(model, train_reference(factory, 3), atol=1e-5)


@pytest.mark.parametrize("kwargs", [{"groups": 2}, {"num_groups": 3}, {"compression": hvd.Compression.fp16},
                                    {"gradient_predivide_factor": 2.0}], ids=["groups2", "num_groups3", "fp16",
                                                                              "predivide"])
def test_variants_equal_full_batch(kwargs):
    if "num_groups" in kwargs:
        with pytest.warns(DeprecationWarning):
            model, _ = train_distributed(sgd, 3, **kwargs)
    else:
        model, _ = train_distributed(sgd, 3, **kwargs)
    atol = 2e-3 if "compression" in kwargs else 1e-5
    assert_same(model, train_reference(sgd, 3), atol=atol)


def test_explicit_groups_and_gradients_start_during_backward():
    r, n = ranks()
    model = make_model()
    params = list(model.parameters())
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters(),
                                   groups=[[params[0], params[1]], [params[2], params[3]]])
    x, y = data(0)
    loss_fn(model, shard(x, r, n), shard(y, r, n)).backward()
    if n > 1:  # the hooks have already submitted every allreduce
        assert len(opt._handles) == 4 and all(h[0] is not None for h in opt._handles.values())
    opt.step()
    assert_same(model, train_reference(sgd, 1), atol=1e-5)


def test_backward_passes_per_step():
    """Two micro-batches per rank per step: the gradient is the sum over
    micro-batches, averaged over ranks."""
    r, n = ranks()
    model = make_model()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    ref = make_model()
    ref_opt = sgd(ref.parameters())
    for s in range(2):
        x, y = data(s)
        xs, ys = shard(x, r, n), shard(y, r, n)
        half = len(xs) // 2
        opt.zero_grad()
        loss_fn(model, xs[:half], ys[:half]).backward()
        loss_fn(model, xs[half:], ys[half:]).backward()
        opt.step()
        ref_opt.zero_grad()
        total = 0
        for k in range(n):
            xk, yk = shard(x, k, n), shard(y, k, n)
            total = total + loss_fn(ref, xk[:half], yk[:half]) + loss_fn(ref, xk[half:], yk[half:])
        (total / n).backward()
        ref_opt.step()
    assert_same(model, ref, atol=1e-5)


def test_unused_parameter_and_skip_synchronize():
    r, n = ranks()
    model = make_model()
    unused = torch.nn.Parameter(torch.ones(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(list(model.parameters()) + [unused], lr=0.5),
                                   named_parameters=list(model.named_parameters()) + [("unused", unused)])
    x, y = data(0)
    loss_fn(model, shard(x, r, n), shard(y, r, n)).backward()
    opt.synchronize()  # unused's allreduce is started here, of zeros
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    with opt.skip_synchronize():
        opt.step()
    assert torch.equal(unused.detach(), torch.ones(2))
    assert torch.equal(unused.grad, torch.zeros(2))
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    loss_fn(ref, x, y).backward()
    ref_opt.step()
    assert_same(model, ref, atol=1e-5)


def test_misuse():
    r, n = ranks()
    model = make_model()
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=[("a", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="name every"):
        hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(sgd(model.parameters()), op=hvd.Adasum)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters())
    x, y = data(0)
    loss_fn(model, shard(x, r, n), shard(y, r, n)).backward()
    if n > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.step()
    opt.zero_grad()
