// One torch.distributed call in flight on ranktime: the runtime's handles, the buffers they use,
// the c10d Work and Future that report it, and the thread that completes them. ranktime's public
// API offers a blocking wait and a poll per handle, not a callback, so one thread per process
// group waits on the oldest call and sweeps up any others that have finished meanwhile.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/ranktime.h"
#include "stream_order.h"

namespace ranktime::c10d {

class Operation {
 public:
  // Copies results into the caller's tensors once every handle has succeeded; may throw.
  using Finish = std::function<void(const std::vector<Handle>&)>;

  // `call`: the torch.distributed call ("allreduce"), `name`: the tensor name in ranktime, for
  // messages; `outputs`: what Work::result() and the future's value hold; `device`: where the
  // call's tensors are (call_device()). Made on the thread that submits the call: a CUDA device's
  // current stream is taken from it.
  Operation(std::string call, std::string name, std::vector<at::Tensor> outputs,
            c10::Device device);

  // Set-up, before the operation is handed to the completer.
  void add(Handle handle) { handles_.push_back(std::move(handle)); }
  void keep(at::Tensor buffer) { buffers_.push_back(std::move(buffer)); }
  // Steps run in order once every handle has succeeded.
  void on_success(Finish finish) { finish_.push_back(std::move(finish)); }
  // `view` (of a buffer this operation keeps) on the call's device: for a CUDA device, its ordinal
  // and the ready event (StreamOrder), recorded at the first call; make every buffer first.
  TensorView placed(TensorView view);

  const std::string& call() const { return call_; }
  const std::string& name() const { return name_; }
  const std::vector<at::Tensor>& outputs() const { return outputs_; }
  const c10::intrusive_ptr<c10::ivalue::Future>& future() const { return future_; }

  // True once every handle has completed; never blocks.
  bool ready() const;
  // Waits for the handles, runs the finish step and completes the future, once; later and
  // concurrent calls wait for that. Safe from any thread, including the future's callbacks.
  void complete();
  // Whether complete() has finished, and its error (null on success).
  bool done() const;
  std::exception_ptr error() const;
  // Waits for done() up to `timeout`; false on timeout.
  bool wait_done(std::chrono::milliseconds timeout) const;

 private:
  const std::string call_, name_;
  const std::vector<at::Tensor> outputs_;
  std::vector<Handle> handles_;
  std::vector<at::Tensor> buffers_;  // memory the runtime reads and writes until completion
  std::vector<Finish> finish_;
  // CUDA calls only. Kept until the operation is destroyed, after its handles have completed:
  // the runtime may wait on the ready event until then.
  std::unique_ptr<StreamOrder> order_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;

  std::once_flag once_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// The c10d face of an Operation: wait(), isCompleted(), exception(), result(), getFuture().
class Work : public ::c10d::Work {
 public:
  Work(std::shared_ptr<Operation> op, ::c10d::OpType type, int rank);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  // Makes the caller's current stream wait for the results' last writes (the future's events);
  // nothing for host tensors. wait() does this too.
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::shared_ptr<Operation> op_;
};

// Completes operations in the background so that futures (which DDP waits on) complete without
// anyone calling Work::wait(). Drains every queued operation before its destructor returns: the
// runtime may still be using their buffers.
class Completer {
 public:
  Completer();
  ~Completer();
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void push(std::shared_ptr<Operation> op);
  // True on the completer's own thread (where futures' callbacks run).
  bool on_this_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Operation>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ranktime::c10d
