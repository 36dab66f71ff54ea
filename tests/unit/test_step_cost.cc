// StepCost: rank 0's live what-if cost, from readiness and rank 0's batch times.
#include <gtest/gtest.h>

#include <algorithm>

#include "inspection/step_cost.h"

namespace ranktime {
namespace {

// `steps` steps of two tensors at 3 ranks; `late` is 2 ms behind in the steps `late_in` says.
StepCost run(int steps, int late, bool (*late_in)(int)) {
  StepCost cost(3, 100);
  for (int s = 0; s < steps; ++s) {
    const int64_t t0 = int64_t{s} * 100'000'000;
    for (uint32_t tensor = 0; tensor < 2; ++tensor) {
      std::vector<int64_t> ready(3, t0 + tensor * 1'000'000);
      if (late_in(s)) ready[late] += 2'000'000;
      cost.add(tensor, ready);
    }
  }
  return cost;
}

TEST(StepCost, LateRankCostsItsDelayPerStep) {
  StepCost cost = run(10, 1, [](int) { return true; });
  // The last two steps are still open.
  EXPECT_EQ(cost.steps(), 8u);
  const auto c = cost.costs();
  EXPECT_DOUBLE_EQ(c[1].total_us, 8 * 2000.0);
  EXPECT_DOUBLE_EQ(c[1].per_step_us, 2000.0);
  EXPECT_DOUBLE_EQ(c[0].total_us, 0);
  EXPECT_DOUBLE_EQ(c[2].per_step_us, 0);
}

TEST(StepCost, LateInSomeStepsOnly) {
  StepCost cost = run(10, 2, [](int s) { return s % 4 == 0; });  // steps 0 and 4 replayed
  EXPECT_DOUBLE_EQ(cost.costs()[2].total_us, 2 * 2000.0);
  EXPECT_DOUBLE_EQ(cost.costs()[2].per_step_us, 2 * 2000.0 / 8);
}

TEST(StepCost, ProcessSetAndJoinedRanks) {
  StepCost cost(4, 100);
  for (int s = 0; s < 4; ++s) {
    const int64_t t0 = int64_t{s} * 100'000'000;
    // A set of ranks 1 and 3, rank 3 late; rank 0 joined (last, left out).
    cost.add(7, {t0, t0 + 500'000, t0}, {1, 3, 0}, 1);
  }
  EXPECT_DOUBLE_EQ(cost.costs()[3].total_us, 2 * 500.0);
  EXPECT_DOUBLE_EQ(cost.costs()[0].total_us, 0);
}

// Three ranks, one tensor per step (ms on a 100 ms grid): ready at `ready_ms` (rank 2 at
// `ready_ms + late_ms`), seen complete 0.1 ms after the last, run on rank 0's lane for `run_ms`
// unless the lane is still busy with the step's first batch, a 30 ms one that starts at 0.
StepCost lane_bound(int steps, double ready_ms, double late_ms, double run_ms) {
  StepCost cost(3, 100);
  auto ns = [](double ms) { return static_cast<int64_t>(ms * 1e6); };
  for (int s = 0; s < steps; ++s) {
    const double t0 = s * 100.0;
    cost.add(0, {ns(t0), ns(t0), ns(t0)}, {}, 0, ns(t0));
    cost.executed({0}, ns(t0), ns(t0 + 30));
    const double last = t0 + ready_ms + late_ms;
    cost.add(1, {ns(t0 + ready_ms), ns(t0 + ready_ms), ns(last)}, {}, 0, ns(last + 0.1));
    const double begin = std::max(t0 + 30, last + 0.1);
    cost.executed({1}, ns(begin), ns(begin + run_ms));
  }
  return cost;
}

TEST(StepCost, LatenessHiddenByABusyLaneCostsNothing) {
  // Rank 2 is 15 ms late for tensor 1, but rank 0's lane runs tensor 0 until 30 ms anyway:
  // readiness alone would say 15 ms a step.
  const auto c = lane_bound(6, 5, 15, 10).costs();
  EXPECT_DOUBLE_EQ(c[2].total_us, 0);
  EXPECT_DOUBLE_EQ(c[2].per_step_us, 0);
}

TEST(StepCost, LatenessPastTheBusyLaneCostsWhatItDelayedTheRun) {
  // Rank 2 is 40 ms late: ready at 45 ms, the lane was free at 30 ms, so the step ends 15 ms
  // later than it would have (the others were ready at 5 ms; the run waits for the lane, 30 ms).
  StepCost cost = lane_bound(6, 5, 40, 10);
  EXPECT_EQ(cost.steps(), 4u);
  const auto c = cost.costs();
  EXPECT_NEAR(c[2].per_step_us, 15'000 + 100, 1);  // and the coordinator's 0.1 ms
  EXPECT_NEAR(c[2].total_us, 4 * (15'000 + 100), 4);
  EXPECT_DOUBLE_EQ(c[0].total_us, 0);
}

TEST(StepCost, BatchesOfStepsAlreadyReplayedAreLeftOut) {
  StepCost cost(2, 100);
  for (int s = 0; s < 5; ++s) cost.add(0, {s * 1'000'000, s * 1'000'000 + 500'000});
  // Tensor 0's newest negotiation (step 4) runs; an unknown tensor and a repeat are ignored.
  cost.executed({0, 9, 0}, 5'000'000, 6'000'000);
  EXPECT_EQ(cost.steps(), 3u);
  EXPECT_DOUBLE_EQ(cost.costs()[1].total_us, 3 * 500.0);
}

}  // namespace
}  // namespace ranktime
