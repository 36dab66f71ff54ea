// Streaming trace reader: nlohmann's SAX parser over a counting stream buffer. Only the event
// being parsed is materialised, so memory does not grow with the file.
#include "ranktime/timeline/trace_reader.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <istream>
#include <streambuf>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gzip_input.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

using nlohmann::json;

// Reads the source in large chunks and knows how many bytes the parser has consumed. The parser
// takes one character at a time without look-ahead past '{' and '}', so at an object's start and
// end callbacks consumed() is exactly the offset after that brace.
class CountingBuffer : public std::streambuf {
 public:
  explicit CountingBuffer(std::streambuf* source) : source_(source), buffer_(size_t{1} << 20) {}

  uint64_t consumed() const { return base_ + static_cast<uint64_t>(gptr() - eback()); }
  bool at_end() const { return at_end_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    base_ += static_cast<uint64_t>(egptr() - eback());
    std::streamsize n =
        source_->sgetn(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    if (n <= 0) {
      at_end_ = true;
      setg(buffer_.data(), buffer_.data(), buffer_.data());
      return traits_type::eof();
    }
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  std::streambuf* source_;
  std::vector<char> buffer_;
  uint64_t base_ = 0;  // offset of eback()
  bool at_end_ = false;
};

// Builds one event per depth-2 object of the top-level array. Values nested below an event's
// top-level fields are built into a json value (only `args` is kept).
class EventSax {
 public:
  EventSax(CountingBuffer& buffer, const TraceEventCallback& on_event,
           const TraceReadOptions& options, TraceReadResult& result)
      : buffer_(buffer), on_event_(on_event), options_(options), result_(result) {
    next_progress_ = options_.progress_every_bytes;
  }

  bool null() { return depth_ == 2 ? wrong_type("null") : scalar(json(nullptr)); }
  bool boolean(bool v) { return depth_ == 2 ? wrong_type("a boolean") : scalar(json(v)); }
  bool number_integer(json::number_integer_t v) {
    return depth_ == 2 ? integer_field(v) : scalar(json(v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ == 2) {
      if (v > static_cast<json::number_unsigned_t>(INT64_MAX)) return wrong_type("out of range");
      return integer_field(static_cast<int64_t>(v));
    }
    return scalar(json(v));
  }
  bool number_float(json::number_float_t v, const std::string&) {
    if (depth_ != 2) return scalar(json(v));
    switch (field_) {
      case Field::kTs:
        event_.ts = v;
        event_.has_ts = true;
        return true;
      case Field::kDur:
        event_.dur = v;
        event_.has_dur = true;
        return true;
      case Field::kPid:
      case Field::kTid:
        return wrong_type("not an integer");
      case Field::kId:
        return wrong_type("neither an integer nor a string");
      default:
        return wrong_type("a number");
    }
  }
  bool string(std::string& v) {
    if (depth_ != 2) return scalar(json(std::move(v)));
    switch (field_) {
      case Field::kName:
        event_.name.swap(v);
        event_.has_name = true;
        return true;
      case Field::kPh:
        event_.ph.swap(v);
        event_.has_ph = true;
        return true;
      case Field::kScope:
        event_.scope.swap(v);
        return true;
      case Field::kId:
        event_.id.swap(v);
        event_.has_id = true;
        return true;
      case Field::kBp:
        event_.bp.swap(v);
        return true;
      default:
        return wrong_type("a string");
    }
  }
  bool binary(json::binary_t&) { return fail_structure("binary values are not JSON"); }

  bool start_object(std::size_t) {
    if (depth_ == 0) return fail_structure("the top level is not a JSON array");
    if (depth_ == 1) {
      begin_event();
      depth_ = 2;
      return true;
    }
    open_nested(json::object());
    return true;
  }
  bool end_object() {
    if (depth_ == 2) {
      depth_ = 1;
      return end_event();
    }
    close_nested();
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) {
      depth_ = 1;
      result_.array_begin = buffer_.consumed();
      return true;
    }
    if (depth_ == 1) return fail_structure("element is not an object");
    open_nested(json::array());
    return true;
  }
  bool end_array() {
    if (depth_ == 1) {
      depth_ = 0;
      array_closed_ = true;
      return true;
    }
    close_nested();
    return true;
  }
  bool key(std::string& k) {
    if (depth_ == 2) {
      field_ = field_of(k);
    } else {
      nested_key_.swap(k);
    }
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    parse_failed_ = true;
    error_position_ = position;
    error_what_ = e.what();
    return false;
  }

  bool array_closed() const { return array_closed_; }
  bool stopped() const { return stopped_; }
  bool parse_failed() const { return parse_failed_; }
  bool structure_failed() const { return !structure_error_.empty(); }
  const std::string& structure_error() const { return structure_error_; }
  uint64_t structure_offset() const { return structure_offset_; }
  size_t error_position() const { return error_position_; }
  const std::string& error_what() const { return error_what_; }

 private:
  void begin_event() {
    event_.index = result_.events;
    event_.begin_offset = buffer_.consumed() - 1;
    event_.name.clear();
    event_.ph.clear();
    event_.scope.clear();
    event_.id.clear();
    event_.bp.clear();
    event_.pid = event_.tid = 0;
    event_.ts = event_.dur = 0;
    event_.has_name = event_.has_ph = event_.has_pid = event_.has_tid = false;
    event_.has_ts = event_.has_dur = event_.has_id = false;
    event_.args = nullptr;
    event_.malformed.clear();
  }

  bool end_event() {
    event_.end_offset = buffer_.consumed();
    result_.last_event_end = event_.end_offset;
    ++result_.events;
    bool go_on = on_event_(event_);
    if (options_.on_progress && event_.end_offset >= next_progress_) {
      options_.on_progress(event_.end_offset, result_.events);
      next_progress_ = event_.end_offset + options_.progress_every_bytes;
    }
    if (!go_on) stopped_ = true;
    return go_on;
  }

  bool fail_structure(const std::string& what) {
    structure_error_ = what;
    structure_offset_ = buffer_.consumed() == 0 ? 0 : buffer_.consumed() - 1;
    return false;
  }

  // The top-level fields the format defines; others are skipped.
  enum class Field { kName, kPh, kScope, kPid, kTid, kTs, kDur, kArgs, kId, kBp, kOther };

  // Called once per key (the hot path of the whole reader, hence no string comparisons).
  static Field field_of(const std::string& k) {
    switch (k.size()) {
      case 1:
        return k[0] == 's' ? Field::kScope : Field::kOther;
      case 2:
        if (k[0] == 'p' && k[1] == 'h') return Field::kPh;
        if (k[0] == 't' && k[1] == 's') return Field::kTs;
        if (k[0] == 'i' && k[1] == 'd') return Field::kId;
        if (k[0] == 'b' && k[1] == 'p') return Field::kBp;
        return Field::kOther;
      case 3:
        if (k == "pid") return Field::kPid;
        if (k == "tid") return Field::kTid;
        if (k == "dur") return Field::kDur;
        return Field::kOther;
      case 4:
        if (k == "name") return Field::kName;
        if (k == "args") return Field::kArgs;
        return Field::kOther;
      default:
        return Field::kOther;
    }
  }

  static const char* field_name(Field f) {
    switch (f) {
      case Field::kName:
        return "name";
      case Field::kPh:
        return "ph";
      case Field::kScope:
        return "s";
      case Field::kPid:
        return "pid";
      case Field::kTid:
        return "tid";
      case Field::kTs:
        return "ts";
      case Field::kDur:
        return "dur";
      case Field::kArgs:
        return "args";
      case Field::kId:
        return "id";
      case Field::kBp:
        return "bp";
      default:
        return nullptr;
    }
  }

  // A known field with a value of the wrong JSON type: noted on the event, which is still
  // delivered (the checker reports it). Unknown fields may hold anything.
  bool wrong_type(const char* what) {
    const char* name = field_name(field_);
    if (name != nullptr && event_.malformed.empty()) {
      event_.malformed = std::string("\"") + name + "\" is " + what;
    }
    return true;
  }

  bool integer_field(int64_t v) {
    switch (field_) {
      case Field::kPid:
        event_.pid = v;
        event_.has_pid = true;
        return true;
      case Field::kTid:
        event_.tid = v;
        event_.has_tid = true;
        return true;
      case Field::kTs:
        event_.ts = static_cast<double>(v);
        event_.has_ts = true;
        return true;
      case Field::kDur:
        event_.dur = static_cast<double>(v);
        event_.has_dur = true;
        return true;
      case Field::kId:
        event_.id = std::to_string(v);
        event_.has_id = true;
        return true;
      default:
        return wrong_type("a number");
    }
  }

  // A scalar inside a nested value (or, wrongly, directly in the top-level array).
  bool scalar(json&& value) {
    if (depth_ == 0) return fail_structure("the top level is not a JSON array");
    if (depth_ == 1) return fail_structure("element is not an object");
    place(std::move(value));
    return true;
  }

  // Nested values (depth > 2): a small DOM builder for `args` and anything else.
  void open_nested(json&& container) {
    if (depth_ == 2) {
      root_ = std::move(container);
      stack_.clear();
      stack_.push_back(&root_);
    } else {
      stack_.push_back(place(std::move(container)));
    }
    ++depth_;
  }
  void close_nested() {
    stack_.pop_back();
    --depth_;
    if (depth_ == 2) {
      if (field_ == Field::kArgs && root_.is_object()) {
        event_.args = std::move(root_);
      } else if (field_ == Field::kArgs) {
        wrong_type("not an object");
      } else {
        wrong_type(root_.is_array() ? "an array" : "an object");
      }
      root_ = nullptr;
    }
  }
  json* place(json&& value) {
    json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(value));
      return &parent->back();
    }
    json& slot = (*parent)[nested_key_];
    slot = std::move(value);
    return &slot;
  }

  CountingBuffer& buffer_;
  const TraceEventCallback& on_event_;
  const TraceReadOptions& options_;
  TraceReadResult& result_;
  TraceEvent event_;
  int depth_ = 0;  // 0 outside, 1 in the top array, 2 in an event, 3+ in nested values
  Field field_ = Field::kOther;  // the top-level field being read
  std::string nested_key_;
  json root_;
  std::vector<json*> stack_;
  uint64_t next_progress_ = 0;
  bool array_closed_ = false;
  bool stopped_ = false;
  bool parse_failed_ = false;
  size_t error_position_ = 0;
  std::string error_what_;
  std::string structure_error_;
  uint64_t structure_offset_ = 0;
};

bool is_tick_event(const TraceEvent& e) {
  return e.phase() == 'X' && !e.name.empty() && e.name.size() < 10 &&
         std::all_of(e.name.begin(), e.name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Fills in what the writer leaves implicit (docs/timeline-format.md), so that readers see every
// value on every event: a tick's `rank` (its name) and `lag_us` (its ts minus its NEGOTIATE
// slice's, where not given); an operation slice's `dtype`, `shape`, `bytes` (its lane's latest,
// where not repeated) and `fused_tensors` (1 where absent); and the sub-phases of a fused
// batch's tensors, which the file holds once per batch and lane, after the first tensor's
// slice: each other tensor's slice gets copies of them (before its thread's next event). Memory:
// one negotiation begin per tensor, one set of args and of copies per lane, one batch per rank.
class FormatCompleter {
 public:
  explicit FormatCompleter(const TraceEventCallback& next) : next_(next) {}

  bool add(const TraceEvent& e) {
    if (!pending_.empty() && e.pid > 0 && e.tid > 0 && e.has_ts && e.phase() != 'M') {
      auto it = pending_.find({e.pid, e.tid});
      if (it != pending_.end()) {
        // A slice that shares its batch's sub-phases, unless its own follow it (a writer that
        // repeats them for every tensor).
        std::vector<TraceEvent> copies = std::move(it->second);
        pending_.erase(it);
        const bool own = e.phase() == 'X' && is_subphase_name(e.name);
        if (!own) {
          for (const TraceEvent& copy : copies) {
            if (!next_(copy)) return false;
          }
        }
      }
    }
    // torch.profiler events (`ranktime merge`) are the profiler's own: handed on as they are.
    if (e.phase() != 'X' || e.pid <= 0 || !e.has_ts || !e.malformed.empty() ||
        torch_process_rank(e.pid) >= 0) {
      return next_(e);
    }
    if (e.tid == 0) {
      if (!is_tick_event(e)) {
        negotiation_begin_[e.pid] = e.ts;
        return next_(e);
      }
      const bool has_rank = e.args.is_object() && e.args.contains("rank");
      const bool has_lag = e.args.is_object() && e.args.contains("lag_us");
      if (has_rank && has_lag) return next_(e);
      TraceEvent tick = e;
      if (!tick.args.is_object()) tick.args = nlohmann::json::object();
      if (!has_rank) tick.args["rank"] = std::stoll(e.name);
      auto begin = negotiation_begin_.find(e.pid);
      if (!has_lag && begin != negotiation_begin_.end()) tick.args["lag_us"] = e.ts - begin->second;
      return next_(tick);
    }
    if (is_operation_name(e.name)) return add_operation(e);
    // A sub-phase: the batch whose first slice it follows holds it for the batch's other tensors.
    Batch& batch = batches_[e.tid];
    if (batch.pid == e.pid && batch.collecting) batch.subphases.push_back(e);
    return next_(e);
  }

 private:
  struct Batch {
    int64_t pid = 0;  // the tensor whose slice carries the sub-phases
    double ts = 0, dur = 0;
    bool collecting = false;
    std::vector<TraceEvent> subphases;
  };

  bool add_operation(const TraceEvent& slice) {
    TraceEvent e = slice;
    if (!e.args.is_object()) e.args = nlohmann::json::object();
    nlohmann::json& lane = lane_args_[{e.pid, e.tid}];
    if (e.args.contains("dtype") || e.args.contains("shape") || e.args.contains("bytes")) {
      lane = nlohmann::json::object();
      for (const char* key : {"dtype", "shape", "shape_truncated", "bytes"}) {
        if (e.args.contains(key)) lane[key] = e.args[key];
      }
    } else if (lane.is_object()) {
      for (const auto& [key, value] : lane.items()) e.args[key] = value;
    }
    if (!e.args.contains("fused_tensors")) e.args["fused_tensors"] = 1;
    const auto fused = e.args["fused_tensors"];
    Batch& batch = batches_[e.tid];
    const bool shares = fused.is_number_integer() && fused.get<int64_t>() > 1 && e.has_dur &&
                        batch.pid != e.pid && batch.ts == e.ts && batch.dur == e.dur &&
                        !batch.subphases.empty();
    if (!shares) {
      // Perhaps a batch's first slice: its sub-phases follow.
      batch.pid = e.pid;
      batch.ts = e.ts;
      batch.dur = e.dur;
      batch.collecting = true;
      batch.subphases.clear();
      return next_(e);
    }
    batch.collecting = false;
    std::vector<TraceEvent>& copies = pending_[{e.pid, e.tid}];
    copies = batch.subphases;
    for (TraceEvent& copy : copies) {
      copy.pid = e.pid;
      copy.index = e.index;
      copy.begin_offset = e.begin_offset;
      copy.end_offset = e.end_offset;
    }
    return next_(e);
  }

 public:
  // Hands on the sub-phase copies still waiting (the input ended).
  bool flush() {
    for (auto& [thread, copies] : pending_) {
      for (const TraceEvent& copy : copies) {
        if (!next_(copy)) return false;
      }
    }
    pending_.clear();
    return true;
  }

 private:
  struct ThreadHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<int64_t>()(k.first) * 1000003u ^ std::hash<int64_t>()(k.second);
    }
  };

  const TraceEventCallback& next_;
  std::unordered_map<int64_t, double> negotiation_begin_;  // by pid
  std::unordered_map<std::pair<int64_t, int64_t>, nlohmann::json, ThreadHash> lane_args_;
  std::unordered_map<int64_t, Batch> batches_;  // by tid (rank + 1)
  // Sub-phase copies for a slice that shares its batch's, handed on before the thread's next
  // event (or dropped if that event is a sub-phase of its own).
  std::unordered_map<std::pair<int64_t, int64_t>, std::vector<TraceEvent>, ThreadHash> pending_;
};

// Hands complete slices ('X' with a "dur") on a tensor's threads on as a 'B' and an 'E', so that
// the checker and the analysis see one form whichever the writer chose. The 'E' goes out when
// the thread's next event begins at or after its end (after, for a zero-length tick, which may
// sit at its negotiation's end), or at the end of the input. Ticks (zero-length 'X' named by a
// rank number) and pid 0's complete slices (STEP) are handed on as they are.
class CompleteSliceSplitter {
 public:
  explicit CompleteSliceSplitter(const TraceEventCallback& next) : next_(next) {}

  bool add(const TraceEvent& e) {
    const bool tick = is_tick(e);
    if (pending_ > 0 && e.phase() != 'M' && e.has_ts && !close_until(e, tick)) return false;
    if (e.phase() != 'X' || tick || e.pid <= 0 || !e.has_dur || !e.has_ts || e.dur < 0 ||
        !e.malformed.empty() || torch_process_rank(e.pid) >= 0) {
      return next_(e);
    }
    TraceEvent begin = e;
    begin.ph = "B";
    begin.has_dur = false;
    begin.dur = 0;
    TraceEvent end = begin;
    end.ph = "E";
    // To the nanosecond, as the file's timestamps are: ts + dur in floating point can land a
    // hair after the next slice's ts that the same text gives.
    end.ts = std::round((e.ts + e.dur) * 1000.0) / 1000.0;
    stacks_[{e.pid, e.tid}].push_back(std::move(end));
    ++pending_;
    return next_(begin);
  }

  // Closes every slice still pending, innermost first.
  bool flush() {
    for (auto& [thread, stack] : stacks_) {
      while (!stack.empty()) {
        TraceEvent end = std::move(stack.back());
        stack.pop_back();
        --pending_;
        if (!next_(end)) return false;
      }
    }
    return true;
  }

 private:
  struct ThreadHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<int64_t>()(k.first) * 1000003u ^ std::hash<int64_t>()(k.second);
    }
  };

  static bool is_tick(const TraceEvent& e) { return is_tick_event(e); }

  bool close_until(const TraceEvent& e, bool tick) {
    auto it = stacks_.find({e.pid, e.tid});
    if (it == stacks_.end()) return true;
    auto& stack = it->second;
    while (!stack.empty() && (tick ? stack.back().ts < e.ts : stack.back().ts <= e.ts)) {
      TraceEvent end = std::move(stack.back());
      stack.pop_back();
      --pending_;
      if (!next_(end)) return false;
    }
    return true;
  }

  const TraceEventCallback& next_;
  std::unordered_map<std::pair<int64_t, int64_t>, std::vector<TraceEvent>, ThreadHash> stacks_;
  size_t pending_ = 0;
};

TraceReadResult parse_trace(std::istream& in, const TraceEventCallback& on_event,
                            const TraceReadOptions& options) {
  TraceReadResult result;
  CountingBuffer buffer(in.rdbuf());
  std::istream counted(&buffer);
  EventSax sax(buffer, on_event, options, result);
  bool ok = json::sax_parse(counted, &sax);
  result.bytes = buffer.consumed();
  if (ok) {
    result.complete = true;
    return result;
  }
  if (sax.stopped()) {
    result.stopped = true;
    return result;
  }
  if (sax.structure_failed()) {
    result.error_offset = sax.structure_offset();
    result.error = "invalid trace at byte " + std::to_string(result.error_offset) + ": " +
                   sax.structure_error();
    return result;
  }
  // A syntax error at the very end of the input, inside the array, is a cut, not corruption.
  if (buffer.at_end() && result.array_begin > 0 && !sax.array_closed()) {
    result.truncated = true;
    result.error_offset = buffer.consumed();
    result.error = "truncated at byte " + std::to_string(result.error_offset) + " (after event #" +
                   (result.events == 0 ? std::string("none") : std::to_string(result.events - 1)) +
                   ", which ends at byte " + std::to_string(result.last_event_end) + ")";
    return result;
  }
  result.error_offset = sax.error_position() == 0 ? 0 : sax.error_position() - 1;
  std::string what = sax.error_what();
  // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line..".
  auto colon = what.find(": ");
  if (colon != std::string::npos) what = what.substr(colon + 2);
  result.error = "invalid JSON at byte " + std::to_string(result.error_offset) + ": " + what;
  return result;
}

}  // namespace

TraceReadResult read_trace(std::istream& in, const TraceEventCallback& on_event,
                           const TraceReadOptions& options) {
  CompleteSliceSplitter splitter(on_event);
  const TraceEventCallback split = [&](const TraceEvent& e) { return splitter.add(e); };
  FormatCompleter completer(split);
  TraceReadResult result = parse_trace(
      in, [&](const TraceEvent& e) { return completer.add(e); }, options);
  if (!result.stopped && (!completer.flush() || !splitter.flush())) result.stopped = true;
  return result;
}

// The one place a trace file is opened (summary, check and report all come here): the seam for
// reading compressed files.
TraceReadResult read_trace_file(const std::string& path, const TraceEventCallback& on_event,
                                const TraceReadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    TraceReadResult result;
    result.opened = false;
    result.error = "cannot open " + path + ": " + std::strerror(errno);
    return result;
  }
  if (!is_gzip_file(path)) return read_trace(in, on_event, options);
  // gzip: the same reading, of the text; offsets are the text's. A stream cut short reads as a
  // text cut short, and says why.
  InflatingBuffer inflating(in.rdbuf());
  std::istream text(&inflating);
  TraceReadResult result = read_trace(text, on_event, options);
  if (!inflating.problem().empty() && !result.stopped) {
    if (result.complete) {
      // The text is whole but the stream is not (no trailer): a repair writes a whole one.
      result.complete = false;
      result.truncated = true;
      result.error_offset = result.bytes;
      result.error = inflating.problem();
    } else {
      result.error += " (" + inflating.problem() + ")";
    }
  }
  return result;
}

namespace {

// "t.3.json.gz" -> {"t.json.gz", 3}; "t.json" -> {"t.json", 0}: rotated pieces share the key.
std::pair<std::string, uint64_t> rotation_key(const std::string& path) {
  for (const std::string ext : {".json.gz", ".json"}) {
    if (path.size() <= ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0) {
      continue;
    }
    const std::string stem = path.substr(0, path.size() - ext.size());
    const size_t dot = stem.rfind('.');
    if (dot == std::string::npos || dot + 1 == stem.size() || dot + 10 < stem.size()) break;
    if (!std::all_of(stem.begin() + static_cast<std::ptrdiff_t>(dot) + 1, stem.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      break;
    }
    return {stem.substr(0, dot) + ext, std::stoull(stem.substr(dot + 1))};
  }
  return {path, 0};
}

bool has_glob_characters(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

}  // namespace

std::vector<std::string> trace_file_set(const std::vector<std::string>& args, std::string* error) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    std::ifstream probe(arg);
    if (probe || !has_glob_characters(arg)) {
      paths.push_back(arg);  // a missing plain path is reported when it is read
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(arg.c_str(), 0, nullptr, &matches);
    if (rc != 0) {
      globfree(&matches);
      if (error) *error = "no file matches " + arg;
      return {};
    }
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
    globfree(&matches);
  }
  // Rotation order within each set; sets keep the order they were first named in.
  std::vector<std::string> sets;
  for (const std::string& p : paths) {
    const std::string key = rotation_key(p).first;
    if (std::find(sets.begin(), sets.end(), key) == sets.end()) sets.push_back(key);
  }
  std::stable_sort(paths.begin(), paths.end(), [&](const std::string& a, const std::string& b) {
    auto ka = rotation_key(a), kb = rotation_key(b);
    auto sa = std::find(sets.begin(), sets.end(), ka.first) - sets.begin();
    auto sb = std::find(sets.begin(), sets.end(), kb.first) - sets.begin();
    return sa != sb ? sa < sb : ka.second < kb.second;
  });
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

}  // namespace ranktime::timeline
