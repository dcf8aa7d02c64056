"""hvd.elastic's pieces without a failure (the recovery itself under
weftrun --min-np is tests/elastic_torch.py): Horovod's names, ElasticSampler's
sharding, commit/restore/sync of TorchState and ObjectState, and run()'s
decisions (restore + re-form on a world failure in elastic mode, re-form
without restore on HostsUpdatedInterrupt, re-raise otherwise)."""

import random

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402
from weft.torch import elastic  # noqa: E402


def setup_module():
    hvd.init()


def test_names():
    assert hvd.elastic is elastic
    assert hvd.elastic.HorovodInternalError is hvd.HorovodInternalError is hvd.WeftError
    assert hvd.HostsUpdatedInterrupt is elastic.HostsUpdatedInterrupt
    assert issubclass(hvd.HostsUpdatedInterrupt, RuntimeError)
    assert hvd.HostsUpdatedInterrupt(True).skip_sync is True
    for name in ("run", "State", "ObjectState", "TorchState", "ElasticSampler"):
        assert hasattr(hvd.elastic, name)


def _shard(order, processed, r, n):
    rem = order[processed:]
    per = -(-len(rem) // n)
    padded = rem + rem[:per * n - len(rem)]
    return padded[r::n]


def test_sampler_shards_and_reshards():
    r, n = ranks()
    s = hvd.elastic.ElasticSampler(list(range(11)), shuffle=False)
    assert list(s) == _shard(list(range(11)), 0, r, n) and len(s) == -(-11 // n)
    s.record_batch(0, 2)  # every rank did 2: 2n processed
    s.load_state_dict(s.state_dict())
    assert s.state_dict() == {"epoch": 0, "processed_num": 2 * n}
    assert list(s) == _shard(list(range(11)), 2 * n, r, n)
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "processed_num": 0}
    shuffled = hvd.elastic.ElasticSampler(list(range(11)), shuffle=True, seed=5)
    shuffled.set_epoch(2)
    order = list(range(11))
    random.Random(7).shuffle(order)
    assert list(shuffled) == _shard(order, 0, r, n)
    assert set().union(*hvd.allgather_object(set(shuffled))) == set(range(11))


def _state(r):
    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        model.weight.fill_(r + 1.0)
        model.bias.fill_(-r - 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.full((2, 3), r + 1.0, dtype=torch.float64)).sum().backward()
    opt.step()  # a momentum buffer
    sampler = hvd.elastic.ElasticSampler(list(range(8)), shuffle=False)
    return hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=r, history=[r])


def test_torch_state_commit_restore():
    r, _ = ranks()
    state = _state(r)
    state.commit()
    assert state.check_host_updates() is False
    w = state.model.weight.detach().clone()
    buf = state.optimizer.state_dict()["state"][0]["momentum_buffer"].clone()
    with torch.no_grad():
        state.model.weight.add_(5.0)
    state.optimizer.step()
    state.epoch += 10
    state.history.append(99)  # mutated in place: the commit must not alias it
    state.sampler.record_batch(0, 1)
    state.restore()
    assert torch.equal(state.model.weight.detach(), w)
    assert torch.equal(state.optimizer.state_dict()["state"][0]["momentum_buffer"], buf)
    assert state.epoch == r and state.history == [r]
    assert state.sampler.state_dict()["processed_num"] == 0


def test_torch_state_sync_from_rank0():
    r, _ = ranks()
    state = _state(r)
    state.sampler.record_batch(0, r + 1)
    state.sync()
    ref = _state(0)
    ref.sampler.record_batch(0, 1)
    assert torch.equal(state.model.weight.detach(), ref.model.weight.detach())
    assert torch.equal(state.model.bias.detach(), ref.model.bias.detach())
    assert torch.equal(state.optimizer.state_dict()["state"][0]["momentum_buffer"],
                       ref.optimizer.state_dict()["state"][0]["momentum_buffer"])
    assert state.epoch == 0 and state.history == [0]
    assert state.sampler.state_dict() == ref.sampler.state_dict()


def test_object_state():
    r, _ = ranks()
    state = hvd.elastic.ObjectState(step=r, name="r%d" % r)
    state.sync()
    assert (state.step, state.name) == (0, "r0")
    state.step = 7
    state.commit()
    state.step = 8
    state.restore()
    assert state.step == 7


def _failure(status_name):
    e = hvd.HorovodInternalError("a test's %s" % status_name)
    e.status_name = status_name
    return e


def test_run_recovers_from_world_failure_in_elastic_mode(monkeypatch):
    r, n = ranks()
    resets = []
    monkeypatch.setenv("WEFT_ELASTIC_ADDR", "test")  # elastic mode, as weftrun --min-np sets it
    monkeypatch.setattr(elastic, "_reset", lambda: resets.append("reset"))
    state = hvd.elastic.ObjectState(step=0)
    state.register_reset_callbacks([lambda: resets.append("callback")])
    calls = []

    @hvd.elastic.run
    def train(state, failure):
        calls.append(state.step)
        state.step = 5  # never committed: restored away
        if len(calls) == 1:
            raise _failure(failure)
        return "done"

    assert train(state, "WEFT_ERR_PEER_LOST") == "done"
    assert calls == [0, 0] and resets == ["reset", "callback"]
    # an error a new world would repeat is raised as it is, nothing restored
    del calls[:], resets[:]
    state.step = 0
    with pytest.raises(hvd.HorovodInternalError, match="WEFT_ERR_MISMATCH"):
        train(state, "WEFT_ERR_MISMATCH")
    assert calls == [0] and resets == [] and state.step == 5


def test_run_reraises_outside_elastic_mode(monkeypatch):
    monkeypatch.delenv("WEFT_ELASTIC_ADDR", raising=False)
    monkeypatch.setattr(elastic, "_reset", lambda: pytest.fail("re-formed outside elastic mode"))

    @hvd.elastic.run
    def train(state):
        raise _failure("WEFT_ERR_PEER_LOST")

    with pytest.raises(hvd.HorovodInternalError, match="PEER_LOST"):
        train(hvd.elastic.ObjectState(step=0))


def test_run_hosts_updated_keeps_state_and_reinits():
    r, n = ranks()
    state = hvd.elastic.ObjectState(step=r)  # synced to 0 on the first call
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        state.step += 1  # kept: no restore on a host update
        if len(calls) == 1:
            raise hvd.HostsUpdatedInterrupt(skip_sync=True)  # no sync: the uncommitted step is kept
        return hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()

    # the real _reset: shutdown() + init() (outside elastic mode the same world again)
    assert train(state) == n * (n - 1) / 2
    assert calls == [0, 1] and resets == [n] and hvd.rank() == r


def test_reset_reshards_samplers_without_sync():
    r, n = ranks()
    sampler = hvd.elastic.ElasticSampler(list(range(9)), shuffle=False)
    state = hvd.elastic.TorchState(sampler=sampler)
    sampler.num_replicas, sampler.rank = 99, 98  # as left by a world of another size
    state.on_reset()  # what run() does after re-forming, before any sync
    assert (sampler.num_replicas, sampler.rank) == (n, r)
    assert list(sampler) == _shard(list(range(9)), 0, r, n)
