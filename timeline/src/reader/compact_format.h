// The compact format's decoding rules (docs/timeline-format.md): what the writer leaves
// implicit, filled back in for every reader. Internal to the reader (trace_reader.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/trace_names.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

// A readiness tick: a complete slice named by a rank number.
inline bool is_tick_event(const TraceEvent& e) {
  return e.phase() == 'X' && !e.name.empty() && e.name.size() < 10 &&
         std::all_of(e.name.begin(), e.name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Fills in what the writer leaves implicit (docs/timeline-format.md), so that readers see every
// value on every event: a tick's `rank` (its name) and `lag_us` (its ts minus its NEGOTIATE
// slice's, where not given); an operation slice's `dtype`, `shape`, `bytes` (its lane's latest,
// where not repeated) and `fused_tensors` (1 where absent); and the sub-phases of a fused
// batch's tensors, which the file holds once per batch and lane, after the first tensor's
// slice: each other tensor's slice gets copies of them (before its thread's next event). Memory:
// one negotiation begin per tensor, one set of args and of copies per lane, one batch per rank.
class FormatCompleter {
 public:
  explicit FormatCompleter(const TraceEventCallback& next) : next_(next) {}

  bool add(const TraceEvent& e) {
    if (!pending_.empty() && e.pid > 0 && e.tid > 0 && e.has_ts && e.phase() != 'M') {
      auto it = pending_.find({e.pid, e.tid});
      if (it != pending_.end()) {
        // A slice that shares its batch's sub-phases, unless its own follow it (a writer that
        // repeats them for every tensor).
        std::vector<TraceEvent> copies = std::move(it->second);
        pending_.erase(it);
        const bool own = e.phase() == 'X' && is_subphase_name(e.name);
        if (!own) {
          for (const TraceEvent& copy : copies) {
            if (!next_(copy)) return false;
          }
        }
      }
    }
    // torch.profiler events (`ranktime merge`) are the profiler's own: handed on as they are.
    if (e.phase() != 'X' || e.pid <= 0 || !e.has_ts || !e.malformed.empty() ||
        torch_process_rank(e.pid) >= 0) {
      return next_(e);
    }
    if (e.tid == 0) {
      if (!is_tick_event(e)) {
        negotiation_begin_[e.pid] = e.ts;
        return next_(e);
      }
      const bool has_rank = e.args.is_object() && e.args.contains("rank");
      const bool has_lag = e.args.is_object() && e.args.contains("lag_us");
      if (has_rank && has_lag) return next_(e);
      TraceEvent tick = e;
      if (!tick.args.is_object()) tick.args = nlohmann::json::object();
      if (!has_rank) tick.args["rank"] = std::stoll(e.name);
      auto begin = negotiation_begin_.find(e.pid);
      if (!has_lag && begin != negotiation_begin_.end()) tick.args["lag_us"] = e.ts - begin->second;
      return next_(tick);
    }
    if (is_operation_name(e.name)) return add_operation(e);
    // A sub-phase: the batch whose first slice it follows holds it for the batch's other tensors.
    Batch& batch = batches_[e.tid];
    if (batch.pid == e.pid && batch.collecting) batch.subphases.push_back(e);
    return next_(e);
  }

 private:
  struct Batch {
    int64_t pid = 0;  // the tensor whose slice carries the sub-phases
    double ts = 0, dur = 0;
    bool collecting = false;
    std::vector<TraceEvent> subphases;
  };

  bool add_operation(const TraceEvent& slice) {
    TraceEvent e = slice;
    if (!e.args.is_object()) e.args = nlohmann::json::object();
    nlohmann::json& lane = lane_args_[{e.pid, e.tid}];
    if (e.args.contains("dtype") || e.args.contains("shape") || e.args.contains("bytes")) {
      lane = nlohmann::json::object();
      for (const char* key : {"dtype", "shape", "shape_truncated", "bytes"}) {
        if (e.args.contains(key)) lane[key] = e.args[key];
      }
    } else if (lane.is_object()) {
      for (const auto& [key, value] : lane.items()) e.args[key] = value;
    }
    if (!e.args.contains("fused_tensors")) e.args["fused_tensors"] = 1;
    const auto fused = e.args["fused_tensors"];
    Batch& batch = batches_[e.tid];
    const bool shares = fused.is_number_integer() && fused.get<int64_t>() > 1 && e.has_dur &&
                        batch.pid != e.pid && batch.ts == e.ts && batch.dur == e.dur &&
                        !batch.subphases.empty();
    if (!shares) {
      // Perhaps a batch's first slice: its sub-phases follow.
      batch.pid = e.pid;
      batch.ts = e.ts;
      batch.dur = e.dur;
      batch.collecting = true;
      batch.subphases.clear();
      return next_(e);
    }
    batch.collecting = false;
    std::vector<TraceEvent>& copies = pending_[{e.pid, e.tid}];
    copies = batch.subphases;
    for (TraceEvent& copy : copies) {
      copy.pid = e.pid;
      copy.index = e.index;
      copy.begin_offset = e.begin_offset;
      copy.end_offset = e.end_offset;
    }
    return next_(e);
  }

 public:
  // Hands on the sub-phase copies still waiting (the input ended).
  bool flush() {
    for (auto& [thread, copies] : pending_) {
      for (const TraceEvent& copy : copies) {
        if (!next_(copy)) return false;
      }
    }
    pending_.clear();
    return true;
  }

 private:
  struct ThreadHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<int64_t>()(k.first) * 1000003u ^ std::hash<int64_t>()(k.second);
    }
  };

  const TraceEventCallback& next_;
  std::unordered_map<int64_t, double> negotiation_begin_;  // by pid
  std::unordered_map<std::pair<int64_t, int64_t>, nlohmann::json, ThreadHash> lane_args_;
  std::unordered_map<int64_t, Batch> batches_;  // by tid (rank + 1)
  // Sub-phase copies for a slice that shares its batch's, handed on before the thread's next
  // event (or dropped if that event is a sub-phase of its own).
  std::unordered_map<std::pair<int64_t, int64_t>, std::vector<TraceEvent>, ThreadHash> pending_;
};

}  // namespace ranktime::timeline
