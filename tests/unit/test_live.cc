// Rank 0's live view without MPI: the alert rule over finished steps, and the metrics page's
// text format (label escaping, histogram buckets).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "live/alert_rule.h"
#include "live/metrics.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecond = 1'000'000'000;

StepLateness step(int64_t s, int last_rank, double lag_ms) {
  StepLateness l;
  l.step = s;
  l.last_rank = last_rank;
  l.lag_us = lag_ms * 1e3;
  l.step_us = 50'000;
  return l;
}

AlertRuleOptions defaults() {
  AlertRuleOptions o;  // X = 5 ms, K = 3, N = 5
  o.interval_ns = 60 * kSecond;
  return o;
}

TEST(AlertRule, FiresOnTheStepThatMakesKOfN) {
  AlertRule rule(defaults());
  int64_t now = 0;
  // Rank 2 late in steps 10, 12 and 13; rank 1 once in between: fires at 13, not before.
  EXPECT_FALSE(rule.add(step(9, 1, 1), now += kSecond));  // below X
  EXPECT_FALSE(rule.add(step(10, 2, 20), now += kSecond));
  EXPECT_FALSE(rule.add(step(11, 1, 20), now += kSecond));
  EXPECT_FALSE(rule.add(step(12, 2, 20), now += kSecond));
  auto alert = rule.add(step(13, 2, 30), now += kSecond);
  ASSERT_TRUE(alert);
  EXPECT_EQ(alert->rank, 2);
  EXPECT_EQ(alert->step, 13);
  EXPECT_DOUBLE_EQ(alert->lag_us, 30'000);
  EXPECT_LT(alert->cost_pct, 0);  // unknown
  EXPECT_THAT(alert->reason, HasSubstr("3 of the last 5 steps"));
}

TEST(AlertRule, OldLateStepsLeaveTheWindow) {
  AlertRule rule(defaults());
  int64_t now = 0;
  EXPECT_FALSE(rule.add(step(0, 2, 20), now += kSecond));
  EXPECT_FALSE(rule.add(step(1, 2, 20), now += kSecond));
  for (int64_t s = 2; s < 5; ++s) EXPECT_FALSE(rule.add(step(s, 0, 0), now += kSecond));
  // Steps 0 and 1 are out of the last five: one more late step is not three.
  EXPECT_FALSE(rule.add(step(5, 2, 20), now += kSecond));
}

TEST(AlertRule, AtMostOncePerInterval) {
  AlertRule rule(defaults());
  int64_t now = 0;
  int fired = 0;
  for (int64_t s = 0; s < 20; ++s) fired += rule.add(step(s, 3, 10), now += kSecond) ? 1 : 0;
  EXPECT_EQ(fired, 1);  // 20 s of steps, one 60 s interval
  for (int64_t s = 20; s < 30; ++s) fired += rule.add(step(s, 3, 10), now += 10 * kSecond) ? 1 : 0;
  EXPECT_GE(fired, 2);
  EXPECT_LE(fired, 3);  // 100 s more: one or two more
}

TEST(AlertRule, ZeroLagThresholdNeverFiresOnLag) {
  AlertRuleOptions o = defaults();
  o.lag_us = 0;
  AlertRule rule(o);
  for (int64_t s = 0; s < 10; ++s) EXPECT_FALSE(rule.add(step(s, 1, 100), s * kSecond));
}

TEST(AlertRule, CostShareOfTheStep) {
  AlertRuleOptions o = defaults();
  o.lag_us = 0;
  o.cost_pct = 20;
  AlertRule rule(o);
  StepLateness s = step(4, 1, 3);
  s.cost_us = {0, 5'000, 0};  // 10% of 50 ms
  EXPECT_FALSE(rule.add(s, kSecond));
  s.cost_us = {0, 15'000, 0};  // 30%
  auto alert = rule.add(s, 2 * kSecond);
  ASSERT_TRUE(alert);
  EXPECT_EQ(alert->rank, 1);
  EXPECT_DOUBLE_EQ(alert->cost_pct, 30);
  EXPECT_THAT(alert->reason, HasSubstr("cost 30.0%"));
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label_value("plain-host.1"), "plain-host.1");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  MetricsSnapshot s;
  MetricsSnapshot::Rank r;
  r.rank = 1;
  r.host = "evil\"} 1\nranktime_steps_total 99";
  s.ranks.push_back(r);
  const std::string text = format_metrics(s);
  // The hostname stays inside its quotes: no line of its own.
  EXPECT_THAT(text, Not(HasSubstr("\nranktime_steps_total 99")));
  EXPECT_THAT(text, HasSubstr("host=\"evil\\\"} 1\\nranktime_steps_total 99\""));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  MetricsSnapshot s;
  s.step_buckets[0] = 2;  // <= 1 ms
  s.step_buckets[3] = 1;  // <= 10 ms
  s.step_count = 4;       // one beyond the last bound
  s.step_sum_s = 20.5;
  s.steps = 5;
  s.operations.push_back({"allreduce", 7, 1024});
  const std::string text = format_metrics(s);
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_bucket{le=\"0.001\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_bucket{le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_bucket{le=\"0.01\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_bucket{le=\"10\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_bucket{le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_step_seconds_count 4\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_steps_total 5\n"));
  EXPECT_THAT(text, HasSubstr("ranktime_bytes_total{op=\"allreduce\"} 1024\n"));
  // No cost known: no cost samples (rather than zeros that look measured).
  EXPECT_THAT(text, Not(HasSubstr("ranktime_cost_seconds_total")));
}

TEST(TimelineOnAlert, TracePathsNumberBeforeTheExtension) {
  EXPECT_EQ(TimelineRecorder::alert_trace_path("/d/t.json", 1), "/d/t.alert1.json");
  EXPECT_EQ(TimelineRecorder::alert_trace_path("t.json.gz", 2), "t.alert2.json.gz");
  EXPECT_EQ(TimelineRecorder::alert_trace_path("trace", 3), "trace.alert3");
}

}  // namespace
}  // namespace ranktime
