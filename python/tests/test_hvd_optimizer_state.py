"""broadcast_optimizer_state and broadcast_parameters, as Horovod 0.28's
(horovod/torch/functions.py): afterwards every rank's optimizer.state_dict()
equals the root's, key for key, tensors bit for bit with their dtype and
non-tensor values (int steps, hyperparameters) equal, for every torch
optimizer Horovod users broadcast (SGD with momentum, Adam, AdamW, Adagrad,
Adadelta, Adamax, RMSprop, NAdam, RAdam).

The reference is computed locally, never through weft: every rank rebuilds
the root's model and optimizer (same seeds, the root's hyperparameters and
data) and takes its state_dict(). The ranks' optimizers differ before the
call (their models, data, hyperparameters, and which parameters got a
gradient). A fresh optimizer (no state yet) is initialised as Horovod does:
zero gradients for the parameters that require one, then one step of the
wrapped optimizer; its reference writes that out. weft then puts the
parameters and gradients back as they were (Horovod leaves the zero
gradients and, with weight decay, moved parameters): checked too."""

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402


def make_model(seed):
    """Linear + BatchNorm (buffers, an int64 counter), an extra parameter
    that only odd ranks use (its gradient stays None on even ones), and a
    frozen parameter (requires_grad False: never any state)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model.extra = torch.nn.Parameter(torch.randn(3))
    model.frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    return model


def data(k, step):
    g = torch.Generator().manual_seed(100 * k + step)
    return torch.randn(6, 4, generator=g), torch.randn(6, 3, generator=g)


def loss_fn(model, k, x, y):
    out = model(x)
    if k % 2 == 1:
        out = out * model.extra
    return ((out - y) ** 2).mean()


# hyperparameters depend on the rank k that builds the optimizer, so that the
# root's must be broadcast too
OPTIMIZERS = {
    "sgd_momentum": lambda p, k: torch.optim.SGD(p, lr=0.1 * (k + 1), momentum=0.9, weight_decay=0.01 * (k + 1),
                                                 nesterov=k % 2 == 0),
    "adam": lambda p, k: torch.optim.Adam(p, lr=0.01 * (k + 1), weight_decay=0.1, amsgrad=k % 2 == 0),
    "adamw": lambda p, k: torch.optim.AdamW(p, lr=0.01 * (k + 1), weight_decay=0.05 * (k + 1)),
    "adagrad": lambda p, k: torch.optim.Adagrad(p, lr=0.1 * (k + 1), lr_decay=0.01, weight_decay=0.1),
    "adadelta": lambda p, k: torch.optim.Adadelta(p, lr=1.0 + k, rho=0.8, weight_decay=0.1),
    "adamax": lambda p, k: torch.optim.Adamax(p, lr=0.02 * (k + 1), weight_decay=0.1),
    "rmsprop": lambda p, k: torch.optim.RMSprop(p, lr=0.01 * (k + 1), momentum=0.5, centered=k % 2 == 0,
                                                weight_decay=0.1),
    "nadam": lambda p, k: torch.optim.NAdam(p, lr=0.01 * (k + 1), weight_decay=0.1),
    "radam": lambda p, k: torch.optim.RAdam(p, lr=0.01 * (k + 1), weight_decay=0.1),
}


def opt_params(model):
    return list(model.parameters())  # the frozen one too: the optimizer must skip it


def trained(k, factory, steps=2):
    """What rank k has: its model and optimizer after `steps` steps on its data."""
    model = make_model(k)
    opt = factory(opt_params(model), k)
    for s in range(steps):
        opt.zero_grad()
        loss_fn(model, k, *data(k, s)).backward()
        opt.step()
    return model, opt


def horovod_initialised(k, factory):
    """A fresh optimizer of rank k initialised as Horovod's
    broadcast_optimizer_state does when its state is empty (Adagrad's is
    not: it makes its state in __init__): p.grad = zeros for every parameter
    that requires a gradient, then one step."""
    model = make_model(k)
    opt = factory(opt_params(model), k)
    if not opt.state_dict()["state"]:
        for p in model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        opt.step()
    return opt


def same(a, b, where):
    """a equals b: tensors bit for bit with dtype and shape, containers
    element by element, anything else by type and ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), (where, a, b)
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a, b)
        assert torch.equal(a, b), (where, a, b)
        return
    assert type(a) is type(b), (where, a, b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, where + (i,))
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b), (where, a, b)
        for k in a:
            same(a[k], b[k], where + (k,))
    else:
        assert a == b, (where, a, b)


def assert_state_equal(sd, ref):
    assert sorted(sd) == sorted(ref)
    assert sorted(sd["state"]) == sorted(ref["state"]), (sorted(sd["state"]), sorted(ref["state"]))
    for idx, st in ref["state"].items():
        assert sorted(sd["state"][idx]) == sorted(st), idx
        for key, value in st.items():
            same(sd["state"][idx][key], value, ("state", idx, key))
    assert len(sd["param_groups"]) == len(ref["param_groups"])
    for i, (g, rg) in enumerate(zip(sd["param_groups"], ref["param_groups"])):
        assert sorted(g) == sorted(rg), i
        for key, value in rg.items():
            same(g[key], value, ("param_groups", i, key))


def root_of(n):
    return n - 1  # not 0: the root must really come from the argument


@pytest.mark.parametrize("wrap", [False, True], ids=["plain", "distributed"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_trained_state_equals_roots(name, wrap):
    r, n = ranks()
    root = root_of(n)
    factory = OPTIMIZERS[name]
    model, opt = trained(r, factory)
    if wrap:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    ref_model, ref_opt = trained(root, factory)
    assert_state_equal(opt.state_dict(), ref_opt.state_dict())
    if wrap:
        return
    # and the state is usable: one more step on the same data gives the root's parameters
    for m, o in ((model, opt), (ref_model, ref_opt)):
        o.zero_grad(set_to_none=True)  # a parameter the root never used has no gradient, here too
        loss_fn(m, root, *data(root, 9)).backward()
        o.step()
    for (pname, a), b in zip(model.named_parameters(), ref_model.parameters()):
        assert torch.equal(a, b), (name, pname)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fresh_optimizer_is_initialised_as_horovod_does(name):
    r, n = ranks()
    root = root_of(n)
    factory = OPTIMIZERS[name]
    model = make_model(r)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    opt = factory(opt_params(model), r)
    assert not opt.state_dict()["state"] or name == "adagrad"
    hvd.broadcast_optimizer_state(opt, root, model=model)
    assert_state_equal(opt.state_dict(), horovod_initialised(root, factory).state_dict())
    # weft restores what the initialising step touched: parameters and gradients as before
    for (pname, p), q in zip(model.named_parameters(), make_model(root).parameters()):
        assert torch.equal(p, q), pname
        assert p.grad is None, pname


def test_fresh_distributed_optimizer_initialises_without_allreduce():
    """A DistributedOptimizer is initialised through the wrapped class's
    step (no allreduce, which would need every rank), also when only the
    root's state is empty."""
    r, n = ranks()
    root = root_of(n)
    factory = OPTIMIZERS["adam"]
    if r == root:
        model = make_model(r)
        opt = factory(opt_params(model), r)
    else:
        model, opt = trained(r, factory)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    assert_state_equal(opt.state_dict(), horovod_initialised(root, factory).state_dict())


def test_tensor_hyperparameters_and_flags():
    """torch 2.x keeps some hyperparameters as tensors (lr) and has flags
    (capturable, foreach, fused, differentiable); every rank gets the root's."""
    r, n = ranks()
    root = root_of(n)

    def build(k):
        model, opt = trained(k, OPTIMIZERS["adam"])
        g = opt.param_groups[0]
        g["lr"] = torch.tensor(0.001 * (k + 1), dtype=torch.float64)
        g["betas"] = (torch.tensor(0.9 - 0.01 * k), 0.999)
        g["capturable"] = k % 2 == 0
        g["foreach"] = None if k % 2 else False
        g["differentiable"] = k % 3 == 0
        g["fused"] = None
        g["custom_schedule"] = {"warmup": k, "names": ["a", "b"][:k % 2 + 1]}
        return opt
    opt = build(r)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    assert_state_equal(opt.state_dict(), build(root).state_dict())
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)


def test_lbfgs_is_refused():
    model = make_model(0)
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


@pytest.mark.parametrize("form", ["state_dict", "named_parameters", "pairs", "parameters", "parameters_list"])
def test_broadcast_parameters_forms(form):
    """Horovod accepts a state_dict, (name, tensor) pairs or a list of
    parameters (model.parameters() as a list)."""
    r, n = ranks()
    root = root_of(n)
    model = make_model(r)
    model[1].running_mean += r  # buffers differ too
    model[1].num_batches_tracked += r
    if form == "state_dict":
        hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    elif form == "named_parameters":
        hvd.broadcast_parameters(model.named_parameters(), root_rank=root)
    elif form == "pairs":
        hvd.broadcast_parameters(list(model.named_parameters()), root_rank=root)
    elif form == "parameters":
        hvd.broadcast_parameters(list(model.parameters()), root_rank=root)
    else:
        hvd.broadcast_parameters([p for p in model.parameters()] + [model[1].running_mean], root_rank=root)
    ref = make_model(root)
    ref[1].running_mean += root
    ref[1].num_batches_tracked += root
    for (pname, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.equal(p, q), (form, pname)
    if form in ("state_dict", "parameters_list"):
        assert torch.equal(model[1].running_mean, ref[1].running_mean)
    if form == "state_dict":
        assert torch.equal(model[1].num_batches_tracked, ref[1].num_batches_tracked)
    elif r != root and n > 1:  # buffers not given are left alone
        assert not torch.equal(model[1].num_batches_tracked, ref[1].num_batches_tracked)
