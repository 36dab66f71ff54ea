// Reference 16-bit float conversions for the tests, written from the formats' definitions in
// double precision (independent of ranktime/half.h's bit tricks). Round to nearest, ties to even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ranktime::reference {

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool bfloat16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// The value of a non-NaN float16: subnormals are man * 2^-24, normals (1024 + man) * 2^(exp-25).
inline double half_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  double magnitude;
  if (exp == 0x1f) {
    magnitude = HUGE_VAL;
  } else if (exp == 0) {
    magnitude = std::ldexp(man, -24);
  } else {
    magnitude = std::ldexp(1024 + man, exp - 25);
  }
  return (h & 0x8000) ? -magnitude : magnitude;
}

// The float16 nearest to a non-NaN float. 65520 (halfway between the largest finite value, whose
// mantissa is odd, and 2^16) and above round to infinity.
inline uint16_t round_to_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int exp = e - 1 < -14 ? -14 : e - 1;
  // Units of the last place at this exponent; the quotient is exact and nearbyint rounds it to
  // nearest even (the default rounding mode).
  const double n = std::nearbyint(a / std::ldexp(1.0, exp - 10));
  if (exp == -14 && n < 1024) return static_cast<uint16_t>(sign | static_cast<int>(n));
  return static_cast<uint16_t>(sign | (((exp + 15) << 10) + static_cast<int>(n) - 1024));
}

// The bfloat16 nearest to a non-NaN float. bfloat16 is the top half of a float; the candidates are
// the truncation and the next value up in magnitude (2^128 past the largest finite bfloat16,
// standing in for infinity).
inline uint16_t round_to_bfloat16(float f) {
  const uint32_t x = bits_of(f);
  const auto down = static_cast<uint16_t>(x >> 16);
  if ((x & 0xffff) == 0) return down;
  const auto up = static_cast<uint16_t>(down + 1);
  const double value = std::fabs(static_cast<double>(f));
  const double low = std::fabs(static_cast<double>(float_of(static_cast<uint32_t>(down) << 16)));
  const double high =
      (up & 0x7fff) == 0x7f80
          ? std::ldexp(1.0, 128)
          : std::fabs(static_cast<double>(float_of(static_cast<uint32_t>(up) << 16)));
  if (value - low < high - value) return down;
  if (value - low > high - value) return up;
  return (down & 1) ? up : down;
}

}  // namespace ranktime::reference
