"""DistributedOptimizer(op=Adasum) on more than one rank: Horovod 0.28.1's delta optimizer
(horovod/torch/optimizer.py, _DistributedAdasumOptimizer, Apache License 2.0). Adasum combines
what each rank's optimizer would do, not the gradients: each parameter's hook steps the wrapped
optimizer on that parameter alone from a zero start, so p holds the step's delta, and starts an
Adasum allreduce of it; step() adds the combined delta to the parameter's value before the step.
"""

import torch

from . import _collectives
from ._core import Adasum


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class by DistributedOptimizer(); see there."""

    def __init__(self, params, names, compression, backward_passes_per_step):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._names = names
        self._parameter_names = names  # Horovod's attribute name, which scripts read
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for p in names}
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                    accumulator.register_hook(self._make_hook(p))
                    self._grad_accs.append(accumulator)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _allreduce_grad_async(self, p):
        # delta = (start - lr * f(g)) - start: step p alone from its own value, keep the change.
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        start.data.copy_(p)
        super(self.__class__, self).step()
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p)
        handle = _collectives.allreduce_async_(compressed.data, self._names[p], Adasum)
        for params, group in zip(stashed, self.param_groups):
            group["params"] = params
        return handle, ctx

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "ranktime: gradients were computed more than backward_passes_per_step "
                        "times before step(); raise backward_passes_per_step to accumulate "
                        "gradients locally")
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        pass

    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            if handle is None:  # step() before backward_passes_per_step passes
                handle, ctx = self._allreduce_grad_async(p)
            delta = self._compression.decompress(handle.wait(), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(set_to_none)
