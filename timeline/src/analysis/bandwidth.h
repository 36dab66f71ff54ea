// Bandwidth per operation and process set size, as nccl-tests defines it (algbw, busbw; see
// BandwidthStat), from the fused batches with a timed collective. Summary::bandwidth.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class BandwidthAnalysis : public Analysis {
 public:
  explicit BandwidthAnalysis(const Pass& pass) : pass_(pass) {}
  void add(const Batch& batch) override;
  void finish(Summary& s) override;

 private:
  const Pass& pass_;
  // Keyed by (op, process set size or 0), with the lanes counted in each; op and ranks are filled
  // in from the key by finish().
  std::map<std::pair<std::string, int>, std::pair<BandwidthStat, std::vector<bool>>> bandwidth_;
};

}  // namespace ranktime::timeline::analysis
