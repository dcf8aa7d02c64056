"""param_server.py - a parameter server with weft.rpc (the Python twin of
examples/param_server.c): linear regression (1024 samples x 8 features,
fixed seeds, known true weights plus small noise) trained by synchronous
SGD through a server rank.

Rank 0 is the server: it holds the model's parameters. Every other rank is
a worker with its own shard of the data; each step it pulls the
parameters, computes the gradient of its mini-batch and pushes it to the
server with weft.rpc. A weft barrier (a collective, in the same job as the
rpc calls) ends each step's pushes, and an allreduce sums the workers'
losses for the log. The next step's first pull applies the step's
gradients in worker rank order, so the result does not depend on the
order the pushes arrived in. With one
rank, rank 0 is server and worker (it calls itself).

    weftrun -np 3 python3 examples/torch/param_server.py [--steps 40] [--out final.pt]

Exits non-zero if the final loss is not close to the noise floor (with
--min-steps-for-check steps or more). --out saves the final parameters
(server only), which tests/param_server_check.py compares with a
reference computed in one process."""

import argparse
import sys

import torch

import weft.rpc as rpc
import weft.torch as hvd

N_SAMPLES, N_FEATURES, BATCH, NOISE = 1024, 8, 32, 0.01


def make_data():
    g = torch.Generator().manual_seed(1234)
    w_true = torch.randn(N_FEATURES, 1, generator=g, dtype=torch.float64)
    x = torch.randn(N_SAMPLES, N_FEATURES, generator=g, dtype=torch.float64)
    y = x @ w_true + NOISE * torch.randn(N_SAMPLES, 1, generator=g, dtype=torch.float64)
    return x, y


def make_model():
    torch.manual_seed(7)
    return torch.nn.Linear(N_FEATURES, 1).double()


class Server(object):
    """The parameters and the gradients pushed but not applied yet, by (step, worker rank)."""

    def __init__(self, lr):
        self.params = [p.detach().clone() for p in make_model().parameters()]
        self.lr = lr
        self.pending = {}
        self.applied = 0

    def push(self, step, rank, grads):
        if (step, rank) in self.pending:
            raise ValueError("worker %d pushed twice at step %d" % (rank, step))
        self.pending[(step, rank)] = grads

    def pull(self, step):
        """The parameters for step: every gradient of earlier steps applied, in
        (step, rank) order, so the result does not depend on arrival order (a
        fast worker's push for this step may already be in: it stays pending)."""
        for key in sorted(k for k in self.pending if k[0] < step):
            for p, g in zip(self.params, self.pending.pop(key)):
                p -= self.lr * g
            self.applied += 1
        return self.params


_server = None  # rank 0's


# the functions workers call (run on the server's remote worker thread)
def push(step, rank, grads):
    _server.push(step, rank, grads)


def pull(step):
    return _server.pull(step)


def batch_of(worker, n_workers, step):
    """The rows of worker's mini-batch at step: consecutive rows of its shard, wrapping."""
    shard = N_SAMPLES // n_workers
    start = worker * shard + (step * BATCH) % shard
    return [worker * shard + (start - worker * shard + k) % shard for k in range(BATCH)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--out", default=None, help="save the final parameters here (torch.save, server only)")
    ap.add_argument("--max-loss", type=float, default=1e-3, help="fail above this final loss (after >= 60 steps)")
    args = ap.parse_args()

    global _server
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    workers = list(range(1, size)) or [0]
    if rank == 0:
        _server = Server(args.lr)
    rpc.init_rpc(name="ps" if rank == 0 else None)  # collective: the server serves once it returns
    x, y = make_data()
    model = make_model()
    params = list(model.parameters())
    loss_sum = None
    for step in range(args.steps):
        if rank in workers:
            with torch.no_grad():
                for p, v in zip(params, rpc.rpc_sync("ps", pull, args=(step,))):
                    p.copy_(v)
            rows = batch_of(workers.index(rank), len(workers), step)
            loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
            grads = torch.autograd.grad(loss, params)
            rpc.rpc_sync("ps", push, args=(step, rank, grads))
            mine = loss.detach().reshape(1)
        else:
            mine = torch.zeros(1, dtype=torch.float64)
        hvd.barrier()  # every push of this step is in
        loss_sum = hvd.allreduce(mine, op=hvd.Sum, name="loss.%d" % step)
        if rank == 0 and (step % 20 == 0 or step == args.steps - 1):
            print("step %d: mean worker loss %.6f" % (step, loss_sum.item() / len(workers)), flush=True)
    ok = True
    if rank == 0:
        final = [p.clone() for p in _server.pull(args.steps)]  # the last step's gradients applied
        with torch.no_grad():
            for p, v in zip(params, final):
                p.copy_(v)
            full = torch.nn.functional.mse_loss(model(x), y).item()
        print("server: %d gradients applied, final loss %.6f (noise floor %.6f)"
              % (_server.applied, full, NOISE ** 2), flush=True)
        ok = _server.applied == args.steps * len(workers) and (args.steps < 60 or full < args.max_loss)
        if args.out:
            torch.save({"params": final, "steps": args.steps, "workers": workers, "lr": args.lr}, args.out)
    rpc.shutdown()
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
