// Live what-if cost on rank 0: each step's negotiations replayed (timeline/what_if.h, the same
// replay as `ranktime summary`'s cost) without each rank's lateness, from the readiness rank 0
// already holds. Steps come from the negotiation pattern: a tensor's n-th negotiation is step n.
// Rank 0 has no other rank's operation times, so a step here completes with its last
// negotiation: lateness that a busy lane would have hidden still counts.
// Pure logic: unit tests feed it readiness times directly.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "ranktime/timeline/what_if.h"

namespace ranktime {

class StepCost {
 public:
  // `window`: the steps the per-step figure is over.
  StepCost(int size, size_t window);

  // One negotiation (as LatenessTracker::add) of the tensor `tensor_id`.
  void add(uint32_t tensor_id, const std::vector<int64_t>& ready_ns,
           const std::vector<int>& ranks = {}, int joined = 0);

  struct RankCost {
    double total_us = 0;     // since start
    double per_step_us = 0;  // mean over the window's steps
  };
  // Per rank, over the steps replayed so far (a step is replayed once two newer ones began).
  std::vector<RankCost> costs() const;
  uint64_t steps() const { return steps_; }

 private:
  void close(int64_t step);

  int size_;
  size_t window_;
  std::unordered_map<uint32_t, int64_t> occurrences_;  // tensor id -> negotiations seen
  std::map<int64_t, timeline::WhatIfStep> open_;
  int64_t newest_ = -1;
  uint64_t steps_ = 0;
  std::vector<double> total_us_;
  std::deque<std::vector<timeline::WhatIfRankSaving>> recent_;  // per replayed step, newest last
};

}  // namespace ranktime
