"""The torch.distributed backend "ranktime", registered when ranktime.torch is imported:

    import ranktime.torch
    torch.distributed.init_process_group("ranktime")   # under `ranktime run` or mpirun

The process group itself is C++ (ranktime._c10d, built where libtorch's headers are installed).
torch 1.13's init_process_group needs a key-value store for its start-up barrier and, given no
store and no init_method, reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. For this backend
ranktime provides them: init_process_group is wrapped so that, when backend is "ranktime" and
neither init_method nor store is given, ranktime starts (if it has not), the rank and world size
are ranktime's, and rank 0 serves a TCPStore whose address reaches the others by a ranktime
broadcast. Other backends, and calls that pass a store or an init_method, go to torch unchanged.
"""

import functools
import importlib.util
import inspect
import os
import socket

import torch
import torch.distributed as dist

from . import _core

BACKEND = "ranktime"


def register():
    """Registers the backend and wraps init_process_group; does nothing the second time, or
    where torch was built without torch.distributed."""
    if not dist.is_available():
        return
    if BACKEND.upper() not in dist.Backend._plugins:
        # torch 2 asks which device types a backend serves (one ranktime backend serves both).
        devices = ({"devices": ["cpu", "cuda"]}
                   if "devices" in inspect.signature(dist.Backend.register_backend).parameters
                   else {})
        dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True, **devices)
    if not getattr(dist.init_process_group, "_ranktime_rendezvous", False):
        wrapper = _with_rendezvous(dist.distributed_c10d.init_process_group)
        dist.init_process_group = wrapper
        dist.distributed_c10d.init_process_group = wrapper


def _extension():
    if importlib.util.find_spec(__package__ + "._c10d") is None:
        raise RuntimeError(
            "ranktime: the torch.distributed backend 'ranktime' was not built: it needs torch's "
            "C++ headers, matching this torch %s (Debian: apt-get install libtorch-dev, then "
            "rebuild; CMake's configure step prints why it skipped the backend)" % torch.__version__)
    try:
        from . import _c10d
    except ImportError as error:
        raise RuntimeError(
            "ranktime: the torch.distributed backend 'ranktime' cannot be loaded into torch %s; "
            "rebuild ranktime against this torch's libtorch (%s)" % (torch.__version__, error)
        ) from error
    return _c10d


def _create_process_group(options, pg_options):
    """torch's creator hook (extended API): options carry the group's id and global ranks."""
    if pg_options is not None:
        raise ValueError("ranktime: the ranktime backend takes no pg_options")
    c10d = _extension()
    if not _core.is_initialized():
        _core.init()
    return c10d.create_process_group(options.group_rank, options.group_size, options.group_id,
                                     list(options.global_ranks_in_group))


def _with_rendezvous(init_process_group):
    signature = inspect.signature(init_process_group)

    @functools.wraps(init_process_group)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if (str(a["backend"]).lower() == BACKEND and a["init_method"] is None
                and a["store"] is None):
            a["store"], a["rank"], a["world_size"] = _rendezvous(a["timeout"], a["rank"],
                                                                a["world_size"])
        return init_process_group(*bound.args, **bound.kwargs)

    wrapper._ranktime_rendezvous = True
    return wrapper


def _rendezvous(timeout, rank, world_size):
    """(store, rank, world size) from ranktime; rank 0 serves the store."""
    _extension()  # fail here, before anything is started, if the backend is missing
    if not _core.is_initialized():
        _core.init()
    my_rank, size = _core.rank(), _core.size()
    if rank not in (-1, my_rank) or world_size not in (-1, size):
        raise ValueError(
            "ranktime: init_process_group(rank=%d, world_size=%d) disagrees with the runtime: this "
            "is rank %d of %d (ranks come from MPI; leave rank and world_size out)"
            % (rank, world_size, my_rank, size))
    from .torch import broadcast_object
    if timeout is None:  # torch 2's default; TCPStore needs a timedelta
        from torch.distributed.constants import default_pg_timeout as timeout
    address = None
    if my_rank == 0:
        host = os.environ.get("MASTER_ADDR") or (
            "127.0.0.1" if _core.local_size() == size else socket.gethostname())
        port = int(os.environ.get("MASTER_PORT", "0"))  # 0: any free port
        store = dist.TCPStore(host, port, size, True, timeout, wait_for_workers=False)
        address = (host, store.port)
    address = broadcast_object(address, root_rank=0, name="ranktime.torch.rendezvous")
    if my_rank != 0:
        store = dist.TCPStore(address[0], address[1], size, False, timeout)
    return store, my_rank, size
