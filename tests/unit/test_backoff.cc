// Backoff (core/backoff.h): no sleep during the spin, then sleeps doubling from 4 us to the cap,
// and the spin again after restart().
#include "core/backoff.h"

#include <gtest/gtest.h>

namespace ranktime {
namespace {

using std::chrono::microseconds;

TEST(Backoff, SpinsThenDoublesUpToTheCap) {
  const Backoff::TimePoint t0{};
  Backoff backoff(microseconds(30), t0);
  EXPECT_EQ(backoff.next(t0, microseconds(200)).count(), 0);
  EXPECT_EQ(backoff.next(t0 + microseconds(29), microseconds(200)).count(), 0);
  const Backoff::TimePoint late = t0 + microseconds(30);
  for (int us : {4, 8, 16, 32, 64, 128, 200, 200}) {
    EXPECT_EQ(backoff.next(late, microseconds(200)), microseconds(us));
  }
  // A smaller cap (an idle wait's may be larger) takes effect at once.
  EXPECT_EQ(backoff.next(late, microseconds(50)), microseconds(50));
}

TEST(Backoff, RestartSpinsAgainAndStartsFromTheFirstSleep) {
  const Backoff::TimePoint t0{};
  Backoff backoff(microseconds(30), t0);
  const Backoff::TimePoint t1 = t0 + microseconds(100);
  EXPECT_EQ(backoff.next(t1, microseconds(200)), Backoff::kFirstSleep);
  EXPECT_EQ(backoff.next(t1, microseconds(200)), 2 * Backoff::kFirstSleep);
  backoff.restart(t1);
  EXPECT_EQ(backoff.next(t1 + microseconds(10), microseconds(200)).count(), 0);
  EXPECT_EQ(backoff.next(t1 + microseconds(30), microseconds(200)), Backoff::kFirstSleep);
}

TEST(Backoff, NoSpinSleepsAtOnce) {
  const Backoff::TimePoint t0{};
  Backoff backoff(microseconds(0), t0);
  EXPECT_EQ(backoff.next(t0, Backoff::kBusyCap), Backoff::kFirstSleep);
}

}  // namespace
}  // namespace ranktime
