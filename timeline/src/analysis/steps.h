// Per step (with SummaryOptions::by_step): who the others waited for, each rank's lags at the
// step's start and at its last readiness. A negotiation belongs to the step its first-ready rank
// was in by the step marks; without marks, the n-th negotiation of each tensor is step n.
// Summary::steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "analysis/analysis.h"
#include "ranktime/timeline/trace_waits.h"

namespace ranktime::timeline::analysis {

class StepsAnalysis : public Analysis {
 public:
  explicit StepsAnalysis(const Pass& pass) : pass_(pass) {}
  void add(const Negotiation& n) override;
  void finish(Summary& s) override;

 private:
  // A step whose negotiations are still coming (negotiations complete nearly in step order).
  struct OpenStep {
    WaitMatrix waits{64};
    std::vector<double> ready_end;  // per rank: its last readiness in the step; -1: none
    uint64_t negotiations = 0;
    double begin_us = 0;
    bool has_begin = false;
  };
  // A step done with: its figures, and each rank's last readiness (-1: none).
  struct ClosedStep {
    StepStat stat;
    std::vector<double> ready_end;
  };
  void add_to_step(int64_t step, std::vector<Readiness> ready);
  void close_step(int64_t step);

  const Pass& pass_;
  size_t tick_ranks_ = 0;  // one more than the highest rank with a tick in the window
  std::map<int64_t, OpenStep> open_steps_;
  std::map<int64_t, ClosedStep> closed_steps_;
};

}  // namespace ranktime::timeline::analysis
