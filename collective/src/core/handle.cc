// ranktime::Handle (ranktime.h) over the completion state the runtime fills (tensor_entry.h).
#include "core/tensor_entry.h"

namespace ranktime {

Status Handle::wait() const {
  if (!state_) return Status::Error("wait() on an empty ranktime::Handle");
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->done) {
    detail::BlockedScope blocked;  // waiting for other ranks: not a region's own time
    state_->cv.wait(lock, [&] { return state_->done; });
  }
  return state_->status;
}

bool Handle::ready() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

const std::vector<std::byte>& Handle::output() const { return state_->output; }
const std::vector<int64_t>& Handle::output_shape() const { return state_->output_shape; }
const std::vector<int32_t>& Handle::received_splits() const { return state_->received_splits; }

}  // namespace ranktime
