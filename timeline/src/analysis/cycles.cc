// Cycle intervals in a log histogram (bounded memory), batches counted from the fused batches.
#include "analysis/cycles.h"

#include <algorithm>

namespace ranktime::timeline::analysis {

void CyclesAnalysis::add_cycle_mark(double ts) {
  ++cycles_;
  if (last_ts_ >= 0) intervals_.add(ts - last_ts_);
  last_ts_ = ts;
}

void CyclesAnalysis::finish(Summary& s) {
  s.cycles.cycles = cycles_;
  s.cycles.mean_interval_us = intervals_.mean();
  s.cycles.p50_interval_us = intervals_.quantile(0.5);
  s.cycles.max_interval_us = intervals_.max();
  if (cycles_ > 0) {
    s.cycles.batches_per_cycle =
        static_cast<double>(batches_) / std::max(1, s.rank_lanes) / static_cast<double>(cycles_);
  }
}

}  // namespace ranktime::timeline::analysis
