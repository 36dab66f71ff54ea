// How ranktime waits for other processes (docs/architecture.md, "Waiting without spinning"):
// poll without sleeping for a short spin, since a peer that is nearly there answers within it and
// a sleep would add the timer's latency; then sleep between polls, each sleep twice the last up
// to a cap, so that a late peer costs a few wake-ups instead of a core, and is noticed at most
// one sleep after it arrives.
#pragma once

#include <algorithm>
#include <chrono>

namespace ranktime {

class Backoff {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The first sleep after the spin.
  static constexpr std::chrono::nanoseconds kFirstSleep = std::chrono::microseconds(4);
  // The longest sleep while something is in flight: bounds how late a peer's arrival (a message,
  // a collective's other ranks) is noticed. Idle waits may sleep longer.
  static constexpr std::chrono::nanoseconds kBusyCap = std::chrono::microseconds(200);

  // Spins for `spin` from `start`.
  Backoff(std::chrono::nanoseconds spin, TimePoint start) : spin_(spin), since_(start) {}

  // Something happened: spin again from `now`.
  void restart(TimePoint now) {
    since_ = now;
    sleep_ = std::chrono::nanoseconds(0);
  }
  // How long to sleep before the next poll: zero during the spin, then kFirstSleep doubling up
  // to `cap`.
  std::chrono::nanoseconds next(TimePoint now, std::chrono::nanoseconds cap) {
    if (now - since_ < spin_) return std::chrono::nanoseconds(0);
    sleep_ = std::min(cap, std::max(kFirstSleep, sleep_ * 2));
    return sleep_;
  }

 private:
  std::chrono::nanoseconds spin_;
  TimePoint since_;
  std::chrono::nanoseconds sleep_{0};
};

}  // namespace ranktime
