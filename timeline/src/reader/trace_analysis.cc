// One-pass trace analysis for `ranktime summary` and `report`. Negotiations give lateness and
// wall-clock waits (their ticks), rank lanes give where the time went, fusion and bandwidth.
// Fused batches share their slices: a slice shared by a batch's tensors (same rank, name, begin
// and end) is counted once.
#include "ranktime/timeline/trace_analysis.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>

#include "ranktime/timeline/process_set_label.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

constexpr double kHistogramMin = 0.01;  // µs: the first bucket's lower edge
const double kHistogramLogStep = std::log(1.01);
// Bound on fused batches (and their shared slices) waiting for their other members. The writer
// emits a batch's members close together; this only matters for broken traces.
constexpr size_t kMaxPending = size_t{1} << 16;
// Steps whose negotiations may still come. Negotiations complete nearly in step order; one of a
// step already closed reopens it and is added to it.
constexpr size_t kMaxOpenSteps = 8;
// Per-step figures keep a row per rank and step; ranks from here up (a corrupt trace's, or a run
// larger than any this tool is for) are left out of them, not of the run's figures.
constexpr int kMaxStepRanks = 4096;
// Intervals kept per (phase, rank) union before older ones are folded (IntervalUnion).
constexpr size_t kPhaseUnionIntervals = 256;

int64_t to_ns(double us) { return std::llround(us * 1000.0); }

int64_t int_arg(const nlohmann::json& args, const char* key, int64_t fallback) {
  if (!args.is_object()) return fallback;
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return fallback;
  return it->is_number_float() ? static_cast<int64_t>(it->get<double>()) : it->get<int64_t>();
}

double number_arg(const nlohmann::json& args, const char* key, double fallback) {
  if (!args.is_object()) return fallback;
  auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

bool has_arg(const nlohmann::json& args, const char* key) {
  return args.is_object() && args.contains(key);
}

std::vector<double> number_list(const nlohmann::json& args, const char* key) {
  std::vector<double> out;
  if (!args.is_object() || !args.contains(key) || !args[key].is_array()) return out;
  for (const auto& v : args[key]) out.push_back(v.is_number() ? v.get<double>() : 0.0);
  return out;
}

bool is_run_metadata(const TraceEvent& e) {
  return (e.phase() == 'M' || (e.phase() == 'i' && e.pid == 0)) &&
         (e.name == "ranktime_run" || e.name == "ranktime_run_end");
}

}  // namespace

void LogHistogram::add(double value) {
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  sum_ += value;
  size_t bucket = 0;
  if (value > 0) {
    double steps = std::log(std::max(value, kHistogramMin) / kHistogramMin) / kHistogramLogStep;
    bucket = 1 + static_cast<size_t>(std::min(steps, 1e6));
  }
  if (bucket >= counts_.size()) {
    counts_.resize(bucket + 1, 0);
    sums_.resize(bucket + 1, 0.0);
  }
  ++counts_[bucket];
  sums_[bucket] += value;
}

double LogHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // The value of rank ceil(q * count) (1-based), as "nearest rank" percentiles define it.
  uint64_t target = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  uint64_t seen = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    seen += counts_[b];
    if (seen < target) continue;
    return std::clamp(sums_[b] / static_cast<double>(counts_[b]), min_, max_);
  }
  return max_;
}

bool StepMarks::empty() const {
  for (const auto& marks : by_rank) {
    if (!marks.empty()) return false;
  }
  return true;
}

int64_t StepMarks::step_at(int rank, double ts) const {
  if (rank < 0 || static_cast<size_t>(rank) >= by_rank.size()) return -1;
  const auto& marks = by_rank[rank];
  auto after = std::upper_bound(marks.begin(), marks.end(), ts,
                                [](double t, const auto& mark) { return t < mark.first; });
  if (after == marks.begin()) return -1;
  return std::prev(after)->second;
}

void StepMarkCollector::add(const TraceEvent& e) {
  if (e.pid != 0) return;
  if (e.phase() == 'M' && e.name == "thread_name" && e.args.is_object() &&
      e.args.contains("name") && e.args["name"].is_string()) {
    const int64_t rank = step_thread_rank(e.args["name"].get<std::string>());
    if (rank >= 0 && rank < kMaxTraceRanks) thread_rank_[e.tid] = rank;
    return;
  }
  if (e.phase() != 'X' || e.name != kStepSliceName || !e.has_ts) return;
  auto it = thread_rank_.find(e.tid);
  const int64_t rank = it != thread_rank_.end() ? it->second : int_arg(e.args, "rank", -1);
  const int64_t step = int_arg(e.args, "step", -1);
  if (rank < 0 || rank >= kMaxTraceRanks || step < 0) return;
  if (static_cast<size_t>(rank) >= marks_.by_rank.size()) marks_.by_rank.resize(rank + 1);
  marks_.by_rank[rank].emplace_back(e.ts, step);
}

StepMarks StepMarkCollector::finish() {
  for (auto& marks : marks_.by_rank) std::stable_sort(marks.begin(), marks.end());
  return std::move(marks_);
}

double bus_bandwidth_factor(const std::string& op, int ranks) {
  if (ranks <= 0) return 0;
  double n = ranks;
  if (op == "ALLREDUCE") return 2.0 * (n - 1) / n;
  // Reducescatter's and alltoall's bytes are a rank's input, of which (n-1)/n leave it.
  if (op == "ALLGATHER" || op == "REDUCESCATTER" || op == "ALLTOALL") return (n - 1) / n;
  if (op == "BROADCAST") return 1.0;
  return 0;
}

void TraceSummarizer::Accum::add(double v) {
  if (count == 0) {
    min = max = v;
  } else {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  ++count;
  total += v;
}

size_t TraceSummarizer::BatchKeyHash::operator()(const BatchKey& k) const {
  return std::hash<int64_t>()(k.begin_ns) * 31 + std::hash<std::string>()(k.op) * 7 +
         static_cast<size_t>(k.rank);
}

size_t TraceSummarizer::SliceKeyHash::operator()(const SliceKey& k) const {
  return std::hash<int64_t>()(k.begin_ns) * 31 + std::hash<int64_t>()(k.end_ns) * 17 +
         std::hash<std::string>()(k.name) * 7 + static_cast<size_t>(k.rank);
}

TraceSummarizer::TraceSummarizer(SummaryOptions options) : options_(std::move(options)) {
  for (int r : options_.ranks) {
    if (r < 0 || r >= kMaxTraceRanks) continue;
    if (static_cast<size_t>(r) >= rank_selected_.size()) rank_selected_.resize(r + 1, false);
    rank_selected_[r] = true;
  }
}

bool TraceSummarizer::in_window(double ts) const {
  if (options_.from_us && ts < *options_.from_us) return false;
  if (options_.to_us && ts > *options_.to_us) return false;
  return true;
}

bool TraceSummarizer::selected(int rank) const {
  if (rank < 0 || rank >= kMaxTraceRanks) return false;
  if (options_.ranks.empty()) return true;
  return rank >= 0 && static_cast<size_t>(rank) < rank_selected_.size() && rank_selected_[rank];
}

bool TraceSummarizer::selected(const std::string& operation) const {
  if (options_.operations.empty()) return true;
  return std::find(options_.operations.begin(), options_.operations.end(), operation) !=
         options_.operations.end();
}

void TraceSummarizer::observe_time(double begin, double end) {
  if (!have_time_) {
    summary_.first_ts_us = begin;
    summary_.last_ts_us = end;
    have_time_ = true;
  } else {
    summary_.first_ts_us = std::min(summary_.first_ts_us, begin);
    summary_.last_ts_us = std::max(summary_.last_ts_us, end);
  }
}

TraceSummarizer::RankAccum& TraceSummarizer::rank_accum(int rank) {
  if (static_cast<size_t>(rank) >= ranks_.size()) ranks_.resize(rank + 1);
  return ranks_[rank];
}

TensorStat& TraceSummarizer::tensor(int64_t pid) {
  auto [it, inserted] = tensors_.try_emplace(pid);
  if (inserted) {
    it->second.pid = pid;
    it->second.name = "pid " + std::to_string(pid);
  }
  return it->second;
}

void TraceSummarizer::on_metadata(const TraceEvent& e) {
  const nlohmann::json& args = e.args;
  if (e.name == "ranktime_run") {
    summary_.run.has_run_metadata = true;
    const int64_t ranks = int_arg(args, "ranks", 0);
    summary_.run.ranks = ranks > 0 && ranks <= kMaxTraceRanks ? static_cast<int>(ranks) : 0;
    summary_.run.clock_offsets_us = number_list(args, "clock_offsets_us");
    summary_.run.clock_uncertainty_us = number_list(args, "clock_uncertainty_us");
    if (args.is_object() && args.contains("config") && args["config"].is_object()) {
      summary_.run.config.clear();
      for (const auto& [key, value] : args["config"].items()) {
        summary_.run.config.emplace_back(
            key, value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    summary_.run.start_time_since_epoch_us = int_arg(args, "start_time_since_epoch_in_micros", 0);
    if (args.is_object() && args.contains("all_ranks") && args["all_ranks"].is_boolean())
      summary_.run.all_ranks = args["all_ranks"].get<bool>();
    if (args.is_object() && args.contains("timeline_ranks") && args["timeline_ranks"].is_string())
      summary_.run.timeline_ranks = args["timeline_ranks"].get<std::string>();
    if (args.is_object() && args.contains("hostnames") && args["hostnames"].is_array()) {
      summary_.run.hostnames.clear();
      for (const auto& h : args["hostnames"]) {
        summary_.run.hostnames.push_back(h.is_string() ? h.get<std::string>() : "?");
      }
    }
  } else if (e.name == "ranktime_run_end") {
    summary_.run.has_run_end = true;
    summary_.run.events_dropped = int_arg(args, "events_dropped", 0);
    summary_.run.final_clock_offsets_us = number_list(args, "clock_offsets_us");
    summary_.run.final_clock_uncertainty_us = number_list(args, "clock_uncertainty_us");
  } else if (e.name == "process_name" && e.pid > 0 && args.is_object() && args.contains("name") &&
             args["name"].is_string()) {
    TensorStat& t = tensor(e.pid);
    t.name = args["name"].get<std::string>();
    t.set_ranks = static_cast<int>(process_set_ranks_in(t.name).size());
  }
}

void TraceSummarizer::add(const TraceEvent& e) {
  ++summary_.events;
  if (e.phase() == 'M' || is_run_metadata(e)) {
    on_metadata(e);
    return;
  }
  if (!e.has_ts || !e.has_pid || !e.has_tid) return;
  // torch.profiler events (`ranktime merge`, process "rank R (torch)"): not the runtime's work.
  // The hook for an analysis that reads them (the operators inside a rank's region).
  if (torch_process_rank(e.pid) >= 0) return;
  const char ph = e.ph.size() == 1 ? e.ph[0] : '?';
  if (ph == 'B') {
    auto& stack = stacks_[{e.pid, e.tid}];
    OpenSlice slice;
    slice.name = e.name;
    slice.ts = e.ts;
    if (e.pid > 0 && e.tid > 0 && stack.empty() && is_operation_name(e.name)) {
      slice.bytes = int_arg(e.args, "bytes", 0);
      slice.fused_tensors = std::max<int64_t>(1, int_arg(e.args, "fused_tensors", 1));
      slice.error = has_arg(e.args, "error");
    }
    stack.push_back(std::move(slice));
    return;
  }
  if (ph == 'E') {
    auto it = stacks_.find({e.pid, e.tid});
    if (it == stacks_.end()) return;
    auto& stack = it->second;
    // A mismatched E is the checker's business; here, close up to the matching slice if any.
    auto match = std::find_if(stack.rbegin(), stack.rend(),
                              [&](const OpenSlice& s) { return s.name == e.name; });
    if (match == stack.rend()) return;
    stack.resize(stack.size() - static_cast<size_t>(match - stack.rbegin()));
    OpenSlice slice = std::move(stack.back());
    stack.pop_back();
    if (e.pid == 0) return;
    if (e.tid == 0) {
      if (!negotiation_operation(slice.name).empty()) on_negotiation_end(e, slice);
    } else {
      if (e.tid >= 1 && e.tid <= kMaxTraceRanks) {
        on_slice_end(e, static_cast<int>(e.tid - 1), slice,
                     stack.empty() ? nullptr : &stack.back());
      }
    }
    return;
  }
  if (ph == 'X') {
    if (e.pid > 0 && e.tid == 0 && has_arg(e.args, "rank")) {
      auto it = stacks_.find({e.pid, e.tid});
      if (it == stacks_.end() || it->second.empty()) return;
      it->second.back().ticks.push_back(
          {static_cast<int>(int_arg(e.args, "rank", -1)), number_arg(e.args, "lag_us", 0), e.ts});
    }
    return;
  }
  if (ph == 'i' && e.pid == 0 && e.name == "CYCLE_START" && in_window(e.ts)) {
    observe_time(e.ts, e.ts);
    ++summary_.cycles.cycles;
    if (last_cycle_ts_ >= 0) cycle_intervals_.add(e.ts - last_cycle_ts_);
    last_cycle_ts_ = e.ts;
  }
}

void TraceSummarizer::on_negotiation_end(const TraceEvent& e, OpenSlice& slice) {
  const std::string op(negotiation_operation(slice.name));
  const int64_t occurrence = occurrences_[e.pid]++;  // the tensor's n-th negotiation
  if (!in_window(slice.ts) || !selected(op)) return;
  observe_time(slice.ts, e.ts);
  auto busy = negotiate_busy_.try_emplace(op, kPhaseUnionIntervals).first;
  busy->second.add(slice.ts, e.ts);
  ++summary_.negotiations;
  const double duration = e.ts - slice.ts;
  negotiate_accum_[op].add(duration);
  TensorStat& t = tensor(e.pid);
  ++t.negotiations;
  t.wait_total_us += duration;
  t.wait_max_us = std::max(t.wait_max_us, duration);
  if (has_arg(e.args, "error")) ++summary_.negotiation_errors;

  // Lateness among the selected ranks: lags from the first of them to become ready.
  std::vector<Tick> ticks;
  for (const Tick& tick : slice.ticks) {
    if (selected(tick.rank)) ticks.push_back(tick);
  }
  if (ticks.empty()) return;
  double first = ticks.front().lag_us;
  double last = first;
  for (const Tick& tick : ticks) {
    first = std::min(first, tick.lag_us);
    last = std::max(last, tick.lag_us);
  }
  // Ties for last go to the rank the writer named, else to the first found.
  int last_rank = -1;
  const int named = static_cast<int>(int_arg(e.args, "last_rank", -1));
  for (const Tick& tick : ticks) {
    if (tick.lag_us != last) continue;
    if (last_rank < 0 || tick.rank == named) last_rank = tick.rank;
  }
  for (const Tick& tick : ticks) rank_accum(tick.rank).lag.add(tick.lag_us - first);
  if (ticks.size() < 2) return;
  ++rank_accum(last_rank).times_last;

  // Waits in wall-clock time, from the ticks' timestamps (each rank's readiness on rank 0's
  // clock).
  std::vector<Readiness> ready;
  ready.reserve(ticks.size());
  for (const Tick& tick : ticks) ready.push_back({tick.rank, tick.ts});
  waits_.add(ready);
  if (!options_.by_step) return;
  int64_t step = occurrence;
  if (!options_.step_marks.empty()) {
    const Readiness* earliest = &ready.front();
    for (const Readiness& x : ready) {
      if (x.ts < earliest->ts) earliest = &x;
    }
    step = options_.step_marks.step_at(earliest->rank, earliest->ts);
    if (step < 0) return;  // before the first step mark
  }
  add_to_step(step, ready);
}

void TraceSummarizer::add_to_step(int64_t step, std::vector<Readiness> ready) {
  ready.erase(std::remove_if(ready.begin(), ready.end(),
                             [](const Readiness& x) { return x.rank >= kMaxStepRanks; }),
              ready.end());
  OpenStep& open = open_steps_[step];
  open.waits.add(ready);
  for (const Readiness& x : ready) {
    if (x.rank < 0) continue;
    if (static_cast<size_t>(x.rank) >= open.ready_end.size()) open.ready_end.resize(x.rank + 1, -1);
    open.ready_end[x.rank] = std::max(open.ready_end[x.rank], x.ts);
    if (!open.has_begin || x.ts < open.begin_us) open.begin_us = x.ts;
    open.has_begin = true;
  }
  ++open.negotiations;
  while (open_steps_.size() > kMaxOpenSteps) close_step(open_steps_.begin()->first);
}

void TraceSummarizer::close_step(int64_t step) {
  auto it = open_steps_.find(step);
  if (it == open_steps_.end()) return;
  const OpenStep& open = it->second;
  ClosedStep& closed = closed_steps_[step];
  StepStat& stat = closed.stat;
  const bool fresh = stat.negotiations == 0;
  stat.step = step;
  stat.begin_us = fresh ? open.begin_us : std::min(stat.begin_us, open.begin_us);
  stat.negotiations += open.negotiations;
  const size_t n = std::max<size_t>(open.ready_end.size(), static_cast<size_t>(open.waits.ranks()));
  if (stat.ranks.size() < n) stat.ranks.resize(n);
  if (closed.ready_end.size() < n) closed.ready_end.resize(n, -1);
  for (size_t r = 0; r < n; ++r) {
    const int rank = static_cast<int>(r);
    stat.ranks[r].caused_wait_us += open.waits.caused(rank);
    stat.ranks[r].waited_us += open.waits.waited(rank);
    if (r < open.ready_end.size()) {
      closed.ready_end[r] = std::max(closed.ready_end[r], open.ready_end[r]);
    }
  }
  open_steps_.erase(it);
}

void TraceSummarizer::add_busy(const std::string& op, const std::string& phase, int rank,
                               double begin, double end) {
  PhaseUnion& u = busy_[{op, phase}];
  if (static_cast<size_t>(rank) >= u.by_rank.size()) {
    u.by_rank.resize(rank + 1, IntervalUnion(kPhaseUnionIntervals));
  }
  u.by_rank[rank].add(begin, end);
}

bool TraceSummarizer::first_of_fused(int rank, const std::string& name, double begin, double end,
                                     int64_t fused_tensors) {
  if (fused_tensors <= 1) return true;
  SliceKey key{rank, name, to_ns(begin), to_ns(end)};
  auto it = shared_slices_.find(key);
  if (it != shared_slices_.end()) {
    if (--it->second.second <= 0) shared_slices_.erase(it);
    return false;
  }
  const uint64_t serial = ++serial_;
  shared_slices_.emplace(key, std::make_pair(serial, fused_tensors - 1));
  shared_order_.emplace_back(std::move(key), serial);
  while (shared_order_.size() > kMaxPending) {
    auto& [old_key, old_serial] = shared_order_.front();
    auto old = shared_slices_.find(old_key);
    if (old != shared_slices_.end() && old->second.first == old_serial) shared_slices_.erase(old);
    shared_order_.pop_front();
  }
  return true;
}

void TraceSummarizer::on_slice_end(const TraceEvent& e, int rank, OpenSlice& slice,
                                   OpenSlice* parent) {
  if (!selected(rank)) return;
  const bool is_op = parent == nullptr && is_operation_name(slice.name);
  const bool is_sub = parent != nullptr && is_operation_name(parent->name);
  if (!is_op && !is_sub) return;
  if (!selected(is_op ? slice.name : parent->name)) return;
  // A sub-phase belongs to the window its operation began in.
  if (!in_window(is_op ? slice.ts : parent->ts)) return;
  observe_time(slice.ts, e.ts);
  if (static_cast<size_t>(rank) >= lanes_seen_.size()) lanes_seen_.resize(rank + 1, false);
  lanes_seen_[rank] = true;
  const double duration = e.ts - slice.ts;
  add_busy(is_op ? slice.name : parent->name, slice.name, rank, slice.ts, e.ts);
  if (is_sub) {
    if (first_of_fused(rank, slice.name, slice.ts, e.ts, parent->fused_tensors)) {
      phase_accum_[{parent->name, slice.name}].add(duration);
    }
    if (is_collective_subphase(slice.name)) {
      if (parent->collective_begin < 0) parent->collective_begin = slice.ts;
      parent->collective_us += duration;
    }
    return;
  }
  if (has_arg(e.args, "error")) slice.error = true;
  if (slice.error) ++summary_.operation_errors;
  if (first_of_fused(rank, slice.name, slice.ts, e.ts, slice.fused_tensors)) {
    phase_accum_[{slice.name, slice.name}].add(duration);
  }
  TensorStat& t = tensor(e.pid);
  ++t.operations;
  t.processing_total_us += duration;
  t.processing_max_us = std::max(t.processing_max_us, duration);
  add_batch_member(rank, t.set_ranks, slice);
}

void TraceSummarizer::add_batch_member(int rank, int set_ranks, const OpenSlice& op) {
  if (op.fused_tensors <= 1) {
    PendingBatch batch;
    batch.rank = rank;
    batch.set_ranks = set_ranks;
    batch.tensors = 1;
    batch.bytes = static_cast<uint64_t>(std::max<int64_t>(0, op.bytes));
    batch.collective_us = op.collective_us;
    batch.error = op.error;
    finalize_batch(op.name, batch);
    return;
  }
  BatchKey key{rank, op.name, to_ns(op.collective_begin >= 0 ? op.collective_begin : op.ts)};
  auto [it, inserted] = pending_batches_.try_emplace(key);
  PendingBatch& batch = it->second;
  if (inserted) {
    batch.serial = ++serial_;
    batch.rank = rank;
    batch.set_ranks = set_ranks;  // a fused batch's tensors share their process set
    batch.expected = op.fused_tensors;
    batch.collective_us = op.collective_us;
    pending_order_.emplace_back(key, batch.serial);
  }
  ++batch.tensors;
  batch.bytes += static_cast<uint64_t>(std::max<int64_t>(0, op.bytes));
  batch.error = batch.error || op.error;
  if (static_cast<int64_t>(batch.tensors) >= batch.expected) {
    finalize_batch(op.name, batch);
    pending_batches_.erase(it);
  }
  while (pending_order_.size() > kMaxPending) {
    auto& [old_key, old_serial] = pending_order_.front();
    auto old = pending_batches_.find(old_key);
    if (old != pending_batches_.end() && old->second.serial == old_serial) {
      finalize_batch(old_key.op, old->second);
      pending_batches_.erase(old);
    }
    pending_order_.pop_front();
  }
}

void TraceSummarizer::finalize_batch(const std::string& op, const PendingBatch& batch) {
  FusionStat& f = fusion_[op];
  f.op = op;
  ++f.batches;
  f.tensors += batch.tensors;
  f.bytes += batch.bytes;
  f.max_tensors = std::max(f.max_tensors, batch.tensors);
  f.max_bytes = std::max(f.max_bytes, batch.bytes);
  if (batch.error || batch.collective_us <= 0 || batch.bytes == 0 || op == "BARRIER") return;
  const int n = batch.set_ranks > 0 ? batch.set_ranks : job_ranks();
  auto& [b, lanes_ran] = bandwidth_[{op, batch.set_ranks}];
  if (static_cast<size_t>(batch.rank) >= lanes_ran.size()) lanes_ran.resize(batch.rank + 1, false);
  lanes_ran[batch.rank] = true;
  ++b.batches;
  b.bytes += batch.bytes * static_cast<uint64_t>(op == "ALLGATHER" ? std::max(n, 1) : 1);
  b.collective_us += batch.collective_us;
}

Summary TraceSummarizer::finish() {
  // Batches still waiting for members (window edge, truncated file) count as they are.
  for (auto& [key, batch] : pending_batches_) finalize_batch(key.op, batch);
  pending_batches_.clear();
  pending_order_.clear();

  const int n = job_ranks();
  Summary s = std::move(summary_);
  s.wall_us = std::max(0.0, s.last_ts_us - s.first_ts_us);
  for (size_t r = 0; r < lanes_seen_.size(); ++r) {
    if (lanes_seen_[r]) s.lane_ranks.push_back(static_cast<int>(r));
  }
  s.rank_lanes = static_cast<int>(s.lane_ranks.size());
  const int lanes = std::max(1, s.rank_lanes);

  // Lateness, one row per selected rank that has ticks (and every run rank when known).
  size_t nranks = std::max(ranks_.size(), static_cast<size_t>(std::max(0, s.run.ranks)));
  ranks_.resize(nranks);
  double most_wait = 0;
  for (size_t r = 0; r < nranks; ++r) {
    if (!selected(static_cast<int>(r))) continue;
    const RankAccum& a = ranks_[r];
    RankLateness row;
    row.rank = static_cast<int>(r);
    row.negotiations = a.lag.count();
    row.times_last = a.times_last;
    row.mean_lag_us = a.lag.mean();
    row.p50_lag_us = a.lag.quantile(0.50);
    row.p95_lag_us = a.lag.quantile(0.95);
    row.max_lag_us = a.lag.max();
    row.caused_wait_us = waits_.caused(row.rank);
    row.waited_us = waits_.waited(row.rank);
    if (row.caused_wait_us > most_wait) {
      most_wait = row.caused_wait_us;
      s.slowest_rank = row.rank;
    }
    if (row.negotiations > 0) {
      s.waited_us += row.waited_us;
      s.rank_wall_us += s.wall_us;
    }
    s.lateness.push_back(row);
  }

  // Where the time went: operations by total time, each followed by its negotiation and its
  // sub-phases in Horovod's order.
  std::map<std::string, double> op_total;
  for (const auto& [key, accum] : phase_accum_) {
    if (key.first == key.second) op_total[key.first] += accum.total;
  }
  for (const auto& [op, accum] : negotiate_accum_) op_total.try_emplace(op, 0.0);
  std::vector<std::string> ops;
  for (const auto& [op, total] : op_total) ops.push_back(op);
  std::stable_sort(ops.begin(), ops.end(), [&](const std::string& a, const std::string& b) {
    return op_total[a] > op_total[b];
  });
  auto make_row = [&](const std::string& op, const std::string& phase, const Accum& a,
                      bool negotiation) {
    PhaseStat row;
    row.op = op;
    row.phase = phase;
    row.negotiation = negotiation;
    row.count = a.count;
    row.total_us = a.total;
    row.min_us = a.min;
    row.max_us = a.max;
    if (negotiation) {
      auto busy = negotiate_busy_.find(op);
      row.busy_us = busy == negotiate_busy_.end() ? 0 : busy->second.measure();
    } else {
      auto busy = busy_.find({op, phase});
      if (busy != busy_.end()) {
        double sum = 0;
        for (const IntervalUnion& u : busy->second.by_rank) {
          row.busy_us_by_rank.push_back(u.measure());
          sum += row.busy_us_by_rank.back();
        }
        row.busy_us = sum / lanes;
      }
    }
    row.share = s.wall_us > 0 ? std::min(1.0, row.busy_us / s.wall_us) : 0;
    return row;
  };
  for (const std::string& op : ops) {
    auto neg = negotiate_accum_.find(op);
    if (neg != negotiate_accum_.end()) {
      s.phases.push_back(make_row(op, "NEGOTIATE_" + op, neg->second, true));
    }
    auto self = phase_accum_.find({op, op});
    if (self != phase_accum_.end()) s.phases.push_back(make_row(op, op, self->second, false));
    std::vector<std::pair<std::string, const Accum*>> subs;
    for (auto it = phase_accum_.lower_bound({op, ""});
         it != phase_accum_.end() && it->first.first == op; ++it) {
      if (it->first.second != op) subs.emplace_back(it->first.second, &it->second);
    }
    std::stable_sort(subs.begin(), subs.end(), [](const auto& a, const auto& b) {
      return subphase_rank(a.first) < subphase_rank(b.first);
    });
    for (const auto& [phase, accum] : subs) s.phases.push_back(make_row(op, phase, *accum, false));
  }

  // Top-k tensors.
  std::vector<TensorStat> all;
  all.reserve(tensors_.size());
  for (auto& [pid, t] : tensors_) {
    t.lanes = s.rank_lanes;
    all.push_back(t);
  }
  auto top = [&](auto better) {
    std::vector<TensorStat> v = all;
    size_t k = std::min(options_.top_k, v.size());
    std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end(), better);
    v.resize(k);
    return v;
  };
  s.top_wait = top([](const TensorStat& a, const TensorStat& b) {
    return a.wait_total_us != b.wait_total_us ? a.wait_total_us > b.wait_total_us : a.pid < b.pid;
  });
  s.top_processing = top([](const TensorStat& a, const TensorStat& b) {
    return a.processing_total_us != b.processing_total_us
               ? a.processing_total_us > b.processing_total_us
               : a.pid < b.pid;
  });
  auto drop_empty = [](std::vector<TensorStat>& v, auto empty) {
    v.erase(std::remove_if(v.begin(), v.end(), empty), v.end());
  };
  drop_empty(s.top_wait, [](const TensorStat& t) { return t.negotiations == 0; });
  drop_empty(s.top_processing, [](const TensorStat& t) { return t.operations == 0; });

  // Fusion and bandwidth.
  uint64_t batches = 0;
  for (auto& [op, f] : fusion_) {
    f.lanes = s.rank_lanes;
    batches += f.batches;
    s.fusion.push_back(f);
  }
  for (auto& [key, row] : bandwidth_) {
    auto& [b, lanes_ran] = row;
    b.op = key.first;
    b.ranks = key.second > 0 ? key.second : n;
    b.lanes = static_cast<int>(std::count(lanes_ran.begin(), lanes_ran.end(), true));
    b.bus_factor = bus_bandwidth_factor(b.op, b.ranks);
    // bytes / µs = MB/s; / 1e3 = GB/s.
    b.algbw_gbps = b.collective_us > 0 ? static_cast<double>(b.bytes) / b.collective_us / 1e3 : 0;
    b.busbw_gbps = b.algbw_gbps * b.bus_factor;
    s.bandwidth.push_back(b);
  }

  if (options_.by_step) finish_steps(s);

  s.cycles.mean_interval_us = cycle_intervals_.mean();
  s.cycles.p50_interval_us = cycle_intervals_.quantile(0.5);
  s.cycles.max_interval_us = cycle_intervals_.max();
  if (s.cycles.cycles > 0) {
    s.cycles.batches_per_cycle =
        static_cast<double>(batches) / lanes / static_cast<double>(s.cycles.cycles);
  }
  return s;
}

void TraceSummarizer::finish_steps(Summary& s) {
  while (!open_steps_.empty()) close_step(open_steps_.begin()->first);
  const StepMarks& marks = options_.step_marks;
  s.steps_from_marks = !marks.empty();
  // Steps with marks but no negotiation analysed (outside a capture window) still have their
  // start lags; those whose first mark lies outside --from/--to are left out.
  std::map<int64_t, double> mark_begin;  // step -> its first mark
  for (const auto& rank_marks : marks.by_rank) {
    for (const auto& [ts, step] : rank_marks) {
      auto [it, inserted] = mark_begin.try_emplace(step, ts);
      if (!inserted) it->second = std::min(it->second, ts);
    }
  }
  for (const auto& [step, ts] : mark_begin) {
    if (in_window(ts)) closed_steps_.try_emplace(step);
  }
  const size_t nranks = std::min<size_t>(
      kMaxStepRanks, std::max<size_t>(static_cast<size_t>(std::max(0, s.run.ranks)),
                                      std::max(marks.by_rank.size(), ranks_.size())));
  for (auto& [step, closed] : closed_steps_) {
    StepStat stat = std::move(closed.stat);
    stat.step = step;
    stat.ranks.resize(nranks);
    closed.ready_end.resize(nranks, -1);
    double first_ready = -1;
    for (size_t r = 0; r < nranks; ++r) {
      const double t = closed.ready_end[r];
      if (t >= 0 && selected(static_cast<int>(r)) && (first_ready < 0 || t < first_ready)) {
        first_ready = t;
      }
    }
    // Start marks: each rank's mark for this step.
    std::vector<double> start(nranks, -1);
    double first_start = -1;
    for (size_t r = 0; r < std::min(marks.by_rank.size(), nranks); ++r) {
      if (!selected(static_cast<int>(r))) continue;
      const auto& rank_marks = marks.by_rank[r];
      // A rank's marks are in time order and so in step order.
      auto it = std::lower_bound(rank_marks.begin(), rank_marks.end(), step,
                                 [](const auto& mark, int64_t st) { return mark.second < st; });
      if (it == rank_marks.end() || it->second != step) continue;
      start[r] = it->first;
      if (first_start < 0 || it->first < first_start) first_start = it->first;
    }
    if (first_start >= 0) stat.begin_us = first_start;
    double most = 0;
    for (size_t r = 0; r < nranks; ++r) {
      StepRankStat& x = stat.ranks[r];
      if (!selected(static_cast<int>(r))) {
        x = StepRankStat();
        continue;
      }
      if (start[r] >= 0) x.start_lag_us = start[r] - first_start;
      if (closed.ready_end[r] >= 0) x.ready_lag_us = closed.ready_end[r] - first_ready;
      stat.waited_us += x.waited_us;
      if (x.caused_wait_us > most) {
        most = x.caused_wait_us;
        stat.last_rank = static_cast<int>(r);
        stat.waited_for_last_us = x.caused_wait_us;
      }
    }
    s.steps.push_back(std::move(stat));
  }
  closed_steps_.clear();
}

}  // namespace ranktime::timeline
