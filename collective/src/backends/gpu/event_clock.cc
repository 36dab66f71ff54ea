// Anchoring and drift for CUDA event times (see event_clock.h).
#include "backends/gpu/event_clock.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace ranktime::gpu {

int best_anchor_sample(const std::vector<AnchorSample>& samples) {
  int best = -1;
  for (size_t i = 0; i < samples.size(); ++i) {
    const AnchorSample& s = samples[i];
    if (s.after_ns < s.before_ns) continue;
    if (best < 0 || s.after_ns - s.before_ns < samples[best].after_ns - samples[best].before_ns) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

EventClock::EventClock(EventClockOptions options) : options_(options) {
  if (options_.window < 2) options_.window = 2;
}

Anchor EventClock::add_anchor(const AnchorSample& sample, double gpu_ns_since_previous) {
  Kept k;
  k.anchor.id = next_id_++;
  k.anchor.host_ns = sample.midpoint_ns();
  k.anchor.uncertainty_ns = sample.uncertainty_ns();
  if (anchors_.empty()) {
    k.gpu_ns = 0;
    anchors_.push_back(k);
    return k.anchor;
  }
  const Kept& previous = anchors_.back();
  k.gpu_ns = previous.gpu_ns + gpu_ns_since_previous;
  last_residual_ns_ = k.anchor.host_ns - to_host(previous.anchor, gpu_ns_since_previous);
  max_abs_residual_ns_ = std::max<int64_t>(max_abs_residual_ns_, std::llabs(last_residual_ns_));
  anchors_.push_back(k);
  while (anchors_.size() > options_.window) anchors_.pop_front();

  const Kept& oldest = anchors_.front();
  const double baseline = k.gpu_ns - oldest.gpu_ns;
  if (baseline >= static_cast<double>(options_.min_baseline_ns)) {
    const double rate = static_cast<double>(k.anchor.host_ns - oldest.anchor.host_ns) / baseline;
    if (std::fabs(rate - 1.0) * 1e6 <= options_.max_drift_ppm) {
      rate_ = rate;
      rate_uncertainty_ =
          static_cast<double>(k.anchor.uncertainty_ns + oldest.anchor.uncertainty_ns) / baseline;
    } else {
      ++rejected_rates_;
    }
  }
  return k.anchor;
}

Anchor EventClock::current() const { return anchors_.empty() ? Anchor{} : anchors_.back().anchor; }

bool EventClock::due(int64_t now_ns) const {
  return anchors_.empty() ||
         now_ns - anchors_.back().anchor.host_ns >= options_.reanchor_interval_ns;
}

int64_t EventClock::to_host(const Anchor& a, double gpu_ns) const {
  return a.host_ns + std::llround(rate_ * gpu_ns);
}

int64_t EventClock::error_bound_ns(const Anchor& a, double gpu_ns) const {
  // float milliseconds carry a 24-bit mantissa: half an ulp of the distance, plus the 0.5 us
  // resolution CUDA documents for event times.
  const double ulp = std::ldexp(std::fabs(gpu_ns) + 1.0, -24);
  return a.uncertainty_ns + std::llround(rate_uncertainty_ * std::fabs(gpu_ns) + ulp / 2) + 500;
}

std::vector<int64_t> place_marks(const std::vector<MarkReading>& marks, int64_t first_gpu_host_ns,
                                 double rate, int64_t lo_ns, int64_t hi_ns) {
  std::vector<int64_t> out(marks.size(), hi_ns);
  int64_t previous_host_ns = lo_ns;
  for (size_t i = 0; i < marks.size();) {
    if (!marks[i].on_gpu) {
      out[i] = previous_host_ns = marks[i].host_ns;
      ++i;
      continue;
    }
    // A run of GPU events, [i, j): mapped, then shifted as a whole between its host neighbours.
    size_t j = i;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (; j < marks.size() && marks[j].on_gpu; ++j) {
      if (!marks[j].ok) continue;
      out[j] = first_gpu_host_ns + std::llround(rate * marks[j].gpu_ns);
      lo = std::min(lo, out[j]);
      hi = std::max(hi, out[j]);
    }
    const int64_t next_host_ns = j < marks.size() ? marks[j].host_ns : hi_ns;
    int64_t shift = 0;
    if (lo > hi) {
      // Nothing readable in this run.
    } else if (lo < previous_host_ns) {
      shift = previous_host_ns - lo;
    } else if (hi > next_host_ns) {
      shift = next_host_ns - hi;
    }
    for (size_t k = i; k < j; ++k) {
      if (marks[k].ok) out[k] += shift;
    }
    i = j;
  }
  return out;
}

}  // namespace ranktime::gpu
