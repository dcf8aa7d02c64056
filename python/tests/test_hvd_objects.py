"""Smaller Horovod 0.28 conventions of weft.torch: init(process_sets=
"dynamic"); broadcast_object and allgather_object pickle with cloudpickle
(lambdas, closures and locally defined classes travel); cross_rank,
cross_size and is_homogeneous as Horovod defines them, also on hosts with
different numbers of ranks (faked on this machine: a nested job whose ranks
report host names of their own, as tests/mp/hier_hosts.sh does).

Horovod's placement (horovod/runner/common/util/hosts.py, and MPI's cross
communicator, split by local rank): the ranks with the same local rank form
a cross set; cross_size is its size (the number of hosts that have a rank
with this local rank), cross_rank this rank's index in it (in rank order);
is_homogeneous is True when every host runs the same number of ranks, the
same answer on every rank."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ranks, require, weftrun_path

torch = require("torch")
cloudpickle = require("cloudpickle")
import weft.torch as hvd  # noqa: E402


def test_init_process_sets_dynamic():
    r, n = ranks()
    hvd.init(process_sets="dynamic")  # already joined: nothing to do, and no set registered from the string
    assert hvd.is_initialized()
    hvd.shutdown()
    hvd.init(process_sets="dynamic")  # a fresh join
    assert hvd.is_initialized() and hvd.size() == n and hvd.rank() == r
    # dynamic: sets are added and removed afterwards (every rank, same order)
    ps = hvd.add_process_set([0])
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n
    if r == 0:
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=ps).item() == 1
    hvd.barrier()
    assert hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="dynamic"):
        hvd.init(process_sets="static")


def test_init_process_sets_list_still_registers():
    r, n = ranks()
    hvd.shutdown()
    hvd.init(process_sets=[hvd.ProcessSet([0]), [k for k in range(n) if k != 0]])
    try:
        from weft.torch import mpi_ops
        sets = mpi_ops._process_sets[1:]
        assert [s.ranks for s in sets] == [[0], list(range(1, n))]
        mine = sets[0] if r == 0 else sets[1]
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=mine).item() == len(mine.ranks)
    finally:
        hvd.barrier()
        for s in list(mpi_ops._process_sets[1:]):
            hvd.remove_process_set(s)


def make_scaler(k):
    """A closure over k (plain pickle cannot send it)."""
    return lambda x: x * (k + 1) + 0.5


def test_broadcast_object_sends_a_lambda():
    r, n = ranks()
    root = n - 1
    f = hvd.broadcast_object(make_scaler(r) if r == root else None, root_rank=root)
    assert f(2.0) == 2.0 * (root + 1) + 0.5
    # a class defined here (cloudpickle sends it by value) with its instance
    class Point(object):
        def __init__(self, k):
            self.k = k

        def norm(self):
            return self.k * 10
    p = hvd.broadcast_object(Point(r), root_rank=root, name="point")
    assert p.norm() == root * 10


def test_allgather_object_gathers_lambdas():
    r, n = ranks()
    fs = hvd.allgather_object(make_scaler(r))
    assert [f(2.0) for f in fs] == [2.0 * (k + 1) + 0.5 for k in range(n)]
    both = hvd.allgather_object({"rank": r, "f": lambda: r * r}, name="dicts")
    assert [(d["rank"], d["f"]()) for d in both] == [(k, k * k) for k in range(n)]


def test_allgather_object_in_a_process_set():
    r, n = ranks()
    members = list(range(1, n))
    ps = hvd.add_process_set(members)
    try:
        if r in members:
            got = hvd.allgather_object(make_scaler(r), process_set=ps)
            assert [f(1.0) for f in got] == [1.0 * (k + 1) + 0.5 for k in members]
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)


def horovod_placement(hosts):
    """Per rank, (local_rank, local_size, cross_rank, cross_size) for a job
    whose rank k runs on hosts[k], written out as Horovod's hosts.py does,
    and is_homogeneous."""
    local_rank, local_size = [], []
    for k, h in enumerate(hosts):
        local_rank.append(hosts[:k].count(h))
        local_size.append(hosts.count(h))
    cross = {}  # local rank -> hosts having a rank with it, in rank order
    for k, h in enumerate(hosts):
        cross.setdefault(local_rank[k], []).append(h)
    out = [(local_rank[k], local_size[k], cross[local_rank[k]].index(h), len(cross[local_rank[k]]))
           for k, h in enumerate(hosts)]
    return out, len(set(local_size[k] for k in range(len(hosts)))) == 1


def test_topology_on_one_host():
    r, n = ranks()
    got = (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    assert got == horovod_placement(["h"] * n)[0][r]
    assert hvd.is_homogeneous()


TOPOLOGY_SCRIPT = """
import json
import weft.torch as hvd
hvd.init()
print("TOPOLOGY " + json.dumps([hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
                                hvd.cross_size(), hvd.is_homogeneous()]), flush=True)
hvd.shutdown()
"""


def run_fake_hosts(hosts):
    """Runs TOPOLOGY_SCRIPT as a job whose rank k reports host hosts[k]
    (weftrun's own one-host placement dropped, so the rendezvous computes
    it); returns the per-rank lists it printed."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("WEFT_", "HOROVOD_")) and k not in ("WEFT_TEST_WEFTRUN",):
            del env[k]
    env["FAKE_HOSTS"] = " ".join(hosts)
    shell = ('set -- $FAKE_HOSTS; shift "$WEFT_RANK"; WEFT_HOSTNAME=$1; export WEFT_HOSTNAME; '
             'unset WEFT_LOCAL_RANK WEFT_LOCAL_SIZE WEFT_CROSS_RANK WEFT_CROSS_SIZE '
             'HOROVOD_LOCAL_RANK HOROVOD_LOCAL_SIZE HOROVOD_CROSS_RANK HOROVOD_CROSS_SIZE; exec "$0" -c "$PY_SCRIPT"')
    env["PY_SCRIPT"] = textwrap.dedent(TOPOLOGY_SCRIPT)
    proc = subprocess.run([weftrun_path(), "-np", str(len(hosts)), "--timeout", "50", "sh", "-c", shell,
                           sys.executable], env=env, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    got = {}
    for m in re.finditer(r"TOPOLOGY (\[.*\])", out):
        row = json.loads(m.group(1))
        got[row[0]] = row[1:]
    assert sorted(got) == list(range(len(hosts))), out
    return [got[k] for k in range(len(hosts))]


@pytest.mark.parametrize("hosts", [["hB", "hA", "hB"], ["hA", "hB"]], ids=["uneven_2_1", "even_1_1"])
def test_topology_on_fake_hosts(hosts):
    """Only rank 0 runs the nested job; the others wait at the barrier."""
    r, _ = ranks()
    if r != 0:
        return
    placement, homogeneous = horovod_placement(hosts)
    got = run_fake_hosts(hosts)
    for k, row in enumerate(got):
        assert tuple(row[:4]) == placement[k], (hosts, k, row, placement[k])
        assert row[4] is homogeneous, (hosts, k, row)


def test_pickle_fallback_without_cloudpickle(monkeypatch):
    """Without cloudpickle installed, objects still travel through pickle."""
    from weft.torch import functions
    monkeypatch.setattr(functions, "_cloudpickle", None)
    r, n = ranks()
    assert hvd.allgather_object({"r": r}) == [{"r": k} for k in range(n)]
    assert hvd.broadcast_object(("x", r), root_rank=0) == ("x", 0)
