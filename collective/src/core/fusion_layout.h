// A fused batch's host layout: its tensors back to back, in response order, with no padding (the
// MPI backend's fusion buffer). A fused allreduce moves the layout a chunk at a time, so a chunk's
// bytes may begin and end inside tensors; these copy any byte range of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor_entry.h"

namespace ranktime {

// Bytes of the whole layout.
size_t fused_bytes(const std::vector<TensorEntry*>& entries);

enum class FusionCopy {
  kIn,   // from the tensors into the buffer
  kOut,  // from the buffer back into the tensors
};

// Where each tensor of a batch begins in the layout, found once per batch, so that copying a
// stage finds its first tensor by binary search instead of walking the batch again.
class FusedLayout {
 public:
  explicit FusedLayout(const std::vector<TensorEntry*>& entries);

  size_t bytes() const { return starts_.back(); }

  // Copies bytes [begin, end) of the layout between the tensors and `buffer`, which holds exactly
  // those bytes (buffer[0] is the layout's byte `begin`).
  void copy(size_t begin, size_t end, uint8_t* buffer, FusionCopy direction) const;

 private:
  const std::vector<TensorEntry*>& entries_;
  std::vector<size_t> starts_;  // entries_.size() + 1: each tensor's first byte, then the end
};

}  // namespace ranktime
