// How long the ranks waited for each other, in wall-clock time (Scalasca's wait at N x N, see
// trace_waits.h): each rank's caused and suffered waits, the slowest rank, the waiting in all.
// Fills in the rows LatenessAnalysis made, so it comes after it in the list.
#pragma once

#include "analysis/analysis.h"
#include "ranktime/timeline/trace_waits.h"

namespace ranktime::timeline::analysis {

class WaitsAnalysis : public Analysis {
 public:
  void add(const Negotiation& n) override;
  void finish(Summary& s) override;

 private:
  WaitMatrix waits_;
};

}  // namespace ranktime::timeline::analysis
