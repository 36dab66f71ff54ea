// The what-if replay (what_if.h) on steps built by hand, each with its answer worked out in the
// comments: the unchanged replay, a rank late for every tensor or for some, fused batches, ties,
// a lane still busy with the step before, lanes not recorded and clock noise between lanes.
#include <gtest/gtest.h>

#include "ranktime/timeline/what_if.h"

namespace ranktime::timeline {
namespace {

// Readiness of ranks 0, 1, ... in order.
WhatIfNegotiation negotiation(std::vector<double> ready, double end) {
  WhatIfNegotiation n;
  for (size_t r = 0; r < ready.size(); ++r) n.ready.push_back({static_cast<int>(r), ready[r]});
  n.end_us = end;
  return n;
}

// The same run on lanes 0 .. lanes-1.
WhatIfBatch batch(std::vector<size_t> negotiations, int lanes, double begin, double end) {
  WhatIfBatch b;
  b.negotiations = std::move(negotiations);
  for (int l = 0; l < lanes; ++l) b.runs.push_back({l, begin, end});
  return b;
}

// 4 ranks, three tensors 100 µs apart; `late` (rank 2 for some tensors) adds `delay` to its
// readiness. Each negotiation ends 10 µs after its last readiness, each batch starts 5 µs after
// and takes 50; the step ends 20 µs after its last completion.
WhatIfStep three_tensors(double delay, std::vector<bool> late) {
  WhatIfStep step;
  step.begin_us = 0;
  double last = 0;
  for (size_t t = 0; t < 3; ++t) {
    const double ready = 100.0 * static_cast<double>(t + 1);
    const double slow = ready + (late[t] ? delay : 0);
    const double end = std::max(ready, slow) + 10;
    step.negotiations.push_back(negotiation({ready, ready, slow, ready}, end));
    const double begin = std::max(end + 5, last);
    step.batches.push_back(batch({t}, 4, begin, begin + 50));
    last = begin + 50;
  }
  step.end_us = last + 20;
  return step;
}

TEST(WhatIf, UnchangedReplayReproducesTheStep) {
  const WhatIfStep step = three_tensors(5000, {true, true, true});
  const WhatIfStepResult r = replay_step(step);
  EXPECT_DOUBLE_EQ(r.measured_us, 5385);  // last batch 5315-5365, then 20
  EXPECT_DOUBLE_EQ(r.replayed_us, r.measured_us);
}

TEST(WhatIf, RankLateForEveryTensorCostsItsDelay) {
  const WhatIfStepResult r = replay_step(three_tensors(5000, {true, true, true}));
  ASSERT_EQ(r.savings.size(), 1u);
  EXPECT_EQ(r.savings[0].rank, 2);
  EXPECT_DOUBLE_EQ(r.saving_of(2), 5000);
  EXPECT_DOUBLE_EQ(r.saving_of(0), 0);
  // The median of {t, t, t, t + 5000} is t: nobody late saves the same.
  EXPECT_DOUBLE_EQ(r.nobody_late_saving_us, 5000);
}

TEST(WhatIf, StepsWithoutLatenessSaveNothing) {
  const WhatIfStepResult r = replay_step(three_tensors(5000, {false, false, false}));
  EXPECT_TRUE(r.savings.empty());
  EXPECT_DOUBLE_EQ(r.nobody_late_saving_us, 0);
  EXPECT_DOUBLE_EQ(r.replayed_us, r.measured_us);
}

TEST(WhatIf, LatenessInsideTheStepCountsOnlyWhatDelaysTheEnd) {
  // Rank 2 late for the first tensor only: its batch runs 5115-5165 instead of 115-165, and the
  // other two wait for the lane (ending 5215, 5265); on time all three end by 365.
  EXPECT_DOUBLE_EQ(replay_step(three_tensors(5000, {true, false, false})).saving_of(2), 4900);
  // ... while late for the last tensor only by 30 µs, the step ends 30 µs later than it could.
  const WhatIfStep step = three_tensors(30, {false, false, true});
  EXPECT_DOUBLE_EQ(replay_step(step).saving_of(2), 30);
  EXPECT_DOUBLE_EQ(replay_step(step).replayed_us, replay_step(step).measured_us);
}

TEST(WhatIf, LatenessHiddenBehindABusyLaneCostsNothingOrPart) {
  // Tensor a: ready at 0, ends 10, runs 15-3015 on both lanes. Tensor b: rank 1 late.
  auto step_with = [](double b_late) {
    WhatIfStep step;
    step.negotiations.push_back(negotiation({0, 0}, 10));
    step.negotiations.push_back(negotiation({100, b_late}, b_late + 10));
    step.batches.push_back(batch({0}, 2, 15, 3015));
    const double begin = std::max(3015.0, b_late + 15);
    step.batches.push_back(batch({1}, 2, begin, begin + 100));
    step.end_us = begin + 100;
    return step;
  };
  // Ready at 1100: b's batch waits for the lane anyway.
  EXPECT_DOUBLE_EQ(replay_step(step_with(1100)).saving_of(1), 0);
  // Ready at 4100: b runs 4115-4215; on time, right when the lane is free, at 3015.
  const WhatIfStepResult r = replay_step(step_with(4100));
  EXPECT_DOUBLE_EQ(r.saving_of(1), 4215 - 3115);
  EXPECT_DOUBLE_EQ(r.replayed_us, r.measured_us);
}

TEST(WhatIf, FusedBatchWaitsForItsLastTensor) {
  // x: rank 1 late (1000), y on time at 500; fused, the batch starts 5 µs after x's end. On time,
  // it would wait for y (done 510): 500 saved, not 1000.
  WhatIfStep step;
  step.negotiations.push_back(negotiation({0, 1000}, 1010));
  step.negotiations.push_back(negotiation({500, 500}, 510));
  step.batches.push_back(batch({0, 1}, 2, 1015, 1115));
  step.end_us = 1115;
  const WhatIfStepResult r = replay_step(step);
  EXPECT_DOUBLE_EQ(r.saving_of(1), 500);
  EXPECT_DOUBLE_EQ(r.nobody_late_saving_us, 500);  // x at its median, 500: done at 510 again
}

TEST(WhatIf, TiedLastRanksEachSaveNothingAlone) {
  // Ranks 2 and 3 both 1000 late: without either one the other is still last. Nobody late puts
  // everyone at the median of {0, 0, 1000, 1000}, 500.
  WhatIfStep step;
  step.negotiations.push_back(negotiation({0, 0, 1000, 1000}, 1010));
  step.batches.push_back(batch({0}, 4, 1015, 1065));
  step.end_us = 1065;
  const WhatIfStepResult r = replay_step(step);
  EXPECT_TRUE(r.savings.empty());
  EXPECT_DOUBLE_EQ(r.nobody_late_saving_us, 500);
}

TEST(WhatIf, RankLateInSomeStepsOnly) {
  double total = 0;
  for (int s = 0; s < 5; ++s) {
    const bool late = s == 1 || s == 3;
    total += replay_step(three_tensors(2000, {late, late, late})).saving_of(2);
  }
  EXPECT_DOUBLE_EQ(total, 2 * 2000);
}

TEST(WhatIf, LaneBusyWithTheStepBeforeLimitsTheSaving) {
  // Overlapping steps: lane 0 runs the previous step's last batch until 2000 (lane 1 until
  // 1000); this step's batch starts 5 µs after the later of that and its negotiation.
  WhatIfStep step;
  step.negotiations.push_back(negotiation({0, 1500}, 1510));
  WhatIfBatch b;
  b.negotiations = {0};
  b.runs = {{0, 2005, 2105}, {1, 1515, 1615}};
  step.batches.push_back(b);
  step.lanes_busy_until = {{0, 2000}, {1, 1000}};
  step.end_us = 2105;
  // On time, lane 1 would run at 1005-1105 but lane 0 still ends at 2105.
  EXPECT_DOUBLE_EQ(replay_step(step).saving_of(1), 0);
  step.lanes_busy_until = {{0, 1000}, {1, 1000}};
  step.batches[0].runs[0] = {0, 1515, 1615};
  step.end_us = 1615;
  // Both lanes: negotiation done at 10, + 5, but the lanes are free only at 1000: 1000-1100.
  EXPECT_DOUBLE_EQ(replay_step(step).saving_of(1), 515);
}

TEST(WhatIf, LanesNotRecordedCompleteAtTheNegotiation) {
  WhatIfStep step;
  step.negotiations.push_back(negotiation({0, 700}, 710));
  step.batches.push_back(WhatIfBatch{{0}, {}});
  step.end_us = 800;
  const WhatIfStepResult r = replay_step(step);
  EXPECT_DOUBLE_EQ(r.replayed_us, 800);
  EXPECT_DOUBLE_EQ(r.saving_of(1), 700);
}

TEST(WhatIf, RunBeforeItsNegotiationEndsShowsAsReplayError) {
  // Lane 1's clock puts its run 3 µs before the negotiation's end: replayed from that end.
  WhatIfStep step;
  step.negotiations.push_back(negotiation({0, 0}, 100));
  WhatIfBatch b;
  b.negotiations = {0};
  b.runs = {{0, 105, 205}, {1, 97, 297}};
  step.batches.push_back(b);
  step.end_us = 300;
  EXPECT_DOUBLE_EQ(replay_step(step).replayed_us, 303);
}

TEST(WhatIf, MedianOf) {
  EXPECT_DOUBLE_EQ(median_of({}), 0);
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
}

}  // namespace
}  // namespace ranktime::timeline
