// Live what-if cost on rank 0: each step's negotiations and rank 0's batches replayed
// (timeline/what_if.h, the same replay as `ranktime summary`'s cost) without each rank's
// lateness, from what rank 0 already holds: every rank's readiness, when the coordinator saw
// each negotiation complete, and how long each batch took on rank 0's own lane (a collective
// takes about as long on every rank of it). Steps come from the negotiation pattern: a tensor's
// n-th negotiation is step n. Lateness that rank 0's busy lane hid costs nothing, as in the
// summary's replay of a trace.
// Pure logic: unit tests feed it readiness and batch times directly.
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

  // One negotiation (as LatenessTracker::add) of the tensor `tensor_id`, which the coordinator
  // saw complete at `done_ns` (0: at its last readiness).
  void add(uint32_t tensor_id, const std::vector<int64_t>& ready_ns,
           const std::vector<int>& ranks = {}, int joined = 0, int64_t done_ns = 0);
  // Rank 0 ran a batch of these tensors (each one's newest negotiation not yet run) from
  // `begin_ns` to `end_ns`.
  void executed(const std::vector<uint32_t>& tensor_ids, int64_t begin_ns, int64_t end_ns);

  struct RankCost {
    double total_us = 0;     // since start
    double per_step_us = 0;  // mean over the window's steps
  };
  // Per rank, over the steps replayed so far (a step is replayed once two newer ones began).
  std::vector<RankCost> costs() const;
  uint64_t steps() const { return steps_; }

 private:
  struct Pending {  // a negotiation whose batch has not run yet
    int64_t step = 0;
    size_t index = 0;  // into the step's negotiations
  };

  void close(int64_t step);

  int size_;
  size_t window_;
  std::unordered_map<uint32_t, int64_t> occurrences_;  // tensor id -> negotiations seen
  std::unordered_map<uint32_t, Pending> pending_;      // tensor id -> its negotiation to run
  std::map<int64_t, timeline::WhatIfStep> open_;
  int64_t newest_ = -1;
  double lane_free_us_ = 0;  // the end of rank 0's latest batch
  uint64_t steps_ = 0;
  std::vector<double> total_us_;
  std::deque<std::vector<timeline::WhatIfRankSaving>> recent_;  // per replayed step, newest last
};

}  // namespace ranktime
