// Which tensors cost most: the top k by negotiation wait and by processing time.
// Summary::top_wait and top_processing.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class TensorsAnalysis : public Analysis {
 public:
  explicit TensorsAnalysis(const Pass& pass) : pass_(pass) {}
  void add(const Negotiation& n) override;
  void add(const RankSlice& slice) override;
  void finish(Summary& s) override;

 private:
  TensorStat& tensor(int64_t pid);

  const Pass& pass_;
  std::unordered_map<int64_t, TensorStat> tensors_;
};

}  // namespace ranktime::timeline::analysis
