"""Shared set-up for the Python tests. Every rank runs the same pytest session under mpirun, so
every rank must run the same tests in the same order: never skip or parametrise by rank."""

import numpy as np
import pytest
import torch

import ranktime

NUMPY_DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16"]  # NumPy has no bfloat16
FRAMEWORK_DTYPES = [("numpy", d) for d in NUMPY_DTYPES] + [("torch", d) for d in TORCH_DTYPES]


@pytest.fixture(scope="module", autouse=True)
def runtime(request):
    """Each test module runs between init() and shutdown(), unless it manages them itself."""
    if getattr(request.module, "MANAGES_RUNTIME", False):
        yield
        return
    ranktime.init()
    yield
    if request.session.testsfailed == 0:
        ranktime.barrier()
    # After a failure the other ranks may be waiting in a collective this rank will never join;
    # shutting down fails their pending operations instead of leaving them hanging.
    ranktime.shutdown()


def make(framework, values, dtype):
    """`values` (a NumPy array of exact small numbers) as a tensor of `framework` and `dtype`."""
    if framework == "numpy":
        return np.asarray(values).astype(dtype)
    return torch.tensor(np.asarray(values, dtype=np.float64)).to(getattr(torch, dtype))


def as_float64(tensor):
    """A NumPy float64 copy of a NumPy array or torch tensor, for exact comparisons."""
    if isinstance(tensor, np.ndarray):
        return tensor.astype(np.float64)
    return tensor.detach().cpu().to(dtype=torch.float64).numpy()


def dtype_name(tensor):
    return str(tensor.dtype).replace("torch.", "")


def assert_exactly(result, framework, dtype, expected):
    """`result` is a `framework` tensor of `dtype` equal to `expected`, element for element."""
    if framework == "numpy":
        assert isinstance(result, np.ndarray), type(result)
    else:
        assert isinstance(result, torch.Tensor), type(result)
    assert dtype_name(result) == dtype
    expected = np.asarray(expected, dtype=np.float64)
    assert tuple(result.shape) == expected.shape
    np.testing.assert_array_equal(as_float64(result), expected)
