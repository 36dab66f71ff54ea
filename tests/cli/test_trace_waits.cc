// Wall-clock waits and per-step figures with known answers: interval unions, overlapping
// negotiations, ties, a rank late only in some steps, with and without step marks.
#include "ranktime/timeline/trace_waits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <vector>

#include "ranktime/timeline/trace_analysis.h"
#include "trace_text.h"

namespace ranktime::timeline {
namespace {

Summary summarize(const std::string& text, SummaryOptions options = {}) {
  // Two passes, as the CLI does for per-step figures: step marks first.
  if (options.by_step) {
    StepMarkCollector marks;
    std::istringstream first(text);
    read_trace(first, [&](const TraceEvent& e) {
      marks.add(e);
      return true;
    });
    options.step_marks = marks.finish();
  }
  TraceSummarizer summarizer(std::move(options));
  std::istringstream in(text);
  read_trace(in, [&](const TraceEvent& e) {
    summarizer.add(e);
    return true;
  });
  return summarizer.finish();
}

const RankLateness& rank_row(const Summary& s, int rank) {
  for (const auto& row : s.lateness) {
    if (row.rank == rank) return row;
  }
  static RankLateness none;
  ADD_FAILURE() << "no lateness row for rank " << rank;
  return none;
}

// Exact measure of a union, for comparison: sort and sweep.
double exact_union(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, begin = 0, end = -1e300;
  for (const auto& [b, e] : v) {
    if (e <= b) continue;
    if (b > end) {
      if (end > begin) total += end - begin;
      begin = b;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > begin) total += end - begin;
  return total;
}

TEST(IntervalUnion, OverlapsCountOnce) {
  IntervalUnion u;
  u.add(0, 10);
  u.add(5, 15);   // overlaps the first
  u.add(20, 30);  // apart
  u.add(12, 21);  // bridges the two
  u.add(3, 4);    // inside
  u.add(40, 40);  // empty
  EXPECT_DOUBLE_EQ(u.measure(), 30);
}

TEST(IntervalUnion, MatchesTheExactUnionInOrderAndNeverExceedsItOutOfOrder) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> start(0, 1e6), length(0, 2000), jitter(-5000, 5000);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::pair<double, double>> sorted;
    for (int i = 0; i < 3000; ++i) {
      double b = start(rng);
      sorted.emplace_back(b, b + length(rng));
    }
    std::sort(sorted.begin(), sorted.end());
    // In time order, folding (8 intervals kept) loses nothing.
    IntervalUnion in_order(8);
    for (const auto& [b, e] : sorted) in_order.add(b, e);
    EXPECT_NEAR(in_order.measure(), exact_union(sorted), 1e-6);
    // Nearly in order (as a trace's negotiations come): within 1% here, and never more.
    std::vector<std::pair<double, double>> shuffled = sorted;
    std::vector<double> key;
    for (const auto& iv : shuffled) key.push_back(iv.first + jitter(rng));
    std::vector<size_t> order(shuffled.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
    IntervalUnion nearly(64);
    for (size_t i : order) nearly.add(shuffled[i].first, shuffled[i].second);
    EXPECT_LE(nearly.measure(), exact_union(sorted) + 1e-6);
    EXPECT_GE(nearly.measure(), 0.99 * exact_union(sorted));
  }
}

TEST(WaitMatrix, OverlappingNegotiationsCountOnce) {
  // Two tensors negotiated at once: rank 1 is 20 ms late for both. Rank 0 waits 20 ms for it,
  // once, not twice.
  WaitMatrix w;
  w.add({{0, 1000}, {1, 21000}});
  w.add({{0, 1010}, {1, 21010}});
  EXPECT_DOUBLE_EQ(w.waited_for(0, 1), 20010);
  EXPECT_DOUBLE_EQ(w.caused(1), 20010);
  EXPECT_DOUBLE_EQ(w.caused(0), 0);
  EXPECT_DOUBLE_EQ(w.waited(0), 20010);
  EXPECT_DOUBLE_EQ(w.waited(1), 0);
}

TEST(WaitMatrix, TiesForLastAreBothWaitedForAndNotEachOther) {
  // Ranks 2 and 3 become ready together, 5 ms after ranks 0 and 1.
  WaitMatrix w;
  w.add({{0, 0}, {1, 0}, {2, 5000}, {3, 5000}});
  EXPECT_DOUBLE_EQ(w.caused(2), 2 * 5000.0);
  EXPECT_DOUBLE_EQ(w.caused(3), 2 * 5000.0);
  EXPECT_DOUBLE_EQ(w.waited_for(2, 3), 0);
  EXPECT_DOUBLE_EQ(w.waited_for(0, 1), 0);
  EXPECT_DOUBLE_EQ(w.waited(0), 5000);
  EXPECT_DOUBLE_EQ(w.waited(3), 0);
}

TEST(WaitMatrix, EachLaterRankKeepsAnEarlierOneWaiting) {
  // Ready at 0, 1, 3 ms: rank 0 waits 1 ms for rank 1 and 3 ms for rank 2; rank 1 waits 2 ms.
  WaitMatrix w;
  w.add({{2, 3000}, {0, 0}, {1, 1000}});
  EXPECT_EQ(w.ranks(), 3);
  EXPECT_DOUBLE_EQ(w.waited_for(0, 1), 1000);
  EXPECT_DOUBLE_EQ(w.waited_for(0, 2), 3000);
  EXPECT_DOUBLE_EQ(w.waited_for(1, 2), 2000);
  EXPECT_DOUBLE_EQ(w.caused(2), 5000);
  EXPECT_DOUBLE_EQ(w.waited(0), 3000);
  EXPECT_DOUBLE_EQ(w.waited(1), 2000);
}

TEST(WaitMatrix, NeverAboveRanksMinusOneTimesWall) {
  // Random readiness over a 1 s window at 8 ranks, thousands of overlapping negotiations.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> when(0, 1e6), lag(0, 50000);
  WaitMatrix w;
  for (int n = 0; n < 5000; ++n) {
    const double base = when(rng);
    std::vector<Readiness> ready;
    for (int r = 0; r < 8; ++r) ready.push_back({r, std::min(1e6, base + lag(rng))});
    w.add(ready);
  }
  for (int q = 0; q < 8; ++q) {
    EXPECT_LE(w.caused(q), 7 * 1e6);
    EXPECT_LE(w.waited(q), 1e6);
    EXPECT_GT(w.caused(q), 0);
  }
}

testing::SyntheticTrace slow_trace() {
  testing::SyntheticTrace t;
  t.ranks = 4;
  t.tensors = 6;  // negotiated 10 µs apart, so their waits overlap
  t.steps = 5;
  t.slow_rank = 2;
  t.delay_us = 20000;
  return t;
}

TEST(Summary, WaitsAreWallClockNotSummedPerTensor) {
  testing::SyntheticTrace t = slow_trace();
  Summary s = summarize(testing::synthetic_text(t));
  EXPECT_EQ(s.slowest_rank, 2);
  // Per step, each other rank waits from its first tensor's readiness to the slow rank's last:
  // 5 x 10 µs + 20 ms. Summed per tensor it would be six times as much.
  const double per_step = 50 + 20000;
  EXPECT_NEAR(rank_row(s, 2).caused_wait_us, 3 * per_step * t.steps, 1e-6);
  EXPECT_NEAR(rank_row(s, 0).waited_us, per_step * t.steps, 1e-6);
  EXPECT_DOUBLE_EQ(rank_row(s, 2).waited_us, 0);
  EXPECT_DOUBLE_EQ(rank_row(s, 1).caused_wait_us, 0);
  EXPECT_LE(rank_row(s, 2).caused_wait_us, 3 * s.wall_us);
  EXPECT_NEAR(s.waited_us, 3 * per_step * t.steps, 1e-6);
  EXPECT_DOUBLE_EQ(s.rank_wall_us, 4 * s.wall_us);
}

TEST(Summary, SharesAreUnionsAndAtMostOne) {
  // Fused tensors share one operation slice, and the negotiations of a step overlap: summed,
  // they would pass the wall time; as unions they cannot.
  testing::SyntheticTrace t = slow_trace();
  t.fused = 3;
  t.step_us = 20100;  // steps back to back
  Summary s = summarize(testing::synthetic_text(t));
  ASSERT_FALSE(s.phases.empty());
  for (const PhaseStat& p : s.phases) {
    EXPECT_GE(p.share, 0) << p.phase;
    EXPECT_LE(p.share, 1.0) << p.phase;
    EXPECT_LE(p.busy_us, s.wall_us + 1e-6) << p.phase;
  }
  const PhaseStat& negotiate = s.phases.front();
  ASSERT_TRUE(negotiate.negotiation);
  EXPECT_GT(negotiate.total_us, s.wall_us);  // summed, over 100%
  // Each step's negotiations span 20,060 µs, from the first readiness to the last E.
  EXPECT_NEAR(negotiate.busy_us, 20060.0 * t.steps, 1e-6);
  for (const PhaseStat& p : s.phases) {
    if (p.negotiation) continue;
    ASSERT_EQ(p.busy_us_by_rank.size(), 4u) << p.phase;
  }
}

TEST(Steps, RankLateOnlyInSomeStepsWithoutStepMarks) {
  testing::SyntheticTrace t = slow_trace();
  t.slow_steps = {1, 3};
  SummaryOptions options;
  options.by_step = true;
  Summary s = summarize(testing::synthetic_text(t), options);
  EXPECT_FALSE(s.steps_from_marks);
  ASSERT_EQ(s.steps.size(), 5u);
  for (const StepStat& step : s.steps) {
    SCOPED_TRACE("step " + std::to_string(step.step));
    EXPECT_EQ(step.negotiations, 6u);
    ASSERT_EQ(step.ranks.size(), 4u);
    const bool late = step.step == 1 || step.step == 3;
    EXPECT_EQ(step.last_rank, late ? 2 : -1);
    EXPECT_NEAR(step.waited_for_last_us, late ? 3 * 20050.0 : 0, 1e-6);
    for (int r = 0; r < 4; ++r) {
      EXPECT_DOUBLE_EQ(step.ranks[r].start_lag_us, -1);  // no marks
      EXPECT_NEAR(step.ranks[r].ready_lag_us, late && r == 2 ? 20000 : 0, 1e-6);
      EXPECT_NEAR(step.ranks[r].waited_us, late && r != 2 ? 20050 : 0, 1e-6);
    }
  }
  // The steps add up to the run.
  double waited = 0;
  for (const StepStat& step : s.steps) waited += step.waited_us;
  EXPECT_NEAR(waited, s.waited_us, 1e-6);
}

TEST(Steps, StepMarksGiveStartLagsAndNumbersEvenWhenWrittenAfterTheirStep) {
  testing::SyntheticTrace t = slow_trace();
  t.slow_steps = {2};
  t.step_marks = true;  // written after each step's negotiations
  t.start_lag_us = 100;
  SummaryOptions options;
  options.by_step = true;
  Summary s = summarize(testing::synthetic_text(t), options);
  EXPECT_TRUE(s.steps_from_marks);
  ASSERT_EQ(s.steps.size(), 5u);
  for (const StepStat& step : s.steps) {
    SCOPED_TRACE("step " + std::to_string(step.step));
    EXPECT_EQ(step.negotiations, 6u);
    EXPECT_DOUBLE_EQ(step.begin_us, 500 + step.step * t.step_us);
    for (int r = 0; r < 4; ++r) {
      EXPECT_NEAR(step.ranks[r].start_lag_us, 100.0 * r, 1e-6);
      EXPECT_NEAR(step.ranks[r].ready_lag_us, step.step == 2 && r == 2 ? 20000 : 0, 1e-6);
    }
    EXPECT_EQ(step.last_rank, step.step == 2 ? 2 : -1);
  }
}

TEST(Steps, MarkedStepsWithoutNegotiationsStillHaveStartLags) {
  // A capture window writes step marks for every step but detail for some only: here the
  // negotiations of steps 0-1 are dropped from the file.
  testing::SyntheticTrace t = slow_trace();
  t.step_marks = true;
  t.start_lag_us = 50;
  auto events = testing::event_lines(testing::synthetic_text(t));
  std::vector<std::string> kept;
  for (const auto& e : events) {
    const bool negotiate = e.find("\"tid\":0,") != std::string::npos &&
                           e.find("\"pid\":0,") == std::string::npos &&
                           e.find("\"ph\":\"M\"") == std::string::npos;
    const size_t ts = e.find("\"ts\":");
    const bool early = ts != std::string::npos && std::stod(e.substr(ts + 5)) < 2 * t.step_us;
    if (!(negotiate && early)) kept.push_back(e);
  }
  SummaryOptions options;
  options.by_step = true;
  Summary s = summarize(testing::join_events(kept), options);
  ASSERT_EQ(s.steps.size(), 5u);
  EXPECT_EQ(s.steps[0].negotiations, 0u);
  EXPECT_EQ(s.steps[1].negotiations, 0u);
  EXPECT_EQ(s.steps[2].negotiations, 6u);
  EXPECT_NEAR(s.steps[0].ranks[3].start_lag_us, 150, 1e-6);
  EXPECT_DOUBLE_EQ(s.steps[0].ranks[3].ready_lag_us, -1);
}

TEST(Steps, RankFilterAppliesToSteps) {
  testing::SyntheticTrace t = slow_trace();
  SummaryOptions options;
  options.by_step = true;
  options.ranks = {0, 1, 3};
  Summary s = summarize(testing::synthetic_text(t), options);
  ASSERT_FALSE(s.steps.empty());
  for (const StepStat& step : s.steps) {
    EXPECT_EQ(step.last_rank, -1);
    EXPECT_DOUBLE_EQ(step.waited_us, 0);
    EXPECT_DOUBLE_EQ(step.ranks[2].ready_lag_us, -1);
  }
}

TEST(Summary, RunMetadataAsAnInstantIsRead) {
  // Where a writer that both viewers understand may put it: args of an instant on pid 0.
  auto events = testing::event_lines(testing::synthetic_text(slow_trace()));
  int i = testing::find_event(events, {"\"ranktime_run\""});
  ASSERT_GE(i, 0);
  const std::string m = "\"ph\":\"M\"";
  events[i].replace(events[i].find(m), m.size(), "\"ph\":\"i\",\"s\":\"g\",\"ts\":0");
  Summary s = summarize(testing::join_events(events));
  EXPECT_EQ(s.run.ranks, 4);
  EXPECT_EQ(s.run.hostnames.size(), 4u);
  EXPECT_EQ(s.run.clock_offsets_us.size(), 4u);
}

}  // namespace
}  // namespace ranktime::timeline
