// torch.profiler traces read through nlohmann's SAX interface: only the event being read is held
// as a DOM, so a multi-GB profile is read in the memory of its largest event.
#include "ranktime/timeline/profile_trace.h"

#include <charconv>
#include <cmath>
#include <istream>
#include <unordered_map>
#include <utility>

namespace ranktime::timeline {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxEventDepth = 64;
constexpr uint64_t kMaxEventBytes = uint64_t{16} << 20;
constexpr size_t kMaxThreads = 100'000;

// Builds each event of the list as a small DOM and hands it on; skips every other value.
class EventSax {
 public:
  explicit EventSax(const ProfileEventCallback& on_event) : on_event_(on_event) {}

  bool null() { return value(json(nullptr), 4); }
  bool boolean(bool b) { return value(json(b), 5); }
  bool number_integer(json::number_integer_t v) { return value(json(v), 20); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v), 20); }
  bool number_float(json::number_float_t v, const std::string& text) {
    return value(json(v), text.size());
  }
  bool string(std::string& s) {
    const size_t bytes = s.size();
    return value(json(std::move(s)), bytes);
  }
  bool binary(json::binary_t&) { return fail("binary values are not JSON text"); }

  bool key(std::string& k) {
    if (in_event()) {
      if (!charge(k.size())) return false;
      key_ = std::move(k);
    } else if (depth_ == 1 && top_ == Top::kObject) {
      in_events_key_ = k == "traceEvents";
    }
    return true;
  }

  bool start_object(size_t) {
    if (depth_ == 0) {
      top_ = Top::kObject;
      result.kineto = true;
    } else if (at_event_level()) {
      if (!start_event()) return false;
      event_ = json::object();
      stack_.push_back(&event_);
      ++depth_;
      return true;
    } else if (in_event()) {
      if (!open(json::object())) return false;
    } else if (depth_ == 1 && top_ == Top::kArray) {
      return fail("element " + std::to_string(index_) + " is not an event object");
    }
    ++depth_;
    return true;
  }
  bool end_object() { return close(); }

  bool start_array(size_t) {
    if (depth_ == 0) {
      top_ = Top::kArray;
      events_depth_ = 1;
      list_found_ = true;
    } else if (in_event()) {
      if (!open(json::array())) return false;
    } else if (depth_ == 1 && top_ == Top::kObject && in_events_key_) {
      events_depth_ = 2;
      list_found_ = true;
    } else if (at_event_level()) {
      return fail("element " + std::to_string(index_) + " is not an event object");
    }
    ++depth_;
    return true;
  }
  bool end_array() {
    if (depth_ == events_depth_ && stack_.empty()) events_depth_ = 0;  // the list is over
    return close();
  }

  bool parse_error(size_t position, const std::string&, const json::exception& e) {
    std::string what = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line ...".
    const size_t colon = what.find("error: ");
    const bool cut = what.find("unexpected end of input") != std::string::npos;
    result.error = (cut ? "cut short (truncated) at byte " : "invalid JSON at byte ") +
                   std::to_string(position) +
                   (colon == std::string::npos ? "" : ": " + what.substr(colon + 7));
    return false;
  }

  bool finished() const { return top_ != Top::kNone && list_found_; }
  std::string missing() const {
    if (top_ == Top::kObject) return "not a profiler trace: a JSON object without \"traceEvents\"";
    return "not a profiler trace: neither a list of events nor an object with \"traceEvents\"";
  }

  ProfileReadResult result;
  bool stopped = false;

 private:
  enum class Top { kNone, kArray, kObject };

  bool in_event() const { return !stack_.empty(); }
  bool at_event_level() const { return events_depth_ != 0 && depth_ == events_depth_; }

  bool fail(std::string what) {
    result.error = std::move(what);
    return false;
  }
  bool charge(uint64_t bytes) {
    event_bytes_ += bytes + 2;
    if (event_bytes_ > kMaxEventBytes) {
      return fail("event " + std::to_string(index_) + " is larger than 16 MiB");
    }
    return true;
  }
  bool start_event() {
    event_bytes_ = 0;
    key_.clear();
    return true;
  }
  // Adds `v` to the container being built (under the last key for an object).
  json* add(json v) {
    json& parent = *stack_.back();
    if (parent.is_object()) return &(parent[key_] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool open(json container) {
    if (stack_.size() >= kMaxEventDepth) {
      return fail("event " + std::to_string(index_) + " is nested deeper than 64");
    }
    if (!charge(0)) return false;
    stack_.push_back(add(std::move(container)));
    return true;
  }
  bool value(json v, size_t bytes) {
    if (in_event()) {
      if (!charge(bytes)) return false;
      add(std::move(v));
    } else if (at_event_level()) {
      return fail("element " + std::to_string(index_) + " is not an event object");
    } else if (depth_ == 0) {
      top_ = Top::kArray;  // a bare value: not a list
      list_found_ = false;
    }
    return true;
  }
  bool close() {
    --depth_;
    if (!in_event()) return true;
    stack_.pop_back();
    if (!stack_.empty()) return true;
    const uint64_t index = index_++;
    ++result.events;
    if (!on_event_(event_, index)) {
      stopped = true;
      return false;
    }
    return true;
  }

  const ProfileEventCallback& on_event_;
  Top top_ = Top::kNone;
  size_t depth_ = 0;
  size_t events_depth_ = 0;  // depth of the event list's elements; 0 outside it
  bool in_events_key_ = false;
  bool list_found_ = false;
  json event_;
  std::vector<json*> stack_;  // containers of the event being built
  std::string key_;
  uint64_t index_ = 0;
  uint64_t event_bytes_ = 0;
};

// A whole decimal number (optionally negative) in `s`, nothing else.
bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// The text before the next ".", moving `s` past it.
std::string_view take_field(std::string_view* s) {
  const size_t dot = s->find('.');
  std::string_view field = s->substr(0, dot);
  s->remove_prefix(dot == std::string_view::npos ? s->size() : dot + 1);
  return field;
}

double number_or(const json& event, const char* field, double fallback) {
  auto it = event.find(field);
  return it != event.end() && it->is_number() ? it->get<double>() : fallback;
}

}  // namespace

ProfileReadResult read_profile_events(std::istream& in, const ProfileEventCallback& on_event) {
  EventSax sax(on_event);
  const bool parsed = json::sax_parse(in, &sax, json::input_format_t::json, /*strict=*/true);
  ProfileReadResult result = std::move(sax.result);
  if (sax.stopped) {
    result.ok = true;
  } else if (!parsed) {
    if (result.error.empty()) result.error = "invalid JSON";
  } else if (!sax.finished()) {
    result.error = sax.missing();
  } else {
    result.ok = true;
  }
  return result;
}

bool parse_anchor_marker(std::string_view rest, int64_t* n, int64_t* clock_ns,
                         ProfileIdentity* who) {
  int64_t pid = -1, rank = -1;
  if (!parse_int(take_field(&rest), n) || *n < 0) return false;
  if (take_field(&rest) != "ns" || !parse_int(take_field(&rest), clock_ns)) return false;
  if (take_field(&rest) != "rank" || !parse_int(take_field(&rest), &rank) || rank < 0) {
    return false;
  }
  if (take_field(&rest) != "pid" || !parse_int(take_field(&rest), &pid)) return false;
  if (take_field(&rest) != "host") return false;
  who->rank = rank;
  who->pid = pid;
  who->host = std::string(rest);  // the rest, dots included
  return true;
}

std::string profile_thread_key(const json& event) {
  auto dumped = [&](const char* field) {
    auto it = event.find(field);
    return it == event.end() ? std::string("null")
                             : it->dump(-1, ' ', false, json::error_handler_t::replace);
  };
  return dumped("pid") + '\x1f' + dumped("tid");
}

ProfileScan scan_profile(std::istream& in) {
  ProfileScan scan;
  std::unordered_map<std::string, size_t> thread_index;
  bool has_identity = false;
  auto on_event = [&](const json& event, uint64_t index) {
    auto name_it = event.find("name");
    const std::string key = profile_thread_key(event);
    auto [it, inserted] = thread_index.emplace(key, scan.threads.size());
    if (inserted) {
      if (scan.threads.size() >= kMaxThreads) {
        scan.error = "more than 100,000 threads";
        return false;
      }
      const size_t split = key.find('\x1f');
      scan.threads.push_back({key.substr(0, split), key.substr(split + 1), ""});
    }
    if (name_it == event.end() || !name_it->is_string()) return true;
    const std::string& name = name_it->get_ref<const std::string&>();
    auto ph = event.find("ph");
    if (name == "thread_name" && ph != event.end() && *ph == "M") {
      auto args = event.find("args");
      if (args != event.end() && args->is_object() && args->contains("name") &&
          (*args)["name"].is_string()) {
        scan.threads[it->second].name = (*args)["name"].get<std::string>();
      }
      return true;
    }
    if (name.compare(0, kAnchorPrefix.size(), kAnchorPrefix) != 0) return true;
    const std::string_view rest = std::string_view(name).substr(kAnchorPrefix.size());
    int64_t n = 0;
    const auto where = " (event " + std::to_string(index) + ")";
    if (parse_int(rest, &n) && n >= 0) {  // the slice
      ProfileAnchor& a = scan.anchors[n];
      const double ts = number_or(event, "ts", NAN), dur = number_or(event, "dur", 0);
      if (a.has_slice) {
        scan.error = "anchor " + std::to_string(n) + " recorded twice" + where;
        return false;
      }
      if (!std::isfinite(ts) || !std::isfinite(dur) || dur < 0) {
        scan.error = "anchor " + std::to_string(n) + " has no usable ts/dur" + where;
        return false;
      }
      a.n = n;
      a.has_slice = true;
      a.profiler_us = ts + dur / 2;
      a.slack_us = dur / 2;
      return true;
    }
    int64_t clock_ns = 0;
    ProfileIdentity who;
    if (!parse_anchor_marker(rest, &n, &clock_ns, &who)) {
      scan.error = "malformed anchor name " +
                   json(name).dump(-1, ' ', true, json::error_handler_t::replace) + where;
      return false;
    }
    if (!has_identity) {
      scan.identity = who;
      has_identity = true;
    } else if (who.rank != scan.identity.rank || who.pid != scan.identity.pid ||
               who.host != scan.identity.host) {
      scan.error = "anchors of two processes (rank " + std::to_string(scan.identity.rank) +
                   " pid " + std::to_string(scan.identity.pid) + " and rank " +
                   std::to_string(who.rank) + " pid " + std::to_string(who.pid) + ")" + where;
      return false;
    }
    ProfileAnchor& a = scan.anchors[n];
    if (a.has_marker) {
      scan.error = "anchor " + std::to_string(n) + " recorded twice" + where;
      return false;
    }
    a.n = n;
    a.has_marker = true;
    a.clock_ns = clock_ns;
    return true;
  };
  ProfileReadResult read = read_profile_events(in, on_event);
  scan.events = read.events;
  scan.kineto = read.kineto;
  if (!scan.error.empty()) return scan;
  if (!read.ok) {
    scan.error = read.error;
    return scan;
  }
  // Keep complete anchors only (a profiler schedule may cut one pair in half).
  for (auto it = scan.anchors.begin(); it != scan.anchors.end();) {
    it = it->second.has_slice && it->second.has_marker ? std::next(it) : scan.anchors.erase(it);
  }
  if (scan.anchors.empty()) {
    scan.error =
        "no ranktime anchors (ranktime.anchor.N): record it under "
        "ranktime.torch.profile";
  }
  return scan;
}

}  // namespace ranktime::timeline
