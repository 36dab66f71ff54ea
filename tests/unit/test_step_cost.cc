// StepCost: rank 0's live what-if cost, from readiness alone.
#include <gtest/gtest.h>

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
  const StepCost cost = run(10, 1, [](int) { return true; });
  // The last two steps are still open.
  EXPECT_EQ(cost.steps(), 8u);
  const auto c = cost.costs();
  EXPECT_DOUBLE_EQ(c[1].total_us, 8 * 2000.0);
  EXPECT_DOUBLE_EQ(c[1].per_step_us, 2000.0);
  EXPECT_DOUBLE_EQ(c[0].total_us, 0);
  EXPECT_DOUBLE_EQ(c[2].per_step_us, 0);
}

TEST(StepCost, LateInSomeStepsOnly) {
  const StepCost cost = run(10, 2, [](int s) { return s % 4 == 0; });  // steps 0 and 4 replayed
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

}  // namespace
}  // namespace ranktime
