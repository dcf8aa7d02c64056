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
