// Clock offset estimation (see clock.h).
#include "core/clock.h"

#include <algorithm>

namespace ranktime {

bool OffsetEstimator::add(const ClockSample& sample) {
  if (sample.round_trip_ns() < 0 || sample.t3 < sample.t0 || sample.t2 < sample.t1) return false;
  samples_.push_back(sample);
  if (samples_.size() > window_) samples_.pop_front();
  best_ = *std::min_element(samples_.begin(), samples_.end(),
                            [](const ClockSample& a, const ClockSample& b) {
                              return a.round_trip_ns() < b.round_trip_ns();
                            });
  offset_int_ns_ = static_cast<int64_t>(best_.offset_ns());
  return true;
}

}  // namespace ranktime
