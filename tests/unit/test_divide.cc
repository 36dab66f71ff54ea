// Tests for divide_in_place (core/reduce.h), the second half of an average: integer types truncate
// toward zero, 16-bit floats divide in float and round back to nearest even.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/reduce.h"
#include "reference_float.h"

namespace ranktime {
namespace {

template <typename T>
std::vector<T> divided(std::vector<T> values, DataType dtype, int divisor) {
  divide_in_place(values.data(), static_cast<int64_t>(values.size()), dtype, divisor);
  return values;
}

TEST(DivideInPlace, Int8TruncatesTowardZero) {
  EXPECT_EQ(divided<int8_t>({-7, 7, -128, 127, 0, -1, 1}, DataType::kInt8, 2),
            (std::vector<int8_t>{-3, 3, -64, 63, 0, 0, 0}));
  EXPECT_EQ(divided<int8_t>({-8, 8, -128}, DataType::kInt8, 3), (std::vector<int8_t>{-2, 2, -42}));
}

TEST(DivideInPlace, UInt8) {
  EXPECT_EQ(divided<uint8_t>({255, 7, 1, 0}, DataType::kUInt8, 2),
            (std::vector<uint8_t>{127, 3, 0, 0}));
  EXPECT_EQ(divided<uint8_t>({255}, DataType::kUInt8, 100), (std::vector<uint8_t>{2}));
}

TEST(DivideInPlace, Int32) {
  const int32_t lo = std::numeric_limits<int32_t>::min();
  const int32_t hi = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(divided<int32_t>({-7, 7, lo, hi, -3}, DataType::kInt32, 4),
            (std::vector<int32_t>{-1, 1, lo / 4, hi / 4, 0}));
}

TEST(DivideInPlace, Int64KeepsFullPrecision) {
  const int64_t hi = std::numeric_limits<int64_t>::max();
  const int64_t lo = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(divided<int64_t>({hi, lo, -9, (int64_t{1} << 53) + 1}, DataType::kInt64, 2),
            (std::vector<int64_t>{hi / 2, lo / 2, -4, (int64_t{1} << 52)}));
  EXPECT_EQ(divided<int64_t>({9'007'199'254'740'993}, DataType::kInt64, 3),
            (std::vector<int64_t>{3'002'399'751'580'331}));
}

TEST(DivideInPlace, Float32AndFloat64) {
  EXPECT_EQ(divided<float>({3.0f, -1.5f, 0.0f, 1.0f}, DataType::kFloat32, 2),
            (std::vector<float>{1.5f, -0.75f, 0.0f, 0.5f}));
  EXPECT_EQ(divided<float>({1.0f}, DataType::kFloat32, 3), (std::vector<float>{1.0f / 3}));
  EXPECT_EQ(divided<double>({3.0, -1.5, 1.0}, DataType::kFloat64, 3),
            (std::vector<double>{1.0, -0.5, 1.0 / 3}));
}

TEST(DivideInPlace, Float16DividesInFloatAndRoundsToNearestEven) {
  for (int divisor : {1, 2, 3, 7, 64}) {
    std::vector<uint16_t> values;
    for (uint32_t h = 0; h < 0x7c00; h += 7) {  // finite positive and negative halfs
      values.push_back(static_cast<uint16_t>(h));
      values.push_back(static_cast<uint16_t>(h | 0x8000));
    }
    std::vector<uint16_t> expected;
    for (uint16_t h : values) {
      const float quotient =
          static_cast<float>(reference::half_value(h)) / static_cast<float>(divisor);
      expected.push_back(reference::round_to_half(quotient));
    }
    EXPECT_EQ(divided(values, DataType::kFloat16, divisor), expected) << "divisor " << divisor;
  }
  EXPECT_EQ(divided<uint16_t>({0x4200 /* 3.0 */, 0x3c00 /* 1.0 */}, DataType::kFloat16, 2),
            (std::vector<uint16_t>{0x3e00 /* 1.5 */, 0x3800 /* 0.5 */}));
}

TEST(DivideInPlace, BFloat16DividesInFloatAndRoundsToNearestEven) {
  for (int divisor : {1, 2, 3, 7, 64}) {
    std::vector<uint16_t> values;
    for (uint32_t b = 0; b < 0x7f80; b += 5) {  // finite positive and negative bfloat16s
      values.push_back(static_cast<uint16_t>(b));
      values.push_back(static_cast<uint16_t>(b | 0x8000));
    }
    std::vector<uint16_t> expected;
    for (uint16_t b : values) {
      const float quotient =
          reference::float_of(static_cast<uint32_t>(b) << 16) / static_cast<float>(divisor);
      expected.push_back(reference::round_to_bfloat16(quotient));
    }
    EXPECT_EQ(divided(values, DataType::kBFloat16, divisor), expected) << "divisor " << divisor;
  }
}

TEST(DivideInPlace, BFloat16KnownValues) {
  // 3.0 / 3 = 1.0; 1.0 / 3 = 0.333... rounds to 0x3eab; -6.0 / 3 = -2.0.
  EXPECT_EQ(divided<uint16_t>({0x4040, 0x3f80, 0xc0c0}, DataType::kBFloat16, 3),
            (std::vector<uint16_t>{0x3f80, 0x3eab, 0xc000}));
  EXPECT_EQ(divided<uint16_t>({0x4040, 0xc0c0}, DataType::kBFloat16, 2),
            (std::vector<uint16_t>{0x3fc0, 0xc040}));
  EXPECT_EQ(divided<uint16_t>({0x4040, 0xc0c0}, DataType::kBFloat16, 4),
            (std::vector<uint16_t>{0x3f40, 0xbfc0}));
}

TEST(DivideInPlace, OnlyTheFirstNElementsChange) {
  std::vector<int32_t> values = {10, 20, 30, 40};
  divide_in_place(values.data(), 2, DataType::kInt32, 10);
  EXPECT_EQ(values, (std::vector<int32_t>{1, 2, 30, 40}));
  divide_in_place(values.data(), 0, DataType::kInt32, 10);
  EXPECT_EQ(values, (std::vector<int32_t>{1, 2, 30, 40}));
  std::vector<uint16_t> halfs = {0x4000, 0x4000};
  divide_in_place(halfs.data(), 1, DataType::kFloat16, 2);
  EXPECT_EQ(halfs, (std::vector<uint16_t>{0x3c00, 0x4000}));
}

TEST(DivideInPlace, DivisorOneChangesNothing) {
  EXPECT_EQ(divided<int8_t>({-128, 127}, DataType::kInt8, 1), (std::vector<int8_t>{-128, 127}));
  EXPECT_EQ(divided<double>({0.1, -3e300}, DataType::kFloat64, 1),
            (std::vector<double>{0.1, -3e300}));
}

}  // namespace
}  // namespace ranktime
