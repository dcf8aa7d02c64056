"""The problem that elastic_torch.py and elastic_grow.py train under
weftrun, and its reference without weft: a linear model in float64 on
integer-valued data, SGD with momentum, B samples per rank per step over
each epoch's shuffled order (an ElasticSampler with seed SEED), the ranks'
gradients averaged."""

import random

import torch

N, D, B, COMMIT, EPOCHS = 120, 4, 2, 4, 2
LR, MOMENTUM, SEED = 0.002, 0.5, 7

gen = torch.Generator().manual_seed(1234)
X = torch.randint(-3, 4, (N, D), generator=gen).double()
Y = X @ torch.tensor([1.0, -2.0, 3.0, 0.5], dtype=torch.float64)
W0 = torch.tensor([[0.25, -0.5, 0.75, 1.0]], dtype=torch.float64)


def reference(ranks_at):
    """The expected final weights and step count, without weft, when step
    s (from 0, counted across epochs) runs on ranks_at(s) ranks."""
    w, buf, steps = W0[0].clone(), None, 0
    for epoch in range(EPOCHS):
        order = list(range(N))
        random.Random(SEED + epoch).shuffle(order)
        processed = 0
        while processed < N:
            n = ranks_at(steps)
            g = torch.zeros(D, dtype=torch.float64)
            for r in range(n):
                idx = order[processed + r::n][:B]
                xb, yb = X[idx], Y[idx]
                g += 2.0 / B * xb.t() @ (xb @ w - yb)
            g /= n
            buf = g.clone() if buf is None else MOMENTUM * buf + g
            w = w - LR * buf
            processed += n * B
            steps += 1
    return w, steps


def setup(hvd, offset):
    """The model (its weights W0 + offset: only rank 0's survive the first
    sync), DistributedOptimizer and TorchState the scripts train."""
    model = torch.nn.Linear(D, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(W0 + offset)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(N)), shuffle=True, seed=SEED)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, steps=0)
    return model, optimizer, state


def epochs(state, model, optimizer, before=None, after=None):
    """The scripts' training loop (the body of their @hvd.elastic.run
    function): a commit every COMMIT steps and at each epoch's end;
    before(steps) and after(steps) run around each step, after() before its
    commit."""
    while state.epoch < EPOCHS:
        idx = list(iter(state.sampler))
        for k in range(len(idx) // B):
            if before:
                before(state.steps)
            batch = idx[k * B:(k + 1) * B]
            optimizer.zero_grad()
            loss = ((model(X[batch]).squeeze(1) - Y[batch]) ** 2).mean()
            loss.backward()
            optimizer.step()
            state.sampler.record_batch(k, B)
            state.steps += 1
            if after:
                after(state.steps)
            if state.steps % COMMIT == 0:
                state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()
