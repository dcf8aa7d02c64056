"""weft.torch.elastic (also hvd.elastic): Horovod's elastic API on weft's
elastic mode (`weftrun -np N --min-np M ...`, docs/design.md section 10).

    @hvd.elastic.run
    def train(state):
        ...                       # train; state.commit() every few steps

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    train(state)

When the world fails (a rank died or hung: a weft operation raises
HorovodInternalError, i.e. WeftError with a world-failure status), run()
restores the last commit on every survivor, re-forms the world
(shutdown() + init(): weftrun hands out the next, smaller generation), runs
the reset callbacks, broadcasts the state from the new rank 0 and calls the
function again. Errors every rank sees alike and that a new world would
repeat (WEFT_ERR_MISMATCH, WEFT_ERR_CANCELLED, ...) and any failure outside
elastic mode are raised as they are.

Growth (`weftrun --host-discovery-script ...`): weftrun starts new workers
on discovered slots; at the next commit() (or check_host_updates()) rank 0
asks weftrun whether workers wait to join and broadcasts the answer, every
rank raises HostsUpdatedInterrupt, and run() re-forms the world with them
(without restoring: the commit was just made), then syncs the state from
rank 0, which is how the new workers get it. When discovery lists fewer
slots, weftrun removes workers (highest ids first, never below --min-np):
at the next commit() every rank raises HostsUpdatedInterrupt(skip_sync=True)
(only removed), run() re-forms without them, restoring and syncing nothing,
and weftrun stops the removed ones.
"""

import copy
import functools
import math
import os
import random

import torch

from .. import _weft
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import HorovodInternalError, init, rank, shutdown, size

__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState", "State",
           "TorchState", "run"]

# weft statuses that mean the world itself failed: recovered from by re-forming it
_WORLD_FAILURES = frozenset(("WEFT_ERR_PEER_LOST", "WEFT_ERR_TIMEOUT", "WEFT_ERR_ABORTED", "WEFT_ERR_SHUTDOWN",
                             "WEFT_ERR_SYSTEM", "WEFT_ERR_PROTOCOL", "WEFT_ERR_AUTH"))


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts changed: run() re-forms the world without restoring
    the last commit (Horovod's horovod.common.exceptions.HostsUpdatedInterrupt;
    skip_sync: the state is not broadcast after the re-formation; as in
    Horovod, set when hosts were only removed). State.check_host_updates()
    raises it on every rank at the same commit."""

    def __init__(self, skip_sync=False):
        super(HostsUpdatedInterrupt, self).__init__("hosts updated" + (" (skip sync)" if skip_sync else ""))
        self.skip_sync = skip_sync


def _elastic_mode():
    return bool(os.environ.get("WEFT_ELASTIC_ADDR"))


def _recoverable(exc):
    return _elastic_mode() and getattr(exc, "status_name", None) in _WORLD_FAILURES


class State(object):
    """In-memory training state kept across re-formations (Horovod's
    horovod.common.elastic.State): commit() saves it, restore() returns to
    the last commit, sync() broadcasts it from rank 0."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order) after each re-formation, before the
        state is synchronized: e.g. to rescale the learning rate to size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (in host memory) and checks for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when weftrun reports
        that the membership changed since this world was formed (host
        discovery started workers that wait to join, or removed members;
        skip_sync when only removed): rank 0 asks weftrun
        (weft_elastic_hosts_updated) and broadcasts the answer, so all ranks
        raise at the same call, as Horovod's (which broadcasts its
        notifications' timestamps from rank 0). A collective: every rank
        calls it (commit() does). Without weftrun's host discovery
        (WEFT_ELASTIC_GROWTH unset: no worker can join) and outside elastic
        mode there is never an update, and nothing is communicated. Returns
        False otherwise."""
        if not _elastic_mode() or os.environ.get("WEFT_ELASTIC_GROWTH") != "1":
            return False
        update = _weft.elastic_hosts_updated() if self._rank() == 0 else 0
        update = self._bcast_object(update)
        if update:
            raise HostsUpdatedInterrupt(skip_sync=(update == _weft.HOSTS_REMOVED))
        return False

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a re-formation, before the reset callbacks and sync."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and exposed
    as attributes (Horovod's ObjectState; picklable values, broadcast with
    broadcast_object)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset's indices across the current ranks and re-shards
    what is left of the epoch after a re-formation (Horovod's ElasticSampler):
    record_batch() after each batch, set_epoch() at the end of each epoch,
    and keep the sampler in the TorchState. Indices are shuffled with
    random.Random(seed + epoch) when shuffle; the remaining ones are padded
    (wrapping) to a multiple of size() and rank r takes every size()-th."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch (call it at the end of the previous one): nothing of
        it is processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed a batch of batch_size samples."""
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        self.num_replicas = size()
        self.rank = rank()
        all_indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(all_indices)
        self.remaining_indices = all_indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        self.indices = self.remaining_indices[:]
        self.indices += self.indices[:(self.total_size - len(self.indices))]
        self.indices = self.indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


class _Handler(object):
    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)
        # a weft DistributedOptimizer: gradients in flight in the failed world are gone
        if isinstance(getattr(self.value, "_handles", None), dict):
            self.value._handles.clear()
            self.value._synchronized = False

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _LRSchedulerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


_LR_SCHEDULER = getattr(torch.optim.lr_scheduler, "LRScheduler", None) or torch.optim.lr_scheduler._LRScheduler
_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (_LR_SCHEDULER, _LRSchedulerHandler), (ElasticSampler, _SamplerHandler)]


class TorchState(ObjectState):
    """The state of a PyTorch training process (Horovod's TorchState):
    models, optimizers, LR schedulers and ElasticSamplers (any keyword)
    are saved as deep copies of their state_dict at commit() and broadcast
    from rank 0 at sync() (broadcast_parameters, broadcast_optimizer_state);
    every other keyword is a picklable attribute (ObjectState)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            cls = next((h for t, h in _HANDLERS if isinstance(v, t)), None)
            if cls is None:
                rest[k] = v
            else:
                handlers[k] = cls(v)
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **rest)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super(TorchState, self).sync()

    def reset(self):
        # samplers re-shard over the new world even when sync is skipped
        for handler in self._handlers.values():
            if isinstance(handler, _SamplerHandler):
                handler.value.reset()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super(TorchState, self).__setattr__(name, value)


def _reset():
    shutdown()
    init()


def run(func):
    """Decorator of the training function func(state, ...) (Horovod's
    hvd.elastic.run): syncs the state from rank 0, then calls func. On a
    world failure (HorovodInternalError with a world-failure status, in
    elastic mode) every survivor restores the last commit; on
    HostsUpdatedInterrupt the state is kept. Either way the world is
    re-formed (shutdown() + init()), the reset callbacks run, the state is
    synced again (unless the interrupt's skip_sync) and func is called
    again. A re-formation weftrun refuses (fewer than --min-np ranks left,
    --reset-limit reached) raises init()'s error."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if not _recoverable(e):
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _reset()
            state.on_reset()
    return wrapper
