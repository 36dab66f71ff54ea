"""ranktime: Horovod-style collectives (allreduce, allgather, broadcast, reducescatter, alltoall,
and grouped forms) with a distributed timeline, for NumPy arrays and PyTorch tensors.

    import ranktime
    ranktime.init()
    total = ranktime.allreduce(x, op=ranktime.Sum)

Run under ``ranktime run -np N python3 script.py`` (or mpirun). See docs/python.md.
"""

import atexit as _atexit

from . import _collectives, _core, _process_sets
from ._collectives import (Handle, allgather, allgather_async, allreduce, allreduce_,
                           allreduce_async, allreduce_async_, alltoall, alltoall_async, broadcast,
                           broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                           grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                           grouped_allreduce_async, grouped_allreduce_async_,
                           grouped_reducescatter, grouped_reducescatter_async, poll,
                           reducescatter, reducescatter_async, synchronize)
from ._core import (Adasum, Average, InvalidArgumentError, Max, Min, NameInFlightError, Product,
                    RankLateness, RanktimeError, ReduceOp, Sum, cross_rank, cross_size,
                    is_initialized, lateness, local_rank, local_size, rank, size)
from ._process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from ._regions import region, region_begin, region_end
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
    "synchronize", "poll", "barrier", "join", "Handle", "RanktimeError", "NameInFlightError",
    "InvalidArgumentError",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "ReduceOp", "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "start_timeline", "stop_timeline", "timeline", "mark_step", "lateness", "RankLateness",
    "region", "region_begin", "region_end",
]


def init(comm=None, process_sets=None):
    """Starts the runtime on every rank (collective); initialises MPI if nobody has.

    process_sets: ProcessSet objects to add now (each gets its process_set_id), or "dynamic"
    (Horovod's spelling for adding them later, which ranktime always allows). `comm` is Horovod's
    and must be None: ranktime runs over every rank of the job.
    Raises RanktimeError naming the variable and value when the environment is malformed.
    """
    if comm is not None:
        raise NotImplementedError("ranktime: init(comm=...) is not supported; ranktime runs over "
                                  "every rank of the MPI job (use process sets for subsets)")
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("ranktime: process_sets must be a list of ProcessSet or 'dynamic', "
                             "got %r" % process_sets)
        process_sets = None
    _core.init()
    _process_sets.init_process_sets(list(process_sets or []))


def shutdown():
    """Stops the runtime on every rank; pending operations fail. init() may be called again."""
    _core.shutdown()
    _collectives._free_orphans()  # every operation has completed now


def barrier(process_set=global_process_set):
    """Blocks until every rank (of `process_set`) has called barrier()."""
    _core.barrier(_process_sets.id_of(process_set))


def join(device=-1):
    """This rank has no more data (Horovod's join): until every rank has joined, it takes part in
    the other ranks' allreduces with zeros (an Average still divides by size()), and their
    allgathers and broadcasts fail. Blocks until every rank has joined; returns the rank that
    joined last, the same on every rank. `device` is accepted for Horovod's signature (the zeros
    are made in host memory)."""
    return _core.join(device)


@_atexit.register
def _shutdown_at_exit():
    # Leaving without shutdown() would leave the background thread and MPI running.
    if _core.is_initialized():
        shutdown()
