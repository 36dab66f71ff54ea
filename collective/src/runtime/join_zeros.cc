// Zeros for a joined rank (see join_zeros.h).
#include "runtime/join_zeros.h"

namespace ranktime {

void JoinZeros::fill(const Response& response, std::vector<TensorEntry*>* found) {
  const bool on_host = response.device == kCpuDevice;
  for (size_t i = 0; i < found->size(); ++i) {
    if ((*found)[i] != nullptr) continue;
    const int64_t n = i < response.tensor_sizes.size() ? response.tensor_sizes[i] : 0;
    Zeros z;
    z.entry = std::make_unique<TensorEntry>();
    TensorEntry& entry = *z.entry;
    entry.request.name = response.names[i];
    entry.request.op = response.op;
    entry.request.dtype = response.dtype;
    entry.request.device = response.device;
    entry.view = TensorView{nullptr, response.dtype, {n}, response.device};
    if (on_host) {
      z.buffer.assign(static_cast<size_t>(n) * dtype_size(response.dtype), std::byte{0});
      entry.view.data = z.buffer.data();
    }
    entry.join_zeros = true;
    entry.handle = std::make_shared<detail::HandleState>();
    (*found)[i] = &entry;
    zeros_.emplace(&entry, std::move(z));
  }
}

void JoinZeros::release(const TensorEntry* entry) { zeros_.erase(entry); }

}  // namespace ranktime
