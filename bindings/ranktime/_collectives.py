"""allreduce, allgather and broadcast on the caller's tensors, and the handles they return.

Every operation is asynchronous underneath: the ``*_async`` forms return a Handle at once, the
plain forms wait for it. The runtime works in place on contiguous memory, so out-of-place forms
reduce or receive into a fresh contiguous copy, and in-place forms on a non-contiguous tensor work
on a contiguous copy that is written back when the handle completes.
"""

from . import _core, _names, _process_sets, _tensors
from ._process_sets import global_process_set

Average = _core.Average


class Handle:
    """A pending collective. ``wait()`` returns its result; ``done()`` says whether it completed.

    Waiting releases the GIL. A failed operation raises RanktimeError with the runtime's message,
    from every ``wait()`` on the handle. Dropping a pending handle does not block: the operation
    (and the tensor memory the runtime may still be using) is kept until it completes, and an
    unnamed operation's default name is not reused (see _names), so all ranks keep agreeing.
    """

    __slots__ = ("name", "_operation", "_finish", "_result", "_error", "_name_token")

    def __init__(self, name, operation, finish, name_token):
        self.name = name  # the tensor's name in the runtime and the timeline
        self._operation = operation
        self._finish = finish
        self._result = None
        self._error = None
        self._name_token = name_token

    def done(self):
        """True once the operation has completed, successfully or not. Never blocks."""
        operation = self._operation
        return operation is None or operation.done()

    def wait(self):
        """Blocks until the operation completes; returns its output or raises RanktimeError."""
        operation = self._operation
        if operation is not None:
            try:
                operation.wait()
                self._result = self._finish(operation)
            except Exception as error:
                self._error = error
                raise
            finally:
                self._operation = None  # the runtime is done with the tensor: let it go
                self._finish = None
                self._release_name()
        if self._error is not None:
            raise self._error
        return self._result

    def _release_name(self):
        if self._name_token is not None:
            _names.release(self._name_token)
            self._name_token = None

    def __del__(self):
        operation = self._operation
        self._operation = None
        try:
            if operation is not None:
                # Never waited on. Whether it has completed by now differs between ranks, so
                # its default name's number is retired rather than released (see _names).
                if not operation.done():
                    _orphans.append(operation)  # freed by _free_orphans once it completes
                return
            self._release_name()
        except Exception:  # interpreter shutdown: the module state may already be gone
            pass

    def __repr__(self):
        state = "done" if self.done() else "pending"
        return "<ranktime.Handle %s %s>" % (self.name, state)


_orphans = []  # operations whose handle was dropped before they completed


def _free_orphans():
    """Lets go of dropped operations that have completed (all of them after shutdown)."""
    _orphans[:] = [operation for operation in _orphans if not operation.done()]


def synchronize(handle):
    """Waits for `handle` and returns the operation's output (Horovod's spelling)."""
    return handle.wait()


def poll(handle):
    """True if `handle` has completed (Horovod's spelling of handle.done())."""
    return handle.done()


def _submit(kind, name, start, framework, buffer, finish):
    if _orphans:
        _free_orphans()
    if name is None:
        full_name, token = _names.acquire(kind)
    elif isinstance(name, str):
        full_name, token = "%s.%s" % (kind, name), None
    else:
        raise TypeError("ranktime: name must be a str or None, got %s" % type(name).__name__)
    try:
        exported, ready_event, keep_alive = framework.export(buffer)
        operation = start(exported, full_name, ready_event, keep_alive)
    except BaseException:
        if token is not None:
            _names.release(token)
        raise
    return Handle(full_name, operation, finish, token)


def _in_place(framework, tensor):
    """(contiguous buffer the runtime works on, tensor to copy it back into or None)."""
    if framework.is_contiguous(tensor):
        return tensor, None
    framework.check_writable(tensor)
    return framework.copy(tensor), tensor


def _submit_on_copy(kind, name, start, tensor, prescale=1.0, postscale=1.0):
    """Runs `start` on a copy of `tensor`, multiplied by `prescale` first and by `postscale` when
    the operation completes; the handle's result is the copy."""
    framework, x = _tensors.classify(tensor)
    buffer = framework.copy(x)
    _scale(framework, buffer, prescale)

    def finish(operation):
        _scale(framework, buffer, postscale)
        return buffer

    return _submit(kind, name, start, framework, buffer, finish)


def _submit_in_place(kind, name, start, tensor, prescale=1.0, postscale=1.0):
    """Runs `start` on `tensor`'s memory (or on a contiguous copy, written back when the
    operation completes), scaled as in _submit_on_copy; the handle's result is `tensor`."""
    framework, x = _tensors.classify(tensor)
    buffer, write_back = _in_place(framework, x)
    _scale(framework, buffer, prescale)

    def finish(operation):
        _scale(framework, buffer, postscale)
        if write_back is not None:
            framework.copy_into(write_back, buffer)
        return tensor

    return _submit(kind, name, start, framework, buffer, finish)


def _scale(framework, buffer, factor):
    if factor != 1.0:
        framework.scale(buffer, float(factor))


def _check_op(op):
    if not isinstance(op, _core.ReduceOp):
        raise TypeError("ranktime: op must be ranktime.Sum, Average, Min, Max or Product, got %r"
                        % (op,))


# --- allreduce ---------------------------------------------------------------------------------

def _allreduce_start(op, process_set):
    _check_op(op)
    process_set_id = _process_sets.id_of(process_set)
    return lambda t, n, e, k: _core.allreduce_async(t, n, op, e, k, process_set_id)


def allreduce_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing `tensor` over all ranks (or those of `process_set`, a ProcessSet) into a
    new tensor; returns a Handle.

    Each rank's tensor is multiplied by prescale_factor before the reduction, the result by
    postscale_factor after it (in float64 for integer types, float32 for 16-bit floats, then
    cast back, truncating toward zero, as Horovod does).
    """
    return _submit_on_copy("allreduce", name, _allreduce_start(op, process_set), tensor,
                           prescale_factor, postscale_factor)


def allreduce_async_(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing `tensor` over all ranks in place; the handle's result is `tensor`."""
    return _submit_in_place("allreduce", name, _allreduce_start(op, process_set), tensor,
                            prescale_factor, postscale_factor)


def allreduce(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns the reduction (default: the average) of `tensor` over all ranks, as a new tensor.

    Average on integer types is the sum divided by the number of ranks (of the process set),
    truncated toward zero.
    """
    return allreduce_async(tensor, name, op, prescale_factor, postscale_factor,
                           process_set).wait()


def allreduce_(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` over all ranks in place and returns it."""
    return allreduce_async_(tensor, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


# --- allgather ---------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (the ranks of `process_set`,
    in rank order); returns a Handle.

    Dimension 0 may differ between ranks; the others must agree.
    """
    process_set_id = _process_sets.id_of(process_set)
    framework, x = _tensors.classify(tensor)
    if len(x.shape) == 0:
        raise ValueError("ranktime: allgather needs a tensor with at least one dimension (it "
                         "concatenates along dimension 0); reshape scalars to [1]")
    source = framework.contiguous(x)

    def finish(operation):
        output = framework.empty_like_on_host(source, operation.output_shape())
        operation.copy_output_into(output)
        return framework.to_device_of(output, source)

    def start(t, n, e, k):
        return _core.allgather_async(t, n, e, k, process_set_id)

    return _submit("allgather", name, start, framework, source, finish)


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's `tensor` concatenated along dimension 0, in rank order."""
    return allgather_async(tensor, name, process_set).wait()


# --- broadcast ---------------------------------------------------------------------------------

def _broadcast_start(root_rank, process_set):
    process_set_id = _process_sets.id_of(process_set)
    return lambda t, n, e, k: _core.broadcast_async(t, root_rank, n, e, k, process_set_id)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's `tensor` to every rank into a new tensor; returns a Handle.
    root_rank is a global rank, also with a process set."""
    return _submit_on_copy("broadcast", name, _broadcast_start(root_rank, process_set), tensor)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root_rank's in place; the handle's result is `tensor`."""
    return _submit_in_place("broadcast", name, _broadcast_start(root_rank, process_set), tensor)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank, as a new tensor."""
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's in place and returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set).wait()
