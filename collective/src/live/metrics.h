// What rank 0's metrics endpoint shows: a snapshot the background loop publishes (per step, and
// at least once a second), and its Prometheus text format (version 0.0.4). Pure: the server
// formats its own copy, so a scrape never holds the loop.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ranktime {

struct MetricsSnapshot {
  // Upper bounds of ranktime_step_seconds' histogram buckets, in seconds (+Inf after them).
  static constexpr std::array<double, 12> kStepBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                          0.1,   0.25,   0.5,   1,    2.5,   10};
  struct Rank {
    int rank = 0;
    std::string host;
    uint64_t times_last = 0;  // negotiations it was the last to be ready in, since start
    double lateness_median_s = 0, lateness_p95_s = 0;  // over the lateness window
    double cost_s = -1;  // what-if cost since start (seconds); < 0: not known
    bool stalled = false;
  };
  struct Operation {
    std::string op;  // "allreduce", ...
    uint64_t operations = 0;
    uint64_t bytes = 0;
  };

  int64_t steps = 0;  // rank 0's step marks
  double last_step_s = 0;
  std::array<uint64_t, kStepBuckets.size()> step_buckets{};  // not cumulative
  uint64_t step_count = 0;                                   // steps timed
  double step_sum_s = 0;
  std::vector<Rank> ranks;
  std::vector<Operation> operations;
  uint64_t alerts = 0;
  uint64_t timeline_bytes = 0;
  uint64_t events_dropped = 0;
};

// A label value as the text format wants it: backslash, double quote and newline escaped.
// Anything else passes (hostnames are untrusted, but inside quotes nothing else is special).
std::string escape_label_value(std::string_view text);

// The snapshot in the Prometheus text format 0.0.4.
std::string format_metrics(const MetricsSnapshot& s);

}  // namespace ranktime
