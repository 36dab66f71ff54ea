// The tables and lines `ranktime summary` prints, built from a Summary, so that `ranktime report`
// shows the same figures under the same names.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ranktime/timeline/trace_analysis.h"
#include "report_table.h"

namespace ranktime::cli {

Table run_table(const timeline::Summary& s, bool truncated, size_t files);
Table lateness_table(const timeline::Summary& s);
Table time_table(const timeline::Summary& s);
Table top_wait_table(const timeline::Summary& s, size_t k);
Table top_processing_table(const timeline::Summary& s, size_t k);
Table fusion_table(const timeline::Summary& s);
Table cycles_table(const timeline::Summary& s);
Table bandwidth_table(const timeline::Summary& s);
Table steps_table(const timeline::Summary& s);
Table step_ranks_table(const timeline::Summary& s);
// What each rank's lateness cost (the what-if replay): per rank, and per step.
Table cost_table(const timeline::Summary& s);
Table cost_steps_table(const timeline::Summary& s);
Table cost_step_ranks_table(const timeline::Summary& s);
// summary --format json's "what_if": {"wall_ms", "steps", "steps_from", "replay_error_pct",
// "worst_step_error_pct", "ranks": [{"rank", "saving_ms", "saving_pct"}],
// "nobody_late_saving_ms", "measured_step_ms", "replayed_step_ms"}.
nlohmann::json what_if_json(const timeline::Summary& s);

// "cost: rank 2 made the job 0.410 s longer (5.7% of 7.180 s); without it, steps would take
// 321.000 ms instead of 341.000 ms" (the summary's first line).
std::string cost_line(const timeline::Summary& s);
// "replay: 21 steps (from the STEP marks) replayed within 0.4% of their measured time (worst
// step 1.2%); with nobody late, 0.450 s shorter".
std::string replay_line(const timeline::Summary& s);

// "PATH: 4 ranks (n1 x4), 233.477 ms of trace, 4153 events, 88 negotiations".
std::string header_line(const std::vector<std::string>& paths, const timeline::Summary& s);
// "slowest rank: 2 (n1), last to be ready in ...; the other ranks waited 601.5 ms for it".
std::string slowest_line(const timeline::Summary& s);
// "waiting: the ranks spent ... (12.3%) waiting for another rank's tensor; 97.0% of it for rank 2".
std::string waiting_line(const timeline::Summary& s);
std::string host_of(const timeline::Summary& s, int rank);
// "20.051 ms", "1.250 s", "812.000 us".
std::string human_us(double us);
// One number by a printf format with one double: format_double("%.3f", 1.5) is "1.500".
std::string format_double(const char* format, double v);

}  // namespace ranktime::cli
