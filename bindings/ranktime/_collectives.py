"""allreduce, allgather, broadcast, reducescatter, alltoall and their grouped forms on the caller's
tensors, and the handles they return.

Every operation is asynchronous underneath: the ``*_async`` forms return a Handle at once, the
plain forms wait for it. The runtime works in place on contiguous memory, so out-of-place forms
reduce or receive into a fresh contiguous copy, and in-place forms on a non-contiguous tensor work
on a contiguous copy that is written back when the handle completes.
"""

import numbers

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


class _Group:
    """A group's operations (one per tensor), waited on and polled as one."""

    __slots__ = ("operations",)

    def __init__(self, operations):
        self.operations = operations

    def done(self):
        return all(operation.done() for operation in self.operations)

    def wait(self):
        errors = []
        for operation in self.operations:  # every one, so that none is left running
            try:
                operation.wait()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]


def _start(kind, name, launch, finish):
    """Names the operation (`name` or a default one, see _names), starts it with
    launch(full_name) and returns its Handle, whose result is finish(operation)."""
    if _orphans:
        _free_orphans()
    if name is None:
        full_name, token = _names.acquire(kind)
    elif isinstance(name, str):
        full_name, token = "%s.%s" % (kind, name), None
    else:
        raise TypeError("ranktime: name must be a str or None, got %s" % type(name).__name__)
    try:
        operation = launch(full_name)
    except _core.InvalidArgumentError:
        raise  # the request went to rank 0 under this name (to fail the other ranks): it stays taken
    except BaseException:
        if token is not None:
            _names.release(token)
        raise
    return Handle(full_name, operation, finish, token)


def _submit(kind, name, start, framework, buffer, finish):
    """Starts start(exported buffer, full name, ready event, keep alive) on `buffer`."""
    def launch(full_name):
        exported, ready_event, keep_alive = framework.export(buffer)
        return start(exported, full_name, ready_event, keep_alive)

    return _start(kind, name, launch, finish)


def _submit_group(kind, name, start, prepared):
    """Starts a group: `prepared` holds (framework, buffer, result) per tensor (see _on_copy);
    start(buffers, full name, ready events, keep alives) returns one operation per buffer. The
    handle's result is the list of result(operation)."""
    if not prepared:
        raise ValueError("ranktime: %s needs at least one tensor" % kind)

    def launch(full_name):
        exported = [framework.export(buffer) for framework, buffer, _ in prepared]
        return _Group(start([e[0] for e in exported], full_name, [e[1] for e in exported],
                            [e[2] for e in exported]))

    def finish(group):
        return [result(operation) for (_, _, result), operation in zip(prepared, group.operations)]

    return _start(kind, name, launch, finish)


def _in_place(framework, tensor):
    """(contiguous buffer the runtime works on, tensor to copy it back into or None)."""
    if framework.is_contiguous(tensor):
        return tensor, None
    framework.check_writable(tensor)
    return framework.copy(tensor), tensor


def _on_copy(tensor, prescale=1.0, postscale=1.0):
    """(framework, buffer, result) for an operation on a copy of `tensor` multiplied by
    `prescale`; result(operation) multiplies the copy by `postscale` and returns it."""
    framework, x = _tensors.classify(tensor)
    buffer = framework.copy(x)
    _scale(framework, buffer, prescale)

    def result(operation):
        _scale(framework, buffer, postscale)
        return buffer

    return framework, buffer, result


def _on_tensor(tensor, prescale=1.0, postscale=1.0):
    """The same on `tensor`'s own memory (or on a contiguous copy, written back when the operation
    completes); result(operation) returns `tensor`."""
    framework, x = _tensors.classify(tensor)
    buffer, write_back = _in_place(framework, x)
    _scale(framework, buffer, prescale)

    def result(operation):
        _scale(framework, buffer, postscale)
        if write_back is not None:
            framework.copy_into(write_back, buffer)
        return tensor

    return framework, buffer, result


def _into_output(tensor, prescale=1.0, postscale=1.0):
    """The same for an operation whose result is a new tensor (allgather, reducescatter, alltoall):
    `tensor` is sent as it is (a copy when it must be scaled or made contiguous); result(operation)
    is the output, in tensor's framework and on its device, multiplied by `postscale`."""
    framework, x = _tensors.classify(tensor)
    source = framework.copy(x) if prescale != 1.0 else framework.contiguous(x)
    _scale(framework, source, prescale)

    def result(operation):
        output = framework.empty_like_on_host(source, operation.output_shape())
        operation.copy_output_into(output)
        _scale(framework, output, postscale)
        return framework.to_device_of(output, source)

    return framework, source, result


def _submit_on_copy(kind, name, start, tensor, prescale=1.0, postscale=1.0):
    """Runs `start` on a copy of `tensor` (see _on_copy); the handle's result is the copy."""
    framework, buffer, result = _on_copy(tensor, prescale, postscale)
    return _submit(kind, name, start, framework, buffer, result)


def _submit_in_place(kind, name, start, tensor, prescale=1.0, postscale=1.0):
    """Runs `start` on `tensor` in place (see _on_tensor); the handle's result is `tensor`."""
    framework, buffer, result = _on_tensor(tensor, prescale, postscale)
    return _submit(kind, name, start, framework, buffer, result)


def _scale(framework, buffer, factor):
    if factor != 1.0:
        framework.scale(buffer, float(factor))


def _check_op(op):
    if not isinstance(op, _core.ReduceOp):
        raise TypeError("ranktime: op must be ranktime.Sum, Average, Min, Max, Product or Adasum, "
                        "got %r" % (op,))


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
    return _submit("allgather", name,
                   lambda t, n, e, k: _core.allgather_async(t, n, e, k, process_set_id),
                   *_into_output(x))


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


# --- reducescatter -----------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
    """Starts reducing `tensor` over all ranks (or those of `process_set`) and splitting the
    result along dimension 0; returns a Handle whose result is this rank's part, a new tensor.

    Every rank's tensor must have the same shape. Of n ranks, rank r (its place in the set) gets
    dim0 // n rows, the first dim0 % n ranks one more (Horovod's split), in rank order. Scale
    factors as allreduce's.
    """
    _check_op(op)
    process_set_id = _process_sets.id_of(process_set)
    return _submit("reducescatter", name,
                   lambda t, n, e, k: _core.reducescatter_async(t, n, op, e, k, process_set_id),
                   *_into_output(tensor, prescale_factor, postscale_factor))


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Returns this rank's part (dimension 0) of the reduction of `tensor` over all ranks."""
    return reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                               process_set).wait()


# --- alltoall ----------------------------------------------------------------------------------

def _split_list(splits):
    """`splits` (None, a sequence, a NumPy array or a torch tensor of integers) as a list."""
    if splits is None:
        return []
    if hasattr(splits, "tolist") and hasattr(splits, "dtype"):
        kind = str(splits.dtype).replace("torch.", "")
        if not kind.startswith(("int", "uint")):
            raise ValueError("ranktime: alltoall splits must hold integers, not %s" % kind)
        if len(splits.shape) != 1:
            raise ValueError("ranktime: alltoall splits must be one-dimensional, not of shape %s"
                             % (tuple(splits.shape),))
        splits = splits.tolist()
    values = list(splits)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError("ranktime: alltoall splits must hold integers, got %r" % (v,))
        if not -2**31 <= v < 2**31:
            raise ValueError("ranktime: alltoall split %d does not fit 32 bits" % v)
    return [int(v) for v in values]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows (dimension 0) of `tensor` to rank r; returns a Handle whose
    result is (output, received_splits): the rows every rank sent this one, in rank order, and
    how many came from each (int32, in tensor's framework). With `process_set`, r is the rank's
    place in the set and there is one split per member.

    Without splits, dimension 0 is divided evenly (it must divide by the number of ranks). As in
    Horovod the splits may sum to less than dimension 0 (the rest is not sent), never to more.
    """
    split_list = _split_list(splits)
    process_set_id = _process_sets.id_of(process_set)
    framework, source, output = _into_output(tensor)

    def result(operation):
        return output(operation), framework.int32_vector(operation.received_splits())

    return _submit("alltoall", name,
                   lambda t, n, e, k: _core.alltoall_async(t, split_list, n, e, k, process_set_id),
                   framework, source, result)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns the rows every rank sent this one (see alltoall_async); with `splits`, as Horovod,
    also how many came from each rank: (output, received_splits)."""
    output, received_splits = alltoall_async(tensor, splits, name, process_set).wait()
    return output if splits is None else (output, received_splits)


# --- grouped operations ------------------------------------------------------------------------
# One negotiation for the group (it is ready when every tensor is ready on every rank), one fused
# execution per dtype, and all or nothing: a problem with one tensor fails every tensor of the
# group on every rank. The handle's result is the list of results, in order. Tensor i is named
# ``<kind>.<name>_<i+1>of<n>`` (Horovod's names).

def _grouped_allreduce(prepare, tensors, name, op, prescale_factor, postscale_factor,
                       process_set):
    """A group allreduce of `tensors`, each prepared by `prepare` (_on_copy or _on_tensor)."""
    _check_op(op)
    process_set_id = _process_sets.id_of(process_set)
    return _submit_group(
        "grouped_allreduce", name,
        lambda ts, n, es, ks: _core.grouped_allreduce_async(ts, n, op, es, ks, process_set_id),
        [prepare(t, prescale_factor, postscale_factor) for t in tensors])


def grouped_allreduce_async(tensors, name=None, op=Average, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing every tensor of `tensors` over all ranks, into new tensors."""
    return _grouped_allreduce(_on_copy, tensors, name, op, prescale_factor, postscale_factor,
                              process_set)


def grouped_allreduce_async_(tensors, name=None, op=Average, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing every tensor of `tensors` over all ranks, in place."""
    return _grouped_allreduce(_on_tensor, tensors, name, op, prescale_factor, postscale_factor,
                              process_set)


def grouped_allreduce(tensors, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Returns the reduction of every tensor of `tensors` over all ranks, as new tensors."""
    return grouped_allreduce_async(tensors, name, op, prescale_factor, postscale_factor,
                                   process_set).wait()


def grouped_allreduce_(tensors, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces every tensor of `tensors` over all ranks in place and returns them."""
    return grouped_allreduce_async_(tensors, name, op, prescale_factor, postscale_factor,
                                    process_set).wait()


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering every tensor of `tensors` (see allgather_async)."""
    process_set_id = _process_sets.id_of(process_set)
    prepared = [_into_output(t) for t in tensors]
    if any(len(buffer.shape) == 0 for _, buffer, _ in prepared):
        raise ValueError("ranktime: allgather needs tensors with at least one dimension (it "
                         "concatenates along dimension 0); reshape scalars to [1]")
    return _submit_group(
        "grouped_allgather", name,
        lambda ts, n, es, ks: _core.grouped_allgather_async(ts, n, es, ks, process_set_id),
        prepared)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns every tensor of `tensors` concatenated over the ranks along dimension 0."""
    return grouped_allgather_async(tensors, name, process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=global_process_set):
    """Starts a reducescatter of every tensor of `tensors` (see reducescatter_async)."""
    _check_op(op)
    process_set_id = _process_sets.id_of(process_set)
    return _submit_group(
        "grouped_reducescatter", name,
        lambda ts, n, es, ks: _core.grouped_reducescatter_async(ts, n, op, es, ks,
                                                                process_set_id),
        [_into_output(t, prescale_factor, postscale_factor) for t in tensors])


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
    """Returns this rank's part of the reduction of every tensor of `tensors`."""
    return grouped_reducescatter_async(tensors, name, op, prescale_factor, postscale_factor,
                                       process_set).wait()
