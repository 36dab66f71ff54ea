// Zeros for a joined rank (see join_zeros.h).
#include "runtime/join_zeros.h"

namespace ranktime {

void JoinZeros::fill(const Response& response, std::vector<TensorEntry*>* found) {
  zeros_.clear();
  buffers_.clear();
  const bool on_host = response.device == kCpuDevice;
  for (size_t i = 0; i < found->size(); ++i) {
    if ((*found)[i] != nullptr) continue;
    const int64_t n = i < response.tensor_sizes.size() ? response.tensor_sizes[i] : 0;
    auto entry = std::make_unique<TensorEntry>();
    entry->request.name = response.names[i];
    entry->request.op = response.op;
    entry->request.dtype = response.dtype;
    entry->request.device = response.device;
    entry->view = TensorView{nullptr, response.dtype, {n}, response.device};
    if (on_host) {
      buffers_.emplace_back(static_cast<size_t>(n) * dtype_size(response.dtype), std::byte{0});
      entry->view.data = buffers_.back().data();
    }
    entry->join_zeros = true;
    entry->handle = std::make_shared<detail::HandleState>();
    (*found)[i] = entry.get();
    zeros_.push_back(std::move(entry));
  }
}

}  // namespace ranktime
