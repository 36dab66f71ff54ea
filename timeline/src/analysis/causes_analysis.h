// Why the late ranks were late (Summary::causes): each rank's regions, their own time per step,
// against the other ranks' median for the same region (the comparison itself, pure and
// unit-tested: causes.h). A region belongs to the step its rank was in at its begin, a readiness
// tick to the step its rank was in when it became ready, both by the step marks
// (SummaryOptions::step_marks, from a first pass): without them no step can be compared, and
// Causes::has_regions still says whether the trace has regions. Profiler operators inside the
// regions name what grew in them (cause_operators.h).
#pragma once

#include "analysis/analysis.h"
#include "ranktime/timeline/causes.h"

namespace ranktime::timeline::analysis {

class CausesAnalysis : public Analysis {
 public:
  explicit CausesAnalysis(const Pass& pass);
  void add(const Negotiation& n) override;
  void add(const RegionSlice& r) override;
  void add(const OperatorSlice& o) override;
  void finish(Summary& s) override;

 private:
  const StepMarks& marks_;
  CauseCollector collector_;
};

}  // namespace ranktime::timeline::analysis
