"""weft.torch: a drop-in replacement for horovod.torch on CPU tensors.

    import weft.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Launch with `weftrun -np N python3 train.py`. Beyond Horovod: bfloat16
tensors, errors that carry the real cause (which tensor, which ranks, which
values) on every rank, and a pure-C extension that never needs rebuilding for
a new torch. Process sets (add_process_set), join and timelines map to weft's
groups, join and timeline; send/recv/isend/irecv follow torch.distributed. Elastic training
(hvd.elastic: run, TorchState, ObjectState, ElasticSampler) runs under `weftrun --min-np`; the world can shrink on
failures but not grow yet (no host discovery).
"""

from .compression import Compression
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import (Adasum, Average, HorovodInternalError, Max, Min, Product, ProcessSet, Sum, add_process_set,
                      allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall,
                      alltoall_async, barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, ccl_built,
                      cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
                      grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                      grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                      grouped_reducescatter_async, init, is_homogeneous, is_initialized, join, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll, rank,
                      reducescatter, reducescatter_async, remove_process_set, rocm_built, shutdown, size,
                      sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from .optimizer import DistributedOptimizer
from .p2p import Work, irecv, isend, recv, send
from .sync_batch_norm import SyncBatchNorm
from .._core import WeftError
from . import elastic
from .elastic import HostsUpdatedInterrupt

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "HorovodInternalError", "Max", "Min", "Product",
    "HostsUpdatedInterrupt", "ProcessSet", "Sum", "SyncBatchNorm", "WeftError", "add_process_set", "allgather", "allgather_async",
    "allgather_object", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "ccl_built", "elastic", "cross_rank",
    "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "global_process_set",
    "grouped_allgather", "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
    "init", "is_homogeneous", "is_initialized", "join", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "poll", "rank", "reducescatter", "reducescatter_async",
    "remove_process_set", "rocm_built", "shutdown", "size", "sparse_allreduce_async", "start_timeline",
    "stop_timeline", "synchronize",
    # beyond Horovod: torch.distributed-style point-to-point (p2p.py)
    "Work", "irecv", "isend", "recv", "send",
]
