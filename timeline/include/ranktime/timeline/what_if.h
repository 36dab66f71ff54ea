// What a late rank cost: one training step replayed from what a trace (or rank 0, live) holds,
// unchanged and with a rank's lateness taken away (ByteDance's what-if analysis, OSDI '25).
// Pure functions on plain inputs, no reader or runtime types, so `ranktime summary` and the
// runtime's live statistics replay the same way and unit tests build steps with known answers.
//
// The model, per step: a negotiation completes when its last rank is ready, plus the measured
// time the coordinator took to see it (its end minus its last readiness). A fused batch starts on
// a rank's lane when all its tensors' negotiations have completed and the lane's previous batch
// has finished, plus the measured gap between the later of the two and its start; it takes its
// measured duration. The step ends at its last completion plus the measured tail (the work after
// it, until the step's end). Readiness is taken as measured: work that waited for an earlier
// collective of the step is not moved earlier when that collective is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ranktime::timeline {

// One rank's readiness for one tensor, on the coordinator's clock (µs).
struct WhatIfReady {
  int rank = 0;
  double us = 0;
};

// One negotiation (a tensor's readiness on every rank of its set).
struct WhatIfNegotiation {
  std::vector<WhatIfReady> ready;
  double end_us = 0;  // when the coordinator knew every rank was ready
};

// A fused batch's execution on one rank's lane, measured.
struct WhatIfRun {
  int lane = 0;
  double begin_us = 0;
  double end_us = 0;
};

// A fused batch (a tensor alone is a batch of one): its tensors and where it ran.
struct WhatIfBatch {
  std::vector<size_t> negotiations;  // indices into WhatIfStep::negotiations
  std::vector<WhatIfRun> runs;       // none: the lanes were not recorded
};

struct WhatIfStep {
  double begin_us = 0;  // measured; the same in every replay
  double end_us = 0;
  std::vector<WhatIfNegotiation> negotiations;
  std::vector<WhatIfBatch> batches;
  // Lanes still busy with an earlier step's batch when this step's first batch came: (lane,
  // until). The same in every replay.
  std::vector<std::pair<int, double>> lanes_busy_until;
};

struct WhatIfRankSaving {
  int rank = 0;
  double saving_us = 0;  // > 0
};

struct WhatIfStepResult {
  double measured_us = 0;  // end - begin
  double replayed_us = 0;  // the unchanged replay
  // How much shorter the step would have been had each rank been no later than the median of the
  // other ranks for every tensor (a rank that was early keeps its time). Ranks absent saved
  // nothing.
  std::vector<WhatIfRankSaving> savings;
  // ... had every rank been at the median of all ranks for every tensor.
  double nobody_late_saving_us = 0;
  double saving_of(int rank) const;
};

// A run's what-if figures (`ranktime summary`'s `cost:` line and JSON `what_if`), step by step.
struct WhatIfStepRow {
  int64_t step = 0;
  double begin_us = 0;
  double measured_us = 0;
  double replayed_us = 0;
  std::vector<WhatIfRankSaving> savings;  // ranks whose lateness cost time in this step
  double nobody_late_saving_us = 0;
};

struct WhatIfRankCost {
  int rank = 0;
  double saving_us = 0;   // summed over the steps
  double saving_pct = 0;  // of the run's wall time
};

struct WhatIfSummary {
  bool steps_from_marks = false;  // else from the negotiation pattern (n-th = step n)
  double wall_us = 0;             // the run's wall time (Summary::wall_us)
  double measured_us = 0;         // the steps' measured time, summed
  double replayed_us = 0;         // ... and unchanged replay
  // Replay error: the steps' |replayed - measured| summed, over their measured time, in %.
  double replay_error_pct = 0;
  double worst_step_error_pct = 0;
  std::vector<WhatIfRankCost> ranks;  // every rank with readiness in the steps, by rank
  double nobody_late_saving_us = 0;
  std::vector<WhatIfStepRow> steps;
  // The rank whose lateness cost most; -1 when none cost anything.
  int costliest_rank() const;
};

// Replays one step: unchanged, without each rank's lateness, and with nobody late.
WhatIfStepResult replay_step(const WhatIfStep& step);

// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median_of(std::vector<double> values);

}  // namespace ranktime::timeline
