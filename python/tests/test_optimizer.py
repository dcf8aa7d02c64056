"""DistributedOptimizer: training on sharded data across ranks must give
exactly (bit for bit) the parameters of a reference computed here, locally:
one model that, at every step, computes each rank's gradient on that rank's
shard, combines them as Horovod defines it and weft computes it (compress,
prescale 1/gradient_predivide_factor, rank-order fold, postscale
gradient_predivide_factor/size, decompress: weftref.py), and applies the
optimizer. With and without grouping, gradient accumulation, fp16
compression, predivision and unused parameters; plus its misuse checks.
Where a variant claims to change the arithmetic (fp16, predivide), the test
also checks that its reference differs from the plain one, so a variant
that is silently ignored fails. (Equality with one-process full-batch
training on 1, 2 and 4 ranks: test_equivalence.py.)"""

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402
import weftref  # noqa: E402

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


def local_backward(model, x, y, k, n, passes):
    """What rank k's backward leaves in p.grad: its shard's gradient, summed
    over `passes` micro-batches (accumulated by autograd)."""
    xs, ys = shard(x, k, n), shard(y, k, n)
    step = len(xs) // passes
    for i in range(passes):
        loss_fn(model, xs[i * step:(i + 1) * step], ys[i * step:(i + 1) * step]).backward()


def combine(grads, fp16=False, predivide=1.0):
    """Horovod's DistributedOptimizer gradient for op=Average: every rank's
    gradient (grads[k], rank order) compressed (fp16: cast to float16),
    allreduced with prescale 1/predivide and postscale predivide (weft's
    Average divides by size), decompressed (back to float32)."""
    sent = [g.to(torch.float16) if fp16 else g for g in grads]
    return weftref.allreduce_t(sent, "average", 1.0 / predivide, predivide).to(grads[0].dtype)


def horovod_initialise(params, opt):
    """What broadcast_optimizer_state does to a fresh optimizer, written
    out: Horovod's one step on zero gradients (Adam's step count starts at
    1), then (weft) the parameters and gradients put back as they were."""
    saved = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    with torch.no_grad():
        for p, v in zip(params, saved):
            p.copy_(v)
            p.grad = None


def train_reference(opt_factory, steps, passes=1, fp16=False, predivide=1.0, n=None):
    """The n ranks' training, simulated in this process (n: this job's size),
    from an optimizer initialised as broadcast_optimizer_state does (for SGD
    that changes no bit: a momentum buffer of zeros, then 0.9 * 0 + g = g)."""
    if n is None:
        n = ranks()[1]
    model = make_model()
    opt = opt_factory(model.parameters())
    params = list(model.parameters())
    horovod_initialise(params, opt)
    for s in range(steps):
        x, y = data(s)
        per_rank = []
        for k in range(n):
            opt.zero_grad()
            local_backward(model, x, y, k, n, passes)
            per_rank.append([p.grad.clone() for p in params])
        for i, p in enumerate(params):
            p.grad.copy_(combine([g[i] for g in per_rank], fp16, predivide))
        record_grads(model)
        opt.step()
    return model


def train_distributed(opt_factory, steps, passes=1, **kwargs):
    r, n = ranks()
    model = make_model(seed=r)  # different start: broadcast_parameters must fix it
    opt = opt_factory(model.parameters())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), backward_passes_per_step=passes,
                                   **kwargs)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for s in range(steps):
        x, y = data(s)
        opt.zero_grad()
        local_backward(model, x, y, r, n, passes)
        opt.step()
        record_grads(model)  # what the step used: synchronize() leaves it in p.grad
    return model, opt


def record_grads(model):
    """Keeps every step's gradients: compared as well as the parameters, since
    an optimizer step can round a gradient's last bits away."""
    if not hasattr(model, "grad_history"):
        model.grad_history = []
    model.grad_history.append([p.grad.clone() for p in model.parameters()])


def assert_same(model, ref):
    """Every step's gradients and the final parameters equal to the last bit."""
    names = [name for name, _ in model.named_parameters()]
    assert len(model.grad_history) == len(ref.grad_history)
    for step, (grads, ref_grads) in enumerate(zip(model.grad_history, ref.grad_history)):
        for name, a, b in zip(names, grads, ref_grads):
            assert torch.equal(a, b), ("gradient", step, name, (a - b).abs().max().item())
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(a, b), (name, (a - b).abs().max().item())


def differs(a, b):
    """Whether two references differ (their gradients at some step)."""
    return any(not torch.equal(p, q) for g, h in zip(a.grad_history, b.grad_history) for p, q in zip(g, h))


def sgd(params):
    return torch.optim.SGD(params, lr=0.5, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.01)


@pytest.mark.parametrize("factory", [sgd, adam], ids=["sgd", "adam"])
def test_equals_reference_training(factory):
    model, opt = train_distributed(factory, 3)
    assert isinstance(opt, type(factory(make_model().parameters())))  # still an SGD/Adam
    ref = train_reference(factory, 3)
    assert_same(model, ref)
    if ranks()[1] > 1:  # the gradients really were combined: one rank's alone trains another model
        assert differs(ref, train_reference(factory, 3, n=1))


PREDIVIDE = 3.0  # not a power of two: 1/3 rounds, so where it is applied shows in the bits


@pytest.mark.parametrize("kwargs", [{"groups": 2}, {"num_groups": 3}, {"compression": hvd.Compression.fp16},
                                    {"gradient_predivide_factor": PREDIVIDE},
                                    {"gradient_predivide_factor": PREDIVIDE, "groups": 2},
                                    {"gradient_predivide_factor": PREDIVIDE, "compression": hvd.Compression.fp16}],
                         ids=["groups2", "num_groups3", "fp16", "predivide", "predivide_groups2", "predivide_fp16"])
def test_variants_equal_reference(kwargs):
    if "num_groups" in kwargs:
        with pytest.warns(DeprecationWarning):
            model, _ = train_distributed(sgd, 3, **kwargs)
    else:
        model, _ = train_distributed(sgd, 3, **kwargs)
    fp16 = kwargs.get("compression") is hvd.Compression.fp16
    predivide = kwargs.get("gradient_predivide_factor", 1.0)
    ref = train_reference(sgd, 3, fp16=fp16, predivide=predivide)
    assert_same(model, ref)
    # the variant's arithmetic shows in the bits: ignoring it would not pass
    if fp16:
        assert differs(ref, train_reference(sgd, 3, predivide=predivide))
    if predivide != 1.0:
        assert differs(ref, train_reference(sgd, 3, fp16=fp16))
        # applied the other way round (prescale f, postscale 1/f)
        assert differs(ref, train_reference(sgd, 3, fp16=fp16, predivide=1.0 / predivide))


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
    record_grads(model)
    assert_same(model, train_reference(sgd, 1))


def test_backward_passes_per_step():
    """Two micro-batches per rank per step: the gradient is the sum over
    micro-batches (accumulated locally), averaged over ranks."""
    model, _ = train_distributed(sgd, 2, passes=2)
    ref = train_reference(sgd, 2, passes=2)
    assert_same(model, ref)
    assert differs(ref, train_reference(sgd, 2))  # the second micro-batch counts


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
    record_grads(model)
    assert torch.equal(unused.detach(), torch.ones(2))
    assert torch.equal(unused.grad, torch.zeros(2))
    assert_same(model, train_reference(lambda params: torch.optim.SGD(params, lr=0.5), 1))


def test_misuse():
    r, n = ranks()
    model = make_model()
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=[("a", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="name every"):
        hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(NotImplementedError, match="Adasum"):  # Adasum is for allreduce (test_hvd_adasum.py)
        hvd.reducescatter(torch.ones(2 * n), op=hvd.Adasum)
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters())
    x, y = data(0)
    loss_fn(model, shard(x, r, n), shard(y, r, n)).backward()
    if n > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.step()
    opt.zero_grad()
