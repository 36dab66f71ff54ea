// JSON text building blocks for the trace writer: escaped strings and fixed-point numbers,
// written with std::to_chars (no locale, no printf, no allocation beyond the output string).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "text_buffer.h"

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

// Writes the shortest text that reads back as `value` ("20011.5", "-0.4", "0") at `p` (room
// for kMaxDouble bytes); NaN and infinities, which JSON cannot hold, as null. Returns its end.
inline constexpr size_t kMaxDouble = 32;
char* write_double(char* p, double value);

// The same text appended to `out`.
inline void append_double(double value, TextBuffer* out) {
  char text[kMaxDouble];
  out->append(std::string_view(text, static_cast<size_t>(write_double(text, value) - text)));
}

inline void append_int(int64_t value, TextBuffer* out) {
  char text[24];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  out->append(std::string_view(text, static_cast<size_t>(result.ptr - text)));
}

}  // namespace ranktime::timeline::json
