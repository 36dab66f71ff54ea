"""ranktime.torch as a drop-in for horovod.torch: Horovod 0.28.1's names, signatures and
defaults; int16; pre/post scale factors; fp16 compression; gradients through the collectives
against a single-process reference; duplicate names raising at the call; a dropped handle that
does not block; optimizer warnings and sparse gradients; allgather_object; their timeline."""

import faulthandler
import inspect
import os
import subprocess
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import ranktime
import ranktime.torch as hvd
from conftest import FRAMEWORK_DTYPES, as_float64
from test_timeline import CLI, read_timeline, shared_path

torch.set_num_threads(1)

# Horovod 0.28.1's horovod/torch/mpi_ops.py, functions.py, optimizer.py, common/basics.py and
# common/process_sets.py: parameter names and defaults, in order ("G" stands for
# global_process_set, "C" for Compression.none, "A" for Average).
HOROVOD_SIGNATURES = {
    "allreduce": "tensor average=None name=None compression=C op=None prescale_factor=1.0 "
                 "postscale_factor=1.0 process_set=G",
    "allreduce_": "tensor average=None name=None op=None prescale_factor=1.0 "
                  "postscale_factor=1.0 process_set=G",
    "allreduce_async": "tensor average=None name=None op=None prescale_factor=1.0 "
                       "postscale_factor=1.0 process_set=G",
    "allreduce_async_": "tensor average=None name=None op=None prescale_factor=1.0 "
                        "postscale_factor=1.0 process_set=G",
    "allgather": "tensor name=None process_set=G",
    "allgather_async": "tensor name=None process_set=G",
    "broadcast": "tensor root_rank name=None process_set=G",
    "broadcast_": "tensor root_rank name=None process_set=G",
    "broadcast_async": "tensor root_rank name=None process_set=G",
    "broadcast_async_": "tensor root_rank name=None process_set=G",
    "grouped_allreduce": "tensors average=None name=None compression=C op=None "
                         "prescale_factor=1.0 postscale_factor=1.0 process_set=G",
    "grouped_allreduce_": "tensors average=None name=None op=None prescale_factor=1.0 "
                          "postscale_factor=1.0 process_set=G",
    "grouped_allreduce_async": "tensors average=None name=None op=None prescale_factor=1.0 "
                               "postscale_factor=1.0 process_set=G",
    "grouped_allreduce_async_": "tensors average=None name=None op=None prescale_factor=1.0 "
                                "postscale_factor=1.0 process_set=G",
    "grouped_allgather": "tensors name=None process_set=G",
    "grouped_allgather_async": "tensors name=None process_set=G",
    "reducescatter": "tensor name=None compression=C op=A process_set=G prescale_factor=1.0 "
                     "postscale_factor=1.0",
    "reducescatter_async": "tensor name=None op=A process_set=G prescale_factor=1.0 "
                           "postscale_factor=1.0",
    "grouped_reducescatter": "tensors name=None compression=C op=A process_set=G "
                             "prescale_factor=1.0 postscale_factor=1.0",
    "grouped_reducescatter_async": "tensors name=None op=A process_set=G prescale_factor=1.0 "
                                   "postscale_factor=1.0",
    "alltoall": "tensor splits=None name=None process_set=G",
    "alltoall_async": "tensor splits=None name=None process_set=G",
    "allgather_object": "obj name=None",
    "broadcast_object": "obj root_rank=0 name=None process_set=G",
    "sparse_allreduce_async": "tensor name op process_set=G",
    "barrier": "process_set=G",
    "join": "device=-1",
    "add_process_set": "process_set",
    "remove_process_set": "process_set",
    "init": "comm=None process_sets=None",
    "broadcast_parameters": "params root_rank",
    "broadcast_optimizer_state": "optimizer root_rank model=None",
    "synchronize": "handle",
    "poll": "handle",
    "DistributedOptimizer": "optimizer named_parameters=None compression=C "
                            "backward_passes_per_step=1 op=A gradient_predivide_factor=1.0 "
                            "num_groups=0 groups=None sparse_as_dense=False process_set=G",
}
HOROVOD_NAMES = ["ProcessSet", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
                 "barrier", "start_timeline", "stop_timeline", "Average", "Sum", "Adasum", "Min",
                 "Max", "Product", "Compression", "HorovodInternalError", "global_process_set",
                 "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "ccl_built",
                 "ddl_built", "rocm_built", "nccl_built"]


def describe(function):
    shorthand = {id(hvd.global_process_set): "G", id(hvd.Compression.none): "C",
                 id(hvd.Average): "A"}
    parts = []
    for p in inspect.signature(function).parameters.values():
        if p.default is inspect.Parameter.empty:
            parts.append(p.name)
        else:
            parts.append("%s=%s" % (p.name, shorthand.get(id(p.default), repr(p.default))))
    return " ".join(parts)


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_signature_is_horovods(name):
    # Parameters may be required in Horovod and defaulted here (root_rank=0), never the reverse.
    ours = describe(getattr(hvd, name)).split()
    theirs = HOROVOD_SIGNATURES[name].split()
    assert [p.split("=")[0] for p in ours[:len(theirs)]] == [p.split("=")[0] for p in theirs]
    for mine, horovods in zip(ours, theirs):
        if "=" in horovods:
            assert mine == horovods


def test_horovod_names_are_exported():
    missing = [n for n in HOROVOD_NAMES + list(HOROVOD_SIGNATURES) if not hasattr(hvd, n)]
    assert not missing
    assert hvd.size() == ranktime.size() and hvd.rank() == ranktime.rank()


def test_average_and_op_arguments():
    n = ranktime.size()
    x = torch.full((4,), float(ranktime.rank() + 1))
    total = n * (n + 1) / 2
    assert torch.equal(hvd.allreduce(x, name="hvd.default"), torch.full((4,), total / n))
    with pytest.warns(DeprecationWarning):
        assert torch.equal(hvd.allreduce(x, False, "hvd.average"), torch.full((4,), total))
    assert torch.equal(hvd.allreduce(x, op=hvd.Max, name="hvd.max"), torch.full((4,), float(n)))
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    assert hvd.Adasum is ranktime.Adasum  # works: test_adasum.py
    with pytest.raises(TypeError, match="process_set must be a ProcessSet"):
        hvd.allreduce(x, process_set=object())


@pytest.mark.parametrize("framework,dtype,prescale,postscale", [
    (f, d, pre, post) for f, d in FRAMEWORK_DTYPES if d in ("int16", "int32", "float16", "float32")
    for pre, post in [(0.5, 1.0), (1.0, 3.0), (0.25, 0.75)] + (
        [(0.3, 0.7)] if d.startswith("int") else [])])  # floats: exact factors, any sum order
def test_prescale_and_postscale(framework, dtype, prescale, postscale):
    """As Horovod: scaled in float64 for integers, float32 for float16, cast back (truncated)."""
    n = ranktime.size()
    values = np.arange(-6, 6, dtype=np.float64) * (ranktime.rank() + 1)
    x = values.astype(dtype) if framework == "numpy" else torch.tensor(values).to(
        getattr(torch, dtype))
    compute = np.float64 if dtype.startswith("int") else np.float32

    def scaled(v, factor):
        return (v.astype(dtype).astype(compute) * compute(factor)).astype(dtype)

    expected = sum(scaled(np.arange(-6, 6, dtype=np.float64) * (r + 1), prescale).astype(
        np.float64) for r in range(n))
    expected = scaled(expected, postscale).astype(np.float64)
    out = ranktime.allreduce(x, name="scaled", op=ranktime.Sum, prescale_factor=prescale,
                             postscale_factor=postscale)
    np.testing.assert_array_equal(as_float64(out), expected)
    ranktime.allreduce_(x, name="scaled_", op=ranktime.Sum, prescale_factor=prescale,
                        postscale_factor=postscale)
    np.testing.assert_array_equal(as_float64(x), expected)


def test_fp16_compression_sends_float16_and_returns_the_input_dtype():
    x = torch.full((8,), 1.5 + ranktime.rank(), dtype=torch.float64)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16")
    n = ranktime.size()
    assert out.dtype == torch.float64
    assert torch.equal(out, torch.full((8,), 1.5 * n + n * (n - 1) / 2, dtype=torch.float64))
    ints = torch.arange(4, dtype=torch.int16)
    assert torch.equal(hvd.allreduce(ints, op=hvd.Sum, compression=hvd.Compression.fp16),
                       ints * n)  # not floating point: sent as it is


def rank_weights(r, shape):
    return torch.arange(np.prod(shape), dtype=torch.float64).reshape(shape) * 0.25 + r


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_gradient_matches_one_process(op):
    """The total loss is the sum of every rank's; each rank's x gets d(total)/dx."""
    n, r = ranktime.size(), ranktime.rank()
    x = (torch.arange(6, dtype=torch.float64).reshape(2, 3) + r).requires_grad_()
    y = hvd.allreduce(x, op=getattr(hvd, op), name="grad.allreduce." + op)
    (y * rank_weights(r, (2, 3))).sum().backward()

    xs = [(torch.arange(6, dtype=torch.float64).reshape(2, 3) + q).requires_grad_()
          for q in range(n)]
    reduced = sum(xs) / (n if op == "Average" else 1)
    sum((reduced * rank_weights(q, (2, 3))).sum() for q in range(n)).backward()
    assert torch.equal(x.grad, xs[r].grad)


def test_allgather_gradient_matches_one_process():
    """Horovod's convention: the total loss is the mean of every rank's (rows differ by rank)."""
    n, r = ranktime.size(), ranktime.rank()
    rows = [q + 1 for q in range(n)]
    x = torch.full((rows[r], 3), float(r), dtype=torch.float64, requires_grad=True)
    gathered = hvd.allgather(x, name="grad.allgather")
    (gathered * rank_weights(r, (sum(rows), 3))).sum().backward()

    xs = [torch.full((rows[q], 3), float(q), dtype=torch.float64, requires_grad=True)
          for q in range(n)]
    everything = torch.cat(xs)
    (sum((everything * rank_weights(q, (sum(rows), 3))).sum() for q in range(n)) / n).backward()
    assert torch.equal(x.grad, xs[r].grad)


def test_broadcast_gradient_matches_one_process():
    """Horovod's convention: the mean of every rank's loss, all of it flowing to the root."""
    n, r, root = ranktime.size(), ranktime.rank(), ranktime.size() - 1
    x = torch.full((5,), float(r), dtype=torch.float64, requires_grad=True)
    (hvd.broadcast(x, root, name="grad.broadcast") * rank_weights(r, (5,))).sum().backward()

    xs = [torch.full((5,), float(q), dtype=torch.float64, requires_grad=True) for q in range(n)]
    (sum((xs[root] * rank_weights(q, (5,))).sum() for q in range(n)) / n).backward()
    expected = xs[r].grad if xs[r].grad is not None else torch.zeros(5, dtype=torch.float64)
    assert torch.equal(x.grad, expected)


def test_second_submit_of_a_name_in_flight_raises_at_once():
    """Horovod's test_horovod_allreduce_duplicate_name_error, including its dropped handles."""
    faulthandler.dump_traceback_later(60, exit=True)  # a deadlock fails the test, not the job
    try:
        x = torch.ones(17)
        # Each rank in turn submits a name of its own twice while no other rank has submitted
        # it, so the first is surely still in flight (with one name for all, the last rank's
        # first submission could complete the allreduce before its second).
        for turn in range(ranktime.size()):
            if ranktime.rank() == turn:
                hvd.allreduce_async(x, name=f"duplicate_name.{turn}")  # dropped while pending
                with pytest.raises(ValueError, match="submitted twice") as error:
                    hvd.allreduce_async(x, name=f"duplicate_name.{turn}")
                assert isinstance(error.value, ranktime.NameInFlightError)
                assert isinstance(error.value, ranktime.RanktimeError)
                assert isinstance(error.value, RuntimeError)
            hvd.barrier()
        # The others complete every rank's pending one.
        others = [hvd.allreduce_async(x, name=f"duplicate_name.{r}")
                  for r in range(ranktime.size()) if r != ranktime.rank()]
        for handle in others:
            hvd.synchronize(handle)
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_dropping_a_pending_handle_does_not_block():
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        x = np.ones(64, dtype=np.float32)
        if ranktime.rank() == 0:
            ranktime.allreduce_async_(x, name="dropped", op=ranktime.Sum)  # others: in barrier
        ranktime.barrier()
        if ranktime.rank() != 0:
            ranktime.allreduce_async_(x, name="dropped", op=ranktime.Sum)
        # Completes after "dropped" on every rank: negotiated later, executed in order.
        ranktime.allreduce(np.ones(1), name="after.dropped")
        np.testing.assert_array_equal(x, np.full(64, float(ranktime.size())))
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_dropped_default_name_is_not_reused():
    def start():
        return ranktime.allreduce_async(np.ones(2))  # one call site, one default name

    first = start()
    assert first.name.endswith(".0")
    del first  # never waited on: its number stays taken on every rank
    second = start()
    assert second.name.endswith(".1")
    second.wait()
    third = start()
    assert third.name.endswith(".1")  # a waited-on handle's number is reused
    third.wait()


def test_step_after_synchronize_warns():
    w = nn.Parameter(torch.ones(2))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                         named_parameters=[("warn.w", w)])
    w.sum().backward()
    optimizer.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        optimizer.step()
    w.grad = None
    w.sum().backward()
    optimizer.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with optimizer.skip_synchronize():
            optimizer.step()
    assert torch.equal(w.detach(), torch.full((2,), -1.0))


def sparse_model():
    embedding = nn.Embedding(10, 3, sparse=True)
    with torch.no_grad():
        embedding.weight.copy_(torch.arange(30, dtype=torch.float32).reshape(10, 3))
    return embedding


def test_sparse_tensors_to_dense_collectives_raise():
    with pytest.raises(ValueError, match="sparse_coo tensors are not supported"):
        hvd.allreduce(torch.eye(3).to_sparse())
    with pytest.raises(ValueError, match="supports Sum and Average"):
        hvd.sparse_allreduce_async(torch.eye(3).to_sparse(), "sparse.max", hvd.Max)


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_sparse_allreduce_async_matches_the_dense_reduction(op):
    n, r = ranktime.size(), ranktime.rank()
    dense = torch.zeros(5 + n, 3, dtype=torch.float64)
    dense[r] = r + 1.0
    dense[n + 2] = 0.5  # every rank: rows that overlap are summed
    handle = hvd.sparse_allreduce_async(dense.to_sparse(), "sparse." + op, getattr(hvd, op))
    expected = torch.zeros_like(dense)
    for q in range(n):
        expected[q] = q + 1.0
    expected[n + 2] = 0.5 * n
    if op == "Average":
        expected /= n
    assert torch.equal(handle().to_dense(), expected)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_in_the_optimizer(sparse_as_dense):
    n = ranktime.size()
    model = sparse_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         named_parameters=[("sparse.%s" % sparse_as_dense,
                                                            model.weight)],
                                         sparse_as_dense=sparse_as_dense)
    model(torch.tensor([ranktime.rank() % 10])).sum().backward()
    optimizer.step()
    assert model.weight.grad.is_sparse
    expected = torch.arange(30, dtype=torch.float32).reshape(10, 3)
    for r in range(n):
        expected[r % 10] -= 1.0 / n
    assert torch.equal(model.weight.detach(), expected)


def test_compression_and_predivide_in_the_optimizer():
    n, r = ranktime.size(), ranktime.rank()
    w = nn.Parameter(torch.zeros(3, dtype=torch.float64))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), [("fp16.w", w)],
                                         hvd.Compression.fp16, gradient_predivide_factor=2.0)
    (w * float(r + 1)).sum().backward()
    optimizer.step()
    assert w.grad.dtype == torch.float64
    assert torch.equal(w.detach(), torch.full((3,), -(n + 1) / 2, dtype=torch.float64))


def test_broadcast_optimizer_state_initialises_a_new_optimizer():
    """As Horovod: no rank has taken a step; the state is created and root's sent."""
    model = nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = [p.detach().clone() for p in model.parameters()]
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    state = optimizer.state_dict()["state"]
    assert len(state) == 2 and all("momentum_buffer" in s for s in state.values())
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())


def test_broadcast_optimizer_state_initialises_locally_in_a_distributed_optimizer():
    """Only root has state; the others' initialising step must not reduce gradients."""
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        model = nn.Linear(3, 2)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if ranktime.rank() == 0:
            model(torch.ones(1, 3)).sum().backward()
            optimizer.step()  # local: root's momentum buffers
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        buffers = torch.cat([s["momentum_buffer"].reshape(-1)
                             for s in optimizer.state_dict()["state"].values()])
        assert torch.equal(hvd.broadcast(buffers, 0, name="momentum"), buffers)
        assert not optimizer._handles
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_allgather_object():
    objects = hvd.allgather_object({"rank": ranktime.rank(), "pad": "x" * ranktime.rank()})
    assert objects == [{"rank": r, "pad": "x" * r} for r in range(ranktime.size())]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_int16_end_to_end(framework):
    n, r = ranktime.size(), ranktime.rank()
    values = np.array([-30000 // n, 1000 * r, -1, 7], dtype=np.int16)
    x = values if framework == "numpy" else torch.from_numpy(values.copy())
    total = sum(np.array([-30000 // n, 1000 * q, -1, 7], dtype=np.int64) for q in range(n))
    np.testing.assert_array_equal(as_float64(ranktime.allreduce(x, op=ranktime.Sum)), total)
    gathered = ranktime.allgather(x)
    assert str(gathered.dtype).endswith("int16") and gathered.shape == (4 * n,)
    np.testing.assert_array_equal(as_float64(ranktime.broadcast(x, n - 1))[1], 1000 * (n - 1))


@pytest.mark.skipif(not os.path.exists(CLI), reason="the ranktime CLI is not built")
def test_timeline_of_the_horovod_calls_passes_check():
    path = shared_path("horovod")
    with ranktime.timeline(path):
        x = torch.ones(4, dtype=torch.float32, requires_grad=True)
        hvd.allreduce(x, name="tl.x").sum().backward()
        hvd.allreduce(torch.arange(4, dtype=torch.int16), name="tl.int16")
        hvd.allgather_object(ranktime.rank(), name="tl.object")
    if ranktime.rank() == 0:
        events = read_timeline(path)
        names = {e.get("args", {}).get("tensor") or e.get("name") for e in events}
        text = " ".join(str(e) for e in events)
        for tensor in ["allreduce.tl.x", "allreduce.tl.x.grad", "allreduce.tl.int16",
                       "allgather.tl.object.size", "allgather.tl.object.data"]:
            assert "'%s'" % tensor in text, (tensor, sorted(n for n in names if n)[:50])
        assert "int16" in text
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    ranktime.barrier()
