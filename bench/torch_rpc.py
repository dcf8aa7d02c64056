"""torch.distributed.rpc's side of bench/remote_vs_torch_rpc.sh (the
TensorPipe agent): rank 0 calls rank 1 with rpc_sync, one call at a time,
as bench/remote_bench.c does with weft_remote_execute.

    python3 torch_rpc.py --rank R --addr ADDR --port PORT ITERS SIZE[,SIZE...]

Run once per rank (the script starts both when --rank is left out). SIZE
0: an empty call (a function of no arguments returning None); else a call
with one uint8 tensor of SIZE bytes as its argument, returning None. After
3 warm-up calls (size 0: 20), rank 0 prints one line per size:
    torch,SIZE,ITERS,median_us,min_us,MBps (SIZE / median)
--tcp-only: TensorPipe's uv transport and basic channel only, as between
two machines (without it, on one kernel TensorPipe takes shared memory and
CMA even across network namespaces)."""

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed.rpc as rpc


def noop(*args):
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--addr", default="127.0.0.1")
    p.add_argument("--port", default="29517")
    p.add_argument("--tcp-only", action="store_true")
    p.add_argument("iters", type=int)
    p.add_argument("sizes")
    a = p.parse_args()
    if a.rank < 0:  # both ranks here
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r)] + sys.argv[1:]) for r in (0, 1)]
        sys.exit(max(pr.wait() for pr in procs))
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=300,
                                           init_method="tcp://%s:%s" % (a.addr, a.port))
    if a.tcp_only:
        opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=300,
                                               init_method="tcp://%s:%s" % (a.addr, a.port),
                                               _transports=["uv"], _channels=["basic"])
    rpc.init_rpc("worker%d" % a.rank, rank=a.rank, world_size=2, rpc_backend_options=opts)
    if a.rank == 0:
        for s in a.sizes.split(","):
            size = int(s)
            n = max(a.iters // 10, 5) if size >= 16 << 20 else a.iters
            args = (torch.ones(size, dtype=torch.uint8),) if size else ()
            dts = []
            for i in range(-(3 if size else 20), n):
                t0 = time.perf_counter()
                rpc.rpc_sync("worker1", noop, args=args)
                if i >= 0:
                    dts.append((time.perf_counter() - t0) * 1e6)
            med = statistics.median(dts)
            print("torch,%d,%d,%.2f,%.2f,%.1f" % (size, n, med, min(dts), size / med if size else 0.0), flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    main()
