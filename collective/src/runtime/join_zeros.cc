// Zeros for a joined rank (see join_zeros.h).
#include "runtime/join_zeros.h"

namespace ranktime {

void JoinZeros::fill(const Response& response, std::vector<TensorEntry*>* found) {
  zeros_.clear();
  buffers_.clear();
  for (size_t i = 0; i < found->size(); ++i) {
    if ((*found)[i] != nullptr) continue;
    const int64_t n = i < response.tensor_sizes.size() ? response.tensor_sizes[i] : 0;
    buffers_.emplace_back(static_cast<size_t>(n) * dtype_size(response.dtype), std::byte{0});
    auto entry = std::make_unique<TensorEntry>();
    entry->request.name = response.names[i];
    entry->request.op = response.op;
    entry->request.dtype = response.dtype;
    entry->view = TensorView{buffers_.back().data(), response.dtype, {n}};
    entry->handle = std::make_shared<detail::HandleState>();
    (*found)[i] = entry.get();
    zeros_.push_back(std::move(entry));
  }
}

}  // namespace ranktime
