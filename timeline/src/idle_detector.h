// The trace writer's idle detector: a thread at SCHED_IDLE priority that holds no lock. Asked
// through a futex, it runs only when a core has nothing else to do, and then tells the writer so
// (trace_writer.cc says how the writer uses it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>

namespace ranktime::timeline {

// What the writer and the idle detector share. The detector is never joined (at SCHED_IDLE
// priority it may not run again for a long time on a busy machine, and close() must not wait for
// it), so this outlives the writer while the detector holds it.
struct WakeSignals {
  std::condition_variable wake;      // the writer thread waits on it (with the writer's mutex)
  std::atomic<int> idle_request{0};  // the detector's request word (idle_detector.cc)
  std::atomic<bool> idle_seen{false};

  // Writer: asks the detector to run (a no-op while a request is pending).
  void ask_for_an_idle_core();
  // Writer: the detector returns (at its next chance to run).
  void stop_detector();
};

// The calling thread's scheduling policy (SCHED_IDLE, SCHED_BATCH: no priority to set). Best
// effort: where refused, the thread stays SCHED_OTHER.
void set_own_policy(int policy);

// The detector's thread body: sets idle_seen and notifies `wake` each time it gets to run after
// a request, until stop_detector().
void run_idle_detector(const std::shared_ptr<WakeSignals>& signals);

}  // namespace ranktime::timeline
