// Fusion per operation, from the fused batches.
#include "analysis/fusion.h"

#include <algorithm>

namespace ranktime::timeline::analysis {

void FusionAnalysis::add(const Batch& batch) {
  auto it = fusion_.find(batch.op);
  if (it == fusion_.end()) it = fusion_.emplace(std::string(batch.op), FusionStat()).first;
  FusionStat& f = it->second;
  f.op = it->first;
  ++f.batches;
  f.tensors += batch.tensors;
  f.bytes += batch.bytes;
  f.max_tensors = std::max(f.max_tensors, batch.tensors);
  f.max_bytes = std::max(f.max_bytes, batch.bytes);
}

void FusionAnalysis::finish(Summary& s) {
  for (auto& [op, f] : fusion_) {
    f.lanes = s.rank_lanes;
    s.fusion.push_back(f);
  }
}

}  // namespace ranktime::timeline::analysis
