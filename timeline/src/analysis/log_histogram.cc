// LogHistogram: quantiles in bounded memory, 1% buckets (trace_analysis.h says how exact).
#include <algorithm>
#include <cmath>

#include "ranktime/timeline/trace_analysis.h"

namespace ranktime::timeline {
namespace {

constexpr double kHistogramMin = 0.01;  // µs: the first bucket's lower edge
const double kHistogramLogStep = std::log(1.01);

}  // namespace

void LogHistogram::add(double value) {
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  sum_ += value;
  size_t bucket = 0;
  if (value > 0) {
    double steps = std::log(std::max(value, kHistogramMin) / kHistogramMin) / kHistogramLogStep;
    bucket = 1 + static_cast<size_t>(std::min(steps, 1e6));
  }
  if (bucket >= counts_.size()) {
    counts_.resize(bucket + 1, 0);
    sums_.resize(bucket + 1, 0.0);
  }
  ++counts_[bucket];
  sums_[bucket] += value;
}

double LogHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // The value of rank ceil(q * count) (1-based), as "nearest rank" percentiles define it.
  uint64_t target = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  uint64_t seen = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    seen += counts_[b];
    if (seen < target) continue;
    return std::clamp(sums_[b] / static_cast<double>(counts_[b]), min_, max_);
  }
  return max_;
}

}  // namespace ranktime::timeline
