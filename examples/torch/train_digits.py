"""Data-parallel training of a small MLP on scikit-learn's digits data set
(8x8 images of handwritten digits, shipped with scikit-learn: no download)
with weft.torch, used exactly like horovod.torch.

    weftrun -np 4 python3 examples/torch/train_digits.py
    python3 examples/torch/train_digits.py            # one process
    weftrun -np 2 python3 examples/torch/train_digits.py --cuda   # on GPUs

--cuda trains on the GPU (torch.cuda.set_device(hvd.local_rank() % the
device count), as Horovod's examples do: ranks share a GPU when there are
more ranks than GPUs); weft stages the CUDA gradients through host memory.

Every step takes a global batch of --batch-size samples (the same samples,
in the same order, whatever the number of ranks); each rank computes the
gradient of its own slice, and DistributedOptimizer averages the gradients
across ranks while backward is still running. Because the global batch is
fixed, 1, 2 or 4 ranks follow the same trajectory up to float rounding and
reach the same accuracy. Rank 0 prints the loss and test accuracy per epoch.

--bench N times N further training steps and prints their median (and the
time spent in optimizer.step(), where the allreduces are awaited).
--no-overlap makes those timed steps wait for backward to finish and then
average every gradient in one grouped allreduce (no overlap of communication
with backward), for comparison with DistributedOptimizer's hooks."""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import weft.torch as hvd


def load_digits_split(seed=0):
    """scikit-learn's digits (1797 samples, 64 features, 10 classes), 80/20
    train/test split, standardized on the training set. The CSV is read
    straight from the installed scikit-learn package: importing sklearn
    (and scipy) would cost each rank seconds of start-up."""
    import gzip
    import importlib.util
    import os

    import numpy as np
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-learn is needed for its digits data set (Debian: apt-get install python3-sklearn)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    x, y = table[:, :-1], table[:, -1].astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(x))
    test, train = order[:len(x) // 5], order[len(x) // 5:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-6
    to_x = lambda a: torch.tensor((a - mean) / std, dtype=torch.float32)  # noqa: E731
    return to_x(x[train]), torch.tensor(y[train]), to_x(x[test]), torch.tensor(y[test])


def make_model(hidden):
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def my_slice(batch, rank, size):
    """This rank's part of a global batch (sizes differ by at most one)."""
    per, extra = divmod(len(batch), size)
    start = rank * per + min(rank, extra)
    return batch[start:start + per + (1 if rank < extra else 0)]


def evaluate(model, x, y):
    """Test accuracy over all ranks: each scores its shard, then the counts are summed."""
    model.eval()
    with torch.no_grad():
        xs, ys = my_slice(x, hvd.rank(), hvd.size()), my_slice(y, hvd.rank(), hvd.size())
        correct = (model(xs).argmax(1) == ys).sum().to(torch.float64)
    model.train()
    count = torch.tensor(float(len(ys)), dtype=torch.float64, device=correct.device)
    totals = hvd.allreduce(torch.stack([correct, count]), op=hvd.Sum,
                           name="eval")
    return (totals[0] / totals[1]).item()


def train_step(model, optimizer, xb, yb, global_batch, plain=None):
    """One step; the loss is scaled so that the average over ranks is the
    mean over the global batch, even when slices differ in size. With plain
    (the wrapped torch optimizer), gradients are averaged only after backward,
    in one grouped allreduce: no overlap."""
    (plain or optimizer).zero_grad()
    loss = F.cross_entropy(model(xb), yb, reduction="sum") * (hvd.size() / global_batch)
    loss.backward()
    t0 = time.perf_counter()
    if plain is not None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        hvd.grouped_allreduce_(grads, op=hvd.Average, name="grads")
        plain.step()
    else:
        optimizer.step()
    return loss.detach(), time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (all ranks together)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--min-accuracy", type=float, default=0.0, help="exit 1 if the final accuracy is lower")
    parser.add_argument("--bench", type=int, default=0, metavar="N", help="then time N more steps")
    parser.add_argument("--cuda", action="store_true", help="train on the GPU (local rank mod the GPU count)")
    parser.add_argument("--no-overlap", action="store_true",
                        help="--bench steps: one grouped allreduce after backward instead of per-gradient hooks")
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(args.threads)  # ranks share the machine's cores
    rank, size = hvd.rank(), hvd.size()
    x_train, y_train, x_test, y_test = load_digits_split()
    device = torch.device("cpu")
    if args.cuda:
        if not torch.cuda.is_available() or not hvd.cuda_built():
            print("--cuda: no usable GPU (torch: %s, weft: %s)" % (torch.cuda.is_available(), hvd.cuda_built()),
                  file=sys.stderr)
            return 77
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        x_train, y_train, x_test, y_test = (t.to(device) for t in (x_train, y_train, x_test, y_test))

    torch.manual_seed(args.seed + rank)  # deliberately different: broadcast_parameters aligns them
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    if rank == 0:
        print("digits: %d train / %d test samples, %d rank(s), global batch %d"
              % (len(x_train), len(x_test), size, args.batch_size), flush=True)
    start = time.perf_counter()
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        loss_sum, steps = torch.zeros((), device=device), 0
        for b in range(0, len(order), args.batch_size):
            batch = order[b:b + args.batch_size]
            mine = my_slice(batch, rank, size)
            loss, _ = train_step(model, optimizer, x_train[mine], y_train[mine], len(batch))
            loss_sum += loss
            steps += 1
        mean_loss = hvd.allreduce(loss_sum / steps, name="loss").item()  # average over ranks
        accuracy = evaluate(model, x_test, y_test)
        if rank == 0:
            print("epoch %2d  loss %.4f  test accuracy %.4f  (%.1f s)"
                  % (epoch, mean_loss, accuracy, time.perf_counter() - start), flush=True)

    if args.bench:
        plain = None
        if args.no_overlap:  # a copy without DistributedOptimizer's hooks
            copy = make_model(args.hidden).to(device)
            copy.load_state_dict(model.state_dict())
            model, plain = copy, torch.optim.SGD(copy.parameters(), lr=args.lr, momentum=0.9)
        step_times, sync_times = [], []
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(12345))
        for i in range(args.bench):
            b = (i * args.batch_size) % (len(order) - args.batch_size)
            mine = my_slice(order[b:b + args.batch_size], rank, size)
            t0 = time.perf_counter()
            _, sync = train_step(model, optimizer, x_train[mine], y_train[mine], args.batch_size,
                                 plain)
            step_times.append(time.perf_counter() - t0)
            sync_times.append(sync)
        # the slowest rank sets the pace: report rank medians' maximum
        medians = hvd.allgather(torch.tensor([[statistics.median(step_times), statistics.median(sync_times)]],
                                             dtype=torch.float64))
        if rank == 0:
            worst = medians.max(0).values
            print("bench: %d steps on %d rank(s)%s: median step %.3f ms (of which waiting for gradients %.3f ms)"
                  % (args.bench, size, ", no overlap" if args.no_overlap else "", worst[0].item() * 1e3,
                     worst[1].item() * 1e3), flush=True)

    hvd.shutdown()
    if accuracy < args.min_accuracy:
        print("rank %d: final accuracy %.4f is below --min-accuracy %.4f" % (rank, accuracy, args.min_accuracy),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
