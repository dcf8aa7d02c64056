"""DistributedOptimizer as Horovod 0.28's (horovod/torch/optimizer.py), in
what test_optimizer.py does not cover: the names it gives parameters when
named_parameters is not given (and `_parameter_names`), a no-op on ranks
outside its process_set (the wrapped optimizer steps on the local gradient),
set_backward_passes_per_step(), and parameters that get no gradient on some
steps or some ranks (Horovod allreduces zeros for them, so every rank steps
on the average, and a parameter no rank used steps on a zero gradient).

References are computed locally: one model that, at every step, computes
each rank's gradients on that rank's data (a gradient that stays None is
zeros, as Horovod sends), averages them with weftref (numpy, never weft)
and steps the optimizer; parameters and every step's gradients are
compared bit for bit."""

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402
import weftref  # noqa: E402


class Net(torch.nn.Module):
    """a: used by every rank on every step; b: only where (rank + step) is
    even; c: by every rank on odd steps only (on even steps no rank uses it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(3, 3)
        self.c = torch.nn.Parameter(torch.randn(3))

    def forward(self, x, k, step):
        h = torch.tanh(self.a(x))
        if (k + step) % 2 == 0:
            h = self.b(h)
        if step % 2 == 1:
            h = h * self.c
        return h


def data(k, step):
    g = torch.Generator().manual_seed(700 + 10 * step + k)
    return torch.randn(4, 4, generator=g), torch.randn(4, 3, generator=g)


def local_backward(model, k, step, passes=1):
    for i in range(passes):
        x, y = data(k, 100 * i + step)
        ((model(x, k, step) - y) ** 2).mean().backward()


def make_opt(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)


def reference(schedule, members, me):
    """Rank `me`'s parameters and per-step gradients after the steps of
    `schedule` ((step number, backward passes) each): averaged over `members`
    (Horovod's Average), or its own gradient alone when it is not one."""
    model = Net()
    opt = make_opt(model.parameters())
    params = list(model.parameters())
    history = []
    if me not in members:  # plain local training: the wrapped optimizer alone
        for s, passes in schedule:
            opt.zero_grad()
            local_backward(model, me, s, passes)
            history.append(grads_of(model))
            opt.step()
        return model, history
    for s, passes in schedule:
        grads = []
        for k in members:
            for p in params:
                p.grad = None
            local_backward(model, k, s, passes)
            grads.append([torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params])
        for i, p in enumerate(params):
            p.grad = weftref.allreduce_t([g[i] for g in grads], "average")
        history.append(grads_of(model))
        opt.step()
    return model, history


def grads_of(model):
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def steps(count, passes=1):
    return [(s, passes) for s in range(count)]


def train(opt, model, steps, passes=1):
    r, _ = ranks()
    history = []
    for s in range(steps):
        opt.zero_grad()
        local_backward(model, r, s, passes)
        opt.step()
        history.append(grads_of(model))
    return history


def assert_same(model, history, ref_model, ref_history):
    assert len(history) == len(ref_history)
    for s, (g, h) in enumerate(zip(history, ref_history)):
        for (name, _), a, b in zip(model.named_parameters(), g, h):
            assert (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b)), \
                ("gradient", s, name, a, b)
    for (name, a), b in zip(model.named_parameters(), ref_model.parameters()):
        assert torch.equal(a, b), (name, a, b)


def test_unnamed_parameters_are_named_as_horovod_does():
    """Without named_parameters: 'allreduce.noname.<group>.<index in group>'."""
    r, n = ranks()
    model = Net()
    opt = torch.optim.SGD([{"params": [model.a.weight, model.a.bias]},
                           {"params": [model.b.weight, model.b.bias, model.c], "lr": 0.05}], lr=0.1)
    dopt = hvd.DistributedOptimizer(opt)
    assert dopt._parameter_names == {model.a.weight: "allreduce.noname.0.0", model.a.bias: "allreduce.noname.0.1",
                                     model.b.weight: "allreduce.noname.1.0", model.b.bias: "allreduce.noname.1.1",
                                     model.c: "allreduce.noname.1.2"}
    other = Net()  # hooks on model's parameters belong to dopt alone
    named = hvd.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=0.1),
                                     named_parameters=other.named_parameters())
    assert named._parameter_names == dict((p, name) for name, p in other.named_parameters())
    # and it trains as Horovod does (two groups with their own learning rates)
    history = []
    for s in range(2):
        dopt.zero_grad()
        local_backward(model, r, s)
        dopt.step()
        history.append([p.grad.clone() for p in model.parameters()])
    ref = Net()
    ref_opt = torch.optim.SGD([{"params": [ref.a.weight, ref.a.bias]},
                               {"params": [ref.b.weight, ref.b.bias, ref.c], "lr": 0.05}], lr=0.1)
    ref_history = []
    for s in range(2):
        grads = []
        for k in range(n):
            for p in ref.parameters():
                p.grad = None
            local_backward(ref, k, s)
            grads.append([torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = weftref.allreduce_t([g[i] for g in grads], "average")
        ref_history.append([p.grad.clone() for p in ref.parameters()])
        ref_opt.step()
    assert_same(model, history, ref, ref_history)


def test_parameters_without_gradient_on_some_steps_and_ranks():
    r, n = ranks()
    model = Net()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters())
    history = train(opt, model, 4)
    assert_same(model, history, *reference(steps(4), list(range(n)), r))


def test_parameters_without_gradient_with_accumulation():
    r, n = ranks()
    model = Net()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2)
    history = train(opt, model, 3, passes=2)
    assert_same(model, history, *reference(steps(3, 2), list(range(n)), r))


def test_set_backward_passes_per_step():
    r, n = ranks()
    model = Net()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters())
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    history = train(opt, model, 2, passes=2)
    assert_same(model, history, *reference(steps(2, 2), list(range(n)), r))
    opt.set_backward_passes_per_step(1)  # back to one pass: the next step allreduces after one backward
    history += train(opt, model, 1)
    assert_same(model, history, *reference(steps(2, 2) + [(0, 1)], list(range(n)), r))


def test_noop_outside_its_process_set():
    """Ranks outside the optimizer's process set neither register hooks nor
    allreduce: step() is the wrapped optimizer's, on the local gradient."""
    r, n = ranks()
    members = list(range(n - 1))  # [0] with 2 ranks, [0, 1] with 3
    ps = hvd.add_process_set(members)
    try:
        model = Net()
        opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                       process_set=ps)
        history = train(opt, model, 3)
        if r not in members:
            opt.synchronize()  # returns at once: no collective in a set this rank is not in
        assert_same(model, history, *reference(steps(3), members, r))
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)
