// Builds timeline records from the runtime's events (see timeline_recorder.h).
#include "recording/timeline_recorder.h"

#include <algorithm>
#include <limits>

#include "core/log.h"

namespace ranktime {
namespace {

using timeline::Phase;
using timeline::Record;
using timeline::RecordKind;

// Outbox bound on non-zero ranks: records beyond it are dropped (and counted) rather than
// growing memory when rank 0 cannot take them.
constexpr size_t kOutboxCapacity = size_t{1} << 16;

Phase op_phase(OpType op) {
  switch (op) {
    case OpType::kAllgather:
      return Phase::kAllgather;
    case OpType::kBroadcast:
      return Phase::kBroadcast;
    case OpType::kBarrier:
      return Phase::kBarrier;
    case OpType::kReducescatter:
      return Phase::kReducescatter;
    case OpType::kAlltoall:
      return Phase::kAlltoall;
    case OpType::kJoin:
      return Phase::kJoin;
    default:
      return Phase::kAllreduce;
  }
}

Phase negotiate_phase(OpType op) {
  switch (op) {
    case OpType::kAllgather:
      return Phase::kNegotiateAllgather;
    case OpType::kBroadcast:
      return Phase::kNegotiateBroadcast;
    case OpType::kBarrier:
      return Phase::kNegotiateBarrier;
    case OpType::kReducescatter:
      return Phase::kNegotiateReducescatter;
    case OpType::kAlltoall:
      return Phase::kNegotiateAlltoall;
    case OpType::kJoin:
      return Phase::kNegotiateJoin;
    default:
      return Phase::kNegotiateAllreduce;
  }
}

}  // namespace

TimelineRecorder::TimelineRecorder(int rank, int size) : rank_(rank) { ticks_.reserve(size); }

TimelineRecorder::~TimelineRecorder() { stop(); }

Status TimelineRecorder::start(const std::string& path, bool mark_cycles,
                               const timeline::RunMetadata& metadata) {
  stop();
  mark_cycles_ = mark_cycles;
  if (rank_ != 0) {
    on_ = true;
    return Status::Ok();
  }
  if (hold_steps_ > 0) {  // files only around alerts
    hold_path_ = path;
    hold_metadata_ = metadata;
    on_ = true;
    return Status::Ok();
  }
  timeline::TraceWriterOptions options;
  options.path = path;
  options.max_bytes = max_bytes_;
  options.keep_files = keep_files_;
  options.on_error = [](const std::string& message) {
    RANKTIME_LOG(kError, message << "; training continues without the timeline");
  };
  std::string error;
  auto writer = timeline::TraceWriter::open(options, metadata, strings_, &error);
  {
    std::lock_guard<std::mutex> lock(writer_mutex_);
    writer_ = std::move(writer);
  }
  if (!writer_) {
    RANKTIME_LOG(kError, error << "; training continues without the timeline");
    return Status::Error(error);
  }
  timeline::install_signal_flush();
  on_ = true;
  return Status::Ok();
}

void TimelineRecorder::stop() {
  on_ = false;
  outbox_.clear();
  held_.clear();
  alert_trace_end_step_ = -1;
  std::lock_guard<std::mutex> lock(writer_mutex_);
  if (writer_) {
    writer_->close();
    writer_.reset();
  }
}

void TimelineRecorder::set_lane_ranks(const std::vector<int32_t>& ranks) {
  lanes_wanted_ = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
}

void TimelineRecorder::set_limits(const StepWindow& steps, uint64_t max_bytes,
                                  uint64_t keep_files) {
  steps_ = steps;
  max_bytes_ = max_bytes;
  keep_files_ = keep_files;
}

void TimelineRecorder::mark_step(std::optional<int64_t> step, int64_t now_ns) {
  std::lock_guard<std::mutex> lock(marks_mutex_);
  const int64_t s = step.value_or(next_step_);
  next_step_ = s + 1;
  marks_.emplace_back(s, now_ns);
  last_mark_ns_.store(now_ns, std::memory_order_relaxed);
  current_step_.store(s, std::memory_order_relaxed);
  marks_waiting_.store(true, std::memory_order_release);
}

void TimelineRecorder::record_steps(std::optional<int64_t> end_ns) {
  std::vector<std::pair<int64_t, int64_t>> marks;
  if (marks_waiting_.exchange(false, std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(marks_mutex_);
    marks.swap(marks_);
  }
  const auto rank = static_cast<int16_t>(rank_);
  for (const auto& [step, ns] : marks) {
    if (open_step_ && on_)
      emit(timeline::step_record(rank, open_step_->first, open_step_->second,
                                 std::max(ns, open_step_->second)));
    open_step_ = {step, ns};
  }
  if (end_ns && open_step_) {
    if (on_)
      emit(timeline::step_record(rank, open_step_->first, open_step_->second,
                                 std::max(*end_ns, open_step_->second)));
    open_step_.reset();
  }
  record_regions();
  if (!marks.empty()) end_alert_trace();
}

void TimelineRecorder::region(std::string_view name, int64_t step, int64_t begin_ns, int64_t end_ns,
                              int64_t blocked_ns) {
  if (!on_ || !steps_.contains(step)) return;
  regions_.add({region_names_.intern(name), begin_ns, std::max(end_ns, begin_ns), blocked_ns});
}

void TimelineRecorder::record_regions() {
  region_scratch_.clear();
  regions_.take(&region_scratch_);
  if (rank_ == 0) {
    region_ids_.learn(0, region_names_.take_new(), &strings_);
    update_regions_dropped();
  }
  // TIMELINE_RANKS: a rank's regions are written with its processing lanes.
  if (region_scratch_.empty() || !lanes_on()) return;
  batch_.clear();
  const auto rank = static_cast<int16_t>(rank_);
  for (const RegionEntry& e : region_scratch_) {
    // Other ranks ship their own ids; rank 0 maps them (ingest), its own here.
    const uint32_t name = rank_ == 0 ? region_ids_.to_trace(0, e.name) : e.name;
    batch_.push_back(timeline::region_record(rank, name, e.begin_ns, e.end_ns, e.blocked_ns));
  }
  emit(batch_.data(), batch_.size());
}

void TimelineRecorder::learn_regions(int source, const std::vector<std::string>& names,
                                     uint64_t dropped) {
  region_ids_.learn(source, names, &strings_);
  if (regions_dropped_.size() <= static_cast<size_t>(source))
    regions_dropped_.resize(static_cast<size_t>(source) + 1, 0);
  regions_dropped_[static_cast<size_t>(source)] = dropped;
  update_regions_dropped();
}

void TimelineRecorder::update_regions_dropped() {
  uint64_t total = regions_.dropped();
  for (size_t r = 1; r < regions_dropped_.size(); ++r) total += regions_dropped_[r];
  if (writer_) writer_->set_regions_dropped(total);
}

void TimelineRecorder::emit(const Record& r) { emit(&r, 1); }

void TimelineRecorder::emit(const Record* records, size_t n) {
  if (writer_) {
    writer_->push(records, n);
    return;
  }
  if (rank_ == 0 && hold_steps_ > 0) {
    hold(records, n);
    return;
  }
  const size_t kept = std::min(n, kOutboxCapacity - std::min(kOutboxCapacity, outbox_.size()));
  outbox_.insert(outbox_.end(), records, records + kept);
  outbox_dropped_ += n - kept;
}

void TimelineRecorder::negotiations(const std::vector<Negotiation>& done, int64_t known_ns) {
  if (!on_ || done.empty() || !in_window()) return;
  batch_.clear();
  for (const Negotiation& n : done) {
    // A process set's change shows as an instant when it executes, not as a tensor.
    if (n.op != OpType::kAddProcessSet && n.op != OpType::kRemoveProcessSet) {
      add_negotiation(n, known_ns);
    }
  }
  emit(batch_.data(), batch_.size());
}

void TimelineRecorder::add_negotiation(const Negotiation& n, int64_t known_ns) {
  if (last_negotiation_end_.size() <= n.tensor_id) last_negotiation_end_.resize(n.tensor_id + 1, 0);
  ticks_.clear();
  for (int i = 0; i < static_cast<int>(n.ready_ns.size()); ++i)
    ticks_.emplace_back(n.ready_ns[i], n.ranks.empty() ? i : n.ranks[i]);
  std::sort(ticks_.begin(), ticks_.end());
  // The slice lies in [end of this tensor's previous negotiation, known_ns], the ticks in the
  // slice: clock-offset uncertainty must not break the nesting of the negotiate lane.
  const int64_t first = ticks_.front().first;
  Record r;
  r.tensor = n.tensor_id;
  r.phase = negotiate_phase(n.op);
  r.ts_ns = std::min(std::max(first, last_negotiation_end_[n.tensor_id]), known_ns);
  r.end_ns = std::max(known_ns, r.ts_ns);
  const uint32_t error = n.error.empty() ? 0 : strings_.intern(n.error);
  if (ticks_.size() <= static_cast<size_t>(timeline::kMaxInlineTicks)) {
    // One record; the writer places the ticks (see NegotiationArgs).
    r.kind = RecordKind::kNegotiation;
    auto& args = r.args.negotiation;
    args.error_string = error;
    args.ticks = static_cast<uint16_t>(ticks_.size());
    for (size_t i = 0; i < ticks_.size(); ++i) {
      args.ready_ns[i] = ticks_[i].first;
      args.rank[i] = ticks_[i].second;
    }
    batch_.push_back(r);
    last_negotiation_end_[n.tensor_id] = r.end_ns;
    return;
  }
  const int64_t end_ns = r.end_ns;
  r.end_ns = 0;
  r.kind = RecordKind::kNegotiateBegin;
  batch_.push_back(r);
  for (const auto& [t, rank] : ticks_) {
    Record tick;
    tick.tensor = n.tensor_id;
    tick.kind = RecordKind::kTick;
    tick.phase = r.phase;
    tick.ts_ns = timeline::tick_ns(t, r.ts_ns, end_ns);
    tick.args.tick.rank = rank;
    tick.args.tick.lag_ns = t - first;
    batch_.push_back(tick);
  }
  Record end = r;
  end.kind = RecordKind::kNegotiateEnd;
  end.ts_ns = end_ns;
  end.args.negotiate.last_rank = ticks_.back().second;
  end.args.negotiate.spread_ns = ticks_.back().first - first;
  end.args.negotiate.error_string = error;
  batch_.push_back(end);
  last_negotiation_end_[n.tensor_id] = end.ts_ns;
}

void TimelineRecorder::cycle(int64_t cycle, int64_t now_ns) {
  if (!mark_cycles()) return;
  Record r;
  r.kind = RecordKind::kCycle;
  r.ts_ns = now_ns;
  r.args.cycle.cycle = cycle;
  emit(r);
}

void TimelineRecorder::close_from_any_thread() {
  std::lock_guard<std::mutex> lock(writer_mutex_);
  if (writer_) writer_->close();
}

Record TimelineRecorder::instant_record(const std::string& name, const std::string& message,
                                        int64_t now_ns) {
  Record r;
  r.kind = RecordKind::kInstant;
  r.ts_ns = now_ns;
  r.args.instant.name_string = strings_.intern(name);
  r.args.instant.message_string = strings_.intern(message);
  return r;
}

void TimelineRecorder::instant(const std::string& name, const std::string& message,
                               int64_t now_ns) {
  if (!on_ || rank_ != 0) return;
  emit(instant_record(name, message, now_ns));
}

void TimelineRecorder::instant_from_any_thread(const std::string& name, const std::string& message,
                                               int64_t now_ns) {
  std::lock_guard<std::mutex> lock(writer_mutex_);
  if (writer_) writer_->push(instant_record(name, message, now_ns));
}

void TimelineRecorder::counter(const char* name, int series, double value, int64_t now_ns) {
  if (!on_ || rank_ != 0) return;
  Record r;
  r.kind = RecordKind::kCounter;
  r.ts_ns = now_ns;
  r.args.counter.name_string = strings_.intern(name);
  r.args.counter.series = series;
  r.args.counter.value = value;
  emit(r);
}

void TimelineRecorder::processed(const Response& response, const std::vector<TensorEntry*>& entries,
                                 int64_t arrival_ns, int64_t start_ns, int64_t end_ns,
                                 const PhaseLog& log, const Status& status,
                                 const std::vector<PhaseLog>* entry_logs) {
  if (!lanes_on() || !in_window()) return;
  const uint32_t error = status.ok() ? 0 : strings_.intern(status.message());
  const auto fused = static_cast<uint16_t>(std::min<size_t>(entries.size(), 65535));
  const auto op_args = [&](size_t i) {
    const TensorView& v = entries[i]->view;
    timeline::OpArgs op{};
    op.dtype = static_cast<uint8_t>(v.dtype);
    op.ndim = static_cast<uint8_t>(std::min<size_t>(v.shape.size(), 255));
    op.fused_tensors = fused;
    op.bytes = static_cast<int64_t>(v.num_bytes());
    for (size_t d = 0; d < v.shape.size() && d < timeline::kMaxInlineDims; ++d)
      op.dims[d] = v.shape[d];
    return op;
  };
  batch_.clear();
  Record r;
  r.rank = static_cast<int16_t>(rank_);
  r.phase = op_phase(response.op);
  if (entry_logs == nullptr) {
    // One batch: a header, its sub-phases, then one record per tensor (expanded by the writer).
    r.kind = RecordKind::kBatch;
    r.ts_ns = arrival_ns;
    r.end_ns = end_ns;
    r.args.batch.spans = static_cast<uint16_t>(log.spans.size());
    r.args.batch.fused_tensors = fused;
    r.args.batch.error_string = error;
    r.args.batch.start_ns = start_ns;
    batch_.push_back(r);
    for (const PhaseLog::Span& s : log.spans) {
      Record span;
      span.rank = r.rank;
      span.kind = RecordKind::kBatchSpan;
      span.phase = s.phase;
      span.ts_ns = s.begin_ns;
      span.end_ns = s.end_ns;
      batch_.push_back(span);
    }
    r.kind = RecordKind::kBatchTensor;
    r.ts_ns = r.end_ns = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      r.tensor = response.tensor_ids[i];
      r.args.op = op_args(i);
      batch_.push_back(r);
    }
    emit(batch_.data(), batch_.size());
    return;
  }
  // The GPU path timed the tensors of a batch apart: each tensor's own slice and sub-phases.
  for (size_t i = 0; i < entries.size(); ++i) {
    r.tensor = response.tensor_ids[i];
    r.kind = RecordKind::kOpBegin;
    r.ts_ns = arrival_ns;
    r.args.op = op_args(i);
    batch_.push_back(r);
    Record span = r;
    span.kind = RecordKind::kSpan;
    span.args = {};
    span.phase = Phase::kQueue;
    span.ts_ns = arrival_ns;
    span.end_ns = start_ns;
    batch_.push_back(span);
    for (const PhaseLog::Span& s : i < entry_logs->size() ? (*entry_logs)[i].spans : log.spans) {
      span.phase = s.phase;
      span.ts_ns = s.begin_ns;
      span.end_ns = s.end_ns;
      batch_.push_back(span);
    }
    Record end = r;
    end.kind = RecordKind::kOpEnd;
    end.ts_ns = end_ns;
    end.args.op.error_string = error;
    batch_.push_back(end);
  }
  emit(batch_.data(), batch_.size());
}

void TimelineRecorder::ingest(std::vector<Record>* records, const OffsetEstimator& offset,
                              int source) {
  if (!writer_ && !(on_ && hold_steps_ > 0)) return;
  for (Record& r : *records) {
    r.ts_ns = offset.to_rank0(r.ts_ns);
    if (timeline::has_end_ns(r.kind)) r.end_ns = offset.to_rank0(r.end_ns);
    if (r.kind == RecordKind::kBatch)
      r.args.batch.start_ns = offset.to_rank0(r.args.batch.start_ns);
    if (r.kind == RecordKind::kRegion) {
      r.args.region.name_string = region_ids_.to_trace(source, r.args.region.name_string);
      r.rank = static_cast<int16_t>(source);  // a rank records its own regions only
    }
  }
  keep_regions_in_order(records, source);
  emit(records->data(), records->size());  // one lock per batch
}

void TimelineRecorder::keep_regions_in_order(std::vector<Record>* records, int source) {
  // One message's regions share one offset, so they keep their order and nesting; a refreshed
  // offset may put them before the previous message's (by its uncertainty): moved after them,
  // together, as a tick is moved into its slice.
  if (regions_end_.size() <= static_cast<size_t>(source))
    regions_end_.resize(static_cast<size_t>(source) + 1, std::numeric_limits<int64_t>::min());
  int64_t& floor = regions_end_[static_cast<size_t>(source)];
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const Record& r : *records) {
    if (r.kind == RecordKind::kRegion) first = std::min(first, r.ts_ns);
  }
  if (first == std::numeric_limits<int64_t>::max()) return;
  const int64_t shift = floor > first ? floor - first : 0;
  for (Record& r : *records) {
    if (r.kind != RecordKind::kRegion) continue;
    r.ts_ns += shift;
    r.end_ns += shift;
    floor = std::max(floor, r.end_ns);
  }
}

std::vector<Record> TimelineRecorder::take_outbox() {
  std::vector<Record> out;
  out.swap(outbox_);
  outbox_.reserve(std::min<size_t>(out.capacity(), kOutboxCapacity));
  return out;
}

void TimelineRecorder::set_clock_offsets(std::vector<double> offsets_us,
                                         std::vector<double> uncertainty_us) {
  if (writer_) writer_->set_clock_offsets(std::move(offsets_us), std::move(uncertainty_us));
}

uint64_t TimelineRecorder::dropped() const {
  return outbox_dropped_ + held_dropped_ + (writer_ ? writer_->dropped() : 0);
}

}  // namespace ranktime
