// Stall and straggler inspection on rank 0 (see inspector.h).
#include "inspection/inspector.h"

#include <cstdio>
#include <map>

#include "core/log.h"

namespace ranktime {
namespace {

constexpr int64_t kInspectIntervalNs = 1'000'000'000;
// Lateness statistics cover this many recent negotiations.
constexpr size_t kLatenessWindow = 200;
// The per-step cost is a mean over this many recent steps.
constexpr size_t kCostWindowSteps = 100;
// A straggler must be last in at least this share of the lateness window's negotiations.
constexpr double kStragglerShare = 0.5;
constexpr size_t kStallNamesShown = 4;

using Tensors = std::vector<const Coordinator::Stalled*>;

// "ranks 1,3 did not submit 'a', 'b' and 2 more (other ranks submitted 61 s ago)".
std::string describe(const std::vector<int>& ranks, const Tensors& tensors, int64_t now_ns) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  text += " did not submit ";
  for (size_t i = 0; i < tensors.size() && i < kStallNamesShown; ++i)
    text += (i ? ", '" : "'") + tensors[i]->name + "'";
  if (tensors.size() > kStallNamesShown)
    text += " and " + std::to_string(tensors.size() - kStallNamesShown) + " more";
  text += " (other ranks submitted " +
          std::to_string((now_ns - tensors[0]->first_ready_ns) / 1'000'000'000) + " s ago)";
  return text;
}

// "0,3,7".
std::string rank_list_text(const std::vector<int32_t>& ranks) {
  std::string text;
  for (int32_t r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  return text;
}

}  // namespace

Inspector::Inspector(int size, const Config& config, const std::vector<std::string>* hostnames)
    : config_(config),
      hostnames_(hostnames),
      lateness_(size, kLatenessWindow),
      cost_(size, kCostWindowSteps),
      lanes_(config.timeline_ranks, config.timeline_all_ranks, size) {}

std::vector<int32_t> Inspector::take_lane_change() {
  if (!lanes_changed_) return {};
  lanes_changed_ = false;
  return lanes_.ranks();
}

void Inspector::add(const std::vector<Negotiation>& done, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(lateness_mutex_);
  for (const Negotiation& n : done) {
    // Not the controls: a join's "lag" is how much more data the other ranks had.
    if (is_control_op(n.op)) continue;
    lateness_.add(n.ready_ns, n.ranks, n.joined);
    if (n.error.empty()) cost_.add(n.tensor_id, n.ready_ns, n.ranks, n.joined, now_ns);
  }
}

void Inspector::executed(const Response& response, int64_t begin_ns, int64_t end_ns) {
  if (is_control_op(response.op) || !response.error.empty()) return;
  std::lock_guard<std::mutex> lock(lateness_mutex_);
  cost_.executed(response.tensor_ids, begin_ns, end_ns);
}

void Inspector::settle() {
  std::lock_guard<std::mutex> lock(lateness_mutex_);
  cost_.replay_due();
}

std::vector<RankLateness> Inspector::snapshot() const {
  std::lock_guard<std::mutex> lock(lateness_mutex_);
  std::vector<RankLateness> stats = lateness_.snapshot();
  const std::vector<StepCost::RankCost> costs = cost_.costs();
  for (size_t r = 0; r < stats.size() && r < costs.size(); ++r) {
    stats[r].cost_us = costs[r].total_us;
    stats[r].cost_per_step_us = costs[r].per_step_us;
  }
  return stats;
}

std::vector<RankLateness> Inspector::lateness() const {
  std::vector<RankLateness> stats = snapshot();
  for (RankLateness& s : stats) s.hostname = hostnames_->at(s.rank);
  return stats;
}

bool Inspector::due(int64_t now_ns) const {
  return now_ns - last_inspect_ns_ >= kInspectIntervalNs;
}

std::optional<std::string> Inspector::inspect(int64_t now, const Coordinator& coordinator,
                                              TimelineRecorder* timeline) {
  last_inspect_ns_ = now;
  std::optional<std::string> shutdown;
  // Stalls (unless RANKTIME_STALL_CHECK_DISABLE): warn once per tensor, grouping tensors by the
  // set of ranks that are missing.
  const int64_t warn_ns = static_cast<int64_t>(config_.stall_warning_s * 1e9);
  std::map<std::vector<int>, Tensors> groups;
  std::vector<Coordinator::Stalled> stalled;
  if (!config_.stall_check_disable) stalled = coordinator.stalled(now - warn_ns);
  std::unordered_set<std::string> still_stalled;
  for (const auto& s : stalled) {
    still_stalled.insert(s.name);
    if (!stall_warned_.count(s.name)) groups[s.missing_ranks].push_back(&s);
  }
  stall_warned_ = std::move(still_stalled);
  for (const auto& [ranks, tensors] : groups) {
    std::string text = describe(ranks, tensors, now);
    RANKTIME_LOG(kWarning, "stall: " << text);
    timeline->instant("STALL", text, now);
    timeline->write_alert_trace();  // TIMELINE_ON_ALERT: a stall is an alert too
  }
  if (config_.stall_shutdown_s > 0 && !config_.stall_check_disable) {
    auto dead = coordinator.stalled(now - static_cast<int64_t>(config_.stall_shutdown_s * 1e9));
    if (!dead.empty()) {
      std::map<std::vector<int>, Tensors> by_ranks;
      for (const auto& s : dead) by_ranks[s.missing_ranks].push_back(&s);
      std::string text;
      for (const auto& [ranks, tensors] : by_ranks)
        text += (text.empty() ? "" : "; ") + describe(ranks, tensors, now);
      RANKTIME_LOG(kError, "stall: shutting down after RANKTIME_STALL_SHUTDOWN_S="
                               << config_.stall_shutdown_s << " s: " << text);
      timeline->instant("STALL_SHUTDOWN", text, now);
      shutdown = "stalled for more than RANKTIME_STALL_SHUTDOWN_S: " + text;
    }
  }

  // Persistent stragglers and lateness counters.
  std::vector<RankLateness> stats;
  std::optional<int> straggler;
  {
    stats = snapshot();
    std::lock_guard<std::mutex> lock(lateness_mutex_);
    if (config_.straggler_threshold_ms > 0) {
      straggler = lateness_.straggler(config_.straggler_threshold_ms * 1e3, kStragglerShare);
    }
  }
  if (straggler && now - last_straggler_warning_ns_ >=
                       static_cast<int64_t>(config_.straggler_warning_interval_s * 1e9)) {
    last_straggler_warning_ns_ = now;
    const RankLateness& s = stats[*straggler];
    char median[32], cost[32];
    std::snprintf(median, sizeof(median), "%.1f", s.median_lag_us / 1e3);
    std::snprintf(cost, sizeof(cost), "%.1f", s.cost_per_step_us / 1e3);
    RANKTIME_LOG(kWarning, "straggler: rank " << s.rank << " on host " << (*hostnames_)[s.rank]
                                              << " was the last to be ready in "
                                              << s.window_times_last << " of the last " << s.window
                                              << " negotiations, median lag " << median
                                              << " ms; it costs " << cost
                                              << " ms per step (what-if replay)");
  }
  if (lanes_.update(stats)) {
    lanes_changed_ = true;
    const std::string text = "lanes of ranks " + rank_list_text(lanes_.ranks()) +
                             " from here on (" + config_.timeline_ranks.text + ")";
    RANKTIME_LOG(kDebug, "timeline: " << text);
    timeline->instant("TIMELINE_RANKS", text, now);
  }
  for (const RankLateness& s : stats) {
    timeline->counter("lateness_median_lag_us", s.rank, s.median_lag_us, now);
    timeline->counter("lateness_share_last", s.rank,
                      s.window ? double(s.window_times_last) / s.window : 0, now);
  }
  return shutdown;
}

}  // namespace ranktime
