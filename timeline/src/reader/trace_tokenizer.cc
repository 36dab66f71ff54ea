// Streaming tokenizer: nlohmann's SAX parser over a counting stream buffer. Only the event being
// parsed is materialised, so memory does not grow with the file.
#include "trace_tokenizer.h"

#include <cstdint>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace

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

}  // namespace ranktime::timeline
