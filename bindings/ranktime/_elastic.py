"""Elastic training, Horovod's API (``hvd.elastic``) on restarting processes: ``run``, ``State``,
``ObjectState``, ``TorchState``, ``ElasticSampler`` (docs/python.md, "Elastic training").

Under ``ranktime run --host-discovery-script`` a failure ends the job's processes and the launcher
starts new ones on the hosts left (launcher/elastic.cc). So ``commit()`` writes the state to disk,
in RANKTIME_ELASTIC_DIR on each host (one file per host, written under a temporary name and
renamed), and ``run`` starts each attempt from the newest complete commit any rank can read: the
ranks agree on the newest commit number and the lowest rank holding it broadcasts the state.
"""

import copy
import functools
import glob
import io
import math
import os
import random
import socket
import sys

import numpy as np
import torch

from . import _collectives, _core
from ._regions import region
from ._torch_ops import allgather_object, broadcast_object

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "HOSTS_UPDATED_EXIT"]

# The exit status of every rank after the commit that noticed the launcher's hosts_updated note
# (launcher/elastic.h, kHostsUpdatedExit): the job restarts on more hosts, nothing failed.
HOSTS_UPDATED_EXIT = 75


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by commit() on every rank when the launcher found hosts to grow onto; run() ends
    the process so that the job restarts with them."""

    def __init__(self, skip_sync=False):
        super().__init__("ranktime: hosts were added; the job restarts on them")
        self.skip_sync = skip_sync


def _elastic_dir():
    return os.environ.get("RANKTIME_ELASTIC_DIR", "")


def _attempt():
    text = os.environ.get("RANKTIME_ELASTIC_ATTEMPT", "0")
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError("ranktime: RANKTIME_ELASTIC_ATTEMPT=%r is not valid: expected an attempt "
                         "number >= 0" % text)
    return value


def _commit_path(directory):
    # One file per host: every rank of a host holds the same state, its first rank writes it.
    return os.path.join(directory, "commit.%s.pt" % socket.gethostname())


def _write_commit(directory, number, payload):
    """Writes commit `number` atomically: a reader finds the previous file or this one, whole."""
    os.makedirs(directory, exist_ok=True)
    final = _commit_path(directory)
    temporary = "%s.tmp.%d" % (final, os.getpid())
    buffer = io.BytesIO()
    torch.save({"commit": number, "state": payload}, buffer)
    with open(temporary, "wb") as f:
        f.write(buffer.getbuffer())
    os.replace(temporary, final)


def _newest_commit(directory):
    """(number, payload) of the newest commit file this rank can read whole, or (0, None)."""
    newest = (0, None)
    for path in glob.glob(os.path.join(directory, "commit.*.pt")) if directory else []:
        try:
            loaded = torch.load(path, weights_only=False)
        except Exception:  # a file from an older format, or cut short by a full disk
            continue
        if isinstance(loaded, dict) and loaded.get("commit", 0) > newest[0]:
            newest = (loaded["commit"], loaded["state"])
    return newest


class State:
    """Horovod's State: what is committed, restored after a restart, and kept in step across
    ranks. Subclasses implement save() (into memory), restore() (from it) and sync(root_rank)."""

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0  # the number of the newest commit (0: none)

    def register_reset_callbacks(self, callbacks):
        """Functions called with no arguments after each restart, once the state is restored (to
        scale the learning rate to the new world size, say)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; the launcher's note is read at commit() instead."""

    def commit(self):
        """Saves the state in memory and on this host's disk (under ranktime run's elastic
        loop), then raises HostsUpdatedInterrupt on every rank if hosts were added."""
        # A region, so that `ranktime summary` of the attempts counts the work after the last one.
        with region("elastic.commit"):
            self.save()
            self._commits += 1
            directory = _elastic_dir()
            if directory and _core.local_rank() == 0:
                _write_commit(directory, self._commits, self._payload())
        self.check_host_updates()

    def check_host_updates(self):
        """Rank 0 reads the launcher's note; every rank learns it from rank 0 (one small
        broadcast per commit, only under ranktime run's elastic loop)."""
        directory = _elastic_dir()
        if not directory:
            return
        seen = _core.rank() == 0 and os.path.exists(os.path.join(directory, "hosts_updated"))
        flag = _collectives.broadcast(np.array([int(seen)], dtype=np.int32), 0,
                                      name="elastic.hosts_updated")
        if flag[0]:
            raise HostsUpdatedInterrupt()

    def _start(self):
        """The newest commit of any rank becomes every rank's state; the reset callbacks run on
        every attempt after the first."""
        number, payload = _newest_commit(_elastic_dir())
        newest = int(_collectives.allreduce(np.array([number], dtype=np.int64),
                                            name="elastic.newest_commit", op=_core.Max)[0])
        holder = _core.rank() if number == newest else _core.size()
        root = int(_collectives.allreduce(np.array([holder], dtype=np.int64),
                                          name="elastic.commit_holder", op=_core.Min)[0])
        if newest > 0 and _core.rank() == root:
            self._load(payload)
        self.sync(root if newest > 0 else 0)
        self.save()
        self._commits = newest
        if _attempt() > 0:
            self.on_reset()

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self, root_rank=0):
        raise NotImplementedError()

    def reset(self):
        pass

    def _payload(self):
        raise NotImplementedError()

    def _load(self, payload):
        raise NotImplementedError()


class ObjectState(State):
    """State of picklable attributes, given as keyword arguments and read and set as attributes
    (``state.epoch``)."""

    def __init__(self, bcast_object=broadcast_object, get_rank=_core.rank, **kwargs):
        super().__init__()
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        for name, value in kwargs.items():
            setattr(self, name, value)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self, root_rank=0):
        if self._saved_state:
            synced = self._bcast_object({n: getattr(self, n) for n in self._saved_state},
                                        root_rank, name="elastic.objects")
            for name, value in synced.items():
                setattr(self, name, value)

    def _payload(self):
        return {"objects": self._saved_state}

    def _load(self, payload):
        self._saved_state = payload["objects"]
        self.restore()


class _Handler:
    """How TorchState saves, restores and syncs one model, optimizer or sampler."""

    def __init__(self, value, state_dict, load, sync):
        self.value = value
        self._state_dict, self._load, self._sync = state_dict, load, sync
        self.saved = copy.deepcopy(state_dict(value))

    def save(self):
        self.saved = copy.deepcopy(self._state_dict(self.value))

    def restore(self):
        self._load(self.value, copy.deepcopy(self.saved))

    def sync(self, root_rank, name):
        self._sync(self.value, root_rank, name)


def _sync_model(model, root_rank, name):
    from .torch import broadcast_parameters
    broadcast_parameters(model.state_dict(), root_rank=root_rank)


def _sync_optimizer(optimizer, root_rank, name):
    from .torch import broadcast_optimizer_state
    broadcast_optimizer_state(optimizer, root_rank=root_rank)


def _sync_sampler(sampler, root_rank, name):
    # As Horovod: the indices any rank processed, then root's epoch.
    state = sampler.state_dict()
    state["processed_indices"] = set().union(
        *allgather_object(sampler.processed_indices, name="elastic.%s.indices" % name))
    sampler.load_state_dict(broadcast_object(state, root_rank, name="elastic.%s" % name))


class TorchState(ObjectState):
    """Horovod's TorchState: ``TorchState(model, optimizer, train_sampler=sampler, epoch=0,
    batch=0)``; the model's and optimizer's state dicts, ElasticSamplers' state and the other
    attributes are committed, restored and synced."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handlers = {}
        if model is not None:
            handlers["model"] = _Handler(model, lambda m: m.state_dict(),
                                         lambda m, s: m.load_state_dict(s), _sync_model)
        if optimizer is not None:
            handlers["optimizer"] = _Handler(optimizer, lambda o: o.state_dict(),
                                             lambda o, s: o.load_state_dict(s), _sync_optimizer)
        for name in [n for n, v in kwargs.items() if isinstance(v, ElasticSampler)]:
            handlers[name] = _Handler(kwargs.pop(name), lambda s: s.state_dict(),
                                      lambda s, d: s.load_state_dict(d), _sync_sampler)
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self, root_rank=0):
        for name, handler in self._handlers.items():
            handler.sync(root_rank, name)
        super().sync(root_rank)

    def _payload(self):
        payload = super()._payload()
        payload["handlers"] = {name: h.saved for name, h in self._handlers.items()}
        return payload

    def _load(self, payload):
        for name, saved in payload["handlers"].items():
            if name in self._handlers:
                self._handlers[name].saved = saved
                self._handlers[name].restore()
        super()._load(payload)


def run(func):
    """``@hvd.elastic.run``: ``func(state, ...)`` runs from the newest commit. A failure ends this
    process (the launcher restarts the job); hosts added end it after a commit, exit status
    HOSTS_UPDATED_EXIT, so that the job restarts on them."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _core.is_initialized():
            raise ValueError("ranktime: call init() before running an elastic function")
        state._start()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            from . import shutdown
            shutdown()
            sys.stdout.flush()
            sys.exit(HOSTS_UPDATED_EXIT)

    return wrapper


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: shards `dataset` over the ranks, skipping the samples already
    processed this epoch, so a restart on fewer or more ranks resumes mid-epoch.

    record_batch(batch_idx, batch_size) records the batch of every rank (each rank can work it
    out), so one rank's commit holds the whole world's progress; Horovod records this rank's
    only and unions them at sync, which a lost host's ranks can no longer join.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        padded = self._padded()
        for r in range(self.num_replicas):
            mine = padded[r:self.total_size:self.num_replicas]
            self.processed_indices.update(mine[batch_idx * batch_size:(batch_idx + 1) * batch_size])

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        indices = self._padded()[self.rank:self.total_size:self.num_replicas]
        return indices[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def reset(self):
        self.num_replicas = _core.size()
        self.rank = _core.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = [i for i in indices if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def _padded(self):
        # Padded with its own start to a multiple of the ranks, as Horovod.
        indices = self.remaining_indices[:]
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return indices

    def __iter__(self):
        return iter(self._padded()[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples
