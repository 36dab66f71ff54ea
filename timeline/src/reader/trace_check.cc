// The rules of docs/timeline-format.md, checked in one pass with a stack per (pid, tid), and the
// repair of a file cut short.
#include "ranktime/timeline/trace_check.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "gzip_input.h"
#include "ranktime/timeline/process_set_label.h"
#include "ranktime/timeline/trace_names.h"
#include "trace_file.h"

namespace ranktime::timeline {
namespace {

// Timestamps carry three decimals; allow one unit of the last for rounding.
constexpr double kTsEpsilon = 0.0011;

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

std::string format_ts(double ts) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.3f", ts);
  return buffer;
}

bool is_integer(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_number_integer();
}
bool is_number(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_number();
}
bool is_string(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key) && args[key].is_string();
}
bool is_run_metadata_name(const std::string& name) {
  return name == "ranktime_run" || name == "ranktime_run_end";
}
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

TraceChecker::TraceChecker(CheckOptions options) : options_(options) {}

void TraceChecker::violation(const TraceEvent& e, std::string message) {
  ++violation_count_;
  if (violations_.size() < options_.max_violations_kept) {
    violations_.push_back({e.index, e.begin_offset, std::move(message)});
  }
}

void TraceChecker::file_violation(uint64_t offset, std::string message) {
  ++violation_count_;
  if (violations_.size() < options_.max_violations_kept) {
    violations_.push_back({kNoEvent, offset, std::move(message)});
  }
}

std::string TraceChecker::where(const TraceEvent& e) const {
  std::string out = "pid " + std::to_string(e.pid);
  auto it = process_names_.find(e.pid);
  if (e.pid > 0 && it != process_names_.end()) out += " (tensor " + in_quotes(it->second) + ")";
  out += " tid " + std::to_string(e.tid);
  return out;
}

void TraceChecker::add(const TraceEvent& e) {
  check_event(e);
  end_offset_ = std::max(end_offset_, e.end_offset);
}

void TraceChecker::check_event(const TraceEvent& e) {
  ++events_;
  if (!e.malformed.empty()) {
    violation(e, e.malformed);
    return;
  }
  if (!e.has_ph || !e.has_name) {
    violation(e, std::string("missing \"") + (e.has_ph ? "name" : "ph") + "\"");
    return;
  }
  if (e.phase() == '\0' || std::strchr("MBEXiCstf", e.phase()) == nullptr) {
    violation(e, "unknown phase \"ph\":\"" + e.ph +
                     "\" (a ranktime timeline uses M, B, E, X, i, C, and s, t, f for flow arrows)");
    return;
  }
  if (!e.has_pid || !e.has_tid) {
    violation(e, std::string("missing \"") + (e.has_pid ? "tid" : "pid") + "\"");
    return;
  }
  if (e.pid < 0 || e.tid < 0) {
    violation(e, "negative pid or tid");
    return;
  }
  if (e.phase() == 'M') {
    on_metadata(e);
    return;
  }
  if (!e.has_ts) {
    violation(e, "missing \"ts\" on a '" + e.ph + "' event " + in_quotes(e.name));
    return;
  }
  // The run's metadata may also be an instant on pid 0 (where both viewers show its args).
  if (e.phase() == 'i' && e.pid == 0 && is_run_metadata_name(e.name)) {
    on_run_metadata(e);
    seen_timed_ = true;
    return;
  }
  if (!seen_timed_) {
    seen_timed_ = true;
    if (!has_run_) violation(e, "no ranktime_run metadata event before the first timed event");
  }
  max_ts_ = std::max(max_ts_, e.ts + (e.phase() == 'X' ? std::max(0.0, e.dur) : 0.0));
  if (e.pid > 0 && process_names_.count(e.pid) == 0 && unnamed_reported_.insert(e.pid).second) {
    violation(e, "pid " + std::to_string(e.pid) +
                     " has events before its process_name metadata (the tensor's name)");
  }
  if (e.phase() == 's' || e.phase() == 't' || e.phase() == 'f') {
    on_flow(e);
    return;
  }
  // torch.profiler events (`ranktime merge`): the profiler's, in its order (not per thread).
  if (torch_process_rank(e.pid) >= 0) return;
  ThreadState& thread = threads_[{e.pid, e.tid}];
  if (thread.has_ts && e.ts + kTsEpsilon < thread.last_ts) {
    violation(e, "ts " + format_ts(e.ts) + " of " + in_quotes(e.name) + " ('" + e.ph +
                     "') is earlier than the previous event on " + where(e) + " (" +
                     format_ts(thread.last_ts) + "): one thread's events must be in time order");
  }
  thread.last_ts = thread.has_ts ? std::max(thread.last_ts, e.ts) : e.ts;
  thread.has_ts = true;
  if (e.pid == 0) {
    on_run_event(e);
  } else if (e.tid == 0) {
    on_negotiate_event(e, thread);
  } else {
    on_rank_event(e, thread);
  }
}

void TraceChecker::on_metadata(const TraceEvent& e) {
  if (!is_metadata_name(e.name)) {
    violation(e, "unknown metadata event " + in_quotes(e.name));
    return;
  }
  if (is_run_metadata_name(e.name)) {
    on_run_metadata(e);
    return;
  }
  if (e.name == "process_name" || e.name == "thread_name") {
    if (!is_string(e.args, "name")) {
      violation(e, e.name + " has no string \"name\" in its args");
      return;
    }
    if (e.name == "process_name") {
      std::string name = e.args["name"].get<std::string>();
      std::vector<int> set = process_set_ranks_in(name);
      if (!set.empty()) set_ranks_[e.pid] = std::move(set);
      process_names_[e.pid] = std::move(name);
    }
    if (e.name == "thread_name" && e.pid == 0) on_run_thread_name(e);
    return;
  }
  if (!is_integer(e.args, "sort_index")) {
    violation(e, e.name + " has no integer \"sort_index\" in its args");
  }
}

void TraceChecker::on_run_metadata(const TraceEvent& e) {
  if (e.name == "ranktime_run") {
    if (e.pid != 0) violation(e, "ranktime_run must be on pid 0");
    if (has_run_) violation(e, "a second ranktime_run metadata event");
    if (seen_timed_) violation(e, "ranktime_run must come before the first timed event");
    has_run_ = true;
    if (!is_integer(e.args, "ranks") || e.args["ranks"].get<int64_t>() < 1) {
      violation(e, "ranktime_run has no integer \"ranks\" >= 1 in its args");
    } else if (e.args["ranks"].get<int64_t>() > kMaxTraceRanks) {
      violation(e, "ranktime_run's \"ranks\" " + std::to_string(e.args["ranks"].get<int64_t>()) +
                       " is out of range (at most " + std::to_string(kMaxTraceRanks) + ")");
    } else {
      ranks_ = static_cast<int>(e.args["ranks"].get<int64_t>());
    }
    on_lane_choice(e.args);
    return;
  }
  has_run_end_ = true;
}

void TraceChecker::on_lane_choice(const nlohmann::json& args) {
  lane_choice_.clear();
  lane_allowed_.clear();
  if (!args.is_object() || !args.contains("all_ranks") || args["all_ranks"] != false) return;
  const std::string chosen = is_string(args, "timeline_ranks") ? args["timeline_ranks"] : "";
  lane_choice_ = chosen.empty() ? "TIMELINE_ALL_RANKS=0" : "TIMELINE_RANKS=" + chosen;
  // slowest:K chose again as the run went: any rank's lanes may be in the file.
  if (chosen.rfind("slowest:", 0) == 0) return;
  lane_allowed_.assign(1, true);  // rank 0's always
  for (size_t at = 0; at < chosen.size();) {
    const size_t comma = std::min(chosen.find(',', at), chosen.size());
    const std::string item = chosen.substr(at, comma - at);
    if (item.empty() || item.size() > 6 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      lane_allowed_.clear();  // not a list this checker reads: allow any
      return;
    }
    const size_t rank = std::stoul(item);
    if (rank >= lane_allowed_.size()) lane_allowed_.resize(rank + 1, false);
    lane_allowed_[rank] = true;
    at = comma + 1;
  }
}

void TraceChecker::check_lane_chosen(const TraceEvent& e, int64_t rank) {
  if (rank < 0 || rank >= kMaxTraceRanks) return;
  const auto r = static_cast<size_t>(rank);
  if (r >= lane_seen_.size()) lane_seen_.resize(r + 1, false);
  if (lane_seen_[r]) return;
  lane_seen_[r] = true;
  if (lane_allowed_.empty() || (r < lane_allowed_.size() && lane_allowed_[r])) return;
  violation(e, "tid " + std::to_string(e.tid) + " is the lane of rank " + std::to_string(rank) +
                   ", but the run wrote only the lanes " + lane_choice_ + " chose");
}

std::vector<int> TraceChecker::lane_ranks() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < lane_seen_.size(); ++r) {
    if (lane_seen_[r]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

void TraceChecker::on_run_thread_name(const TraceEvent& e) {
  const std::string name = e.args["name"].get<std::string>();
  const int64_t rank = step_thread_rank(name);
  if (rank < 0) return;
  if (ranks_ > 0 && rank >= ranks_) {
    violation(e, "thread " + in_quotes(name) + " on pid 0 names rank " + std::to_string(rank) +
                     ", but the run has " + std::to_string(ranks_) + " ranks");
  }
  step_threads_[e.tid] = StepThread{rank, -1};
}

void TraceChecker::on_step(const TraceEvent& e) {
  auto thread = step_threads_.find(e.tid);
  if (thread == step_threads_.end()) {
    violation(e, "STEP slice on pid 0 tid " + std::to_string(e.tid) +
                     ", a thread not named 'steps rank r' (its thread_name must come first)");
    return;
  }
  if (!e.has_dur || e.dur < 0) {
    violation(e,
              "STEP slice of rank " + std::to_string(thread->second.rank) + " has no \"dur\" >= 0");
  }
  if (!is_integer(e.args, "step") || e.args["step"].get<int64_t>() < 0) {
    violation(e, "STEP slice of rank " + std::to_string(thread->second.rank) +
                     " has no integer \"step\" >= 0 in its args");
    return;
  }
  const int64_t step = e.args["step"].get<int64_t>();
  if (step <= thread->second.last_step) {
    violation(e, "STEP " + std::to_string(step) + " of rank " +
                     std::to_string(thread->second.rank) + " after step " +
                     std::to_string(thread->second.last_step) +
                     ": a rank's steps are numbered upwards");
  }
  thread->second.last_step = step;
}

void TraceChecker::on_flow(const TraceEvent& e) {
  const std::string what = "flow event " + in_quotes(e.name) + " ('" + e.ph + "') on " + where(e);
  if (!e.has_id) {
    violation(e, what + " has no \"id\"");
    return;
  }
  if (!e.bp.empty() && e.bp != "e") {
    violation(e, what + " has \"bp\":\"" + e.bp + "\" (the only binding point is \"e\")");
  }
  ++flow_events_;
  // An arrow may not point back in time. Its two ends can come in either order in the file (the
  // file is sorted per thread only); an end whose other end never comes is fine (the run was
  // cut, or a rotated file holds it).
  if (e.phase() == 's') {
    auto end = flow_ends_.find(e.id);
    if (end != flow_ends_.end()) {
      check_flow_order(e, e.ts, end->second);
      flow_ends_.erase(end);
    } else if (flow_starts_.size() < kMaxOpenFlows) {
      flow_starts_[e.id] = e.ts;
    }
  } else if (e.phase() == 'f') {
    auto start = flow_starts_.find(e.id);
    if (start != flow_starts_.end()) {
      check_flow_order(e, start->second, e.ts);
      flow_starts_.erase(start);
    } else if (flow_ends_.size() < kMaxOpenFlows) {
      flow_ends_[e.id] = e.ts;
    }
  }
}

void TraceChecker::check_flow_order(const TraceEvent& e, double start_ts, double end_ts) {
  ++flows_;
  if (end_ts + kTsEpsilon < start_ts) {
    violation(e, "flow arrow id " + e.id + " ends (ts " + format_ts(end_ts) +
                     ") before it starts (ts " + format_ts(start_ts) + ")");
  }
}

void TraceChecker::on_run_event(const TraceEvent& e) {
  if (e.phase() == 'X' && e.name == kStepSliceName) {
    on_step(e);
    return;
  }
  if (e.phase() == 'i') {
    if (e.name == "CYCLE_START") {
      if (!is_integer(e.args, "cycle") || e.args["cycle"].get<int64_t>() < 1) {
        violation(e, "CYCLE_START has no integer \"cycle\" >= 1 in its args");
      }
    } else if (!is_string(e.args, "message")) {
      violation(e, "instant " + in_quotes(e.name) + " on pid 0 has no string \"message\" arg");
    }
    return;
  }
  if (e.phase() == 'C') {
    if (!e.args.is_object() || e.args.empty()) {
      violation(e, "counter " + in_quotes(e.name) + " has no series in its args");
      return;
    }
    for (const auto& [series, value] : e.args.items()) {
      if (!value.is_number()) {
        violation(e, "counter " + in_quotes(e.name) + " series " + in_quotes(series) +
                         " is not a number");
        return;
      }
    }
    return;
  }
  violation(e, "unexpected '" + e.ph + "' event " + in_quotes(e.name) +
                   " on pid 0 (pid 0 holds run metadata, cycle markers, STEP slices, instants and "
                   "counters)");
}

bool TraceChecker::close_slice(const TraceEvent& e, ThreadState& thread, Frame* closed) {
  if (thread.stack.empty()) {
    violation(e, "'E' of " + in_quotes(e.name) + " on " + where(e) + " closes no open slice");
    return false;
  }
  if (thread.stack.back().name != e.name) {
    const Frame& top = thread.stack.back();
    violation(e, "'E' of " + in_quotes(e.name) + " on " + where(e) +
                     " does not match the open slice " + in_quotes(top.name) +
                     " (opened at event #" + std::to_string(top.event_index) +
                     "): slices on one thread must nest");
    // Resynchronise on the matching slice further down, if any, so one mistake is one message.
    auto match = std::find_if(thread.stack.rbegin(), thread.stack.rend(),
                              [&](const Frame& f) { return f.name == e.name; });
    if (match == thread.stack.rend()) return false;
    thread.stack.resize(thread.stack.size() - static_cast<size_t>(match - thread.stack.rbegin()));
  }
  *closed = std::move(thread.stack.back());
  thread.stack.pop_back();
  return true;
}

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

void TraceChecker::on_rank_event(const TraceEvent& e, ThreadState& thread) {
  const int64_t rank = e.tid - 1;
  if (ranks_ > 0 && rank >= ranks_ && e.phase() == 'B' && thread.stack.empty()) {
    violation(e, "tid " + std::to_string(e.tid) + " is the lane of rank " + std::to_string(rank) +
                     ", but the run has " + std::to_string(ranks_) + " ranks");
  }
  if (e.phase() == 'B') {
    Frame frame;
    frame.name = e.name;
    frame.ts = e.ts;
    frame.event_index = e.index;
    frame.offset = e.begin_offset;
    if (thread.stack.empty()) {
      if (is_operation_name(e.name)) {
        frame.kind = FrameKind::kOperation;
        check_lane_chosen(e, rank);
        if (!is_integer(e.args, "bytes")) {
          violation(e, e.name + " slice on " + where(e) + " has no integer \"bytes\" arg");
        }
        if (!is_integer(e.args, "fused_tensors") || e.args["fused_tensors"].get<int64_t>() < 1) {
          violation(
              e, e.name + " slice on " + where(e) + " has no integer \"fused_tensors\" >= 1 arg");
        }
        if (!is_string(e.args, "dtype")) {
          violation(e, e.name + " slice on " + where(e) + " has no string \"dtype\" arg");
        }
        if (!e.args.is_object() || !e.args.contains("shape") || !e.args["shape"].is_array()) {
          violation(e, e.name + " slice on " + where(e) + " has no \"shape\" array arg");
        }
      } else if (is_subphase_name(e.name)) {
        violation(e, "sub-phase " + in_quotes(e.name) + " on " + where(e) +
                         " is outside an operation slice");
      } else {
        violation(e, "unknown slice " + in_quotes(e.name) + " on " + where(e) + " (expected " +
                         operation_names_text() + ")");
      }
    } else if (thread.stack.back().kind == FrameKind::kOperation) {
      if (is_subphase_name(e.name)) {
        frame.kind = FrameKind::kSubphase;
      } else if (is_operation_name(e.name)) {
        violation(e, "operation slice " + in_quotes(e.name) + " on " + where(e) +
                         " opens inside the open " + in_quotes(thread.stack.back().name) +
                         " (opened at event #" + std::to_string(thread.stack.back().event_index) +
                         ")");
      } else {
        violation(e, "unknown sub-phase " + in_quotes(e.name) + " on " + where(e));
      }
    } else {
      violation(e, in_quotes(e.name) + " on " + where(e) + " opens inside the sub-phase " +
                       in_quotes(thread.stack.back().name) + " (opened at event #" +
                       std::to_string(thread.stack.back().event_index) +
                       "): sub-phases never nest or overlap");
    }
    thread.stack.push_back(std::move(frame));
    return;
  }
  if (e.phase() == 'E') {
    Frame frame;
    close_slice(e, thread, &frame);
    return;
  }
  violation(
      e, "unexpected '" + e.ph + "' event " + in_quotes(e.name) + " on the rank lane " + where(e));
}

void TraceChecker::finish(const TraceReadResult& read) {
  if (!read.opened) {
    file_violation(0, read.error);
    return;
  }
  if (read.truncated) {
    file_violation(read.error_offset,
                   read.error + "; `ranktime check --repair` completes the file");
  } else if (!read.complete && !read.stopped) {
    file_violation(read.error_offset, read.error);
  }
  if (!has_run_ && !seen_timed_) file_violation(0, "no ranktime_run metadata event");
  // Each negotiate thread's last negotiation without all its ticks: in a file cut short, the
  // cut took them (a repair keeps the file up to it); otherwise they are missing.
  std::vector<int64_t> pids;
  for (const auto& [pid, pending] : incomplete_negotiations_) pids.push_back(pid);
  std::sort(pids.begin(), pids.end());
  for (int64_t pid : pids) {
    if (read.truncated) {
      cut_off_.push_back(incomplete_negotiations_[pid].slice);
      incomplete_negotiations_.erase(pid);
    } else {
      report_incomplete_negotiation(pid);
    }
  }
  for (const OpenSliceInfo& open : open_slices()) {
    if (open.incomplete) continue;
    std::string name = "pid " + std::to_string(open.pid);
    auto it = process_names_.find(open.pid);
    if (open.pid > 0 && it != process_names_.end())
      name += " (tensor " + in_quotes(it->second) + ")";
    ++violation_count_;
    if (violations_.size() < options_.max_violations_kept) {
      violations_.push_back({open.event_index, open.offset,
                             "slice " + in_quotes(open.name) + " on " + name + " tid " +
                                 std::to_string(open.tid) + " (ts " + format_ts(open.ts) +
                                 ") is never closed"});
    }
  }
}

std::vector<OpenSliceInfo> TraceChecker::open_slices() const {
  std::vector<OpenSliceInfo> open;
  for (const auto& [key, thread] : threads_) {
    for (size_t i = 0; i < thread.stack.size(); ++i) {
      const Frame& f = thread.stack[i];
      open.push_back({key.first, key.second, static_cast<int>(i), false, f.name, f.ts,
                      f.event_index, f.offset});
    }
  }
  open.insert(open.end(), cut_off_.begin(), cut_off_.end());
  // Deterministic order: by thread, outermost first.
  std::sort(open.begin(), open.end(), [](const OpenSliceInfo& a, const OpenSliceInfo& b) {
    if (a.pid != b.pid) return a.pid < b.pid;
    if (a.tid != b.tid) return a.tid < b.tid;
    return a.depth < b.depth;
  });
  return open;
}

RepairPlan plan_repair(const TraceReadResult& read, const std::vector<OpenSliceInfo>& open,
                       double close_ts, uint64_t file_size) {
  RepairPlan plan;
  plan.events_kept = read.events;
  if (read.complete && open.empty()) {
    plan.keep_bytes = file_size;  // applying it copies the file as it is
    return plan;
  }
  plan.needed = true;
  if (read.events == 0) {
    plan.keep_bytes = read.array_begin;  // 0 when there is no '[' either
    plan.tail = read.array_begin > 0 ? "\n]\n" : "[\n]\n";
  } else {
    plan.keep_bytes = read.last_event_end;
    // A negotiation whose ticks the cut took is dropped, with what follows it.
    for (const OpenSliceInfo& slice : open) {
      if (slice.incomplete && slice.offset < plan.keep_bytes) {
        plan.keep_bytes = slice.offset;
        plan.events_kept = slice.event_index;
      }
    }
    // Close inner slices before outer ones: walk each thread's stack from the top.
    std::vector<OpenSliceInfo> closing;
    for (const OpenSliceInfo& slice : open) {
      if (!slice.incomplete && slice.offset < plan.keep_bytes) closing.push_back(slice);
    }
    std::stable_sort(closing.begin(), closing.end(),
                     [](const OpenSliceInfo& a, const OpenSliceInfo& b) {
                       if (a.pid != b.pid) return a.pid < b.pid;
                       if (a.tid != b.tid) return a.tid < b.tid;
                       return a.depth > b.depth;
                     });
    for (const OpenSliceInfo& slice : closing) {
      nlohmann::json event = {{"name", slice.name}, {"ph", "E"}, {"pid", slice.pid},
                              {"tid", slice.tid},   {"ts", 0},   {"args", {{"repaired", true}}}};
      std::string text = event.dump();
      // nlohmann orders keys; put the timestamp in with three decimals, as the writer does.
      const std::string placeholder = "\"ts\":0";
      text.replace(text.find(placeholder), placeholder.size(),
                   "\"ts\":" + format_ts(std::max(close_ts, slice.ts)));
      plan.tail += ",\n" + text;
      ++plan.closed_slices;
    }
    plan.tail += "\n]\n";
  }
  plan.bytes_dropped = file_size > plan.keep_bytes ? file_size - plan.keep_bytes : 0;
  return plan;
}

namespace {

// A gzip trace's repair: its text up to `plan.keep_bytes`, then the tail, compressed into a new
// file (a temporary one renamed over the input when repairing in place).
bool apply_gzip_repair(const std::string& in_path, const std::string& out_path,
                       const RepairPlan& plan, std::string* error) {
  auto fail = [&](const std::string& what, const std::string& path, int code) {
    if (error) *error = what + " " + path + ": " + std::strerror(code);
    return false;
  };
  std::ifstream in(in_path, std::ios::binary);
  if (!in) return fail("cannot open", in_path, errno);
  InflatingBuffer inflating(in.rdbuf());
  const std::string target = out_path == in_path ? in_path + ".repair.tmp" : out_path;
  int code = 0;
  std::unique_ptr<TraceFile> out =
      TraceFile::create(target, /*gzip=*/true, /*gzip_level=*/1, &code);
  if (!out) return fail("cannot create", target, code);
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t left = plan.keep_bytes;
  while (left > 0) {
    const auto want = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
    const std::streamsize got = inflating.sgetn(buffer.data(), want);
    if (got <= 0) return fail("cannot read", in_path, EIO);
    if (!out->append(std::string_view(buffer.data(), static_cast<size_t>(got)), &code)) {
      return fail("cannot write", target, code);
    }
    left -= static_cast<uint64_t>(got);
  }
  // The file adds the closing bracket that ends the plan's tail.
  std::string_view tail = plan.tail;
  if (tail.size() >= TraceFile::kClosing.size() &&
      tail.substr(tail.size() - TraceFile::kClosing.size()) == TraceFile::kClosing) {
    tail.remove_suffix(TraceFile::kClosing.size());
  }
  if (!out->finish(tail, &code)) return fail("cannot write", target, code);
  out.reset();
  if (target != out_path && std::rename(target.c_str(), out_path.c_str()) != 0) {
    return fail("cannot replace", out_path, errno);
  }
  return true;
}

}  // namespace

bool apply_repair(const std::string& in_path, const std::string& out_path, const RepairPlan& plan,
                  std::string* error) {
  if (is_gzip_file(in_path)) return apply_gzip_repair(in_path, out_path, plan, error);
  auto fail = [&](const std::string& what, const std::string& path) {
    if (error) *error = what + " " + path + ": " + std::strerror(errno);
    return false;
  };
  if (out_path == in_path) {
    if (::truncate(in_path.c_str(), static_cast<off_t>(plan.keep_bytes)) != 0) {
      return fail("cannot truncate", in_path);
    }
    std::ofstream out(in_path, std::ios::binary | std::ios::app);
    if (!out) return fail("cannot open", in_path);
    out << plan.tail;
    out.flush();
    if (!out) return fail("cannot write", in_path);
    return true;
  }
  std::ifstream in(in_path, std::ios::binary);
  if (!in) return fail("cannot open", in_path);
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) return fail("cannot create", out_path);
  std::vector<char> buffer(size_t{1} << 20);
  uint64_t left = plan.keep_bytes;
  while (left > 0) {
    auto chunk = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
    in.read(buffer.data(), chunk);
    if (in.gcount() != chunk) return fail("cannot read", in_path);
    out.write(buffer.data(), chunk);
    left -= static_cast<uint64_t>(chunk);
  }
  out << plan.tail;
  out.flush();
  if (!out) return fail("cannot write", out_path);
  return true;
}

}  // namespace ranktime::timeline
