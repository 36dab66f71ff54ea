// A fused batch's host layout (see fusion_layout.h).
#include "core/fusion_layout.h"

#include <algorithm>
#include <cstring>

namespace ranktime {

size_t fused_bytes(const std::vector<TensorEntry*>& entries) {
  size_t total = 0;
  for (const TensorEntry* e : entries) total += e->view.num_bytes();
  return total;
}

void copy_fused_range(const std::vector<TensorEntry*>& entries, size_t begin, size_t end,
                      uint8_t* buffer, FusionCopy direction) {
  size_t start = 0;  // the current tensor's first byte in the layout
  for (const TensorEntry* e : entries) {
    if (start >= end) return;
    const size_t bytes = e->view.num_bytes();
    const size_t from = std::max(begin, start), to = std::min(end, start + bytes);
    if (from < to) {
      uint8_t* tensor = static_cast<uint8_t*>(e->view.data) + (from - start);
      uint8_t* fused = buffer + (from - begin);
      if (direction == FusionCopy::kIn) {
        std::memcpy(fused, tensor, to - from);
      } else {
        std::memcpy(tensor, fused, to - from);
      }
    }
    start += bytes;
  }
}

}  // namespace ranktime
