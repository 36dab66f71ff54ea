"""Every collective x dtype x framework, checked exactly; in-place forms; async handles; default
names; zero-sized, scalar and non-contiguous inputs. Run on every rank under mpirun."""

import random
import threading
import time

import numpy as np
import pytest
import torch

import ranktime
from conftest import FRAMEWORK_DTYPES, as_float64, assert_exactly, make

OPS = {"Sum": ranktime.Sum, "Average": ranktime.Average, "Min": ranktime.Min,
       "Max": ranktime.Max, "Product": ranktime.Product}
SHAPE = (3, 5)


def is_signed(dtype):
    return dtype != "uint8"


def is_integer(dtype):
    return dtype in ("uint8", "int8", "int16", "int32", "int64")


def contribution(r, op, dtype, shape=SHAPE):
    """Rank r's input: small integers, so that every result is exact in every dtype (sums stay
    within int8, averages are multiples of 1/4, products stay within 16)."""
    n = int(np.prod(shape))
    i = np.arange(n)
    if op == "Product":
        values = (i + r) % 3 - (1 if is_signed(dtype) else 0)
    else:
        values = (i * 7 + 3 * r) % 11 - (5 if is_signed(dtype) else 0)
    return values.astype(np.float64).reshape(shape)


def expected_reduction(op, dtype, shape=SHAPE, ranks=None):
    """The reduction of every rank's contribution (of `ranks`, a process set's, when given)."""
    ranks = range(ranktime.size()) if ranks is None else ranks
    inputs = np.stack([contribution(r, op, dtype, shape) for r in ranks])
    if op == "Sum":
        return inputs.sum(axis=0)
    if op == "Average":
        mean = inputs.sum(axis=0) / len(ranks)
        return np.trunc(mean) if is_integer(dtype) else mean  # integers: truncated toward zero
    if op == "Min":
        return inputs.min(axis=0)
    if op == "Max":
        return inputs.max(axis=0)
    return inputs.prod(axis=0)


def test_rank_and_size():
    assert ranktime.is_initialized()
    assert 0 <= ranktime.rank() < ranktime.size()
    assert 0 <= ranktime.local_rank() < ranktime.local_size() <= ranktime.size()
    ranks = ranktime.allgather(np.array([ranktime.rank()], dtype=np.int32))
    np.testing.assert_array_equal(ranks, np.arange(ranktime.size()))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_allreduce(framework, dtype, op):
    x = make(framework, contribution(ranktime.rank(), op, dtype), dtype)
    before = as_float64(x)
    result = ranktime.allreduce(x, op=OPS[op])
    assert_exactly(result, framework, dtype, expected_reduction(op, dtype))
    np.testing.assert_array_equal(as_float64(x), before)  # out of place: input untouched


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_allreduce_in_place(framework, dtype, op):
    x = make(framework, contribution(ranktime.rank(), op, dtype), dtype)
    result = ranktime.allreduce_(x, op=OPS[op])
    assert result is x
    assert_exactly(x, framework, dtype, expected_reduction(op, dtype))


def test_allreduce_default_op_is_average():
    x = np.full(4, 2.0 * ranktime.rank(), dtype=np.float64)
    np.testing.assert_array_equal(ranktime.allreduce(x), np.full(4, ranktime.size() - 1.0))


def gather_contribution(r, dtype):
    """Rank r contributes r + 1 rows of 3."""
    rows = np.arange(r + 1)[:, None] + np.arange(3)[None, :]
    return (r * 10 + rows).astype(np.float64)


@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_allgather(framework, dtype):
    x = make(framework, gather_contribution(ranktime.rank(), dtype), dtype)
    result = ranktime.allgather(x)
    expected = np.concatenate([gather_contribution(r, dtype) for r in range(ranktime.size())])
    assert_exactly(result, framework, dtype, expected)


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_broadcast(framework, dtype, root):
    root_rank = 0 if root == "first" else ranktime.size() - 1
    mine = contribution(ranktime.rank(), "Sum", dtype)
    x = make(framework, mine, dtype)
    result = ranktime.broadcast(x, root_rank)
    assert_exactly(result, framework, dtype, contribution(root_rank, "Sum", dtype))
    np.testing.assert_array_equal(as_float64(x), mine)


@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_broadcast_in_place(framework, dtype):
    root_rank = ranktime.size() - 1
    x = make(framework, contribution(ranktime.rank(), "Sum", dtype), dtype)
    assert ranktime.broadcast_(x, root_rank) is x
    assert_exactly(x, framework, dtype, contribution(root_rank, "Sum", dtype))


def test_async_forms_return_handles():
    r, n = ranktime.rank(), ranktime.size()
    x = np.full(8, float(r), dtype=np.float32)
    y = torch.full((8,), float(r))
    handles = [
        ranktime.allreduce_async(x, op=ranktime.Sum),
        ranktime.allreduce_async_(y, op=ranktime.Max),
        ranktime.allgather_async(x[:2]),
        ranktime.broadcast_async(x, 0),
        ranktime.broadcast_async_(torch.full((3,), float(r)), n - 1),
    ]
    assert all(isinstance(h, ranktime.Handle) for h in handles)
    results = [ranktime.synchronize(h) for h in handles]
    assert all(h.done() and ranktime.poll(h) for h in handles)
    np.testing.assert_array_equal(results[0], np.full(8, n * (n - 1) / 2))
    assert results[1] is y and torch.equal(y, torch.full((8,), n - 1.0))
    np.testing.assert_array_equal(results[2], np.repeat(np.arange(n, dtype=np.float32), 2))
    np.testing.assert_array_equal(results[3], np.zeros(8))
    assert torch.equal(results[4], torch.full((3,), n - 1.0))
    # A completed handle keeps returning its result.
    assert handles[1].wait() is y


def test_async_handles_waited_in_rank_dependent_order():
    r, n = ranktime.rank(), ranktime.size()
    tensors = [np.full(1000 * (i + 1), float(i + r), dtype=np.float64) for i in range(8)]
    handles = [ranktime.allreduce_async(t, name="ooo.%d" % i, op=ranktime.Sum)
               for i, t in enumerate(tensors)]
    order = list(range(8))
    random.Random(r).shuffle(order)  # each rank waits in its own order
    for i in order:
        expected = n * i + n * (n - 1) / 2
        np.testing.assert_array_equal(handles[i].wait(), np.full(1000 * (i + 1), expected))


def test_async_submitted_in_rank_dependent_order():
    r, n = ranktime.rank(), ranktime.size()
    names = ["swap.%d" % i for i in range(6)]
    order = list(range(6)) if r % 2 == 0 else list(reversed(range(6)))
    handles = {i: ranktime.allreduce_async(np.full(16, float(i), np.float32), name=names[i],
                                           op=ranktime.Sum) for i in order}
    for i in range(6):
        np.testing.assert_array_equal(handles[i].wait(), np.full(16, float(i * n)))


def test_mixed_async_operations_complete_out_of_order():
    r, n = ranktime.rank(), ranktime.size()
    gathered = ranktime.allgather_async(np.full((2, 2), r, np.int32))
    reduced = ranktime.allreduce_async(torch.ones(100, dtype=torch.float64), op=ranktime.Sum)
    received = ranktime.broadcast_async(np.array([r * 1.5]), n - 1)
    np.testing.assert_array_equal(received.wait(), [(n - 1) * 1.5])
    assert torch.equal(reduced.wait(), torch.full((100,), float(n), dtype=torch.float64))
    np.testing.assert_array_equal(gathered.wait(),
                                  np.repeat(np.arange(n, dtype=np.int32), 4).reshape(2 * n, 2))


def test_dropping_a_pending_handle_completes_the_operation():
    x = np.ones(64, dtype=np.float32)
    ranktime.allreduce_async_(x, name="dropped", op=ranktime.Sum)  # handle dropped at once
    ranktime.allreduce(np.ones(1), name="after.dropped")  # negotiated and run after "dropped"
    np.testing.assert_array_equal(x, np.full(64, float(ranktime.size())))


def test_default_names_are_per_call_site_and_reused_once_released():
    x = np.zeros(4, np.float32)
    handles = [ranktime.allreduce_async(x) for _ in range(3)]
    line = handles[0].name.rsplit(":", 1)[1].split(".")[0]
    assert [h.name for h in handles] == [
        "allreduce.test_ops.py:%s.%d" % (line, i) for i in range(3)]
    for h in handles:
        h.wait()
    again = ranktime.allreduce_async(x)
    assert again.name.startswith("allreduce.test_ops.py:") and again.name.endswith(".0")
    again.wait()
    names = []
    for _ in range(3):  # a synchronous call in a loop keeps one name
        handle = ranktime.broadcast_async(x, 0)
        names.append(handle.name)
        handle.wait()
    assert len(set(names)) == 1 and names[0].startswith("broadcast.test_ops.py:")
    assert ranktime.allgather_async(x, name="mine").name == "allgather.mine"


def test_wait_releases_the_gil():
    # Rank 0 blocks in wait() on a background thread; the operation can only complete after
    # rank 0's main thread has run Python code (submitted "gil.unblock"). If wait() held the
    # GIL, this would deadlock.
    r = ranktime.rank()
    results = {}

    def blocked():
        results["value"] = ranktime.allreduce(np.ones(4), name="gil.blocked", op=ranktime.Sum)

    if r == 0:
        thread = threading.Thread(target=blocked)
        thread.start()
        time.sleep(0.2)  # let the thread reach wait() (sleep releases the GIL)
        ranktime.allreduce(np.ones(1), name="gil.unblock")
        thread.join()
    else:
        ranktime.allreduce(np.ones(1), name="gil.unblock")
        blocked()
    np.testing.assert_array_equal(results["value"], np.full(4, float(ranktime.size())))


def test_allreduce_of_a_tensor_that_requires_grad():
    w = torch.full((4,), 1.0 + ranktime.rank(), requires_grad=True)
    result = ranktime.allreduce(w, op=ranktime.Sum)
    assert not result.requires_grad
    n = ranktime.size()
    assert torch.equal(result, torch.full((4,), n * (n + 1) / 2))


def test_buffer_protocol_objects_come_back_as_numpy():
    import array
    values = array.array("d", [ranktime.rank()] * 3)
    result = ranktime.allreduce(values, op=ranktime.Max)
    assert isinstance(result, np.ndarray)
    np.testing.assert_array_equal(result, np.full(3, ranktime.size() - 1.0))
    assert ranktime.allreduce_(values, op=ranktime.Max) is values  # written in place
    assert list(values) == [ranktime.size() - 1.0] * 3


# --- zero-sized, scalar and non-contiguous inputs -------------------------------------------


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_zero_sized_allreduce_and_broadcast(framework):
    x = make(framework, np.zeros((0, 3)), "float32")
    result = ranktime.allreduce(x, op=ranktime.Sum)
    assert tuple(result.shape) == (0, 3)
    assert ranktime.allreduce_(x) is x
    assert tuple(ranktime.broadcast(x, 0).shape) == (0, 3)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_allgather_with_zero_rows_on_some_ranks(framework):
    r = ranktime.rank()
    rows = r % 2  # even ranks contribute nothing
    x = make(framework, np.full((rows, 2), r), "int64")
    result = ranktime.allgather(x)
    expected = np.concatenate([np.full((q % 2, 2), q) for q in range(ranktime.size())])
    assert_exactly(result, framework, "int64", expected.reshape(-1, 2))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_scalar_allreduce(framework):
    x = make(framework, np.float64(ranktime.rank()), "float64")
    result = ranktime.allreduce(x, op=ranktime.Max)
    assert_exactly(result, framework, "float64", np.float64(ranktime.size() - 1))


def test_non_contiguous_numpy_is_copied():
    r, n = ranktime.rank(), ranktime.size()
    base = np.arange(24, dtype=np.float32).reshape(4, 6) + r
    view = base[:, ::2]  # non-contiguous
    assert not view.flags.c_contiguous
    expected = (np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2] * n + n * (n - 1) / 2)

    result = ranktime.allreduce(view, op=ranktime.Sum)
    assert result.flags.c_contiguous
    np.testing.assert_array_equal(result, expected)

    untouched = base[:, 1::2].copy()
    assert ranktime.allreduce_(view, op=ranktime.Sum) is view  # reduced, then copied back
    np.testing.assert_array_equal(base[:, ::2], expected)
    np.testing.assert_array_equal(base[:, 1::2], untouched)

    gathered = ranktime.allgather(view.T)
    assert gathered.shape == (3 * n, 4)
    np.testing.assert_array_equal(gathered[:3], expected.T)


def test_non_contiguous_torch_is_copied():
    r, n = ranktime.rank(), ranktime.size()
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4) + r
    view = base.t()
    assert not view.is_contiguous()
    root_view = (torch.arange(12, dtype=torch.float64).reshape(3, 4) + (n - 1)).t()

    result = ranktime.broadcast(view, n - 1)
    assert result.is_contiguous() and torch.equal(result, root_view)

    assert ranktime.broadcast_(view, n - 1) is view
    assert torch.equal(base, root_view.t())


def test_read_only_numpy_array():
    x = np.ones(4, dtype=np.float32)
    x.setflags(write=False)
    np.testing.assert_array_equal(ranktime.allreduce(x, op=ranktime.Sum),
                                  np.full(4, float(ranktime.size())))
    np.testing.assert_array_equal(ranktime.allgather(x), np.ones(4 * ranktime.size()))
    with pytest.raises(ValueError, match="read-only"):
        ranktime.allreduce_(x)
    with pytest.raises(ValueError, match="read-only"):
        ranktime.broadcast_(x[::2], 0)


def test_lateness_statistics_live_on_rank_0():
    ranktime.allreduce(np.ones(2), name="lateness.probe")
    stats = ranktime.lateness()
    if ranktime.rank() == 0:
        assert [s.rank for s in stats] == list(range(ranktime.size()))
        assert all(s.negotiations > 0 and s.times_last <= s.negotiations for s in stats)
        assert sum(s.times_last for s in stats) > 0
    else:
        assert stats == []
