// Runtime configuration: one field per environment variable ranktime reads, parsed once, at
// init(). The variables themselves, their defaults, parsers and reasons are the rows of the
// settings table (core/settings.cc); a malformed value is an error naming the variable and the
// value.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ranktime {

enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError };

// TIMELINE_STEPS=START:END[:EVERY]: the steps whose lanes, negotiations and ticks the timeline
// records (START <= step < END, every EVERY-th from START). Off: every step.
struct StepWindow {
  bool on = false;
  int64_t start = 0;
  int64_t end = 0;
  int64_t every = 1;
  bool contains(int64_t step) const {
    return !on || (step >= start && step < end && (step - start) % every == 0);
  }
};

// TIMELINE_RANKS: whose processing lanes the timeline writes besides rank 0's, either a fixed
// list or the `slowest` ranks most often last in the lateness window (inspection/lane_choice.h).
// Off: TIMELINE_ALL_RANKS decides.
struct LaneRanks {
  bool on = false;
  std::vector<int> ranks;  // the list, ascending, rank 0 included
  int slowest = 0;         // > 0: `slowest:K`
  std::string text;        // as the variable spelled it
};

// RANKTIME_METRICS_ADDR=HOST:PORT: where rank 0 serves its metrics. HOST is always named (an
// address or a name; [::1] for IPv6), so no interface is listened on by accident. Off: "".
struct ListenAddress {
  bool on = false;
  std::string host;
  int port = 0;
  std::string text;  // as the variable spelled it
};

struct Config {
  Config();  // every setting at its default

  std::string timeline_filename;
  bool timeline_mark_cycles;
  bool timeline_all_ranks;
  StepWindow timeline_steps;
  double timeline_max_mb;
  int64_t timeline_keep_files;
  int64_t fusion_threshold;
  int64_t fusion_max_tensor;
  int64_t allreduce_chunk;
  int64_t cache_capacity;
  double cycle_time_ms;
  double spin_us;
  double stall_warning_s;
  double stall_shutdown_s;
  double peer_timeout_s;
  double straggler_threshold_ms;
  double straggler_warning_interval_s;
  LogLevel log_level;
  int64_t test_clock_skew_us;
  bool hierarchical_allreduce;
  std::string status_file;
  std::string test_fail_local;
  LaneRanks timeline_ranks;
  ListenAddress metrics_addr;
  double alert_lag_ms;
  int64_t alert_times;
  int64_t alert_steps;
  double alert_cost_pct;
  std::string alert_command;
  double alert_command_timeout_s;
  double alert_interval_s;
  int64_t timeline_on_alert;
  bool stall_check_disable;
  double start_timeout_s;
  int64_t elastic_attempt;
  std::string elastic_restart_reason;
  std::string elastic_dir;

  // Not settings: what parse_config() noticed (a Horovod variable that ours overrode), for init()
  // to log.
  std::vector<std::string> warnings;

  // RANKTIME_SPIN_US as a duration (at most an hour: longer is spinning for good).
  std::chrono::nanoseconds spin() const {
    return std::chrono::nanoseconds(static_cast<int64_t>(std::min(spin_us, 3.6e9) * 1000));
  }
  // The settings as (variable, value) pairs, for the timeline's run metadata and debug logs.
  std::vector<std::pair<std::string, std::string>> describe() const;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads the configuration through `lookup` (getenv in production, a map in tests).
// Throws ConfigError naming the variable and value on malformed input.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
Config parse_config(const EnvLookup& lookup);
Config config_from_environment();

const char* log_level_name(LogLevel level);

}  // namespace ranktime
