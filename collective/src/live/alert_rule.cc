// The alert rule (see alert_rule.h).
#include "live/alert_rule.h"

#include <algorithm>
#include <cstdio>

namespace ranktime {

AlertRuleOptions AlertRuleOptions::from(const Config& config) {
  AlertRuleOptions o;
  o.lag_us = config.alert_lag_ms * 1e3;
  o.times = static_cast<int>(config.alert_times);
  o.steps = static_cast<int>(config.alert_steps);
  o.cost_pct = config.alert_cost_pct;
  o.interval_ns = static_cast<int64_t>(config.alert_interval_s * 1e9);
  return o;
}

std::optional<std::pair<int, double>> AlertRule::costly(const StepLateness& step) const {
  if (options_.cost_pct <= 0 || step.step_us <= 0) return std::nullopt;
  std::optional<std::pair<int, double>> worst;
  for (size_t r = 0; r < step.cost_us.size(); ++r) {
    const double pct = step.cost_us[r] / step.step_us * 100;
    if (pct >= options_.cost_pct && (!worst || pct > worst->second))
      worst = {static_cast<int>(r), pct};
  }
  return worst;
}

std::optional<Alert> AlertRule::add(const StepLateness& step, int64_t now_ns) {
  const bool late = options_.lag_us > 0 && step.last_rank >= 0 && step.lag_us >= options_.lag_us;
  late_.push_back(late ? step.last_rank : -1);
  while (late_.size() > static_cast<size_t>(options_.steps)) late_.pop_front();

  Alert alert;
  alert.step = step.step;
  char text[160];
  if (late && std::count(late_.begin(), late_.end(), step.last_rank) >= options_.times) {
    alert.rank = step.last_rank;
    std::snprintf(text, sizeof(text),
                  "last to be ready with a lag of at least %.1f ms in %d of the last %d steps",
                  options_.lag_us / 1e3,
                  static_cast<int>(std::count(late_.begin(), late_.end(), step.last_rank)),
                  static_cast<int>(late_.size()));
    alert.reason = text;
  } else if (auto c = costly(step)) {
    alert.rank = c->first;
    std::snprintf(text, sizeof(text), "cost %.1f%% of the step, at least %.1f%%", c->second,
                  options_.cost_pct);
    alert.reason = text;
  } else {
    return std::nullopt;
  }
  alert.lag_us = step.last_rank == alert.rank ? step.lag_us : 0;
  if (static_cast<size_t>(alert.rank) < step.cost_us.size() && step.step_us > 0)
    alert.cost_pct = step.cost_us[alert.rank] / step.step_us * 100;
  if (last_fired_ns_ && now_ns - *last_fired_ns_ < options_.interval_ns) return std::nullopt;
  last_fired_ns_ = now_ns;
  return alert;
}

}  // namespace ranktime
