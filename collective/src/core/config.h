// Runtime configuration: every environment variable ranktime reads is declared and parsed here,
// once, at init(). A malformed value is an error naming the variable and the value.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ranktime {

enum class LogLevel { kTrace, kDebug, kInfo, kWarning, kError };

struct Config {
  // TIMELINE_FILENAME: rank 0 writes the timeline here; empty = off.
  std::string timeline_filename;
  // TIMELINE_MARK_CYCLES: a CYCLE_START instant per coordination cycle.
  bool timeline_mark_cycles = false;
  // TIMELINE_ALL_RANKS: every rank's processing lanes (Horovod keeps rank 0's only).
  bool timeline_all_ranks = true;
  // RANKTIME_FUSION_THRESHOLD: bytes one fused batch may hold; 0 disables fusion. 64 MiB keeps a
  // whole ResNet-50 step's small tensors in a handful of batches.
  int64_t fusion_threshold = int64_t{64} << 20;
  // RANKTIME_FUSION_MAX_TENSOR: tensors at least this large are reduced in place, unfused:
  // copying them costs more than the per-call latency fusion would save, and one huge packed
  // buffer is slower in Open MPI than its parts (see docs/benchmarks.md).
  int64_t fusion_max_tensor = int64_t{1} << 20;
  // RANKTIME_ALLREDUCE_CHUNK: the most bytes one MPI_Allreduce call reduces; larger buffers go
  // in several calls (0 = one call). Open MPI allocates a temporary as large as the call on
  // every call; at a few MiB the allocator reuses it, at tens of MiB it maps fresh pages every
  // time, and the page faults more than double the time (see docs/benchmarks.md).
  int64_t allreduce_chunk = int64_t{4} << 20;
  // RANKTIME_CYCLE_TIME_MS: the longest an idle rank waits before looking for work again.
  double cycle_time_ms = 5.0;
  // RANKTIME_STALL_WARNING_S / RANKTIME_STALL_SHUTDOWN_S (0 = never shut down).
  double stall_warning_s = 60.0;
  double stall_shutdown_s = 0.0;
  // RANKTIME_PEER_TIMEOUT_S: a rank that has heard nothing from a peer it waits on for this long
  // (heartbeats go every second), or whose collective has not returned for this long, declares
  // that peer lost and fails every pending and future operation (0 = wait forever).
  double peer_timeout_s = 60.0;
  // RANKTIME_STRAGGLER_THRESHOLD_MS: warn when one rank is last in most negotiations with a
  // median lag at least this large (0 = never). 5 ms is well above scheduling noise.
  double straggler_threshold_ms = 5.0;
  // RANKTIME_STRAGGLER_WARNING_INTERVAL_S: at most one straggler warning per this many seconds.
  double straggler_warning_interval_s = 60.0;
  // RANKTIME_LOG_LEVEL.
  LogLevel log_level = LogLevel::kWarning;
  // RANKTIME_TEST_CLOCK_SKEW_US: testing aid, shifts this process's clock.
  int64_t test_clock_skew_us = 0;
  // RANKTIME_HIERARCHICAL_ALLREDUCE (GPU path).
  bool hierarchical_allreduce = false;

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
