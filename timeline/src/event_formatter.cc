// EventFormatter: Records -> Chrome-trace JSON events, per docs/timeline-format.md.
#include "event_formatter.h"

#include <string_view>

#include "json_text.h"

namespace ranktime::timeline {

namespace {

// Indexed by the ranktime::DataType value.
constexpr std::string_view kQuotedDtypes[] = {
    "\"uint8\"",   "\"int8\"",     "\"int32\"",   "\"int64\"",
    "\"float16\"", "\"bfloat16\"", "\"float32\"", "\"float64\"",
};

std::string_view quoted_dtype(uint8_t dtype) {
  return dtype < sizeof(kQuotedDtypes) / sizeof(kQuotedDtypes[0]) ? kQuotedDtypes[dtype]
                                                                  : "\"unknown\"";
}

// `,\n{"name":"<name>","ph":"M","pid":P,"tid":T,"args":{` (the caller closes both braces).
void open_metadata(std::string_view name, int64_t pid, int64_t tid, std::string* out) {
  out->append(",\n{\"name\":\"");
  out->append(name);
  out->append("\",\"ph\":\"M\",\"pid\":");
  json::append_int(pid, out);
  out->append(",\"tid\":");
  json::append_int(tid, out);
  out->append(",\"args\":{");
}

template <typename T, typename AppendOne>
void append_array(const std::vector<T>& values, AppendOne append_one, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out->push_back(',');
    append_one(values[i], out);
  }
  out->push_back(']');
}

void append_doubles(const std::vector<double>& values, std::string* out) {
  append_array(values, json::append_double, out);
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

size_t EventFormatter::append_run_metadata(const RunMetadata& metadata, std::string* out) {
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
      metadata.hostnames, [](const std::string& s, std::string* o) { json::append_string(s, o); },
      out);
  out->append(",\"pids\":");
  append_array(metadata.pids, json::append_int, out);
  out->append(",\"start_time_since_epoch_in_micros\":");
  json::append_int(metadata.start_time_since_epoch_us, out);
  out->append(",\"config\":{");
  for (size_t i = 0; i < metadata.config.size(); ++i) {
    if (i != 0) out->push_back(',');
    json::append_string(metadata.config[i].first, out);
    out->push_back(':');
    json::append_string(metadata.config[i].second, out);
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
                                      std::string* out) {
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

size_t EventFormatter::name_tensor(uint32_t tensor, std::string* out) {
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

size_t EventFormatter::name_lane(uint32_t tensor, int16_t rank, std::string* out) {
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

void EventFormatter::open_event(const std::string& quoted_name, const char* ph, int64_t pid,
                                int64_t tid, int64_t ts_ns, std::string* out) const {
  out->append(",\n{\"name\":");
  out->append(quoted_name);
  out->append(",\"ph\":\"");
  out->append(ph);
  out->append("\",\"pid\":");
  json::append_int(pid, out);
  out->append(",\"tid\":");
  json::append_int(tid, out);
  out->append(",\"ts\":");
  json::append_us3(ts_ns - start_ns_, out);
}

size_t EventFormatter::append_record(const Record& record, std::string* out) {
  const int64_t pid = int64_t{record.tensor} + 1;
  const int64_t lane_tid = int64_t{record.rank} + 1;
  const auto phase_index = static_cast<size_t>(record.phase);
  const std::string& phase = quoted_phases_[phase_index < static_cast<size_t>(Phase::kCount)
                                                ? phase_index
                                                : static_cast<size_t>(Phase::kCount)];
  size_t events = 0;
  switch (record.kind) {
    case RecordKind::kOpBegin: {
      const OpArgs& op = record.args.op;
      events += name_lane(record.tensor, record.rank, out);
      open_event(phase, "B", pid, lane_tid, record.ts_ns, out);
      out->append(",\"args\":{\"dtype\":");
      out->append(quoted_dtype(op.dtype));
      out->append(",\"shape\":[");
      const int kept = op.ndim < kMaxInlineDims ? op.ndim : kMaxInlineDims;
      for (int d = 0; d < kept; ++d) {
        if (d != 0) out->push_back(',');
        json::append_int(op.dims[d], out);
      }
      out->push_back(']');
      if (op.ndim > kMaxInlineDims) out->append(",\"shape_truncated\":true");
      out->append(",\"bytes\":");
      json::append_int(op.bytes, out);
      out->append(",\"fused_tensors\":");
      json::append_int(op.fused_tensors, out);
      out->append("}}");
      return events + 1;
    }
    case RecordKind::kOpEnd:
      events += name_lane(record.tensor, record.rank, out);
      open_event(phase, "E", pid, lane_tid, record.ts_ns, out);
      if (record.args.op.error_string != 0) {
        out->append(",\"args\":{\"error\":");
        out->append(quoted(record.args.op.error_string));
        out->push_back('}');
      }
      out->push_back('}');
      return events + 1;
    case RecordKind::kSpan:
      events += name_lane(record.tensor, record.rank, out);
      open_event(phase, "B", pid, lane_tid, record.ts_ns, out);
      out->push_back('}');
      open_event(phase, "E", pid, lane_tid, record.end_ns, out);
      out->push_back('}');
      return events + 2;
    case RecordKind::kNegotiateBegin:
      events += name_tensor(record.tensor, out);
      open_event(phase, "B", pid, 0, record.ts_ns, out);
      out->push_back('}');
      return events + 1;
    case RecordKind::kTick: {
      events += name_tensor(record.tensor, out);
      std::string name = "\"";  // short enough for the small-string buffer: no allocation
      json::append_int(record.args.tick.rank, &name);
      name.push_back('"');
      open_event(name, "X", pid, 0, record.ts_ns, out);
      out->append(",\"dur\":0,\"args\":{\"rank\":");
      json::append_int(record.args.tick.rank, out);
      out->append(",\"lag_us\":");
      json::append_fixed3(record.args.tick.lag_us, out);
      out->append("}}");
      return events + 1;
    }
    case RecordKind::kNegotiateEnd: {
      const NegotiateEndArgs& negotiate = record.args.negotiate;
      events += name_tensor(record.tensor, out);
      open_event(phase, "E", pid, 0, record.ts_ns, out);
      out->append(",\"args\":{\"last_rank\":");
      json::append_int(negotiate.last_rank, out);
      out->append(",\"spread_us\":");
      json::append_fixed3(negotiate.spread_us, out);
      if (negotiate.error_string != 0) {
        out->append(",\"error\":");
        out->append(quoted(negotiate.error_string));
      }
      out->append("}}");
      return events + 1;
    }
    case RecordKind::kCycle:
      out->append(
          ",\n{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\",\"pid\":0,\"tid\":0,\"ts\":");
      json::append_us3(record.ts_ns - start_ns_, out);
      out->append(",\"args\":{\"cycle\":");
      json::append_int(record.args.cycle.cycle, out);
      out->append("}}");
      return 1;
    case RecordKind::kInstant:
      out->append(",\n{\"name\":");
      out->append(quoted(record.args.instant.name_string));
      out->append(",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":");
      json::append_us3(record.ts_ns - start_ns_, out);
      out->append(",\"args\":{\"message\":");
      out->append(quoted(record.args.instant.message_string));
      out->append("}}");
      return 1;
    case RecordKind::kCounter:
      open_event(quoted(record.args.counter.name_string), "C", 0, 0, record.ts_ns, out);
      out->append(",\"args\":{\"rank ");
      json::append_int(record.args.counter.series, out);
      out->append("\":");
      json::append_double(record.args.counter.value, out);
      out->append("}}");
      return 1;
  }
  return 0;
}

}  // namespace ranktime::timeline
