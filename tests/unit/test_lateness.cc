// LatenessTracker: per-rank lag statistics and straggler detection over a sliding window.
#include <gtest/gtest.h>

#include "inspection/lateness.h"

namespace ranktime {
namespace {

TEST(Lateness, CountsLastRankAndLags) {
  LatenessTracker t(3, 10);
  t.add({1000, 21000, 2000});  // rank 1 is 20 us late
  t.add({5000, 4000, 4500});   // rank 0 is last, 1 us behind rank 1
  auto s = t.snapshot();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].times_last, 1u);
  EXPECT_EQ(s[0].times_last, 1u);
  EXPECT_EQ(s[2].times_last, 0u);
  EXPECT_EQ(s[1].negotiations, 2u);
  EXPECT_DOUBLE_EQ(s[1].max_lag_us, 20.0);
  EXPECT_DOUBLE_EQ(s[0].max_lag_us, 1.0);
  EXPECT_DOUBLE_EQ(s[1].mean_lag_us, 10.0);  // (20 + 0) / 2
}

TEST(Lateness, WindowForgetsOldNegotiations) {
  LatenessTracker t(2, 4);
  for (int i = 0; i < 4; ++i) t.add({0, 50'000});  // rank 1 late by 50 us
  for (int i = 0; i < 4; ++i) t.add({10'000, 0});  // now rank 0 late by 10 us
  auto s = t.snapshot();
  EXPECT_EQ(s[1].times_last, 4u);         // totals since start keep history
  EXPECT_EQ(s[1].window_times_last, 0u);  // the window does not
  EXPECT_EQ(s[0].window_times_last, 4u);
  EXPECT_DOUBLE_EQ(s[0].median_lag_us, 10.0);
  EXPECT_DOUBLE_EQ(s[1].max_lag_us, 0.0);
}

TEST(Lateness, StragglerNeedsShareThresholdAndHalfAWindow) {
  // Ready times in ns; thresholds in us. Rank 2 is 30 ms late.
  LatenessTracker t(4, 20);
  for (int i = 0; i < 9; ++i) t.add({0, 0, 30'000'000, 100'000});
  EXPECT_FALSE(t.straggler(5000, 0.5)) << "window less than half full";
  t.add({0, 0, 30'000'000, 100'000});
  ASSERT_TRUE(t.straggler(5000, 0.5));
  EXPECT_EQ(*t.straggler(5000, 0.5), 2);
  EXPECT_FALSE(t.straggler(40'000, 0.5)) << "median lag below threshold";
  for (int i = 0; i < 10; ++i) t.add({0, 0, 100'000, 30'000'000});  // rank 3 last half the time
  EXPECT_FALSE(t.straggler(5000, 0.6));
  EXPECT_EQ(t.straggler(5000, 0.5).value_or(-1), 2) << "ties go to the lower rank";
}

TEST(Lateness, ARankIsNeverLateForASetItIsNotIn) {
  LatenessTracker t(4, 10);
  t.add({0, 0, 0, 0});
  t.add({100'000, 0}, {1, 3});  // process set {1,3}: rank 1 last, 100 us behind rank 3
  auto s = t.snapshot();
  EXPECT_EQ(s[1].negotiations, 2u);
  EXPECT_EQ(s[0].negotiations, 1u);
  EXPECT_EQ(s[2].negotiations, 1u);
  EXPECT_EQ(s[1].times_last, 1u);
  EXPECT_DOUBLE_EQ(s[1].max_lag_us, 100.0);
  EXPECT_DOUBLE_EQ(s[0].max_lag_us, 0.0);
  EXPECT_EQ(s[3].window, 2u);
}

TEST(Lateness, JoinedRanksAreLeftOut) {
  LatenessTracker t(3, 10);
  // Ranks 0 and 2 asked; rank 1 had joined (its time is the first rank's): not counted.
  t.add({5'000, 1'000, 1'000}, {0, 2, 1}, 1);
  auto s = t.snapshot();
  EXPECT_EQ(s[1].negotiations, 0u);
  EXPECT_EQ(s[0].times_last, 1u);
  EXPECT_DOUBLE_EQ(s[0].max_lag_us, 4.0);
  EXPECT_EQ(s[2].times_last, 0u);
}

TEST(Lateness, AStragglerNeedsHalfOfItsOwnWindow) {
  LatenessTracker t(3, 10);
  for (int i = 0; i < 4; ++i) t.add({0, 0, 9'000'000});
  for (int i = 0; i < 20; ++i) t.add({0, 0}, {0, 1});  // set {0,1}: rank 2 is not in it
  EXPECT_EQ(t.straggler(1000, 0.5), std::nullopt) << "rank 2's window has 4 of 10";
  t.add({0, 0, 9'000'000});
  EXPECT_EQ(t.straggler(1000, 0.5).value_or(-1), 2);
}

}  // namespace
}  // namespace ranktime
