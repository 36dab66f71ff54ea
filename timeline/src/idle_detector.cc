// The trace writer's idle detector (see idle_detector.h).
#include "idle_detector.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "futex.h"

namespace ranktime::timeline {
namespace {

// The request word's values.
constexpr int kIdleNotAsked = 0;
constexpr int kIdleAsked = 1;
constexpr int kIdleQuit = 2;

}  // namespace

void WakeSignals::ask_for_an_idle_core() {
  int expected = kIdleNotAsked;
  if (idle_request.compare_exchange_strong(expected, kIdleAsked)) futex::wake(&idle_request);
}

void WakeSignals::stop_detector() {
  idle_request.store(kIdleQuit);
  futex::wake(&idle_request);
}

void set_own_policy(int policy) {
  sched_param param{};
  pthread_setschedparam(pthread_self(), policy, &param);
}

void run_idle_detector(const std::shared_ptr<WakeSignals>& signals) {
  // Where SCHED_IDLE is refused, every signal is a false one, and the writer writes a piece at
  // a time as soon as a batch is worth writing.
  set_own_policy(SCHED_IDLE);
  for (;;) {
    const int request = signals->idle_request.load();
    if (request == kIdleQuit) return;
    if (request == kIdleAsked) {
      // Running at all means a core had nothing else to do.
      signals->idle_request.store(kIdleNotAsked);
      signals->idle_seen.store(true);
      signals->wake.notify_one();  // without the mutex: a missed signal costs the writer a recheck
      continue;
    }
    futex::wait(&signals->idle_request, request);
  }
}

}  // namespace ranktime::timeline
