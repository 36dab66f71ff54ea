// The background loop's rhythm: cycle markers (TIMELINE_MARK_CYCLES), the interval between them,
// and fused batches per cycle and lane. Summary::cycles.
#pragma once

#include <cstdint>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class CyclesAnalysis : public Analysis {
 public:
  void add(const Batch&) override { ++batches_; }
  void add_cycle_mark(double ts) override;
  void finish(Summary& s) override;

 private:
  uint64_t cycles_ = 0;
  uint64_t batches_ = 0;
  LogHistogram intervals_;
  double last_ts_ = -1;
};

}  // namespace ranktime::timeline::analysis
