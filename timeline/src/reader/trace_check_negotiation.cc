// The checker's rules for a tensor's negotiate thread (tid 0): NEGOTIATE_<OP> slices, one tick
// per rank (or per member of the tensor's process set), and their args.
#include <algorithm>
#include <string>
#include <vector>

#include "check_values.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

bool is_repaired(const nlohmann::json& args) {
  return args.is_object() && args.contains("repaired") && args["repaired"] == true;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) {
      out += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

void TraceChecker::on_negotiate_event(const TraceEvent& e, ThreadState& thread) {
  if (e.phase() == 'B') {
    report_incomplete_negotiation(e.pid);  // the one before was not the file's last
    Frame frame;
    frame.name = e.name;
    frame.ts = e.ts;
    frame.event_index = e.index;
    frame.offset = e.begin_offset;
    frame.previous_end = end_offset_;
    if (negotiation_operation(e.name).empty()) {
      violation(e, "unknown slice " + in_quotes(e.name) + " on the negotiate thread of " +
                       where(e) + " (expected " + operation_names_text("NEGOTIATE_") + ")");
    } else {
      frame.kind = FrameKind::kNegotiation;
      if (!thread.stack.empty()) {
        violation(e, in_quotes(e.name) + " on " + where(e) + " opens inside the open negotiation " +
                         in_quotes(thread.stack.back().name) + " (opened at event #" +
                         std::to_string(thread.stack.back().event_index) + ")");
      }
      frame.ticked.assign(static_cast<size_t>(std::max(ranks_, 0)), false);
    }
    thread.stack.push_back(std::move(frame));
    return;
  }
  if (e.phase() == 'E') {
    Frame frame;
    if (!close_slice(e, thread, &frame)) return;
    if (frame.kind == FrameKind::kNegotiation) check_negotiation_end(e, frame);
    return;
  }
  if (e.phase() == 'X') {
    on_tick(e, thread);
    return;
  }
  violation(e, "unexpected '" + e.ph + "' event " + in_quotes(e.name) +
                   " on the negotiate thread of " + where(e));
}

void TraceChecker::on_tick(const TraceEvent& e, ThreadState& thread) {
  const bool named_by_number =
      !e.name.empty() && e.name.size() < 10 &&
      std::all_of(e.name.begin(), e.name.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!named_by_number) {
    violation(e, "'X' event " + in_quotes(e.name) + " on the negotiate thread of " + where(e) +
                     " is not a tick (ticks are named by the rank number)");
    return;
  }
  const int rank = std::stoi(e.name);
  if (!e.has_dur || e.dur != 0) violation(e, "tick of rank " + e.name + " must have \"dur\":0");
  if (!is_integer(e.args, "rank") || e.args["rank"].get<int64_t>() != rank) {
    violation(e, "tick " + in_quotes(e.name) + " needs args.rank = " + e.name);
  }
  if (!is_number(e.args, "lag_us") || e.args["lag_us"].get<double>() < -kTsEpsilon) {
    violation(e, "tick of rank " + e.name + " needs a number \"lag_us\" >= 0 in its args");
  }
  if (thread.stack.empty() || thread.stack.back().kind != FrameKind::kNegotiation) {
    violation(e, "tick of rank " + e.name + " on " + where(e) + " is outside a NEGOTIATE_* slice");
    return;
  }
  Frame& frame = thread.stack.back();
  if (ranks_ > 0 && rank >= ranks_) {
    violation(e, "tick of rank " + e.name + " but the run has " + std::to_string(ranks_) +
                     " ranks (0.." + std::to_string(ranks_ - 1) + ")");
    return;
  }
  if (e.ts + kTsEpsilon < frame.ts) {
    violation(e, "tick of rank " + e.name + " at ts " + format_ts(e.ts) + " is before its " +
                     frame.name + " began (" + format_ts(frame.ts) + ")");
  }
  auto set = set_ranks_.find(e.pid);
  if (set != set_ranks_.end() &&
      !std::binary_search(set->second.begin(), set->second.end(), rank)) {
    violation(e, "tick of rank " + e.name + " on " + where(e) +
                     ", a rank outside the tensor's process set");
  }
  if (static_cast<size_t>(rank) < frame.ticked.size()) {
    if (frame.ticked[rank]) {
      violation(e, "second tick of rank " + e.name + " in the " + frame.name +
                       " opened at event #" + std::to_string(frame.event_index) + " on " +
                       where(e));
    }
    frame.ticked[rank] = true;
  }
  ++frame.ticks;
  frame.last_tick_ts = e.ts;
  frame.last_tick_rank = rank;
}

void TraceChecker::check_negotiation_end(const TraceEvent& e, const Frame& frame) {
  ++negotiations_;
  // A slice closed by `check --repair` was cut short: its ticks and args may be missing.
  if (is_repaired(e.args)) return;
  if (!is_integer(e.args, "last_rank")) {
    violation(e, "end of " + frame.name + " on " + where(e) + " has no integer \"last_rank\" arg");
  } else if (ranks_ > 0 && (e.args["last_rank"].get<int64_t>() < 0 ||
                            e.args["last_rank"].get<int64_t>() >= ranks_)) {
    violation(e, "end of " + frame.name + " on " + where(e) + " names last_rank " +
                     std::to_string(e.args["last_rank"].get<int64_t>()) +
                     ", not a rank of the run");
  }
  if (!is_number(e.args, "spread_us")) {
    violation(e, "end of " + frame.name + " on " + where(e) + " has no number \"spread_us\" arg");
  }
  if (frame.ticks > 0 && frame.last_tick_ts > e.ts + kTsEpsilon) {
    violation(e, "tick of rank " + std::to_string(frame.last_tick_rank) + " at ts " +
                     format_ts(frame.last_tick_ts) + " is after the end of its " + frame.name +
                     " (" + format_ts(e.ts) + ")");
  }
  if (ranks_ <= 0) return;
  // A process set's negotiation has its members' ticks; any other, every rank's.
  auto set = set_ranks_.find(e.pid);
  std::vector<int> expected;
  if (set == set_ranks_.end()) {
    for (int r = 0; r < ranks_; ++r) expected.push_back(r);
  } else {
    expected = set->second;
  }
  std::vector<int> missing;
  for (int r : expected) {
    if (static_cast<size_t>(r) >= frame.ticked.size() || !frame.ticked[r]) missing.push_back(r);
  }
  if (!missing.empty()) {
    Incomplete& pending = incomplete_negotiations_[e.pid];
    pending.violation = {
        e.index, e.begin_offset,
        frame.name + " on " + where(e) + " (opened at event #" + std::to_string(frame.event_index) +
            ") has ticks for " + std::to_string(expected.size() - missing.size()) + " of " +
            std::to_string(expected.size()) +
            (set == set_ranks_.end() ? " ranks" : " ranks of its process set") + "; missing rank" +
            (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
            " (every negotiation needs exactly one tick per rank)"};
    pending.slice = {
        e.pid, e.tid, 0, true, frame.name, frame.ts, frame.event_index, frame.previous_end};
  }
}

void TraceChecker::report_incomplete_negotiation(int64_t pid) {
  auto it = incomplete_negotiations_.find(pid);
  if (it == incomplete_negotiations_.end()) return;
  ++violation_count_;
  if (violations_.size() < options_.max_violations_kept) {
    violations_.push_back(std::move(it->second.violation));
  }
  incomplete_negotiations_.erase(it);
}

}  // namespace ranktime::timeline
