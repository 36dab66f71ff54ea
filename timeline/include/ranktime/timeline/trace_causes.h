// The causes (causes.h) of a trace, in the summary's reading pass: each rank's region slices and
// every readiness tick, by the step marks (a first pass gathers them: StepMarkCollector). A
// region belongs to the step its rank was in at its begin; a tick (a rank's readiness for a
// tensor, on rank 0's clock) to the step its rank was in when it became ready.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranktime/timeline/causes.h"
#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

class TraceCauses {
 public:
  // Uses options' window (regions and ticks that begin in it), ranks and step_marks; without
  // step marks no step can be compared, but has_regions still says whether the trace has any.
  explicit TraceCauses(const SummaryOptions& options, CauseOptions cause_options = {});
  void add(const TraceEvent& event);
  Causes finish();

 private:
  struct OpenRegion {
    std::string name;
    double begin_us;
    double blocked_us;
  };
  bool wanted(int64_t rank, double ts) const;

  SummaryOptions options_;
  CauseCollector collector_;
  std::vector<std::vector<OpenRegion>> open_;  // per rank: its regions thread's open slices
};

}  // namespace ranktime::timeline
