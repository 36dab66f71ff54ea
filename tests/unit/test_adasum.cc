// Tests for core/adasum.h: Horovod's pairwise formula (parallel gradients average, orthogonal ones
// add, a tiny norm keeps its coefficient of 1), each tensor of a fused buffer combined on its own,
// 16-bit floats, and what Adasum refuses.
#include "core/adasum.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ranktime/half.h"

namespace ranktime {
namespace {

using ::testing::HasSubstr;

TEST(Adasum, ParallelGradientsAverageAndOrthogonalOnesAdd) {
  std::vector<double> a = {1, 2, 3}, b = {3, 6, 9}, out(3);
  adasum_combine(a.data(), b.data(), out.data(), {3}, DataType::kFloat64);
  EXPECT_EQ(out, (std::vector<double>{2, 4, 6}));
  std::vector<double> c = {1, 0, 0}, d = {0, 5, 0};
  adasum_combine(c.data(), d.data(), out.data(), {3}, DataType::kFloat64);
  EXPECT_EQ(out, (std::vector<double>{1, 5, 0}));
}

TEST(Adasum, TheFormula) {
  // a.b = 2, |a|^2 = 1, |b|^2 = 8: (1 - 2/2) a + (1 - 2/16) b.
  const AdasumCoefficients c = adasum_coefficients(2, 1, 8);
  EXPECT_DOUBLE_EQ(c.a, 0.0);
  EXPECT_DOUBLE_EQ(c.b, 0.875);
  // Below sqrt(DBL_MIN) a norm's coefficient stays 1 (no division by a vanishing norm).
  const AdasumCoefficients zero = adasum_coefficients(0, 0, 4);
  EXPECT_DOUBLE_EQ(zero.a, 1.0);
  EXPECT_DOUBLE_EQ(zero.b, 1.0);
}

TEST(Adasum, EachTensorOfAFusedBufferHasItsOwnCoefficients) {
  // Tensor 1 parallel (averages), tensor 2 orthogonal (adds), in one buffer, written in place.
  std::vector<float> left = {1, 1, 2, 0}, right = {3, 3, 0, 7};
  adasum_combine(left.data(), right.data(), left.data(), {2, 2}, DataType::kFloat32);
  EXPECT_EQ(left, (std::vector<float>{2, 2, 2, 7}));
}

TEST(Adasum, SixteenBitFloatsCombineInDoubleAndRoundBack) {
  std::vector<uint16_t> a = {float_to_half(1.0f), float_to_half(2.0f)};
  std::vector<uint16_t> b = {float_to_half(3.0f), float_to_half(6.0f)};
  adasum_combine(a.data(), b.data(), a.data(), {2}, DataType::kFloat16);
  EXPECT_EQ(half_to_float(a[0]), 2.0f);
  EXPECT_EQ(half_to_float(a[1]), 4.0f);
  std::vector<uint16_t> c = {float_to_bfloat16(1.0f)}, d = {float_to_bfloat16(-1.0f)};
  adasum_combine(c.data(), d.data(), c.data(), {1}, DataType::kBFloat16);
  EXPECT_EQ(bfloat16_to_float(c[0]), 0.0f);  // opposite: a.b = -1, coefficients 1.5 each
}

TEST(Adasum, RefusesWhatHorovodsCpuAdasumRefuses) {
  TensorView v;
  v.dtype = DataType::kFloat32;
  v.shape = {4};
  EXPECT_EQ(adasum_refusal(OpType::kAllreduce, v, 8), "");
  EXPECT_EQ(adasum_refusal(OpType::kAllreduce, v, 1), "");
  EXPECT_THAT(adasum_refusal(OpType::kAllreduce, v, 6), HasSubstr("power of two ranks"));
  EXPECT_THAT(adasum_refusal(OpType::kReducescatter, v, 2), HasSubstr("allreduces only"));
  v.dtype = DataType::kInt32;
  EXPECT_THAT(adasum_refusal(OpType::kAllreduce, v, 2), HasSubstr("not int32"));
  v.dtype = DataType::kFloat64;
  v.device = 0;
  EXPECT_THAT(adasum_refusal(OpType::kAllreduce, v, 2), HasSubstr("CUDA device 0"));
}

}  // namespace
}  // namespace ranktime
