// `ranktime merge`: every rank's torch.profiler trace put onto a ranktime timeline, on rank 0's
// clock, each rank's events under a process of their own ("rank R (torch)"). Streams: the
// timeline's text is copied through and each profile is read twice (anchors, then events), so
// memory stays bounded whatever the sizes. The output is written to a temporary file and renamed:
// on any error nothing is left half-written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/profile_trace.h"

namespace ranktime::timeline {

// Profiler time (µs, the file's base) to trace time (µs on rank 0's clock since the run start):
// trace = y0 + slope * (profiler - x0).
struct ClockFit {
  double x0 = 0, y0 = 0, slope = 1;
  double max_residual_us = 0;  // the worst anchor's distance from the line, its slack deducted
  size_t anchors = 0;
  double map(double profiler_us) const { return y0 + slope * (profiler_us - x0); }
};

// One anchor as a point: its profiler time, its trace time, and how far off its reading may be.
struct AnchorPoint {
  double profiler_us = 0, trace_us = 0, slack_us = 0;
};

// Weighted least squares (weights 1 / (slack + 1 µs)^2, so an anchor the profiler held long
// counts less). Spans under 10 ms keep slope 1 (the clocks cannot drift measurably there, and a
// short span's slope is noise). Errors: no anchors; a slope off 1 by more than 1%, or anchors
// more than 1 ms off the line (they are not from one clock: files mixed up).
std::optional<ClockFit> fit_anchors(const std::vector<AnchorPoint>& points, std::string* error);

// The run a timeline describes, as far as merging needs it.
struct TimelineRun {
  int64_t ranks = 0;
  std::vector<int64_t> pids;                 // per rank, empty when absent
  std::vector<std::string> hostnames;        // per rank
  std::vector<double> clock_offsets_us;      // per rank: rank clock minus rank 0's
  std::vector<double> clock_uncertainty_us;  // per rank
  std::optional<int64_t> clock_zero_ns;      // rank 0's clock at ts 0
  // Per rank, step -> [begin, end) of its STEP slice (trace µs).
  std::vector<std::unordered_map<int64_t, std::pair<double, double>>> steps;
  std::vector<bool> has_torch;  // per rank: the timeline already holds its torch process
};

// Reads `ranktime_run`'s args into `run` (the fields above but steps and has_torch).
void read_run_args(const nlohmann::json& args, TimelineRun* run);

// Where one rank's profile goes.
struct ProfilePlacement {
  int64_t rank = 0;
  ClockFit fit;
  std::optional<std::pair<double, double>> window;  // trace µs kept (--steps); all when empty
  std::unordered_map<std::string, int64_t> tids;    // profile_thread_key -> tid
};

// The thread table of a scanned profile: tids from 1 in first-seen order.
void number_threads(const ProfileScan& scan, ProfilePlacement* placement);

// One profiler event as merged trace text ("{...}", no separator), or "" when it is dropped: a
// phase viewers do not share, metadata other than thread names (the process is renamed), no
// usable name or time, a time out of range, or outside the window. `skipped` counts events
// dropped for being malformed (not for the window or their phase).
std::string merged_event_text(const nlohmann::json& event, const ProfilePlacement& placement,
                              uint64_t* skipped);

// The metadata events that name rank R's torch process and its threads (",\n"-led).
std::string torch_process_text(const ProfileScan& scan, const ProfilePlacement& placement);

struct MergeProfile {
  std::string path;
  int64_t rank = -1;  // from "R=PATH"; -1: read from the file's anchors
};

struct MergeOptions {
  std::string timeline;
  std::vector<MergeProfile> profiles;
  std::string output;                                // .gz: gzip
  std::optional<std::pair<int64_t, int64_t>> steps;  // --steps A:B, inclusive
};

struct MergedRank {
  int64_t rank = 0;
  std::string path;
  uint64_t events_read = 0, events_written = 0, events_skipped = 0;
  ClockFit fit;
  double uncertainty_us = 0;
  bool kineto = false;
};

struct MergeResult {
  bool ok = false;
  std::string error;  // names the file and what is wrong
  std::vector<MergedRank> ranks;
  uint64_t timeline_bytes = 0, output_bytes = 0;
};

MergeResult merge_profiles(const MergeOptions& options);

}  // namespace ranktime::timeline
