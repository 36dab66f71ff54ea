// Trace analysis behind `ranktime summary` and `ranktime report`: lateness and wall-clock waits
// per rank, where the time went, top tensors, fusion, bandwidth and (optionally) steps, computed
// in one pass over a streamed trace with bounded memory (state grows with tensors, ranks and
// steps, never with the number of events).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ranktime/timeline/trace_reader.h"
#include "ranktime/timeline/trace_waits.h"

namespace ranktime::timeline {

// Log-bucketed histogram for quantiles in bounded memory: buckets grow by 1% from 0.01 µs, and
// each keeps its count and sum, so a quantile is reported as the mean of the values in its
// bucket: within 1% of the exact value, and exact when a bucket's values are equal. Zero and
// negative values share a bucket at 0. Mean, min and max are exact. Deterministic, unlike a
// sampled reservoir; memory grows with the largest value's bucket (about 1,500 for 20 ms).
class LogHistogram {
 public:
  void add(double value);
  double quantile(double q) const;  // q in [0, 1]; 0 when empty
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  double mean() const { return count_ == 0 ? 0 : sum_ / static_cast<double>(count_); }
  double min() const { return count_ == 0 ? 0 : min_; }
  double max() const { return count_ == 0 ? 0 : max_; }

 private:
  std::vector<uint64_t> counts_;  // grown on demand up to the largest bucket used
  std::vector<double> sums_;
  uint64_t count_ = 0;
  double sum_ = 0;
  double min_ = 0;
  double max_ = 0;
};

// Step marks (STEP slices on pid 0, one thread per rank). They may come after their step's
// negotiations in the file, so a per-step analysis gathers them in a first pass.
struct StepMarks {
  // Per rank: (start ts, step number), sorted by start.
  std::vector<std::vector<std::pair<double, int64_t>>> by_rank;
  bool empty() const;
  // The step rank r was in at `ts` (its last mark at or before ts); -1 before its first mark or
  // for a rank without marks.
  int64_t step_at(int rank, double ts) const;
};

class StepMarkCollector {
 public:
  void add(const TraceEvent& event);
  StepMarks finish();

 private:
  std::unordered_map<int64_t, int64_t> thread_rank_;  // pid-0 tid -> r of "steps rank r"
  StepMarks marks_;
};

struct SummaryOptions {
  // Time window, in trace microseconds: negotiations, slices and markers that begin inside it.
  std::optional<double> from_us;
  std::optional<double> to_us;
  // Ranks to analyse (empty: all). Lateness is recomputed among these ranks only: lags are
  // measured from the first of them to become ready, and the last of them is "last".
  std::vector<int> ranks;
  // Operations to analyse ("ALLREDUCE", ...; empty: all): their negotiations and slices.
  std::vector<std::string> operations;
  size_t top_k = 10;
  // Per-step figures (Summary::steps). With step marks (from a first pass: StepMarkCollector) a
  // negotiation belongs to the step its first-ready rank was in; without, the n-th negotiation of
  // each tensor is taken to be step n (a training step reduces every gradient once). Ranks from
  // 4096 up are left out of the per-step figures.
  bool by_step = false;
  StepMarks step_marks;
};

struct RunInfo {
  int ranks = 0;  // from the ranktime_run metadata; 0 when absent
  std::vector<std::string> hostnames;
  bool has_run_metadata = false;
  bool has_run_end = false;  // ranktime_run_end present: the run closed the file cleanly
  int64_t events_dropped = 0;
  int64_t start_time_since_epoch_us = 0;
  // Clock offsets (rank r's clock minus rank 0's) and their uncertainty, in µs: at the start and,
  // after a clean close, at the end. Empty when absent.
  std::vector<double> clock_offsets_us;
  std::vector<double> clock_uncertainty_us;
  std::vector<double> final_clock_offsets_us;
  std::vector<double> final_clock_uncertainty_us;
  std::vector<std::pair<std::string, std::string>> config;  // the settings in force
  // Whose processing lanes the run wrote: every rank's, or (all_ranks false) rank 0's and those
  // TIMELINE_RANKS chose (timeline_ranks, as set; "" with TIMELINE_ALL_RANKS=0). The others'
  // missing lanes are expected.
  bool all_ranks = true;
  std::string timeline_ranks;
};

struct RankLateness {
  int rank = 0;
  uint64_t negotiations = 0;  // negotiations with a tick of this rank
  uint64_t times_last = 0;    // how often it was the last to become ready
  double mean_lag_us = 0;     // behind the first rank
  double p50_lag_us = 0;
  double p95_lag_us = 0;
  double max_lag_us = 0;
  // Wall-clock time the other ranks waited for it: the sum over the other ranks r of the union
  // over time of the intervals in which r had a tensor ready and this rank had not.
  double caused_wait_us = 0;
  // Wall-clock time it waited for others: the union over time of [its readiness, the last
  // rank's readiness] over its negotiations.
  double waited_us = 0;
};

struct PhaseStat {
  std::string op;     // "ALLREDUCE", ...
  std::string phase;  // the slice name: the op itself, a sub-phase, or "NEGOTIATE_<OP>"
  bool negotiation = false;
  uint64_t count = 0;  // slices; a fused batch's shared slice counts once
  double total_us = 0;
  double min_us = 0;
  double max_us = 0;
  // Time at least one such slice was open, per lane: the union over time of its slices on each
  // rank (on the negotiate lanes of all tensors together, for a negotiation), averaged over the
  // rank lanes. Overlapping slices (tensors queued together) count once.
  double busy_us = 0;
  double share = 0;                     // busy / wall time: at most 1
  std::vector<double> busy_us_by_rank;  // rank slices: the union on each rank
};

struct TensorStat {
  std::string name;
  int64_t pid = 0;
  int set_ranks = 0;  // its process set's size, from the name's label; 0: the whole job
  uint64_t negotiations = 0;
  double wait_total_us = 0;  // sum of NEGOTIATE_* slice durations
  double wait_max_us = 0;
  uint64_t operations = 0;         // operation slices over all rank lanes
  double processing_total_us = 0;  // sum of operation slice durations, over all rank lanes
  double processing_max_us = 0;
  int lanes = 0;  // rank lanes the operations came from
};

struct FusionStat {
  std::string op;
  uint64_t batches = 0;  // summed over rank lanes
  uint64_t tensors = 0;
  uint64_t bytes = 0;
  uint64_t max_tensors = 0;
  uint64_t max_bytes = 0;
  int lanes = 0;
};

// nccl-tests definitions: algbw = S / t with t the collective sub-phase(s) of a batch, S the
// batch's bytes (for allgather the gathered output, bytes x ranks); busbw = algbw x 2(n-1)/n for
// allreduce, (n-1)/n for allgather, 1 for broadcast.
struct BandwidthStat {
  std::string op;
  int ranks = 0;             // n: the run's ranks, or the process set's for a set's tensors
  uint64_t batches = 0;      // batches with a timed collective, summed over rank lanes
  uint64_t bytes = 0;        // S summed over those batches
  double collective_us = 0;  // collective time summed over those batches
  double algbw_gbps = 0;     // bytes / collective time, in GB/s (1e9)
  double busbw_gbps = 0;
  double bus_factor = 0;
  int lanes = 0;  // rank lanes whose batches are counted here
};

struct CycleStat {
  uint64_t cycles = 0;  // CYCLE_START markers in the window
  double mean_interval_us = 0;
  double p50_interval_us = 0;
  double max_interval_us = 0;
  double batches_per_cycle = 0;  // per rank lane
};

// One rank in one step.
struct StepRankStat {
  double start_lag_us = -1;   // its STEP mark behind the first rank's; -1 without marks
  double ready_lag_us = -1;   // its last tensor's readiness behind the first rank's; -1: none
  double caused_wait_us = 0;  // what the others waited for it in this step (as in RankLateness)
  double waited_us = 0;       // what it waited for the others in this step
};

struct StepStat {
  int64_t step = 0;
  double begin_us = 0;  // the first STEP mark, else the first readiness
  uint64_t negotiations = 0;
  int last_rank = -1;               // the rank the others waited for most in this step; -1: none
  double waited_for_last_us = 0;    // that rank's caused_wait_us
  double waited_us = 0;             // all ranks' waits in this step
  std::vector<StepRankStat> ranks;  // by rank
};

struct Summary {
  RunInfo run;
  double first_ts_us = 0;
  double last_ts_us = 0;
  double wall_us = 0;
  uint64_t events = 0;              // events seen (all)
  uint64_t negotiations = 0;        // negotiations in the window
  uint64_t negotiation_errors = 0;  // negotiations whose E carries an error
  uint64_t operation_errors = 0;
  int rank_lanes = 0;                  // rank lanes with operation slices
  std::vector<int> lane_ranks;         // ... their ranks, ascending
  std::vector<RankLateness> lateness;  // by rank
  int slowest_rank = -1;               // most caused waiting; -1 when no rank caused any
  // The ranks' waiting in all: the sum of RankLateness::waited_us, out of analysed ranks x wall.
  double waited_us = 0;
  double rank_wall_us = 0;
  std::vector<PhaseStat> phases;
  std::vector<TensorStat> top_wait;        // top-k by negotiation wait
  std::vector<TensorStat> top_processing;  // top-k by processing time
  std::vector<FusionStat> fusion;
  std::vector<BandwidthStat> bandwidth;
  CycleStat cycles;
  // Per step, with SummaryOptions::by_step. steps_from_marks says how steps were found.
  std::vector<StepStat> steps;
  bool steps_from_marks = false;
};

// busbw / algbw for `op` ("ALLREDUCE", ...) on n ranks, per nccl-tests; 0 when not applicable.
double bus_bandwidth_factor(const std::string& op, int ranks);

// The analysis behind `ranktime summary` and `report`: feed every event of a trace to add(), then
// call finish() once. One pass; each analysis (lateness, waits, phases, tensors, fusion,
// bandwidth, steps, cycles) is a file of its own in timeline/src/analysis/ (analysis.h).
class TraceSummarizer {
 public:
  explicit TraceSummarizer(SummaryOptions options = {});
  ~TraceSummarizer();
  TraceSummarizer(TraceSummarizer&&) noexcept;
  TraceSummarizer& operator=(TraceSummarizer&&) noexcept;
  void add(const TraceEvent& event);
  Summary finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ranktime::timeline
