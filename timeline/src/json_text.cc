// JSON text building blocks for the trace writer.
#include "json_text.h"

#include <cmath>
#include <cstring>

namespace ranktime::timeline::json {

namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the well-formed UTF-8 sequence that starts at s[i] (a byte >= 0x80), or 0 when it is
// ill-formed; then *skip is the length of its maximal ill-formed prefix (at least 1), which is
// replaced by one U+FFFD as Unicode recommends.
size_t utf8_sequence(std::string_view s, size_t i, size_t* skip) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    *skip = 1;
    return 0;
  }
  for (size_t k = 1; k < length; ++k) {
    if (i + k >= s.size()) {
      *skip = k;
      return 0;
    }
    const auto c = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (c >= low && c <= high) : is_continuation(c);
    if (!ok) {
      *skip = k;
      return 0;
    }
  }
  return length;
}

}  // namespace

void append_string(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t run_start = 0;  // bytes that need no escaping are copied in runs
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      size_t skip = 0;
      const size_t length = utf8_sequence(s, i, &skip);
      if (length != 0) {
        i += length;
        continue;
      }
      out->append(s.data() + run_start, i - run_start);
      out->append(kReplacement);
      i += skip;
      run_start = i;
      continue;
    }
    out->append(s.data() + run_start, i - run_start);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        const char escape[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(escape, sizeof(escape));
      }
    }
    ++i;
    run_start = i;
  }
  out->append(s.data() + run_start, s.size() - run_start);
  out->push_back('"');
}

char* write_us3(char* p, int64_t ns) {
  // Unsigned magnitude: -INT64_MIN does not fit in int64_t.
  uint64_t magnitude = static_cast<uint64_t>(ns);
  if (ns < 0) {
    *p++ = '-';
    magnitude = 0 - magnitude;
  }
  p = std::to_chars(p, p + 20, magnitude / 1000).ptr;
  const auto fraction = static_cast<unsigned>(magnitude % 1000);
  p[0] = '.';
  p[1] = static_cast<char>('0' + fraction / 100);
  p[2] = static_cast<char>('0' + fraction / 10 % 10);
  p[3] = static_cast<char>('0' + fraction % 10);
  return p + 4;
}

char* write_double(char* p, double value) {
  if (!std::isfinite(value)) {
    std::memcpy(p, "null", 4);
    return p + 4;
  }
  return std::to_chars(p, p + kMaxDouble, value).ptr;
}

}  // namespace ranktime::timeline::json
