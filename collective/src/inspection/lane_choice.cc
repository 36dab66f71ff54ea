// The choice of lanes (see lane_choice.h).
#include "inspection/lane_choice.h"

#include <algorithm>

namespace ranktime {

void check_lane_ranks(const LaneRanks& setting, int size) {
  if (!setting.on) return;
  const std::string head = "TIMELINE_RANKS='" + setting.text + "' is not valid: ";
  if (setting.slowest > 0 && setting.slowest >= size) {
    throw ConfigError(head + "the job has " + std::to_string(size) + " ranks, so at most " +
                      std::to_string(size - 1) + " besides rank 0 can be chosen");
  }
  for (int r : setting.ranks) {
    if (r >= size) {
      throw ConfigError(head + "rank " + std::to_string(r) + " is not one of the job's " +
                        std::to_string(size) + " ranks (0 to " + std::to_string(size - 1) + ")");
    }
  }
}

LaneChoice::LaneChoice(const LaneRanks& setting, bool all_ranks, int size)
    : size_(size), all_(all_ranks && !setting.on), slowest_(setting.slowest) {
  std::vector<int32_t> ranks;
  if (all_) {
    for (int r = 0; r < size; ++r) ranks.push_back(r);
  } else if (setting.on && slowest_ == 0) {
    ranks.assign(setting.ranks.begin(), setting.ranks.end());
  } else {
    ranks.push_back(0);
  }
  choose(std::move(ranks));
}

void LaneChoice::choose(std::vector<int32_t> ranks) {
  ranks_ = std::move(ranks);
  wanted_.assign(size_, false);
  for (int32_t r : ranks_) wanted_[r] = true;
}

bool LaneChoice::update(const std::vector<RankLateness>& stats) {
  if (slowest_ == 0) return false;
  std::vector<const RankLateness*> late;
  for (const RankLateness& s : stats) {
    if (s.rank > 0 && s.rank < size_ && s.window_times_last > 0) late.push_back(&s);
  }
  const auto slower = [&](const RankLateness* a, const RankLateness* b) {
    if (a->window_times_last != b->window_times_last)
      return a->window_times_last > b->window_times_last;
    if (wanted_[a->rank] != wanted_[b->rank]) return static_cast<bool>(wanted_[a->rank]);
    return a->rank < b->rank;
  };
  const size_t k = std::min(late.size(), static_cast<size_t>(slowest_));
  std::partial_sort(late.begin(), late.begin() + static_cast<std::ptrdiff_t>(k), late.end(),
                    slower);
  std::vector<int32_t> ranks{0};
  for (size_t i = 0; i < k; ++i) ranks.push_back(late[i]->rank);
  std::sort(ranks.begin(), ranks.end());
  if (ranks == ranks_) return false;
  choose(std::move(ranks));
  return true;
}

}  // namespace ranktime
