// The checker's rules for pid 0's events (step marks, cycle markers, instants, counters) and for
// flow arrows.
#include <string>

#include "check_values.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {

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

}  // namespace ranktime::timeline
