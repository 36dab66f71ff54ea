// EventFormatter: Records -> Chrome-trace JSON events, per docs/timeline-format.md.
#include "event_formatter.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "json_text.h"

namespace ranktime::timeline {

namespace {

// Indexed by the ranktime::DataType value.
constexpr std::string_view kQuotedDtypes[] = {
    "\"uint8\"",    "\"int8\"",    "\"int32\"",   "\"int64\"", "\"float16\"",
    "\"bfloat16\"", "\"float32\"", "\"float64\"", "\"int16\"",
};

std::string_view quoted_dtype(uint8_t dtype) {
  return dtype < sizeof(kQuotedDtypes) / sizeof(kQuotedDtypes[0]) ? kQuotedDtypes[dtype]
                                                                  : "\"unknown\"";
}

// `,\n{"name":"<name>","ph":"M","pid":P,"tid":T,"args":{` (the caller closes both braces).
void open_metadata(std::string_view name, int64_t pid, int64_t tid, TextBuffer* out) {
  out->append(",\n{\"name\":\"");
  out->append(name);
  out->append("\",\"ph\":\"M\",\"pid\":");
  json::append_int(pid, out);
  out->append(",\"tid\":");
  json::append_int(tid, out);
  out->append(",\"args\":{");
}

// `s` as a JSON string literal (cold paths: run metadata).
void append_quoted(std::string_view s, TextBuffer* out) {
  std::string quoted;
  json::append_string(s, &quoted);
  out->append(quoted);
}

template <typename T, typename AppendOne>
void append_array(const std::vector<T>& values, AppendOne append_one, TextBuffer* out) {
  out->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out->push_back(',');
    append_one(values[i], out);
  }
  out->push_back(']');
}

void append_doubles(const std::vector<double>& values, TextBuffer* out) {
  append_array(values, json::append_double, out);
}

// Room for one event's fixed parts (keys, pid, tid, timestamp, closing braces, a few short
// args); names, phase, messages and an operation's args are added to it by size. Exceeding
// it is a bug (EventText aborts); the ExtremeValues test writes every field at its widest.
// Worst cases: open() 105 bytes + name; a tick 185; a negotiation end 170 + phase and error.
constexpr size_t kEventRoom = 200;
constexpr size_t kOpArgsRoom = 128 + kMaxInlineDims * 21;

// Where an event's pid goes: the number, or (for a fused batch's text shared by its tensors) a
// cut at which each tensor's pid is inserted later.
struct PidSlot {
  PidSlot(int64_t value) : pid(value) {}  // NOLINT: a plain pid converts
  explicit PidSlot(std::vector<size_t>* cut_list) : cuts(cut_list) {}
  int64_t pid = 0;
  std::vector<size_t>* cuts = nullptr;
};

// One event's text, written straight into the output buffer: room for `room` bytes is made up
// front, so each piece below is a plain copy with no capacity check (the writer's hot path; one
// capacity check per event instead of a dozen appends). The buffer keeps what was written.
class EventText {
 public:
  EventText(TextBuffer* out, size_t room) : out_(out), p_(out->room(room)), end_(p_ + room) {}
  ~EventText() {
    if (p_ > end_) std::abort();  // a room above is too small: a bug, not input
    out_->commit(p_);
  }
  EventText(const EventText&) = delete;
  EventText& operator=(const EventText&) = delete;

  template <size_t N>
  void lit(const char (&text)[N]) {
    std::memcpy(p_, text, N - 1);
    p_ += N - 1;
  }
  void str(std::string_view text) {
    std::memcpy(p_, text.data(), text.size());
    p_ += text.size();
  }
  void chr(char c) { *p_++ = c; }
  void num(int64_t value) { p_ = std::to_chars(p_, p_ + 20, value).ptr; }
  void us3(int64_t ns) { p_ = json::write_us3(p_, ns); }
  void dbl(double value) { p_ = json::write_double(p_, value); }

  // Bytes written so far into the output buffer.
  size_t written() const { return static_cast<size_t>(p_ - out_->data()); }

  // `,\n{"name":<quoted_name>,"ph":"<ph>","pid":P,"tid":T,"ts":TS` (no closing brace).
  void open(std::string_view quoted_name, char ph, const PidSlot& pid, int64_t tid, int64_t ts) {
    lit(",\n{\"name\":");
    str(quoted_name);
    lit(",\"ph\":\"");
    chr(ph);
    lit("\",\"pid\":");
    if (pid.cuts != nullptr) {
      pid.cuts->push_back(written());
    } else {
      num(pid.pid);
    }
    lit(",\"tid\":");
    num(tid);
    lit(",\"ts\":");
    us3(ts);
  }

 private:
  TextBuffer* out_;
  char* p_;
  const char* end_;
};

constexpr size_t kOpBeginRoom = kEventRoom + kOpArgsRoom;

// An operation slice's args and the event's closing brace.
void op_args_text(const OpArgs& op, uint16_t fused_tensors, EventText* t) {
  t->lit(",\"args\":{\"dtype\":");
  t->str(quoted_dtype(op.dtype));
  t->lit(",\"shape\":[");
  const int kept = op.ndim < kMaxInlineDims ? op.ndim : kMaxInlineDims;
  for (int d = 0; d < kept; ++d) {
    if (d != 0) t->chr(',');
    t->num(op.dims[d]);
  }
  t->chr(']');
  if (op.ndim > kMaxInlineDims) t->lit(",\"shape_truncated\":true");
  t->lit(",\"bytes\":");
  t->num(op.bytes);
  t->lit(",\"fused_tensors\":");
  t->num(fused_tensors);
  t->lit("}}");
}

// The 'B' of an operation slice with its args.
void op_begin_text(std::string_view phase, int64_t pid, int64_t tid, int64_t ts, const OpArgs& op,
                   uint16_t fused_tensors, EventText* t) {
  t->open(phase, 'B', pid, tid, ts);
  op_args_text(op, fused_tensors, t);
}

// The 'E' of an operation slice; `error` is the quoted message, or empty for none.
void op_end_text(std::string_view phase, const PidSlot& pid, int64_t tid, int64_t ts,
                 std::string_view error, EventText* t) {
  t->open(phase, 'E', pid, tid, ts);
  if (!error.empty()) {
    t->lit(",\"args\":{\"error\":");
    t->str(error);
    t->chr('}');
  }
  t->chr('}');
}

// A leaf sub-phase: its 'B' and its 'E'.
void span_text(std::string_view phase, const PidSlot& pid, int64_t tid, int64_t begin, int64_t end,
               EventText* t) {
  t->open(phase, 'B', pid, tid, begin);
  t->chr('}');
  t->open(phase, 'E', pid, tid, end);
  t->chr('}');
}

// A readiness tick: a zero-length 'X' named by the rank.
void tick_text(int64_t pid, int64_t ts, int32_t rank, int64_t lag_ns, EventText* t) {
  char name[24] = "\"";
  char* end = std::to_chars(name + 1, name + sizeof(name) - 1, rank).ptr;
  *end++ = '"';
  t->open(std::string_view(name, static_cast<size_t>(end - name)), 'X', pid, 0, ts);
  t->lit(",\"dur\":0,\"args\":{\"rank\":");
  t->num(rank);
  t->lit(",\"lag_us\":");
  t->us3(lag_ns);
  t->lit("}}");
}

// The 'E' of a NEGOTIATE_<OP> slice; `error` is the quoted message, or empty for none.
void negotiate_end_text(std::string_view phase, int64_t pid, int64_t ts, int32_t last_rank,
                        int64_t spread_ns, std::string_view error, EventText* t) {
  t->open(phase, 'E', pid, 0, ts);
  t->lit(",\"args\":{\"last_rank\":");
  t->num(last_rank);
  t->lit(",\"spread_us\":");
  t->us3(spread_ns);
  if (!error.empty()) {
    t->lit(",\"error\":");
    t->str(error);
  }
  t->lit("}}");
}

// later - earlier, wrapping instead of overflowing on corrupt input.
int64_t difference_ns(int64_t later, int64_t earlier) {
  return static_cast<int64_t>(static_cast<uint64_t>(later) - static_cast<uint64_t>(earlier));
}

}  // namespace

EventFormatter::EventFormatter(const StringTable& strings, int64_t start_ns)
    : strings_(strings), start_ns_(start_ns) {
  for (size_t i = 0; i < static_cast<size_t>(Phase::kCount); ++i) {
    std::string quoted_phase;
    json::append_string(phase_name(static_cast<Phase>(i)), &quoted_phase);
    quoted_phases_.push_back(std::move(quoted_phase));
  }
  quoted_phases_.emplace_back();
  json::append_string(phase_name(Phase::kCount), &quoted_phases_.back());
}

size_t EventFormatter::append_run_metadata(const RunMetadata& metadata, TextBuffer* out) {
  open_metadata("process_name", 0, 0, out);
  out->append("\"name\":\"ranktime\"}}");
  open_metadata("process_sort_index", 0, 0, out);
  out->append("\"sort_index\":-1}}");
  open_metadata("thread_name", 0, 0, out);
  out->append("\"name\":\"cycles\"}}");

  open_metadata("ranktime_run", 0, 0, out);
  out->append("\"ranks\":");
  json::append_int(metadata.ranks, out);
  out->append(",\"hostnames\":");
  append_array(
      metadata.hostnames, [](const std::string& s, TextBuffer* o) { append_quoted(s, o); }, out);
  out->append(",\"pids\":");
  append_array(metadata.pids, json::append_int, out);
  out->append(",\"start_time_since_epoch_in_micros\":");
  json::append_int(metadata.start_time_since_epoch_us, out);
  out->append(",\"config\":{");
  for (size_t i = 0; i < metadata.config.size(); ++i) {
    if (i != 0) out->push_back(',');
    append_quoted(metadata.config[i].first, out);
    out->push_back(':');
    append_quoted(metadata.config[i].second, out);
  }
  out->append("},\"clock_offsets_us\":");
  append_doubles(metadata.clock_offsets_us, out);
  out->append(",\"clock_uncertainty_us\":");
  append_doubles(metadata.clock_uncertainty_us, out);
  out->append(",\"mark_cycles\":");
  out->append(metadata.mark_cycles ? "true" : "false");
  out->append(",\"all_ranks\":");
  out->append(metadata.all_ranks ? "true" : "false");
  out->append("}}");
  return 4;
}

size_t EventFormatter::append_run_end(uint64_t events_written, uint64_t events_dropped,
                                      const std::vector<double>& clock_offsets_us,
                                      const std::vector<double>& clock_uncertainty_us,
                                      TextBuffer* out) {
  open_metadata("ranktime_run_end", 0, 0, out);
  out->append("\"events_written\":");
  json::append_int(static_cast<int64_t>(events_written), out);
  out->append(",\"events_dropped\":");
  json::append_int(static_cast<int64_t>(events_dropped), out);
  out->append(",\"clock_offsets_us\":");
  append_doubles(clock_offsets_us, out);
  out->append(",\"clock_uncertainty_us\":");
  append_doubles(clock_uncertainty_us, out);
  out->append("}}");
  return 1;
}

const std::string& EventFormatter::quoted(uint32_t id) {
  if (id < quoted_known_.size() && quoted_known_[id]) return quoted_[id];
  const std::string& s = strings_.lookup(id);
  if (id >= quoted_known_.size()) {
    if (id >= strings_.size()) {  // not an id the table gave out: lookup() said ""
      return quoted_unknown_;
    }
    quoted_.resize(id + 1);
    quoted_known_.resize(id + 1);
  }
  quoted_[id].clear();
  json::append_string(s, &quoted_[id]);
  quoted_known_[id] = true;
  return quoted_[id];
}

EventFormatter::TensorState& EventFormatter::tensor_state(uint32_t tensor) {
  if (tensor < tensors_.size()) return tensors_[tensor];
  const uint32_t known = strings_.size();
  if (tensor < known) {
    tensors_.resize(known);
    return tensors_[tensor];
  }
  return sparse_tensors_[tensor];
}

size_t EventFormatter::name_tensor(uint32_t tensor, TextBuffer* out) {
  TensorState& state = tensor_state(tensor);
  if (state.named) return 0;
  state.named = true;
  const int64_t pid = int64_t{tensor} + 1;
  open_metadata("process_name", pid, 0, out);
  out->append("\"name\":");
  out->append(quoted(tensor));
  out->append("}}");
  open_metadata("process_sort_index", pid, 0, out);
  out->append("\"sort_index\":");
  json::append_int(tensor, out);
  out->append("}}");
  open_metadata("thread_name", pid, 0, out);
  out->append("\"name\":\"negotiate\"}}");
  return 3;
}

size_t EventFormatter::name_lane(uint32_t tensor, int16_t rank, TextBuffer* out) {
  size_t events = name_tensor(tensor, out);
  std::vector<bool>& lanes = tensor_state(tensor).lanes_named;
  const auto lane = static_cast<uint16_t>(rank);
  if (lane < lanes.size() && lanes[lane]) return events;
  if (lane >= lanes.size()) lanes.resize(size_t{lane} + 1);
  lanes[lane] = true;
  const int64_t pid = int64_t{tensor} + 1;
  const int64_t tid = int64_t{rank} + 1;
  open_metadata("thread_name", pid, tid, out);
  out->append("\"name\":\"rank ");
  json::append_int(rank, out);
  out->append("\"}}");
  open_metadata("thread_sort_index", pid, tid, out);
  out->append("\"sort_index\":");
  json::append_int(tid, out);
  out->append("}}");
  return events + 2;
}

const std::string& EventFormatter::quoted_phase(Phase phase) const {
  const auto index = static_cast<size_t>(phase);
  return quoted_phases_[index < static_cast<size_t>(Phase::kCount)
                            ? index
                            : static_cast<size_t>(Phase::kCount)];
}

const std::string& EventFormatter::error_text(uint32_t error_string) {
  return error_string != 0 ? quoted(error_string) : no_error_;
}

void EventFormatter::add_to_batch(const Record& record) {
  const auto lane = static_cast<uint16_t>(record.rank);
  if (lane >= batches_.size()) batches_.resize(size_t{lane} + 1);
  LaneBatch& batch = batches_[lane];
  if (record.kind == RecordKind::kBatch) {
    batch.header = record;
    batch.spans.clear();
    batch.rendered = false;
    return;
  }
  if (batch.header.kind != RecordKind::kBatch ||
      batch.spans.size() >= batch.header.args.batch.spans) {
    return;  // no batch open on this lane, or more spans than announced: corrupt input
  }
  batch.spans.push_back(record);
}

void EventFormatter::render_batch(LaneBatch* batch) {
  const Record& header = batch->header;
  const std::string& phase = quoted_phase(header.phase);
  const std::string& queue = quoted_phase(Phase::kQueue);
  const std::string& error = error_text(header.args.batch.error_string);
  size_t room = 2 * (kEventRoom + phase.size()) + error.size() + 2 * (kEventRoom + queue.size());
  for (const Record& span : batch->spans)
    room += 2 * (kEventRoom + quoted_phase(span.phase).size());
  batch->text.clear();
  batch->cuts.clear();
  const PidSlot pid(&batch->cuts);
  const int64_t tid = int64_t{header.rank} + 1;
  EventText t(&batch->text, room);
  t.open(phase, 'B', pid, tid, header.ts_ns - start_ns_);
  batch->cuts.push_back(t.written());  // the tensor's own args go here
  span_text(queue, pid, tid, header.ts_ns - start_ns_, header.args.batch.start_ns - start_ns_, &t);
  for (const Record& span : batch->spans) {
    span_text(quoted_phase(span.phase), pid, tid, span.ts_ns - start_ns_, span.end_ns - start_ns_,
              &t);
  }
  op_end_text(phase, pid, tid, header.end_ns - start_ns_, error, &t);
  batch->rendered = true;
}

size_t EventFormatter::append_batch_tensor(const Record& record, TextBuffer* out) {
  const auto lane = static_cast<uint16_t>(record.rank);
  if (lane >= batches_.size()) return 0;
  LaneBatch& batch = batches_[lane];
  const Record& header = batch.header;
  // A tensor whose batch header or sub-phases did not arrive (dropped, corrupt) is left out
  // rather than given another batch's times.
  if (header.kind != RecordKind::kBatch || batch.spans.size() != header.args.batch.spans) return 0;
  if (!batch.rendered) render_batch(&batch);
  const size_t events = name_lane(record.tensor, record.rank, out);
  // The batch's text with this tensor's pid at every cut but the second, its args there.
  char pid[24];
  const size_t pid_size = static_cast<size_t>(
      std::to_chars(pid, pid + sizeof(pid), int64_t{record.tensor} + 1).ptr - pid);
  const std::string_view text = batch.text.view();
  EventText t(out, text.size() + batch.cuts.size() * pid_size + kOpArgsRoom);
  size_t from = 0;
  for (size_t i = 0; i < batch.cuts.size(); ++i) {
    t.str(text.substr(from, batch.cuts[i] - from));
    if (i == 1) {
      op_args_text(record.args.op, header.args.batch.fused_tensors, &t);
    } else {
      t.str(std::string_view(pid, pid_size));
    }
    from = batch.cuts[i];
  }
  t.str(text.substr(from));
  return events + batch.cuts.size() - 1;
}

size_t EventFormatter::append_negotiation(const Record& record, TextBuffer* out) {
  const NegotiationArgs& n = record.args.negotiation;
  const int ticks = n.ticks < kMaxInlineTicks ? n.ticks : kMaxInlineTicks;
  if (ticks == 0) return 0;  // corrupt: a negotiation has a tick per rank
  const size_t events = name_tensor(record.tensor, out);
  const std::string& error = error_text(n.error_string);
  const std::string& phase = quoted_phase(record.phase);
  const int64_t pid = int64_t{record.tensor} + 1;
  EventText t(out, (2 + ticks) * kEventRoom + 2 * phase.size() + error.size());
  t.open(phase, 'B', pid, 0, record.ts_ns - start_ns_);
  t.chr('}');
  for (int i = 0; i < ticks; ++i) {
    const int64_t at = tick_ns(n.ready_ns[i], record.ts_ns, record.end_ns);
    tick_text(pid, at - start_ns_, n.rank[i], difference_ns(n.ready_ns[i], n.ready_ns[0]), &t);
  }
  negotiate_end_text(phase, pid, record.end_ns - start_ns_, n.rank[ticks - 1],
                     difference_ns(n.ready_ns[ticks - 1], n.ready_ns[0]), error, &t);
  return events + 2 + static_cast<size_t>(ticks);
}

size_t EventFormatter::append_record(const Record& record, TextBuffer* out) {
  const int64_t pid = int64_t{record.tensor} + 1;
  const int64_t lane_tid = int64_t{record.rank} + 1;
  const int64_t ts = record.ts_ns - start_ns_;
  const std::string& phase = quoted_phase(record.phase);
  switch (record.kind) {
    case RecordKind::kOpBegin: {
      const size_t events = name_lane(record.tensor, record.rank, out);
      EventText t(out, kOpBeginRoom + phase.size());
      op_begin_text(phase, pid, lane_tid, ts, record.args.op, record.args.op.fused_tensors, &t);
      return events + 1;
    }
    case RecordKind::kOpEnd: {
      const size_t events = name_lane(record.tensor, record.rank, out);
      const std::string& error = error_text(record.args.op.error_string);
      EventText t(out, kEventRoom + phase.size() + error.size());
      op_end_text(phase, pid, lane_tid, ts, error, &t);
      return events + 1;
    }
    case RecordKind::kSpan: {
      const size_t events = name_lane(record.tensor, record.rank, out);
      EventText t(out, 2 * (kEventRoom + phase.size()));
      span_text(phase, pid, lane_tid, ts, record.end_ns - start_ns_, &t);
      return events + 2;
    }
    case RecordKind::kBatch:
    case RecordKind::kBatchSpan:
      add_to_batch(record);
      return 0;
    case RecordKind::kBatchTensor:
      return append_batch_tensor(record, out);
    case RecordKind::kNegotiateBegin: {
      const size_t events = name_tensor(record.tensor, out);
      EventText t(out, kEventRoom + phase.size());
      t.open(phase, 'B', pid, 0, ts);
      t.chr('}');
      return events + 1;
    }
    case RecordKind::kTick: {
      const size_t events = name_tensor(record.tensor, out);
      EventText t(out, kEventRoom);
      tick_text(pid, ts, record.args.tick.rank, record.args.tick.lag_ns, &t);
      return events + 1;
    }
    case RecordKind::kNegotiateEnd: {
      const NegotiateEndArgs& negotiate = record.args.negotiate;
      const size_t events = name_tensor(record.tensor, out);
      const std::string& error = error_text(negotiate.error_string);
      EventText t(out, kEventRoom + phase.size() + error.size());
      negotiate_end_text(phase, pid, ts, negotiate.last_rank, negotiate.spread_ns, error, &t);
      return events + 1;
    }
    case RecordKind::kNegotiation:
      return append_negotiation(record, out);
    case RecordKind::kCycle: {
      EventText t(out, kEventRoom);
      t.lit(",\n{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\",\"pid\":0,\"tid\":0,\"ts\":");
      t.us3(ts);
      t.lit(",\"args\":{\"cycle\":");
      t.num(record.args.cycle.cycle);
      t.lit("}}");
      return 1;
    }
    case RecordKind::kInstant: {
      // Cache both before holding a reference: caching a new id may grow the cache.
      quoted(record.args.instant.name_string);
      const std::string& message = quoted(record.args.instant.message_string);
      const std::string& name = quoted(record.args.instant.name_string);
      EventText t(out, kEventRoom + name.size() + message.size());
      t.lit(",\n{\"name\":");
      t.str(name);
      t.lit(",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":");
      t.us3(ts);
      t.lit(",\"args\":{\"message\":");
      t.str(message);
      t.lit("}}");
      return 1;
    }
    case RecordKind::kCounter: {
      const std::string& name = quoted(record.args.counter.name_string);
      EventText t(out, kEventRoom + name.size() + json::kMaxDouble);
      t.open(name, 'C', 0, 0, ts);
      t.lit(",\"args\":{\"rank ");
      t.num(record.args.counter.series);
      t.lit("\":");
      t.dbl(record.args.counter.value);
      t.lit("}}");
      return 1;
    }
  }
  return 0;
}

}  // namespace ranktime::timeline
