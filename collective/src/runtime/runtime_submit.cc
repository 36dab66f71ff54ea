// One rank's runtime, continued: what user threads call to queue work, and synchronous calls,
// which run the loop's steps on the calling thread (see runtime.h).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "runtime/runtime.h"

namespace ranktime {

std::unique_ptr<TensorEntry> Runtime::make_set_entry(
    OpType op, const TensorView& view, const std::string& name, ReduceOp reduce_op, int root,
    std::string argument, uint8_t flags, std::vector<int32_t> splits, int32_t process_set,
    const ProcessSetRegistry::Submission& in_set, std::string* local_error) const {
  auto entry = make_entry(op, view, name + in_set.label, reduce_op, root, std::move(argument),
                          flags, check_device_, local_error, std::move(splits), in_set.size);
  entry->request.process_set = process_set;
  if (entry->request.error.empty()) entry->request.error = in_set.request;
  if (local_error->empty() && !in_set.local.empty()) {
    *local_error = "tensor '" + name + "': " + in_set.local;
  }
  return entry;
}

Handle Runtime::submit(OpType op, const TensorView& view, const std::string& name,
                       ReduceOp reduce_op, int root, std::string argument, uint8_t flags,
                       int32_t process_set, bool wake_loop) {
  std::string local_error;
  auto entry = make_set_entry(op, view, name, reduce_op, root, std::move(argument), flags, {},
                              process_set, sets_.check(process_set, op, root), &local_error);
  return queue_.submit(std::move(entry), local_error, clock_, wake_loop);
}

Status Runtime::run(OpType op, const TensorView& view, const std::string& name, ReduceOp reduce_op,
                    int root, int32_t process_set) {
  // A device backend's work stays on the background thread (its CUDA device and streams). On a
  // crowded host the caller's spin would take a late rank's core (the background thread's is
  // as long, but a caller that hands the steps back adds two handoffs to it).
  const bool here = !crowded_ && !has_device_backend();
  Handle handle = submit(op, view, name, reduce_op, root, {}, 0, process_set, !here);
  if (here) run_steps_until(handle);
  return handle.wait();
}

void Runtime::run_steps_until(const Handle& handle) {
  // The same spin as the background thread's after progress (core/backoff.h).
  auto deadline = std::chrono::steady_clock::now() + config_.spin();
  while (!queue_.begin_caller_steps()) {
    if (handle.ready() || std::chrono::steady_clock::now() > deadline) {
      queue_.withdraw_caller();
      return;
    }
  }
  uint32_t seen = queue_.wake_value();  // before the last step (none: now)
  while (!handle.ready() && !finished_) {
    seen = queue_.wake_value();
    const bool progressed = step();
    const auto now = std::chrono::steady_clock::now();
    if (progressed) {
      deadline = now + config_.spin();
    } else if (now > deadline) {
      break;
    }
  }
  queue_.end_caller_steps(finished_ || busy(), seen);
}

Handle Runtime::submit_alltoall(const TensorView& view, std::vector<int32_t> splits,
                                const std::string& name, int32_t process_set) {
  std::string local_error;
  auto entry =
      make_set_entry(OpType::kAlltoall, view, name, ReduceOp::kSum, 0, {}, 0, std::move(splits),
                     process_set, sets_.check(process_set, OpType::kAlltoall, 0), &local_error);
  return queue_.submit(std::move(entry), local_error, clock_);
}

std::vector<Handle> Runtime::submit_group(OpType op, const std::vector<TensorView>& views,
                                          const std::string& name, ReduceOp reduce_op,
                                          int32_t process_set) {
  std::string local_error;
  std::vector<std::unique_ptr<TensorEntry>> entries;
  const std::string of = "of" + std::to_string(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const auto in_set = sets_.check(process_set, op, 0);
    auto entry = make_set_entry(op, views[i], name + "_" + std::to_string(i + 1) + of, reduce_op, 0,
                                {}, 0, {}, process_set, in_set, &local_error);
    // Rank 0 holds groups by name: a set's are its own, as its tensors are.
    entry->request.group = name + in_set.label;
    entry->request.group_size = static_cast<uint32_t>(views.size());
    entries.push_back(std::move(entry));
  }
  return queue_.submit(std::move(entries), local_error, clock_);
}

}  // namespace ranktime
