"""Helpers to start every rank from the same state: broadcast a model's
parameters, an optimizer's state, or any picklable object; gather one object
from every rank."""

import io
import pickle

import torch

from .mpi_ops import _allgather_async, _broadcast_async, _resolve_set, global_process_set, op_name, rank, size


def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Overwrites the given tensors in place with root_rank's: a state_dict
    (model.state_dict()) or a sequence of (name, tensor) pairs
    (model.named_parameters()). All broadcasts are started, then awaited."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in items):
            raise ValueError("broadcast_parameters: expected a state_dict or (name, tensor) pairs")
    requests = []
    for name, p in items:
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError("broadcast_parameters: '%s' is a %s, not a tensor" % (name, type(p).__name__))
        requests.append(_broadcast_async(p.data if isinstance(p, torch.nn.Parameter) else p, True, root_rank,
                                         name, process_set, "broadcast_parameters"))
    for r in requests:
        r.synchronize()


def _to_bytes_tensor(obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _from_bytes_tensor(t):
    return pickle.load(io.BytesIO(t.numpy().tobytes()))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's obj (pickled, sent as a uint8 tensor), on every rank.
    Other ranks' obj is ignored (None is fine)."""
    base = op_name("broadcast_object", name, _resolve_set(process_set, "broadcast_object")[0])
    if rank() == root_rank:
        payload = _to_bytes_tensor(obj)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        length = torch.zeros(1, dtype=torch.int64)
    _broadcast_async(length, True, root_rank, base + ".sz", process_set,
                     "broadcast_object", prefix=None).synchronize()
    if payload is None:
        payload = torch.empty(int(length[0]), dtype=torch.uint8)
    _broadcast_async(payload, True, root_rank, base + ".t", process_set,
                     "broadcast_object", prefix=None).synchronize()
    return _from_bytes_tensor(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's obj (picklable), in rank order."""
    base = op_name("allgather_object", name, _resolve_set(process_set, "allgather_object")[0])
    payload = _to_bytes_tensor(obj)
    length = torch.tensor([payload.numel()], dtype=torch.int64)
    sizes = _allgather_async(length, base + ".sz", process_set, "allgather_object", prefix=None).synchronize()
    data = _allgather_async(payload, base + ".t", process_set, "allgather_object", prefix=None).synchronize()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(_from_bytes_tensor(data[offset:offset + n]))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank=0, process_set=global_process_set):
    """Makes every rank's optimizer state (buffers such as momentum, step
    counts, and the hyperparameters of each parameter group) equal to
    root_rank's."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS is not supported")
    if size() == 1:
        return
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None, root_rank,
                             name="optimizer_state", process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)
