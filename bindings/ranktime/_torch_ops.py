"""The collectives as ranktime.torch exports them: Horovod 0.28.1's call shapes and defaults
(``allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)``, ...), gradients
through every collective (allreduce, allgather, broadcast, reducescatter, alltoall and the grouped
forms), Compression, allgather_object. The work is done by
ranktime._collectives; this module only adapts arguments and adds autograd.
"""

import io
import os
import pickle
import warnings

import numpy as np
import torch

from . import _collectives, _core, _names, _process_sets
from ._core import Adasum, Average, Max, Min, Product, Sum
from ._process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

_names.skip_frames_in(os.path.dirname(torch.autograd.function.__file__))


def _resolve_op(op, average, process_set=None):
    """Horovod's rule: op wins, `average` (deprecated) is True -> Average, False -> Sum.
    Adasum where Horovod has it: allreduces (process_set given) over all ranks, a power of two."""
    if op is not None:
        if average is not None:
            raise ValueError("ranktime: the op parameter supersedes average; pass only one")
    elif average is not None:
        warnings.warn("ranktime: parameter `average` is replaced by `op` (as in Horovod)",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    else:
        op = Average
    if op is Adasum:
        if process_set is None:
            raise NotImplementedError("ranktime: Adasum reduces allreduces only (as Horovod's); "
                                      "use Average or Sum")
        if process_set is not global_process_set:  # Horovod's messages
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        size = _core.size()
        if size & (size - 1):
            raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported "
                                      "yet.")
    return op


def _check(tensor, process_set):
    """What every collective checks first: the process set, and that `tensor` is dense."""
    _process_sets.id_of(process_set)
    if isinstance(tensor, torch.Tensor) and tensor.layout != torch.strided:
        raise ValueError(
            "ranktime: %s tensors are not supported by the collectives; pass tensor.to_dense() "
            "or use sparse_allreduce_async" % str(tensor.layout).replace("torch.", ""))


# --- compression -------------------------------------------------------------------------------

class NoneCompressor:
    """No compression (the default)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor:
    """Sends floating-point tensors as float16; other dtypes unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None and ctx.is_floating_point else tensor


class Compression:
    """Gradient compression for allreduce and DistributedOptimizer: none (default) or fp16."""
    none = NoneCompressor
    fp16 = FP16Compressor


# --- allreduce ---------------------------------------------------------------------------------

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks into a new tensor; returns a Handle."""
    _check(tensor, process_set)
    return _collectives.allreduce_async(tensor, name, _resolve_op(op, average, process_set),
                                        prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks in place; the handle's result is `tensor`."""
    _check(tensor, process_set)
    return _collectives.allreduce_async_(tensor, name, _resolve_op(op, average, process_set),
                                         prescale_factor, postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks in place and returns it."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set).wait()


def _grad_name(handle):
    """The backward collective's name: the forward's with ``.grad`` (one timeline row each)."""
    return handle.name.split(".", 1)[1] + ".grad"


class _Allreduce(torch.autograd.Function):
    """The gradient of an allreduce is the same allreduce of the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        handle = _collectives.allreduce_async(tensor, name, op, prescale_factor,
                                              postscale_factor, process_set)
        ctx.args = (_grad_name(handle), op, prescale_factor, postscale_factor, process_set)
        return handle.wait()

    @staticmethod
    def backward(ctx, grad_output):
        return (_collectives.allreduce(grad_output.contiguous(), *ctx.args), None, None, None,
                None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction (default: the average) of `tensor` over all ranks, as a new tensor;
    gradients flow through it. `compression` applies to what is sent (Compression.fp16: float
    tensors travel as float16)."""
    _check(tensor, process_set)
    op = _resolve_op(op, average, process_set)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                               process_set)
    return compression.decompress(reduced, ctx)


class _SparseHandle:
    """sparse_allreduce_async's handle: call it (as in Horovod) or wait() for the result."""

    def __init__(self, tensor, name, op, process_set):
        self._shape, self._op, self._process_set = tensor.shape, op, process_set
        # Rows of indices, so that allgather's concatenation along dimension 0 joins them.
        self._indices = _collectives.allgather_async(
            tensor._indices().transpose(0, 1).contiguous(), name + ".indices", process_set)
        self._values = _collectives.allgather_async(tensor._values(), name + ".values",
                                                    process_set)

    def wait(self):
        values = self._values.wait()
        indices = self._indices.wait()
        if self._op is Average:
            values = values / _process_sets.size_of(self._process_set)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, self._shape)

    __call__ = wait

    def done(self):
        return self._indices.done() and self._values.done()


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Sums (op=Sum) or averages (op=Average) a sparse COO tensor over all ranks, as Horovod:
    two allgathers, ``allgather.<name>.indices`` and ``allgather.<name>.values``; the result
    (from ``handle()`` or ``handle.wait()``) is uncoalesced."""
    _process_sets.id_of(process_set)
    if op is not Sum and op is not Average:
        raise ValueError("ranktime: sparse_allreduce_async supports Sum and Average, not %r"
                         % (op,))
    return _SparseHandle(tensor, name, op, process_set)


# --- allgather ---------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0; returns a Handle."""
    _check(tensor, process_set)
    return _collectives.allgather_async(tensor, name, process_set)


class _Allgather(torch.autograd.Function):
    """Horovod's gradient: the output's gradient averaged over ranks, this rank's rows of it."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        handle = _collectives.allgather_async(tensor, name, process_set)
        ctx.rows = tensor.shape[0]
        ctx.name = _grad_name(handle)
        ctx.process_set = process_set
        return handle.wait()

    @staticmethod
    def backward(ctx, grad_output):
        reduced = _collectives.allreduce(grad_output.contiguous(), ctx.name, Average,
                                         process_set=ctx.process_set)
        rows = _collectives.allgather(torch.tensor([ctx.rows], dtype=torch.int64),
                                      ctx.name + ".rows", ctx.process_set)
        offset = int(rows[:_process_sets.rank_in(ctx.process_set)].sum())
        return reduced.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's `tensor` concatenated along dimension 0, in rank order; gradients
    flow through it."""
    _check(tensor, process_set)
    return _Allgather.apply(tensor, name, process_set)


# --- broadcast ---------------------------------------------------------------------------------

def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's `tensor` to every rank into a new tensor; returns a Handle."""
    _check(tensor, process_set)
    return _collectives.broadcast_async(tensor, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root_rank's in place; the handle's result is `tensor`."""
    _check(tensor, process_set)
    return _collectives.broadcast_async_(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's in place and returns it."""
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


class _Broadcast(torch.autograd.Function):
    """Horovod's gradient: the output's gradient averaged over ranks on the root, zero
    elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        handle = _collectives.broadcast_async(tensor, root_rank, name, process_set)
        ctx.root_rank = root_rank
        ctx.name = _grad_name(handle)
        ctx.process_set = process_set
        return handle.wait()

    @staticmethod
    def backward(ctx, grad_output):
        reduced = _collectives.allreduce(grad_output.contiguous(), ctx.name, Average,
                                         process_set=ctx.process_set)
        if _core.rank() != ctx.root_rank:
            reduced.zero_()
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank, as a new tensor; gradients flow through it."""
    _check(tensor, process_set)
    return _Broadcast.apply(tensor, root_rank, name, process_set)


# --- grouped allreduce and allgather -----------------------------------------------------------

def _check_all(tensors, process_set):
    _process_sets.id_of(process_set)
    for tensor in tensors:
        _check(tensor, process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing every tensor of `tensors` (one negotiation, one fused execution, all or
    nothing); the handle's result is the list of new tensors."""
    _check_all(tensors, process_set)
    op = _resolve_op(op, average, process_set)
    return _collectives.grouped_allreduce_async(tensors, name, op, prescale_factor,
                                                postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing every tensor of `tensors` in place; the handle's result is `tensors`."""
    _check_all(tensors, process_set)
    op = _resolve_op(op, average, process_set)
    return _collectives.grouped_allreduce_async_(tensors, name, op, prescale_factor,
                                                 postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces every tensor of `tensors` in place and returns them."""
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()


class _GroupedAllreduce(torch.autograd.Function):
    """The gradient of a grouped allreduce is the same grouped allreduce of the gradients."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        handle = _collectives.grouped_allreduce_async(list(tensors), name, op, prescale_factor,
                                                      postscale_factor, process_set)
        ctx.args = (_grad_name(handle), op, prescale_factor, postscale_factor, process_set)
        return tuple(handle.wait())

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = _collectives.grouped_allreduce([g.contiguous() for g in grad_outputs], *ctx.args)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of every tensor of `tensors` over all ranks (one negotiation, one
    fused execution, all or nothing), as new tensors; gradients flow through it."""
    _check_all(tensors, process_set)
    op = _resolve_op(op, average, process_set)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering every tensor of `tensors` as one group; returns a Handle."""
    _check_all(tensors, process_set)
    return _collectives.grouped_allgather_async(tensors, name, process_set)


class _GroupedAllgather(torch.autograd.Function):
    """Horovod's gradient, per tensor: as allgather's."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        handle = _collectives.grouped_allgather_async(list(tensors), name, process_set)
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.name = _grad_name(handle)
        ctx.process_set = process_set
        return tuple(handle.wait())

    @staticmethod
    def backward(ctx, *grad_outputs):
        reduced = _collectives.grouped_allreduce([g.contiguous() for g in grad_outputs], ctx.name,
                                                 Average, process_set=ctx.process_set)
        rows = _collectives.allgather(torch.tensor(ctx.rows, dtype=torch.int64).reshape(1, -1),
                                      ctx.name + ".rows", ctx.process_set)
        offsets = rows[:_process_sets.rank_in(ctx.process_set)].sum(0)
        return (None, None, *[r.narrow(0, int(offset), n)
                              for r, offset, n in zip(reduced, offsets, ctx.rows)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns every tensor of `tensors` concatenated over the ranks along dimension 0, as one
    group; gradients flow through it."""
    _check_all(tensors, process_set)
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


# --- reducescatter -----------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over all ranks and splitting the result along dimension 0 (the
    first dim0 % size() ranks get one row more); returns a Handle."""
    _check(tensor, process_set)
    return _collectives.reducescatter_async(tensor, name, _resolve_op(op, None), prescale_factor,
                                            postscale_factor, process_set)


def _reducescatter_gradients(ctx, grad_outputs):
    """Horovod's gradient of a reducescatter: the output's gradient allgathered, times the
    number of ranks (of the process set) for Sum, times the scale factors."""
    factor = ((_process_sets.size_of(ctx.process_set) if ctx.op is Sum else 1) * ctx.prescale *
              ctx.postscale)
    return [g.contiguous() * factor if factor != 1 else g.contiguous() for g in grad_outputs]


def _remember(ctx, handle, op, prescale_factor, postscale_factor, process_set):
    """What a reducescatter's backward needs (_reducescatter_gradients)."""
    ctx.op, ctx.prescale, ctx.postscale = op, prescale_factor, postscale_factor
    ctx.process_set = process_set
    ctx.name = _grad_name(handle)


class _Reducescatter(torch.autograd.Function):

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        handle = _collectives.reducescatter_async(tensor, name, op, prescale_factor,
                                                  postscale_factor, process_set)
        _remember(ctx, handle, op, prescale_factor, postscale_factor, process_set)
        return handle.wait()

    @staticmethod
    def backward(ctx, grad_output):
        grad, = _reducescatter_gradients(ctx, [grad_output])
        return (_collectives.allgather(grad, ctx.name, ctx.process_set), None, None, None, None,
                None)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's part (dimension 0) of the reduction of `tensor` over all ranks;
    gradients flow through it (Horovod's: see docs/python.md)."""
    _check(tensor, process_set)
    op = _resolve_op(op, None)
    compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(compressed, name, op, prescale_factor, postscale_factor,
                                   process_set)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of `tensors` as one group; returns a Handle."""
    _check_all(tensors, process_set)
    return _collectives.grouped_reducescatter_async(tensors, name, _resolve_op(op, None),
                                                    prescale_factor, postscale_factor,
                                                    process_set)


class _GroupedReducescatter(torch.autograd.Function):

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        handle = _collectives.grouped_reducescatter_async(list(tensors), name, op,
                                                          prescale_factor, postscale_factor,
                                                          process_set)
        _remember(ctx, handle, op, prescale_factor, postscale_factor, process_set)
        return tuple(handle.wait())

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = _reducescatter_gradients(ctx, grad_outputs)
        return (None, None, None, None, None,
                *_collectives.grouped_allgather(grads, ctx.name, ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Returns this rank's part of the reduction of every tensor of `tensors`, as one group;
    gradients flow through it."""
    _check_all(tensors, process_set)
    op = _resolve_op(op, None)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedReducescatter.apply(name, op, prescale_factor, postscale_factor,
                                          process_set, *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(reduced, ctxs)]


# --- alltoall ----------------------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows of `tensor` to rank r; the handle's result is
    (output, received_splits), as Horovod's synchronize() returns it."""
    _check(tensor, process_set)
    return _collectives.alltoall_async(tensor, splits, name, process_set)


class _Alltoall(torch.autograd.Function):
    """The gradient of an alltoall is the alltoall of the output's gradient back, with the
    received splits as splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        handle = _collectives.alltoall_async(tensor, splits, name, process_set)
        output, received_splits = handle.wait()
        ctx.received_splits = received_splits
        ctx.name = _grad_name(handle)
        ctx.process_set = process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = _collectives.alltoall(grad_output.contiguous(), ctx.received_splits, ctx.name,
                                        ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[r] rows (dimension 0) of `tensor` to rank r and returns the rows every rank
    sent this one, in rank order; with `splits`, (output, received_splits) as in Horovod
    (received_splits: int32, on the device of `splits` when it is a tensor). Without splits,
    dimension 0 is divided evenly. Gradients flow through it."""
    _check(tensor, process_set)
    result = _Alltoall.apply(tensor, splits, name, process_set)
    if isinstance(splits, torch.Tensor) and splits.device != result[1].device:
        return result[0], result[1].to(splits.device)
    return result


# --- objects -----------------------------------------------------------------------------------

def allgather_object(obj, name=None):
    """Returns the list of every rank's `obj` (any picklable object), in rank order.

    Sent as two allgathers, ``allgather.<name>.size`` and ``allgather.<name>.data``; `name`
    defaults to the object's type name, as in Horovod.
    """
    if name is None:
        name = type(obj).__name__
    payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    sizes = _collectives.allgather(np.array([payload.size], dtype=np.int64), name + ".size")
    gathered = _collectives.allgather(payload, name + ".data")
    ends = np.cumsum(sizes)
    return [pickle.loads(gathered[end - size:end].tobytes()) for size, end in zip(sizes, ends)]


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (any picklable object) on every rank (of `process_set`).

    Sent as two broadcasts, ``broadcast.<name>.size`` and ``broadcast.<name>.data``; `name`
    defaults to ``object``.
    """
    if name is None:
        name = "object"
    if _core.rank() == root_rank:
        buffer = io.BytesIO()
        torch.save(obj, buffer, pickle_protocol=pickle.HIGHEST_PROTOCOL)
        payload = np.frombuffer(buffer.getbuffer(), dtype=np.uint8).copy()
        size = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        size = np.zeros(1, dtype=np.int64)
    _collectives.broadcast_(size, root_rank, name + ".size", process_set)
    if payload is None:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    _collectives.broadcast_(payload, root_rank, name + ".data", process_set)
    # Any object of root_rank's (as Horovod's, which unpickles it): torch 2.6 made torch.load's
    # weights_only=True the default, which refuses most objects.
    return torch.load(io.BytesIO(payload.tobytes()), weights_only=False)


__all__ = [
    "Adasum", "Average", "Compression", "Max", "Min", "Product", "Sum", "global_process_set",
    "ProcessSet", "add_process_set", "remove_process_set",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "allgather_object",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object",
    "reducescatter", "reducescatter_async", "alltoall", "alltoall_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
]
