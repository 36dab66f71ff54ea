// What each rank's lateness cost (Summary::what_if): each step's negotiations, with every
// rank's readiness, and its fused batches on every recorded lane are gathered as they come and
// replayed (what_if.h) when the step closes. A negotiation belongs to the step its first-ready
// rank was in by the step marks; without marks, the n-th negotiation of each tensor is step n.
// An operation slice belongs to its tensor's latest negotiation that began before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "analysis/analysis.h"
#include "ranktime/timeline/what_if.h"

namespace ranktime::timeline::analysis {

class WhatIfAnalysis : public Analysis {
 public:
  explicit WhatIfAnalysis(const Pass& pass) : pass_(pass) {}
  void add(const Negotiation& n) override;
  void add(const RankSlice& s) override;
  void finish(Summary& s) override;

 private:
  struct OpenStep {
    WhatIfStep step;
    // Fused batches still collecting their tensors on a lane: (lane, begin ns, end ns) ->
    // (its tensors' negotiations, how many it has).
    std::map<std::tuple<int, int64_t, int64_t>, std::pair<std::vector<size_t>, int64_t>> pending;
    std::map<size_t, size_t> batch_of;  // a batch's first negotiation -> its index in step
    std::map<int, double> lane_end;     // per lane: its runs' latest end
  };
  // A tensor's recent negotiation: where its operation slices go.
  struct Recent {
    double begin_us;
    int64_t step;
    size_t index;  // in its step's negotiations
  };
  void add_run(OpenStep& open, int lane, double begin, double end, std::vector<size_t> members);
  void close_step(int64_t step);

  const Pass& pass_;
  std::map<int64_t, OpenStep> open_;
  std::unordered_map<int64_t, std::deque<Recent>> recent_;  // by tensor pid
  int64_t last_closed_ = -1;
  std::map<int, double> last_closed_lane_end_;
  WhatIfSummary summary_;
  std::vector<double> saving_by_rank_;
  size_t ranks_ = 0;  // one more than the highest rank with readiness in a step
};

}  // namespace ranktime::timeline::analysis
