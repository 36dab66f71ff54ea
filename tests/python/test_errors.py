"""Errors: requests that disagree between ranks raise RanktimeError on every rank, with the
runtime's message, and the runtime stays usable; bad arguments raise before any communication."""

import numpy as np
import pytest
import torch

import ranktime


def still_works():
    n = ranktime.size()
    result = ranktime.allreduce(np.ones(8, np.float32), name="after.error", op=ranktime.Sum)
    np.testing.assert_array_equal(result, np.full(8, float(n)))


def test_ranktime_error_is_a_runtime_error():
    assert issubclass(ranktime.RanktimeError, RuntimeError)
    assert ranktime.RanktimeError.__module__ == "ranktime"


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_mismatched_shapes_raise_on_every_rank(framework):
    shape = (2, 3 + ranktime.rank())
    x = np.ones(shape, np.float32) if framework == "numpy" else torch.ones(shape)
    with pytest.raises(ranktime.RanktimeError) as error:
        ranktime.allreduce(x, name="mismatch.%s" % framework)
    assert "mismatch.%s" % framework in str(error.value)  # the message names the tensor
    still_works()


def test_mismatched_shapes_raise_from_async_handle_every_time():
    handle = ranktime.allreduce_async_(np.ones(1 + ranktime.rank()), name="mismatch.async")
    for _ in range(2):
        with pytest.raises(ranktime.RanktimeError, match="mismatch.async"):
            handle.wait()
    assert handle.done()
    still_works()


def test_mismatched_dtypes_raise():
    dtype = np.float32 if ranktime.rank() == 0 else np.float64
    with pytest.raises(ranktime.RanktimeError, match="mismatch.dtype"):
        ranktime.allreduce(np.ones(4, dtype), name="mismatch.dtype")
    still_works()


def test_mismatched_ops_raise():
    op = ranktime.Sum if ranktime.rank() == 0 else ranktime.Max
    with pytest.raises(ranktime.RanktimeError, match="mismatch.op"):
        ranktime.allreduce(np.ones(4), name="mismatch.op", op=op)
    still_works()


def test_mismatched_broadcast_roots_raise():
    root = 0 if ranktime.rank() == 0 else 1
    with pytest.raises(ranktime.RanktimeError, match="mismatch.root"):
        ranktime.broadcast(np.ones(4), root, name="mismatch.root")
    still_works()


def test_allgather_with_mismatched_trailing_dimensions_raises():
    x = np.ones((2, 2 + ranktime.rank()), np.int32)
    with pytest.raises(ranktime.RanktimeError, match="mismatch.gather"):
        ranktime.allgather(x, name="mismatch.gather")
    still_works()


def test_broadcast_root_out_of_range_raises():
    with pytest.raises(ranktime.RanktimeError):
        ranktime.broadcast(np.ones(2), ranktime.size(), name="bad.root")
    still_works()


@pytest.mark.parametrize("value", [
    np.ones(3, np.complex64), np.ones(3, np.uint16), np.ones(3, bool),
    torch.ones(3, dtype=torch.complex64), torch.ones(3, dtype=torch.bool)], ids=lambda v: "%s-%s" % (type(v).__module__, v.dtype))
def test_unsupported_dtypes_raise_type_error(value):
    with pytest.raises(TypeError, match="unsupported element type"):
        ranktime.allreduce(value)
    with pytest.raises(TypeError, match="unsupported element type"):
        ranktime.allgather(value)


def test_non_tensors_raise_type_error():
    with pytest.raises(TypeError, match="expected a tensor"):
        ranktime.allreduce("not a tensor")
    with pytest.raises(TypeError, match="expected a tensor"):
        ranktime.broadcast_(object(), 0)


def test_bad_arguments_raise_type_error():
    with pytest.raises(TypeError, match="op must be"):
        ranktime.allreduce(np.ones(2), op="sum")
    with pytest.raises(TypeError, match="name must be"):
        ranktime.allreduce(np.ones(2), name=3)


def test_allgather_of_a_scalar_raises_value_error():
    with pytest.raises(ValueError, match="at least one dimension"):
        ranktime.allgather(np.array(1.0))
    with pytest.raises(ValueError, match="at least one dimension"):
        ranktime.allgather(torch.tensor(1.0))
