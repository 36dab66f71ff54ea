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

// Copies bytes [begin, end) of the layout between the tensors and `buffer`, which holds exactly
// those bytes (buffer[0] is the layout's byte `begin`).
void copy_fused_range(const std::vector<TensorEntry*>& entries, size_t begin, size_t end,
                      uint8_t* buffer, FusionCopy direction);

}  // namespace ranktime
