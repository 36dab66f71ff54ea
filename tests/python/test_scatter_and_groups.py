"""reducescatter, alltoall and the grouped operations from Python (ranktime and ranktime.torch):
every dtype exact in NumPy and torch, even and uneven splits, wrong calls raising ValueError at
the call, a group failing as a whole on every rank, gradients against a single-process
reference, and their timeline (names, ranktime check). Run on every rank under mpirun."""

import os
import subprocess

import numpy as np
import pytest
import torch

import ranktime
import ranktime.torch as hvd
from conftest import FRAMEWORK_DTYPES, as_float64, assert_exactly, make
from test_ops import OPS, contribution, expected_reduction
from test_timeline import CLI, read_timeline, shared_path

torch.set_num_threads(1)


def rows_of(dim0, r):
    """Horovod's split: dim0 // size rows each, the first dim0 % size ranks one more."""
    n = ranktime.size()
    return dim0 // n + (1 if r < dim0 % n else 0)


def first_row_of(dim0, r):
    n = ranktime.size()
    return r * (dim0 // n) + min(r, dim0 % n)


def my_rows(full, dim0):
    r = ranktime.rank()
    return full[first_row_of(dim0, r):first_row_of(dim0, r) + rows_of(dim0, r)]


# --- reducescatter -------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [0, 1, "fewer"])  # 2n rows, 2n + 1 (uneven), n - 1 (some none)
@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_reducescatter(framework, dtype, extra):
    n = ranktime.size()
    dim0 = n - 1 if extra == "fewer" else 2 * n + extra
    for op in ("Sum", "Average", "Max"):
        x = make(framework, contribution(ranktime.rank(), op, dtype, (dim0, 3)), dtype)
        before = as_float64(x)
        result = ranktime.reducescatter(x, op=OPS[op], name="rs.%s.%s" % (dtype, op))
        expected = expected_reduction(op, dtype, (dim0, 3))  # an average over 3: k / 3, rounded
        expected = as_float64(make(framework, expected, dtype))
        assert_exactly(result, framework, dtype, my_rows(expected, dim0))
        np.testing.assert_array_equal(as_float64(x), before)  # the input is not changed


def test_reducescatter_default_op_is_average_and_scales_apply():
    n = ranktime.size()
    x = torch.full((2 * n, 2), 4.0 * (ranktime.rank() + 1))
    mean = 4.0 * (n + 1) / 2
    assert torch.equal(ranktime.reducescatter(x), torch.full((2, 2), mean))
    scaled = ranktime.reducescatter(x, op=ranktime.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.equal(scaled, torch.full((2, 2), 0.5 * 3.0 * mean * n))


def test_reducescatter_of_a_scalar_raises_value_error_at_the_call():
    with pytest.raises(ValueError, match="at least one dimension") as error:
        ranktime.reducescatter(np.ones((), dtype=np.float32), name="rs.scalar")
    assert isinstance(error.value, ranktime.InvalidArgumentError)
    assert isinstance(error.value, ranktime.RanktimeError)
    ranktime.barrier()


def test_reducescatter_shape_mismatch_fails_every_rank():
    n, r = ranktime.size(), ranktime.rank()
    x = np.ones((2 * n + (1 if r == n - 1 else 0), 2), dtype=np.float32)
    with pytest.raises(ranktime.RanktimeError, match="shape differs between ranks") as error:
        ranktime.reducescatter(x, name="rs.mismatch")
    assert "rank %d" % (n - 1) in str(error.value)


# --- alltoall ------------------------------------------------------------------------------------

def sent(frm, to, rows):
    """What rank `frm` sends rank `to`: `rows` rows of 2 columns, small integers."""
    return np.array([[(frm * 5 + to * 3 + k) % 11, k % 4] for k in range(rows)],
                    dtype=np.float64).reshape(rows, 2)


@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_alltoall_with_uneven_splits(framework, dtype):
    n, r = ranktime.size(), ranktime.rank()
    count = lambda frm, to: (frm + 2 * to) % 3  # noqa: E731 (some ranks send some nothing)
    splits = [count(r, q) for q in range(n)]
    x = make(framework, np.concatenate([sent(r, q, splits[q]) for q in range(n)]), dtype)
    output, received = ranktime.alltoall(x, splits, name="a2a." + dtype)
    assert_exactly(output, framework, dtype,
                   np.concatenate([sent(q, r, count(q, r)) for q in range(n)]))
    assert list(received.tolist()) == [count(q, r) for q in range(n)]
    assert str(received.dtype).endswith("int32")
    assert isinstance(received, np.ndarray if framework == "numpy" else torch.Tensor)


def test_alltoall_equal_split_and_splits_of_every_kind():
    n, r = ranktime.size(), ranktime.rank()
    x = torch.arange(2 * n, dtype=torch.int64) + 100 * r
    output = ranktime.alltoall(x)  # no splits: the output alone, as Horovod
    assert torch.equal(output, torch.tensor([100 * q + 2 * r + k for q in range(n)
                                             for k in range(2)]))
    for splits in ([2] * n, np.full(n, 2, dtype=np.int64), torch.full((n,), 2, dtype=torch.int32)):
        again, received = ranktime.alltoall(x, splits)
        assert torch.equal(again, output)
        assert received.tolist() == [2] * n
    # As in Horovod, splits may leave rows unsent at the end.
    _, received = ranktime.alltoall(x, [1] * n)
    assert received.tolist() == [1] * n


def test_alltoall_wrong_splits_raise_value_error_at_the_call():
    n = ranktime.size()
    x = np.zeros(n + 1, dtype=np.float32)
    for splits, message in [(None, "do not divide among %d ranks" % n),
                            ([1] * (n + 1), "%d splits for %d ranks" % (n + 1, n)),
                            ([n + 2] + [0] * (n - 1), "more than dimension 0"),
                            ([-1] * n, "negative")]:
        with pytest.raises(ValueError, match=message):
            ranktime.alltoall(x, splits, name="a2a.wrong")
        ranktime.barrier()  # rank 0's answer has failed the request everywhere: the name is free
    for splits in (np.ones(n, dtype=np.float32), [1.5] * n, np.ones((1, n), dtype=np.int32)):
        with pytest.raises(ValueError, match="splits must"):
            ranktime.alltoall(x, splits)


def test_alltoall_dtype_mismatch_fails_every_rank():
    n, r = ranktime.size(), ranktime.rank()
    x = np.zeros(n, dtype=np.int32 if r == 0 else np.float32)
    with pytest.raises(ranktime.RanktimeError, match="dtype differs between ranks"):
        ranktime.alltoall(x, name="a2a.mismatch")


# --- groups --------------------------------------------------------------------------------------

@pytest.mark.parametrize("framework,dtype", FRAMEWORK_DTYPES)
def test_grouped_operations_are_exact(framework, dtype):
    n, r = ranktime.size(), ranktime.rank()
    other = "int32" if dtype == "float16" else "float16"
    dtypes = [dtype, other, dtype, dtype]  # two dtypes: two fused executions
    shapes = [(2 * n + t, 2) for t in range(len(dtypes))]
    tensors = [make(framework, contribution(r, "Sum", d, s), d) for d, s in zip(dtypes, shapes)]
    summed = ranktime.grouped_allreduce(tensors, op=ranktime.Sum, name="g.sum." + dtype)
    for t, d, s in zip(summed, dtypes, shapes):
        assert_exactly(t, framework, d, expected_reduction("Sum", d, s))
    scattered = ranktime.grouped_reducescatter(tensors, op=ranktime.Sum, name="g.rs." + dtype)
    for t, d, s in zip(scattered, dtypes, shapes):
        assert_exactly(t, framework, d, my_rows(expected_reduction("Sum", d, s), s[0]))
    rows = [make(framework, np.full((r + t, 3), 10 * r + t), d) for t, d in enumerate(dtypes)]
    gathered = ranktime.grouped_allgather(rows, name="g.ag." + dtype)
    for t, (g, d) in enumerate(zip(gathered, dtypes)):
        assert_exactly(g, framework, d,
                       np.concatenate([np.full((q + t, 3), 10 * q + t) for q in range(n)]))
    in_place = [make(framework, contribution(r, "Max", d, s), d) for d, s in zip(dtypes, shapes)]
    result = ranktime.grouped_allreduce_(in_place, op=ranktime.Max)
    assert all(a is b for a, b in zip(result, in_place)) and len(result) == len(in_place)
    for t, d, s in zip(in_place, dtypes, shapes):
        assert_exactly(t, framework, d, expected_reduction("Max", d, s))


def test_a_group_fails_as_a_whole_on_every_rank():
    n, r = ranktime.size(), ranktime.rank()
    bad = np.ones(4 if r != n - 1 else 5, dtype=np.float32)
    tensors = [np.ones(4, dtype=np.float32), bad, np.ones(3, dtype=np.int64)]
    handle = ranktime.grouped_allreduce_async(tensors, name="g.bad", op=ranktime.Sum)
    with pytest.raises(ranktime.RanktimeError) as error:
        handle.wait()
    message = str(error.value)
    assert "group 'grouped_allreduce.g.bad' failed" in message
    assert "tensor 'grouped_allreduce.g.bad_2of3': shape differs" in message
    assert "[5] on rank %d" % (n - 1) in message
    np.testing.assert_array_equal(tensors[0], np.ones(4))  # nothing of the group ran
    # A scalar in a reducescatter group: ValueError at the call, the group fails everywhere.
    with pytest.raises(ValueError, match="at least one dimension"):
        ranktime.grouped_reducescatter([np.ones(2 * n), np.ones(())], name="g.scalar")
    ranktime.barrier()
    with pytest.raises(ValueError, match="at least one tensor"):
        ranktime.grouped_allreduce([])


def test_grouped_async_handle_polls_and_waits_as_one():
    n = ranktime.size()
    tensors = [torch.full((3,), float(i)) for i in range(5)]
    handle = hvd.grouped_allreduce_async(tensors, op=hvd.Sum, name="g.async")
    assert handle.name == "grouped_allreduce.g.async"
    results = hvd.synchronize(handle)
    assert hvd.poll(handle)
    assert [t.tolist() for t in results] == [[float(i * n)] * 3 for i in range(5)]


# --- ranktime.torch: Horovod's shapes and gradients ----------------------------------------------

def weights(q, shape):
    """Rank q's weights in its loss, (q + 1) * (index + 1) / 8."""
    return (torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape) + 1) * (q + 1) / 8


def test_horovod_reducescatter_gradient_matches_one_process():
    """Horovod's gradient of reducescatter is the allgathered output gradient, times size() for
    Sum: the gradient of size() x the sum of every rank's loss."""
    n, r = ranktime.size(), ranktime.rank()
    dim0 = 2 * n + 1
    for op in ("Sum", "Average"):
        x = (torch.arange(dim0 * 2, dtype=torch.float64).reshape(dim0, 2) + r).requires_grad_()
        y = hvd.reducescatter(x, op=getattr(hvd, op), name="grad.rs." + op)
        (y * weights(r, y.shape)).sum().backward()

        xs = [(torch.arange(dim0 * 2, dtype=torch.float64).reshape(dim0, 2) + q).requires_grad_()
              for q in range(n)]
        total = sum(xs) / (n if op == "Average" else 1)
        parts = [total[first_row_of(dim0, q):first_row_of(dim0, q) + rows_of(dim0, q)]
                 for q in range(n)]
        (n * sum((p * weights(q, p.shape)).sum() for q, p in enumerate(parts))).backward()
        assert torch.equal(x.grad, xs[r].grad), op


def test_horovod_alltoall_gradient_matches_one_process():
    n, r = ranktime.size(), ranktime.rank()
    count = lambda frm, to: 1 + (frm + to) % 2  # noqa: E731
    rows = sum(count(r, q) for q in range(n))
    x = (torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) + 10 * r).requires_grad_()
    splits = torch.tensor([count(r, q) for q in range(n)], dtype=torch.int32)
    y, received = hvd.alltoall(x, splits, name="grad.a2a")
    assert received.dtype == torch.int32 and received.tolist() == [count(q, r) for q in range(n)]
    (y * weights(r, y.shape)).sum().backward()

    xs = [(torch.arange(sum(count(q, p) for p in range(n)) * 2, dtype=torch.float64)
           .reshape(-1, 2) + 10 * q).requires_grad_() for q in range(n)]
    pieces = [torch.split(xq, [count(q, p) for p in range(n)]) for q, xq in enumerate(xs)]
    outputs = [torch.cat([pieces[q][p] for q in range(n)]) for p in range(n)]
    sum((o * weights(p, o.shape)).sum() for p, o in enumerate(outputs)).backward()
    assert torch.equal(x.grad, xs[r].grad)


def test_horovod_grouped_gradients_match_one_process():
    n, r = ranktime.size(), ranktime.rank()
    shapes = [(2, 3), (4,)]
    xs = [(torch.arange(int(np.prod(s)), dtype=torch.float64).reshape(s) + r).requires_grad_()
          for s in shapes]
    summed = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grad.g.sum")
    sum((y * weights(r, y.shape)).sum() for y in summed).backward()
    for x, s in zip(xs, shapes):
        ref = [(torch.arange(int(np.prod(s)), dtype=torch.float64).reshape(s) + q)
               .requires_grad_() for q in range(n)]
        sum((sum(ref) * weights(q, s)).sum() for q in range(n)).backward()
        assert torch.equal(x.grad, ref[r].grad)

    # grouped_allgather: Horovod's convention (as allgather's), the mean of every rank's loss
    # (divided by 3 ranks in another order than the reference: equal to the last bit or two).
    g = [torch.full((r + 1, 2), float(r), dtype=torch.float64, requires_grad=True),
         torch.full((1, 3), float(r), dtype=torch.float64, requires_grad=True)]
    gathered = hvd.grouped_allgather(g, name="grad.g.ag")
    sum((y * weights(r, y.shape)).sum() for y in gathered).backward()
    ref0 = [torch.full((q + 1, 2), float(q), dtype=torch.float64, requires_grad=True)
            for q in range(n)]
    ref1 = [torch.full((1, 3), float(q), dtype=torch.float64, requires_grad=True)
            for q in range(n)]
    everything = [torch.cat(ref0), torch.cat(ref1)]
    (sum(sum((e * weights(q, e.shape)).sum() for e in everything) for q in range(n)) / n
     ).backward()
    assert torch.allclose(g[0].grad, ref0[r].grad, rtol=1e-15, atol=0)
    assert torch.allclose(g[1].grad, ref1[r].grad, rtol=1e-15, atol=0)

    # grouped_reducescatter: as reducescatter's, per tensor.
    z = [(torch.arange(2 * n, dtype=torch.float64) + r).requires_grad_()]
    part, = hvd.grouped_reducescatter(z, op=hvd.Sum, name="grad.g.rs")
    (part * weights(r, part.shape)).sum().backward()
    assert torch.equal(z[0].grad, torch.cat([n * weights(q, (2,)) for q in range(n)]))


def test_horovod_reducescatter_adasum_raises():
    with pytest.raises(NotImplementedError, match="Adasum") as error:
        hvd.reducescatter(torch.ones(4), op=hvd.Adasum)
    assert isinstance(error.value, RuntimeError)  # what Horovod's test expects


# --- the timeline --------------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(CLI), reason="the ranktime CLI is not built")
def test_timeline_names_each_new_operation_and_passes_check():
    n = ranktime.size()
    path = shared_path("scatter")
    with ranktime.timeline(path):
        ranktime.reducescatter(np.ones((n + 1, 2), dtype=np.float32), name="tl.rs")
        ranktime.alltoall(np.ones(n, dtype=np.float32), name="tl.a2a")
        ranktime.grouped_allreduce([np.ones(3), np.ones(2, dtype=np.int32)], name="tl.g")
        ranktime.grouped_reducescatter([np.ones(n), np.ones(2 * n)], name="tl.grs")
    if ranktime.rank() == 0:
        events = read_timeline(path)
        names = {e.get("name") for e in events}
        for name in ["NEGOTIATE_REDUCESCATTER", "REDUCESCATTER", "MPI_REDUCESCATTER",
                     "NEGOTIATE_ALLTOALL", "ALLTOALL", "MPI_ALLTOALL", "MEMCPY_IN_FUSION_BUFFER"]:
            assert name in names, name
        processes = {e["args"]["name"] for e in events
                     if e.get("ph") == "M" and e.get("name") == "process_name"}
        for tensor in ["reducescatter.tl.rs", "alltoall.tl.a2a", "grouped_allreduce.tl.g_1of2",
                       "grouped_allreduce.tl.g_2of2", "grouped_reducescatter.tl.grs_2of2"]:
            assert tensor in processes, tensor
        check = subprocess.run([CLI, "check", path], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    ranktime.barrier()
