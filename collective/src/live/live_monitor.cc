// Rank 0's live view: steps, alerts and metrics snapshots (see live_monitor.h).
#include "live/live_monitor.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/log.h"

namespace ranktime {
namespace {
constexpr int64_t kPublishIntervalNs = 1'000'000'000;

std::string fixed(double x, const char* format = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}
}  // namespace

LiveMonitor::LiveMonitor(const Config& config, int size, const std::vector<std::string>* hostnames)
    : config_(config), hostnames_(hostnames), rule_(AlertRuleOptions::from(config)) {
  if (!config.alert_command.empty())
    command_ = std::make_unique<AlertCommand>(config.alert_command, config.alert_command_timeout_s);
  (void)size;
  if (!config.metrics_addr.on) return;
  // Rank 0 alone would fail here while the others wait for it: the job goes on without metrics.
  try {
    server_ = std::make_unique<MetricsServer>(config.metrics_addr);
  } catch (const ConfigError& e) {
    RANKTIME_LOG(kError, "no metrics endpoint: " << e.what());
  }
}

void LiveMonitor::negotiations(const std::vector<Negotiation>& done) {
  for (const Negotiation& n : done) {
    if (is_control_op(n.op)) continue;  // a join's "lag" is how much more data others had
    const size_t counted = n.ready_ns.size() - std::min<size_t>(n.ready_ns.size(), n.joined);
    if (counted < 2) continue;
    const auto first = std::min_element(n.ready_ns.begin(), n.ready_ns.begin() + counted);
    const auto last = std::max_element(n.ready_ns.begin(), n.ready_ns.begin() + counted);
    const double lag_us = static_cast<double>(*last - *first) / 1e3;
    if (lag_us <= step_lag_us_) continue;
    const size_t i = static_cast<size_t>(last - n.ready_ns.begin());
    step_lag_us_ = lag_us;
    step_last_rank_ = n.ranks.empty() ? static_cast<int>(i) : n.ranks[i];
  }
}

void LiveMonitor::processed(OpType op, uint64_t bytes) {
  MetricsSnapshot::Operation& o = operations_[op];
  ++o.operations;
  o.bytes += bytes;
}

void LiveMonitor::tick(int64_t now_ns, int64_t steps_marked, int64_t last_mark_ns,
                       const Inspector& inspector, const Coordinator& coordinator,
                       TimelineRecorder* timeline) {
  bool due = now_ns - last_publish_ns_ >= kPublishIntervalNs;
  if (steps_marked != steps_seen_) {
    // Marks the loop saw together share the time between them (rare: a mark per cycle is usual).
    const int64_t marks = steps_marked - steps_seen_;
    const double step_us =
        steps_seen_ > 0 && marks > 0 ? (last_mark_ns - last_mark_seen_ns_) / 1e3 / marks : 0;
    if (steps_seen_ > 0) finish_step(steps_seen_ - 1, step_us, now_ns, inspector, timeline);
    steps_seen_ = steps_marked;
    last_mark_seen_ns_ = last_mark_ns;
    due = true;
  }
  if (server_ && due) publish(now_ns, inspector, coordinator, *timeline);
}

std::vector<double> LiveMonitor::step_cost_us(const Inspector& inspector) const {
  // Rank 0's live what-if (inspection/step_cost.h): the mean over its recent replayed steps.
  std::vector<double> cost(hostnames_->size(), 0);
  for (const RankLateness& l : inspector.lateness())
    if (static_cast<size_t>(l.rank) < cost.size()) cost[l.rank] = l.cost_per_step_us;
  return cost;
}

void LiveMonitor::finish_step(int64_t step, double step_us, int64_t now_ns,
                              const Inspector& inspector, TimelineRecorder* timeline) {
  StepLateness s;
  s.step = step;
  s.last_rank = step_last_rank_;
  s.lag_us = step_lag_us_;
  s.step_us = step_us;
  // The cost part of the rule needs every step's; otherwise only an alert asks.
  if (config_.alert_cost_pct > 0) s.cost_us = step_cost_us(inspector);
  step_last_rank_ = -1;
  step_lag_us_ = 0;

  totals_.steps = step + 1;
  if (step_us > 0) {
    const double seconds = step_us / 1e6;
    totals_.last_step_s = seconds;
    const auto& bounds = MetricsSnapshot::kStepBuckets;
    const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
    if (bucket < bounds.size()) ++totals_.step_buckets[bucket];
    ++totals_.step_count;
    totals_.step_sum_s += seconds;
  }
  auto alert = rule_.add(s, now_ns);
  if (!alert) return;
  if (alert->cost_pct < 0 && step_us > 0)
    alert->cost_pct = step_cost_us(inspector).at(alert->rank) / step_us * 100;
  fire(*alert, now_ns, timeline);
}

void LiveMonitor::fire(const Alert& alert, int64_t now_ns, TimelineRecorder* timeline) {
  ++totals_.alerts;
  const std::string& host = hostnames_->at(alert.rank);
  const std::string cost = alert.cost_pct < 0 ? "unknown" : fixed(alert.cost_pct) + "%";
  const std::string text = "rank " + std::to_string(alert.rank) + " on host " + host + ": " +
                           alert.reason + " (step " + std::to_string(alert.step) + ", lag " +
                           fixed(alert.lag_us / 1e3) + " ms, cost " + cost + ")";
  RANKTIME_LOG(kWarning, "alert: " << text);
  timeline->instant("ALERT", text, now_ns);
  timeline->write_alert_trace();  // TIMELINE_ON_ALERT
  if (!command_) return;
  command_->run({{"RANKTIME_ALERT_RANK", std::to_string(alert.rank)},
                 {"RANKTIME_ALERT_HOST", host},
                 {"RANKTIME_ALERT_LAG_MS", fixed(alert.lag_us / 1e3, "%.3f")},
                 {"RANKTIME_ALERT_COST_PCT", alert.cost_pct < 0 ? "" : fixed(alert.cost_pct)},
                 {"RANKTIME_ALERT_REASON", alert.reason},
                 {"RANKTIME_ALERT_STEP", std::to_string(alert.step)}});
}

void LiveMonitor::publish(int64_t now_ns, const Inspector& inspector,
                          const Coordinator& coordinator, const TimelineRecorder& timeline) {
  last_publish_ns_ = now_ns;
  auto s = std::make_shared<MetricsSnapshot>(totals_);
  std::set<int> stalled;
  for (const auto& t :
       coordinator.stalled(now_ns - static_cast<int64_t>(config_.stall_warning_s * 1e9)))
    stalled.insert(t.missing_ranks.begin(), t.missing_ranks.end());
  for (const RankLateness& l : inspector.lateness()) {
    MetricsSnapshot::Rank r;
    r.rank = l.rank;
    r.host = l.hostname;
    r.times_last = l.times_last;
    r.lateness_median_s = l.median_lag_us / 1e6;
    r.lateness_p95_s = l.p95_lag_us / 1e6;
    r.cost_s = l.cost_us / 1e6;
    r.stalled = stalled.count(l.rank) != 0;
    s->ranks.push_back(std::move(r));
  }
  for (const auto& [op, o] : operations_) {
    s->operations.push_back(o);
    s->operations.back().op = op_type_name(op);
  }
  struct stat st {};
  if (!config_.timeline_filename.empty() && stat(config_.timeline_filename.c_str(), &st) == 0)
    s->timeline_bytes = static_cast<uint64_t>(st.st_size);
  s->events_dropped = timeline.dropped();
  server_->publish(std::move(s));
}

}  // namespace ranktime
