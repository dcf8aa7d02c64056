"""Elastic data-parallel training with weft.torch, written as for Horovod's
hvd.elastic: the job survives the death of ranks and goes on from its last
commit on the ranks that are left.

    weftrun -np 3 --min-np 2 python3 examples/torch/elastic_train.py
    weftrun -np 3 --min-np 2 python3 examples/torch/elastic_train.py --kill-rank 2 --kill-step 30

--kill-rank R --kill-step S: rank R of the first world SIGKILLs itself
before global step S, as a preempted node would vanish. The survivors'
next collective fails (HorovodInternalError naming the rank);
@hvd.elastic.run restores the last commit (model, optimizer, sampler,
epoch), re-forms a smaller world (weftrun hands out the next generation),
calls the reset callback (here: rescale the learning rate to the new size),
broadcasts the state from the new rank 0 and continues. ElasticSampler
spreads what is left of the epoch over the new ranks. The data is a
synthetic classification task (Gaussian clusters, no download). weft does
not grow a job yet (no host discovery): ranks that die are not replaced.
"""

import argparse
import os
import signal
import sys

import torch
import torch.nn.functional as F

import weft.torch as hvd


def make_data(n, dim, classes, seed):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=g) * 0.8
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="per rank: scaled by the world's size")
    parser.add_argument("--commit-every", type=int, default=10, help="steps between commits")
    parser.add_argument("--kill-rank", type=int, default=-1)
    parser.add_argument("--kill-step", type=int, default=-1)
    parser.add_argument("--min-accuracy", type=float, default=0.0, help="exit 1 if the final accuracy is lower")
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    first_rank = hvd.rank()
    x_all, y_all = make_data(3000, 16, 4, seed=0)
    x, y, x_test, y_test = x_all[:2400], y_all[:2400], x_all[2400:], y_all[2400:]

    torch.manual_seed(first_rank)  # deliberately different: the state's sync aligns the ranks
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(len(x))), shuffle=True, seed=1)
    loader = torch.utils.data.DataLoader(list(range(len(x))), batch_size=args.batch_size, sampler=sampler)

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print("re-formed: %d ranks, resuming at epoch %d, step %d" % (hvd.size(), state.epoch, state.step),
                  flush=True)
    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            for batch_idx, idx in enumerate(loader):
                if first_rank == args.kill_rank and state.step == args.kill_step:
                    print("rank %d: killing itself at step %d" % (first_rank, state.step), flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.zero_grad()
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                optimizer.step()
                state.sampler.record_batch(batch_idx, args.batch_size)
                state.step += 1
                if state.step % args.commit_every == 0:
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()
            if hvd.rank() == 0:
                print("epoch %d done on %d ranks (step %d)" % (state.epoch, hvd.size(), state.step), flush=True)

    train(state)
    with torch.no_grad():
        correct = (model(x_test).argmax(1) == y_test).sum().item()
    accuracy = correct / len(y_test)
    if hvd.rank() == 0:
        print("final: %d ranks, test accuracy %.4f" % (hvd.size(), accuracy), flush=True)
    if accuracy < args.min_accuracy:
        print("rank %d: accuracy %.4f below --min-accuracy %.4f" % (hvd.rank(), accuracy, args.min_accuracy),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
