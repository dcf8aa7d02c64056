"""Helpers to start every rank from the same state, as Horovod 0.28's
horovod/torch/functions.py: broadcast a model's parameters, an optimizer's
state, or any object (pickled with cloudpickle when it is installed, as
Horovod does, so lambdas and locally defined classes travel; plain pickle
otherwise); gather one object from every rank."""

import io
import pickle

import torch

from .mpi_ops import _allgather_async, _broadcast_async, _resolve_set, global_process_set, op_name, rank

try:
    import cloudpickle as _cloudpickle
except ImportError:  # Debian: python3-cloudpickle
    _cloudpickle = None


def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Overwrites the given tensors in place with root_rank's: a state_dict
    (model.state_dict(), buffers included), (name, tensor) pairs
    (model.named_parameters()), or a list of tensors (list(model.parameters());
    these get generated names, so every rank must list them in the same
    order). All broadcasts are started, then awaited."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
        if any(len(item) != 2 for item in items):
            raise ValueError("broadcast_parameters: expected a state_dict, (name, tensor) pairs or a list of tensors")
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
    dumps = _cloudpickle.dumps if _cloudpickle is not None else pickle.dumps
    data = dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _from_bytes_tensor(t):
    return pickle.load(io.BytesIO(t.numpy().tobytes()))  # cloudpickle's output is standard pickle data


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


def _base_step(optimizer):
    """The wrapped optimizer's step, without a DistributedOptimizer's
    allreduce (which would need every rank)."""
    base = getattr(optimizer, "_weft_base", None)
    if base is not None:
        return base.step(optimizer)
    return optimizer.step()


def _initialise_state(optimizer):
    """Horovod's initialisation of a fresh optimizer's state: zero gradients
    for the parameters that require one, then one step. Unlike Horovod,
    the parameters and gradients are put back as they were afterwards (that
    step moves parameters where weight decay applies)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    try:
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
        _base_step(optimizer)
    finally:
        with torch.no_grad():
            for p, value, grad in saved:
                p.copy_(value)
                p.grad = grad


class _TensorSlot(object):
    """Where a tensor was in a pickled structure: its index among the
    tensors sent separately, its dtype, shape and device type ('cpu',
    'cuda': the receivers place it on their own device of that type)."""

    def __init__(self, index, dtype, shape, device_type="cpu"):
        self.index, self.dtype, self.shape, self.device_type = index, dtype, shape, device_type


def _map_structure(obj, fn):
    """obj (dicts, lists, tuples, namedtuples) with fn applied to each leaf."""
    if isinstance(obj, dict):
        return type(obj)((k, _map_structure(v, fn)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_map_structure(v, fn) for v in obj]
    if isinstance(obj, tuple):
        items = [_map_structure(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return fn(obj)


def _split_tensors(obj, tensors):
    """obj with each tensor replaced by a _TensorSlot; the tensors appended to `tensors`."""
    def leaf(x):
        if isinstance(x, torch.Tensor):
            tensors.append(x)
            return _TensorSlot(len(tensors) - 1, x.dtype, tuple(x.shape), x.device.type)
        return x
    return _map_structure(obj, leaf)


def _slots(obj):
    found = []

    def leaf(x):
        if isinstance(x, _TensorSlot):
            found.append(x)
        return x
    _map_structure(obj, leaf)
    return found


def _join_tensors(obj, tensors):
    return _map_structure(obj, lambda x: tensors[x.index] if isinstance(x, _TensorSlot) else x)


def _cuda_device(optimizer):
    """Where this rank receives the root's CUDA state: the device of its
    optimizer's first CUDA parameter, else the current CUDA device."""
    for g in optimizer.param_groups:
        for p in g["params"]:
            if p.device.type == "cuda":
                return p.device
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"


def broadcast_optimizer_state(optimizer, root_rank=0, model=None, process_set=global_process_set):
    """Makes every rank's optimizer.state_dict() equal to root_rank's: the
    per-parameter state (momentum buffers, step counts, ...) and every
    parameter group's hyperparameters (tensor-valued ones such as a tensor
    lr, and flags such as capturable, foreach, fused, differentiable).
    Tensors are broadcast as they are (dtype, shape); the rest (the
    structure, numbers, flags) is pickled once. The optimizer may be a
    DistributedOptimizer (initialised without an allreduce).

    A root optimizer without state yet is first initialised as Horovod does
    (zero gradients for the parameters that require one, then one step of
    the wrapped optimizer), so a fresh optimizer's state is Horovod's; weft
    then puts the parameters and their gradients back as they were (Horovod
    leaves zero gradients and, with weight decay, moved parameters). model
    is accepted as in Horovod and not needed. torch.optim.LBFGS is not
    supported (as in Horovod)."""
    del model  # Horovod's argument; weft restores what the initialisation touched without it
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS is not supported (as in Horovod)")
    group, _, set_size = _resolve_set(process_set, "broadcast_optimizer_state")
    is_root = rank() == root_rank
    if is_root and not optimizer.state_dict()["state"]:
        _initialise_state(optimizer)
    if set_size == 1:
        return
    tensors = []
    skeleton = _split_tensors(optimizer.state_dict(), tensors) if is_root else None
    base = op_name("broadcast_optimizer_state", None, group)
    skeleton = broadcast_object(skeleton, root_rank, name=base + ".skeleton", process_set=process_set)
    if not is_root:
        slots = _slots(skeleton)
        tensors = [None] * len(slots)
        cuda = _cuda_device(optimizer)
        for slot in slots:
            tensors[slot.index] = torch.empty(slot.shape, dtype=slot.dtype,
                                              device=cuda if slot.device_type == "cuda" else "cpu")
    requests = []
    for i, t in enumerate(tensors):
        t = t.detach()
        requests.append(_broadcast_async(torch.view_as_real(t) if t.is_complex() else t, True, root_rank,
                                         "%s.%d" % (base, i), process_set, "broadcast_optimizer_state",
                                         prefix=None))
    for r in requests:
        r.synchronize()
    if not is_root:
        optimizer.load_state_dict(_join_tensors(skeleton, tensors))
