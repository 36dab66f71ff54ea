// TraceSummarizer, the composite: one pass over the events, the choices (window, ranks,
// operations) applied once, B/E paired once, and what it finds handed to every analysis in
// make_analyses()'s list (analysis.h says how to add one).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analysis/analysis.h"
#include "analysis/bandwidth.h"
#include "analysis/causes_analysis.h"
#include "analysis/cycles.h"
#include "analysis/fused_batches.h"
#include "analysis/fusion.h"
#include "analysis/lateness.h"
#include "analysis/phases.h"
#include "analysis/slice_tracker.h"
#include "analysis/steps.h"
#include "analysis/tensors.h"
#include "analysis/trace_args.h"
#include "analysis/waits.h"
#include "analysis/what_if.h"
#include "ranktime/timeline/cause_operators.h"
#include "ranktime/timeline/process_set_label.h"
#include "ranktime/timeline/profile_trace.h"
#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace analysis {
namespace {

// Every analysis, in the order finish() runs them (waits fills in lateness's rows).
std::vector<std::unique_ptr<Analysis>> make_analyses(const Pass& pass) {
  std::vector<std::unique_ptr<Analysis>> all;
  all.push_back(std::make_unique<LatenessAnalysis>(pass));
  all.push_back(std::make_unique<WaitsAnalysis>());
  all.push_back(std::make_unique<PhasesAnalysis>());
  all.push_back(std::make_unique<TensorsAnalysis>(pass));
  all.push_back(std::make_unique<FusionAnalysis>());
  all.push_back(std::make_unique<BandwidthAnalysis>(pass));
  if (pass.options().by_step) all.push_back(std::make_unique<StepsAnalysis>(pass));
  all.push_back(std::make_unique<CausesAnalysis>(pass));
  all.push_back(std::make_unique<CyclesAnalysis>());
  all.push_back(std::make_unique<WhatIfAnalysis>(pass));
  return all;
}

bool is_run_metadata(const TraceEvent& e) {
  return (e.phase() == 'M' || (e.phase() == 'i' && e.pid == 0)) &&
         (e.name == "ranktime_run" || e.name == "ranktime_run_end");
}

}  // namespace

Pass::Pass(SummaryOptions options) : options_(std::move(options)) {
  for (int r : options_.ranks) {
    if (r < 0 || r >= kMaxTraceRanks) continue;
    if (static_cast<size_t>(r) >= rank_selected_.size()) rank_selected_.resize(r + 1, false);
    rank_selected_[r] = true;
  }
}

bool Pass::in_window(double ts) const {
  if (options_.from_us && ts < *options_.from_us) return false;
  if (options_.to_us && ts > *options_.to_us) return false;
  return true;
}

bool Pass::selected(int rank) const {
  if (rank < 0 || rank >= kMaxTraceRanks) return false;
  if (options_.ranks.empty()) return true;
  return static_cast<size_t>(rank) < rank_selected_.size() && rank_selected_[rank];
}

bool Pass::selected(std::string_view operation) const {
  if (options_.operations.empty()) return true;
  return std::find(options_.operations.begin(), options_.operations.end(), operation) !=
         options_.operations.end();
}

}  // namespace analysis

using analysis::has_arg;
using analysis::int_arg;
using analysis::number_list;

struct TraceSummarizer::State {
  explicit State(SummaryOptions options)
      : pass(std::move(options)),
        analyses(analysis::make_analyses(pass)),
        batches(pass, [this](const analysis::Batch& b) {
          for (auto& a : analyses) a->add(b);
        }) {}

  void observe_time(double begin, double end);
  void on_metadata(const TraceEvent& e);
  void on_negotiation_end(const TraceEvent& e, const analysis::Slice& slice);
  void on_slice_end(const TraceEvent& e, int rank, analysis::Slice& slice, analysis::Slice* parent);
  void on_region_end(const TraceEvent& e, int64_t rank, const analysis::Slice& slice);
  void on_profiler_slice(const TraceEvent& e, int64_t rank);
  // What hands a closed operator of `rank` to the analyses.
  OperatorNesting::Closed operator_closed(int rank);
  void flush_operators();

  analysis::Pass pass;
  std::vector<std::unique_ptr<analysis::Analysis>> analyses;
  analysis::SliceTracker slices;
  analysis::FusedBatches batches;
  Summary summary;
  bool have_time = false;
  std::unordered_map<int64_t, int64_t> occurrences;  // pid -> negotiations seen
  // torch.profiler threads (pid, tid): their open operators, for each one's own time.
  std::map<std::pair<int64_t, int64_t>, OperatorNesting> operator_threads;
};

void TraceSummarizer::State::observe_time(double begin, double end) {
  if (!have_time) {
    summary.first_ts_us = begin;
    summary.last_ts_us = end;
    have_time = true;
  } else {
    summary.first_ts_us = std::min(summary.first_ts_us, begin);
    summary.last_ts_us = std::max(summary.last_ts_us, end);
  }
}

void TraceSummarizer::State::on_metadata(const TraceEvent& e) {
  const nlohmann::json& args = e.args;
  RunInfo& run = summary.run;
  if (e.name == "ranktime_run") {
    run.has_run_metadata = true;
    const int64_t ranks = int_arg(args, "ranks", 0);
    run.ranks = ranks > 0 && ranks <= kMaxTraceRanks ? static_cast<int>(ranks) : 0;
    pass.run_ranks = run.ranks;
    run.clock_offsets_us = number_list(args, "clock_offsets_us");
    run.clock_uncertainty_us = number_list(args, "clock_uncertainty_us");
    if (args.is_object() && args.contains("config") && args["config"].is_object()) {
      run.config.clear();
      for (const auto& [key, value] : args["config"].items()) {
        run.config.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    run.start_time_since_epoch_us = int_arg(args, "start_time_since_epoch_in_micros", 0);
    if (args.is_object() && args.contains("all_ranks") && args["all_ranks"].is_boolean())
      run.all_ranks = args["all_ranks"].get<bool>();
    if (args.is_object() && args.contains("timeline_ranks") && args["timeline_ranks"].is_string())
      run.timeline_ranks = args["timeline_ranks"].get<std::string>();
    if (args.is_object() && args.contains("hostnames") && args["hostnames"].is_array()) {
      run.hostnames.clear();
      for (const auto& h : args["hostnames"]) {
        run.hostnames.push_back(h.is_string() ? h.get<std::string>() : "?");
      }
    }
  } else if (e.name == "ranktime_run_end") {
    run.has_run_end = true;
    run.events_dropped = int_arg(args, "events_dropped", 0);
    run.regions_dropped = int_arg(args, "regions_dropped", 0);
    run.final_clock_offsets_us = number_list(args, "clock_offsets_us");
    run.final_clock_uncertainty_us = number_list(args, "clock_uncertainty_us");
  } else if (e.name == "process_name" && e.pid > 0 && args.is_object() && args.contains("name") &&
             args["name"].is_string()) {
    analysis::Pass::Tensor& t = pass.tensors[e.pid];
    t.name = args["name"].get<std::string>();
    t.set_ranks = static_cast<int>(process_set_ranks_in(t.name).size());
  }
}

void TraceSummarizer::State::on_negotiation_end(const TraceEvent& e, const analysis::Slice& slice) {
  const std::string_view op = negotiation_operation(slice.name);
  const int64_t occurrence = occurrences[e.pid]++;  // the tensor's n-th negotiation
  if (!pass.in_window(slice.ts) || !pass.selected(op)) return;
  observe_time(slice.ts, e.ts);
  ++summary.negotiations;
  if (has_arg(e.args, "error")) ++summary.negotiation_errors;
  analysis::Negotiation n;
  n.pid = e.pid;
  n.op = op;
  n.begin_us = slice.ts;
  n.end_us = e.ts;
  n.occurrence = occurrence;
  n.end_args = &e.args;
  for (const analysis::Tick& tick : slice.ticks) {
    if (pass.selected(tick.rank)) n.ticks.push_back(tick);
  }
  for (auto& a : analyses) a->add(n);
}

void TraceSummarizer::State::on_region_end(const TraceEvent& e, int64_t rank,
                                           const analysis::Slice& slice) {
  if (!pass.selected(static_cast<int>(rank)) || !pass.in_window(slice.ts)) return;
  analysis::RegionSlice region;
  region.rank = static_cast<int>(rank);
  region.name = &slice.name;
  region.begin_us = slice.ts;
  region.end_us = e.ts;
  region.blocked_us = analysis::number_arg(e.args, "blocked_us", 0);
  for (auto& a : analyses) a->add(region);
}

void TraceSummarizer::State::on_profiler_slice(const TraceEvent& e, int64_t rank) {
  if (e.phase() != 'X' || !e.has_dur || !pass.selected(static_cast<int>(rank))) return;
  if (e.name.compare(0, kAnchorPrefix.size(), kAnchorPrefix) == 0) return;  // the merge's own
  operator_threads[{e.pid, e.tid}].add(e.name, e.ts, e.dur,
                                       operator_closed(static_cast<int>(rank)));
}

OperatorNesting::Closed TraceSummarizer::State::operator_closed(int rank) {
  return [this, rank](const std::string& name, double begin_us, double own_us) {
    if (!pass.in_window(begin_us)) return;
    const analysis::OperatorSlice op{rank, &name, begin_us, own_us};
    for (auto& a : analyses) a->add(op);
  };
}

void TraceSummarizer::State::flush_operators() {
  for (auto& [thread, nesting] : operator_threads) {
    nesting.flush(operator_closed(static_cast<int>(torch_process_rank(thread.first))));
  }
  operator_threads.clear();
}

void TraceSummarizer::State::on_slice_end(const TraceEvent& e, int rank, analysis::Slice& slice,
                                          analysis::Slice* parent) {
  if (!pass.selected(rank)) return;
  const bool is_op = parent == nullptr && is_operation_name(slice.name);
  const bool is_sub = parent != nullptr && is_operation_name(parent->name);
  if (!is_op && !is_sub) return;
  analysis::Slice& op = is_op ? slice : *parent;
  // A sub-phase belongs to the window its operation began in.
  if (!pass.selected(op.name) || !pass.in_window(op.ts)) return;
  observe_time(slice.ts, e.ts);
  if (static_cast<size_t>(rank) >= pass.lanes_seen.size()) pass.lanes_seen.resize(rank + 1, false);
  pass.lanes_seen[rank] = true;
  analysis::RankSlice closed;
  closed.rank = rank;
  closed.pid = e.pid;
  closed.name = &slice.name;
  closed.begin_us = slice.ts;
  closed.end_us = e.ts;
  closed.op = &op;
  closed.subphase = is_sub;
  if (is_sub) {
    for (auto& a : analyses) a->add(closed);
    if (is_collective_subphase(slice.name)) {
      if (op.collective_begin < 0) op.collective_begin = slice.ts;
      op.collective_us += e.ts - slice.ts;
    }
    return;
  }
  if (has_arg(e.args, "error")) slice.error = true;
  if (slice.error) ++summary.operation_errors;
  closed.error = slice.error;
  for (auto& a : analyses) a->add(closed);
  const analysis::Pass::Tensor* tensor = pass.tensor(e.pid);
  batches.add(rank, tensor != nullptr ? tensor->set_ranks : 0, slice, slice.error);
}

TraceSummarizer::TraceSummarizer(SummaryOptions options)
    : state_(std::make_unique<State>(std::move(options))) {}

TraceSummarizer::~TraceSummarizer() = default;
TraceSummarizer::TraceSummarizer(TraceSummarizer&&) noexcept = default;
TraceSummarizer& TraceSummarizer::operator=(TraceSummarizer&&) noexcept = default;

void TraceSummarizer::add(const TraceEvent& e) {
  State& st = *state_;
  ++st.summary.events;
  if (e.phase() == 'M' || analysis::is_run_metadata(e)) {
    st.on_metadata(e);
    return;
  }
  if (!e.has_ts || !e.has_pid || !e.has_tid) return;
  // torch.profiler events (`ranktime merge`, process "rank R (torch)"): not the runtime's work,
  // but the operators inside a rank's regions, for the causes.
  if (const int64_t rank = torch_process_rank(e.pid); rank >= 0) {
    st.on_profiler_slice(e, rank);
    return;
  }
  const char ph = e.ph.size() == 1 ? e.ph[0] : '?';
  if (ph == 'B') {
    st.slices.open(e);
    return;
  }
  if (ph == 'E') {
    analysis::Slice* parent = nullptr;
    analysis::Slice* slice = st.slices.close(e, &parent);
    if (slice == nullptr || e.pid == 0) return;
    if (const int64_t rank = rank_process_rank(e.pid); rank >= 0) {
      // A rank's own process: its regions, never a tensor's lanes (whatever their names).
      if (e.tid == kRegionsThreadTid) st.on_region_end(e, rank, *slice);
      return;
    }
    if (e.tid == 0) {
      if (!negotiation_operation(slice->name).empty()) st.on_negotiation_end(e, *slice);
    } else if (e.tid >= 1 && e.tid <= kMaxTraceRanks) {
      st.on_slice_end(e, static_cast<int>(e.tid - 1), *slice, parent);
    }
    return;
  }
  if (ph == 'X') {
    if (e.pid > 0 && e.tid == 0 && has_arg(e.args, "rank")) st.slices.tick(e);
    return;
  }
  if (ph == 'i' && e.pid == 0 && e.name == "CYCLE_START" && st.pass.in_window(e.ts)) {
    st.observe_time(e.ts, e.ts);
    for (auto& a : st.analyses) a->add_cycle_mark(e.ts);
  }
}

Summary TraceSummarizer::finish() {
  State& st = *state_;
  // Batches still waiting for members (window edge, truncated file) count as they are.
  st.batches.flush();
  st.flush_operators();
  Summary s = std::move(st.summary);
  s.wall_us = std::max(0.0, s.last_ts_us - s.first_ts_us);
  for (size_t r = 0; r < st.pass.lanes_seen.size(); ++r) {
    if (st.pass.lanes_seen[r]) s.lane_ranks.push_back(static_cast<int>(r));
  }
  s.rank_lanes = static_cast<int>(s.lane_ranks.size());
  for (auto& a : st.analyses) a->finish(s);
  return s;
}

}  // namespace ranktime::timeline
