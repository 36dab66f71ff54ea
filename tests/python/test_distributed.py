"""torch.distributed on the "ranktime" backend: init_process_group with nothing else under
mpirun; every op x dtype checked exactly; asynchronous Work and futures; call names; errors.
Every rank runs the same tests in the same order (see conftest.py)."""

import datetime
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.distributed as dist

import ranktime
from c10d_group import ranktime_process_group  # noqa: F401  (autouse fixture)
from conftest import TORCH_DTYPES, as_float64, assert_exactly, make
from test_ops import contribution, expected_reduction
from test_timeline import CLI, process_names, read_timeline, shared_path

MANAGES_RUNTIME = True  # init_process_group starts ranktime

OPS = {"Sum": dist.ReduceOp.SUM, "Average": dist.ReduceOp.AVG, "Min": dist.ReduceOp.MIN,
       "Max": dist.ReduceOp.MAX, "Product": dist.ReduceOp.PRODUCT}
SHAPE = (3, 5)


def rank():
    return dist.get_rank()


def size():
    return dist.get_world_size()


def tensor(values, dtype):
    return make("torch", values, dtype)


def test_init_process_group_needs_nothing_else():
    assert ranktime.is_initialized()  # no MASTER_ADDR and the like either: see c10d_group.py
    assert dist.get_backend() == "ranktime"
    assert (dist.get_rank(), dist.get_world_size()) == (ranktime.rank(), ranktime.size())


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_all_reduce(dtype, op):
    x = tensor(contribution(rank(), op, dtype), dtype)
    assert dist.all_reduce(x, op=OPS[op]) is None
    assert_exactly(x, "torch", dtype, expected_reduction(op, dtype))


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_broadcast(dtype, root):
    src = 0 if root == "first" else size() - 1
    x = tensor(contribution(rank(), "Sum", dtype), dtype)
    dist.broadcast(x, src=src)
    assert_exactly(x, "torch", dtype, contribution(src, "Sum", dtype))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_all_gather(dtype):
    mine = tensor(contribution(rank(), "Sum", dtype), dtype)
    outputs = [torch.full(SHAPE, 99).to(getattr(torch, dtype)) for _ in range(size())]
    dist.all_gather(outputs, mine)
    for r, output in enumerate(outputs):
        assert_exactly(output, "torch", dtype, contribution(r, "Sum", dtype))


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_all_gather_into_one_tensor(dtype):
    output = torch.zeros((size(),) + SHAPE).to(getattr(torch, dtype))
    dist.all_gather_into_tensor(output, tensor(contribution(rank(), "Sum", dtype), dtype))
    expected = np.stack([contribution(r, "Sum", dtype) for r in range(size())])
    assert_exactly(output, "torch", dtype, expected)


def scatter_input(r, i, op, dtype):
    """Rank r's i-th input of a reduce-scatter: its contribution, rotated by i."""
    return np.roll(contribution(r, op, dtype), i)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_reduce_scatter(dtype, op):
    inputs = [tensor(scatter_input(rank(), i, op, dtype), dtype) for i in range(size())]
    output = torch.zeros(SHAPE).to(getattr(torch, dtype))
    dist.reduce_scatter(output, inputs, op=OPS[op])
    # Element-wise reductions commute with the rotation.
    assert_exactly(output, "torch", dtype, np.roll(expected_reduction(op, dtype), rank()))
    for i, x in enumerate(inputs):  # inputs untouched
        np.testing.assert_array_equal(as_float64(x), scatter_input(rank(), i, op, dtype))


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_reduce_scatter_from_one_tensor(dtype):
    n = size()
    values = np.concatenate([scatter_input(rank(), i, "Sum", dtype) for i in range(n)])
    source = tensor(values, dtype)
    output = torch.zeros(SHAPE).to(getattr(torch, dtype))
    dist.reduce_scatter_tensor(output, source)
    assert_exactly(output, "torch", dtype, np.roll(expected_reduction("Sum", dtype), rank()))
    np.testing.assert_array_equal(as_float64(source), values)


def test_all_gather_object_and_broadcast_object_list():
    gathered = [None] * size()
    dist.all_gather_object(gathered, {"rank": rank(), "text": "x" * (10 * rank())})
    assert gathered == [{"rank": r, "text": "x" * (10 * r)} for r in range(size())]
    objects = [rank(), "from %d" % rank()]
    dist.broadcast_object_list(objects, src=size() - 1)
    assert objects == [size() - 1, "from %d" % (size() - 1)]


def test_all_reduce_coalesced():
    a = torch.full((4,), float(rank() + 1))
    b = torch.full((2, 3), float(rank()))
    dist.all_reduce_coalesced([a, b])
    n = size()
    assert torch.equal(a, torch.full((4,), n * (n + 1) / 2))
    assert torch.equal(b, torch.full((2, 3), n * (n - 1) / 2))


def test_non_contiguous_tensors_are_written_back():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) + 100 * rank()
    columns = base[:, ::2]
    assert not columns.is_contiguous()
    dist.all_reduce(columns)
    n = size()
    expected = torch.arange(24, dtype=torch.float32).reshape(4, 6) * n + 100 * n * (n - 1) / 2
    assert torch.equal(base[:, ::2], expected[:, ::2])
    assert torch.equal(base[:, 1::2], torch.arange(24.).reshape(4, 6)[:, 1::2] + 100 * rank())


def test_async_work_and_futures():
    n = size()
    xs = [torch.full((5,), float(rank() + i)) for i in range(3)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    futures = [w.get_future() for w in works]
    doubled = futures[0].then(lambda fut: fut.value()[0] * 2)
    torch.futures.wait_all(futures)
    for i, (work, future) in enumerate(zip(works, futures)):
        expected = torch.full((5,), n * (n - 1) / 2 + n * i)
        assert work.is_completed() and work.is_success()
        assert torch.equal(future.value()[0], expected)
        assert work.result()[0].data_ptr() == xs[i].data_ptr()  # in place
        assert torch.equal(xs[i], expected)
        assert work.wait()
    assert torch.equal(doubled.wait(), torch.full((5,), float(n * (n - 1))))


def test_barrier_waits_for_earlier_calls():
    x = torch.full((1000,), float(rank()))
    work = dist.all_reduce(x, async_op=True)
    dist.barrier()
    assert work.is_completed()
    assert torch.equal(x, torch.full((1000,), size() * (size() - 1) / 2))


def test_names_repeat_every_round():
    """Calls on the same tensors, step after step, keep their names (one timeline row each)."""
    a, b = torch.ones(3), torch.ones(2, dtype=torch.int64)

    def step():
        dist.all_reduce(a)
        dist.broadcast(b, src=0)
        dist.all_reduce(torch.ones(1))  # a fresh tensor every step: named by its position

    step()  # `a` seen before: every later step starts a new round at c10d.0
    path = shared_path("c10d_names")
    ranktime.start_timeline(path)
    for _ in range(3):
        step()
    ranktime.stop_timeline()
    if rank() != 0:
        return
    events = read_timeline(path)
    names = process_names(events)
    slices = {}
    for e in events:
        if (e.get("ph") in ("B", "X") and e.get("tid") == 1 and e["pid"] in names
                and e["name"] in ("ALLREDUCE", "BROADCAST")):  # not their sub-phases
            slices.setdefault(names[e["pid"]], []).append(e["name"])
    assert slices == {"c10d.0": ["ALLREDUCE"] * 3, "c10d.1": ["BROADCAST"] * 3,
                      "c10d.2": ["ALLREDUCE"] * 3}, slices
    if os.access(CLI, os.X_OK):
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_fresh_tensors_cycle_through_a_bounded_set_of_names():
    path = shared_path("c10d_fresh")
    ranktime.start_timeline(path)
    works = [dist.broadcast(torch.full((1,), i), src=0, async_op=True) for i in range(1100)]
    for w in works:
        w.wait()
    ranktime.stop_timeline()
    if rank() == 0:
        rows = [n for n in process_names(read_timeline(path)).values() if n.startswith("c10d.")]
        assert len(rows) == 1024, len(rows)  # a round ends after 1024 calls


def test_divergent_ranks_get_the_runtime_mismatch_error_on_every_rank():
    # Rank 0 makes a different call at the same point: shape, then kind of call.
    x = torch.ones(2 if rank() == 0 else 3)
    with pytest.raises(RuntimeError, match=r"ranktime: all_reduce 'c10d\.\d+' failed: .*shape"):
        dist.all_reduce(x)
    y = torch.ones(4)
    with pytest.raises(RuntimeError, match=r"'c10d\.\d+' failed: .*(op|operation)"):
        if rank() == 0:
            dist.broadcast(y, src=0)
        else:
            dist.all_reduce(y)
    work = dist.all_reduce(torch.ones(3), async_op=True)  # the runtime carries on
    assert torch.equal(work.get_future().wait()[0], torch.full((3,), float(size())))


def test_a_failed_call_fails_its_future():
    x = torch.ones(1 if rank() == 0 else 2)
    future = dist.all_reduce(x, async_op=True).get_future()
    with pytest.raises(RuntimeError, match="shape"):
        future.wait()


def test_a_collective_from_a_future_callback_is_refused():
    # 32 MiB take milliseconds to reduce: the callback is attached long before the future
    # completes, so it runs on the backend's completion thread on every rank.
    future = dist.all_reduce(torch.ones(8 << 20), async_op=True).get_future()
    chained = future.then(lambda fut: dist.all_reduce(torch.ones(2)))
    with pytest.raises(RuntimeError, match=r"torch\.distributed\.all_reduce was called from a "
                                           r"future's callback"):
        chained.wait()
    assert torch.equal(future.wait()[0][:3], torch.full((3,), float(size())))


@pytest.mark.parametrize("call,run", [
    ("reduce", lambda t: dist.reduce(t, dst=0)),
    ("gather", lambda t: dist.gather(t, [torch.zeros(2) for _ in range(size())]
                                     if rank() == 0 else None, dst=0)),
    ("scatter", lambda t: dist.scatter(t, [torch.zeros(2) for _ in range(size())]
                                       if rank() == 0 else None, src=0)),
    ("all_to_all_single", lambda t: dist.all_to_all_single(torch.zeros(2 * size()),
                                                           torch.zeros(2 * size()))),
    ("send", lambda t: dist.send(t, dst=(rank() + 1) % size())),
    ("recv", lambda t: dist.recv(t, src=(rank() + 1) % size())),
])
def test_unsupported_calls_name_the_call(call, run):
    with pytest.raises(RuntimeError, match=r"torch\.distributed\.%s is not supported by the "
                                           r"ranktime backend" % call):
        run(torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.int16, torch.bool])
def test_unsupported_dtypes_name_the_dtype(dtype):
    with pytest.raises(RuntimeError, match=r"all_reduce: element type %s is not supported"
                                           % str(dtype).replace(".", r"\.")):
        dist.all_reduce(torch.zeros(3, dtype=dtype))


@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR"])
def test_unsupported_reductions_name_the_reduction(op):
    with pytest.raises(RuntimeError, match=r"ReduceOp\.%s is not supported" % op):
        dist.all_reduce(torch.zeros(3, dtype=torch.int32), op=getattr(dist.ReduceOp, op))


def test_all_gather_checks_outputs_locally():
    with pytest.raises(RuntimeError, match="an output tensor is torch.float32 with 3 elements, "
                                           "expected torch.float32 with 2"):
        dist.all_gather([torch.zeros(3) for _ in range(size())], torch.zeros(2))


def test_a_group_of_every_rank_has_its_own_names():
    everyone = dist.new_group(ranks=list(range(size())))
    x = torch.full((2,), float(rank()))
    path = shared_path("c10d_group")
    ranktime.start_timeline(path)
    dist.all_reduce(x, group=everyone)
    ranktime.stop_timeline()
    assert torch.equal(x, torch.full((2,), size() * (size() - 1) / 2))
    if rank() == 0:
        names = set(process_names(read_timeline(path)).values())
        assert any(n.startswith("c10d.%s." % dist.distributed_c10d._pg_names[everyone])
                   for n in names), names


def test_a_subgroup_is_refused_with_a_clear_error():
    # Members fail in the backend; the others time out in torch's start-up barrier for the group.
    match = r"new_group\(ranks=\[0\]\).*span every rank" if rank() == 0 else "Timed out"
    with pytest.raises(RuntimeError, match=match):
        dist.new_group(ranks=[0], timeout=datetime.timedelta(seconds=3))
