// Sliding-window lateness statistics (see lateness.h).
#include "inspection/lateness.h"

#include <algorithm>
#include <numeric>

namespace ranktime {

LatenessTracker::LatenessTracker(int size, size_t window)
    : size_(size), window_(window), lags_us_(size), total_last_(size, 0) {}

void LatenessTracker::add(const std::vector<int64_t>& ready_ns) {
  const int64_t first = *std::min_element(ready_ns.begin(), ready_ns.end());
  const int last =
      static_cast<int>(std::max_element(ready_ns.begin(), ready_ns.end()) - ready_ns.begin());
  last_.push_back(last);
  ++total_last_[last];
  ++total_;
  for (int r = 0; r < size_; ++r)
    lags_us_[r].push_back(static_cast<float>((ready_ns[r] - first) / 1e3));
  if (last_.size() > window_) {
    last_.pop_front();
    for (auto& l : lags_us_) l.pop_front();
  }
}

std::vector<RankLateness> LatenessTracker::snapshot() const {
  std::vector<RankLateness> out(size_);
  std::vector<float> sorted;
  for (int r = 0; r < size_; ++r) {
    RankLateness& s = out[r];
    s.rank = r;
    s.negotiations = total_;
    s.times_last = total_last_[r];
    s.window = last_.size();
    s.window_times_last = static_cast<uint64_t>(std::count(last_.begin(), last_.end(), r));
    sorted.assign(lags_us_[r].begin(), lags_us_[r].end());
    if (sorted.empty()) continue;
    std::sort(sorted.begin(), sorted.end());
    s.mean_lag_us = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
    s.median_lag_us = sorted[sorted.size() / 2];
    s.p95_lag_us = sorted[std::min(sorted.size() - 1, sorted.size() * 95 / 100)];
    s.max_lag_us = sorted.back();
  }
  return out;
}

std::optional<int> LatenessTracker::straggler(double threshold_us, double min_share) const {
  if (last_.size() * 2 < window_ || size_ < 2) return std::nullopt;
  for (const RankLateness& s : snapshot()) {
    if (s.window_times_last >= min_share * s.window && s.median_lag_us >= threshold_us)
      return s.rank;
  }
  return std::nullopt;
}

}  // namespace ranktime
