// Clocks: this process's timestamp source, and the estimate of another rank's clock offset from
// NTP-style exchanges (keep the sample with the smallest round trip). Pure maths, no MPI.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <deque>

namespace ranktime {

// Monotonic nanoseconds, shifted by RANKTIME_TEST_CLOCK_SKEW_US (a testing aid).
class Clock {
 public:
  explicit Clock(int64_t skew_ns = 0) : skew_ns_(skew_ns) {}
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
               .count() +
           skew_ns_;
  }

 private:
  int64_t skew_ns_;
};

// The calling thread's CPU time: what a thread spent itself, unaffected by other work on a shared
// machine (wall time there counts the time the thread waited for a core).
inline int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// One exchange: t0 rank 0 sent, t1 the rank received, t2 the rank replied, t3 rank 0 received
// (t0, t3 on rank 0's clock; t1, t2 on the rank's).
struct ClockSample {
  int64_t t0, t1, t2, t3;
  int64_t round_trip_ns() const { return (t3 - t0) - (t2 - t1); }
  // The rank's clock minus rank 0's, exact when the two one-way delays are equal.
  double offset_ns() const { return ((t1 - t0) + (t2 - t3)) / 2.0; }
  bool operator==(const ClockSample& o) const {
    return t0 == o.t0 && t1 == o.t1 && t2 == o.t2 && t3 == o.t3;
  }
};

// Tracks one rank's offset. Keeps recent samples (a sliding window, so that drift is followed)
// and uses the one with the smallest round trip: its error is at most half that round trip.
class OffsetEstimator {
 public:
  explicit OffsetEstimator(size_t window = 64) : window_(window) {}
  // Ignores malformed samples (negative round trip). Returns true if it was used.
  bool add(const ClockSample& sample);
  bool has_estimate() const { return !samples_.empty(); }
  double offset_ns() const { return best_.offset_ns(); }
  double uncertainty_ns() const { return best_.round_trip_ns() / 2.0; }
  // Converts a time on the rank's clock to rank 0's clock.
  int64_t to_rank0(int64_t t) const { return t - offset_int_ns_; }

 private:
  size_t window_;
  std::deque<ClockSample> samples_;
  ClockSample best_{0, 0, 0, 0};
  int64_t offset_int_ns_ = 0;
};

}  // namespace ranktime
