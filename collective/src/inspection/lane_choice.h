// Whose processing lanes the timeline writes (TIMELINE_RANKS, TIMELINE_ALL_RANKS): rank 0's always;
// every rank's, a fixed list, or the K ranks most often last in the lateness window, chosen again
// as the run goes. Rank 0 decides and tells the other ranks (ResponseList::lane_ranks); a rank
// whose lanes are not wanted does not record them, so they never cross the wire. Every rank's
// ticks and step marks are written whatever the choice. Pure logic: unit tests feed it statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "ranktime/ranktime.h"

namespace ranktime {

// Throws ConfigError naming TIMELINE_RANKS and its value when it names a rank a job of `size`
// ranks does not have, or asks for more slowest ranks than there are besides rank 0.
void check_lane_ranks(const LaneRanks& setting, int size);

class LaneChoice {
 public:
  // `setting` has passed check_lane_ranks(); `all_ranks` is TIMELINE_ALL_RANKS.
  LaneChoice(const LaneRanks& setting, bool all_ranks, int size);

  bool all() const { return all_; }
  // `slowest:K`: the choice follows the lateness statistics.
  bool follows_lateness() const { return slowest_ > 0; }
  bool wants(int rank) const { return wanted_[rank]; }
  // The ranks whose lanes are wanted now, ascending (rank 0 first). `slowest:K` starts with
  // rank 0 alone: nobody has been late yet.
  const std::vector<int32_t>& ranks() const { return ranks_; }
  // `slowest:K`: chooses again the K ranks other than 0 that were last in most negotiations of
  // the window (of those that were last at all; a tie keeps the rank already chosen, then takes
  // the lower rank). True when the choice changed.
  bool update(const std::vector<RankLateness>& stats);

 private:
  void choose(std::vector<int32_t> ranks);

  int size_;
  bool all_ = false;
  int slowest_ = 0;
  std::vector<bool> wanted_;    // per rank
  std::vector<int32_t> ranks_;  // the wanted ranks, ascending
};

}  // namespace ranktime
