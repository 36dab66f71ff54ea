// Who was late: per rank, how far behind the first rank it became ready (lag quantiles) and how
// often it was the last. Summary::lateness, one row per chosen rank; waits fills in its waits.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class LatenessAnalysis : public Analysis {
 public:
  explicit LatenessAnalysis(const Pass& pass) : pass_(pass) {}
  void add(const Negotiation& n) override;
  void finish(Summary& s) override;

 private:
  struct Rank {
    LogHistogram lag;
    uint64_t times_last = 0;
  };
  Rank& rank(int r);

  const Pass& pass_;
  std::vector<Rank> ranks_;
};

}  // namespace ranktime::timeline::analysis
