// Tests for the element-type tables (types.cc), op names (wire.cc), log level names (config.h) and
// TensorView's size arithmetic.
#include <gtest/gtest.h>

#include <iterator>
#include <stdexcept>
#include <string>

#include "core/message.h"
#include "ranktime/ranktime.h"

namespace ranktime {
namespace {

struct DtypeRow {
  DataType dtype;
  const char* name;
  size_t size;
};

const DtypeRow kDtypes[] = {
    {DataType::kUInt8, "uint8", 1},     {DataType::kInt8, "int8", 1},
    {DataType::kInt32, "int32", 4},     {DataType::kInt64, "int64", 8},
    {DataType::kFloat16, "float16", 2}, {DataType::kBFloat16, "bfloat16", 2},
    {DataType::kFloat32, "float32", 4}, {DataType::kFloat64, "float64", 8},
};
static_assert(std::size(kDtypes) == static_cast<size_t>(kNumDataTypes), "a row per dtype");

TEST(Types, EveryDtypeHasItsNameAndSize) {
  for (const DtypeRow& row : kDtypes) {
    EXPECT_STREQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(dtype_size(row.dtype), row.size) << row.name;
    EXPECT_EQ(parse_dtype(row.name), row.dtype) << row.name;
  }
}

TEST(Types, WireValuesAreStable) {
  // The numeric values travel on the wire: append, never reorder.
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(static_cast<int>(kDtypes[i].dtype), i) << kDtypes[i].name;
  }
}

TEST(Types, InvalidDtype) {
  const auto invalid = static_cast<DataType>(kNumDataTypes);
  EXPECT_STREQ(dtype_name(invalid), "invalid");
  EXPECT_THROW(dtype_size(invalid), std::out_of_range);
  for (const char* name : {"", "float", "Float32", "float32 ", "fp16", "half", "invalid"}) {
    EXPECT_FALSE(parse_dtype(name).has_value()) << "'" << name << "'";
  }
}

TEST(Types, ReduceOpNames) {
  EXPECT_STREQ(reduce_op_name(ReduceOp::kSum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAverage), "average");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMin), "min");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMax), "max");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kProduct), "product");
  EXPECT_STREQ(reduce_op_name(static_cast<ReduceOp>(kNumReduceOps)), "invalid");
}

TEST(Types, OpTypeNames) {
  EXPECT_STREQ(op_type_name(OpType::kAllreduce), "allreduce");
  EXPECT_STREQ(op_type_name(OpType::kAllgather), "allgather");
  EXPECT_STREQ(op_type_name(OpType::kBroadcast), "broadcast");
  EXPECT_STREQ(op_type_name(OpType::kBarrier), "barrier");
  EXPECT_STREQ(op_type_name(OpType::kTimelineStart), "timeline_start");
  EXPECT_STREQ(op_type_name(OpType::kTimelineStop), "timeline_stop");
  EXPECT_STREQ(op_type_name(static_cast<OpType>(kNumOpTypes)), "invalid");
}

TEST(Types, TensorViewElementsAndBytes) {
  TensorView v;
  EXPECT_EQ(v.num_elements(), 1);  // a scalar
  EXPECT_EQ(v.num_bytes(), 4u);
  v.shape = {0};
  EXPECT_EQ(v.num_elements(), 0);
  EXPECT_EQ(v.num_bytes(), 0u);
  v.shape = {2, 0, 3};
  EXPECT_EQ(v.num_elements(), 0);
  v.shape = {2, 3, 4};
  EXPECT_EQ(v.num_elements(), 24);
  for (const DtypeRow& row : kDtypes) {
    v.dtype = row.dtype;
    EXPECT_EQ(v.num_bytes(), 24 * row.size) << row.name;
  }
  v.shape = {1 << 20, 1 << 20, 4};
  v.dtype = DataType::kFloat64;
  EXPECT_EQ(v.num_elements(), int64_t{1} << 42);
  EXPECT_EQ(v.num_bytes(), size_t{1} << 45);
}

}  // namespace
}  // namespace ranktime
