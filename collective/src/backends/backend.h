// The one seam between the runtime and whatever moves tensor data: every rank enqueues every
// response in the same order; a backend hands back a Completion per response, which the runtime
// records in the timeline and turns into completed handles (in one place for every backend).
// Siblings: mpi/ (host memory, finishes inside enqueue), gpu/ (device memory, finishes later on
// its own threads), and the in-process tests' thread backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/clock.h"
#include "core/message.h"
#include "core/tensor_entry.h"

namespace ranktime {

// One executed response.
struct Completion {
  Response response;  // copy of the executed response
  std::vector<TensorEntry*> entries;
  // This rank's clock (Clock::now_ns()): the response arrived, its work started, its work ended.
  // The timeline's QUEUE is arrival -> start.
  int64_t arrival_ns = 0, start_ns = 0, end_ns = 0;
  PhaseLog log;  // sub-phases, in order, non-overlapping
  Status status;
  // Record each tensor's lane on its own (per-tensor records) instead of one fused batch record:
  // the GPU path may time the tensors of a batch apart. Entry i's lane then gets entry_logs[i]
  // when there is one (its own waits, then the shared phases), `log` otherwise.
  bool per_tensor = false;
  std::vector<PhaseLog> entry_logs;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Starts `response` for `entries` (one per response name, same order); it arrived at
  // `arrival_ns`. Called on the background thread for every response routed here, in response
  // order on every rank.
  virtual void enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
                       int64_t arrival_ns) = 0;
  // Hands every completion ready so far to `finish`, in completion order; each is forgotten once
  // `finish` returns (so a backend may reuse its memory: the MPI backend allocates nothing per
  // response).
  virtual void take_completions(const std::function<void(Completion&)>& finish) = 0;
  // Responses enqueued whose completion has not been taken yet.
  virtual size_t pending() const = 0;
  // Blocks until every enqueued response's completion is ready (before entries die or the
  // timeline closes).
  virtual void drain() = 0;
  // True when enqueue() runs the collective itself and returns with its completion ready (MPI):
  // the runtime then shows the watchdog which collective blocks it, and completes at once.
  // False: completions come later, announced by the wake callback the backend was made with.
  virtual bool completes_in_enqueue() const { return false; }
};

// A backend that runs each response inside enqueue() (MPI's, the in-process tests' thread
// backend): its completion is ready when enqueue() returns, in one Completion reused for every
// response (its vectors keep their memory: nothing is allocated per response).
class InlineBackend : public Backend {
 public:
  void enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
               int64_t arrival_ns) final {
    Completion& c = done_;
    c.response = response;
    c.entries = entries;
    c.arrival_ns = arrival_ns;
    c.log.clear();
    c.start_ns = clock_->now_ns();
    c.status = run(response, entries, &c.log);
    c.end_ns = clock_->now_ns();
    done_waiting_ = true;
  }
  void take_completions(const std::function<void(Completion&)>& finish) final {
    if (!done_waiting_) return;
    done_waiting_ = false;
    finish(done_);
  }
  size_t pending() const final { return done_waiting_ ? 1 : 0; }
  void drain() final {}
  bool completes_in_enqueue() const final { return true; }

 protected:
  explicit InlineBackend(const Clock* clock) : clock_(clock) {}
  // Runs `response` for `entries`, recording its sub-phases into *log; the response's outcome.
  virtual Status run(const Response& response, const std::vector<TensorEntry*>& entries,
                     PhaseLog* log) = 0;
  const Clock* clock_;

 private:
  Completion done_;
  bool done_waiting_ = false;
};

}  // namespace ranktime
