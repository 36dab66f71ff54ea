// Submissions from user threads (see submission_queue.h).
#include "runtime/submission_queue.h"

#include "core/adasum.h"
#include "core/wire.h"
#include "negotiation/validation.h"

namespace ranktime {

std::unique_ptr<TensorEntry> make_entry(OpType op, const TensorView& view, const std::string& name,
                                        ReduceOp reduce_op, int root, std::string argument,
                                        uint8_t flags,
                                        const std::function<std::string(int)>& check_device,
                                        std::string* local_error, std::vector<int32_t> splits,
                                        int size) {
  auto entry = std::make_unique<TensorEntry>();
  entry->handle = std::make_shared<detail::HandleState>();
  entry->view = view;
  Request& q = entry->request;
  q.name = name;
  q.op = op;
  q.reduce_op = reduce_op;
  q.dtype = view.dtype;
  q.device = view.device;
  q.root = root;
  q.shape = view.shape;
  q.flags = flags;
  q.argument = std::move(argument);
  if (op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast ||
      op == OpType::kReducescatter || op == OpType::kAlltoall) {
    q.error = check_tensor_view(view);
    if (q.error.empty()) {
      q.error = check_arguments(op, view, splits, size);
      if (q.error.empty() && reduce_op == ReduceOp::kAdasum)
        q.error = adasum_refusal(op, view, size);
      entry->invalid_argument = !q.error.empty();
    }
    if (q.error.empty() && view.device != kCpuDevice) q.error = check_device(view.device);
    // NCCL has no 16-bit integer type.
    if (q.error.empty() && view.device != kCpuDevice && view.dtype == DataType::kInt16)
      q.error = "int16 tensors are supported in host memory only, not on CUDA devices";
  }
  if (op == OpType::kAlltoall && splits.empty() && q.error.empty()) {
    splits.assign(size, static_cast<int32_t>(view.shape[0] / size));
  }
  entry->splits = std::move(splits);
  // A request must always fit the wire format, even a bad one: its error travels to rank 0.
  if (q.shape.size() > kMaxDims) q.shape.resize(kMaxDims);
  if (static_cast<int>(reduce_op) >= kNumReduceOps) {
    q.error = "invalid reduction value " + std::to_string(static_cast<int>(reduce_op));
    q.reduce_op = ReduceOp::kSum;
  }
  if (name.empty()) *local_error = "a tensor name must not be empty";
  if (q.argument.size() > kMaxArgumentBytes) {
    *local_error = "argument of " + std::to_string(q.argument.size()) +
                   " bytes is longer than the " + std::to_string(kMaxArgumentBytes) +
                   " bytes allowed";
  }
  if (name.size() > kMaxNameBytes) {
    *local_error = "tensor '" + name.substr(0, 64) + "...': name of " +
                   std::to_string(name.size()) + " bytes is longer than the " +
                   std::to_string(kMaxNameBytes) + " bytes allowed";
  }
  return entry;
}

Handle SubmissionQueue::submit(std::unique_ptr<TensorEntry> entry, const std::string& local_error,
                               const Clock& clock, bool wake_loop) {
  std::vector<std::unique_ptr<TensorEntry>> one;
  one.push_back(std::move(entry));
  return submit(std::move(one), local_error, clock, wake_loop).front();
}

std::vector<Handle> SubmissionQueue::submit(std::vector<std::unique_ptr<TensorEntry>> entries,
                                            const std::string& local_error, const Clock& clock,
                                            bool wake_loop) {
  std::vector<Handle> handles;
  std::string error = local_error;
  bool name_in_flight = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries) {
      const std::string& name = entry->request.name;
      if (stopped_) {
        error = stop_reason_ + "; tensor '" + name + "' was not submitted";
      } else if (error.empty() && names_in_flight_.count(name)) {
        name_in_flight = true;
        error = "tensor '" + name +
                "' was submitted twice while in flight: wait for the first "
                "operation to complete before reusing its name";
      }
      if (!error.empty()) break;
    }
    const int64_t now = clock.now_ns();
    for (auto& entry : entries) {
      handles.emplace_back(entry->handle);
      if (!error.empty()) continue;
      if (entry->invalid_argument) {  // before the loop can see it: its status is this one
        entry->handle->complete(Status::InvalidArgument("tensor '" + entry->request.name +
                                                        "': " + entry->request.error));
      }
      entry->request.ready_ns = now;
      names_in_flight_.emplace(entry->request.name, entry->handle);
      submitted_.push_back(std::move(entry));
    }
  }
  if (!error.empty()) {
    for (auto& entry : entries)
      entry->handle->complete(name_in_flight ? Status::NameInFlight(error) : Status::Error(error));
    return handles;
  }
  if (wake_loop) notify();
  return handles;
}

void SubmissionQueue::request_shutdown(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!shutdown_requested_) shutdown_why_ = signal_why_.empty() ? why : signal_why_;
    shutdown_requested_ = true;
  }
  notify();
}

void SubmissionQueue::set_signal_reason(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  signal_why_ = why;
}

void SubmissionQueue::fail_pending(const std::string& reason) {
  std::vector<std::pair<std::string, std::shared_ptr<detail::HandleState>>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopped_) {
      stopped_ = true;
      stop_reason_ = reason;
    }
    pending.assign(names_in_flight_.begin(), names_in_flight_.end());
  }
  for (auto& [name, handle] : pending)
    handle->complete(Status::Error(reason + "; tensor '" + name + "' did not complete"));
}

size_t SubmissionQueue::pending_names(size_t max_chars, std::string* names) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, handle] : names_in_flight_) {
    if (names->size() > max_chars) {
      *names += ", ...";
      break;
    }
    *names += (names->empty() ? "'" : ", '") + name + "'";
  }
  return names_in_flight_.size();
}

void SubmissionQueue::take(std::vector<std::unique_ptr<TensorEntry>>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  out->swap(submitted_);
}

void SubmissionQueue::release(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_in_flight_.erase(name);
}

std::vector<std::unique_ptr<TensorEntry>> SubmissionQueue::stop(const std::string& reason) {
  std::vector<std::unique_ptr<TensorEntry>> never_taken;
  std::lock_guard<std::mutex> lock(mutex_);
  stopped_ = true;
  stop_reason_ = reason;
  never_taken.swap(submitted_);
  names_in_flight_.clear();
  return never_taken;
}

bool SubmissionQueue::shutdown_requested(std::string* why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutdown_requested_ && why != nullptr) *why = shutdown_why_;
  return shutdown_requested_;
}

bool SubmissionQueue::ready(bool announced) const {
  if (caller_has_steps()) return false;  // the user thread ends the sleep (end/withdraw)
  return !submitted_.empty() || (shutdown_requested_ && !announced) || completions_waiting_ ||
         handed_back_work_;
}

bool SubmissionQueue::begin_loop_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (caller_has_steps()) return false;
  loop_stepping_ = true;
  handed_back_work_ = false;
  return true;
}

void SubmissionQueue::end_loop_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  loop_stepping_ = false;
}

bool SubmissionQueue::begin_caller_steps() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (caller_steps_) return false;
  if (loop_stepping_) {
    caller_asks_ = true;
    return false;
  }
  caller_steps_ = true;
  caller_asks_ = false;
  // Rank 0: the caller polls for the workers' messages now; their wake-ups would only take its
  // core for a background thread that cannot step.
  if (wake_word_ != nullptr) wake_word_->mute();
  return true;
}

void SubmissionQueue::end_caller_steps(bool work_left, uint32_t seen) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    caller_steps_ = false;
    wake = work_left || ready(false);
    if (wake_word_ != nullptr) {
      wake_word_->unmute();  // before reading the word: a later bump wakes the sleeper itself
      wake = wake || wake_word_->value() != seen;
    }
    handed_back_work_ = handed_back_work_ || wake;  // ends the background thread's wait()
  }
  if (wake) notify();
}

void SubmissionQueue::withdraw_caller() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    caller_asks_ = false;
  }
  notify();
}

void SubmissionQueue::notify() {
  cv_.notify_one();
  if (wake_word_ != nullptr) wake_word_->wake();
}

bool SubmissionQueue::wait(std::chrono::nanoseconds timeout, bool announced) {
  if (wake_word_ == nullptr) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return ready(announced); });
  }
  // The word is read before the check: a change made after the check bumps it past `seen`.
  const uint32_t seen = wake_word_->value();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ready(announced)) return true;
  }
  return wake_word_->wait(seen, timeout);
}

void SubmissionQueue::wake_for_completions() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completions_waiting_ = true;
  }
  notify();
}

bool SubmissionQueue::take_completions_wake() {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool waiting = completions_waiting_;
  completions_waiting_ = false;
  return waiting;
}

}  // namespace ranktime
