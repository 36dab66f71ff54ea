// Tests for validate_requests (coordinator.h): agreeing requests pass; a disagreement names the
// tensor, the field, and each distinct value with the ranks that sent it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "negotiation/coordinator.h"
#include "negotiation_requests.h"

namespace ranktime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Request make(OpType op, std::vector<int64_t> shape) {
  return test::make_request("model/dense_1/kernel", op, std::move(shape));
}

std::vector<Request> agreeing(int ranks, OpType op, std::vector<int64_t> shape = {4, 8}) {
  return std::vector<Request>(ranks, make(op, std::move(shape)));
}

TEST(ValidateRequests, AgreeingRequestsPass) {
  for (OpType op : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast, OpType::kBarrier,
                    OpType::kTimelineStart, OpType::kTimelineStop}) {
    EXPECT_EQ(validate_requests(agreeing(3, op)), "") << op_type_name(op);
  }
  EXPECT_EQ(validate_requests(agreeing(1, OpType::kAllreduce)), "");
  EXPECT_EQ(validate_requests(agreeing(2, OpType::kAllreduce, {})), "");  // scalars
}

TEST(ValidateRequests, ReadyTimesFlagsAndArgumentsMayDiffer) {
  auto by_rank = agreeing(3, OpType::kAllreduce);
  by_rank[1].ready_ns = 12345;
  by_rank[2].flags = 1;
  by_rank[2].argument = "x";
  EXPECT_EQ(validate_requests(by_rank), "");
}

TEST(ValidateRequests, DifferentGpuOrdinalsAgree) {
  // Each rank drives its own GPU; only host vs device must agree.
  auto by_rank = agreeing(2, OpType::kAllreduce);
  by_rank[0].device = 0;
  by_rank[1].device = 1;
  EXPECT_EQ(validate_requests(by_rank), "");
}

TEST(ValidateRequests, ExactMessageForADtypeMismatch) {
  auto by_rank = agreeing(3, OpType::kAllreduce);
  by_rank[2].dtype = DataType::kFloat64;
  EXPECT_EQ(validate_requests(by_rank),
            "tensor 'model/dense_1/kernel': dtype differs between ranks: float32 on ranks 0,1; "
            "float64 on rank 2");
}

// One field made to differ, and what the message must then contain.
struct Mismatch {
  const char* label;
  OpType op;
  int ranks;
  std::function<void(std::vector<Request>&)> mutate;
  std::vector<std::string> expected;  // substrings, besides the tensor name
};

void PrintTo(const Mismatch& m, std::ostream* os) { *os << m.label; }

class ValidateMismatch : public ::testing::TestWithParam<Mismatch> {};

TEST_P(ValidateMismatch, NamesTensorFieldValuesAndRanks) {
  const Mismatch& m = GetParam();
  auto by_rank = agreeing(m.ranks, m.op);
  m.mutate(by_rank);
  std::string message = validate_requests(by_rank);
  EXPECT_THAT(message, HasSubstr("'model/dense_1/kernel'"));
  for (const std::string& part : m.expected) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    EachField, ValidateMismatch,
    ::testing::Values(
        Mismatch{"op",
                 OpType::kAllreduce,
                 3,
                 [](auto& q) { q[1].op = OpType::kAllgather; },
                 {"operation", "allreduce on ranks 0,2", "allgather on rank 1"}},
        Mismatch{"dtype",
                 OpType::kAllreduce,
                 4,
                 [](auto& q) {
                   q[0].dtype = DataType::kFloat16;
                   q[3].dtype = DataType::kInt64;
                 },
                 {"dtype", "float16 on rank 0", "float32 on ranks 1,2", "int64 on rank 3"}},
        Mismatch{"device",
                 OpType::kAllreduce,
                 2,
                 [](auto& q) { q[1].device = 0; },
                 {"device", "cpu on rank 0", "gpu on rank 1"}},
        Mismatch{"reduction",
                 OpType::kAllreduce,
                 3,
                 [](auto& q) { q[2].reduce_op = ReduceOp::kAverage; },
                 {"reduction", "sum on ranks 0,1", "average on rank 2"}},
        Mismatch{"allreduce_shape",
                 OpType::kAllreduce,
                 2,
                 [](auto& q) {
                   q[1].shape = {4, 9};
                 },
                 {"shape", "[4,8] on rank 0", "[4,9] on rank 1"}},
        Mismatch{"allreduce_first_dim",
                 OpType::kAllreduce,
                 2,
                 [](auto& q) {
                   q[0].shape = {5, 8};
                 },
                 {"shape", "[5,8] on rank 0", "[4,8] on rank 1"}},
        Mismatch{"allreduce_scalar_vs_vector",
                 OpType::kAllreduce,
                 2,
                 [](auto& q) { q[0].shape = {}; },
                 {"shape", "[] on rank 0", "[4,8] on rank 1"}},
        Mismatch{"broadcast_shape",
                 OpType::kBroadcast,
                 3,
                 [](auto& q) {
                   q[1].shape = {8, 4};
                 },
                 {"shape", "[4,8] on ranks 0,2", "[8,4] on rank 1"}},
        Mismatch{"allgather_ndim",
                 OpType::kAllgather,
                 2,
                 [](auto& q) {
                   q[1].shape = {4, 8, 1};
                 },
                 {"number of dimensions", "2 on rank 0", "3 on rank 1"}},
        Mismatch{"allgather_later_dims",
                 OpType::kAllgather,
                 3,
                 [](auto& q) {
                   q[2].shape = {4, 7};
                 },
                 {"shape after the first dimension", "[8] on ranks 0,1", "[7] on rank 2"}},
        Mismatch{"broadcast_root",
                 OpType::kBroadcast,
                 3,
                 [](auto& q) { q[0].root = 1; },
                 {"root rank", "1 on rank 0", "0 on ranks 1,2"}},
        Mismatch{"broadcast_root_too_big",
                 OpType::kBroadcast,
                 3,
                 [](auto& q) {
                   for (auto& r : q) r.root = 3;
                 },
                 {"root rank 3", "out of range", "3 ranks"}},
        Mismatch{"broadcast_root_negative",
                 OpType::kBroadcast,
                 2,
                 [](auto& q) {
                   for (auto& r : q) r.root = -1;
                 },
                 {"root rank -1", "out of range", "2 ranks"}},
        Mismatch{"local_error",
                 OpType::kAllreduce,
                 3,
                 [](auto& q) { q[1].error = "null data pointer for a tensor of 128 bytes"; },
                 {"rank 1", "null data pointer for a tensor of 128 bytes"}},
        Mismatch{"reducescatter_shape",
                 OpType::kReducescatter,
                 3,
                 [](auto& q) {
                   q[2].shape = {5, 8};
                 },
                 {"shape", "[4,8] on ranks 0,1", "[5,8] on rank 2"}},
        Mismatch{"reducescatter_reduction",
                 OpType::kReducescatter,
                 2,
                 [](auto& q) { q[0].reduce_op = ReduceOp::kMax; },
                 {"reduction", "max on rank 0", "sum on rank 1"}},
        Mismatch{"alltoall_ndim",
                 OpType::kAlltoall,
                 2,
                 [](auto& q) { q[0].shape = {4}; },
                 {"number of dimensions", "1 on rank 0", "2 on rank 1"}},
        Mismatch{"alltoall_later_dims",
                 OpType::kAlltoall,
                 3,
                 [](auto& q) {
                   q[1].shape = {4, 10};
                 },
                 {"shape after the first dimension", "[8] on ranks 0,2", "[10] on rank 1"}},
        Mismatch{"group",
                 OpType::kAllreduce,
                 3,
                 [](auto& q) {
                   q[0].group = q[1].group = "g";
                   q[0].group_size = q[1].group_size = 2;
                 },
                 {"group differs between ranks", "'g' of 2 on ranks 0,1", "none on rank 2"}}),
    [](const ::testing::TestParamInfo<Mismatch>& p) { return std::string(p.param.label); });

TEST(ValidateRequests, AllgatherFirstDimensionsMayDiffer) {
  auto by_rank = agreeing(3, OpType::kAllgather);
  by_rank[0].shape = {1, 8};
  by_rank[1].shape = {0, 8};
  by_rank[2].shape = {100, 8};
  EXPECT_EQ(validate_requests(by_rank), "");
}

TEST(ValidateRequests, AllgatherReductionAndRootAreIgnored) {
  auto by_rank = agreeing(2, OpType::kAllgather);
  by_rank[1].reduce_op = ReduceOp::kMax;
  by_rank[1].root = 1;
  EXPECT_EQ(validate_requests(by_rank), "");
}

TEST(ValidateRequests, BroadcastReductionIsIgnored) {
  auto by_rank = agreeing(2, OpType::kBroadcast);
  by_rank[1].reduce_op = ReduceOp::kMax;
  EXPECT_EQ(validate_requests(by_rank), "");
}

TEST(ValidateRequests, AllgatherOfScalarsIsRejected) {
  auto by_rank = agreeing(2, OpType::kAllgather, {});
  EXPECT_THAT(validate_requests(by_rank),
              AllOf(HasSubstr("'model/dense_1/kernel'"), HasSubstr("at least one dimension")));
}

TEST(ValidateRequests, LocalErrorWinsOverMismatches) {
  auto by_rank = agreeing(3, OpType::kAllreduce);
  by_rank[0].dtype = DataType::kInt8;
  by_rank[2].error = "data pointer is not aligned";
  EXPECT_EQ(validate_requests(by_rank),
            "tensor 'model/dense_1/kernel': rank 2: data pointer is not aligned");
}

TEST(ValidateRequests, FirstDifferingFieldIsReported) {
  // op before dtype before shape: a rank that called the wrong collective is the root cause.
  auto by_rank = agreeing(2, OpType::kAllreduce);
  by_rank[1].op = OpType::kBroadcast;
  by_rank[1].dtype = DataType::kInt32;
  by_rank[1].shape = {1};
  std::string message = validate_requests(by_rank);
  EXPECT_THAT(message, HasSubstr("operation"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("dtype")));
}

}  // namespace
}  // namespace ranktime
