// The rules of docs/timeline-format.md, checked in one pass with a stack per (pid, tid): each
// event's fields, metadata, the run's metadata and lanes, rank lanes, and what is left open at
// the end. The negotiate threads' rules are in trace_check_negotiation.cc, pid 0's events and
// flow arrows in trace_check_run_events.cc; repair in trace_repair.cc.
#include "ranktime/timeline/trace_check.h"

#include <algorithm>
#include <cstring>

#include "check_values.h"
#include "ranktime/timeline/process_set_label.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

bool is_run_metadata_name(const std::string& name) {
  return name == "ranktime_run" || name == "ranktime_run_end";
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
  if (e.pid > 0 && it != process_names_.end()) {
    out += (rank_process_rank(e.pid) >= 0 ? " (" : " (tensor ") + in_quotes(it->second) + ")";
  }
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
  } else if (rank_process_rank(e.pid) >= 0) {
    on_region_event(e, thread);
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

void TraceChecker::on_region_event(const TraceEvent& e, ThreadState& thread) {
  const int64_t rank = rank_process_rank(e.pid);
  if (e.tid != kRegionsThreadTid) {
    violation(e, "'" + e.ph + "' event " + in_quotes(e.name) + " on " + where(e) + ": rank " +
                     std::to_string(rank) + "'s process has only its regions thread, tid " +
                     std::to_string(kRegionsThreadTid));
    return;
  }
  if (e.phase() == 'B') {
    if (ranks_ > 0 && rank >= ranks_ && thread.stack.empty()) {
      violation(e, "region " + in_quotes(e.name) + " of rank " + std::to_string(rank) +
                       ", but the run has " + std::to_string(ranks_) + " ranks");
    }
    // Region names are the user's: any name; blocked_us, where present, a time >= 0.
    if (e.args.is_object() && e.args.contains("blocked_us") &&
        (!e.args["blocked_us"].is_number() || e.args["blocked_us"].get<double>() < 0)) {
      violation(e, "region " + in_quotes(e.name) + " on " + where(e) +
                       " has a \"blocked_us\" that is not a number >= 0");
    }
    Frame frame;
    frame.name = e.name;
    frame.ts = e.ts;
    frame.event_index = e.index;
    frame.offset = e.begin_offset;
    thread.stack.push_back(std::move(frame));
    return;
  }
  if (e.phase() == 'E') {
    Frame frame;
    close_slice(e, thread, &frame);
    return;
  }
  violation(e, "unexpected '" + e.ph + "' event " + in_quotes(e.name) + " on " + where(e) +
                   " (a regions thread has complete slices only)");
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

}  // namespace ranktime::timeline
