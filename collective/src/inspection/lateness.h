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

  // One negotiation: when each rank became ready (same clock for all). `ranks`: whose times
  // ready_ns holds when not every rank's in order (a process set: a rank is never late for a
  // set it is not in); the last `joined` of them had joined (join()) and are left out.
  void add(const std::vector<int64_t>& ready_ns, const std::vector<int>& ranks = {},
           int joined = 0);

  // Statistics per rank over its window: the last `window` negotiations it took part in
  // (hostnames left empty).
  std::vector<RankLateness> snapshot() const;

  // The rank that was last in at least `min_share` of its window's negotiations with a median
  // lag of at least `threshold_us`, if any (its window must be at least half full).
  std::optional<int> straggler(double threshold_us, double min_share) const;

 private:
  struct Sample {
    float lag_us;
    bool last;
  };
  int size_;
  size_t window_;
  std::vector<std::deque<Sample>> samples_;  // per rank, newest last
  std::vector<uint64_t> total_;              // per rank, since start
  std::vector<uint64_t> total_last_;         // per rank, since start
};

}  // namespace ranktime
