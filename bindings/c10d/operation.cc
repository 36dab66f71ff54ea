// Operation, Work and Completer; see operation.h.
#include "operation.h"

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <stdexcept>
#include <utility>

namespace ranktime::c10d {
namespace {

// A CUDA call's future knows its device, as NCCL's and gloo's do: markCompleted() records an event
// on the device's current stream (complete() makes that the submission stream), and wait() and
// then()'s callbacks make their own streams wait on it. DDP's reducer relies on this.
c10::intrusive_ptr<c10::ivalue::Future> make_future(c10::Device device) {
  std::vector<c10::Device> devices;
  if (device.is_cuda()) devices.push_back(device);
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                  std::move(devices));
}

}  // namespace

Operation::Operation(std::string call, std::string name, std::vector<at::Tensor> outputs,
                     c10::Device device)
    : call_(std::move(call)),
      name_(std::move(name)),
      outputs_(std::move(outputs)),
      order_(device.is_cuda() ? std::make_unique<StreamOrder>(device) : nullptr),
      future_(make_future(device)) {}

TensorView Operation::placed(TensorView view) {
  if (order_) {
    view.device = order_->stream().device_index();
    view.ready_event = order_->ready_event();
  }
  return view;
}

bool Operation::ready() const {
  for (const Handle& h : handles_) {
    if (!h.ready()) return false;
  }
  return true;
}

void Operation::complete() {
  // Results copied into the caller's CUDA tensors (finish steps) are copied on the stream the call
  // was submitted on, after the caller's earlier work on them; the future's event is recorded
  // there too.
  c10::OptionalStreamGuard on_submission_stream;
  if (order_) on_submission_stream.reset_stream(order_->stream());
  bool completed_here = false;
  std::call_once(once_, [&] {
    std::exception_ptr error;
    // A CUDA tensor's handle completes only after ranktime's GPU path has finished its device work
    // (its completion thread waits for the job's last event on the CPU): in-place results are in
    // device memory by now, visible to any stream torch runs later, so they need no event of ours.
    for (const Handle& h : handles_) {
      Status status = h.wait();
      if (!status.ok() && !error) {
        error = std::make_exception_ptr(std::runtime_error("ranktime: " + call_ + " '" + name_ +
                                                           "' failed: " + status.message()));
      }
    }
    try {
      for (const Finish& finish : finish_) {
        if (!error) finish(handles_);
      }
    } catch (...) {
      error = std::current_exception();
    }
    finish_.clear();
    // The runtime is done with them. A CUDA buffer was allocated on the submission stream, where
    // the caching allocator reuses it only after the finish steps' copies from it.
    buffers_.clear();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = error;
    }
    cv_.notify_all();
    completed_here = true;
  });
  // The future's callbacks run here, outside call_once: one that waits on this operation again
  // must find it done rather than deadlock.
  if (completed_here) {
    if (error_) {
      future_->setError(error_);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }
}

bool Operation::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr Operation::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

bool Operation::wait_done(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [&] { return done_; });
}

Work::Work(std::shared_ptr<Operation> op, ::c10d::OpType type, int rank)
    : ::c10d::Work(rank, type), op_(std::move(op)) {}

bool Work::isCompleted() {
  if (!op_->done() && op_->ready()) op_->complete();  // does not block: every handle is done
  return op_->done();
}

bool Work::isSuccess() const { return op_->done() && !op_->error(); }

std::exception_ptr Work::exception() const { return op_->error(); }

std::vector<at::Tensor> Work::result() { return op_->outputs(); }

bool Work::wait(std::chrono::milliseconds timeout) {
  ::ranktime::detail::BlockedScope blocked;  // waiting for other ranks: not a region's own time
  if (timeout == kNoTimeout) {
    op_->complete();
  } else if (!op_->wait_done(timeout)) {
    TORCH_CHECK(false, "ranktime: ", ::c10d::opTypeToString(retrieveOpType()), " '", op_->name(),
                "' did not complete within ", timeout.count(), " ms");
  }
  if (std::exception_ptr error = op_->error()) std::rethrow_exception(error);
  synchronize();
  return true;
}

void Work::synchronize() {
  // Returns at once for host tensors (the future has no events); waits for completion first when
  // called before it.
  op_->future()->wait();
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return op_->future(); }

Completer::Completer() : thread_([this] { run(); }) {}

Completer::~Completer() {
  // The last reference to an operation may free tensors that Python still sees, which takes the
  // GIL: the completer thread must be able to take it while this one waits for it to end.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (PyGILState_Check()) no_gil.emplace();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Completer::push(std::shared_ptr<Operation> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void Completer::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left in flight
    std::shared_ptr<Operation> oldest = queue_.front();
    lock.unlock();
    oldest->complete();
    oldest.reset();  // like `finished` below: never the last reference under the lock
    lock.lock();
    // Operations that finished while the oldest was pending (the runtime may order them
    // differently, and callers may have waited on some themselves) need not wait their turn.
    std::vector<std::shared_ptr<Operation>> finished;
    std::deque<std::shared_ptr<Operation>> pending;
    for (auto& op : queue_) {
      if (op->done() || op->ready()) {
        finished.push_back(std::move(op));
      } else {
        pending.push_back(std::move(op));
      }
    }
    queue_ = std::move(pending);
    lock.unlock();
    for (auto& op : finished) op->complete();
    finished.clear();  // may be the last reference to an operation's buffers: not under the lock
    lock.lock();
  }
}

}  // namespace ranktime::c10d
