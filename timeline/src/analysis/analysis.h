// The analysis room: one reader pass, then one class per question a user asks (HTA's
// analyzers). TraceSummarizer (summarizer.cc) reads each event once, pairs B/E into slices once
// (SliceTracker), applies the window and the rank and operation choices once, and hands what
// it found to every analysis: negotiations with their ticks, closed slices on rank lanes,
// regions, profiler operators, whole fused batches and cycle markers. Each analysis keeps its
// own state, bounded by tensors, ranks and steps (never by events), and fills its part of the
// Summary in finish().
//
// A new analysis: a class deriving from Analysis in a file of its own here (NAME.h, NAME.cc),
// overriding the add()s it needs and finish(), and one line in summarizer.cc's list. Its figures
// go in a field of Summary (trace_analysis.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_waits.h"

namespace ranktime::timeline::analysis {

// Steps still gathering in a per-step analysis (steps, what-if). Negotiations complete nearly in
// step order, and other ranks' lanes reach the file a few cycles after them; a step this far
// behind the newest is closed.
inline constexpr size_t kMaxOpenSteps = 8;

// Trace µs to integer ns, for keys that must compare equal when the text did.
inline int64_t to_ns(double us) { return std::llround(us * 1000.0); }

// A rank's readiness in one negotiation (its tick): lag behind the negotiation's begin, and
// when it became ready, on rank 0's clock.
struct Tick {
  int rank;
  double lag_us;
  double ts;
};

// Each tick as (rank, ts), for the wait matrices.
std::vector<Readiness> readiness_of(const std::vector<Tick>& ticks);

// A NEGOTIATE_<OP> slice that began in the window, of a chosen operation.
struct Negotiation {
  int64_t pid = 0;  // the tensor's process
  std::string_view op;
  double begin_us = 0;
  double end_us = 0;
  // The tensor's n-th negotiation in the file, from 0 (those outside the window count too).
  int64_t occurrence = 0;
  const nlohmann::json* end_args = nullptr;  // its E's args: error, last_rank
  std::vector<Tick> ticks;                   // the chosen ranks' ticks, in file order
};

// A slice as the pass holds it while open: its B's name and ts; for an operation slice (top
// level on a rank lane) its B's args and its collective sub-phases' time, added as they close;
// for a negotiation, its ticks.
struct Slice {
  std::string name;
  double ts = 0;
  int64_t bytes = 0;
  int64_t fused_tensors = 1;
  bool error = false;
  double collective_begin = -1;  // first collective sub-phase's begin
  double collective_us = 0;      // collective sub-phases' total
  std::vector<Tick> ticks;
};

// An operation slice (top level on a rank lane) or a slice inside one (a sub-phase), closed, on a
// chosen rank, of a chosen operation that began in the window.
struct RankSlice {
  int rank = 0;
  int64_t pid = 0;
  const std::string* name = nullptr;  // the slice's: the operation's, or the sub-phase's
  double begin_us = 0;
  double end_us = 0;
  // The operation: the slice itself, or the one the sub-phase is in.
  const Slice* op = nullptr;
  bool subphase = false;
  bool error = false;  // operation slices: an error on its B or its E
};

// A region (ranktime.region, ranktime.torch.instrument) closed on a chosen rank, begun in the
// window: a slice on the "regions" thread of the rank's own process. Nested ones close first.
struct RegionSlice {
  int rank = 0;
  const std::string* name = nullptr;  // the user's text, untrusted
  double begin_us = 0;
  double end_us = 0;
  double blocked_us = 0;  // its args' blocked_us: time the rank was blocked in ranktime in it
};

// A torch.profiler operator (`ranktime merge`'s process "rank R (torch)") on a chosen rank, begun
// in the window, as it closes on its thread: its own time, less the operators inside it
// (OperatorNesting). Complete slices only; the merge's anchors are left out.
struct OperatorSlice {
  int rank = 0;
  const std::string* name = nullptr;  // the profiler's or the user's text, untrusted
  double begin_us = 0;
  double own_us = 0;
};

// A fused batch on one rank lane (a tensor alone is a batch of one), once all its tensors'
// operation slices have closed (or at the end of the input).
struct Batch {
  std::string_view op;
  int rank = 0;       // its lane
  int set_ranks = 0;  // its tensors' process set size; 0: the whole job
  int ranks = 0;      // n for bandwidth: the set's size, else the job's when the batch closed
  uint64_t tensors = 0;
  uint64_t bytes = 0;
  double collective_us = 0;
  bool error = false;
};

// What the pass knows that every analysis may read: the choices, and facts of the whole trace.
class Pass {
 public:
  explicit Pass(SummaryOptions options);
  const SummaryOptions& options() const { return options_; }
  bool in_window(double ts) const;
  bool selected(int rank) const;
  bool selected(std::string_view operation) const;
  // The run's ranks (its metadata), else the rank lanes seen so far.
  int job_ranks() const { return run_ranks > 0 ? run_ranks : static_cast<int>(lanes_seen.size()); }
  // A tensor's name (its process_name) and its process set's size (0: the whole job).
  struct Tensor {
    std::string name;
    int set_ranks = 0;
  };
  const Tensor* tensor(int64_t pid) const {
    auto it = tensors.find(pid);
    return it == tensors.end() ? nullptr : &it->second;
  }

  int run_ranks = 0;             // ranktime_run's ranks; 0 when absent
  std::vector<bool> lanes_seen;  // per rank: a chosen operation slice on its lane
  std::unordered_map<int64_t, Tensor> tensors;

 private:
  SummaryOptions options_;
  std::vector<bool> rank_selected_;
};

class Analysis {
 public:
  virtual ~Analysis() = default;
  virtual void add(const Negotiation&) {}
  virtual void add(const RankSlice&) {}
  virtual void add(const Batch&) {}
  virtual void add(const RegionSlice&) {}
  virtual void add(const OperatorSlice&) {}
  virtual void add_cycle_mark(double /*ts*/) {}
  // Called once, in the list's order, after the Summary's run, time span and lanes are set.
  virtual void finish(Summary& summary) = 0;
};

}  // namespace ranktime::timeline::analysis
