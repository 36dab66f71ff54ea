// Repair of a file cut short (`ranktime check --repair`): keep every complete event, close the
// slices a TraceChecker found open, close the array.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

// How to complete a file: keep its first keep_bytes bytes and append tail.
struct RepairPlan {
  bool needed = false;  // false: the file is complete and balanced, nothing to do
  uint64_t keep_bytes = 0;
  std::string tail;
  uint64_t events_kept = 0;
  uint64_t closed_slices = 0;
  uint64_t bytes_dropped = 0;  // bytes after the last complete event
};

// Keeps every complete event, closes each open slice with an E at close_ts (args
// {"repaired":true}), innermost first, and closes the array.
RepairPlan plan_repair(const TraceReadResult& read, const std::vector<OpenSliceInfo>& open,
                       double close_ts, uint64_t file_size);
// Writes the repaired file to out_path (in place, by truncating, when it is in_path).
bool apply_repair(const std::string& in_path, const std::string& out_path, const RepairPlan& plan,
                  std::string* error);

}  // namespace ranktime::timeline
