// How well tensors were fused: batches, tensors and bytes per batch, per operation, over the
// rank lanes. Summary::fusion.
#pragma once

#include <map>
#include <string>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class FusionAnalysis : public Analysis {
 public:
  void add(const Batch& batch) override;
  void finish(Summary& s) override;

 private:
  std::map<std::string, FusionStat, std::less<>> fusion_;  // by op
};

}  // namespace ranktime::timeline::analysis
