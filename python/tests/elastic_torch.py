"""hvd.elastic under the real launcher: `weftrun -np 3 --min-np 2` runs this
script (python/CMakeLists.txt, py.elastic_torch.np3). A linear model in
float64, trained with DistributedOptimizer (SGD with momentum) on an
ElasticSampler over integer-valued data, commits every COMMIT steps. The
rank 2 of the first world SIGKILLs itself before its step DIE_AT + 1; the
two survivors get HorovodInternalError, @hvd.elastic.run restores the commit
of step 8, re-forms a world of 2, runs the reset callback, syncs and goes on
to the end of the second epoch. Every rank starts from different
parameters: only the initial sync makes them rank 0's.

Checked on the survivors: the world shrank to 2, the reset callback ran
once, the step count is the committed 8 plus the 2-rank steps, and the final
parameters equal a reference computed here without weft (plain torch
arithmetic: 8 steps on 3 ranks from the shuffled epoch order, then the
rest of the epoch and a second epoch on 2 ranks, momentum restarted from the
commit; step 9, never committed, is not in it)."""

import os
import signal
import sys

import torch

import weft.torch as hvd
import elastic_ref

DIE_AT = 9


def reference():
    """The expected final weights and step count, without weft."""
    return elastic_ref.reference(lambda s: 3 if s < DIE_AT - 1 else 2)  # the last commit before the death: step 8


def main():
    hvd.init()
    assert hvd.size() == 3, "run with weftrun -np 3 --min-np 2"
    first_rank = hvd.rank()
    model, optimizer, state = elastic_ref.setup(hvd, hvd.rank())
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        def die(steps):
            if first_rank == 2 and steps == DIE_AT:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
        elastic_ref.epochs(state, model, optimizer, before=die)

    train(state)
    want, want_steps = reference()
    got = model.weight.detach()[0]
    assert hvd.size() == 2, "the world did not shrink: size %d" % hvd.size()
    assert resets == [2], "reset callbacks ran with sizes %r, expected [2]" % (resets,)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), \
        "rank %d: final weights %r after %d steps, reference %r after %d" % (
            hvd.rank(), got.tolist(), state.steps, want.tolist(), want_steps)
    assert state.steps == want_steps, "steps %d, expected %d" % (state.steps, want_steps)
    print("rank %d (first world: %d): OK after %d steps, weights %s" % (hvd.rank(), first_rank, state.steps,
                                                                        got.tolist()))


if __name__ == "__main__":
    main()
