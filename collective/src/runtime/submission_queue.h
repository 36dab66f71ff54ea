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
  // handle completes at once.
  Handle submit(std::unique_ptr<TensorEntry> entry, const std::string& local_error,
                const Clock& clock);
  // The same for a group's entries, all or nothing: all are queued, with one ready time, or none.
  std::vector<Handle> submit(std::vector<std::unique_ptr<TensorEntry>> entries,
                             const std::string& local_error, const Clock& clock);
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

  bool ready(bool announced) const;  // under mutex_: a reason to end the sleep
  void notify();                     // after a change ready() reads
};

}  // namespace ranktime
