// How the checker (and the repair) read an event's args and write values into messages.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace ranktime::timeline {

// Timestamps carry three decimals; allow one unit of the last for rounding.
inline constexpr double kTsEpsilon = 0.0011;

inline std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

inline std::string format_ts(double ts) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.3f", ts);
  return buffer;
}

inline bool is_integer(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_number_integer();
}
inline bool is_number(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_number();
}
inline bool is_string(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_string();
}

}  // namespace ranktime::timeline
