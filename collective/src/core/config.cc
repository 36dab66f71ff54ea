// Parses the environment into a Config (see config.h for what each variable means).
#include "core/config.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace ranktime {
namespace {

[[noreturn]] void fail(const char* name, const std::string& value, const char* expected) {
  throw ConfigError(std::string(name) + "='" + value + "' is not valid: expected " + expected);
}

bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "true" || v == "TRUE" || v == "True" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "FALSE" || v == "False" || v == "no" || v == "off")
    return false;
  fail(name, v, "1/0, true/false, yes/no or on/off");
}

double parse_number(const char* name, const std::string& v, double min, bool min_inclusive,
                    const char* expected) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !std::isfinite(x) ||
      (min_inclusive ? x < min : x <= min)) {
    fail(name, v, expected);
  }
  return x;
}

int64_t parse_int(const char* name, const std::string& v, int64_t min, const char* expected) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || x < min) fail(name, v, expected);
  return x;
}

LogLevel parse_log_level(const char* name, const std::string& v) {
  for (auto level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning,
                     LogLevel::kError}) {
    if (v == log_level_name(level)) return level;
  }
  if (v == "warn") return LogLevel::kWarning;
  fail(name, v, "one of trace, debug, info, warning, error");
}

}  // namespace

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

Config parse_config(const EnvLookup& lookup) {
  Config c;
  auto get = [&](const char* name) { return lookup(name); };
  if (auto v = get("TIMELINE_FILENAME")) c.timeline_filename = *v;
  if (auto v = get("TIMELINE_MARK_CYCLES"))
    c.timeline_mark_cycles = parse_bool("TIMELINE_MARK_CYCLES", *v);
  if (auto v = get("TIMELINE_ALL_RANKS"))
    c.timeline_all_ranks = parse_bool("TIMELINE_ALL_RANKS", *v);
  if (auto v = get("RANKTIME_FUSION_THRESHOLD"))
    c.fusion_threshold = parse_int("RANKTIME_FUSION_THRESHOLD", *v, 0, "a byte count >= 0");
  if (auto v = get("RANKTIME_FUSION_MAX_TENSOR"))
    c.fusion_max_tensor = parse_int("RANKTIME_FUSION_MAX_TENSOR", *v, 0, "a byte count >= 0");
  if (auto v = get("RANKTIME_ALLREDUCE_CHUNK"))
    c.allreduce_chunk = parse_int("RANKTIME_ALLREDUCE_CHUNK", *v, 0, "a byte count >= 0");
  if (auto v = get("RANKTIME_CYCLE_TIME_MS"))
    c.cycle_time_ms = parse_number("RANKTIME_CYCLE_TIME_MS", *v, 0, false, "milliseconds > 0");
  if (auto v = get("RANKTIME_STALL_WARNING_S"))
    c.stall_warning_s = parse_number("RANKTIME_STALL_WARNING_S", *v, 0, false, "seconds > 0");
  if (auto v = get("RANKTIME_STALL_SHUTDOWN_S"))
    c.stall_shutdown_s = parse_number("RANKTIME_STALL_SHUTDOWN_S", *v, 0, true, "seconds >= 0");
  if (auto v = get("RANKTIME_PEER_TIMEOUT_S"))
    c.peer_timeout_s = parse_number("RANKTIME_PEER_TIMEOUT_S", *v, 0, true, "seconds >= 0");
  if (auto v = get("RANKTIME_STRAGGLER_THRESHOLD_MS")) {
    c.straggler_threshold_ms =
        parse_number("RANKTIME_STRAGGLER_THRESHOLD_MS", *v, 0, true, "milliseconds >= 0");
  }
  if (auto v = get("RANKTIME_STRAGGLER_WARNING_INTERVAL_S")) {
    c.straggler_warning_interval_s =
        parse_number("RANKTIME_STRAGGLER_WARNING_INTERVAL_S", *v, 0, true, "seconds >= 0");
  }
  if (auto v = get("RANKTIME_LOG_LEVEL")) c.log_level = parse_log_level("RANKTIME_LOG_LEVEL", *v);
  if (auto v = get("RANKTIME_TEST_CLOCK_SKEW_US")) {
    c.test_clock_skew_us = parse_int("RANKTIME_TEST_CLOCK_SKEW_US", *v, INT64_MIN / 2,
                                     "an integer number of microseconds");
  }
  if (auto v = get("RANKTIME_HIERARCHICAL_ALLREDUCE"))
    c.hierarchical_allreduce = parse_bool("RANKTIME_HIERARCHICAL_ALLREDUCE", *v);
  return c;
}

Config config_from_environment() {
  return parse_config([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

std::vector<std::pair<std::string, std::string>> Config::describe() const {
  auto num = [](double x) {  // shortest text that parses back to the same double
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
    return std::string(buf, ec == std::errc() ? end : buf);
  };
  return {{"TIMELINE_FILENAME", timeline_filename},
          {"TIMELINE_MARK_CYCLES", timeline_mark_cycles ? "1" : "0"},
          {"TIMELINE_ALL_RANKS", timeline_all_ranks ? "1" : "0"},
          {"RANKTIME_FUSION_THRESHOLD", std::to_string(fusion_threshold)},
          {"RANKTIME_FUSION_MAX_TENSOR", std::to_string(fusion_max_tensor)},
          {"RANKTIME_ALLREDUCE_CHUNK", std::to_string(allreduce_chunk)},
          {"RANKTIME_CYCLE_TIME_MS", num(cycle_time_ms)},
          {"RANKTIME_STALL_WARNING_S", num(stall_warning_s)},
          {"RANKTIME_STALL_SHUTDOWN_S", num(stall_shutdown_s)},
          {"RANKTIME_PEER_TIMEOUT_S", num(peer_timeout_s)},
          {"RANKTIME_STRAGGLER_THRESHOLD_MS", num(straggler_threshold_ms)},
          {"RANKTIME_STRAGGLER_WARNING_INTERVAL_S", num(straggler_warning_interval_s)},
          {"RANKTIME_LOG_LEVEL", log_level_name(log_level)},
          {"RANKTIME_TEST_CLOCK_SKEW_US", std::to_string(test_clock_skew_us)},
          {"RANKTIME_HIERARCHICAL_ALLREDUCE", hierarchical_allreduce ? "1" : "0"}};
}

}  // namespace ranktime
