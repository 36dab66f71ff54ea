// Tests for Rank0Cache's own contract, without a Coordinator: when a slot is complete, duplicates
// and joined ranks, least-recently-used eviction that spares negotiations under way, ids of a
// reused slot, evicted requests kept until every rank knew, and a tensor moved to the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "negotiation/rank0_cache.h"
#include "negotiation_requests.h"

namespace ranktime::rank0_cache_test {  // its own, beside test_response_cache.cc in one binary
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kRanks = 3;

Request request(const std::string& name) {
  return test::make_request(name, OpType::kAllreduce, {4, 2});
}

class Rank0CacheTest : public ::testing::Test {
 protected:
  // Every rank sends `id`; returns what the last add() said.
  int32_t send_all(Rank0Cache& cache, uint32_t id) {
    int32_t last = Rank0Cache::kRecorded;
    for (int r = 0; r < kRanks; ++r) last = cache.add(r, id, 100 + r, joined_);
    return last;
  }
  // Takes `slot`'s negotiation and its ready times.
  std::vector<int64_t> take(Rank0Cache& cache, size_t slot) {
    std::string duplicate;
    EXPECT_TRUE(cache.take(slot, &duplicate));
    EXPECT_EQ(duplicate, "");
    std::vector<int64_t> ready(kRanks, 0);
    cache.take_rows({slot}, [&](size_t, int r, int64_t t) { ready[r] = t; });
    return ready;
  }

  JoinedRanks joined_{kRanks};
};

TEST_F(Rank0CacheTest, ASlotIsCompleteWhenEveryRankNeededSentItOnceAndItsTimesComeBack) {
  Rank0Cache cache(kRanks, 4);
  const uint32_t id = cache.cache(request("a"), 7, 32, kRanks);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(cache.id_for(request("a")), id);
  EXPECT_EQ(cache.add(0, id, 100, joined_), Rank0Cache::kRecorded);
  EXPECT_EQ(cache.add(2, id, 102, joined_), Rank0Cache::kRecorded);
  EXPECT_EQ(cache.pending(), 1u);
  const int32_t slot = cache.add(1, id, 101, joined_);
  ASSERT_GE(slot, 0);
  EXPECT_EQ(cache.slot(slot).tensor_id, 7u);
  EXPECT_EQ(cache.slot(slot).bytes, 32);
  EXPECT_THAT(take(cache, slot), ElementsAre(100, 101, 102));
  EXPECT_EQ(cache.pending(), 0u);
  EXPECT_FALSE(cache.sent(0, slot));  // the next step starts empty
  // A second negotiation of the same id.
  EXPECT_EQ(send_all(cache, id), slot);
}

TEST_F(Rank0CacheTest, ARankSendingAnIdTwiceIsTheTensorsErrorNamingTheRank) {
  Rank0Cache cache(kRanks, 4);
  const uint32_t id = cache.cache(request("a"), 1, 32, kRanks);
  cache.add(1, id, 100, joined_);
  EXPECT_EQ(cache.add(1, id, 105, joined_), Rank0Cache::kRecorded);
  cache.add(0, id, 100, joined_);
  const int32_t slot = cache.add(2, id, 100, joined_);
  ASSERT_GE(slot, 0);
  std::string duplicate;
  ASSERT_TRUE(cache.take(slot, &duplicate));
  EXPECT_THAT(duplicate, HasSubstr("tensor 'a': rank 1 submitted it twice"));
}

TEST_F(Rank0CacheTest, JoinedRanksCompleteAnAllreduceTheOthersSent) {
  Rank0Cache cache(kRanks, 4);
  const uint32_t id = cache.cache(request("a"), 1, 32, kRanks);
  EXPECT_EQ(cache.add(0, id, 100, joined_), Rank0Cache::kRecorded);
  EXPECT_EQ(cache.add(1, id, 100, joined_), Rank0Cache::kRecorded);
  ASSERT_TRUE(joined_.add(2));
  const std::vector<int32_t> done = cache.complete_with_joined(joined_);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(cache.sent(1, done[0]));
  EXPECT_FALSE(cache.sent(2, done[0]));
  EXPECT_TRUE(cache.complete_with_joined(joined_).empty());  // queued once
}

TEST_F(Rank0CacheTest, EvictionTakesTheLeastRecentlyUsedSlotNobodyIsNegotiating) {
  Rank0Cache cache(kRanks, 2);
  const uint32_t a = cache.cache(request("a"), 1, 32, kRanks);
  const uint32_t b = cache.cache(request("b"), 2, 32, kRanks);
  ASSERT_NE(a, b);
  cache.add(0, a, 100, joined_);  // a is older, but under way
  const uint32_t c = cache.cache(request("c"), 3, 32, kRanks);
  ASSERT_NE(c, 0u);
  EXPECT_THAT(cache.take_evicted(), ElementsAre(b));
  EXPECT_TRUE(cache.take_evicted().empty());
  EXPECT_TRUE(cache.knows(a));
  EXPECT_FALSE(cache.knows(b));
  EXPECT_EQ(cache.id_for(request("b")), 0u);
  // Both slots under way: nothing can be evicted, so "d" goes uncached.
  cache.add(0, c, 100, joined_);
  EXPECT_EQ(cache.cache(request("d"), 4, 32, kRanks), 0u);
  EXPECT_TRUE(cache.take_evicted().empty());
}

TEST_F(Rank0CacheTest, AReusedSlotGivesANewIdAndTheOldOneNamesNoTensor) {
  Rank0Cache cache(kRanks, 1);
  const uint32_t a = cache.cache(request("a"), 1, 32, kRanks);
  cache.uncache("a");
  EXPECT_FALSE(cache.knows(a));
  const uint32_t b = cache.cache(request("b"), 2, 32, kRanks);
  ASSERT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.add(0, a, 100, joined_), Rank0Cache::kNotFast);
  EXPECT_EQ(cache.request_of(a, 0), nullptr);  // uncached, not evicted: nobody may send it
  EXPECT_FALSE(cache.sent(0, 0));              // nor did it touch b's slot
}

TEST_F(Rank0CacheTest, AnEvictedRequestIsKeptUntilEveryOtherRankSawTheEviction) {
  Rank0Cache cache(kRanks, 1);
  const uint32_t a = cache.cache(request("a"), 1, 32, kRanks);
  ASSERT_NE(cache.cache(request("b"), 2, 32, kRanks), 0u);  // evicts a: eviction 1
  EXPECT_EQ(cache.add(1, a, 100, joined_), Rank0Cache::kNotFast);
  const Request* kept = cache.request_of(a, 0);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->name, "a");
  EXPECT_EQ(cache.request_of(a, 1), nullptr);  // a rank that knew may not send it
  cache.saw_evictions(1, 1);
  cache.retire_seen();
  EXPECT_NE(cache.request_of(a, 0), nullptr);  // rank 2 has not seen it yet
  cache.saw_evictions(2, 1);
  cache.retire_seen();
  EXPECT_EQ(cache.request_of(a, 0), nullptr);
}

TEST_F(Rank0CacheTest, AFullRequestMovesTheNegotiationUnderWayToTheTable) {
  Rank0Cache cache(kRanks, 4);
  const uint32_t id = cache.cache(request("a"), 1, 32, kRanks);
  cache.add(0, id, 100, joined_);
  cache.add(2, id, 102, joined_);
  cache.add(2, id, 103, joined_);
  const std::optional<Rank0Cache::Unfinished> moved = cache.move_to_table("a");
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(moved->request.name, "a");
  EXPECT_THAT(moved->ranks, ElementsAre(0, 2));
  EXPECT_THAT(moved->ready_ns, ElementsAre(100, 102));
  EXPECT_THAT(moved->duplicate_error, HasSubstr("rank 2"));
  EXPECT_EQ(cache.pending(), 0u);
  EXPECT_FALSE(cache.move_to_table("a").has_value());  // once
  // Until it is cached again, its id joins the table's negotiation.
  EXPECT_EQ(cache.add(1, id, 101, joined_), Rank0Cache::kNotFast);
  ASSERT_NE(cache.request_of(id, 0), nullptr);
  EXPECT_EQ(cache.cache(request("a"), 1, 32, kRanks), id);
  EXPECT_EQ(cache.add(1, id, 101, joined_), Rank0Cache::kRecorded);
}

TEST_F(Rank0CacheTest, ARemovedSetsSlotsAreRetiredWithTheirNegotiationsUnderWay) {
  Rank0Cache cache(kRanks, 4);
  Request in_set = request("s");
  in_set.process_set = 1;
  const uint32_t s = cache.cache(in_set, 1, 32, 2);
  const uint32_t g = cache.cache(request("g"), 2, 32, kRanks);
  cache.add(0, s, 100, joined_);
  const std::vector<Rank0Cache::Unfinished> cut = cache.forget_set(1);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].request.name, "s");
  EXPECT_THAT(cut[0].ranks, ElementsAre(0));
  EXPECT_FALSE(cache.knows(s));
  EXPECT_TRUE(cache.knows(g));
  EXPECT_THAT(cache.take_evicted(), ElementsAre(s));
  EXPECT_NE(cache.request_of(s, 0), nullptr);  // a member may still send it
  EXPECT_EQ(cache.pending(), 0u);
}

}  // namespace
}  // namespace ranktime::rank0_cache_test
