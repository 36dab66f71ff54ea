// The one place the analysis pairs B with E.
#include "analysis/slice_tracker.h"

#include <algorithm>

#include "analysis/trace_args.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline::analysis {

void SliceTracker::open(const TraceEvent& e) {
  auto& stack = stacks_[{e.pid, e.tid}];
  Slice slice;
  slice.name = e.name;
  slice.ts = e.ts;
  if (e.pid > 0 && e.tid > 0 && stack.empty() && is_operation_name(e.name)) {
    slice.bytes = int_arg(e.args, "bytes", 0);
    slice.fused_tensors = std::max<int64_t>(1, int_arg(e.args, "fused_tensors", 1));
    slice.error = has_arg(e.args, "error");
  }
  stack.push_back(std::move(slice));
}

Slice* SliceTracker::close(const TraceEvent& e, Slice** parent) {
  auto it = stacks_.find({e.pid, e.tid});
  if (it == stacks_.end()) return nullptr;
  auto& stack = it->second;
  auto match =
      std::find_if(stack.rbegin(), stack.rend(), [&](const Slice& s) { return s.name == e.name; });
  if (match == stack.rend()) return nullptr;
  stack.resize(stack.size() - static_cast<size_t>(match - stack.rbegin()));
  closed_ = std::move(stack.back());
  stack.pop_back();
  *parent = stack.empty() ? nullptr : &stack.back();
  return &closed_;
}

void SliceTracker::tick(const TraceEvent& e) {
  auto it = stacks_.find({e.pid, e.tid});
  if (it == stacks_.end() || it->second.empty()) return;
  it->second.back().ticks.push_back(
      {static_cast<int>(int_arg(e.args, "rank", -1)), number_arg(e.args, "lag_us", 0), e.ts});
}

}  // namespace ranktime::timeline::analysis
