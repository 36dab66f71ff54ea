// Tests for the response cache: rank 0's side through the Coordinator (hits, misses, invalidation
// on each field with today's error messages, capacity eviction, a rank sending in full while others
// hit, unknown and stale ids) and a worker's WorkerCache.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "negotiation/coordinator.h"
#include "negotiation/response_cache.h"
#include "negotiation_requests.h"
#include "ranktime/timeline/string_table.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using ::testing::HasSubstr;

using test::kNoFusion;
constexpr int kRanks = 3;

Request request(const std::string& name, OpType op = OpType::kAllreduce) {
  return test::make_request(name, op, {4, 2});
}

class ResponseCacheTest : public ::testing::Test {
 protected:
  // Every rank sends `q` in full; returns the single response.
  Response negotiate_in_full(Coordinator& c, const Request& q) {
    for (int r = 0; r < kRanks; ++r) {
      Request mine = q;
      mine.ready_ns = 100 + r;
      c.add(r, mine);
    }
    return take_one(c);
  }
  Response take_one(Coordinator& c) {
    negotiations_.clear();
    std::vector<Response> out = c.take_ready(kNoFusion, &negotiations_);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(negotiations_.size(), 1u);
    return out.empty() ? Response{} : out[0];
  }

  timeline::StringTable strings_;
  StringTableIds ids_{&strings_};
  std::vector<Negotiation> negotiations_;
};

TEST_F(ResponseCacheTest, AFirstNegotiationGivesAnIdLaterOnesHitItWithEveryReadyTime) {
  Coordinator c(kRanks, &ids_, 16);
  const Request q = request("grad");
  const Response first = negotiate_in_full(c, q);
  ASSERT_EQ(first.cache_ids.size(), 1u);
  const uint32_t id = first.cache_ids[0];
  ASSERT_NE(id, 0u);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(c.cached_id(q), id);
    EXPECT_EQ(c.add_cached(2, id, 30 + step, 0), "");
    EXPECT_EQ(c.add_cached(0, id, 10 + step, 0), "");
    EXPECT_TRUE(c.take_ready(kNoFusion, &negotiations_).empty());
    EXPECT_EQ(c.pending(), 1u);
    EXPECT_EQ(c.add_cached(1, id, 20 + step, 0), "");
    const Response s = take_one(c);
    EXPECT_EQ(s.names, std::vector<std::string>{"grad"});
    EXPECT_EQ(s.tensor_ids, std::vector<uint32_t>{strings_.intern("grad")});
    EXPECT_EQ(s.cache_ids, std::vector<uint32_t>{id});
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(negotiations_[0].ready_ns, (std::vector<int64_t>{10 + step, 20 + step, 30 + step}));
    EXPECT_EQ(c.pending(), 0u);
  }
}

TEST_F(ResponseCacheTest, CapacityZeroCachesNothing) {
  Coordinator c(kRanks, &ids_, 0);
  const Request q = request("grad");
  EXPECT_TRUE(negotiate_in_full(c, q).cache_ids.empty());
  EXPECT_EQ(c.cached_id(q), 0u);
  EXPECT_THAT(c.add_cached(1, 1 << 20 | 1, 5, 0), HasSubstr("rank 1"));
}

TEST_F(ResponseCacheTest, UncacheableRequestsAreNotCached) {
  Coordinator c(kRanks, &ids_, 16);
  Request gather = request("gathered", OpType::kAllgather);
  EXPECT_EQ(negotiate_in_full(c, gather).cache_ids, std::vector<uint32_t>{0});
  EXPECT_EQ(c.cached_id(gather), 0u);
  EXPECT_FALSE(cacheable(gather));
  Request failed = request("local");
  failed.error = "null data pointer";
  EXPECT_FALSE(cacheable(failed));
}

// A request that differs in one field is a miss on the worker (WorkerCache) and on rank 0
// (cached_id); sent in full next to the others' cached ids, it is validated in full and fails
// with exactly the message of a negotiation without the cache. The entry is gone afterwards.
TEST_F(ResponseCacheTest, AChangeInAnyFieldIsValidatedInFullWithTodaysMessage) {
  struct Change {
    const char* field;
    OpType op;
    std::function<void(Request*)> apply;
  };
  const Change changes[] = {
      {"operation", OpType::kAllreduce, [](Request* q) { q->op = OpType::kBroadcast; }},
      {"dtype", OpType::kAllreduce, [](Request* q) { q->dtype = DataType::kFloat64; }},
      {"shape", OpType::kAllreduce,
       [](Request* q) {
         q->shape = {4, 3};
       }},
      {"device", OpType::kAllreduce, [](Request* q) { q->device = 0; }},
      {"reduction", OpType::kAllreduce, [](Request* q) { q->reduce_op = ReduceOp::kMax; }},
      {"root rank", OpType::kBroadcast, [](Request* q) { q->root = 2; }},
  };
  for (const Change& change : changes) {
    SCOPED_TRACE(change.field);
    const Request q = request("w", change.op);
    Request changed = q;
    change.apply(&changed);

    // Today's message: every rank in full, no cache.
    Coordinator plain(kRanks, &ids_, 0);
    plain.add(0, q);
    plain.add(1, changed);
    plain.add(2, q);
    const std::string want = take_one(plain).error;
    ASSERT_THAT(want, HasSubstr(std::string(change.field) + " differs between ranks"));

    Coordinator c(kRanks, &ids_, 16);
    const uint32_t id = negotiate_in_full(c, q).cache_ids.at(0);
    WorkerCache worker;
    worker.learn(q, id);
    EXPECT_EQ(worker.id_for(q), id);
    EXPECT_EQ(worker.id_for(changed), 0u);
    EXPECT_EQ(c.cached_id(changed), 0u);

    EXPECT_EQ(c.add_cached(0, id, 1, 0), "");
    c.add(1, changed);
    EXPECT_EQ(c.add_cached(2, id, 3, 0), "");
    const Response s = take_one(c);
    EXPECT_EQ(s.error, want);
    EXPECT_EQ(s.cache_ids, std::vector<uint32_t>{0});
    EXPECT_EQ(c.cached_id(q), 0u);
    EXPECT_THAT(c.add_cached(2, id, 4, 0), HasSubstr("rank 2 sent response cache id"));
  }
}

TEST_F(ResponseCacheTest, ARankSendingInFullWhileOthersHitKeepsTheEntry) {
  Coordinator c(kRanks, &ids_, 16);
  const Request q = request("grad");
  const uint32_t id = negotiate_in_full(c, q).cache_ids.at(0);
  EXPECT_EQ(c.add_cached(0, id, 1, 0), "");
  Request full = q;
  full.ready_ns = 2;
  c.add(1, full);  // e.g. its cache never learned the id
  EXPECT_EQ(c.add_cached(2, id, 3, 0), "");
  const Response s = take_one(c);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.cache_ids, std::vector<uint32_t>{id});
  EXPECT_EQ(negotiations_[0].ready_ns, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.cached_id(q), id);
}

TEST_F(ResponseCacheTest, ACachedDuplicateIsTheSameErrorAsAFullOne) {
  Coordinator c(kRanks, &ids_, 16);
  const uint32_t id = negotiate_in_full(c, request("grad")).cache_ids.at(0);
  EXPECT_EQ(c.add_cached(1, id, 1, 0), "");
  EXPECT_EQ(c.add_cached(1, id, 2, 0), "");
  EXPECT_EQ(c.add_cached(0, id, 3, 0), "");
  EXPECT_EQ(c.add_cached(2, id, 4, 0), "");
  const Response s = take_one(c);
  EXPECT_EQ(s.error, "tensor 'grad': rank 1 submitted it twice while in flight");
  EXPECT_EQ(s.cache_ids, std::vector<uint32_t>{0});
}

TEST_F(ResponseCacheTest, CapacityEvictsTheLeastRecentlyUsedAndAStaleIdIsAnErrorNamingTheRank) {
  Coordinator c(kRanks, &ids_, 2);
  const uint32_t a = negotiate_in_full(c, request("a")).cache_ids.at(0);
  const uint32_t b = negotiate_in_full(c, request("b")).cache_ids.at(0);
  EXPECT_TRUE(c.take_evicted().empty());
  // Use a again: b becomes the least recently used.
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(c.add_cached(r, a, r, 0), "");
  take_one(c);
  const uint32_t cc = negotiate_in_full(c, request("c")).cache_ids.at(0);
  EXPECT_NE(cc, 0u);
  EXPECT_EQ(c.take_evicted(), std::vector<uint32_t>{b});
  EXPECT_EQ(c.cached_id(request("b")), 0u);
  EXPECT_EQ(c.cached_id(request("a")), a);
  EXPECT_NE(cc, b);  // the slot is reused under another id

  // Sent before the rank applied the eviction: still negotiated, in full.
  EXPECT_EQ(c.add_cached(1, b, 7, 0), "");
  // Sent after it had: an error naming the rank and the id; nothing pending for it.
  const std::string stale = c.add_cached(2, b, 8, 1);
  EXPECT_THAT(stale, HasSubstr("rank 2 sent response cache id " + std::to_string(b)));
  EXPECT_EQ(c.pending(), 1u);
  c.add(0, request("b"));
  c.add(2, request("b"));
  const Response s = take_one(c);
  EXPECT_EQ(s.names, std::vector<std::string>{"b"});
  EXPECT_EQ(s.error, "");
}

TEST_F(ResponseCacheTest, AnUnknownIdIsAnErrorNamingTheRankNeverAnotherTensor) {
  Coordinator c(kRanks, &ids_, 16);
  const uint32_t id = negotiate_in_full(c, request("grad")).cache_ids.at(0);
  for (uint32_t bad : {0u, id + 1, id ^ 0xfff00000u, 0xffffffffu}) {
    EXPECT_THAT(c.add_cached(1, bad, 5, 0),
                HasSubstr("rank 1 sent response cache id " + std::to_string(bad) +
                          ", which rank 0 does not know"));
  }
  EXPECT_EQ(c.pending(), 0u);
}

TEST(WorkerCache, SplitsHitsIntoPairsAndForgetsWhatRankZeroDrops) {
  WorkerCache cache;
  Request a = request("a"), b = request("b"), c = request("c");
  cache.learn(a, 11);
  cache.learn(b, 12);
  cache.learn(c, 0);  // not cached
  a.ready_ns = 5;
  b.ready_ns = 6;
  b.shape = {9};  // changed: in full
  std::vector<Request> requests{a, b, c};
  WorkerMessage m;
  cache.split(&requests, &m);
  EXPECT_EQ(m.cached_ids, std::vector<uint32_t>{11});
  EXPECT_EQ(m.cached_ready_ns, std::vector<int64_t>{5});
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].name, "b");
  EXPECT_EQ(requests[1].name, "c");

  cache.evict({11, 99});
  EXPECT_EQ(cache.id_for(a), 0u);
  EXPECT_EQ(cache.evictions_seen(), 2u);
  cache.learn(request("b"), 0);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace ranktime
