// Complete slices split into B/E pairs, so that every reader sees one form. Internal to the
// reader (trace_reader.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compact_format.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

// Hands complete slices ('X' with a "dur") on a tensor's threads on as a 'B' and an 'E', so that
// the checker and the analysis see one form whichever the writer chose. The 'E' goes out when
// the thread's next event begins at or after its end (after, for a zero-length tick, which may
// sit at its negotiation's end), or at the end of the input. Ticks (zero-length 'X' named by a
// rank number) and pid 0's complete slices (STEP) are handed on as they are.
class CompleteSliceSplitter {
 public:
  explicit CompleteSliceSplitter(const TraceEventCallback& next) : next_(next) {}

  bool add(const TraceEvent& e) {
    const bool tick = is_tick(e);
    if (pending_ > 0 && e.phase() != 'M' && e.has_ts && !close_until(e, tick)) return false;
    if (e.phase() != 'X' || tick || e.pid <= 0 || !e.has_dur || !e.has_ts || e.dur < 0 ||
        !e.malformed.empty() || torch_process_rank(e.pid) >= 0) {
      return next_(e);
    }
    TraceEvent begin = e;
    begin.ph = "B";
    begin.has_dur = false;
    begin.dur = 0;
    TraceEvent end = begin;
    end.ph = "E";
    // To the nanosecond, as the file's timestamps are: ts + dur in floating point can land a
    // hair after the next slice's ts that the same text gives.
    end.ts = std::round((e.ts + e.dur) * 1000.0) / 1000.0;
    stacks_[{e.pid, e.tid}].push_back(std::move(end));
    ++pending_;
    return next_(begin);
  }

  // Closes every slice still pending, innermost first.
  bool flush() {
    for (auto& [thread, stack] : stacks_) {
      while (!stack.empty()) {
        TraceEvent end = std::move(stack.back());
        stack.pop_back();
        --pending_;
        if (!next_(end)) return false;
      }
    }
    return true;
  }

 private:
  struct ThreadHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<int64_t>()(k.first) * 1000003u ^ std::hash<int64_t>()(k.second);
    }
  };

  static bool is_tick(const TraceEvent& e) { return is_tick_event(e); }

  bool close_until(const TraceEvent& e, bool tick) {
    auto it = stacks_.find({e.pid, e.tid});
    if (it == stacks_.end()) return true;
    auto& stack = it->second;
    while (!stack.empty() && (tick ? stack.back().ts < e.ts : stack.back().ts <= e.ts)) {
      TraceEvent end = std::move(stack.back());
      stack.pop_back();
      --pending_;
      if (!next_(end)) return false;
    }
    return true;
  }

  const TraceEventCallback& next_;
  std::unordered_map<std::pair<int64_t, int64_t>, std::vector<TraceEvent>, ThreadHash> stacks_;
  size_t pending_ = 0;
};

}  // namespace ranktime::timeline
