// The operators inside a late rank's region: torch.profiler slices that `ranktime merge` put on
// the timeline (process "rank R (torch)"), each counted for its own time, in the innermost region
// of its rank that holds its begin, against the other ranks' time for the same operator in the
// same region over the same steps. Pure: fed regions, operators and closed steps, no reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ranktime/timeline/string_table.h"

namespace ranktime::timeline {

struct Cause;  // causes.h, which holds a CauseOperators in its CauseCollector

// One profiler thread's complete slices into own times. An operator's own time is its duration
// less its children's (the slices inside it on the same thread), so that "aten::linear" is not
// named for the "aten::addmm" inside it, nor a user's record_function range for the operators in
// it: each microsecond counts once, for the innermost operator that holds it (RegionNesting's
// rule for regions). Feed a thread's slices in order of begin, as the profiler writes them; a
// slice that does not fit inside the open one closes it.
class OperatorNesting {
 public:
  using Closed = std::function<void(const std::string& name, double begin_us, double own_us)>;
  void add(std::string_view name, double begin_us, double dur_us, const Closed& closed);
  // Closes every operator still open, innermost first (at the end of the input).
  void flush(const Closed& closed);

 private:
  struct Open {
    std::string name;
    double begin_us = 0;
    double end_us = 0;
    double children_us = 0;
  };
  void close_top(const Closed& closed);
  std::vector<Open> stack_;
};

// Adds up operators' own time per (late rank, region, operator) and per rank, over the steps the
// late rank was late in. An operator belongs to the innermost region of its rank that holds its
// begin, and to that region's step. A step's operators are held per (rank, region, operator)
// only while the step is open; once it closes (close_step) they go into the sums of the ranks
// late in it, and a step nobody was late in is forgotten. An operator after every region its rank
// has closed so far waits (a bounded number of them) for one still open around it: the reader
// closes a rank's last regions only at the end of the input, after the profiles. What stays grows
// with the late steps' regions (their times, for operators that come after their step closed:
// `ranktime merge` puts every profile after the timeline) and with late ranks x regions x operators
// x ranks, never with the number of operators.
//
// Excess of an operator, for a cause (rank q, region g): q's own time for it in g over q's late
// steps, less the median over the other profiled ranks of their own time for it in g over the
// same steps (a rank without it counts 0), per late step. The sums before the median, not the
// median per step as for regions: the profiles come one rank after another, so a step's ranks
// are never all at hand at once, and per-step values for every step would grow with the trace.
class CauseOperators {
 public:
  // Operators named per cause, at most: the line names the first, the tables these.
  static constexpr size_t kTop = 3;
  // Ranks from here up (a corrupt trace's) are left out, as CauseCollector::kMaxRanks.
  static constexpr int kMaxRanks = 4096;

  // A region of `rank` that belongs to the open step `step` (CauseCollector's), as it closes.
  void add_region(int rank, int64_t step, std::string_view name, double begin_us, double end_us);
  // An operator's own time on `rank` (OperatorNesting's); `step`: its rank's step at its begin.
  void add_operator(int rank, int64_t step, std::string_view name, double begin_us, double own_us);
  // `step` closed; `late`: the ranks late in it (compare_step's rows).
  void close_step(int64_t step, const std::vector<int>& late);
  // Fills each cause's operators: positive excess, largest first (ties by name), kTop at most.
  void finish(std::vector<Cause>* causes);

 private:
  struct Region {
    double begin_us = 0;
    double end_us = 0;
    uint32_t name = 0;
  };
  using Key = std::tuple<int, uint32_t, uint32_t>;  // (rank, region, operator)
  struct Step {
    bool closed = false;
    std::vector<int> late;
    std::vector<std::vector<Region>> regions;  // by rank
    std::map<Key, double> open_us;             // by (rank, region, operator) while open
  };
  // An operator that waits for a region still open around it.
  struct Waiting {
    int rank = 0;
    int64_t step = 0;
    uint32_t op = 0;
    double begin_us = 0;
    double own_us = 0;
  };
  // Into the innermost region of `rank` that holds `begin_us`; false when none has closed yet.
  bool place(int rank, int64_t step, uint32_t op, double begin_us, double own_us);
  void credit(const Step& step, const Key& key, double own_us);

  std::map<int64_t, Step> steps_;
  // (late rank, region, operator) -> each rank's own time over the late rank's late steps.
  std::map<Key, std::vector<double>> sums_;
  std::vector<bool> profiled_;        // by rank: any operator at all (the ranks compared)
  std::vector<double> closed_until_;  // by rank: the latest end of its regions so far
  std::vector<Waiting> waiting_;      // operators after every region of their rank so far
  StringTable regions_;               // names as small numbers, their text kept once
  StringTable operators_;
};

}  // namespace ranktime::timeline
