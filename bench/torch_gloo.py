"""weft vs torch.distributed's gloo backend on the same tensors (issue 23's
benchmark): allreduce (sum, in place) of float32 tensors, timed from Python
as a training loop would call it. Launch it with weftrun, which starts the
ranks and gives both libraries their rank and size (gloo rendezvouses
through a file next to --store):

    weftrun -np 2 python3 bench/torch_gloo.py --device cuda --sizes 1M,128M

Per size and library: warmup, then --iters timed iterations; the time is the
mean per iteration, the maximum over ranks; for CUDA tensors the loop ends
with torch.cuda.synchronize(), so queued work is counted. weft completes a
CUDA request on torch's current stream (weft.torch), gloo's CUDA allreduce
is synchronous. Rank 0 prints one CSV row per size and library:
library,device,ranks,bytes,iters,time_us,algbw_gbps,busbw_gbps (busbw =
algbw * 2(n-1)/n, nccl-tests' allreduce factor); the results are checked
(every element = the sum of the ranks' values) before timing."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import weft.torch as hvd


def parse_size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(s[:-1]) * mul[s[-1]] if s[-1] in mul else int(s)


def timed(fn, x, iters, warmup, sync):
    for _ in range(warmup):
        fn(x)
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    sync()
    return (time.perf_counter() - t0) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--sizes", default="1M,128M", help="bytes per tensor, comma-separated (K/M/G suffixes)")
    p.add_argument("--iters", type=int, default=0, help="timed iterations (0: about 1 s worth, at least 3)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--store", default=os.environ.get("TMPDIR", "/tmp"), help="folder for gloo's rendezvous file")
    p.add_argument("--libs", default="weft,gloo")
    a = p.parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if a.device == "cuda":
        if not torch.cuda.is_available():
            print("torch_gloo: no CUDA device", file=sys.stderr)
            return 77
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
        sync = torch.cuda.synchronize
    else:
        dev, sync = torch.device("cpu"), (lambda: None)
    # gloo's rendezvous: a file every rank of this job names alike (weftrun's address is per job)
    job = os.environ.get("WEFT_ADDR", "local").replace(":", "_").replace("/", "_")
    store = os.path.join(a.store, "weft-gloo-%s" % job)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=size)
    libs = {"weft": lambda x: hvd.allreduce_(x, op=hvd.Sum, name="bench.%d" % x.numel()),
            "gloo": lambda x: dist.all_reduce(x)}
    if rank == 0:
        print("library,device,ranks,bytes,iters,time_us,algbw_gbps,busbw_gbps", flush=True)
    for s in a.sizes.split(","):
        nbytes = parse_size(s)
        n = max(1, nbytes // 4)
        for lib in a.libs.split(","):
            fn = libs[lib]
            x = torch.full((n,), float(rank + 1), device=dev)
            fn(x)
            sync()
            want = float(size * (size + 1) // 2)
            if not bool((x == want).all()):
                print("torch_gloo: %s gave wrong results at %d bytes" % (lib, nbytes), file=sys.stderr)
                return 1
            iters = a.iters
            if iters <= 0:  # every rank must agree: rank 0's estimate
                est = torch.tensor([timed(fn, x, 1, 0, sync)], dtype=torch.float64)
                hvd.broadcast_(est, 0, name="bench.est.%s.%d" % (lib, nbytes))
                iters = max(3, min(2000, int(1.0 / max(est.item(), 1e-6))))
            t = torch.tensor([timed(fn, x, iters, a.warmup, sync)], dtype=torch.float64)
            t = hvd.allreduce(t, op=hvd.Max, name="bench.t.%s.%d" % (lib, nbytes)).item()
            algbw = n * 4 / t / 1e9
            if rank == 0:
                print("%s,%s,%d,%d,%d,%.2f,%.4f,%.4f" % (lib, a.device, size, n * 4, iters, t * 1e6, algbw,
                                                        algbw * 2 * (size - 1) / size), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and os.path.exists(store):
        os.unlink(store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
