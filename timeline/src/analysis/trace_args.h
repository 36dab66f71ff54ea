// Reading an event's args leniently: a missing or mistyped value reads as the fallback (the
// checker reports it; the analysis carries on).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace ranktime::timeline::analysis {

inline int64_t int_arg(const nlohmann::json& args, const char* key, int64_t fallback) {
  if (!args.is_object()) return fallback;
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return fallback;
  return it->is_number_float() ? static_cast<int64_t>(it->get<double>()) : it->get<int64_t>();
}

inline double number_arg(const nlohmann::json& args, const char* key, double fallback) {
  if (!args.is_object()) return fallback;
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

inline bool has_arg(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key);
}

inline std::vector<double> number_list(const nlohmann::json& args, const char* key) {
  std::vector<double> out;
  if (!args.is_object() || !args.contains(key) || !args[key].is_array()) return out;
  for (const auto& v : args[key]) out.push_back(v.is_number() ? v.get<double>() : 0.0);
  return out;
}

}  // namespace ranktime::timeline::analysis
