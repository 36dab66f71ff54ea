// Causes on steps built by hand: who was late, in which region, and how nested regions and
// blocked time are counted.
#include "ranktime/timeline/causes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ranktime::timeline {
namespace {

constexpr double kMs = 1000;

// A step where every rank has the same regions and readiness, before a test changes one.
StepRegionTimes even_step(int ranks, int64_t step = 0) {
  StepRegionTimes s;
  s.step = step;
  s.ready_end.assign(ranks, 50 * kMs);
  s.own_us.assign(ranks, {{"data", 2 * kMs}, {"forward", 10 * kMs}, {"backward", 20 * kMs}});
  return s;
}

std::vector<int> all_ranks(int ranks) {
  std::vector<int> r;
  for (int i = 0; i < ranks; ++i) r.push_back(i);
  return r;
}

TEST(CompareStep, NamesTheLateRanksLongerRegion) {
  StepRegionTimes s = even_step(4);
  s.ready_end[2] += 20 * kMs;
  s.own_us[2]["data"] += 19 * kMs;
  s.own_us[1]["forward"] += 0.5 * kMs;  // another rank's jitter moves no median by much
  const auto late = compare_step(s, {});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].rank, 2);
  EXPECT_DOUBLE_EQ(late[0].lateness_us, 20 * kMs);
  ASSERT_EQ(late[0].regions.size(), 3u);
  EXPECT_EQ(late[0].regions[0].region, "data");
  EXPECT_DOUBLE_EQ(late[0].regions[0].own_us, 21 * kMs);
  EXPECT_DOUBLE_EQ(late[0].regions[0].others_median_us, 2 * kMs);
  EXPECT_DOUBLE_EQ(late[0].regions[0].excess_us, 19 * kMs);
  EXPECT_DOUBLE_EQ(late[0].regions[1].excess_us, 0);
}

TEST(CompareStep, LatenessIsAgainstTheOthersMedianNotTheFirst) {
  // Rank 0 is 10 ms early; against the first rank every other rank would be "late".
  StepRegionTimes s = even_step(4);
  s.ready_end[0] -= 10 * kMs;
  EXPECT_TRUE(compare_step(s, {}).empty());
  // The threshold: 0.9 ms behind is on time, 1 ms late (the default), or as told.
  s = even_step(2);
  s.ready_end[1] += 0.9 * kMs;
  EXPECT_TRUE(compare_step(s, {}).empty());
  s.ready_end[1] += 0.1 * kMs;
  EXPECT_EQ(compare_step(s, {}).size(), 1u);
  CauseOptions strict;
  strict.late_threshold_us = 5 * kMs;
  EXPECT_TRUE(compare_step(s, strict).empty());
}

TEST(CompareStep, ARegionOnlyTheLateRankHadCountsInFull) {
  StepRegionTimes s = even_step(3);
  s.ready_end[0] += 30 * kMs;
  s.own_us[0]["checkpoint"] = 28 * kMs;
  s.own_us[1].erase("data");  // one other rank without "data": 0 for it, median of 0 and 2 ms
  const auto late = compare_step(s, {});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].regions[0].region, "checkpoint");
  EXPECT_DOUBLE_EQ(late[0].regions[0].others_median_us, 0);
  EXPECT_DOUBLE_EQ(late[0].regions[0].excess_us, 28 * kMs);
  const RegionExcess& data = late[0].regions[1];
  EXPECT_EQ(data.region, "data");
  EXPECT_DOUBLE_EQ(data.others_median_us, 1 * kMs);
  EXPECT_DOUBLE_EQ(data.excess_us, 1 * kMs);
}

TEST(CompareStep, RanksWithoutRegionsOrReadinessAreLeftOut) {
  StepRegionTimes s = even_step(3);
  s.ready_end[2] += 20 * kMs;
  s.own_us[2]["data"] += 20 * kMs;
  s.own_us[0].clear();  // no regions: in the readiness median, not in the regions' medians
  auto late = compare_step(s, {});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_DOUBLE_EQ(late[0].regions[0].others_median_us, 2 * kMs);  // rank 1's alone
  // Without readiness a rank is never compared; alone, nobody is.
  s.ready_end[2] = -1;
  EXPECT_TRUE(compare_step(s, {}).empty());
  s = even_step(1);
  EXPECT_TRUE(compare_step(s, {}).empty());
  s = StepRegionTimes();
  EXPECT_TRUE(compare_step(s, {}).empty());
}

TEST(CauseTally, AddsUpOverTheLateStepsOnly) {
  CauseTally tally;
  for (int64_t step = 0; step < 10; ++step) {
    StepRegionTimes s = even_step(2, step);
    if (step != 3) {  // rank 1 is late in 9 of the 10 steps, by 20 ms, 18 of them in "data"
      s.ready_end[1] += 20 * kMs;
      s.own_us[1]["data"] += 18 * kMs;
      if (step == 5) s.own_us[1].erase("data");  // one late step without the region
    }
    tally.add(all_ranks(2), compare_step(s, {}));
  }
  Causes c = tally.finish();
  EXPECT_EQ(c.compared_steps, 10u);
  ASSERT_EQ(c.steps.size(), 9u);
  EXPECT_EQ(c.steps[3].step, 4);
  ASSERT_FALSE(c.causes.empty());
  const Cause& top = c.causes.front();
  EXPECT_EQ(top.rank, 1);
  EXPECT_EQ(top.region, "data");
  EXPECT_EQ(top.steps, 9u);
  EXPECT_EQ(top.compared_steps, 10u);
  EXPECT_DOUBLE_EQ(top.lateness_us, 20 * kMs);
  // Step 5 had no "data" on rank 1: 0 against 2 ms there.
  EXPECT_DOUBLE_EQ(top.total_excess_us, 8 * 18 * kMs - 2 * kMs);
  EXPECT_DOUBLE_EQ(top.excess_us, top.total_excess_us / 9);
  EXPECT_DOUBLE_EQ(top.explained_pct, 100 * top.total_excess_us / (9 * 20 * kMs));
  for (const Cause& other : c.causes) {
    EXPECT_EQ(other.rank, 1);  // rank 0 was never late
    EXPECT_LE(other.total_excess_us, top.total_excess_us);
  }
}

TEST(CauseTally, LargestFirstThenRankThenName) {
  CauseTally tally;
  StepRegionTimes s = even_step(3);
  s.ready_end[0] += 10 * kMs;
  s.ready_end[2] += 10 * kMs;
  s.own_us[0]["forward"] += 5 * kMs;
  s.own_us[2]["backward"] += 9 * kMs;
  s.own_us[2]["data"] += 5 * kMs;
  tally.add(all_ranks(3), compare_step(s, {}));
  Causes c = tally.finish();
  ASSERT_GE(c.causes.size(), 3u);
  EXPECT_EQ(c.causes[0].region, "backward");
  EXPECT_EQ(c.causes[1].rank, 0);  // 5 ms each: rank 0's first, then rank 2's
  EXPECT_EQ(c.causes[1].region, "forward");
  EXPECT_EQ(c.causes[2].rank, 2);
  EXPECT_EQ(c.causes[2].region, "data");
  // finish() leaves the tally empty.
  EXPECT_TRUE(tally.finish().causes.empty());
}

TEST(RegionNesting, EachMicrosecondCountsOnceForTheInnermostRegion) {
  RegionNesting n;
  // step [0, 100] holding data [0, 30] (with load [5, 25] in it) and forward [30, 60].
  EXPECT_DOUBLE_EQ(n.close(5, 25, 0), 20);   // load
  EXPECT_DOUBLE_EQ(n.close(0, 30, 0), 10);   // data, less load
  EXPECT_DOUBLE_EQ(n.close(30, 60, 4), 26);  // forward, blocked 4 µs
  EXPECT_DOUBLE_EQ(n.close(0, 100, 4), 100 - 4 - 30 - 26);
  // The next step's regions are not the last one's children.
  EXPECT_DOUBLE_EQ(n.close(100, 110, 0), 10);
  EXPECT_DOUBLE_EQ(n.close(100, 140, 0), 30);
  // Rounding never makes a region's own time negative.
  EXPECT_DOUBLE_EQ(n.close(200, 210, 0), 10);
  EXPECT_DOUBLE_EQ(n.close(200, 209.999, 0), 0);
  EXPECT_DOUBLE_EQ(n.close(300, 301, 5), 0);
}

TEST(RegionNesting, AStepRegionIsNotNamedForTheTimeItsDataRegionTook) {
  // Both ranks wrap each step in "step"; rank 1's "data" inside it is 20 ms slower.
  StepRegionTimes s;
  s.ready_end = {50 * kMs, 70 * kMs};
  s.own_us.resize(2);
  for (int rank = 0; rank < 2; ++rank) {
    RegionNesting n;
    const double data_end = (rank == 1 ? 25 : 5) * kMs;
    s.own_us[rank]["data"] += n.close(0, data_end, 0);
    s.own_us[rank]["step"] += n.close(0, data_end + 45 * kMs, 0);
  }
  const auto late = compare_step(s, {});
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].regions[0].region, "data");
  EXPECT_DOUBLE_EQ(late[0].regions[0].excess_us, 20 * kMs);
  EXPECT_DOUBLE_EQ(late[0].regions[1].excess_us, 0);  // "step"
}

// Steps of 100 ms on every rank, from 0.
int64_t hundred_ms_steps(int, double ts) { return ts < 0 ? -1 : static_cast<int64_t>(ts / 100e3); }

TEST(CauseCollector, StepsFromTheMarksAndBoundedByOpenSteps) {
  CauseCollector c({}, hundred_ms_steps);
  const int64_t steps = 3 * CauseCollector::kOpenSteps;
  for (int64_t step = 0; step < steps; ++step) {
    const double t0 = static_cast<double>(step) * 100e3;
    for (int rank = 0; rank < 2; ++rank) {
      const double data = rank == 1 ? 25e3 : 5e3;  // rank 1's data is 20 ms slower
      c.add_region(rank, "data", t0, t0 + data, 0);
      // Rank 0 waits 20 ms for rank 1 inside its backward, blocked in ranktime.
      const double blocked = rank == 0 ? 20e3 : 0;
      c.add_region(rank, "backward", t0 + data, t0 + data + 40e3 + blocked, blocked);
      c.add_readiness(step, rank, t0 + data + 30e3);
    }
  }
  // Late arrivals for a step closed long ago, and regions no step holds, are left out.
  c.add_readiness(0, 0, 99e3);
  c.add_region(0, "data", 0, 1e3, 0);
  c.add_region(1, "early", -50e3, -10e3, 0);      // before the first mark
  c.add_region(1, "epoch", 0, steps * 100e3, 0);  // over every mark
  c.add_region(CauseCollector::kMaxRanks, "data", 0, 1, 0);
  Causes out = c.finish();
  EXPECT_TRUE(out.has_regions);
  EXPECT_EQ(out.regions_left_out, 3u);
  EXPECT_EQ(out.compared_steps, static_cast<uint64_t>(steps));
  ASSERT_EQ(out.steps.size(), static_cast<size_t>(steps));
  ASSERT_FALSE(out.causes.empty());
  EXPECT_EQ(out.causes[0].rank, 1);
  EXPECT_EQ(out.causes[0].region, "data");
  EXPECT_NEAR(out.causes[0].excess_us, 20e3, 1e-6);
  EXPECT_NEAR(out.causes[0].explained_pct, 100, 1e-6);
  // Rank 0's backward took 60 ms, 20 of them blocked: 40 ms of its own, as rank 1's.
  EXPECT_EQ(out.steps[0].regions[1].region, "backward");
  EXPECT_NEAR(out.steps[0].regions[1].others_median_us, 40e3, 1e-6);
  EXPECT_NEAR(out.steps[0].regions[1].excess_us, 0, 1e-6);
}

TEST(CauseCollector, NoRegionsNoCauses) {
  CauseCollector c({}, hundred_ms_steps);
  c.add_readiness(0, 0, 10);
  c.add_readiness(0, 1, 50e3);
  Causes out = c.finish();
  EXPECT_FALSE(out.has_regions);
  EXPECT_TRUE(out.causes.empty());
  EXPECT_EQ(out.compared_steps, 0u);
}

}  // namespace
}  // namespace ranktime::timeline
