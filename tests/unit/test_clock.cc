// Tests for OffsetEstimator and ClockSample (clock.h) on synthetic NTP-style exchanges with a known
// offset and chosen one-way delays.
#include "core/clock.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ranktime {
namespace {

// One exchange when the rank's clock reads rank 0's plus `offset`: rank 0 sends at `t0`, the
// message takes `out` ns to arrive, the rank replies `hold` ns later, and the reply takes `back`
// ns.
ClockSample exchange(int64_t offset, int64_t t0, int64_t out, int64_t hold, int64_t back) {
  ClockSample s;
  s.t0 = t0;
  s.t1 = t0 + out + offset;
  s.t2 = s.t1 + hold;
  s.t3 = t0 + out + hold + back;
  return s;
}

TEST(ClockSample, SymmetricDelaysGiveTheExactOffset) {
  ClockSample s = exchange(-5'000, 1'000'000, 700, 50, 700);
  EXPECT_EQ(s.round_trip_ns(), 1'400);
  EXPECT_DOUBLE_EQ(s.offset_ns(), -5'000.0);
}

TEST(ClockSample, AsymmetricDelaysErrByHalfTheDifference) {
  ClockSample s = exchange(5'000, 1'000'000, 900, 10'000, 100);
  EXPECT_EQ(s.round_trip_ns(), 1'000);  // the rank's hold time is not part of the round trip
  EXPECT_DOUBLE_EQ(s.offset_ns(), 5'000.0 + (900 - 100) / 2.0);
}

TEST(OffsetEstimator, NoEstimateBeforeTheFirstSample) {
  OffsetEstimator e;
  EXPECT_FALSE(e.has_estimate());
  EXPECT_EQ(e.to_rank0(1234), 1234);
}

TEST(OffsetEstimator, SmallestRoundTripWins) {
  const int64_t offset = 250'000;
  OffsetEstimator e;
  EXPECT_TRUE(e.add(exchange(offset, 1'000'000, 9'000, 100, 1'000)));
  EXPECT_TRUE(e.add(exchange(offset, 2'000'000, 300, 100, 500)));  // round trip 800: the best
  EXPECT_TRUE(e.add(exchange(offset, 3'000'000, 100, 100, 5'000)));
  ASSERT_TRUE(e.has_estimate());
  EXPECT_DOUBLE_EQ(e.offset_ns(), offset + (300 - 500) / 2.0);
  EXPECT_DOUBLE_EQ(e.uncertainty_ns(), 400.0);
  EXPECT_LE(std::abs(e.offset_ns() - offset), e.uncertainty_ns());
}

TEST(OffsetEstimator, ErrorIsWithinUncertaintyForRandomDelays) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> delay(0, 50'000), hold(0, 1'000'000);
  for (int64_t offset : {int64_t{0}, int64_t{123'456'789}, int64_t{-987'654'321}}) {
    OffsetEstimator e(16);
    int64_t t0 = 1'700'000'000'000'000'000;  // realistic epoch-scale timestamps
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(e.add(exchange(offset, t0, delay(rng), hold(rng), delay(rng))));
      EXPECT_LE(std::abs(e.offset_ns() - static_cast<double>(offset)), e.uncertainty_ns())
          << "offset " << offset << " sample " << i;
      t0 += 1'000'000;
    }
  }
}

TEST(OffsetEstimator, MalformedSamplesAreRejected) {
  OffsetEstimator e;
  ClockSample negative_round_trip{0, 0, 1'000, 500};  // the rank held it longer than the trip
  EXPECT_LT(negative_round_trip.round_trip_ns(), 0);
  EXPECT_FALSE(e.add(negative_round_trip));
  EXPECT_FALSE(e.add({1'000, 5, 10, 500}));  // t3 before t0
  EXPECT_FALSE(e.add({0, 10, 5, 1'000}));    // t2 before t1
  EXPECT_FALSE(e.has_estimate());

  EXPECT_TRUE(e.add(exchange(42, 0, 10, 0, 10)));
  EXPECT_FALSE(e.add(negative_round_trip));
  EXPECT_DOUBLE_EQ(e.offset_ns(), 42.0);  // unchanged by the rejected sample
}

TEST(OffsetEstimator, ZeroRoundTripIsAccepted) {
  OffsetEstimator e;
  EXPECT_TRUE(e.add(exchange(-3, 100, 0, 7, 0)));
  EXPECT_DOUBLE_EQ(e.offset_ns(), -3.0);
  EXPECT_DOUBLE_EQ(e.uncertainty_ns(), 0.0);
}

TEST(OffsetEstimator, WindowForgetsTheOldBestSample) {
  OffsetEstimator e(4);
  e.add(exchange(1'000, 0, 10, 0, 10));  // round trip 20, offset exactly 1000
  // The clock drifts: newer samples see offset 2000 through slower links.
  for (int i = 1; i <= 3; ++i) {
    e.add(exchange(2'000, i * 1'000'000, 100 + i, 0, 100 + i));
    EXPECT_DOUBLE_EQ(e.offset_ns(), 1'000.0) << "the best sample is still in the window";
    EXPECT_DOUBLE_EQ(e.uncertainty_ns(), 10.0);
  }
  e.add(exchange(2'000, 4'000'000, 150, 0, 150));  // 4 newer samples: the old best slides out
  EXPECT_DOUBLE_EQ(e.offset_ns(), 2'000.0);
  EXPECT_DOUBLE_EQ(e.uncertainty_ns(), 101.0);  // best of the window: round trip 202
}

// The estimator keeps its best sample as samples come and go (it looks through the window only
// when the best leaves it): the same answer as the smallest round trip among the last `window`
// samples, the earliest on ties, for random delays with many ties.
TEST(OffsetEstimator, KeepsTheBestOfTheWindowAsSamplesComeAndGo) {
  constexpr size_t kWindow = 8;
  OffsetEstimator e(kWindow);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> delay(1, 6), offset(-50, 50);
  std::vector<ClockSample> all;
  for (int i = 0; i < 500; ++i) {
    all.push_back(exchange(offset(rng), 1'000'000 + i * 1'000, delay(rng), 3, delay(rng)));
    ASSERT_TRUE(e.add(all.back()));
    const size_t first = all.size() > kWindow ? all.size() - kWindow : 0;
    const ClockSample* best = &all[first];
    for (size_t k = first; k < all.size(); ++k) {
      if (all[k].round_trip_ns() < best->round_trip_ns()) best = &all[k];
    }
    ASSERT_DOUBLE_EQ(e.offset_ns(), best->offset_ns()) << "after sample " << i;
    ASSERT_DOUBLE_EQ(e.uncertainty_ns(), best->round_trip_ns() / 2.0) << "after sample " << i;
  }
}

TEST(OffsetEstimator, ToRank0SubtractsTheOffset) {
  OffsetEstimator ahead;
  ahead.add(exchange(5'000, 1'000'000, 200, 30, 200));
  EXPECT_EQ(ahead.to_rank0(1'005'000), 1'000'000);
  EXPECT_EQ(ahead.to_rank0(0), -5'000);

  OffsetEstimator behind;
  behind.add(exchange(-77'000, 1'000'000, 200, 30, 200));
  EXPECT_EQ(behind.to_rank0(1'000'000), 1'077'000);

  // A rank's timestamp of an event maps to rank 0's time of the same event.
  ClockSample s = exchange(123'456, 9'000'000, 400, 60, 400);
  OffsetEstimator e;
  e.add(s);
  EXPECT_EQ(e.to_rank0(s.t1), s.t0 + 400);
  EXPECT_EQ(e.to_rank0(s.t2), s.t3 - 400);
}

}  // namespace
}  // namespace ranktime
