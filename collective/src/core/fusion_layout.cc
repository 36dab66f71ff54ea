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

FusedLayout::FusedLayout(const std::vector<TensorEntry*>& entries) : entries_(entries) {
  starts_.reserve(entries.size() + 1);
  starts_.push_back(0);
  for (const TensorEntry* e : entries) starts_.push_back(starts_.back() + e->view.num_bytes());
}

void FusedLayout::copy(size_t begin, size_t end, uint8_t* buffer, FusionCopy direction) const {
  end = std::min(end, bytes());
  // The last tensor that starts at or before `begin` (empty tensors before it copy nothing).
  size_t t = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                 starts_.begin());
  for (t = t == 0 ? 0 : t - 1; t < entries_.size() && starts_[t] < end; ++t) {
    const size_t from = std::max(begin, starts_[t]), to = std::min(end, starts_[t + 1]);
    if (from >= to) continue;
    uint8_t* tensor = static_cast<uint8_t*>(entries_[t]->view.data) + (from - starts_[t]);
    uint8_t* fused = buffer + (from - begin);
    if (direction == FusionCopy::kIn) {
      std::memcpy(fused, tensor, to - from);
    } else {
      std::memcpy(tensor, fused, to - from);
    }
  }
}

}  // namespace ranktime
