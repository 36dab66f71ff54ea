// Tests for ranktime/half.h against reference conversions written from the formats' definitions
// (reference_float.h), which are in turn checked against the compiler's _Float16 where it has one.
#include "ranktime/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference_float.h"

namespace ranktime {
namespace {

using reference::bfloat16_is_nan;
using reference::bits_of;
using reference::float_of;
using reference::half_is_nan;
using reference::half_value;
using reference::round_to_bfloat16;
using reference::round_to_half;

// The float16 rounding decision points: each finite half value, the midpoints to its neighbours,
// and one float ulp either side of each, both signs.
std::vector<float> float16_boundary_floats() {
  std::vector<float> out;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const auto here = static_cast<float>(half_value(static_cast<uint16_t>(h)));
    const float next = h + 1 < 0x7c00 ? static_cast<float>(half_value(static_cast<uint16_t>(h + 1)))
                                      : 65536.0f;  // where infinity starts to win
    const float mid = here + (next - here) / 2;    // exact: both are coarse float values
    for (float f : {here, mid}) {
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, 1e30f)}) {
        out.push_back(g);
        out.push_back(-g);
      }
    }
  }
  return out;
}

// Floats spread over every exponent: a stride through all bit patterns plus random ones (no NaNs).
std::vector<float> spread_floats() {
  std::vector<float> out;
  auto add = [&out](uint32_t b) {
    if (!std::isnan(float_of(b))) out.push_back(float_of(b));
  };
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4093) add(static_cast<uint32_t>(b));
  std::mt19937 rng(2024);
  for (int i = 0; i < 1'000'000; ++i) add(static_cast<uint32_t>(rng()));
  return out;
}

#ifdef __FLT16_MAX__  // the compiler has IEEE binary16 arithmetic (GCC 12 on x86-64 does)
uint16_t compiler_to_half(float f) {
  const auto h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

TEST(HalfReference, AgreesWithTheCompilersFloat16) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    if (half_is_nan(h)) continue;
    _Float16 x;
    std::memcpy(&x, &h, 2);
    ASSERT_EQ(half_value(h), static_cast<double>(x)) << std::hex << i;
  }
  for (const auto& floats : {float16_boundary_floats(), spread_floats()}) {
    for (float f : floats) {
      ASSERT_EQ(round_to_half(f), compiler_to_half(f)) << std::hex << "float 0x" << bits_of(f);
    }
  }
}
#endif

TEST(Half, EveryFloat16RoundTripsThroughFloat) {
  int checked = 0;
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    if (half_is_nan(h)) continue;
    const float f = half_to_float(h);
    ASSERT_EQ(static_cast<double>(f), half_value(h)) << std::hex << "half 0x" << i;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << "half 0x" << i;
    ASSERT_EQ(float_to_half(f), h) << std::hex << "half 0x" << i;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);
}

TEST(Half, KnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(bits_of(half_to_float(0x8000)), 0x80000000u);      // -0
  EXPECT_EQ(half_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(0.1f), 0x2e66);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
}

TEST(Half, FloatToHalfRoundsToNearestEvenAtEveryBoundary) {
  for (float f : float16_boundary_floats()) {
    ASSERT_EQ(float_to_half(f), round_to_half(f))
        << std::hex << "float 0x" << bits_of(f) << " (" << f << ")";
  }
}

TEST(Half, FloatToHalfRoundsToNearestEvenAcrossAllExponents) {
  for (float f : spread_floats()) {
    ASSERT_EQ(float_to_half(f), round_to_half(f))
        << std::hex << "float 0x" << bits_of(f) << " (" << f << ")";
  }
}

TEST(Half, OverflowGoesToInfinity) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(Half, UnderflowGoesToSignedZero) {
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // the tie rounds to even: zero
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Half, NanStaysNan) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<uint16_t>(i);
    if (!half_is_nan(h)) continue;
    ASSERT_TRUE(std::isnan(half_to_float(h))) << std::hex << i;
    ASSERT_TRUE(half_is_nan(float_to_half(half_to_float(h)))) << std::hex << i;
  }
  // Float NaNs whose payload lies only in the low mantissa bits must not become infinity.
  for (uint32_t b : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = float_to_half(float_of(b));
    EXPECT_TRUE(half_is_nan(h)) << std::hex << b << " -> " << h;
    EXPECT_EQ(h & 0x8000, (b >> 16) & 0x8000) << "sign of 0x" << std::hex << b;
  }
}

TEST(BFloat16, EveryBFloat16RoundTripsThroughFloat) {
  for (uint32_t i = 0; i <= 0xffff; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = bfloat16_to_float(b);
    ASSERT_EQ(bits_of(f), i << 16);
    if (bfloat16_is_nan(b)) continue;
    ASSERT_EQ(float_to_bfloat16(f), b) << std::hex << "bfloat16 0x" << i;
  }
}

TEST(BFloat16, RoundsToNearestEvenAtEveryBoundary) {
  for (uint32_t hi = 0; hi <= 0xffff; ++hi) {
    if (bfloat16_is_nan(static_cast<uint16_t>(hi)) || (hi & 0x7fff) == 0x7f80) continue;
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float f = float_of(hi << 16 | lo);
      ASSERT_EQ(float_to_bfloat16(f), round_to_bfloat16(f)) << std::hex << "float 0x" << bits_of(f);
    }
  }
}

TEST(BFloat16, RoundsToNearestEvenAcrossAllExponents) {
  for (float f : spread_floats()) {
    ASSERT_EQ(float_to_bfloat16(f), round_to_bfloat16(f)) << std::hex << "float 0x" << bits_of(f);
  }
}

TEST(BFloat16, KnownValuesAndOverflow) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bfloat16(float_of(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bfloat16(float_of(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bfloat16(float_of(0x7f7f7fff)), 0x7f7f);  // largest finite
  EXPECT_EQ(float_to_bfloat16(float_of(0x7f7f8000)), 0x7f80);  // tie past it: infinity
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
}

TEST(BFloat16, NanStaysNan) {
  for (uint32_t b :
       {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = float_to_bfloat16(float_of(b));
    EXPECT_TRUE(bfloat16_is_nan(h)) << std::hex << b << " -> " << h;
    EXPECT_EQ(h & 0x8000, (b >> 16) & 0x8000) << "sign of 0x" << std::hex << b;
  }
  EXPECT_TRUE(std::isnan(bfloat16_to_float(0x7fc0)));
}

}  // namespace
}  // namespace ranktime
