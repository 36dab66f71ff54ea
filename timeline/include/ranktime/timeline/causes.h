// Why a rank was late: for each step and each late rank, the regions (ranktime.region,
// ranktime.torch.instrument) in which it spent longer than the other ranks' median for the same
// region. Pure: fed steps' readiness and regions' own times, no reader, no clock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ranktime/timeline/cause_operators.h"

namespace ranktime::timeline {

struct CauseOptions {
  // A rank is late in a step when its last readiness (its last tensor's tick) is at least this
  // far behind the median of the other ranks' last readiness in that step. The median, not the
  // first rank: one early rank must not make every other rank late. 1 ms: above the scheduling
  // jitter of ranks that share cores, well below a straggler worth naming.
  double late_threshold_us = 1000;
};

// What one step holds for the comparison, per rank (index = rank).
struct StepRegionTimes {
  int64_t step = 0;
  // The rank's last readiness in the step, on rank 0's clock; < 0: no readiness.
  std::vector<double> ready_end;
  // The rank's own time per region (exclusive_region_time, summed over the region's occurrences
  // in the step); empty: the rank recorded no region in the step and is left out of the medians.
  std::vector<std::map<std::string, double>> own_us;
};

// One region of a late rank in one step.
struct RegionExcess {
  std::string region;           // untrusted text, as the user named it
  double own_us = 0;            // the late rank's own time in it
  double others_median_us = 0;  // the other ranks' median own time (0 for a rank without it)
  double excess_us = 0;         // own - median; negative when the late rank was quicker
};

// A late rank in one step, its regions largest excess first.
struct LateRankStep {
  int64_t step = 0;
  int rank = 0;
  double lateness_us = 0;  // behind the other ranks' median last readiness
  std::vector<RegionExcess> regions;
};

// A profiler operator (torch.profiler, put on the timeline by `ranktime merge`) inside a
// cause's region: its own time there (less its child operators' on the same thread) on the late
// rank, less the other ranks' median for it, over the steps the rank was late in
// (cause_operators.h says how).
struct OperatorExcess {
  std::string name;      // the operator's name, untrusted text (the profiler's, or the user's)
  double excess_us = 0;  // per late step, as Cause::excess_us
};

// One (rank, region) over the steps that rank was late in.
struct Cause {
  int rank = 0;
  std::string region;
  uint64_t steps = 0;           // steps the rank was late in (and had regions)
  uint64_t compared_steps = 0;  // steps the rank was compared in, late or not
  double lateness_us = 0;       // mean lateness over `steps`
  double excess_us = 0;         // mean excess per late step
  double total_excess_us = 0;   // summed over `steps`
  // total excess / total lateness over `steps`, in percent: how much of the rank's lateness the
  // region's extra time accounts for. Can pass 100 (the rank made up time elsewhere) or be < 0.
  double explained_pct = 0;
  // The operators inside the region that took longer than on the other ranks, largest excess
  // first, at most CauseOperators::kTop; empty without profiler events in the trace.
  std::vector<OperatorExcess> operators;
};

struct Causes {
  // Every (late rank, region), largest total excess first; the first with a positive excess is
  // "the cause". Ties: lower rank, then region name.
  std::vector<Cause> causes;
  std::vector<LateRankStep> steps;  // by step, then rank
  uint64_t compared_steps = 0;      // steps with readiness and regions of two ranks or more
  bool has_regions = false;         // the trace had regions at all
  // Region slices left out: they began before their rank's first step mark, spanned more than
  // one step mark (an epoch, a whole loop), or came after their step was closed.
  uint64_t regions_left_out = 0;
};

// The late ranks of one step, each with its regions' excess; empty when fewer than two ranks
// can be compared. Ranks need both readiness and regions in the step to be compared.
std::vector<LateRankStep> compare_step(const StepRegionTimes& step, const CauseOptions& options);

// Adds up compare_step's results over steps into Causes.
class CauseTally {
 public:
  // `compared`: the ranks compared in the step (late or not); `late`: compare_step's result.
  void add(const std::vector<int>& compared, std::vector<LateRankStep> late);
  Causes finish();

 private:
  struct Sum {
    uint64_t steps = 0;
    double excess_us = 0;
    double lateness_us = 0;
  };
  std::map<int, uint64_t> compared_;                 // rank -> steps compared in
  std::map<int, std::pair<uint64_t, double>> late_;  // rank -> (late steps, lateness summed)
  std::map<std::pair<int, std::string>, Sum> sums_;  // (rank, region)
  Causes causes_;
};

// Regions nest (slices on one thread nest strictly). A region's own time is its duration less
// what its rank spent blocked inside ranktime during it (`blocked_us`: waiting for the other
// ranks), less its nested regions' own time: each microsecond counts once, for the innermost
// region that holds it. So a "step" region around "data" is not named for the time "data" took,
// and the innermost region that explains the lateness is the one named.
//
// Feed one rank's regions as they close (a nested region closes before its parent); close()
// returns the region's exclusive own time.
class RegionNesting {
 public:
  double close(double begin_us, double end_us, double blocked_us);

 private:
  struct Closed {
    double begin_us;
    double own_us;  // inclusive of nested regions, less blocked
  };
  // Closed regions not yet inside a closed parent, in closing order. Top-level regions stay
  // until a bound, since a parent may still close around them.
  std::vector<Closed> closed_;
};

// Streams a trace's regions and readiness into Causes, a step at a time: steps stay open while
// their regions and negotiations may still come (they arrive nearly in step order: a rank ships
// its regions with its next cycle message), and close once a step kOpenSteps later is seen, so
// memory grows with ranks and regions per step, not with the trace.
class CauseCollector {
 public:
  // The step `rank` was in at `ts` (its last step mark at or before it); < 0 before its first.
  using StepAt = std::function<int64_t(int rank, double ts)>;
  static constexpr int64_t kOpenSteps = 16;
  // Ranks from here up (a corrupt trace's) are left out.
  static constexpr int kMaxRanks = CauseOperators::kMaxRanks;

  CauseCollector(CauseOptions options, StepAt step_at);
  // A region slice of `rank`, as it closes (nested ones first); it belongs to the step its rank
  // was in at its begin. `blocked_us`: its args' blocked_us (0 when absent).
  void add_region(int rank, std::string_view name, double begin_us, double end_us,
                  double blocked_us);
  // A rank's readiness for a tensor in `step` (the steps analysis's step of the negotiation).
  void add_readiness(int64_t step, int rank, double ts_us);
  // A profiler operator of `rank` as it closes on its thread (OperatorNesting's own time): it
  // counts for the region that holds its begin (cause_operators.h).
  void add_operator(int rank, std::string_view name, double begin_us, double own_us);
  Causes finish();

 private:
  // The step's times, with a row for `rank`; nullptr when the step is closed already.
  StepRegionTimes* open(int64_t step, int rank);
  void close_until(int64_t step);
  void close(std::map<int64_t, StepRegionTimes>::iterator it);

  CauseOptions options_;
  StepAt step_at_;
  std::vector<RegionNesting> nesting_;  // by rank
  std::map<int64_t, StepRegionTimes> open_;
  int64_t closed_through_ = -1;  // every step up to this one is closed
  bool has_regions_ = false;
  uint64_t left_out_ = 0;
  CauseTally tally_;
  CauseOperators operators_;
};

}  // namespace ranktime::timeline
