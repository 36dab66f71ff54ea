// The operators inside a late rank's region (cause_operators.h): own times on a profiler thread,
// and the known answer of a rank whose "forward" grew by one operator, whether the profiles come
// after their steps closed (as `ranktime merge` writes them) or while they are open.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ranktime/timeline/cause_operators.h"
#include "ranktime/timeline/causes.h"

namespace ranktime::timeline {
namespace {

using OwnTimes = std::vector<std::pair<std::string, double>>;

OperatorNesting::Closed record(OwnTimes* out) {
  return [out](const std::string& name, double, double own_us) { out->emplace_back(name, own_us); };
}

TEST(OperatorNesting, AnOperatorsOwnTimeLeavesOutItsChildren) {
  OwnTimes own;
  OperatorNesting thread;
  thread.add("aten::linear", 0, 100, record(&own));
  thread.add("aten::t", 5, 10, record(&own));
  thread.add("aten::addmm", 20, 70, record(&own));
  thread.add("aten::copy_", 30, 40, record(&own));
  thread.add("aten::relu", 200, 5, record(&own));  // after linear: closes it
  thread.flush(record(&own));
  EXPECT_EQ(own, (OwnTimes{{"aten::t", 10},
                           {"aten::copy_", 40},
                           {"aten::addmm", 30},
                           {"aten::linear", 20},
                           {"aten::relu", 5}}));
}

TEST(OperatorNesting, ASliceThatOverlapsWithoutFittingClosesTheOpenOne) {
  OwnTimes own;
  OperatorNesting thread;
  thread.add("a", 0, 50, record(&own));
  thread.add("b", 40, 30, record(&own));  // ends after a: not its child
  thread.flush(record(&own));
  EXPECT_EQ(own, (OwnTimes{{"a", 50}, {"b", 30}}));
}

constexpr int kRanks = 3;
// More than CauseCollector::kOpenSteps: the profiles after the timeline reach closed steps.
constexpr int kSteps = CauseCollector::kOpenSteps + 4;
constexpr double kStepUs = 100e3;

// Each rank, each step: "forward" from 10 ms to 40 ms (50 ms on rank 1) and "backward" after
// it, then readiness. Inside forward, "aten::mm" takes 5 ms (15 ms on rank 1) and "aten::relu"
// 1 ms; "aten::randn" runs outside every region, longer on rank 1.
struct Job {
  // `profiled`: the ranks with a profile (empty: none).
  Job(bool profiles_after_steps, std::vector<int> profiled_ranks) : profiled(profiled_ranks) {
    for (int k = 0; k < kSteps; ++k) {
      for (int r = 0; r < kRanks; ++r) {
        const double t0 = k * kStepUs, grew = r == 1 ? 10e3 : 0;
        collector.add_region(r, "forward", t0 + 10e3, t0 + 40e3 + grew, 0);
        collector.add_region(r, "backward", t0 + 40e3 + grew, t0 + 60e3 + grew, 0);
        collector.add_readiness(k, r, t0 + 60e3 + grew);
        if (!profiles_after_steps) add_operators(r, k);
      }
    }
    if (profiles_after_steps) {
      // Steps close once a later one opens: those the profiles reach after are closed already.
      for (int r = 0; r < kRanks; ++r) {
        for (int k = 0; k < kSteps; ++k) add_operators(r, k);
      }
    }
  }
  void add_operators(int rank, int step) {
    const double t0 = step * kStepUs, mm = rank == 1 ? 15e3 : 5e3;
    if (std::find(profiled.begin(), profiled.end(), rank) != profiled.end()) {
      collector.add_operator(rank, "aten::mm", t0 + 12e3, mm);
      collector.add_operator(rank, "aten::relu", t0 + 12e3 + mm, 1e3);
      collector.add_operator(rank, "aten::randn", t0 + 5e3, rank == 1 ? 4e3 : 1e3);
    }
  }
  CauseCollector collector{CauseOptions{},
                           [](int, double ts) { return static_cast<int64_t>(ts / kStepUs); }};
  std::vector<int> profiled;
};

const std::vector<int> kEveryRank = {0, 1, 2};

void expect_mm_named(Causes c) {
  ASSERT_FALSE(c.causes.empty());
  const Cause& top = c.causes.front();
  EXPECT_EQ(top.rank, 1);
  EXPECT_EQ(top.region, "forward");
  EXPECT_EQ(top.steps, static_cast<uint64_t>(kSteps));
  ASSERT_EQ(top.operators.size(), 1u);  // relu took no longer; randn was in no region
  EXPECT_EQ(top.operators[0].name, "aten::mm");
  EXPECT_DOUBLE_EQ(top.operators[0].excess_us, 10e3);
}

TEST(CauseOperators, NamesTheOperatorThatGrewWhenTheProfilesComeAfterTheTimeline) {
  expect_mm_named(Job(true, kEveryRank).collector.finish());
}

TEST(CauseOperators, NamesTheOperatorThatGrewWhileItsStepIsOpen) {
  expect_mm_named(Job(false, kEveryRank).collector.finish());
}

TEST(CauseOperators, NoProfilerEventsNoOperators) {
  Causes c = Job(true, {}).collector.finish();
  ASSERT_FALSE(c.causes.empty());
  EXPECT_EQ(c.causes.front().rank, 1);
  EXPECT_EQ(c.causes.front().region, "forward");
  EXPECT_TRUE(c.causes.front().operators.empty());
}

TEST(CauseOperators, ARankWithoutAProfileIsNotAZero) {
  // Rank 1 against rank 2 alone: 10 ms (rank 0 counted as 0 would make it 12.5).
  expect_mm_named(Job(true, {1, 2}).collector.finish());
}

TEST(CauseOperators, TheLateRankAloneProfiledHasNobodyToCompareWith) {
  CauseOperators ops;
  for (int r = 0; r < 2; ++r) ops.add_region(r, 0, "forward", 0, 100);
  ops.add_operator(1, 0, "aten::mm", 10, 50);
  ops.close_step(0, {1});
  std::vector<Cause> causes(1);
  causes[0].rank = 1;
  causes[0].region = "forward";
  causes[0].steps = 1;
  ops.finish(&causes);
  EXPECT_TRUE(causes[0].operators.empty());
}

TEST(CauseOperators, AnOperatorWaitsForTheRegionThatClosesAfterIt) {
  // A rank's last region closes at the end of the input, after the profiles that hold its
  // operators; one outside every region is still counted for none.
  CauseOperators ops;
  ops.add_region(0, 0, "forward", 0, 100);
  for (int r = 0; r < 2; ++r) {
    ops.add_operator(r, 0, "aten::mm", 10, r == 1 ? 60 : 20);
    ops.add_operator(r, 0, "aten::randn", 150, r == 1 ? 30 : 1);
  }
  ops.add_region(1, 0, "forward", 0, 140);
  ops.close_step(0, {1});
  std::vector<Cause> causes(1);
  causes[0].rank = 1;
  causes[0].region = "forward";
  causes[0].steps = 1;
  ops.finish(&causes);
  ASSERT_EQ(causes[0].operators.size(), 1u);
  EXPECT_EQ(causes[0].operators[0].name, "aten::mm");
  EXPECT_DOUBLE_EQ(causes[0].operators[0].excess_us, 40);
}

}  // namespace
}  // namespace ranktime::timeline
