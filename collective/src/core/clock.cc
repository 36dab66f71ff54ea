// Clock offset estimation (see clock.h).
#include "core/clock.h"

#include <algorithm>

namespace ranktime {

bool OffsetEstimator::add(const ClockSample& sample) {
  if (sample.round_trip_ns() < 0 || sample.t3 < sample.t0 || sample.t2 < sample.t1) return false;
  samples_.push_back(sample);
  bool best_left = false;
  if (samples_.size() > window_) {
    best_left = samples_.front() == best_;
    samples_.pop_front();
  }
  // Every control message brings a sample: look through the window only when its best left it.
  if (best_left) {
    best_ = *std::min_element(samples_.begin(), samples_.end(),
                              [](const ClockSample& a, const ClockSample& b) {
                                return a.round_trip_ns() < b.round_trip_ns();
                              });
  } else if (samples_.size() == 1 || sample.round_trip_ns() < best_.round_trip_ns()) {
    best_ = sample;
  }
  offset_int_ns_ = static_cast<int64_t>(best_.offset_ns());
  return true;
}

}  // namespace ranktime
