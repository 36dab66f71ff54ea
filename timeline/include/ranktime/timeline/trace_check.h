// Validation of a timeline against docs/timeline-format.md (`ranktime check`), and repair of a
// file cut short (`ranktime check --repair`). One pass, one stack per (pid, tid): memory grows
// with tensors and ranks, not with the number of events.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

inline constexpr uint64_t kNoEvent = std::numeric_limits<uint64_t>::max();

struct TraceViolation {
  uint64_t event_index = kNoEvent;  // the offending event (kNoEvent: the file as a whole)
  uint64_t offset = 0;              // its byte offset
  std::string message;
};

// A slice still open after the last event: what a repair has to close.
struct OpenSliceInfo {
  int64_t pid = 0;
  int64_t tid = 0;
  int depth = 0;  // 0 = outermost on its thread
  // A complete slice whose contents the cut took (a negotiation without all its ticks): a
  // repair keeps the file only up to it, `offset` then being where the event before it ends.
  bool incomplete = false;
  std::string name;
  double ts = 0;
  uint64_t event_index = 0;
  uint64_t offset = 0;
};

struct CheckOptions {
  // Violations kept with their text (all are counted).
  size_t max_violations_kept = 1000;
};

class TraceChecker {
 public:
  explicit TraceChecker(CheckOptions options = {});
  void add(const TraceEvent& event);
  // Call once, after the reader is done: reports a cut or invalid JSON, and unclosed slices.
  void finish(const TraceReadResult& read);

  const std::vector<TraceViolation>& violations() const { return violations_; }
  uint64_t violation_count() const { return violation_count_; }
  bool ok() const { return violation_count_ == 0; }

  // Slices open after the events seen so far, outermost first on each thread.
  std::vector<OpenSliceInfo> open_slices() const;
  double max_ts() const { return max_ts_; }
  int ranks() const { return ranks_; }
  uint64_t events() const { return events_; }
  uint64_t negotiations() const { return negotiations_; }
  bool has_run_end() const { return has_run_end_; }
  uint64_t flow_events() const { return flow_events_; }
  uint64_t flows() const { return flows_; }  // arrows with both ends in the file
  // Ranks with processing lanes in the file, ascending.
  std::vector<int> lane_ranks() const;
  // How the run chose whose lanes to write ("TIMELINE_RANKS=2", "TIMELINE_ALL_RANKS=0"); ""
  // when every rank's lanes were wanted. The other ranks' missing lanes are expected then.
  const std::string& lane_choice() const { return lane_choice_; }

 private:
  enum class FrameKind { kNegotiation, kOperation, kSubphase, kOther };
  struct Frame {
    std::string name;
    FrameKind kind = FrameKind::kOther;
    double ts = 0;
    uint64_t event_index = 0;
    uint64_t offset = 0;
    uint64_t previous_end = 0;  // where the event before it in the file ends
    std::vector<bool> ticked;   // negotiations: which ranks have a tick
    int ticks = 0;
    double last_tick_ts = 0;
    int last_tick_rank = -1;
  };
  struct ThreadState {
    std::vector<Frame> stack;
    double last_ts = 0;
    bool has_ts = false;
  };
  struct ThreadKeyHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<int64_t>()(k.first) * 1000003u ^ std::hash<int64_t>()(k.second);
    }
  };

  void check_event(const TraceEvent& e);
  void violation(const TraceEvent& e, std::string message);
  void file_violation(uint64_t offset, std::string message);
  std::string where(const TraceEvent& e) const;  // "pid 3 (tensor 'x') tid 2"
  void on_metadata(const TraceEvent& e);
  void on_run_metadata(const TraceEvent& e);  // ranktime_run, ranktime_run_end ('M' or 'i')
  // From ranktime_run's all_ranks and timeline_ranks: whose lanes may appear.
  void on_lane_choice(const nlohmann::json& args);
  void on_run_thread_name(const TraceEvent& e);
  void on_step(const TraceEvent& e);
  void on_flow(const TraceEvent& e);
  void check_flow_order(const TraceEvent& e, double start_ts, double end_ts);
  void on_run_event(const TraceEvent& e);
  void on_negotiate_event(const TraceEvent& e, ThreadState& thread);
  void on_rank_event(const TraceEvent& e, ThreadState& thread);
  void on_region_event(const TraceEvent& e, ThreadState& thread);
  // An operation slice on rank `rank`'s lane: noted, and a violation (once per rank) when the run
  // did not choose that rank's lanes.
  void check_lane_chosen(const TraceEvent& e, int64_t rank);
  void on_tick(const TraceEvent& e, ThreadState& thread);
  // Pops the slice an E closes; returns false (after reporting) when it closes nothing.
  bool close_slice(const TraceEvent& e, ThreadState& thread, Frame* closed);
  void check_negotiation_end(const TraceEvent& e, const Frame& frame);
  // A negotiation without all its ticks is reported once the thread's next one begins (or at
  // the end): at the end of a file cut short, its ticks were cut off, not left out.
  void report_incomplete_negotiation(int64_t pid);

  CheckOptions options_;
  struct Incomplete {
    TraceViolation violation;
    OpenSliceInfo slice;
  };
  std::unordered_map<int64_t, Incomplete> incomplete_negotiations_;  // by pid, not yet reported
  std::vector<OpenSliceInfo> cut_off_;  // negotiations whose ticks a cut took
  uint64_t end_offset_ = 0;             // the furthest end of an event added so far
  std::vector<TraceViolation> violations_;
  uint64_t violation_count_ = 0;
  std::unordered_map<std::pair<int64_t, int64_t>, ThreadState, ThreadKeyHash> threads_;
  std::unordered_map<int64_t, std::string> process_names_;
  // A process set's tensors: the ranks whose ticks its negotiations have (process_set_label.h).
  std::unordered_map<int64_t, std::vector<int>> set_ranks_;
  std::unordered_set<int64_t> unnamed_reported_;
  struct StepThread {
    int64_t rank = 0;
    int64_t last_step = -1;
  };
  std::unordered_map<int64_t, StepThread> step_threads_;  // pid 0 tid -> its "steps rank r"
  // Flow ends waiting for their other end, by id; bounded (an unmatched end is not an error).
  static constexpr size_t kMaxOpenFlows = size_t{1} << 16;
  std::unordered_map<std::string, double> flow_starts_;
  std::unordered_map<std::string, double> flow_ends_;
  uint64_t flow_events_ = 0;
  uint64_t flows_ = 0;
  std::string lane_choice_;
  std::vector<bool> lane_allowed_;  // per rank, with a fixed choice; empty: any rank's lanes
  std::vector<bool> lane_seen_;     // per rank: an operation slice on its lane
  int ranks_ = 0;
  bool has_run_ = false;
  bool has_run_end_ = false;
  bool seen_timed_ = false;
  uint64_t events_ = 0;
  uint64_t negotiations_ = 0;
  double max_ts_ = 0;
};

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
