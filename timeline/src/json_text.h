// JSON text building blocks for the trace writer: escaped strings and fixed-point numbers,
// written with std::to_chars (no locale, no printf, no allocation beyond the output string).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace ranktime::timeline::json {

// Appends `s` as a JSON string literal, quotes included. Quotes, backslashes and control
// characters are escaped; valid UTF-8 is kept as is; each ill-formed UTF-8 sequence becomes
// U+FFFD, so the output is valid JSON whatever the bytes.
void append_string(std::string_view s, std::string* out);

// Writes a nanosecond count at `p` (room for kMaxUs3 bytes) as microseconds with exactly three
// decimals: 21013400 -> "21013.400", -1500 -> "-1.500"; returns its end. Integer arithmetic
// only, so no rounding drift.
inline constexpr size_t kMaxUs3 = 26;
char* write_us3(char* p, int64_t ns);

// Appends the shortest text that reads back as `value` ("20011.5", "-0.4", "0");
// NaN and infinities, which JSON cannot hold, as null.
void append_double(double value, std::string* out);
// The same text written at `p` (room for kMaxDouble bytes); returns its end.
inline constexpr size_t kMaxDouble = 32;
char* write_double(char* p, double value);

// Writes `value` at `p` (room for kMaxFixed3 bytes: a huge double in fixed notation is over 300
// characters) with exactly three decimals ("20000.250"), NaN and infinities as null; returns
// its end.
inline constexpr size_t kMaxFixed3 = 400;
char* write_fixed3(char* p, double value);

inline void append_int(int64_t value, std::string* out) {
  char text[24];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  out->append(text, result.ptr);
}

}  // namespace ranktime::timeline::json
