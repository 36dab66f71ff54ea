// Tests for plan_fusion (coordinator.h): which single-tensor responses are packed into one batch,
// and the deterministic order of batches and of names inside them.
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "negotiation/coordinator.h"

namespace ranktime {
namespace {

struct Single {
  std::string name;
  int64_t bytes;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root = 0;
  int32_t device = kCpuDevice;
  std::string error;
  int32_t process_set = 0;
};

// Runs plan_fusion and returns each batch's names, e.g. {{"a", "c"}, {"b"}}.
std::vector<std::vector<std::string>> plan(const std::vector<Single>& singles, int64_t threshold,
                                           int64_t max_tensor = 0,
                                           std::vector<Response>* responses = nullptr) {
  std::vector<Response> in;
  std::vector<int64_t> bytes;
  uint32_t id = 100;
  for (const Single& s : singles) {
    Response r;
    r.op = s.op;
    r.dtype = s.dtype;
    r.reduce_op = s.reduce_op;
    r.root = s.root;
    r.device = s.device;
    r.error = s.error;
    r.process_set = s.process_set;
    r.names = {s.name};
    r.tensor_ids = {id++};
    in.push_back(r);
    bytes.push_back(s.bytes);
  }
  std::vector<Response> out = plan_fusion(in, bytes, FusionOptions{threshold, max_tensor});
  std::vector<std::vector<std::string>> names;
  for (const Response& r : out) {
    EXPECT_EQ(r.names.size(), r.tensor_ids.size());
    names.push_back(r.names);
  }
  if (responses) *responses = out;
  return names;
}

using Batches = std::vector<std::vector<std::string>>;

TEST(PlanFusion, NothingInNothingOut) { EXPECT_EQ(plan({}, 100), Batches{}); }

TEST(PlanFusion, ExactlyAtThresholdFuses) {
  EXPECT_EQ(plan({{"a", 40}, {"b", 60}}, 100), (Batches{{"a", "b"}}));
  EXPECT_EQ(plan({{"a", 100}}, 100), (Batches{{"a"}}));
}

TEST(PlanFusion, OneByteOverStartsANewBatch) {
  EXPECT_EQ(plan({{"a", 40}, {"b", 61}}, 100), (Batches{{"a"}, {"b"}}));
  EXPECT_EQ(plan({{"a", 100}, {"b", 1}}, 100), (Batches{{"a"}, {"b"}}));
}

TEST(PlanFusion, FullBatchIsReplacedByTheNewOne) {
  // Once a batch overflows, later tensors join the newest batch of their kind.
  EXPECT_EQ(plan({{"a", 60}, {"b", 60}, {"c", 30}, {"d", 30}}, 100),
            (Batches{{"a"}, {"b", "c"}, {"d"}}));
}

TEST(PlanFusion, ManySmallTensorsFillBatchesInOrder) {
  std::vector<Single> singles;
  for (int i = 0; i < 10; ++i) singles.push_back({"t" + std::to_string(i), 25});
  EXPECT_EQ(plan(singles, 100),
            (Batches{{"t0", "t1", "t2", "t3"}, {"t4", "t5", "t6", "t7"}, {"t8", "t9"}}));
}

TEST(PlanFusion, ZeroThresholdDisablesFusion) {
  EXPECT_EQ(plan({{"a", 1}, {"b", 1}, {"c", 0}}, 0), (Batches{{"a"}, {"b"}, {"c"}}));
}

TEST(PlanFusion, OverThresholdRunsAloneWithoutClosingTheOpenBatch) {
  EXPECT_EQ(plan({{"a", 10}, {"big", 101}, {"c", 10}}, 100), (Batches{{"a", "c"}, {"big"}}));
}

TEST(PlanFusion, MaxTensorRunsAlone) {
  // max_tensor 50: 49 bytes fuses, 50 bytes (at the limit) runs alone.
  EXPECT_EQ(plan({{"a", 10}, {"at_limit", 50}, {"b", 49}, {"c", 10}}, 1000, 50),
            (Batches{{"a", "b", "c"}, {"at_limit"}}));
  // 0 = no limit.
  EXPECT_EQ(plan({{"a", 10}, {"large", 500}}, 1000, 0), (Batches{{"a", "large"}}));
}

TEST(PlanFusion, DeviceTensorsFuseWhateverTheirSize) {
  Single a{"a", 10}, large{"large", 500}, over{"over", 1001};
  a.device = large.device = over.device = 0;
  EXPECT_EQ(plan({a, large, over}, 1000, 50), (Batches{{"a", "large"}, {"over"}}));
}

TEST(PlanFusion, ZeroSizeTensorsFuseAndTakeNoRoom) {
  EXPECT_EQ(plan({{"a", 100}, {"empty1", 0}, {"empty2", 0}}, 100),
            (Batches{{"a", "empty1", "empty2"}}));
}

struct Incompatible {
  const char* label;
  Single other;
};

void PrintTo(const Incompatible& i, std::ostream* os) { *os << i.label; }

class PlanFusionIncompatible : public ::testing::TestWithParam<Incompatible> {};

TEST_P(PlanFusionIncompatible, SeparateBatchesWhileLaterCompatibleTensorsJoin) {
  Single other = GetParam().other;
  Single other2 = other;
  other.name = "x1";
  other2.name = "x2";
  EXPECT_EQ(plan({{"a", 10}, other, {"b", 10}, other2}, 100), (Batches{{"a", "b"}, {"x1", "x2"}}));
}

INSTANTIATE_TEST_SUITE_P(
    EachKey, PlanFusionIncompatible,
    ::testing::Values(
        Incompatible{"dtype", {"", 10, OpType::kAllreduce, DataType::kFloat64}},
        Incompatible{"reduce_op",
                     {"", 10, OpType::kAllreduce, DataType::kFloat32, ReduceOp::kAverage}},
        Incompatible{"op", {"", 10, OpType::kBroadcast}},
        Incompatible{"device",
                     {"", 10, OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 0, 0}},
        Incompatible{"process_set",
                     {"", 10, OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 0, kCpuDevice,
                      "", 2}}),
    [](const ::testing::TestParamInfo<Incompatible>& p) { return std::string(p.param.label); });

TEST(PlanFusion, BroadcastsWithDifferentRootsAreNotFused) {
  Single r0{"r0", 10, OpType::kBroadcast};
  Single r1{"r1", 10, OpType::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 1};
  Single r0b = r0, r1b = r1;
  r0b.name = "r0b";
  r1b.name = "r1b";
  EXPECT_EQ(plan({r0, r1, r0b, r1b}, 100), (Batches{{"r0", "r0b"}, {"r1", "r1b"}}));
}

TEST(PlanFusion, AJoinedRanksSizesStayParallelToNames) {
  std::vector<Response> in(4);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].names = {"n" + std::to_string(i)};
    in[i].tensor_ids = {static_cast<uint32_t>(i)};
    if (i != 1) in[i].tensor_sizes = {static_cast<int64_t>(10 + i)};  // made while rank joined
  }
  std::vector<Response> out = plan_fusion(in, {4, 4, 4, 4}, FusionOptions{1000, 0});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"n0", "n2", "n3"}));
  EXPECT_EQ(out[0].tensor_sizes, (std::vector<int64_t>{10, 12, 13}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"n1"}));
  EXPECT_TRUE(out[1].tensor_sizes.empty());
}

TEST(PlanFusion, ErrorResponsesAreNeverFused) {
  Single bad{"bad", 10};
  bad.error = "tensor 'bad': dtype differs";
  Single bad2 = bad;
  bad2.name = "bad2";
  std::vector<Response> out;
  EXPECT_EQ(plan({{"a", 10}, bad, {"b", 10}, bad2}, 100, 0, &out),
            (Batches{{"a", "b"}, {"bad"}, {"bad2"}}));
  EXPECT_EQ(out[1].error, "tensor 'bad': dtype differs");
  EXPECT_EQ(out[0].error, "");
}

TEST(PlanFusion, AllgatherBarrierAndTimelineAreNeverFused) {
  std::vector<Response> in(5);
  in[0].op = OpType::kAllgather;
  in[0].first_dims = {1, 2};
  in[1].op = OpType::kAllgather;
  in[1].first_dims = {3, 4};
  in[2].op = OpType::kBarrier;
  in[3].op = OpType::kBarrier;
  in[4].op = OpType::kTimelineStart;
  in[4].argument = "/tmp/t.json";
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].names = {"n" + std::to_string(i)};
    in[i].tensor_ids = {static_cast<uint32_t>(i)};
  }
  std::vector<Response> out = plan_fusion(in, {4, 4, 0, 0, 0}, FusionOptions{1000, 0});
  ASSERT_EQ(out.size(), 5u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].names, in[i].names);
  EXPECT_EQ(out[0].first_dims, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out[1].first_dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(out[4].argument, "/tmp/t.json");
}

TEST(PlanFusion, BatchCarriesTheFirstTensorsFieldsAndParallelIds) {
  std::vector<Response> out;
  Single a{"a", 8, OpType::kAllreduce, DataType::kBFloat16, ReduceOp::kMax};
  Single b = a, c = a;
  b.name = "b";
  c.name = "c";
  plan({a, b, c}, 100, 0, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(out[0].tensor_ids, (std::vector<uint32_t>{100, 101, 102}));
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(out[0].dtype, DataType::kBFloat16);
  EXPECT_EQ(out[0].reduce_op, ReduceOp::kMax);
}

TEST(PlanFusion, OrderIsFirstAppearanceAndDeterministic) {
  std::vector<Single> singles;
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt32};
  for (int i = 0; i < 30; ++i) {
    Single s{"t" + std::to_string(i), 7 + i % 5};
    s.dtype = dtypes[(i * 7) % 3];
    singles.push_back(s);
  }
  Batches first = plan(singles, 40);
  for (int run = 0; run < 5; ++run) EXPECT_EQ(plan(singles, 40), first);

  // Batches are ordered by their first tensor; inside a batch, names keep input order.
  auto index = [](const std::string& name) { return std::stoi(name.substr(1)); };
  size_t total = 0;
  for (size_t b = 0; b < first.size(); ++b) {
    total += first[b].size();
    if (b > 0) {
      EXPECT_LT(index(first[b - 1][0]), index(first[b][0]));
    }
    for (size_t i = 1; i < first[b].size(); ++i) {
      EXPECT_LT(index(first[b][i - 1]), index(first[b][i]));
    }
  }
  EXPECT_EQ(total, singles.size());
}

}  // namespace
}  // namespace ranktime
