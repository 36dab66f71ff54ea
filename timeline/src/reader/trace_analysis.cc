// One-pass trace analysis for `ranktime summary`. Negotiations give lateness (their ticks),
// rank lanes give where the time went, fusion and bandwidth. Fused batches share their slices:
// a slice shared by a batch's tensors (same rank, name, begin and end) is counted once.
#include "ranktime/timeline/trace_analysis.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

constexpr double kHistogramMin = 0.01;  // µs: the first bucket's lower edge
const double kHistogramLogStep = std::log(1.01);
// Bound on fused batches (and their shared slices) waiting for their other members. The writer
// emits a batch's members close together; this only matters for broken traces.
constexpr size_t kMaxPending = size_t{1} << 16;

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

double bus_bandwidth_factor(const std::string& op, int ranks) {
  if (ranks <= 0) return 0;
  double n = ranks;
  if (op == "ALLREDUCE") return 2.0 * (n - 1) / n;
  if (op == "ALLGATHER") return (n - 1) / n;
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
    summary_.run.start_time_since_epoch_us = int_arg(args, "start_time_since_epoch_in_micros", 0);
    if (args.is_object() && args.contains("hostnames") && args["hostnames"].is_array()) {
      summary_.run.hostnames.clear();
      for (const auto& h : args["hostnames"]) {
        summary_.run.hostnames.push_back(h.is_string() ? h.get<std::string>() : "?");
      }
    }
  } else if (e.name == "ranktime_run_end") {
    summary_.run.has_run_end = true;
    summary_.run.events_dropped = int_arg(args, "events_dropped", 0);
  } else if (e.name == "process_name" && e.pid > 0 && args.is_object() && args.contains("name") &&
             args["name"].is_string()) {
    tensor(e.pid).name = args["name"].get<std::string>();
  }
}

void TraceSummarizer::add(const TraceEvent& e) {
  ++summary_.events;
  if (e.phase() == 'M') {
    on_metadata(e);
    return;
  }
  if (!e.has_ts || !e.has_pid || !e.has_tid) return;
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
          {static_cast<int>(int_arg(e.args, "rank", -1)), number_arg(e.args, "lag_us", 0)});
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
  if (!in_window(slice.ts) || !selected(op)) return;
  observe_time(slice.ts, e.ts);
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
  RankAccum& late = rank_accum(last_rank);
  ++late.times_last;
  for (const Tick& tick : ticks) {
    if (tick.rank != last_rank) late.caused_wait_us += last - tick.lag_us;
  }
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
  add_batch_member(rank, slice);
}

void TraceSummarizer::add_batch_member(int rank, const OpenSlice& op) {
  if (op.fused_tensors <= 1) {
    PendingBatch batch;
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
  int n = summary_.run.ranks > 0 ? summary_.run.ranks : static_cast<int>(lanes_seen_.size());
  BandwidthStat& b = bandwidth_[op];
  b.op = op;
  ++b.batches;
  b.bytes += batch.bytes * static_cast<uint64_t>(op == "ALLGATHER" ? std::max(n, 1) : 1);
  b.collective_us += batch.collective_us;
}

Summary TraceSummarizer::finish() {
  // Batches still waiting for members (window edge, truncated file) count as they are.
  for (auto& [key, batch] : pending_batches_) finalize_batch(key.op, batch);
  pending_batches_.clear();
  pending_order_.clear();

  Summary s = std::move(summary_);
  s.wall_us = std::max(0.0, s.last_ts_us - s.first_ts_us);
  s.rank_lanes = static_cast<int>(std::count(lanes_seen_.begin(), lanes_seen_.end(), true));
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
    row.caused_wait_us = a.caused_wait_us;
    if (a.caused_wait_us > most_wait) {
      most_wait = a.caused_wait_us;
      s.slowest_rank = row.rank;
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
    double denominator = s.wall_us * (negotiation ? 1 : lanes);
    row.share = denominator > 0 ? a.total / denominator : 0;
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
  const int n = s.run.ranks > 0 ? s.run.ranks : static_cast<int>(lanes_seen_.size());
  uint64_t batches = 0;
  for (auto& [op, f] : fusion_) {
    f.lanes = s.rank_lanes;
    batches += f.batches;
    s.fusion.push_back(f);
  }
  for (auto& [op, b] : bandwidth_) {
    b.lanes = s.rank_lanes;
    b.bus_factor = bus_bandwidth_factor(op, n);
    // bytes / µs = MB/s; / 1e3 = GB/s.
    b.algbw_gbps = b.collective_us > 0 ? static_cast<double>(b.bytes) / b.collective_us / 1e3 : 0;
    b.busbw_gbps = b.algbw_gbps * b.bus_factor;
    s.bandwidth.push_back(b);
  }

  s.cycles.mean_interval_us = cycle_intervals_.mean();
  s.cycles.p50_interval_us = cycle_intervals_.quantile(0.5);
  s.cycles.max_interval_us = cycle_intervals_.max();
  if (s.cycles.cycles > 0) {
    s.cycles.batches_per_cycle =
        static_cast<double>(batches) / lanes / static_cast<double>(s.cycles.cycles);
  }
  return s;
}

}  // namespace ranktime::timeline
