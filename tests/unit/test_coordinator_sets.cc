// Coordinator with process sets and join: a set's tensor is ready when its members asked, only
// their ticks are in its negotiation, errors name the set and its ranks, a removed set's pending
// tensors fail; a joined rank counts as having asked for the others' allreduces (which then carry
// the sizes of its zeros), other operations fail while ranks have joined, the response cache
// goes on working through a join; a set's groups are held per set and fail with it; reducescatter
// and alltoall fail while ranks have joined (Horovod's rule), a joined rank's group allreduce is
// zeros.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "negotiation/coordinator.h"
#include "negotiation_requests.h"
#include "ranktime/timeline/string_table.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using test::kFusion;

// `op` on tensor `name` of process set `set`, ready at `ready_ns`.
Request in_set(const std::string& name, int64_t ready_ns, int32_t set = kGlobalSet,
               OpType op = OpType::kAllreduce) {
  Request q = test::make_request(name, op, {4}, ready_ns);
  q.process_set = set;
  return q;
}

Request control(OpType op, const std::string& argument, int64_t ready_ns = 0) {
  Request q;
  q.name = op == OpType::kJoin ? "ranktime.join" : "ranktime.process_set";
  q.op = op;
  q.argument = argument;
  q.ready_ns = ready_ns;
  return q;
}

class CoordinatorSets : public ::testing::Test {
 protected:
  std::vector<Response> take(Coordinator& c) {
    negotiations_.clear();
    return c.take_ready(kFusion, &negotiations_);
  }
  timeline::StringTable strings_;
  StringTableIds ids_{&strings_};
  std::vector<Negotiation> negotiations_;
  ProcessSets sets_{4};
};

TEST_F(CoordinatorSets, ASetsTensorIsReadyWhenEveryMemberAsked) {
  sets_.add(1, {0, 2});
  Coordinator c(4, &ids_, 0, &sets_);
  c.add(2, in_set("x", 20, 1));
  EXPECT_TRUE(take(c).empty());
  EXPECT_EQ(c.pending(), 1u);
  std::vector<Coordinator::Stalled> stalled = c.stalled(100);
  ASSERT_EQ(stalled.size(), 1u);
  EXPECT_THAT(stalled[0].missing_ranks, ElementsAre(0));  // not 1 or 3: not members
  c.add(0, in_set("x", 10, 1));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].process_set, 1);
  EXPECT_TRUE(ready[0].tensor_sizes.empty());
  ASSERT_EQ(negotiations_.size(), 1u);
  EXPECT_THAT(negotiations_[0].ranks, ElementsAre(0, 2));
  EXPECT_THAT(negotiations_[0].ready_ns, ElementsAre(10, 20));
  EXPECT_EQ(negotiations_[0].joined, 0);
}

TEST_F(CoordinatorSets, OverlappingSetsAreNeverFusedTogether) {
  sets_.add(1, {0, 1});
  sets_.add(2, {1, 2});
  Coordinator c(4, &ids_, 0, &sets_);
  c.add(0, in_set("a", 1, 1));
  c.add(1, in_set("b", 1, 2));
  c.add(1, in_set("a", 1, 1));
  c.add(2, in_set("b", 1, 2));
  c.add(0, in_set("c", 1, 1));
  c.add(1, in_set("c", 1, 1));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(ready[0].process_set, 1);
  EXPECT_EQ(ready[1].names, (std::vector<std::string>{"b"}));
  EXPECT_EQ(ready[1].process_set, 2);
}

TEST_F(CoordinatorSets, UnknownSetsAndNonMembersFailAtOnceForThatRank) {
  sets_.add(1, {0, 2});
  Coordinator c(4, &ids_, 0, &sets_);
  c.add(3, in_set("x", 1, 1));
  c.add(0, in_set("y", 1, 9));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].error, "tensor 'x': rank 3 is not in process set 1 (ranks 0,2)");
  EXPECT_EQ(ready[0].process_set, 1);
  EXPECT_EQ(ready[1].error, "tensor 'y': process set 9 does not exist (never added, or removed)");
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorSets, ABroadcastsRootIsAGlobalRankInTheSet) {
  sets_.add(1, {1, 3});
  Coordinator c(4, &ids_, 0, &sets_);
  for (int r : {1, 3}) {
    Request q = in_set("w", 1, 1, OpType::kBroadcast);
    q.root = 3;
    c.add(r, q);
  }
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].root, 1) << "the root's rank within the set, for the set's communicator";
  for (int r : {1, 3}) {
    Request q = in_set("v", 1, 1, OpType::kBroadcast);
    q.root = 0;
    c.add(r, q);
  }
  ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "tensor 'v': root rank 0 is not in process set 1 (ranks 1,3)");
}

TEST_F(CoordinatorSets, MismatchesNameGlobalRanks) {
  sets_.add(1, {1, 3});
  Coordinator c(4, &ids_, 0, &sets_);
  Request q = in_set("d", 1, 1);
  c.add(1, q);
  q.dtype = DataType::kFloat64;
  c.add(3, q);
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error,
            "tensor 'd': dtype differs between ranks: float32 on rank 1; float64 on rank 3");
}

TEST_F(CoordinatorSets, AddGivesOutNewIdsAndRefusesDuplicatesAndDisagreement) {
  ProcessSets three(3);
  three.add(1, {0, 2});
  Coordinator d(3, &ids_, 0, &three);
  for (int r = 0; r < 3; ++r) d.add(r, control(OpType::kAddProcessSet, "1,2"));
  std::vector<Response> ready = take(d);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].root, 1) << "ids are the coordinator's, from 1";
  EXPECT_EQ(ready[0].argument, "1,2");

  for (int r = 0; r < 3; ++r) d.add(r, control(OpType::kAddProcessSet, "0,2"));
  ready = take(d);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "add_process_set: process set 1 (ranks 0,2) has these ranks already");

  d.add(0, control(OpType::kAddProcessSet, "0,1"));
  d.add(1, control(OpType::kAddProcessSet, "0,1"));
  d.add(2, control(OpType::kAddProcessSet, "0,2"));
  ready = take(d);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error,
            "tensor 'ranktime.process_set': process set ranks differs between ranks: [0,1] on "
            "ranks 0,1; [0,2] on rank 2");

  for (int r = 0; r < 3; ++r) d.add(r, control(OpType::kAddProcessSet, "0,7"));
  ready = take(d);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "add_process_set: rank 7 is not a rank of this job of 3 ranks (0..2)");
}

TEST_F(CoordinatorSets, RemovingASetFailsItsPendingTensorsFirst) {
  sets_.add(1, {0, 1, 2});
  Coordinator c(4, &ids_, 16, &sets_);
  // "cached" is negotiated once (cached), then asked again by rank 0 only, through the cache.
  for (int r : {0, 1, 2}) c.add(r, in_set("cached", 1, 1));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  const uint32_t id = ready[0].cache_ids.at(0);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(c.add_cached(0, id, 5, 0), "");
  c.add(0, in_set("x", 1, 1));
  c.add(1, in_set("x", 1, 1));
  for (int r = 0; r < 4; ++r) c.add(r, control(OpType::kRemoveProcessSet, "1"));
  ready = take(c);
  ASSERT_EQ(ready.size(), 3u);
  std::vector<std::string> errors = {ready[0].error, ready[1].error};
  std::sort(errors.begin(), errors.end());
  EXPECT_EQ(errors[0],
            "process set 1 (ranks 0-2) was removed while tensor 'cached' was in flight (ranks "
            "1,2 had not submitted it)");
  EXPECT_EQ(errors[1],
            "process set 1 (ranks 0-2) was removed while tensor 'x' was in flight (rank 2 had "
            "not submitted it)");
  EXPECT_EQ(ready[0].process_set, 1);
  EXPECT_EQ(ready[2].op, OpType::kRemoveProcessSet);
  EXPECT_EQ(ready[2].error, "");
  EXPECT_EQ(c.pending(), 0u);
  EXPECT_THAT(c.take_evicted(), ElementsAre(id)) << "ranks forget the set's cached tensors";
  // A rank that still sends the id (it had not yet seen the removal) is negotiated in full: its
  // set is gone on rank 0 (the registry has removed it by then), so it fails for that rank.
  sets_.remove(1);
  EXPECT_EQ(c.add_cached(2, id, 9, 0), "");
  ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_THAT(ready[0].error, HasSubstr("process set 1 does not exist"));
}

TEST_F(CoordinatorSets, RemovingAnUnknownSetIsAnError) {
  Coordinator c(4, &ids_, 0, &sets_);
  for (int r = 0; r < 4; ++r) c.add(r, control(OpType::kRemoveProcessSet, "4"));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "remove_process_set: process set 4 does not exist");
}

TEST_F(CoordinatorSets, AJoinedRankCountsForAllreducesWhichCarryItsZerosSizes) {
  Coordinator c(3, &ids_);
  c.add(0, in_set("early", 100));  // pending before the join: ready once rank 1 joins
  c.add(2, in_set("early", 300));
  c.add(1, control(OpType::kJoin, "", 50));
  EXPECT_TRUE(c.stalled(1'000'000).empty()) << "a join is not a stall";
  c.add(0, in_set("late", 400));
  c.add(2, in_set("late", 500));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 1u) << "fused";
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"early", "late"}));
  EXPECT_EQ(ready[0].tensor_sizes, (std::vector<int64_t>{4, 4}));
  ASSERT_EQ(negotiations_.size(), 2u);
  EXPECT_THAT(negotiations_[0].ranks, ElementsAre(0, 2, 1));
  EXPECT_THAT(negotiations_[0].ready_ns, ElementsAre(100, 300, 100));
  EXPECT_EQ(negotiations_[0].joined, 1);

  // Allgather and broadcast fail while a rank has joined; a process set's tensors still need
  // every member; a barrier is fine.
  Request gather = in_set("g", 1, kGlobalSet, OpType::kAllgather);
  Request bcast = in_set("b", 1, kGlobalSet, OpType::kBroadcast);
  Request barrier = in_set("ranktime.barrier", 1, kGlobalSet, OpType::kBarrier);
  for (int r : {0, 2}) {
    c.add(r, gather);
    c.add(r, bcast);
    c.add(r, barrier);
  }
  ready = take(c);
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready[0].error,
            "tensor 'g': allgather is not supported while ranks have joined (rank 1 called "
            "join()): a joined rank takes part only in allreduces and barriers (with "
            "DistributedOptimizer, pass sparse_as_dense=True)");
  EXPECT_THAT(ready[1].error, HasSubstr("tensor 'b': broadcast is not supported while ranks"));
  EXPECT_EQ(ready[2].error, "");
  EXPECT_EQ(ready[2].op, OpType::kBarrier);

  // The others join; the last one is every rank's answer, and the join is over.
  c.add(2, control(OpType::kJoin, "", 700));
  EXPECT_TRUE(take(c).empty());
  c.add(0, control(OpType::kJoin, "", 600));
  ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].op, OpType::kJoin);
  EXPECT_EQ(ready[0].root, 0);
  ASSERT_EQ(negotiations_.size(), 1u);
  EXPECT_THAT(negotiations_[0].ready_ns, ElementsAre(600, 50, 700));
  c.add(0, in_set("after", 1));
  c.add(2, in_set("after", 1));
  EXPECT_TRUE(take(c).empty()) << "rank 1 must ask again";
  c.add(1, in_set("after", 1));
  ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_TRUE(ready[0].tensor_sizes.empty());
}

// A joined rank takes part in device allreduces too: the response carries the sizes of its zeros
// (made on the device by the GPU backend), fused like host tensors but never with them.
TEST_F(CoordinatorSets, ADeviceAllreduceWhileARankHasJoinedCarriesItsZerosSizes) {
  Coordinator c(3, &ids_);
  c.add(1, control(OpType::kJoin, "", 1));
  for (int r : {0, 2}) {
    Request on_gpu = in_set("gpu", 10);
    on_gpu.device = 0;
    c.add(r, on_gpu);
    c.add(r, in_set("host", 10));
  }
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 2u) << "one device and one host response";
  for (const Response& s : ready) {
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(s.tensor_sizes, (std::vector<int64_t>{4}));
    EXPECT_EQ(s.device, s.names.at(0) == "gpu" ? 0 : kCpuDevice);
  }
}

TEST_F(CoordinatorSets, ASetsTensorIsNotReadyThroughAJoin) {
  sets_.add(1, {0, 1});
  Coordinator c(3, &ids_, 0, &sets_);
  c.add(1, control(OpType::kJoin, "", 1));
  c.add(0, in_set("s", 1, 1));
  EXPECT_TRUE(take(c).empty()) << "join is over every rank; a set needs all its members";
  c.add(1, in_set("s", 1, 1));
  EXPECT_EQ(take(c).size(), 1u);
}

TEST_F(CoordinatorSets, TheLastJoinComesAfterTheTensorsItMadeReady) {
  Coordinator c(2, &ids_);
  c.add(0, in_set("x", 1));
  c.add(1, control(OpType::kJoin, "", 2));  // x is ready now
  c.add(0, control(OpType::kJoin, "", 3));
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"x"}));
  EXPECT_EQ(ready[0].tensor_sizes, (std::vector<int64_t>{4}));
  EXPECT_EQ(ready[1].op, OpType::kJoin);
  EXPECT_EQ(ready[1].root, 0);
}

TEST_F(CoordinatorSets, CachedTensorsGoOnThroughAJoin) {
  Coordinator c(3, &ids_, 16);
  for (int r = 0; r < 3; ++r) c.add(r, in_set("w", 1));
  std::vector<Response> ready = take(c);
  const uint32_t id = ready.at(0).cache_ids.at(0);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(c.add_cached(0, id, 10, 0), "");
  c.add(2, control(OpType::kJoin, "", 5));
  EXPECT_EQ(c.add_cached(1, id, 20, 0), "");
  ready = take(c);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
  EXPECT_EQ(ready[0].cache_ids, (std::vector<uint32_t>{id}));
  EXPECT_EQ(ready[0].tensor_sizes, (std::vector<int64_t>{4}));
  ASSERT_EQ(negotiations_.size(), 1u);
  EXPECT_THAT(negotiations_[0].ranks, ElementsAre(0, 1, 2));
  EXPECT_THAT(negotiations_[0].ready_ns, ElementsAre(10, 20, 10));
  EXPECT_EQ(negotiations_[0].joined, 1);
}

// Tensor `i` of `n` of group `group`, as the runtime names a set's: the group's name carries the
// set's label, so that groups of the same name in different sets are held apart.
Request in_set_group(const std::string& group, int i, int n, int32_t set,
                     OpType op = OpType::kAllreduce) {
  Request q = test::group_member(group, i, n, op);
  q.ready_ns = 1;
  q.process_set = set;
  return q;
}

TEST_F(CoordinatorSets, GroupsAreHeldPerSetBesideFailuresAndFailWithTheirSet) {
  sets_.add(1, {0, 1});
  sets_.add(2, {1, 2});
  Coordinator c(4, &ids_, 0, &sets_);
  c.add(3, in_set("stray", 1, 1));  // not a member: fails at once, beside the groups
  for (int r : {0, 1}) {
    for (int i = 1; i <= 2; ++i)
      c.add(r, in_set_group("g [set 1]", i, 2, 1, OpType::kReducescatter));
  }
  for (int r : {1, 2})
    c.add(r, in_set_group("g [set 2]", 1, 2, 2));  // its second tensor never comes
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].error, "tensor 'stray': rank 3 is not in process set 1 (ranks 0,1)");
  EXPECT_EQ(ready[1].error, "");
  EXPECT_EQ(ready[1].op, OpType::kReducescatter);
  EXPECT_EQ(ready[1].process_set, 1);
  EXPECT_EQ(ready[1].names,
            (std::vector<std::string>{"g [set 1]_1of2", "g [set 1]_2of2"}));  // one execution
  ASSERT_EQ(negotiations_.size(), 2u) << "one per tensor of the group, none for the failure";
  for (const Negotiation& n : negotiations_) EXPECT_THAT(n.ranks, ElementsAre(0, 1));
  EXPECT_EQ(c.pending(), 1u) << "set 2's group holds its first tensor";

  for (int r = 0; r < 4; ++r) c.add(r, control(OpType::kRemoveProcessSet, "2"));
  ready = take(c);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"g [set 2]_1of2"}));
  EXPECT_EQ(ready[0].error,
            "process set 2 (ranks 1,2) was removed while tensor 'g [set 2]_1of2' was in flight");
  EXPECT_EQ(ready[1].op, OpType::kRemoveProcessSet);
  EXPECT_EQ(ready[1].error, "");
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorSets, ReducescatterAndAlltoallFailWhileARankHasJoinedGroupsGetZeros) {
  Coordinator c(3, &ids_);
  c.add(1, control(OpType::kJoin, "", 1));
  for (int r : {0, 2}) {
    c.add(r, in_set("rs", 1, kGlobalSet, OpType::kReducescatter));
    c.add(r, in_set("a2a", 1, kGlobalSet, OpType::kAlltoall));
    for (int i = 1; i <= 2; ++i) c.add(r, in_set_group("sum", i, 2, kGlobalSet));
  }
  std::vector<Response> ready = take(c);
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready[0].error,
            "tensor 'rs': reducescatter is not supported while ranks have joined (rank 1 called "
            "join()): a joined rank takes part only in allreduces and barriers");
  EXPECT_THAT(ready[1].error,
              HasSubstr("tensor 'a2a': alltoall is not supported while ranks have joined"));
  EXPECT_EQ(ready[2].error, "");
  EXPECT_EQ(ready[2].names, (std::vector<std::string>{"sum_1of2", "sum_2of2"}));
  EXPECT_EQ(ready[2].tensor_sizes, (std::vector<int64_t>{4, 4})) << "rank 1 reduces zeros";
}

}  // namespace
}  // namespace ranktime
