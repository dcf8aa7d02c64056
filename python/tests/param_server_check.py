"""Runs examples/torch/param_server.py under weftrun (a server and N-1
workers) and checks the server's final parameters against a reference
computed here, in one process with plain torch (bit for bit: the same
operations on the same values in the same order): the same data and initial
model (same seeds), each step every worker's mini-batch gradient taken on
the step's parameters and applied in worker rank order. Written
independently of the example's training loop (only the seeds, sizes and
batch rule are shared). Exits non-zero on any difference.

    python3 param_server_check.py WEFTRUN EXAMPLE [NP] [STEPS]"""

import os
import subprocess
import sys
import tempfile

import torch

N_SAMPLES, N_FEATURES, BATCH, NOISE, LR = 1024, 8, 32, 0.01, 0.1


def reference(steps, workers):
    g = torch.Generator().manual_seed(1234)
    w_true = torch.randn(N_FEATURES, 1, generator=g, dtype=torch.float64)
    x = torch.randn(N_SAMPLES, N_FEATURES, generator=g, dtype=torch.float64)
    y = x @ w_true + NOISE * torch.randn(N_SAMPLES, 1, generator=g, dtype=torch.float64)
    torch.manual_seed(7)
    model = torch.nn.Linear(N_FEATURES, 1).double()
    params = list(model.parameters())
    shard = N_SAMPLES // len(workers)
    for step in range(steps):
        grads = []
        for i in range(len(workers)):  # every worker's gradient on this step's parameters
            rows = [i * shard + ((step * BATCH) % shard + k) % shard for k in range(BATCH)]
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
            grads.append(torch.autograd.grad(loss, params))
        with torch.no_grad():
            for gs in grads:  # applied in worker rank order
                for p, gr in zip(params, gs):
                    p -= LR * gr
    return [p.detach() for p in params]


def main():
    weftrun, example = sys.argv[1], sys.argv[2]
    np_ = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 60
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "final.pt")
        rc = subprocess.call([weftrun, "-np", str(np_), "--timeout", "100", sys.executable, example,
                              "--steps", str(steps), "--lr", str(LR), "--out", out])
        if rc != 0:
            print("FAIL: the example exited with %d" % rc)
            return 1
        got = torch.load(out)
    workers = list(range(1, np_)) or [0]
    if got["workers"] != workers or got["steps"] != steps:
        print("FAIL: the example ran %s for %d steps, expected %s for %d" % (got["workers"], got["steps"], workers,
                                                                             steps))
        return 1
    want = reference(steps, workers)
    bad = 0
    for i, (a, b) in enumerate(zip(got["params"], want)):
        if a.shape != b.shape or not torch.equal(a, b):
            print("FAIL: parameter %d differs from the reference (max |diff| %.3g):\n%s\n%s"
                  % (i, (a - b).abs().max().item() if a.shape == b.shape else float("nan"), a, b))
            bad += 1
    if len(got["params"]) != len(want):
        print("FAIL: %d parameters, expected %d" % (len(got["params"]), len(want)))
        bad += 1
    if not bad:
        print("PASS: %d parameters equal the one-process reference after %d steps of %d workers"
              % (len(want), steps, len(workers)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
