"""Data-parallel training on 1, 2 or 4 ranks with DistributedOptimizer gives
bit for bit the parameters of training one model on the whole batch in one
process (computed here as the reference), for SGD with momentum and for
Adam, over several steps.

Registered for 1, 2 and 4 ranks only, because that is where the equality is
exact by construction, not by luck:
  - the model is one bias-free linear layer and every sample is a one-hot
    vector times +-1 whose feature no other sample of the step uses. So an
    output is one weight times +-1 (no sum that could round), and every
    gradient element is one sample's residual times a power of two (the
    mean's 2 / numel: B * OUT / n elements, B and OUT powers of two) on the
    one rank that holds that sample and exactly zero on all the others;
  - weft sums the ranks' gradients (x + 0 is exact) and divides by n, a
    power of two (exact);
  - so every rank ends up with the full-batch gradient to the last bit,
    whatever the weights are (they are arbitrary floats after a step), and
    the optimizer, doing the same arithmetic on the same bits, gives the
    same parameters.
On 3 ranks the division by 3 and the mean over B/3 samples round
differently from one mean over B, so 1/2/4 is what can be promised exactly;
test_optimizer.py checks every rank count (2 and 3 in the suite) exactly
against a reference that combines the ranks' gradients as weft does.
Any error in the reduction (a rank's gradient lost or counted twice, the
wrong divisor, one bit off) makes the parameters differ."""

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402

B = 8  # samples per step, split evenly over the ranks
FEATURES = B  # one feature per sample of a step
OUT = 4
STEPS = 4


def data(step):
    """The step's whole batch: sample i is sign_i * e_{perm_i} (one-hot), its
    target arbitrary."""
    g = torch.Generator().manual_seed(700 + step)
    perm = torch.randperm(FEATURES, generator=g)
    sign = torch.randint(0, 2, (B,), generator=g).float() * 2 - 1
    x = torch.zeros(B, FEATURES)
    x[torch.arange(B), perm] = sign
    return x, torch.randn(B, OUT, generator=g)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(FEATURES, OUT, bias=False)


def loss_fn(model, x, t):
    return torch.nn.functional.mse_loss(model(x), t)


def sgd(params):
    return torch.optim.SGD(params, lr=0.3, momentum=0.9)


def adam(params):
    return torch.optim.Adam(params, lr=0.05)


def horovod_initialise(model, opt):
    """What broadcast_optimizer_state does to a fresh optimizer, written
    out: Horovod's one step on zero gradients (Adam's step count starts at
    1), then (weft) the parameters and gradients put back as they were."""
    saved = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    with torch.no_grad():
        for p, v in zip(model.parameters(), saved):
            p.copy_(v)
            p.grad = None


def train_one_process(factory):
    model = make_model(0)
    opt = factory(model.parameters())
    horovod_initialise(model, opt)
    grads = []
    for s in range(STEPS):
        x, t = data(s)
        opt.zero_grad()
        loss_fn(model, x, t).backward()
        opt.step()
        grads.append(model.weight.grad.clone())
    return model, grads


def train_ranks(factory):
    r, n = ranks()
    per = B // n
    model = make_model(seed=r)  # different start: broadcast_parameters must fix it
    opt = hvd.DistributedOptimizer(factory(model.parameters()), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grads = []
    for s in range(STEPS):
        x, t = data(s)
        opt.zero_grad()
        loss_fn(model, x[r * per:(r + 1) * per], t[r * per:(r + 1) * per]).backward()
        opt.step()
        grads.append(model.weight.grad.clone())  # the gradient the step used (averaged over the ranks)
    return model, grads


def assert_same_training(factory):
    """Every step's gradient and the final weights equal to the last bit (the
    gradients too, since a step can round a gradient's last bits away)."""
    model, grads = train_ranks(factory)
    ref, ref_grads = train_one_process(factory)
    assert not torch.equal(ref.weight, make_model(0).weight)  # it trained
    for s, (g, h) in enumerate(zip(grads, ref_grads)):
        assert torch.equal(g, h), ("gradient", s, (g - h).abs().max().item())
    assert torch.equal(model.weight, ref.weight), (model.weight - ref.weight).abs().max().item()


def test_rank_count_is_one_two_or_four():
    r, n = ranks()
    assert n in (1, 2, 4), "exact only where n divides B and is a power of two: registered for 1, 2, 4 ranks"


def test_construction_is_exact():
    """The premise: the full-batch gradient is the mean of per-shard
    gradients to the last bit (computed here in one process, for every way
    of splitting the batch this file is registered for)."""
    model = make_model(0)
    with torch.no_grad():
        model.weight.mul_(1.0 + 1.0 / 3.0)  # arbitrary bits, as after an optimizer step
    x, t = data(0)
    full = torch.autograd.grad(loss_fn(model, x, t), model.weight)[0]
    for n in (2, 4):
        per = B // n
        parts = [torch.autograd.grad(loss_fn(model, x[k * per:(k + 1) * per], t[k * per:(k + 1) * per]),
                                     model.weight)[0] for k in range(n)]
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        assert torch.equal(total / n, full), n
        assert all(int((p != 0).sum()) == per * OUT for p in parts)  # each rank: only its samples' features


def test_same_bits_as_one_process_sgd_momentum():
    assert_same_training(sgd)


def test_same_bits_as_one_process_adam():
    assert_same_training(adam)
