// Live straggler statistics on rank 0: from every finished negotiation, how late each rank was
// behind the first one. Kept over a sliding window whether or not the timeline is on.
// Pure logic: unit tests feed it readiness times directly.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "ranktime/ranktime.h"

namespace ranktime {

class LatenessTracker {
 public:
  LatenessTracker(int size, size_t window);

  // One negotiation: when each rank became ready (same clock for all).
  void add(const std::vector<int64_t>& ready_ns);

  // Statistics per rank over the window (hostnames left empty).
  std::vector<RankLateness> snapshot() const;

  // The rank that was last in at least `min_share` of the window's negotiations with a median lag
  // of at least `threshold_us`, if any (the window must be at least half full).
  std::optional<int> straggler(double threshold_us, double min_share) const;

  size_t negotiations() const { return last_.size(); }

 private:
  int size_;
  size_t window_;
  std::deque<int> last_;                    // last rank of each negotiation in the window
  std::vector<std::deque<float>> lags_us_;  // per rank, same window
  std::vector<uint64_t> total_last_;        // since start
  uint64_t total_ = 0;
};

}  // namespace ranktime
