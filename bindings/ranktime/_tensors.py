"""What the collectives need from a tensor framework: contiguous copies, result allocation and
handing memory to the runtime without a copy (buffer protocol for NumPy, DLPack for PyTorch).

Results come back in the caller's type: NumPy in, NumPy out; torch in, torch out (same device).
Other objects with the buffer protocol or ``__dlpack__`` are viewed as NumPy arrays (no copy):
in-place operations write into their memory, out-of-place ones return NumPy arrays.
"""

import sys

import numpy as np

SUPPORTED_DTYPES = ("uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def unsupported_dtype(name):
    return TypeError("ranktime: unsupported element type %s; supported: %s"
                     % (name, ", ".join(SUPPORTED_DTYPES)))


class NumpyTensors:
    """NumPy arrays (and buffer/DLPack objects viewed as NumPy arrays)."""

    @staticmethod
    def is_contiguous(x):
        return x.flags.c_contiguous

    @staticmethod
    def contiguous(x):
        return x if x.flags.c_contiguous else np.array(x, order="C")  # keeps a 0-d array 0-d

    @staticmethod
    def copy(x):
        return np.array(x, order="C", copy=True)

    @staticmethod
    def check_writable(x):
        if not x.flags.writeable:
            raise ValueError(
                "ranktime: the tensor is read-only, and this operation writes its result into it")

    @staticmethod
    def copy_into(destination, source):
        np.copyto(destination, source)

    @staticmethod
    def scale(x, factor):
        """Multiplies `x` in place (see ranktime.allreduce's prescale_factor)."""
        if x.dtype.kind in "iub":
            compute = np.float64
        else:
            compute = np.float32 if x.dtype == np.float16 else x.dtype
        np.copyto(x, (x.astype(compute) * factor).astype(x.dtype))

    @staticmethod
    def export(x):
        """(object for ranktime._core, cudaEvent_t as int, what keeps the event alive)."""
        if x.dtype.name not in SUPPORTED_DTYPES or not x.dtype.isnative:
            raise unsupported_dtype(str(x.dtype))
        return x, 0, None

    @staticmethod
    def empty_like_on_host(x, shape):
        return np.empty(shape, dtype=x.dtype)

    @staticmethod
    def int32_vector(values):
        return np.array(values, dtype=np.int32)

    @staticmethod
    def to_device_of(result, x):
        return result


class TorchTensors:
    """PyTorch tensors, CPU or CUDA. Autograd flows only through ranktime.torch's collectives."""

    def __init__(self, torch):
        self.torch = torch
        self._to_dlpack = torch.utils.dlpack.to_dlpack
        self._supported = {getattr(torch, name) for name in SUPPORTED_DTYPES}

    @staticmethod
    def is_contiguous(x):
        return x.is_contiguous()

    def contiguous(self, x):
        return x.detach().contiguous()

    def copy(self, x):
        return x.detach().clone(memory_format=self.torch.contiguous_format)

    @staticmethod
    def check_writable(x):
        pass

    def copy_into(self, destination, source):
        with self.torch.no_grad():
            destination.copy_(source)

    def scale(self, x, factor):
        torch = self.torch
        if not x.dtype.is_floating_point:
            compute = torch.float64
        elif x.dtype in (torch.float16, torch.bfloat16):
            compute = torch.float32
        else:
            compute = x.dtype
        with torch.no_grad():
            x.copy_(x.to(compute) * factor)

    def export(self, x):
        if x.dtype not in self._supported:
            raise unsupported_dtype(str(x.dtype))
        if x.requires_grad:
            x = x.detach()
        if x.is_cuda:
            # The runtime must not read the tensor before the kernels that produce it have run.
            event = self.torch.cuda.Event()
            event.record(self.torch.cuda.current_stream(x.device))
            return self._to_dlpack(x), event.cuda_event, event
        return self._to_dlpack(x), 0, None

    def empty_like_on_host(self, x, shape):
        return self.torch.empty(shape, dtype=x.dtype)

    def int32_vector(self, values):
        return self.torch.tensor(values, dtype=self.torch.int32)

    @staticmethod
    def to_device_of(result, x):
        return result if result.device == x.device else result.to(x.device)


NUMPY = NumpyTensors()
_torch_tensors = None


def classify(x):
    """Returns (framework, tensor) where `tensor` is `x` itself or its NumPy view."""
    global _torch_tensors
    if isinstance(x, np.ndarray):
        return NUMPY, x
    torch = sys.modules.get("torch")  # a torch tensor implies torch is imported
    if torch is not None and isinstance(x, torch.Tensor):
        if _torch_tensors is None:
            _torch_tensors = TorchTensors(torch)
        return _torch_tensors, x
    if hasattr(x, "__array_interface__") or _has_buffer(x):
        return NUMPY, np.asarray(x)
    if hasattr(x, "__dlpack__"):
        return NUMPY, np.from_dlpack(x)
    raise TypeError(
        "ranktime: expected a tensor (NumPy array, torch.Tensor, or an object with the buffer "
        "protocol or __dlpack__), got %s" % type(x).__name__)


def _has_buffer(x):
    try:
        memoryview(x).release()
        return True
    except TypeError:
        return False
