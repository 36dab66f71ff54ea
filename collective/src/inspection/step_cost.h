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
  // Replays the steps that are complete (two newer ones began). add() only sets them aside: the
  // replay (thousands of instructions a step) is not on the way of the response that completed
  // them; the runtime calls this once the cycle's responses have run.
  void replay_due();
  // Per rank, over the steps replayed so far, after replay_due().
  std::vector<RankCost> costs();
  uint64_t steps() {
    replay_due();
    return steps_;
  }

 private:
  struct Pending {  // a negotiation whose batch has not run yet
    int64_t step = 0;
    size_t index = 0;  // into the step's negotiations
  };

  void close(int64_t step);  // sets the step aside for replay_due()

  int size_;
  size_t window_;
  std::unordered_map<uint32_t, int64_t> occurrences_;  // tensor id -> negotiations seen
  std::unordered_map<uint32_t, Pending> pending_;      // tensor id -> its negotiation to run
  std::map<int64_t, timeline::WhatIfStep> open_;
  std::vector<timeline::WhatIfStep> due_;  // closed, not yet replayed, oldest first
  int64_t newest_ = -1;
  double lane_free_us_ = 0;  // the end of rank 0's latest batch
  uint64_t steps_ = 0;
  std::vector<double> total_us_;
  std::deque<std::vector<timeline::WhatIfRankSaving>> recent_;  // per replayed step, newest last
};

}  // namespace ranktime
