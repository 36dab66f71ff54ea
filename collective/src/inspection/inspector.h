// Rank 0's look at the job: the lateness statistics of every finished negotiation (which user
// threads read through ranktime::lateness()), and, at most once a second while work is pending,
// tensors some ranks submitted long ago and others never did (stalls: a warning, or a shutdown
// after RANKTIME_STALL_SHUTDOWN_S), the rank that is persistently last (a straggler warning), the
// lateness counters in the timeline, and, with TIMELINE_RANKS=slowest:K, whose lanes to write.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/config.h"
#include "inspection/lane_choice.h"
#include "inspection/lateness.h"
#include "inspection/step_cost.h"
#include "negotiation/coordinator.h"
#include "recording/timeline_recorder.h"

namespace ranktime {

class Inspector {
 public:
  // `hostnames`: per rank, for messages (outlives this).
  Inspector(int size, const Config& config, const std::vector<std::string>* hostnames);

  // Background thread: negotiations finished in one cycle, seen complete at `now_ns`.
  void add(const std::vector<Negotiation>& done, int64_t now_ns);
  // Background thread: rank 0 ran `response`'s batch from `begin_ns` to `end_ns` (for the cost).
  void executed(const Response& response, int64_t begin_ns, int64_t end_ns);
  // Background thread, after a cycle's responses ran: replays the steps add() completed.
  void settle();
  // Any thread: per-rank lateness statistics and what-if cost.
  std::vector<RankLateness> lateness() const;

  bool due(int64_t now_ns) const;
  // Looks at `coordinator`'s pending tensors and the lateness statistics, logs, and records
  // instants and counters. Returns the shutdown reason when stalls have lasted past
  // RANKTIME_STALL_SHUTDOWN_S.
  std::optional<std::string> inspect(int64_t now_ns, const Coordinator& coordinator,
                                     TimelineRecorder* timeline);

  // Whose lanes the timeline writes (chosen again by inspect() with `slowest:K`).
  const LaneChoice& lanes() const { return lanes_; }
  // The wanted ranks when the choice changed since the last call (for the next response list);
  // empty when it did not.
  std::vector<int32_t> take_lane_change();

 private:
  std::vector<RankLateness> snapshot() const;  // lateness and cost, without hostnames

  const Config& config_;
  const std::vector<std::string>* hostnames_;
  mutable std::mutex lateness_mutex_;  // lateness_ is read by user threads
  LatenessTracker lateness_;
  mutable StepCost cost_;  // under lateness_mutex_ too; a reader replays what is due
  int64_t last_inspect_ns_ = 0;
  int64_t last_straggler_warning_ns_ = INT64_MIN / 2;
  std::unordered_set<std::string> stall_warned_;  // tensors already warned about
  LaneChoice lanes_;
  bool lanes_changed_ = false;
};

}  // namespace ranktime
