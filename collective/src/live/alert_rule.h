// The alert rule, pure (no clock, no MPI): per finished step, which rank was the last to be ready
// and by how much; the rule fires when the same rank was last with a lag of at least X in K of
// the last N steps (RANKTIME_ALERT_MIN_LAG_MS, _TIMES, _STEPS), or when a rank's cost reached P% of
// the step (RANKTIME_ALERT_MIN_COST_PCT), at most once per RANKTIME_ALERT_INTERVAL_S.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"

namespace ranktime {

// One finished step as rank 0 saw it.
struct StepLateness {
  int64_t step = 0;
  int last_rank = -1;  // the rank with the largest lag behind the first rank; -1: none
  double lag_us = 0;   // that lag (the largest of the step's negotiations)
  double step_us = 0;  // rank 0's step time
  // Per rank, how much sooner the step would have ended had the rank been on time (the
  // what-if cost); empty while no cost is known.
  std::vector<double> cost_us;
};

struct Alert {
  int rank = -1;
  double lag_us = 0;
  double cost_pct = -1;  // < 0: unknown
  int64_t step = 0;      // the step whose end made the condition true
  std::string reason;    // one line
};

struct AlertRuleOptions {
  double lag_us = 5000;  // 0: the lag part never fires
  int times = 3;         // K
  int steps = 5;         // N
  double cost_pct = 0;   // 0: the cost part never fires
  int64_t interval_ns = 60'000'000'000;
  static AlertRuleOptions from(const Config& config);
};

class AlertRule {
 public:
  explicit AlertRule(AlertRuleOptions options) : options_(options) {}

  // A step finished at `now_ns`: the alert when the rule fires now.
  std::optional<Alert> add(const StepLateness& step, int64_t now_ns);

 private:
  // The cost part: a rank whose cost reached the threshold, with its percentage.
  std::optional<std::pair<int, double>> costly(const StepLateness& step) const;

  AlertRuleOptions options_;
  std::deque<int> late_;  // per recent step: the rank last with lag >= X, or -1
  std::optional<int64_t> last_fired_ns_;
};

}  // namespace ranktime
