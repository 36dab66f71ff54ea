// Tests for Coordinator (coordinator.h): readiness across ranks, completion order, negotiation
// records, duplicate submissions, the stall inspector's view and drain().
#include "negotiation/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "negotiation_requests.h"
#include "ranktime/timeline/string_table.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

using test::kFusion;
using test::kNoFusion;
using test::names_of;

// An allreduce of `shape` ready at `ready_ns`.
Request ready_at(const std::string& name, int64_t ready_ns, std::vector<int64_t> shape = {4}) {
  return test::make_request(name, OpType::kAllreduce, std::move(shape), ready_ns);
}

class CoordinatorTest : public ::testing::Test {
 protected:
  timeline::StringTable strings_;
  StringTableIds ids_{&strings_};
  std::vector<Negotiation> negotiations_;
};

TEST_F(CoordinatorTest, ReadyOnlyWhenEveryRankHasAddedIt) {
  Coordinator c(3, &ids_);
  c.add(0, ready_at("grad", 10));
  c.add(2, ready_at("grad", 30));
  EXPECT_TRUE(c.take_ready(kFusion, &negotiations_).empty());
  EXPECT_TRUE(negotiations_.empty());
  EXPECT_EQ(c.pending(), 1u);

  c.add(1, ready_at("grad", 20));
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"grad"}));
  EXPECT_EQ(ready[0].tensor_ids, (std::vector<uint32_t>{strings_.intern("grad")}));
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_TRUE(c.take_ready(kFusion, &negotiations_).empty());
}

TEST_F(CoordinatorTest, SingleRankIsReadyAtOnce) {
  Coordinator c(1, &ids_);
  c.add(0, ready_at("solo", 5));
  EXPECT_EQ(names_of(c.take_ready(kNoFusion, &negotiations_)),
            (std::vector<std::vector<std::string>>{{"solo"}}));
}

TEST_F(CoordinatorTest, TakeReadyFollowsCompletionOrder) {
  Coordinator c(2, &ids_);
  c.add(0, ready_at("a", 1));
  c.add(0, ready_at("b", 2));
  c.add(0, ready_at("c", 3));
  c.add(1, ready_at("c", 4));  // completes first
  c.add(1, ready_at("a", 5));
  c.add(1, ready_at("b", 6));
  EXPECT_EQ(names_of(c.take_ready(kNoFusion, &negotiations_)),
            (std::vector<std::vector<std::string>>{{"c"}, {"a"}, {"b"}}));
  ASSERT_EQ(negotiations_.size(), 3u);
  EXPECT_EQ(negotiations_[0].tensor_id, strings_.intern("c"));
  EXPECT_EQ(negotiations_[1].tensor_id, strings_.intern("a"));
  EXPECT_EQ(negotiations_[2].tensor_id, strings_.intern("b"));
}

TEST_F(CoordinatorTest, CompatibleReadyTensorsAreFusedInCompletionOrder) {
  Coordinator c(2, &ids_);
  for (const char* name : {"a", "b", "c"}) c.add(0, ready_at(name, 1));
  for (const char* name : {"b", "c", "a"}) c.add(1, ready_at(name, 1));
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_EQ(ready[0].tensor_ids, (std::vector<uint32_t>{strings_.intern("b"), strings_.intern("c"),
                                                        strings_.intern("a")}));
  EXPECT_EQ(negotiations_.size(), 3u);  // one per tensor, fused or not
}

TEST_F(CoordinatorTest, FusionUsesTheTensorsByteSize) {
  Coordinator c(1, &ids_);
  c.add(0, ready_at("a", 1, {4, 4}));  // 64 bytes of float32
  c.add(0, ready_at("b", 1, {16}));    // 64 bytes
  c.add(0, ready_at("c", 1, {1}));     // 4 bytes: one over 128
  EXPECT_EQ(names_of(c.take_ready(FusionOptions{128, 0}, &negotiations_)),
            (std::vector<std::vector<std::string>>{{"a", "b"}, {"c"}}));
}

TEST_F(CoordinatorTest, NegotiationHasEachRanksReadyTimeInRankOrder) {
  Coordinator c(3, &ids_);
  Request q = ready_at("w", 300);
  q.op = OpType::kBroadcast;
  q.root = 1;
  c.add(2, q);
  q.ready_ns = 100;
  c.add(0, q);
  q.ready_ns = 200;
  c.add(1, q);
  std::vector<Response> ready = c.take_ready(kNoFusion, &negotiations_);
  ASSERT_EQ(negotiations_.size(), 1u);
  EXPECT_EQ(negotiations_[0].ready_ns, (std::vector<int64_t>{100, 200, 300}));
  EXPECT_EQ(negotiations_[0].op, OpType::kBroadcast);
  EXPECT_EQ(negotiations_[0].tensor_id, strings_.intern("w"));
  EXPECT_EQ(negotiations_[0].error, "");
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kBroadcast);
  EXPECT_EQ(ready[0].root, 1);
}

TEST_F(CoordinatorTest, NegotiationsAreAppended) {
  Coordinator c(1, &ids_);
  negotiations_.resize(2);
  c.add(0, ready_at("x", 1));
  c.take_ready(kNoFusion, &negotiations_);
  EXPECT_EQ(negotiations_.size(), 3u);
}

TEST_F(CoordinatorTest, ResponseCopiesRankZerosFields) {
  Coordinator c(2, &ids_);
  Request q;
  q.name = "ranktime.timeline";
  q.op = OpType::kTimelineStart;
  q.argument = "/tmp/trace.json";
  q.flags = 1;
  c.add(0, q);
  q.argument = "/elsewhere.json";  // other ranks' arguments are not used
  q.flags = 0;
  c.add(1, q);
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kTimelineStart);
  EXPECT_EQ(ready[0].argument, "/tmp/trace.json");
  EXPECT_EQ(ready[0].flags, 1);
}

TEST_F(CoordinatorTest, MismatchBecomesAnUnfusedErrorResponse) {
  Coordinator c(2, &ids_);
  c.add(0, ready_at("ok1", 1));
  c.add(1, ready_at("ok1", 1));
  Request bad = ready_at("bad", 1);
  c.add(0, bad);
  bad.dtype = DataType::kFloat64;
  c.add(1, bad);
  c.add(0, ready_at("ok2", 1));
  c.add(1, ready_at("ok2", 1));
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  EXPECT_EQ(names_of(ready), (std::vector<std::vector<std::string>>{{"ok1", "ok2"}, {"bad"}}));
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[1].error,
            "tensor 'bad': dtype differs between ranks: float32 on rank 0; float64 on rank 1");
  ASSERT_EQ(negotiations_.size(), 3u);
  EXPECT_EQ(negotiations_[1].error, ready[1].error);
}

TEST_F(CoordinatorTest, AllgatherCarriesEachRanksFirstDimension) {
  Coordinator c(3, &ids_);
  for (int r = 0; r < 3; ++r) {
    Request q = ready_at("gather", 1, {r * 2, 5});
    q.op = OpType::kAllgather;
    c.add(r, q);
  }
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].first_dims, (std::vector<int64_t>{0, 2, 4}));
}

TEST_F(CoordinatorTest, DuplicateAddIsAnErrorNamingTheRank) {
  Coordinator c(2, &ids_);
  c.add(1, ready_at("dup", 1));
  c.add(1, ready_at("dup", 2));
  EXPECT_TRUE(c.take_ready(kFusion, &negotiations_).empty());  // still waiting for rank 0
  c.add(0, ready_at("dup", 3));
  std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_THAT(ready[0].error, ::testing::HasSubstr("'dup'"));
  EXPECT_THAT(ready[0].error, ::testing::HasSubstr("rank 1"));
  EXPECT_THAT(ready[0].error, ::testing::HasSubstr("twice"));
  ASSERT_EQ(negotiations_.size(), 1u);
  EXPECT_EQ(negotiations_[0].error, ready[0].error);
  EXPECT_EQ(negotiations_[0].ready_ns, (std::vector<int64_t>{3, 1}));  // the first submission
}

TEST_F(CoordinatorTest, NameMayBeReusedAfterItCompletes) {
  Coordinator c(2, &ids_);
  for (int round = 0; round < 3; ++round) {
    c.add(0, ready_at("step", round));
    c.add(1, ready_at("step", round));
    std::vector<Response> ready = c.take_ready(kFusion, &negotiations_);
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0].error, "") << "round " << round;
  }
}

TEST_F(CoordinatorTest, StalledListsMissingRanksOldestFirst) {
  Coordinator c(4, &ids_);
  c.add(0, ready_at("late", 200));
  c.add(3, ready_at("early", 150));
  c.add(1, ready_at("early", 100));  // first_ready_ns is the earliest of the ranks so far
  c.add(2, ready_at("young", 900));

  std::vector<Coordinator::Stalled> stalled = c.stalled(500);
  ASSERT_EQ(stalled.size(), 2u);
  EXPECT_EQ(stalled[0].name, "early");
  EXPECT_EQ(stalled[0].first_ready_ns, 100);
  EXPECT_THAT(stalled[0].missing_ranks, ElementsAre(0, 2));
  EXPECT_EQ(stalled[1].name, "late");
  EXPECT_EQ(stalled[1].first_ready_ns, 200);
  EXPECT_THAT(stalled[1].missing_ranks, ElementsAre(1, 2, 3));

  EXPECT_TRUE(c.stalled(99).empty());
  EXPECT_EQ(c.stalled(100).size(), 1u);  // inclusive
  EXPECT_EQ(c.stalled(900).size(), 3u);
}

TEST_F(CoordinatorTest, CompletedTensorsAreNoLongerStalled) {
  Coordinator c(2, &ids_);
  c.add(0, ready_at("a", 1));
  c.add(0, ready_at("b", 2));
  c.add(1, ready_at("a", 3));
  c.take_ready(kFusion, &negotiations_);
  std::vector<Coordinator::Stalled> stalled = c.stalled(1000);
  ASSERT_EQ(stalled.size(), 1u);
  EXPECT_EQ(stalled[0].name, "b");
  EXPECT_THAT(stalled[0].missing_ranks, ElementsAre(1));
}

TEST_F(CoordinatorTest, DrainRemovesEverythingPending) {
  Coordinator c(3, &ids_);
  c.add(0, ready_at("a", 1));
  c.add(1, ready_at("b", 1));
  c.add(2, ready_at("b", 1));
  c.add(0, ready_at("done", 1));
  c.add(1, ready_at("done", 1));
  c.add(2, ready_at("done", 1));  // complete but not yet taken
  EXPECT_THAT(c.drain(), UnorderedElementsAre("a", "b", "done"));
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_TRUE(c.stalled(1000).empty());
  EXPECT_TRUE(c.take_ready(kFusion, &negotiations_).empty());
  EXPECT_TRUE(c.drain().empty());

  // The coordinator works normally afterwards.
  for (int r = 0; r < 3; ++r) c.add(r, ready_at("a", 1));
  EXPECT_EQ(c.take_ready(kFusion, &negotiations_).size(), 1u);
}

}  // namespace
}  // namespace ranktime
