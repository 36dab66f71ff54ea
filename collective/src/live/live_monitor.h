// Rank 0's live view of the job while it runs: per step, which rank was last and by how much
// (fed to the alert rule: a log line, the alert command, an ALERT instant in the timeline), per
// operation counts and bytes, and the snapshot the metrics endpoint serves. Owned and called by
// the background loop only; the endpoint reads published copies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "inspection/inspector.h"
#include "live/alert_command.h"
#include "live/alert_rule.h"
#include "live/metrics.h"
#include "live/metrics_server.h"
#include "negotiation/coordinator.h"
#include "recording/timeline_recorder.h"

namespace ranktime {

class LiveMonitor {
 public:
  // `hostnames`: per rank (outlives this). Starts the metrics endpoint when
  // RANKTIME_METRICS_ADDR is set (when it cannot listen there, an error is logged and the job
  // runs without it).
  LiveMonitor(const Config& config, int size, const std::vector<std::string>* hostnames);

  // Negotiations finished in this cycle, which belong to rank 0's current step.
  void negotiations(const std::vector<Negotiation>& done);
  // Rank 0 executed one operation over `bytes` of its tensors.
  void processed(OpType op, uint64_t bytes);
  // Every cycle: `steps_marked` is rank 0's step marks so far, the last one at `last_mark_ns`.
  // Finishes the steps that ended, runs the alert rule and publishes a snapshot (per step, and
  // at least once a second).
  void tick(int64_t now_ns, int64_t steps_marked, int64_t last_mark_ns, const Inspector& inspector,
            const Coordinator& coordinator, TimelineRecorder* timeline);

 private:
  void finish_step(int64_t step, double step_us, int64_t now_ns, const Inspector& inspector,
                   TimelineRecorder* timeline);
  void fire(const Alert& alert, int64_t now_ns, TimelineRecorder* timeline);
  void publish(int64_t now_ns, const Inspector& inspector, const Coordinator& coordinator,
               const TimelineRecorder& timeline);
  // Per rank, what its lateness costs a step lately (rank 0's live what-if), in microseconds: the
  // cost part of the alert rule and the alert's cost; ranktime_cost_seconds_total comes from the
  // same statistics (RankLateness::cost_us) in publish().
  std::vector<double> step_cost_us(const Inspector& inspector) const;

  const Config& config_;
  const std::vector<std::string>* hostnames_;
  AlertRule rule_;
  std::unique_ptr<AlertCommand> command_;  // RANKTIME_ALERT_COMMAND
  std::unique_ptr<MetricsServer> server_;  // RANKTIME_METRICS_ADDR
  // The step in progress (rank 0's): the largest lag of its negotiations and whose it was.
  int step_last_rank_ = -1;
  double step_lag_us_ = 0;
  int64_t steps_seen_ = 0;
  int64_t last_mark_seen_ns_ = 0;
  // Since start.
  MetricsSnapshot totals_;  // steps, step histogram, alerts; the rest is filled in publish()
  std::map<OpType, MetricsSnapshot::Operation> operations_;
  int64_t last_publish_ns_ = INT64_MIN / 2;
};

}  // namespace ranktime
