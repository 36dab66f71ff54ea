"""torch.distributed on the "ranktime" backend: init_process_group with nothing else under
mpirun; every op x dtype checked exactly; asynchronous Work and futures; call names; errors.
Every rank runs the same tests in the same order (see conftest.py)."""

import datetime
import os
import re
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


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_reduce_scatter_from_one_tensor(dtype, op):
    n = size()
    values = np.concatenate([scatter_input(rank(), i, op, dtype) for i in range(n)])  # (3n, 5)
    source = tensor(values, dtype)
    output = torch.zeros(SHAPE).to(getattr(torch, dtype))
    dist.reduce_scatter_tensor(output, source, op=OPS[op])
    assert_exactly(output, "torch", dtype, np.roll(expected_reduction(op, dtype), rank()))
    np.testing.assert_array_equal(as_float64(source), values)


def test_reduce_scatter_of_non_contiguous_and_empty_tensors():
    n = size()
    source = (torch.arange(4 * n * 2, dtype=torch.float32).reshape(2, 4 * n) + rank()).t()
    assert not source.is_contiguous()
    output = torch.zeros(4, 4)[:, ::2]  # a strided view of another tensor
    dist.reduce_scatter_tensor(output, source)
    expected = torch.arange(4 * n * 2, dtype=torch.float32).reshape(2, 4 * n).t() * n \
        + n * (n - 1) / 2
    assert torch.equal(output, expected[4 * rank():4 * rank() + 4])
    empty = torch.zeros(0, 3)
    dist.reduce_scatter(empty, [torch.ones(0, 3) for _ in range(n)])
    dist.reduce_scatter_tensor(empty, torch.ones(0, 3))
    assert empty.shape == (0, 3)


def rows(frm, to, count, width=2):
    """The rows rank `frm` sends rank `to` in an all-to-all: small integers (exact in every
    dtype); no two ranks' blocks alike (for up to 4 ranks), nor two rows of a block."""
    return np.array([[16 * frm + 4 * to + 2 * k + c for c in range(width)] for k in range(count)],
                    dtype=np.float64).reshape(count, width)


def uneven(frm, to):
    """How many rows rank `frm` sends rank `to` in the uneven tests: 0, 1 or 2."""
    return (frm + 2 * to) % 3


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_all_to_all_single_even(dtype):
    n = size()
    source = tensor(np.concatenate([rows(rank(), q, 2, width=3) for q in range(n)]), dtype)
    output = torch.zeros(2 * n, 3).to(getattr(torch, dtype))
    dist.all_to_all_single(output, source)
    assert_exactly(output, "torch", dtype,
                   np.concatenate([rows(q, rank(), 2, width=3) for q in range(n)]))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_all_to_all_single_uneven_splits(dtype):
    n, r = size(), rank()
    sends = [uneven(r, q) for q in range(n)]  # some ranks send some others nothing
    receives = [uneven(q, r) for q in range(n)]
    source = tensor(np.concatenate([rows(r, q, sends[q]) for q in range(n)]), dtype)
    output = torch.full((sum(receives), 2), 99).to(getattr(torch, dtype))
    dist.all_to_all_single(output, source, output_split_sizes=receives, input_split_sizes=sends)
    assert_exactly(output, "torch", dtype,
                   np.concatenate([rows(q, r, receives[q]) for q in range(n)]))


def test_all_to_all_single_non_contiguous():
    n = size()
    source = torch.tensor(np.concatenate([rows(rank(), q, 2, width=4) for q in range(n)])).t()
    source = source.contiguous().t()  # the same values, column-major
    assert not source.is_contiguous()
    output = torch.zeros(2 * n, 8, dtype=torch.float64)[:, ::2]
    dist.all_to_all_single(output, source)
    expected = np.concatenate([rows(q, rank(), 2, width=4) for q in range(n)])
    np.testing.assert_array_equal(output.numpy(), expected)


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_all_to_all(dtype):
    """Rank r sends rank q a tensor of (r + 1) x (q + 1): every shape differs."""
    n, r = size(), rank()
    inputs = [tensor(rows(r, q, r + 1, width=q + 1), dtype) for q in range(n)]
    outputs = [torch.zeros(r + 1, q + 1).to(getattr(torch, dtype)).t() for q in range(n)]  # strided
    dist.all_to_all(outputs, inputs)
    for q, output in enumerate(outputs):
        assert_exactly(output, "torch", dtype, rows(q, r, q + 1, width=r + 1))
    for q, x in enumerate(inputs):  # inputs untouched
        np.testing.assert_array_equal(as_float64(x), rows(r, q, r + 1, width=q + 1))


def test_reduce_scatter_and_all_to_all_are_asynchronous_with_futures():
    n, r = size(), rank()
    scattered, from_one = torch.zeros(4), torch.zeros(4)
    single, listed = torch.zeros(n, dtype=torch.int64), [torch.zeros(2) for _ in range(n)]
    works = [
        dist.reduce_scatter(scattered, [torch.full((4,), float(r + i)) for i in range(n)],
                            async_op=True),
        dist.reduce_scatter_tensor(from_one, torch.arange(4. * n) + r, async_op=True),
        dist.all_to_all_single(single, torch.arange(n) + 10 * r, async_op=True),
        dist.all_to_all(listed, [torch.full((2,), float(10 * r + q)) for q in range(n)],
                        async_op=True),
    ]
    futures = [w.get_future() for w in works]
    torch.futures.wait_all(futures)
    outputs = [[scattered], [from_one], [single], listed]
    for work, future, output in zip(works, futures, outputs):
        assert work.is_completed() and work.is_success()
        assert [t.data_ptr() for t in future.value()] == [t.data_ptr() for t in output]
        assert [t.data_ptr() for t in work.result()] == [t.data_ptr() for t in output]
        assert work.wait()
    assert torch.equal(scattered, torch.full((4,), n * r + n * (n - 1) / 2))
    assert torch.equal(from_one, torch.arange(4. * r, 4. * r + 4) * n + n * (n - 1) / 2)
    assert torch.equal(single, torch.tensor([10 * q + r for q in range(n)]))
    assert all(torch.equal(t, torch.full((2,), float(10 * q + r))) for q, t in enumerate(listed))


@pytest.mark.parametrize("case", ["receiver_expects_other_splits", "sender_sends_more"])
def test_all_to_all_single_split_disagreement_fails_the_receiver(case):
    """What arrives differs from what a rank's output_split_sizes expect: that rank's call fails,
    naming both; the other ranks' calls complete (they got what they expected); nothing hangs."""
    n, r = size(), rank()
    sends, receives, arrives, failing = [2] * n, [2] * n, [2] * n, 0
    if case == "receiver_expects_other_splits" and r == 0:
        receives = [1, 3] + [2] * (n - 2)
    if case == "sender_sends_more":  # rank 0 sends rank 1 a row more than rank 1 expects
        failing = 1
        sends = [2, 3] + [2] * (n - 2) if r == 0 else sends
        arrives = [3] + [2] * (n - 1)
    source, output = torch.zeros(sum(sends)), torch.zeros(sum(receives))
    work = dist.all_to_all_single(output, source, receives, sends, async_op=True)
    if r == failing:
        text = lambda splits: ", ".join(map(str, splits))  # noqa: E731
        with pytest.raises(RuntimeError, match=r"all_to_all_single 'c10d\.\d+': the ranks sent "
                                               r"this rank \[%s\] rows \(from rank 0, 1, \.\.\.\), "
                                               r"but output_split_sizes says \[%s\]"
                                               % (text(arrives), text(receives))):
            work.wait()
    else:
        assert work.wait()
    x = torch.ones(3)  # the runtime carries on
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(n)))


@pytest.mark.parametrize("call", ["all_to_all_single", "reduce_scatter_tensor"])
def test_a_dtype_that_differs_between_ranks_fails_every_rank(call):
    n = size()
    dtype = torch.int32 if rank() == 0 else torch.float32
    output = torch.zeros(n if call == "all_to_all_single" else 1, dtype=dtype)
    with pytest.raises(RuntimeError, match=r"%s 'c10d\.\d+' failed: .*dtype differs between "
                                           r"ranks" % call):
        getattr(dist, call)(output, torch.ones(n, dtype=dtype))
    x = torch.ones(3)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(n)))


WRONG_ALL_TO_ALL_SINGLE = {  # n ranks -> (output, input, keyword arguments, message)
    "input splits that do not add up": lambda n: (
        torch.zeros(2 * n), torch.zeros(2 * n), {"input_split_sizes": [1] * n},
        re.escape("input_split_sizes %s sum to %d rows, but dimension 0 has %d"
                  % ([1] * n, n, 2 * n))),
    "output splits for too many ranks": lambda n: (
        torch.zeros(2 * n), torch.zeros(2 * n), {"output_split_sizes": [2] * n + [0]},
        "output_split_sizes has %d entries for %d ranks" % (n + 1, n)),
    "a negative split": lambda n: (
        torch.zeros(2 * n), torch.zeros(2 * n), {"input_split_sizes": [2 * n + 1] + [-1] * (n - 1)},
        "input_split_sizes .* has a negative entry"),
    "rows that do not divide": lambda n: (
        torch.zeros(2 * n + 1), torch.zeros(2 * n + 1), {},
        re.escape("without input_split_sizes, dimension 0 (%d rows) is split evenly among the %d "
                  "ranks and must divide: pass input_split_sizes" % (2 * n + 1, n))),
    "rows of another size": lambda n: (
        torch.zeros(2 * n, 3), torch.zeros(2 * n), {},
        re.escape("the output's rows (dimension 0) are torch.float32 with 3 elements, the "
                  "input's torch.float32 with 1; they must agree")),
    "scalars": lambda n: (
        torch.zeros(()), torch.zeros(3), {},
        re.escape("the input and the output need at least one dimension (dimension 0 is split "
                  "among the ranks); the input has 1, the output 0")),
}


@pytest.mark.parametrize("case", list(WRONG_ALL_TO_ALL_SINGLE))
def test_all_to_all_single_checks_its_arguments(case):
    """Wrong on every rank alike: every rank raises at the call, before anything is sent."""
    output, source, kwargs, message = WRONG_ALL_TO_ALL_SINGLE[case](size())
    with pytest.raises(RuntimeError, match="ranktime: all_to_all_single: " + message):
        dist.all_to_all_single(output, source, **kwargs)


def test_all_to_all_checks_its_arguments():
    n = size()
    with pytest.raises(RuntimeError, match=r"all_to_all: %d output and %d input tensors for %d "
                                           r"ranks" % (n, n + 1, n)):
        dist.all_to_all([torch.zeros(1)] * n, [torch.zeros(1)] * (n + 1))
    with pytest.raises(RuntimeError, match="all_to_all: an output tensor is torch.float32, "
                                           "expected torch.int32"):
        dist.distributed_c10d._get_default_group().alltoall(
            [torch.zeros(1)] * n, [torch.zeros(1, dtype=torch.int32)] * n)


def test_all_gather_object_and_broadcast_object_list():
    gathered = [None] * size()
    dist.all_gather_object(gathered, {"rank": rank(), "text": "x" * (10 * rank())})
    assert gathered == [{"rank": r, "text": "x" * (10 * r)} for r in range(size())]
    objects = [rank(), "from %d" % rank()]
    dist.broadcast_object_list(objects, src=size() - 1)
    assert objects == [size() - 1, "from %d" % (size() - 1)]


def test_all_reduce_coalesced():
    a = torch.full((4,), float(rank() + 1))
    b = torch.full((3, 2), float(rank())).t()  # not contiguous: reduced through a copy
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
    ("send", lambda t: dist.send(t, dst=(rank() + 1) % size())),
    ("recv", lambda t: dist.recv(t, src=(rank() + 1) % size())),
])
def test_unsupported_calls_name_the_call(call, run):
    with pytest.raises(RuntimeError, match=r"torch\.distributed\.%s is not supported by the "
                                           r"ranktime backend" % call):
        run(torch.zeros(2))


@pytest.mark.parametrize("dtype", [torch.bool])
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


# "meta" stands in for a device this CPU-only torch has no backend for: the checks run before any
# tensor is read. Two supported devices that differ (cpu and cuda:0) are test_call_device.cc's;
# test_cuda.py runs the CUDA path itself where there is a GPU. (torch's dispatcher refuses a meta
# all_reduce or broadcast before the backend sees it.)
def test_a_call_names_which_of_its_tensors_is_on_another_device_type():
    outputs = [torch.zeros(2) for _ in range(size())]
    outputs[1] = torch.zeros(2, device="meta")
    with pytest.raises(RuntimeError, match=r"ranktime: all_gather: output 1 is on meta"):
        dist.all_gather(outputs, torch.zeros(2))
    with pytest.raises(RuntimeError, match=r"ranktime: reduce_scatter_tensor: input is on meta; the "
                                           r"ranktime backend takes CPU and CUDA tensors"):
        dist.reduce_scatter_tensor(torch.zeros(2), torch.zeros(2 * size(), device="meta"))


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


def test_reduce_scatter_all_to_all_and_coalesced_calls_in_the_timeline():
    n = size()
    path = shared_path("c10d_scatter")
    ranktime.start_timeline(path)
    dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(n)])
    dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * n))
    dist.all_to_all_single(torch.zeros(n), torch.ones(n))
    dist.all_to_all([torch.zeros(1) for _ in range(n)], [torch.ones(1) for _ in range(n)])
    dist.all_reduce_coalesced([torch.ones(3), torch.ones(2)])  # one group of two tensors
    ranktime.stop_timeline()
    if rank() != 0:
        return
    events = read_timeline(path)
    names = process_names(events)
    slices = []  # (call number, its tensor's suffix, operation), in call order
    for e in events:
        name = names.get(e["pid"], "")
        if (e.get("ph") in ("B", "X") and e.get("tid") == 1 and name.startswith("c10d.")
                and not e["name"].startswith(("NEGOTIATE", "MPI", "QUEUE", "MEMCPY"))):
            number, suffix = re.fullmatch(r"c10d\.(\d+)(_\dof2)?", name).groups()
            slices.append((int(number), suffix or "", e["name"]))
    first = min(s[0] for s in slices)
    assert sorted(slices) == [(first, "", "REDUCESCATTER"), (first + 1, "", "REDUCESCATTER"),
                              (first + 2, "", "ALLTOALL"), (first + 3, "", "ALLTOALL"),
                              (first + 4, "_1of2", "ALLREDUCE"),
                              (first + 4, "_2of2", "ALLREDUCE")], slices
    if os.access(CLI, os.X_OK):
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_all_reduce_coalesced_fails_as_a_whole():
    """A group: when the ranks disagree about one tensor, no tensor is reduced, on any rank."""
    a, b = torch.ones(3), torch.ones(2 if rank() == 0 else 4)
    with pytest.raises(RuntimeError, match=r"all_reduce_coalesced 'c10d\.\d+' failed: group "
                                           r"'c10d\.\d+' failed: tensor 'c10d\.\d+_2of2': shape"):
        dist.all_reduce_coalesced([a, b])
    assert torch.equal(a, torch.ones(3))
