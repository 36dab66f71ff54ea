// What user threads share with the background thread, under one mutex: the entries submitted and
// not yet taken, every handle not yet completed (by tensor name), the shutdown request, whether
// the runtime has stopped taking work, and the wake-ups of the background thread's sleep.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/tensor_entry.h"
#include "runtime/wake_word.h"

namespace ranktime {

// A submission as a queue entry. Problems with the tensor go into request.error (they travel to
// rank 0, which fails the tensor on every rank; entry->invalid_argument when they are about the
// call's own arguments); problems that make the request unsendable (name, argument) into
// *local_error. `check_device` says why a device tensor cannot run here. `splits`: alltoall's,
// checked against `size` ranks (empty: an equal split, filled in here).
std::unique_ptr<TensorEntry> make_entry(OpType op, const TensorView& view, const std::string& name,
                                        ReduceOp reduce_op, int root, std::string argument,
                                        uint8_t flags,
                                        const std::function<std::string(int)>& check_device,
                                        std::string* local_error, std::vector<int32_t> splits = {},
                                        int size = 1);

class SubmissionQueue {
 public:
  // User threads. Queues `entry`, stamping its ready time from `clock`, or completes its handle
  // at once: with `local_error`, when the runtime has stopped, or when its name is in flight. An
  // entry with an invalid argument is queued (its error must reach the other ranks) and its
  // handle completes at once. `wake_loop` false: the caller runs the loop's steps next
  // (begin_caller_steps), so the background thread is not woken for it.
  Handle submit(std::unique_ptr<TensorEntry> entry, const std::string& local_error,
                const Clock& clock, bool wake_loop = true);
  // The same for a group's entries, all or nothing: all are queued, with one ready time, or none.
  std::vector<Handle> submit(std::vector<std::unique_ptr<TensorEntry>> entries,
                             const std::string& local_error, const Clock& clock,
                             bool wake_loop = true);
  // Asks the background thread to shut down; the first reason stands, a fatal signal's wins.
  void request_shutdown(const std::string& why);
  // Set when a fatal signal arrived: the reason any shutdown then gives.
  void set_signal_reason(const std::string& why);
  // Fails every handle not yet completed with `reason` and refuses new submissions (any thread;
  // the background thread's own state stays its own).
  void fail_pending(const std::string& reason);
  // How many operations are pending, and up to about `max_chars` of their names, quoted.
  size_t pending_names(size_t max_chars, std::string* names);

  // Background thread. Moves the entries submitted since the last call into *out.
  void take(std::vector<std::unique_ptr<TensorEntry>>* out);
  // Frees `name` for the next submission (before its handle completes: the waiter may reuse the
  // name at once).
  void release(const std::string& name);
  // Refuses new submissions with `reason` and hands back the entries never taken.
  std::vector<std::unique_ptr<TensorEntry>> stop(const std::string& reason);
  // The shutdown reason, when shutdown was requested.
  bool shutdown_requested(std::string* why);
  // Sleeps up to `timeout`, less when work is submitted, a shutdown not yet `announced` is
  // requested, or a backend has completions waiting; with a wake word, also when another rank
  // bumps it. True when woken before the timeout.
  bool wait(std::chrono::nanoseconds timeout, bool announced);
  // Before the background thread starts: sleep on `word` (not owned) instead of the condition
  // variable, and bump it for every reason to wake, so that one sleep ends for either.
  void set_wake_word(WakeWord* word) { wake_word_ = word; }
  bool has_wake_word() const { return wake_word_ != nullptr; }
  // From a backend's thread: completions are waiting.
  void wake_for_completions();
  // Whether completions were announced since the last call.
  bool take_completions_wake();

  // The loop's steps run on one thread at a time: the background thread, or a user thread in a
  // synchronous call that runs them itself instead of handing its work over and sleeping until
  // woken (docs/architecture.md, "Synchronous calls"). Background thread, around each step:
  // false while a user thread runs them or asks to (wait() then sleeps until it hands them back).
  bool begin_loop_step();
  void end_loop_step();
  // User thread: true when it may run the steps now. False while another user thread runs them,
  // or while the background thread is inside a step (which then hands them over at its end: try
  // again).
  bool begin_caller_steps();
  // User thread, after begin_caller_steps(): hands the steps back, waking the background thread
  // when `work_left`, when work came for it meanwhile, or (with a wake word) when the word moved
  // since `seen` (wake_value() before the last step: a message may be waiting).
  void end_caller_steps(bool work_left, uint32_t seen);
  // User thread that did not get the steps: stops asking, and wakes the background thread (the
  // caller's submission did not).
  void withdraw_caller();
  uint32_t wake_value() const { return wake_word_ != nullptr ? wake_word_->value() : 0; }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<TensorEntry>> submitted_;
  std::unordered_map<std::string, std::shared_ptr<detail::HandleState>> names_in_flight_;
  bool shutdown_requested_ = false;
  std::string shutdown_why_;  // this rank's reason, as the other ranks will read it
  std::string signal_why_;
  bool stopped_ = false;
  std::string stop_reason_;
  bool completions_waiting_ = false;
  WakeWord* wake_word_ = nullptr;
  bool loop_stepping_ = false;     // the background thread is inside a step
  bool caller_steps_ = false;      // a user thread runs the steps
  bool caller_asks_ = false;       // a user thread waits for the background thread's step to end
  bool handed_back_work_ = false;  // a user thread handed the steps back with work left

  bool ready(bool announced) const;  // under mutex_: a reason to end the sleep
  // Under mutex_: a user thread runs the steps or waits for the loop's to end.
  bool caller_has_steps() const { return caller_steps_ || caller_asks_; }
  void notify();  // after a change ready() reads
};

}  // namespace ranktime
