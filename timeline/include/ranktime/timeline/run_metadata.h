// RunMetadata: what a trace file says about its run (ranks, hosts, clocks, settings), written as
// `M` events on pid 0 when the file opens and updated in its closing `ranktime_run_end`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ranktime::timeline {

struct RunMetadata {
  int ranks = 1;
  std::vector<std::string> hostnames;  // per rank
  std::vector<int64_t> pids;           // per rank
  int64_t start_time_since_epoch_us = 0;
  int64_t start_ns = 0;  // rank 0's clock at the run start: timestamps are (ts_ns - start_ns)
  std::vector<std::pair<std::string, std::string>> config;  // environment settings in force
  std::vector<double> clock_offsets_us;      // per rank, rank clock minus rank 0 clock
  std::vector<double> clock_uncertainty_us;  // per rank, half the best round trip
  bool mark_cycles = false;
  bool all_ranks = true;
  // Per rank, its place on the hosts (from the job's real placement): among the ranks on its
  // host, and among the ranks with the same local rank (one per host; Horovod's cross rank).
  std::vector<int> local_ranks, local_sizes, cross_ranks, cross_sizes;
  // TIMELINE_RANKS as set ("0,5,17", "slowest:4"): only those ranks' processing lanes (and rank
  // 0's) are written; "" when all_ranks says whose are.
  std::string timeline_ranks;
};

}  // namespace ranktime::timeline
