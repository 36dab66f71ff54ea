// Turns a Python tensor (a DLPack capsule, an object with __dlpack__, or anything with the buffer
// protocol) into a ranktime::TensorView without copying, and keeps its memory alive meanwhile.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "dlpack_abi.h"
#include "ranktime/ranktime.h"

namespace ranktime::python {

namespace py = pybind11;

// Owns what keeps an imported tensor's memory valid: the buffer-protocol export or the consumed
// DLPack capsule. Destroy it with the GIL held (a producer's deleter may touch Python objects).
class ImportedTensor {
 public:
  // `writable`: the operation writes into the tensor (allreduce, broadcast). Raises TypeError for
  // an unsupported type or dtype and ValueError for a non-contiguous or read-only tensor.
  static ImportedTensor FromObject(py::handle obj, bool writable);

  ImportedTensor(ImportedTensor&& other) noexcept;
  ImportedTensor& operator=(ImportedTensor&& other) noexcept;
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  ~ImportedTensor();

  const TensorView& view() const { return view_; }

 private:
  ImportedTensor() = default;
  static ImportedTensor FromBuffer(py::handle obj, bool writable);
  static ImportedTensor FromCapsule(py::handle capsule);
  void Release();

  TensorView view_;
  std::optional<py::buffer_info> buffer_;  // buffer-protocol export, released with it
  DLManagedTensor* managed_ = nullptr;     // consumed DLPack tensor, deleted with it
};

}  // namespace ranktime::python
