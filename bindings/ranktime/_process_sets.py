"""Process sets, as Horovod 0.28.1's ``horovod.common.process_sets``: collectives over a subset of
the ranks.

    even = ranktime.add_process_set([0, 2])   # every rank calls it (collective)
    if even.included():
        ranktime.allreduce(x, process_set=even)
    ranktime.remove_process_set(even)          # every rank, again

A set's operations are negotiated by its members only; rank 0 still coordinates (see
docs/architecture.md). Roots (broadcast's root_rank) are global ranks. Sets can be added and
removed at any time after init(): HOROVOD_DYNAMIC_PROCESS_SETS is not needed.
"""

from . import _core


class ProcessSet:
    """A set of ranks that run collectives together. Pass it to init(process_sets=[...]) or
    add_process_set(), then as ``process_set=`` to the collectives. ``process_set_id`` is set once
    it has been added (None before, and after remove_process_set())."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks "
                             "(ranktime does not take MPI communicators)") from None
        if any(not isinstance(rank, int) for rank in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks or "
                             "an mpi4py Comm object; got %r" % (ranks,))
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """How many ranks the set has, or None before it has been added."""
        if self.process_set_id is None:
            return None
        return len(_core.process_set_ranks(self.process_set_id))

    def rank(self):
        """This rank's place in the set (0 .. size()-1), or None before it has been added.
        Raises ValueError on a rank outside the set. (Collectives still take global ranks.)"""
        if self.process_set_id is None:
            return None
        ranks = _core.process_set_ranks(self.process_set_id)
        if _core.rank() not in ranks:
            raise ValueError("ranktime: rank %d is not part of %s" % (_core.rank(), self))
        return ranks.index(_core.rank())

    def included(self):
        """Whether this rank is in the set (None when the set has no ranks yet)."""
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])  # every rank; its ranks are filled in by init()
global_process_set.process_set_id = 0


def id_of(process_set):
    """The id to hand to the runtime for `process_set` (a ProcessSet, an id, or None: every
    rank)."""
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        if process_set.process_set_id is None:
            raise ValueError("ranktime: %s has not been added (or was removed): pass it to "
                             "init(process_sets=[...]) or add_process_set() first" % process_set)
        return process_set.process_set_id
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    raise TypeError("ranktime: process_set must be a ProcessSet (or its id), got %s"
                    % type(process_set).__name__)


def size_of(process_set):
    """How many ranks `process_set` has (size() for every rank)."""
    process_set_id = id_of(process_set)
    return _core.size() if process_set_id == 0 else len(_core.process_set_ranks(process_set_id))


def rank_in(process_set):
    """This rank's place in `process_set` (rank() for every rank)."""
    process_set_id = id_of(process_set)
    if process_set_id == 0:
        return _core.rank()
    return _core.process_set_ranks(process_set_id).index(_core.rank())


def includes_this_rank(process_set):
    """Whether this rank is in `process_set`."""
    process_set_id = id_of(process_set)
    return process_set_id == 0 or _core.rank() in _core.process_set_ranks(process_set_id)


def _existing(ranks):
    """The id of the set with exactly these ranks, or None."""
    for process_set_id in _core.process_set_ids():
        if _core.process_set_ranks(process_set_id) == ranks:
            return process_set_id
    return None


def add_process_set(process_set):
    """Adds a process set (a ProcessSet or a list of global ranks) and returns it, with its
    process_set_id. Collective: every rank calls it with the same ranks, members or not.
    Raises ValueError when a set with the same ranks exists already (as Horovod does)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is None:
        raise NotImplementedError("ranktime: process sets are made from lists of ranks")
    if _existing(process_set.ranks) is not None:
        raise ValueError("Attempted to add a duplicate process set: %s" % process_set)
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Removes a process set added before (collective, like add_process_set); its operations
    still in flight fail. Returns False, doing nothing, for global_process_set or a set that is
    not there."""
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    process_set._invalidate()
    return _core.remove_process_set(process_set_id)


def init_process_sets(process_sets):
    """init(process_sets=...): gives each ProcessSet its id, adding the sets not there yet (a
    second init() finds them); fills in global_process_set.ranks."""
    global_process_set.ranks = list(range(_core.size()))
    claimed = {0}
    for index, process_set in enumerate(process_sets):
        if not isinstance(process_set, ProcessSet):
            raise TypeError("ranktime: init(process_sets=...) takes ProcessSet objects, got %s"
                            % type(process_set).__name__)
        existing = _existing(process_set.ranks)
        if existing in claimed:
            raise ValueError("ranktime could not be initialized because process_sets entry "
                             "number %d is a duplicate: %s" % (index, process_set))
        if existing is None:
            existing = _core.add_process_set(process_set.ranks)
        process_set.process_set_id = existing
        claimed.add(existing)
