// Tests for the rules of reducescatter, alltoall and grouped operations that need no ranks:
// Horovod's split of dimension 0 (core/rows.h), the checks of a call's own arguments
// (check_arguments), agreement across ranks (validate_requests), a group's layout
// (plan_group, plan_fusion) and the coordinator holding a group until all of it is ready, then
// running it together or failing it together.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rows.h"
#include "negotiation/coordinator.h"
#include "negotiation_requests.h"
#include "ranktime/timeline/string_table.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// --- the split -----------------------------------------------------------------------------------

TEST(ScatterRows, FirstRanksGetTheRemainderAsHorovodDoes) {
  // Horovod 0.28.1, ReducescatterOp::ComputeOutputShapeForRank: 10 rows over 4 ranks: 3,3,2,2.
  EXPECT_EQ(scatter_rows(10, 4, 0), 3);
  EXPECT_EQ(scatter_rows(10, 4, 1), 3);
  EXPECT_EQ(scatter_rows(10, 4, 2), 2);
  EXPECT_EQ(scatter_rows(10, 4, 3), 2);
  EXPECT_EQ(scatter_rows(2, 4, 1), 1);
  EXPECT_EQ(scatter_rows(2, 4, 2), 0);
  for (int64_t dim0 : {0, 1, 7, 16, 17, 1001}) {
    for (int size : {1, 2, 3, 5, 16}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        EXPECT_EQ(scatter_first_row(dim0, size, r), next) << dim0 << " rows, " << size << " ranks";
        next += scatter_rows(dim0, size, r);
      }
      EXPECT_EQ(next, dim0);
    }
  }
}

TEST(ScatterRows, RowElementsIsTheProductAfterDimensionZero) {
  EXPECT_EQ(row_elements({7}), 1);
  EXPECT_EQ(row_elements({7, 3, 5}), 15);
  EXPECT_EQ(row_elements({7, 0}), 0);
}

// --- a call's own arguments ----------------------------------------------------------------------

TensorView view(std::vector<int64_t> shape, int device = kCpuDevice) {
  TensorView v;
  v.shape = std::move(shape);
  v.device = device;
  return v;
}

TEST(CheckArguments, OtherOperationsAndGoodCallsPass) {
  EXPECT_EQ(check_arguments(OpType::kAllreduce, view({}), {}, 4), "");
  EXPECT_EQ(check_arguments(OpType::kReducescatter, view({3, 2}), {}, 4), "");  // uneven: fine
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({8, 2}), {}, 4), "");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({8}), {1, 0, 5, 2}, 4), "");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({8}), {1, 0, 5, 0}, 4),
            "");  // fewer: Horovod's
}

TEST(CheckArguments, ScalarsAreRefusedAndDeviceTensorsCheckedLikeHostOnes) {
  EXPECT_THAT(check_arguments(OpType::kReducescatter, view({}), {}, 2),
              AllOf(HasSubstr("reducescatter needs at least one dimension"),
                    HasSubstr("reshape a scalar to [1]")));
  EXPECT_THAT(check_arguments(OpType::kAlltoall, view({}, 0), {}, 2),
              HasSubstr("alltoall needs at least one dimension"));
  // The GPU path runs both (a build without one refuses device tensors at submission).
  EXPECT_EQ(check_arguments(OpType::kReducescatter, view({3}, 1), {}, 2), "");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({4}, 0), {1, 3}, 2), "");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({4}, 0), {1, -3}, 2),
            "alltoall split for rank 1 is negative (-3)");
}

TEST(CheckArguments, SplitsThatDoNotFitAreNamed) {
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({9}), {}, 4),
            "alltoall without splits divides dimension 0 evenly among the ranks, and 9 rows do "
            "not divide among 4 ranks: pass splits");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({9}), {1, 2, 3}, 4),
            "alltoall has 3 splits for 4 ranks (one per rank, or none for an equal split)");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({9}), {1, -2, 3, 1}, 4),
            "alltoall split for rank 1 is negative (-2)");
  EXPECT_EQ(check_arguments(OpType::kAlltoall, view({9, 3}), {4, 4, 1, 1}, 4),
            "alltoall splits sum to 10 rows, more than dimension 0 (9)");
}

// --- agreement across ranks ----------------------------------------------------------------------

using test::make_request;
using test::names_of;

// `op` on tensor `name` as a member of group `group` of `group_size` tensors.
Request grouped(const std::string& name, OpType op, const std::string& group, uint32_t group_size) {
  Request q = make_request(name, op);
  q.group = group;
  q.group_size = group_size;
  return q;
}

TEST(ValidateScatter, AlltoallFirstDimensionsMayDifferReducescatterNot) {
  std::vector<Request> alltoall = {make_request("a", OpType::kAlltoall, {3, 2}),
                                   make_request("a", OpType::kAlltoall, {0, 2})};
  EXPECT_EQ(validate_requests(alltoall), "");
  std::vector<Request> scatter = {make_request("s", OpType::kReducescatter, {3, 2}),
                                  make_request("s", OpType::kReducescatter, {4, 2})};
  EXPECT_EQ(validate_requests(scatter),
            "tensor 's': shape differs between ranks: [3,2] on rank 0; [4,2] on rank 1");
}

// --- a group's layout ----------------------------------------------------------------------------

Response single(const std::string& name, uint32_t id, OpType op = OpType::kAllreduce,
                DataType dtype = DataType::kFloat32, int device = kCpuDevice) {
  Response r;
  r.op = op;
  r.dtype = dtype;
  r.device = device;
  r.names = {name};
  r.tensor_ids = {id};
  r.cache_ids = {id + 100};
  return r;
}

using Names = std::vector<std::vector<std::string>>;

TEST(PlanGroup, OneResponsePerDtypeInFirstAppearanceOrder) {
  std::vector<Response> out =
      plan_group({single("a", 1), single("b", 2, OpType::kAllreduce, DataType::kFloat16),
                  single("c", 3), single("d", 4, OpType::kAllreduce, DataType::kFloat16)});
  EXPECT_EQ(names_of(out), (Names{{"a", "c"}, {"b", "d"}}));
  EXPECT_EQ(out[0].tensor_ids, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(out[0].cache_ids, (std::vector<uint32_t>{101, 103}));
  EXPECT_EQ(out[1].dtype, DataType::kFloat16);
}

TEST(PlanGroup, AllgatherFirstDimensionsFollowTheirTensors) {
  Response a = single("a", 1, OpType::kAllgather), b = single("b", 2, OpType::kAllgather);
  a.first_dims = {1, 2, 3};
  b.first_dims = {4, 5, 6};
  std::vector<Response> out = plan_group({a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first_dims, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(PlanGroup, DeviceAllgathersStayOnePerTensor) {
  std::vector<Response> out =
      plan_group({single("a", 1, OpType::kAllgather, DataType::kFloat32, 0),
                  single("b", 2, OpType::kAllgather, DataType::kFloat32, 0)});
  EXPECT_EQ(names_of(out), (Names{{"a"}, {"b"}}));
}

TEST(PlanGroup, DeviceReducescattersStayOnePerTensor) {
  std::vector<Response> out =
      plan_group({single("a", 1, OpType::kReducescatter, DataType::kFloat32, 0),
                  single("b", 2, OpType::kReducescatter, DataType::kFloat32, 0)});
  EXPECT_EQ(names_of(out), (Names{{"a"}, {"b"}}));
}

TEST(PlanFusion, DeviceReducescattersAreNeverFused) {
  std::vector<Response> out =
      plan_fusion({single("a", 1, OpType::kReducescatter, DataType::kFloat32, 0),
                   single("b", 2, OpType::kReducescatter, DataType::kFloat32, 0),
                   single("c", 3, OpType::kReducescatter), single("d", 4, OpType::kReducescatter)},
                  {8, 8, 8, 8}, FusionOptions{1 << 20, 0});
  EXPECT_EQ(names_of(out), (Names{{"a"}, {"b"}, {"c", "d"}}));
}

TEST(PlanFusion, ReducescattersFuseAndLaidOutGroupsPassThrough) {
  Response group = plan_group({single("g1", 1), single("g2", 2)}).front();
  std::vector<Response> out = plan_fusion(
      {single("r1", 3, OpType::kReducescatter), group, single("r2", 4, OpType::kReducescatter),
       single("x", 5, OpType::kAlltoall), single("y", 6, OpType::kAlltoall), single("z", 7)},
      {8, 0, 8, 8, 8, 8}, FusionOptions{1 << 20, 0});
  EXPECT_EQ(names_of(out), (Names{{"r1", "r2"}, {"g1", "g2"}, {"x"}, {"y"}, {"z"}}));
}

// --- the coordinator holds a group
// -----------------------------------------------------------------

class GroupTest : public ::testing::Test {
 protected:
  timeline::StringTable strings_;
  StringTableIds ids_{&strings_};
  std::vector<Negotiation> negotiations_;
  const FusionOptions tiny_{4, 0};  // a fusion threshold no group fits: groups ignore it

  // Tensor i of group "g" of `n`, as rank `rank` requests it.
  void add(Coordinator& c, int rank, int i, int n, DataType dtype = DataType::kFloat32,
           int64_t ready_ns = 0) {
    Request q = test::group_member("g", i, n);
    q.dtype = dtype;
    q.ready_ns = ready_ns;
    c.add(rank, q);
  }
};

TEST_F(GroupTest, HeldUntilEveryTensorIsReadyOnEveryRankThenOneExecution) {
  Coordinator c(2, &ids_);
  add(c, 0, 1, 3);
  add(c, 1, 1, 3);  // ready everywhere, but its group is not
  add(c, 0, 2, 3);
  add(c, 1, 2, 3);
  add(c, 0, 3, 3);
  c.add(0, make_request("other", OpType::kAllreduce, {4}));
  c.add(1, make_request("other", OpType::kAllreduce, {4}));
  EXPECT_EQ(names_of(c.take_ready(tiny_, &negotiations_)), (Names{{"other"}}));
  EXPECT_EQ(negotiations_.size(), 1u);  // the group's come when it is ready
  EXPECT_EQ(c.pending(), 3u);           // two held, one not ready on rank 1

  add(c, 1, 3, 3);
  std::vector<Response> ready = c.take_ready(tiny_, &negotiations_);
  EXPECT_EQ(names_of(ready), (Names{{"g_1of3", "g_2of3", "g_3of3"}}));
  EXPECT_EQ(ready[0].error, "");
  ASSERT_EQ(negotiations_.size(), 4u);
  EXPECT_EQ(negotiations_[1].tensor_id, strings_.intern("g_1of3"));
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(GroupTest, TensorsReadyBeforeAGroupInTheSameCycleKeepTheirNames) {
  Coordinator c(2, &ids_);
  for (int r = 0; r < 2; ++r) {
    c.add(r, make_request("alone", OpType::kAllgather, {4}));
    add(c, r, 1, 1);
  }
  EXPECT_EQ(names_of(c.take_ready(tiny_, &negotiations_)), (Names{{"alone"}, {"g_1of1"}}));
}

TEST_F(GroupTest, MixedDtypesRunAsOneResponsePerDtype) {
  Coordinator c(1, &ids_);
  add(c, 0, 1, 3, DataType::kFloat32);
  add(c, 0, 2, 3, DataType::kInt64);
  add(c, 0, 3, 3, DataType::kFloat32);
  EXPECT_EQ(names_of(c.take_ready(tiny_, &negotiations_)),
            (Names{{"g_1of3", "g_3of3"}, {"g_2of3"}}));
}

TEST_F(GroupTest, OneMismatchFailsTheWholeGroupNamingTheTensor) {
  Coordinator c(2, &ids_, /*cache_capacity=*/16);
  for (int i = 1; i <= 3; ++i) add(c, 0, i, 3);
  add(c, 1, 1, 3);
  add(c, 1, 2, 3, DataType::kFloat64);  // differs on rank 1
  add(c, 1, 3, 3);
  std::vector<Response> ready = c.take_ready(tiny_, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"g_1of3", "g_2of3", "g_3of3"}));
  EXPECT_EQ(ready[0].error,
            "group 'g' failed: tensor 'g_2of3': dtype differs between ranks: float32 on rank 0; "
            "float64 on rank 1");
  EXPECT_EQ(ready[0].cache_ids, (std::vector<uint32_t>{0, 0, 0}));  // nobody caches any of them
  ASSERT_EQ(negotiations_.size(), 3u);
  for (const Negotiation& n : negotiations_) EXPECT_EQ(n.error, ready[0].error);
  // The same group again, now agreeing, runs: nothing of the failure stayed behind.
  for (int r = 0; r < 2; ++r) {
    for (int i = 1; i <= 3; ++i) add(c, r, i, 3);
  }
  ready = c.take_ready(tiny_, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error, "");
}

TEST_F(GroupTest, CachedGroupsAreStillHeldTogether) {
  Coordinator c(2, &ids_, /*cache_capacity=*/16);
  for (int r = 0; r < 2; ++r) {
    for (int i = 1; i <= 2; ++i) add(c, r, i, 2);
  }
  std::vector<Response> first = c.take_ready(tiny_, &negotiations_);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first[0].cache_ids.size(), 2u);
  // The next step through the cache: one tensor ready on both ranks is held for the other.
  for (int r = 0; r < 2; ++r) EXPECT_EQ(c.add_cached(r, first[0].cache_ids[0], 10, 0), "");
  EXPECT_TRUE(c.take_ready(tiny_, &negotiations_).empty());
  for (int r = 0; r < 2; ++r) EXPECT_EQ(c.add_cached(r, first[0].cache_ids[1], 20, 0), "");
  EXPECT_EQ(names_of(c.take_ready(tiny_, &negotiations_)), (Names{{"g_1of2", "g_2of2"}}));
}

// Only hand-made requests can do this (the API makes a group's requests alike): it fails.
TEST_F(GroupTest, TensorsThatDisagreeAboutTheirGroupFailIt) {
  Coordinator c(1, &ids_);
  c.add(0, grouped("a", OpType::kAllreduce, "g", 2));
  c.add(0, grouped("b", OpType::kAllgather, "g", 2));
  std::vector<Response> ready = c.take_ready(tiny_, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_THAT(ready[0].error, HasSubstr("group 'g' failed: tensor 'b' differs from tensor 'a' in "
                                        "operation, reduction, device or process set"));
  c.add(0, grouped("c", OpType::kAllreduce, "h", 2));
  c.add(0, grouped("d", OpType::kAllreduce, "h", 1));
  ready = c.take_ready(tiny_, &negotiations_);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].error,
            "group 'h' failed: tensor 'd' is one of 1 tensors, tensor 'c' one of 2");
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(GroupTest, DrainIncludesHeldTensors) {
  Coordinator c(2, &ids_);
  add(c, 0, 1, 2);
  add(c, 1, 1, 2);
  add(c, 0, 2, 2);
  EXPECT_TRUE(c.take_ready(tiny_, &negotiations_).empty());
  std::vector<std::string> drained = c.drain();
  EXPECT_THAT(drained, ::testing::UnorderedElementsAre("g_1of2", "g_2of2"));
  EXPECT_EQ(c.pending(), 0u);
}

}  // namespace
}  // namespace ranktime
