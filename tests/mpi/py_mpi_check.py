"""weft's Python package under mpirun (no weftrun, no WEFT_ADDR): weft.init()
bootstraps from MPI. Checks the ranks against the MPI launcher's own
variables, numpy collectives against references computed here from every
rank's known input, shutdown and init again in the same process, and (when
torch imports) weft.torch's allreduce. Exits non-zero on any failure; a
torch that does not import is one where skipping is forbidden
(WEFT_TESTS_NO_SKIP=1, the default where CI is set).

Run: mpirun -np N python3 py_mpi_check.py (PYTHONPATH=<build>/python)."""

import os
import sys

import numpy as np

import weft


def launcher(names):
    for n in names:
        if os.environ.get(n):
            return int(os.environ[n])
    sys.exit("py_mpi_check: not started by an MPI launcher (no %s)" % names[0])


def check(cond, what):
    if not cond:
        print("FAIL rank %s: %s" % (os.environ.get("OMPI_COMM_WORLD_RANK", "?"), what), flush=True)
        if weft.is_initialized():
            weft.abort(what)
        sys.exit(1)


def no_skip():
    v = os.environ.get("WEFT_TESTS_NO_SKIP", "")
    if not v:
        v = "1" if os.environ.get("CI", "") not in ("", "false") else "0"
    return v != "0"


def main():
    rank = launcher(["OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"])
    size = launcher(["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])
    for cycle in range(2):
        weft.init()
        check(weft.is_initialized(), "cycle %d: not initialized after init()" % cycle)
        check((weft.rank(), weft.size()) == (rank, size),
              "cycle %d: weft rank %d of %d, launcher %d of %d" % (cycle, weft.rank(), weft.size(), rank, size))
        x = np.arange(100003, dtype=np.float64) + 1000.0 * rank
        got = weft.allreduce(x, name="py.sum.%d" % cycle)
        want = np.arange(100003, dtype=np.float64) * size + 1000.0 * size * (size - 1) / 2
        check(np.array_equal(got, want), "cycle %d: allreduce differs from the reference" % cycle)
        g = weft.allgather(np.full((rank + 1, 3), rank, dtype=np.int32), name="py.gather.%d" % cycle)
        wantg = np.concatenate([np.full((k + 1, 3), k, dtype=np.int32) for k in range(size)])
        check(np.array_equal(g, wantg), "cycle %d: allgather differs from the reference" % cycle)
        b = weft.broadcast(np.arange(7, dtype=np.int64) * (rank + 1), root=size - 1, name="py.bcast.%d" % cycle)
        check(np.array_equal(b, np.arange(7, dtype=np.int64) * size), "cycle %d: broadcast differs" % cycle)
        weft.shutdown()
        check(not weft.is_initialized(), "cycle %d: still initialized after shutdown()" % cycle)
    try:
        import torch
    except ImportError as e:
        torch = None
        check(not no_skip(), "torch does not import (%s), and WEFT_TESTS_NO_SKIP=1 (or CI) forbids skipping it" % e)
    if torch is not None:
        import weft.torch as hvd
        hvd.init()
        t = torch.arange(1000, dtype=torch.float32) + rank
        got = hvd.allreduce(t, op=hvd.Sum, name="py.torch.sum")
        want = torch.arange(1000, dtype=torch.float32) * size + size * (size - 1) / 2
        check(torch.equal(got, want), "weft.torch allreduce differs from the reference")
        hvd.shutdown()
    print("DONE rank %d: 0 failure(s)%s" % (rank, "" if torch is not None else " (torch not importable: skipped)"),
          flush=True)


if __name__ == "__main__":
    main()
