"""PyTorch on ranktime, shaped as ``horovod.torch``: ``import ranktime.torch as hvd`` gives
Horovod 0.28.1's collectives (allreduce, allgather, broadcast, reducescatter, alltoall, the
grouped forms, their async and in-place forms, with Horovod's arguments and gradients),
DistributedOptimizer, broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object (docs/python.md, "From Horovod").

    opt = ranktime.torch.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    ranktime.torch.broadcast_parameters(model.state_dict(), root_rank=0)
    ranktime.torch.broadcast_optimizer_state(opt, root_rank=0)

Each gradient's allreduce starts from a hook as soon as backward has produced it and is named
after its parameter (``allreduce.layer1.0.conv1.weight`` in the timeline); step() waits for them
all, then applies the update.

Importing this module also registers the torch.distributed backend "ranktime" (see
ranktime/_distributed.py): ``torch.distributed.init_process_group("ranktime")`` runs DDP and the
other torch.distributed calls on ranktime.
"""

import contextlib
import sys
import warnings

import torch

from . import _collectives, _distributed, _process_sets, _timeline, _torch_ops
from ._collectives import Handle, poll, synchronize
from ._instrument import instrument
from ._core import (InvalidArgumentError, NameInFlightError, RanktimeError, cross_rank,
                    cross_size, is_initialized, local_rank, local_size, rank, size)
from ._profile import profile
from ._timeline import start_timeline, stop_timeline
from ._torch_ops import *  # noqa: F401,F403 (the collectives, Horovod-shaped)
from ._adasum_optimizer import _DistributedAdasumOptimizer
from ._sync_batch_norm import SyncBatchNorm
from ._torch_ops import (Adasum, Average, Compression, _resolve_op, broadcast_object,
                         global_process_set)
from . import barrier, init, join, shutdown
from . import _elastic as elastic  # hvd.elastic: run, TorchState, ElasticSampler, ...

# `import ranktime.torch.elastic` and `from ranktime.torch.elastic import run` (Horovod's
# horovod.torch.elastic) find it here, as `import os.path` finds posixpath: this is a module.
sys.modules[__name__ + ".elastic"] = elastic

HorovodInternalError = RanktimeError  # Horovod's name for a failed collective

__all__ = _torch_ops.__all__ + [
    "DistributedOptimizer", "SyncBatchNorm", "broadcast_parameters", "broadcast_optimizer_state",
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "barrier", "join", "synchronize", "poll", "Handle",
    "start_timeline",
    "stop_timeline", "instrument", "profile",
    "RanktimeError", "HorovodInternalError", "NameInFlightError", "InvalidArgumentError",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "ccl_built", "ddl_built",
    "rocm_built", "nccl_built", "elastic",
]


def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def rocm_built():
    return False


def nccl_built():
    """Horovod returns the NCCL version its collectives were built with; ranktime's reducescatter
    and alltoall (which Horovod's scripts check NCCL's version for) never use NCCL: 0."""
    return 0


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class by DistributedOptimizer(); see there."""

    def __init__(self, params, named_parameters, op, backward_passes_per_step, compression,
                 gradient_predivide_factor, sparse_as_dense, process_set):
        super(self.__class__, self).__init__(params)
        self._op = op
        self._process_set = process_set
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        # Horovod splits an average between the scale factors; a sum is not scaled.
        self._scale = ((1.0 / gradient_predivide_factor, gradient_predivide_factor)
                       if op is Average else (1.0, 1.0))
        self._backward_passes_per_step = backward_passes_per_step
        self._parameters = [p for group in self.param_groups for p in group["params"]
                            if p.requires_grad]
        self._names = _parameter_names(self.param_groups, named_parameters)
        self._parameter_names = self._names  # Horovod's attribute name, which scripts read
        self._handles = {}  # parameter -> Handle of its gradient's allreduce, this step
        self._passes_left = {p: backward_passes_per_step for p in self._parameters}
        self._synchronized = False
        self._skip_synchronize = False
        self._grad_accumulators = []  # the hooks live as long as these nodes
        # As Horovod: outside the process set, gradients stay local and nothing is reduced.
        self._included = _process_sets.includes_this_rank(process_set)
        for p in self._parameters if self._included else []:
            # The AccumulateGrad node runs when p.grad is complete for this backward pass.
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._make_hook(p))
            self._grad_accumulators.append(accumulator)

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._passes_left[p] <= 0:
                raise AssertionError(
                    "ranktime: the gradient of %s was computed more than "
                    "backward_passes_per_step=%d times before step(); raise "
                    "backward_passes_per_step to accumulate gradients locally"
                    % (self._names[p], self._backward_passes_per_step))
            self._passes_left[p] -= 1
            if self._passes_left[p] == 0:
                self._handles[p] = self._allreduce_gradient(p)
        return hook

    def _allreduce_gradient(self, p):
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                return _GradientHandle(_torch_ops.sparse_allreduce_async(
                    grad, self._names[p], self._op, self._process_set), p, Compression.none,
                    None)
            grad = grad.to_dense()
        compressed, ctx = self._compression.compress(grad)
        handle = _collectives.allreduce_async_(compressed, self._names[p], self._op, *self._scale,
                                               self._process_set)
        if compressed is p.grad:
            return handle
        return _GradientHandle(handle, p, self._compression, ctx)

    def synchronize(self):
        """Waits for every gradient's allreduce. Parameters whose hook did not run this step
        (unused in the forward pass) are reduced now, with zeros if they have no gradient, so
        that every rank submits the same tensors. Outside the optimizer's process set: nothing."""
        if not self._included:
            self._synchronized = True
            return
        for p in self._parameters:
            if p not in self._handles:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                self._handles[p] = self._allreduce_gradient(p)
        try:
            for handle in self._handles.values():
                handle.wait()
        finally:
            self._handles.clear()
            for p in self._parameters:
                self._passes_left[p] = self._backward_passes_per_step
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For ``opt.synchronize(); clip(...); with opt.skip_synchronize(): opt.step()``."""
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def step(self, closure=None):
        if self._synchronized and not self._skip_synchronize:
            warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                          "optimizer.synchronize(); the gradients are not reduced again, but "
                          "wrap step() in `with optimizer.skip_synchronize():` to say so",
                          stacklevel=2)
        if not self._synchronized and not self._skip_synchronize:
            self.synchronize()
        self._synchronized = False
        result = super(self.__class__, self).step(closure)
        # The next step starts once this one's update is done (STEP slices, TIMELINE_STEPS).
        _timeline.mark_step()
        return result

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError(
                "ranktime: optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(); the gradients are being reduced")
        return super(self.__class__, self).zero_grad(set_to_none)


class _GradientHandle:
    """A compressed, densified or sparse gradient's reduction: wait() puts the result in
    p.grad."""

    def __init__(self, handle, p, compression, ctx):
        self._handle, self._p, self._compression, self._ctx = handle, p, compression, ctx

    def wait(self):
        reduced = self._compression.decompress(self._handle.wait(), self._ctx)
        grad = self._p.grad
        if reduced.is_sparse:
            self._p.grad = reduced
        elif grad.is_sparse:
            self._p.grad = reduced.to_sparse(grad.sparse_dim()).to(grad.dtype)
        else:
            with torch.no_grad():
                grad.copy_(reduced)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that gradients are reduced (default: averaged) over all ranks.

    The result is an instance of the optimizer's own class (so LR schedulers and isinstance work)
    with the same parameter groups and state. Each gradient's allreduce starts from a hook as soon
    as backward has produced it; step() waits for all of them and then updates.

    named_parameters: ``model.named_parameters()``; names the tensors ``allreduce.<name>``, which
        is what the timeline shows. Without it gradients are named ``allreduce.noname.<i>`` in
        parameter-group order.
    op: ranktime.Average (default), ranktime.Sum, or Adasum: on more than one rank, as Horovod,
        each rank's optimizer step (its delta) is combined by Adasum instead of the gradients
        (ranktime/_adasum_optimizer.py).
    process_set: reduce over these ranks only (a ProcessSet); on ranks outside it the optimizer
        reduces nothing and steps on local gradients, as in Horovod.
    backward_passes_per_step: local backward passes accumulated before each reduction.
    compression, gradient_predivide_factor, sparse_as_dense: as in Horovod (Compression.fp16
        sends float gradients as float16; an average is split into a prescale by
        1/gradient_predivide_factor and a postscale by it; sparse gradients are reduced dense
        with sparse_as_dense=True, otherwise by sparse_allreduce_async).
    num_groups, groups: accepted for Horovod's signature; ranktime fuses by its own rules.
    """
    if backward_passes_per_step < 1:
        raise ValueError("ranktime: backward_passes_per_step must be at least 1")
    _process_sets.id_of(process_set)
    op = _resolve_op(op, None, process_set)
    if op is Adasum and size() > 1:
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedAdasumOptimizer.__dict__))
        distributed = cls(optimizer.param_groups,
                          _parameter_names(optimizer.param_groups, named_parameters), compression,
                          backward_passes_per_step)
        distributed.load_state_dict(optimizer.state_dict())
        return distributed
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    distributed = cls(optimizer.param_groups, named_parameters, op, backward_passes_per_step,
                      compression, gradient_predivide_factor, sparse_as_dense, process_set)
    distributed.load_state_dict(optimizer.state_dict())
    return distributed


def _parameter_names(param_groups, named_parameters):
    params = [p for group in param_groups for p in group["params"]]
    if named_parameters is None:
        return {p: "noname.%d" % i for i, p in enumerate(params)}
    named_parameters = list(named_parameters)
    if any(not isinstance(pair, tuple) or len(pair) != 2 for pair in named_parameters):
        raise ValueError("ranktime: named_parameters must be (name, parameter) pairs, as "
                         "model.named_parameters() yields")
    names = {}
    for name, p in named_parameters:
        if name in names.values():
            raise ValueError("ranktime: parameter name %r appears twice in named_parameters"
                             % name)
        names.setdefault(p, name)
    unnamed = [i for i, p in enumerate(params) if p not in names]
    if unnamed:
        raise ValueError("ranktime: %d optimizer parameters (indices %s) are not in "
                         "named_parameters" % (len(unnamed), unnamed[:10]))
    return names


def broadcast_parameters(params, root_rank=0):
    """Overwrites every rank's tensors with root_rank's, in place.

    params: ``model.state_dict()`` (parameters and buffers) or ``model.named_parameters()``.
    Tensors are named ``broadcast.<name>``.
    """
    items = list(params.items()) if isinstance(params, dict) else list(params)
    handles = []
    for name, value in items:
        if not torch.is_tensor(value):
            raise ValueError("ranktime: broadcast_parameters expects tensors; %r is a %s"
                             % (name, type(value).__name__))
        handles.append(_collectives.broadcast_async_(value.data, root_rank, name=name))
    for handle in handles:
        handle.wait()


class _TensorSlot:
    """Stands for a tensor in a broadcast state dict: its path, dtype and shape."""

    def __init__(self, path, tensor):
        self.path = path
        self.dtype = tensor.dtype
        self.shape = tuple(tensor.shape)


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Makes every rank's optimizer state (hyper-parameters and per-parameter state, such as
    momentum buffers) root_rank's.

    The state's structure and scalars travel as one pickled object; its tensors are broadcast
    one by one as ``broadcast.optimizer.state.<param index>.<key>``. Works whether or not the
    other ranks' optimizers have taken a step yet; an optimizer without state on this rank gets
    it from a local step with zero gradients first, as in Horovod. `model` is accepted for
    Horovod's signature (it names sparse parameters there).
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("ranktime: broadcast_optimizer_state does not support LBFGS")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer)
    state_dict = optimizer.state_dict()
    tensors = {}

    def strip(value, path):
        if torch.is_tensor(value):
            tensors[path] = value
            return _TensorSlot(path, value)
        if isinstance(value, dict):
            return {k: strip(v, "%s.%s" % (path, k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(strip(v, "%s.%d" % (path, i)) for i, v in enumerate(value))
        return value

    skeleton = broadcast_object(strip(state_dict, "optimizer"), root_rank,
                                name="optimizer.skeleton")

    # Every rank follows root's skeleton, so ranks without state yet receive it too.
    slots = []

    def collect(value):
        if isinstance(value, _TensorSlot):
            slots.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                collect(v)

    collect(skeleton)
    received = {}
    handles = []
    for slot in slots:
        local = tensors.get(slot.path)
        if local is None or local.dtype != slot.dtype or tuple(local.shape) != slot.shape:
            local = torch.empty(slot.shape, dtype=slot.dtype)
        received[slot.path] = local
        handles.append(_collectives.broadcast_async_(local, root_rank, name=slot.path))
    for handle in handles:
        handle.wait()

    def fill(value):
        if isinstance(value, _TensorSlot):
            return received[value.path]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(fill(v) for v in value)
        return value

    optimizer.load_state_dict(fill(skeleton))


def _initialize_state(optimizer):
    """As Horovod: a step with zero gradients creates a new optimizer's state (momentum
    buffers, ...), so that every rank has tensors to receive root's into. Local only: the
    wrapped class's step, not DistributedOptimizer's. The zero gradients stay, as in Horovod."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    # (torch may wrap the class's step() for its profiler: look for another of our methods)
    distributed = "_allreduce_gradient" in type(optimizer).__dict__
    (super(optimizer.__class__, optimizer).step if distributed else optimizer.step)()


_distributed.register()
