"""hvd.elastic growth under the real launcher: `weftrun -np 2 --min-np 2
--max-np 3 --host-discovery-script 'cat FILE'` runs this script with FILE
holding localhost:2 (python/CMakeLists.txt, py.elastic_grow.np3; FILE is
WEFT_TEST_HOSTS_FILE). The model of elastic_torch.py: a linear model in
float64, DistributedOptimizer (SGD with momentum), an ElasticSampler over
integer-valued data, a commit every COMMIT steps.

After step GROW_AT rank 0 rewrites FILE to localhost:3 and waits (at most
60 s) until weftrun reports the new worker waiting to join
(weft._weft.elastic_hosts_updated), so the growth happens at that commit
whatever the timing: its state.commit() raises HostsUpdatedInterrupt on both
ranks (check_host_updates), @hvd.elastic.run re-forms a world of 3 without
restoring, and the new worker (weftrun's worker 2) gets the model, the
momentum, the sampler's place in the epoch and the step count by the sync.

Checked on every rank: the world is 3 at the end; the members' reset
callback ran once (with size 3); the new worker started at step GROW_AT;
the final parameters equal a reference computed here without weft (GROW_AT
steps on 2 ranks, the rest of the epoch and a second epoch on 3, momentum
carried on: nothing was restored)."""

import os
import time

import torch

import weft.torch as hvd
import elastic_ref
from weft import _weft

GROW_AT = 12


def reference():
    """The expected final weights and step count, without weft."""
    return elastic_ref.reference(lambda s: 2 if s < GROW_AT else 3)


def grow(hosts_file):
    """Rank 0: more slots for discovery, then wait for the new worker."""
    with open(hosts_file + ".tmp", "w") as f:
        f.write("localhost:3\n")
    os.rename(hosts_file + ".tmp", hosts_file)
    until = time.monotonic() + 60
    while not _weft.elastic_hosts_updated():
        assert time.monotonic() < until, "weftrun reported no new worker within 60 s"
        time.sleep(0.05)


def main():
    hosts_file = os.environ["WEFT_TEST_HOSTS_FILE"]
    worker = int(os.environ["WEFT_ELASTIC_ID"])
    hvd.init()
    joined = _weft.generation()
    assert (worker < 2 and joined == 1 and hvd.size() == 2) or (worker == 2 and joined == 2 and hvd.size() == 3), \
        "worker %d: generation %d of size %d" % (worker, joined, hvd.size())
    model, optimizer, state = elastic_ref.setup(hvd, worker)
    resets, started = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        started.append(state.steps)
        def after(steps):
            if steps == GROW_AT and hvd.size() == 2 and hvd.rank() == 0:
                grow(hosts_file)
        elastic_ref.epochs(state, model, optimizer, after=after)

    train(state)
    want, want_steps = reference()
    got = model.weight.detach()[0]
    assert hvd.size() == 3, "the world did not grow: size %d" % hvd.size()
    if worker < 2:
        assert resets == [3] and started == [0, GROW_AT], "resets %r, starts %r" % (resets, started)
    else:
        assert resets == [] and started == [GROW_AT], "new worker: resets %r, starts %r" % (resets, started)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), \
        "worker %d: final weights %r after %d steps, reference %r after %d" % (
            worker, got.tolist(), state.steps, want.tolist(), want_steps)
    assert state.steps == want_steps, "steps %d, expected %d" % (state.steps, want_steps)
    print("worker %d (rank %d, joined in generation %d): OK after %d steps, weights %s" % (
        worker, hvd.rank(), joined, state.steps, got.tolist()))


if __name__ == "__main__":
    main()
