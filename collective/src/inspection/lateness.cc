// Sliding-window lateness statistics (see lateness.h).
#include "inspection/lateness.h"

#include <algorithm>
#include <numeric>

namespace ranktime {

LatenessTracker::LatenessTracker(int size, size_t window)
    : size_(size), window_(window), samples_(size), total_(size, 0), total_last_(size, 0) {}

void LatenessTracker::add(const std::vector<int64_t>& ready_ns, const std::vector<int>& ranks,
                          int joined) {
  const size_t n = ready_ns.size() - static_cast<size_t>(joined);
  if (n == 0) return;
  const auto begin = ready_ns.begin(), end = begin + static_cast<ptrdiff_t>(n);
  const int64_t first = *std::min_element(begin, end);
  const size_t last = static_cast<size_t>(std::max_element(begin, end) - begin);
  for (size_t i = 0; i < n; ++i) {
    const int r = ranks.empty() ? static_cast<int>(i) : ranks[i];
    std::deque<Sample>& samples = samples_[r];
    samples.push_back({static_cast<float>((ready_ns[i] - first) / 1e3), i == last});
    if (samples.size() > window_) samples.pop_front();
    ++total_[r];
    if (i == last) ++total_last_[r];
  }
}

std::vector<RankLateness> LatenessTracker::snapshot() const {
  std::vector<RankLateness> out(size_);
  std::vector<float> sorted;
  for (int r = 0; r < size_; ++r) {
    RankLateness& s = out[r];
    const std::deque<Sample>& samples = samples_[r];
    s.rank = r;
    s.negotiations = total_[r];
    s.times_last = total_last_[r];
    s.window = samples.size();
    s.window_times_last = static_cast<uint64_t>(
        std::count_if(samples.begin(), samples.end(), [](const Sample& x) { return x.last; }));
    sorted.clear();
    for (const Sample& x : samples) sorted.push_back(x.lag_us);
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
  if (size_ < 2) return std::nullopt;
  for (const RankLateness& s : snapshot()) {
    if (s.window * 2 < window_) continue;
    if (s.window_times_last >= min_share * s.window && s.median_lag_us >= threshold_us)
      return s.rank;
  }
  return std::nullopt;
}

}  // namespace ranktime
