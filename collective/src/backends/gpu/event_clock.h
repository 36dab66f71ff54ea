// Maps CUDA event times onto this rank's host clock (the Clock::now_ns() time base). CUDA only
// reports the time between two events, so each stream keeps an anchor: an event whose host time is
// known to within a small window. Pure maths, no CUDA: the backend feeds it measurements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace ranktime::gpu {

// One calibration attempt: the host clock just before an anchor event was recorded on an idle
// stream and just after the host saw it complete. The event's GPU timestamp lies in between.
struct AnchorSample {
  int64_t before_ns = 0;
  int64_t after_ns = 0;
  int64_t midpoint_ns() const { return before_ns + (after_ns - before_ns) / 2; }
  int64_t uncertainty_ns() const { return (after_ns - before_ns + 1) / 2; }
};

// Index of the sample with the narrowest window (its midpoint is the best estimate, as with the
// minimum round trip of rank clock offsets); -1 when there is no well-formed sample.
int best_anchor_sample(const std::vector<AnchorSample>& samples);

struct EventClockOptions {
  // Re-anchor at least this often. cudaEventElapsedTime returns float milliseconds, whose 24-bit
  // mantissa resolves ~60 ns at 1 s but ~4 us at 60 s, and the GPU and host oscillators drift apart
  // by up to tens of ppm: both errors grow with the distance from the anchor.
  int64_t reanchor_interval_ns = 1'000'000'000;
  // Anchors kept for the rate estimate: the rate comes from the oldest and the newest, so a longer
  // baseline divides the calibration jitter by a longer time.
  size_t window = 32;
  // Shortest baseline worth estimating a rate from; below it the rate stays at its last value
  // (1 at start), because 5 us of anchor jitter over 10 ms would read as 500 ppm of drift.
  int64_t min_baseline_ns = 200'000'000;
  // A rate further than this from 1 means a broken calibration, not drift: it is ignored.
  double max_drift_ppm = 1000;
};

// An anchor event's time on the host clock.
struct Anchor {
  uint64_t id = 0;  // 1, 2, ... in the order added; 0 = none
  int64_t host_ns = 0;
  int64_t uncertainty_ns = 0;
};

// The anchors of one stream (or of one device: events of one device share one GPU clock) and the
// rate of the host clock against the GPU clock.
class EventClock {
 public:
  explicit EventClock(EventClockOptions options = {});

  // Adds an anchor measured by `sample`. `gpu_ns_since_previous` is the GPU time from the previous
  // anchor event to this one (ignored for the first). Returns the new anchor.
  Anchor add_anchor(const AnchorSample& sample, double gpu_ns_since_previous);

  bool has_anchor() const { return !anchors_.empty(); }
  Anchor current() const;
  // Whether the current anchor is older than the re-anchor interval (or there is none).
  bool due(int64_t now_ns) const;

  // Host time of an event recorded `gpu_ns` after anchor `a`'s event (cudaEventElapsedTime).
  int64_t to_host(const Anchor& a, double gpu_ns) const;
  // How far to_host(a, gpu_ns) can be from the truth: the anchor's window plus the rate's
  // uncertainty over the distance.
  int64_t error_bound_ns(const Anchor& a, double gpu_ns) const;

  double rate() const { return rate_; }  // host ns per GPU ns
  double drift_ppm() const { return (rate_ - 1.0) * 1e6; }
  double rate_uncertainty() const { return rate_uncertainty_; }
  // At the latest re-anchor: the measured anchor time minus the time predicted from the previous
  // anchor at the rate then in force (drift not yet corrected, plus calibration noise).
  int64_t last_residual_ns() const { return last_residual_ns_; }
  int64_t max_abs_residual_ns() const { return max_abs_residual_ns_; }
  uint64_t rejected_rates() const { return rejected_rates_; }

 private:
  struct Kept {
    Anchor anchor;
    double gpu_ns;  // GPU time since the first anchor ever kept
  };
  EventClockOptions options_;
  std::deque<Kept> anchors_;
  uint64_t next_id_ = 1;
  double rate_ = 1.0;
  double rate_uncertainty_ = 0.0;
  int64_t last_residual_ns_ = 0;
  int64_t max_abs_residual_ns_ = 0;
  uint64_t rejected_rates_ = 0;
};

// One mark of a job: a host clock reading (a host step's begin or end), or a GPU event whose
// time is known only as `gpu_ns` after the job's first GPU event (`ok` false: unreadable).
struct MarkReading {
  bool on_gpu = false;
  int64_t host_ns = 0;  // host readings
  double gpu_ns = 0;    // GPU events
  bool ok = true;
};

// The marks on the host clock. The first GPU event is at `first_gpu_host_ns` (mapped through an
// anchor, so off by up to the anchor's error: hundreds of microseconds where ranks share a GPU);
// the others at their GPU distance from it (times `rate`, host ns per GPU ns); unreadable ones at
// `hi_ns`. Host readings bound the GPU events around them: the job was issued after `lo_ns`; a
// host step began only after it had waited for the GPU event before it, and the GPU steps after
// it were issued once it had ended; the host saw the last event complete at `hi_ns`. So each run
// of GPU events between host readings is shifted as a whole (its durations kept) to start no
// earlier than the reading before it, else to end no later than the one after it: the anchor's
// error moves the GPU steps, rather than squeezing them to nothing against a host reading.
std::vector<int64_t> place_marks(const std::vector<MarkReading>& marks, int64_t first_gpu_host_ns,
                                 double rate, int64_t lo_ns, int64_t hi_ns);

}  // namespace ranktime::gpu
