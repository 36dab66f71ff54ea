// Zero-copy import of Python tensors: the buffer protocol (NumPy, array, memoryview) and DLPack
// (PyTorch and any other producer of `__dlpack__` capsules).
#include "tensor_import.h"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ranktime::python {
namespace {

constexpr const char* kSupportedTypes =
    "supported: uint8, int8, int32, int64, float16, bfloat16, float32, float64";

// Zero-sized tensors may come with a null data pointer; the runtime gets a valid one regardless.
std::byte g_empty_tensor_storage;

std::string Join(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

// Row-major contiguity; dimensions of extent 1 may carry any stride (as PyTorch allows).
bool IsContiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  int64_t unit) {
  for (int64_t extent : shape) {
    if (extent == 0) return true;  // no elements: any strides will do
  }
  int64_t expected = unit;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

[[noreturn]] void ThrowNonContiguous(const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& strides, const char* unit) {
  throw py::value_error("ranktime: the tensor is not contiguous (shape " + Join(shape) +
                        ", strides " + Join(strides) + " " + unit +
                        "); pass a contiguous copy (x.contiguous(), numpy.ascontiguousarray(x))");
}

// PEP 3118 format characters, as NumPy and the array module emit them, to ranktime types.
std::optional<DataType> DtypeFromFormat(std::string format, size_t itemsize) {
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.erase(0, 1);
  }
  if (format.size() != 1) return std::nullopt;  // big-endian, structured, or unknown
  switch (format[0]) {
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      if (itemsize == 1) return DataType::kInt8;
      if (itemsize == 2) return DataType::kInt16;
      if (itemsize == 4) return DataType::kInt32;
      if (itemsize == 8) return DataType::kInt64;
      return std::nullopt;
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
      return itemsize == 1 ? std::optional(DataType::kUInt8) : std::nullopt;
    case 'e':
      return DataType::kFloat16;
    case 'f':
      return DataType::kFloat32;
    case 'd':
      return DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

std::optional<DataType> DtypeFromDLPack(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  switch (type.code) {
    case kDLUInt:
      return type.bits == 8 ? std::optional(DataType::kUInt8) : std::nullopt;
    case kDLInt:
      if (type.bits == 8) return DataType::kInt8;
      if (type.bits == 16) return DataType::kInt16;
      if (type.bits == 32) return DataType::kInt32;
      if (type.bits == 64) return DataType::kInt64;
      return std::nullopt;
    case kDLFloat:
      if (type.bits == 16) return DataType::kFloat16;
      if (type.bits == 32) return DataType::kFloat32;
      if (type.bits == 64) return DataType::kFloat64;
      return std::nullopt;
    case kDLBfloat:
      return type.bits == 16 ? std::optional(DataType::kBFloat16) : std::nullopt;
    default:
      return std::nullopt;
  }
}

void UseValidPointerWhenEmpty(TensorView& view) {
  if (view.data == nullptr && view.num_elements() == 0) view.data = &g_empty_tensor_storage;
}

}  // namespace

ImportedTensor ImportedTensor::FromObject(py::handle obj, bool writable) {
  if (PyCapsule_CheckExact(obj.ptr())) return FromCapsule(obj);
  // NumPy exports both; the buffer protocol is preferred because it can say "read-only", which
  // DLPack 0.6 cannot (NumPy refuses to export read-only arrays through DLPack).
  if (PyObject_CheckBuffer(obj.ptr())) return FromBuffer(obj, writable);
  if (py::hasattr(obj, "__dlpack__")) {
    py::object capsule = obj.attr("__dlpack__")();
    return FromCapsule(capsule);
  }
  throw py::type_error(
      "ranktime: expected a tensor (an object with __dlpack__ or the buffer protocol), got " +
      std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
}

ImportedTensor ImportedTensor::FromBuffer(py::handle obj, bool writable) {
  ImportedTensor result;
  try {
    result.buffer_ = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (py::error_already_set& e) {
    if (writable && e.matches(PyExc_BufferError)) {
      throw py::value_error(
          "ranktime: the tensor is read-only, and this operation writes its result into it");
    }
    throw;
  }
  const py::buffer_info& info = *result.buffer_;
  auto dtype = DtypeFromFormat(info.format, static_cast<size_t>(info.itemsize));
  if (!dtype) {
    throw py::type_error("ranktime: unsupported element type (buffer format '" + info.format +
                         "', " + std::to_string(info.itemsize) + " bytes); " + kSupportedTypes);
  }
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
  std::vector<int64_t> strides(info.strides.begin(), info.strides.end());
  if (!IsContiguous(shape, strides, info.itemsize)) ThrowNonContiguous(shape, strides, "bytes");

  result.view_.data = info.ptr;
  result.view_.dtype = *dtype;
  result.view_.shape = std::move(shape);
  result.view_.device = kCpuDevice;
  UseValidPointerWhenEmpty(result.view_);
  return result;
}

ImportedTensor ImportedTensor::FromCapsule(py::handle capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    throw py::value_error(
        "ranktime: expected an unconsumed DLPack capsule named 'dltensor' (each capsule can be "
        "used once)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  // Renaming the capsule transfers ownership: its destructor no longer deletes the tensor.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  ImportedTensor result;
  result.managed_ = managed;

  const DLTensor& t = managed->dl_tensor;
  auto dtype = DtypeFromDLPack(t.dtype);
  if (!dtype) {
    throw py::type_error("ranktime: unsupported element type (DLPack code " +
                         std::to_string(t.dtype.code) + ", " + std::to_string(t.dtype.bits) +
                         " bits, " + std::to_string(t.dtype.lanes) + " lanes); " + kSupportedTypes);
  }
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    std::vector<int64_t> strides(t.strides, t.strides + t.ndim);
    if (!IsContiguous(shape, strides, 1)) ThrowNonContiguous(shape, strides, "elements");
  }
  int device = kCpuDevice;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      device = t.device.device_id;
      break;
    default:
      throw py::type_error("ranktime: unsupported DLPack device type " +
                           std::to_string(static_cast<int>(t.device.device_type)) +
                           " (supported: CPU, CUDA)");
  }

  result.view_.data = static_cast<char*>(t.data) + t.byte_offset;
  result.view_.dtype = *dtype;
  result.view_.shape = std::move(shape);
  result.view_.device = device;
  UseValidPointerWhenEmpty(result.view_);
  return result;
}

ImportedTensor::ImportedTensor(ImportedTensor&& other) noexcept
    : view_(std::move(other.view_)),
      buffer_(std::move(other.buffer_)),
      managed_(std::exchange(other.managed_, nullptr)) {
  other.buffer_.reset();
}

ImportedTensor& ImportedTensor::operator=(ImportedTensor&& other) noexcept {
  if (this != &other) {
    Release();
    view_ = std::move(other.view_);
    buffer_ = std::move(other.buffer_);
    other.buffer_.reset();
    managed_ = std::exchange(other.managed_, nullptr);
  }
  return *this;
}

ImportedTensor::~ImportedTensor() { Release(); }

void ImportedTensor::Release() {
  buffer_.reset();
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
  managed_ = nullptr;
}

}  // namespace ranktime::python
