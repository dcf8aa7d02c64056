"""hvd.elastic shrinking under the real launcher: `weftrun -np 3 --min-np 2
--max-np 3 --host-discovery-script 'cat FILE'` runs this script with FILE
holding localhost:3 (python/CMakeLists.txt, py.elastic_shrink.np3; FILE is
WEFT_TEST_HOSTS_FILE). The problem of elastic_ref.py.

After step SHRINK_AT rank 0 rewrites FILE to localhost:2 and waits (at most
60 s) until weftrun reports that a member is removed
(weft._weft.elastic_hosts_updated() == HOSTS_REMOVED, exactly), so the
removal happens at that commit whatever the timing: state.commit() raises
HostsUpdatedInterrupt(skip_sync=True) on every rank, @hvd.elastic.run
re-forms without restoring and without syncing (Horovod's behaviour when
hosts were only removed), and weftrun stops worker 2 (the highest id).

Checked on workers 0 and 1: the world is 2 at the end; the interrupt said
skip_sync; the state was synced once only (at the start); the reset
callback ran once (with size 2); training went on from step SHRINK_AT; the
final parameters equal a reference computed here without weft (SHRINK_AT
steps on 3 ranks, the rest on 2, momentum carried on). Worker 2 never gets
past the re-formation (weftrun's test checks the job's exit status: 0)."""

import os
import time

import torch

import weft.torch as hvd
import elastic_ref
from weft import _weft

SHRINK_AT = 12


def shrink(hosts_file):
    """Rank 0: fewer slots for discovery, then wait for weftrun's removal."""
    with open(hosts_file + ".tmp", "w") as f:
        f.write("localhost:2\n")
    os.rename(hosts_file + ".tmp", hosts_file)
    until = time.monotonic() + 60
    while True:
        update = _weft.elastic_hosts_updated()
        if update:
            assert update == _weft.HOSTS_REMOVED, "weftrun reported update %d, expected only removed" % update
            return
        assert time.monotonic() < until, "weftrun reported no removal within 60 s"
        time.sleep(0.05)


def main():
    hosts_file = os.environ["WEFT_TEST_HOSTS_FILE"]
    worker = int(os.environ["WEFT_ELASTIC_ID"])
    hvd.init()
    assert hvd.size() == 3 and _weft.generation() == 1, "worker %d: generation %d of size %d" % (
        worker, _weft.generation(), hvd.size())
    model, optimizer, state = elastic_ref.setup(hvd, worker)
    resets, started, syncs, interrupts = [], [], [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    real_sync, real_check = state.sync, state.check_host_updates

    def sync():
        syncs.append(hvd.size())
        real_sync()

    def check_host_updates():
        try:
            return real_check()
        except hvd.HostsUpdatedInterrupt as e:
            interrupts.append(e.skip_sync)
            raise
    state.sync, state.check_host_updates = sync, check_host_updates

    @hvd.elastic.run
    def train(state):
        started.append(state.steps)
        def after(steps):
            if steps == SHRINK_AT and hvd.size() == 3 and hvd.rank() == 0:
                shrink(hosts_file)
        elastic_ref.epochs(state, model, optimizer, after=after)

    train(state)
    assert worker < 2, "worker 2 went on after its removal"
    want, want_steps = elastic_ref.reference(lambda s: 3 if s < SHRINK_AT else 2)
    got = model.weight.detach()[0]
    assert hvd.size() == 2 and _weft.generation() == 2, "the world did not shrink: generation %d of size %d" % (
        _weft.generation(), hvd.size())
    assert interrupts == [True], "interrupts (their skip_sync) %r, expected [True]" % interrupts
    assert syncs == [3], "syncs (at sizes) %r: the re-formation after a removal must not sync" % syncs
    assert resets == [2] and started == [0, SHRINK_AT], "resets %r, starts %r" % (resets, started)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), \
        "worker %d: final weights %r after %d steps, reference %r after %d" % (
            worker, got.tolist(), state.steps, want.tolist(), want_steps)
    assert state.steps == want_steps, "steps %d, expected %d" % (state.steps, want_steps)
    print("worker %d (rank %d): OK after %d steps on a world shrunk to 2, weights %s" % (
        worker, hvd.rank(), state.steps, got.tolist()))


if __name__ == "__main__":
    main()
