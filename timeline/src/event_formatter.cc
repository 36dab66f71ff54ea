// EventFormatter: Records -> Chrome-trace JSON events, per docs/timeline-format.md.
#include "event_formatter.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "json_text.h"
#include "ranktime/timeline/trace_names.h"

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

// The flow arrows' name: from the last rank's readiness to the processing that waited for it.
constexpr std::string_view kFlowName = "\"last_ready\"";

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

// A thread's name and sort index: `name` is quoted JSON text.
size_t name_thread(int64_t pid, int64_t tid, std::string_view name, TextBuffer* out) {
  open_metadata("thread_name", pid, tid, out);
  out->append("\"name\":");
  out->append(name);
  out->append("}}");
  open_metadata("thread_sort_index", pid, tid, out);
  out->append("\"sort_index\":");
  json::append_int(tid, out);
  out->append("}}");
  return 2;
}

// `,\n{"name":"<name>","ph":"i","pid":0,"tid":0,"ts":TS,"args":{` (the caller closes both
// braces): a run-level instant that both viewers show with its args.
void open_run_instant(std::string_view name, int64_t ts_ns, TextBuffer* out) {
  out->append(",\n{\"name\":\"");
  out->append(name);
  out->append("\",\"ph\":\"i\",\"pid\":0,\"tid\":0,\"ts\":");
  char text[json::kMaxUs3];
  out->append(std::string_view(text, static_cast<size_t>(json::write_us3(text, ts_ns) - text)));
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

// Room for one event's fixed parts (keys, pid, tid, timestamp, duration, closing braces, a few
// short args); names, phase, messages and an operation's args are added to it by size.
// Exceeding it is a bug (EventText aborts); the ExtremeValues test writes every field at its
// widest. Worst cases: complete() 140 bytes + name; a tick with its lag 180; a flow's two ends
// 2 x 130.
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

  // A complete slice from `begin` to `end`: `open(...,'X',...),"dur":D` (no closing brace).
  void complete(std::string_view quoted_name, const PidSlot& pid, int64_t tid, int64_t begin,
                int64_t end) {
    open(quoted_name, 'X', pid, tid, begin);
    lit(",\"dur\":");
    us3(difference(end, begin));
  }

  // later - earlier, wrapping instead of overflowing on corrupt input.
  static int64_t difference(int64_t later, int64_t earlier) {
    return static_cast<int64_t>(static_cast<uint64_t>(later) - static_cast<uint64_t>(earlier));
  }

 private:
  TextBuffer* out_;
  char* p_;
  const char* end_;
};

// A sub-phase (or any slice without args): a complete event.
void slice_text(std::string_view phase, const PidSlot& pid, int64_t tid, int64_t begin, int64_t end,
                EventText* t) {
  t->complete(phase, pid, tid, begin, end);
  t->chr('}');
}

// A key for the dtype, shape and bytes of an operation: a lane writes them again only when it
// changes. Never 0 ("none written yet").
uint64_t op_args_key(const OpArgs& op) {
  auto mix = [](uint64_t h, uint64_t v) {  // splitmix64 over the running value
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(op.dtype, op.ndim);
  const int kept = op.ndim < kMaxInlineDims ? op.ndim : kMaxInlineDims;
  for (int d = 0; d < kept; ++d) h = mix(h, static_cast<uint64_t>(op.dims[d]));
  h = mix(h, static_cast<uint64_t>(op.bytes));
  return h | 1;
}

// An operation slice's args, if it has any to write: dtype, shape and bytes where they differ
// from the lane's last (*lane_key, updated), fused_tensors above 1, the error if any.
void op_args_text(const OpArgs& op, uint16_t fused_tensors, std::string_view error,
                  uint64_t* lane_key, EventText* t) {
  const uint64_t key = op_args_key(op);
  const bool shape = key != *lane_key;
  if (!shape && fused_tensors <= 1 && error.empty()) return;
  t->lit(",\"args\":{");
  bool first = true;
  auto separate = [&] {
    if (!first) t->chr(',');
    first = false;
  };
  if (shape) {
    *lane_key = key;
    separate();
    t->lit("\"dtype\":");
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
  }
  if (fused_tensors > 1) {
    separate();
    t->lit("\"fused_tensors\":");
    t->num(fused_tensors);
  }
  if (!error.empty()) {
    separate();
    t->lit("\"error\":");
    t->str(error);
  }
  t->chr('}');
}

// A readiness tick: a zero-length 'X' named by the rank, inside its NEGOTIATE slice that begins
// at `begin`. Its lag behind the first rank is written only where it is not ts - begin (a tick
// or the slice's begin moved by clock-offset uncertainty).
void tick_text(int64_t pid, int64_t ts, int64_t begin, int32_t rank, int64_t lag_ns, EventText* t) {
  char name[24] = "\"";
  char* end = std::to_chars(name + 1, name + sizeof(name) - 1, rank).ptr;
  *end++ = '"';
  t->open(std::string_view(name, static_cast<size_t>(end - name)), 'X', pid, 0, ts);
  t->lit(",\"dur\":0");
  if (lag_ns != EventText::difference(ts, begin)) {
    t->lit(",\"args\":{\"lag_us\":");
    t->us3(lag_ns);
    t->chr('}');
  }
  t->chr('}');
}

// A NEGOTIATE_<OP> slice (without its ticks); `error` is the quoted message, or empty for none.
void negotiation_text(std::string_view phase, int64_t pid, int64_t begin, int64_t end,
                      int32_t last_rank, int64_t spread_ns, std::string_view error, EventText* t) {
  t->complete(phase, pid, 0, begin, end);
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

}  // namespace

EventFormatter::EventFormatter(const StringTable& strings, int64_t start_ns)
    : strings_(strings), start_ns_(start_ns), latest_ns_(start_ns) {
  for (size_t i = 0; i < static_cast<size_t>(Phase::kCount); ++i) {
    std::string quoted_phase;
    json::append_string(phase_name(static_cast<Phase>(i)), &quoted_phase);
    quoted_phases_.push_back(std::move(quoted_phase));
  }
  quoted_phases_.emplace_back();
  json::append_string(phase_name(Phase::kCount), &quoted_phases_.back());
}

size_t EventFormatter::append_run_metadata(const RunMetadata& metadata, int64_t at_ns,
                                           uint64_t file_index, TextBuffer* out) {
  open_metadata("process_name", 0, 0, out);
  out->append("\"name\":\"ranktime\"}}");
  open_metadata("process_sort_index", 0, 0, out);
  out->append("\"sort_index\":-1}}");
  open_metadata("thread_name", 0, 0, out);
  out->append("\"name\":\"cycles\"}}");

  latest_ns_ = at_ns;
  open_run_instant("ranktime_run", at_ns - start_ns_, out);
  out->append("\"ranks\":");
  json::append_int(metadata.ranks, out);
  out->append(",\"hostnames\":");
  append_array(
      metadata.hostnames, [](const std::string& s, TextBuffer* o) { append_quoted(s, o); }, out);
  out->append(",\"pids\":");
  append_array(metadata.pids, json::append_int, out);
  for (const auto& [name, values] : {std::pair{",\"local_ranks\":", &metadata.local_ranks},
                                     {",\"local_sizes\":", &metadata.local_sizes},
                                     {",\"cross_ranks\":", &metadata.cross_ranks},
                                     {",\"cross_sizes\":", &metadata.cross_sizes}}) {
    out->append(name);
    append_array(*values, json::append_int, out);
  }
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
  out->append(",\"file_index\":");
  json::append_int(static_cast<int64_t>(file_index), out);
  out->append(",\"timeline_ranks\":");
  append_quoted(metadata.timeline_ranks, out);
  // Rank 0's raw clock at ts 0: `ranktime merge` maps times a rank read from ranktime's clock
  // (ranktime.torch.profile's anchors) onto the trace with it and the rank's offset.
  out->append(",\"clock_zero_ns\":");
  json::append_int(start_ns_, out);
  out->append("}}");
  return 4;
}

size_t EventFormatter::append_run_end(const RunEnd& end, TextBuffer* out) {
  open_run_instant("ranktime_run_end", latest_ns_ - start_ns_, out);
  out->append("\"events_written\":");
  json::append_int(static_cast<int64_t>(end.events_written), out);
  out->append(",\"events_dropped\":");
  json::append_int(static_cast<int64_t>(end.events_dropped), out);
  out->append(",\"clock_offsets_us\":");
  append_doubles(end.clock_offsets_us, out);
  out->append(",\"clock_uncertainty_us\":");
  append_doubles(end.clock_uncertainty_us, out);
  if (end.regions_dropped != 0) {
    out->append(",\"regions_dropped\":");
    json::append_int(static_cast<int64_t>(end.regions_dropped), out);
  }
  if (!end.next_file.empty()) {
    out->append(",\"next_file\":");
    append_quoted(end.next_file, out);
  }
  out->append("}}");
  return 1;
}

void EventFormatter::start_file() {
  tensors_.clear();
  sparse_tensors_.clear();
  step_threads_named_.clear();
  region_threads_named_.clear();
  for (LaneBatch& batch : batches_) batch.subphases_written = false;
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
  std::vector<LaneState>& lanes = tensor_state(tensor).lanes;
  const auto lane = static_cast<uint16_t>(rank);
  if (lane < lanes.size() && lanes[lane].named) return events;
  if (lane >= lanes.size()) lanes.resize(size_t{lane} + 1);
  lanes[lane].named = true;
  const std::string name = "\"rank " + std::to_string(rank) + "\"";
  return events + name_thread(int64_t{tensor} + 1, int64_t{rank} + 1, name, out);
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

size_t EventFormatter::append_flow(uint32_t tensor, int64_t op_ns, TextBuffer* out) {
  TensorState& state = tensor_state(tensor);
  if (!state.flow_pending) return 0;
  state.flow_pending = false;
  if (op_ns < state.flow_from_ns) return 0;  // an arrow back in time (clock uncertainty): none
  const uint64_t id = ++flows_;
  const int64_t pid = int64_t{tensor} + 1;
  EventText t(out, 2 * kEventRoom);
  t.lit(",\n{\"name\":");
  t.str(kFlowName);
  t.lit(",\"ph\":\"s\",\"id\":");
  t.num(static_cast<int64_t>(id));
  t.lit(",\"pid\":");
  t.num(pid);
  t.lit(",\"tid\":0,\"ts\":");
  t.us3(state.flow_from_ns - start_ns_);
  t.lit("}");
  t.lit(",\n{\"name\":");
  t.str(kFlowName);
  t.lit(",\"ph\":\"f\",\"bp\":\"e\",\"id\":");
  t.num(static_cast<int64_t>(id));
  t.lit(",\"pid\":");
  t.num(pid);
  t.lit(",\"tid\":1,\"ts\":");
  t.us3(op_ns - start_ns_);
  t.lit("}");
  return 2;
}

void EventFormatter::add_to_batch(const Record& record) {
  const auto lane = static_cast<uint16_t>(record.rank);
  if (lane >= batches_.size()) batches_.resize(size_t{lane} + 1);
  LaneBatch& batch = batches_[lane];
  if (record.kind == RecordKind::kBatch) {
    batch.header = record;
    batch.spans.clear();
    batch.rendered = false;
    batch.subphases_written = false;
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
  size_t room = kEventRoom + phase.size() + kEventRoom + queue.size();
  for (const Record& span : batch->spans) room += kEventRoom + quoted_phase(span.phase).size();
  batch->text.clear();
  batch->cuts.clear();
  const PidSlot pid(&batch->cuts);
  const int64_t tid = int64_t{header.rank} + 1;
  EventText t(&batch->text, room);
  t.complete(phase, pid, tid, header.ts_ns - start_ns_, header.end_ns - start_ns_);
  batch->cuts.push_back(t.written());  // the tensor's own args go here
  t.chr('}');
  batch->cuts.push_back(t.written());  // the operation slice ends here
  slice_text(queue, pid, tid, header.ts_ns - start_ns_, header.args.batch.start_ns - start_ns_, &t);
  for (const Record& span : batch->spans) {
    slice_text(quoted_phase(span.phase), pid, tid, span.ts_ns - start_ns_, span.end_ns - start_ns_,
               &t);
  }
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
  size_t events = name_lane(record.tensor, record.rank, out);
  // The first tensor written (in this file) carries the batch's sub-phases; the others, whose
  // sub-phases would be the same, only their operation slice.
  const bool with_subphases = !batch.subphases_written;
  batch.subphases_written = true;
  const size_t cuts = with_subphases ? batch.cuts.size() : 3;
  const std::string_view text =
      with_subphases ? batch.text.view() : batch.text.view().substr(0, batch.cuts[2]);
  char pid[24];
  const size_t pid_size = static_cast<size_t>(
      std::to_chars(pid, pid + sizeof(pid), int64_t{record.tensor} + 1).ptr - pid);
  const std::string& error = error_text(header.args.batch.error_string);
  uint64_t& lane_key = tensor_state(record.tensor).lanes[lane].op_args;
  {
    EventText t(out, text.size() + cuts * pid_size + kOpArgsRoom + error.size());
    size_t from = 0;
    for (size_t i = 0; i < cuts; ++i) {
      t.str(text.substr(from, batch.cuts[i] - from));
      if (i == 1) {
        op_args_text(record.args.op, header.args.batch.fused_tensors, error, &lane_key, &t);
      } else if (i != 2) {
        t.str(std::string_view(pid, pid_size));
      }
      from = batch.cuts[i];
    }
    t.str(text.substr(from));
  }
  events += with_subphases ? 2 + batch.spans.size() : 1;
  note_time(header.end_ns);
  if (record.rank == 0) events += append_flow(record.tensor, header.ts_ns, out);
  return events;
}

size_t EventFormatter::append_operation(const OpenSlice& op, const Record& end, TextBuffer* out) {
  const Record& begin = op.begin;
  size_t events = name_lane(begin.tensor, begin.rank, out);
  const std::string& phase = quoted_phase(begin.phase);
  const std::string& error = error_text(end.args.op.error_string);
  const int64_t pid = int64_t{begin.tensor} + 1;
  const int64_t tid = int64_t{begin.rank} + 1;
  uint64_t& lane_key = tensor_state(begin.tensor).lanes[static_cast<uint16_t>(begin.rank)].op_args;
  size_t room = kEventRoom + phase.size() + kOpArgsRoom + error.size();
  for (const Record& span : op.inner) room += kEventRoom + quoted_phase(span.phase).size();
  {
    EventText t(out, room);
    t.complete(phase, pid, tid, begin.ts_ns - start_ns_, end.ts_ns - start_ns_);
    op_args_text(begin.args.op, begin.args.op.fused_tensors, error, &lane_key, &t);
    t.chr('}');
    for (const Record& span : op.inner) {
      slice_text(quoted_phase(span.phase), pid, tid, span.ts_ns - start_ns_,
                 span.end_ns - start_ns_, &t);
    }
  }
  events += 1 + op.inner.size();
  note_time(end.ts_ns);
  if (begin.rank == 0) events += append_flow(begin.tensor, begin.ts_ns, out);
  return events;
}

size_t EventFormatter::append_negotiation(const Record& record, TextBuffer* out) {
  const NegotiationArgs& n = record.args.negotiation;
  const int ticks = n.ticks < kMaxInlineTicks ? n.ticks : kMaxInlineTicks;
  if (ticks == 0) return 0;  // corrupt: a negotiation has a tick per rank
  const size_t events = name_tensor(record.tensor, out);
  const std::string& error = error_text(n.error_string);
  const std::string& phase = quoted_phase(record.phase);
  const int64_t pid = int64_t{record.tensor} + 1;
  const int64_t begin = record.ts_ns;
  int64_t last_tick = begin;
  {
    EventText t(out, (1 + ticks) * kEventRoom + phase.size() + error.size());
    negotiation_text(phase, pid, begin - start_ns_, record.end_ns - start_ns_, n.rank[ticks - 1],
                     EventText::difference(n.ready_ns[ticks - 1], n.ready_ns[0]), error, &t);
    for (int i = 0; i < ticks; ++i) {
      last_tick = tick_ns(n.ready_ns[i], begin, record.end_ns);
      tick_text(pid, last_tick - start_ns_, begin - start_ns_, n.rank[i],
                EventText::difference(n.ready_ns[i], n.ready_ns[0]), &t);
    }
  }
  TensorState& state = tensor_state(record.tensor);
  state.flow_pending = n.error_string == 0;  // a failed negotiation has no operation slice
  state.flow_from_ns = last_tick;
  note_time(record.end_ns);
  return events + 1 + static_cast<size_t>(ticks);
}

size_t EventFormatter::append_negotiation(const OpenSlice& open, const Record& end,
                                          TextBuffer* out) {
  if (open.inner.empty()) return 0;  // corrupt: a negotiation has a tick per rank
  const Record& begin = open.begin;
  const size_t events = name_tensor(begin.tensor, out);
  const NegotiateEndArgs& n = end.args.negotiate;
  const std::string& error = error_text(n.error_string);
  const std::string& phase = quoted_phase(begin.phase);
  const int64_t pid = int64_t{begin.tensor} + 1;
  {
    EventText t(out, (1 + open.inner.size()) * kEventRoom + phase.size() + error.size());
    negotiation_text(phase, pid, begin.ts_ns - start_ns_, end.ts_ns - start_ns_, n.last_rank,
                     n.spread_ns, error, &t);
    for (const Record& tick : open.inner) {
      tick_text(pid, tick.ts_ns - start_ns_, begin.ts_ns - start_ns_, tick.args.tick.rank,
                tick.args.tick.lag_ns, &t);
    }
  }
  TensorState& state = tensor_state(begin.tensor);
  state.flow_pending = n.error_string == 0;
  state.flow_from_ns = open.inner.back().ts_ns;
  note_time(end.ts_ns);
  return events + 1 + open.inner.size();
}

size_t EventFormatter::append_step(const Record& record, TextBuffer* out) {
  if (record.rank < 0) return 0;  // corrupt: tid 0 is the cycles thread
  const auto rank = static_cast<size_t>(record.rank);
  const int64_t tid = int64_t{record.rank} + 1;
  size_t events = 0;
  if (rank >= step_threads_named_.size()) step_threads_named_.resize(rank + 1);
  if (!step_threads_named_[rank]) {
    step_threads_named_[rank] = true;
    events += name_thread(0, tid, "\"steps rank " + std::to_string(rank) + "\"", out);
  }
  EventText t(out, kEventRoom);
  t.complete("\"STEP\"", 0, tid, record.ts_ns - start_ns_, record.end_ns - start_ns_);
  t.lit(",\"args\":{\"step\":");
  t.num(record.args.step.step);
  t.lit("}}");
  note_time(record.end_ns);
  return events + 1;
}

size_t EventFormatter::append_region(const Record& record, TextBuffer* out) {
  if (record.rank < 0) return 0;  // corrupt
  const auto rank = static_cast<size_t>(record.rank);
  const int64_t pid = rank_process_pid(record.rank);
  size_t events = 0;
  if (rank >= region_threads_named_.size()) region_threads_named_.resize(rank + 1);
  if (!region_threads_named_[rank]) {
    region_threads_named_[rank] = true;
    open_metadata("process_name", pid, 0, out);
    out->append("\"name\":\"rank ");
    json::append_int(record.rank, out);
    out->append("\"}}");
    // After every tensor's process (sorted by string id, far below the base).
    open_metadata("process_sort_index", pid, 0, out);
    out->append("\"sort_index\":");
    json::append_int(pid, out);
    out->append("}}");
    events += 2 + name_thread(pid, kRegionsThreadTid, "\"regions\"", out);
  }
  const std::string& name = quoted(record.args.region.name_string);
  EventText t(out, kEventRoom + name.size());
  t.complete(name, pid, kRegionsThreadTid, record.ts_ns - start_ns_, record.end_ns - start_ns_);
  if (record.args.region.blocked_ns > 0) {
    t.lit(",\"args\":{\"blocked_us\":");
    t.us3(record.args.region.blocked_ns);
    t.chr('}');
  }
  t.chr('}');
  note_time(record.end_ns);
  return events + 1;
}

size_t EventFormatter::append_record(const Record& record, TextBuffer* out) {
  const int64_t pid = int64_t{record.tensor} + 1;
  const int64_t lane_tid = int64_t{record.rank} + 1;
  const int64_t ts = record.ts_ns - start_ns_;
  const auto lane = static_cast<uint16_t>(record.rank);
  switch (record.kind) {
    case RecordKind::kOpBegin: {
      if (lane >= open_operations_.size()) open_operations_.resize(size_t{lane} + 1);
      OpenSlice& op = open_operations_[lane];  // one still open lost its end: it is left out
      op.open = true;
      op.begin = record;
      op.inner.clear();
      return 0;
    }
    case RecordKind::kOpEnd: {
      if (lane >= open_operations_.size()) return 0;
      OpenSlice& op = open_operations_[lane];
      if (!op.open || op.begin.tensor != record.tensor) return 0;  // its begin was lost
      op.open = false;
      return append_operation(op, record, out);
    }
    case RecordKind::kSpan: {
      if (lane < open_operations_.size() && open_operations_[lane].open &&
          open_operations_[lane].begin.tensor == record.tensor) {
        open_operations_[lane].inner.push_back(record);
        return 0;
      }
      // A sub-phase on its own: written as it is.
      const size_t events = name_lane(record.tensor, record.rank, out);
      const std::string& phase = quoted_phase(record.phase);
      EventText t(out, kEventRoom + phase.size());
      slice_text(phase, pid, lane_tid, ts, record.end_ns - start_ns_, &t);
      note_time(record.end_ns);
      return events + 1;
    }
    case RecordKind::kBatch:
    case RecordKind::kBatchSpan:
      add_to_batch(record);
      return 0;
    case RecordKind::kBatchTensor:
      return append_batch_tensor(record, out);
    case RecordKind::kNegotiateBegin: {
      OpenSlice& n = open_negotiations_[record.tensor];  // one still open lost its end
      n.open = true;
      n.begin = record;
      n.inner.clear();
      return 0;
    }
    case RecordKind::kTick: {
      auto it = open_negotiations_.find(record.tensor);
      if (it != open_negotiations_.end()) it->second.inner.push_back(record);
      return 0;
    }
    case RecordKind::kNegotiateEnd: {
      auto it = open_negotiations_.find(record.tensor);
      if (it == open_negotiations_.end()) return 0;  // its begin was lost
      const size_t events = append_negotiation(it->second, record, out);
      open_negotiations_.erase(it);
      return events;
    }
    case RecordKind::kNegotiation:
      return append_negotiation(record, out);
    case RecordKind::kStep:
      return append_step(record, out);
    case RecordKind::kRegion:
      return append_region(record, out);
    case RecordKind::kCycle: {
      EventText t(out, kEventRoom);
      t.lit(",\n{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\",\"pid\":0,\"tid\":0,\"ts\":");
      t.us3(ts);
      t.lit(",\"args\":{\"cycle\":");
      t.num(record.args.cycle.cycle);
      t.lit("}}");
      note_time(record.ts_ns);
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
      note_time(record.ts_ns);
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
      note_time(record.ts_ns);
      return 1;
    }
  }
  return 0;
}

}  // namespace ranktime::timeline
