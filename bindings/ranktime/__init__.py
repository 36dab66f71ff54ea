"""ranktime: Horovod-style collectives (allreduce, allgather, broadcast, reducescatter, alltoall,
and grouped forms) with a distributed timeline, for NumPy arrays and PyTorch tensors.

    import ranktime
    ranktime.init()
    total = ranktime.allreduce(x, op=ranktime.Sum)

Run under ``ranktime run -np N python3 script.py`` (or mpirun). See docs/python.md.
"""

import atexit as _atexit

from . import _collectives, _core
from ._collectives import (Handle, allgather, allgather_async, allreduce, allreduce_,
                           allreduce_async, allreduce_async_, alltoall, alltoall_async, broadcast,
                           broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                           grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                           grouped_allreduce_async, grouped_allreduce_async_,
                           grouped_reducescatter, grouped_reducescatter_async, poll,
                           reducescatter, reducescatter_async, synchronize)
from ._core import (Average, InvalidArgumentError, Max, Min, NameInFlightError, Product,
                    RankLateness, RanktimeError, ReduceOp, Sum, cross_rank, cross_size,
                    is_initialized, lateness, local_rank, local_size, rank, size)
from ._timeline import mark_step, start_timeline, stop_timeline, timeline

RanktimeError.__module__ = "ranktime"
RankLateness.__module__ = "ranktime"
NameInFlightError.__module__ = "ranktime"
InvalidArgumentError.__module__ = "ranktime"
__version__ = "0.1.0"

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "allgather", "allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "reducescatter", "reducescatter_async", "alltoall", "alltoall_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "synchronize", "poll", "barrier", "Handle", "RanktimeError", "NameInFlightError",
    "InvalidArgumentError",
    "ReduceOp", "Sum", "Average", "Min", "Max", "Product",
    "start_timeline", "stop_timeline", "timeline", "mark_step", "lateness", "RankLateness",
]


def init():
    """Starts the runtime on every rank (collective); initialises MPI if nobody has.

    Raises RanktimeError naming the variable and value when the environment is malformed.
    """
    _core.init()


def shutdown():
    """Stops the runtime on every rank; pending operations fail. init() may be called again."""
    _core.shutdown()
    _collectives._free_orphans()  # every operation has completed now


def barrier():
    """Blocks until every rank has called barrier()."""
    _core.barrier()


@_atexit.register
def _shutdown_at_exit():
    # Leaving without shutdown() would leave the background thread and MPI running.
    if _core.is_initialized():
        shutdown()
