// Liveness's verdicts on silent peers and how they read: the ranks named, their hosts, and a host
// whose every rank went silent named as one that cannot be reached.
#include "runtime/liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ranktime {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kS = 1'000'000'000;
const std::vector<std::string> kTwoHosts = {"h0", "h0", "h1", "h1"};
const std::vector<int64_t> kPids = {100, 101, 102, 103};

// A rank's Liveness with a 5 s timeout, and the time everyone was last heard from.
struct Peers {
  explicit Peers(int rank, int size = 4) : liveness(rank, size, 5.0, &clock) {
    start = clock.now_ns();
    for (int r = 0; r < size; ++r) liveness.heard(r, start);
  }
  Clock clock;
  Liveness liveness;
  int64_t start = 0;
};

TEST(Liveness, AHostCutNamesTheHostAndEveryRankOnItInOneMessage) {
  Peers p(0);
  p.liveness.heard(1, p.start + 5 * kS);
  p.liveness.heard(2, p.start + kS / 10);  // rank 2 last spoke a little after rank 3
  auto loss = p.liveness.check(p.start + 5 * kS + kS / 20, kTwoHosts, kPids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->first_rank, 2);
  EXPECT_EQ(loss->reason,
            "rank 2 (host h1, pid 102) has sent nothing for 5.0 s; rank 3 (host h1, pid 103) has "
            "sent nothing for 5.0 s (RANKTIME_PEER_TIMEOUT_S=5.0): host h1 (ranks 2, 3) cannot "
            "be reached, or every rank on it died or hangs");
  EXPECT_TRUE(p.liveness.lost(2) && p.liveness.lost(3) && !p.liveness.lost(1));
  EXPECT_FALSE(p.liveness.check(p.start + 6 * kS, kTwoHosts, kPids).has_value());
}

TEST(Liveness, ARankThatStillTalksIsNotLostWithItsHost) {
  Peers p(0);
  p.liveness.heard(1, p.start + 5 * kS);
  p.liveness.heard(2, p.start + 4 * kS);  // heard 1.1 s ago: alive
  auto loss = p.liveness.check(p.start + 5 * kS + kS / 10, kTwoHosts, kPids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->first_rank, 3);
  EXPECT_THAT(loss->reason, HasSubstr("rank 3 (host h1, pid 103) has sent nothing for 5.1 s"));
  EXPECT_THAT(loss->reason, Not(HasSubstr("rank 2")));
  EXPECT_THAT(loss->reason, EndsWith("(RANKTIME_PEER_TIMEOUT_S=5.0): it died or hangs"));
  // Rank 2 going silent later completes the host.
  auto later = p.liveness.check(p.start + 9 * kS + kS / 10, kTwoHosts, kPids);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->first_rank, 2);
  EXPECT_THAT(later->reason, EndsWith("host h1 (ranks 2, 3) cannot be reached, or every rank on "
                                      "it died or hangs"));
}

TEST(Liveness, OnRankZerosHostOnlyTheSilentRankIsLost) {
  Peers p(0);
  const std::vector<std::string> one_host(4, "vm");
  p.liveness.heard(2, p.start + 2 * kS);  // silent for over half the timeout, but not lost
  p.liveness.heard(3, p.start + 5 * kS);
  auto loss = p.liveness.check(p.start + 5 * kS + kS / 10, one_host, kPids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->reason,
            "rank 1 (host vm, pid 101) has sent nothing for 5.1 s (RANKTIME_PEER_TIMEOUT_S=5.0): "
            "it died or hangs");
  EXPECT_FALSE(p.liveness.lost(2));
}

TEST(Liveness, SeveralHostsLostTogetherAreAllNamed) {
  Peers p(0, 6);
  const std::vector<std::string> three_hosts = {"h0", "h0", "h1", "h1", "h2", "h2"};
  const std::vector<int64_t> pids = {1, 2, 3, 4, 5, 6};
  p.liveness.heard(1, p.start + 5 * kS);
  auto loss = p.liveness.check(p.start + 5 * kS + kS / 10, three_hosts, pids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_THAT(loss->reason, EndsWith("hosts h1 (ranks 2, 3), h2 (ranks 4, 5) cannot be reached, "
                                     "or every rank on them died or hangs"));
}

TEST(Liveness, AWorkerNamesRankZerosHost) {
  Peers on_h1(2);
  auto loss = on_h1.liveness.check(on_h1.start + 6 * kS, kTwoHosts, kPids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->first_rank, 0);
  EXPECT_EQ(loss->reason,
            "rank 0 (host h0, pid 100) has sent nothing for 6.0 s (RANKTIME_PEER_TIMEOUT_S=5.0): "
            "it died or hangs, or host h0 cannot be reached");
  // On rank 0's own host the network is not in question.
  Peers on_h0(1);
  loss = on_h0.liveness.check(on_h0.start + 6 * kS, kTwoHosts, kPids);
  ASSERT_TRUE(loss.has_value());
  EXPECT_THAT(loss->reason, EndsWith("): it died or hangs"));
}

}  // namespace
}  // namespace ranktime
