"""ranktime.torch.instrument: a training loop's phases as regions, with one call.

    loader = ranktime.torch.instrument(model, optimizer, loader)
    for inputs, labels in loader:           # "data": waiting for the next batch
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)   # "forward": the model's forward
        loss.backward()                         # "backward": from forward's end to step()
        optimizer.step()                        # "optimizer": step(), its gradient wait included

Every phase begins and ends on the training thread, so a rank's regions nest as the timeline
wants them. That is why "backward" is not timed by backward hooks: autograd runs those on its own
threads (one per GPU), and a full backward hook on the top module also wraps its outputs, which
DDP and in-place operations do not expect. "backward" therefore runs from the end of the model's
forward (with gradients enabled, in training mode) to the optimizer's step, or to the next batch
or forward when no step comes between (gradient accumulation): it holds the loss, backward, and
whatever the script does before step() (gradient clipping, say). The time a rank spends blocked
waiting for the others (DistributedOptimizer's in step(), DDP's at the end of backward) is
recorded as the region's `blocked_us`, and the analysis leaves it out. DDP waits for its buckets
on their futures in an autograd callback that it queues once backward's last bucket is ready,
not in ranktime: under DDP, instrument queues a callback of its own when backward begins (a hook
on the model's output), which runs when backward's compute has ended and before DDP's; it opens
a blocked span there and queues one more callback, which runs after DDP's wait and closes it.

Step marks: instrument marks the first step when the first batch is asked for; after that each
step begins when the optimizer's step() returns. ranktime.torch.DistributedOptimizer marks its
steps itself; for any other optimizer (DDP's, say) instrument marks them. Either way there is
exactly one mark per step(); a script that uses instrument should not call mark_step() itself.
torch 1.13 has no optimizer step hooks, so step() is wrapped on the optimizer object.
"""

import torch

from . import _timeline

PHASES = ("data", "forward", "backward", "optimizer")


def instrument(model, optimizer, loader):
    """Records the regions "data", "forward", "backward" and "optimizer" on every step through
    torch's module hooks and a wrapper around optimizer.step(), and marks the steps; returns the
    loader to iterate instead of `loader`. No other change to the training script.

    model: the top torch.nn.Module the script calls (a DistributedDataParallel wrapper or the
        model itself). optimizer: the optimizer whose step() ends each step
        (ranktime.torch.DistributedOptimizer or any torch.optim.Optimizer). loader: any iterable
        of batches (a torch DataLoader, say); the returned one passes len() and attributes through.
    Instrumenting the same model or optimizer twice is an error.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError("ranktime.torch.instrument: model must be a torch.nn.Module, not %s"
                        % type(model).__name__)
    if not callable(getattr(optimizer, "step", None)):
        raise TypeError("ranktime.torch.instrument: optimizer must have a step() method (a "
                        "torch.optim.Optimizer), not %s" % type(optimizer).__name__)
    if not (hasattr(type(loader), "__iter__") or hasattr(type(loader), "__getitem__")):
        raise TypeError("ranktime.torch.instrument: loader must be iterable (a DataLoader, a "
                        "list of batches), not %s" % type(loader).__name__)
    for what, thing in (("model", model), ("optimizer", optimizer)):
        if getattr(thing, "_ranktime_phases", None) is not None:
            raise ValueError("ranktime.torch.instrument: this %s is instrumented already; call "
                             "instrument() once per training loop" % what)
    phases = _Phases(_marks_steps_itself(optimizer))
    model._ranktime_phases = phases
    optimizer._ranktime_phases = phases
    phases.hooks = [model.register_forward_pre_hook(phases.forward_begins),
                    model.register_forward_hook(phases.forward_ends)]
    optimizer.step = _timed_step(optimizer.step, phases)
    return _TimedLoader(loader, phases)


def _marks_steps_itself(optimizer):
    # ranktime.torch.DistributedOptimizer's class is made from _DistributedOptimizer's methods;
    # its step() calls mark_step().
    return "_allreduce_gradient" in type(optimizer).__dict__


class _Phases:
    """Which phase is open on the training thread. The phases follow one another and never
    nest, so one slot holds the open one; entering a phase ends the one before."""

    def __init__(self, optimizer_marks_steps):
        import ranktime  # the package, for its region functions
        self._begin, self._end = ranktime.region_begin, ranktime.region_end
        self._optimizer_marks_steps = optimizer_marks_steps
        self._open = None
        self._forward_depth = 0  # a model that calls itself: the outermost call counts
        self._ddp_wait = None  # DDP's wait at the end of backward, while it lasts
        self.started = False  # the first step is marked
        self.hooks = []

    def enter(self, phase):
        if self._open is not None:
            self._end(self._open)
        self._open = None
        self._begin(phase)
        self._open = phase

    def leave(self, phase):
        if self._open == phase:
            self._open = None
            self._end(phase)

    def start_step(self):
        """At the first batch: the first step's mark."""
        if not self.started:
            self.started = True
            _timeline.mark_step()

    def step_done(self):
        if self.started and not self._optimizer_marks_steps:
            _timeline.mark_step()

    def forward_begins(self, module, inputs):
        self._forward_depth += 1
        if self._forward_depth == 1:
            self.enter("forward")

    def forward_ends(self, module, inputs, outputs):
        self._forward_depth = max(0, self._forward_depth - 1)
        if self._forward_depth > 0:
            return
        self.leave("forward")
        if torch.is_grad_enabled() and module.training:
            self.enter("backward")
            if isinstance(module, torch.nn.parallel.DistributedDataParallel):
                self._watch_ddp_wait(outputs)

    def _watch_ddp_wait(self, outputs):
        output = _first_tensor_with_grad(outputs)
        if output is None:
            return
        queue = torch.autograd.Variable._execution_engine.queue_callback
        from ._core import _BlockedScope

        def compute_done():  # after every gradient, before DDP's wait (queued before it)
            self._ddp_wait = _BlockedScope()
            queue(ddp_wait_done)  # callbacks queued while they run go last

        def ddp_wait_done():
            self._ddp_wait = None

        output.register_hook(lambda grad: queue(compute_done))


def _first_tensor_with_grad(outputs):
    """The first tensor that gradients flow through in a forward's outputs (a tensor, or a
    tuple, list or dict of them), or None."""
    if isinstance(outputs, torch.Tensor):
        return outputs if outputs.requires_grad else None
    if isinstance(outputs, dict):
        outputs = list(outputs.values())
    if isinstance(outputs, (tuple, list)):
        for item in outputs:
            found = _first_tensor_with_grad(item)
            if found is not None:
                return found
    return None


def _timed_step(step, phases):
    def timed_step(*args, **kwargs):
        phases.enter("optimizer")
        try:
            return step(*args, **kwargs)
        finally:
            phases.leave("optimizer")
            phases.step_done()

    timed_step.__wrapped__ = step
    timed_step.__doc__ = step.__doc__
    return timed_step


class _TimedLoader:
    """Iterates the script's loader, each wait for a batch a "data" region."""

    def __init__(self, loader, phases):
        self._loader = loader
        self._phases = phases

    def __iter__(self):
        it = iter(self._loader)
        while True:
            self._phases.start_step()
            self._phases.enter("data")
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                self._phases.leave("data")
            yield batch

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):  # dataset, sampler, batch_size, ...
        if name == "_loader":  # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self._loader, name)
