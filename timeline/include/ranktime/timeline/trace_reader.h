// Streaming reader for ranktime timelines (docs/timeline-format.md): hands one event at a time to
// a callback, so a trace of any size is read in bounded memory. A file cut short is read up to
// its last complete event and reported as truncated.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ranktime::timeline {

// One element of the top-level array. The reader reuses the object between callbacks: copy what
// you keep.
struct TraceEvent {
  uint64_t index = 0;         // position in the top-level array, from 0
  uint64_t begin_offset = 0;  // byte offset of its '{'
  uint64_t end_offset = 0;    // byte offset just after its '}'
  std::string name;
  std::string ph;
  std::string scope;  // "s" of instants
  std::string id;     // flow events ("s", "t", "f"): the arrow's id, integer ids as decimal text
  std::string bp;     // flow ends: "e" binds to the enclosing slice
  int64_t pid = 0;
  int64_t tid = 0;
  double ts = 0;
  double dur = 0;
  bool has_name = false;
  bool has_ph = false;
  bool has_pid = false;
  bool has_tid = false;
  bool has_ts = false;
  bool has_dur = false;
  bool has_id = false;
  nlohmann::json args;  // null when absent
  // The first top-level field whose JSON type is wrong ("pid is not an integer"); empty if none.
  std::string malformed;

  // The phase as one character ('B', 'E', 'X', ...), or '\0' when `ph` is not one character.
  char phase() const { return ph.size() == 1 ? ph[0] : '\0'; }
};

// Return false to stop reading (the result then has stopped = true).
using TraceEventCallback = std::function<bool(const TraceEvent&)>;

struct TraceReadOptions {
  // Called about every `progress_every_bytes` bytes with the bytes and events read so far.
  std::function<void(uint64_t bytes, uint64_t events)> on_progress;
  uint64_t progress_every_bytes = uint64_t{256} << 20;
};

struct TraceReadResult {
  bool opened = true;      // false when the file could not be opened (error says why)
  bool complete = false;   // the array was closed and only whitespace followed
  bool truncated = false;  // the input ended inside the array (crash, copy mid-write)
  bool stopped = false;    // the callback asked to stop
  uint64_t events = 0;     // complete events delivered
  uint64_t bytes = 0;      // bytes of input consumed
  // Byte offset just after the last complete event; 0 when there was none.
  uint64_t last_event_end = 0;
  // Byte offset just after the opening '['; 0 when the input has none.
  uint64_t array_begin = 0;
  // Where reading failed (the end of the input for a truncated file).
  uint64_t error_offset = 0;
  // Empty when complete; otherwise "truncated at byte N ..." or "invalid JSON at byte N: ...".
  std::string error;
};

// Complete slices (an 'X' with a "dur") on a tensor's threads are handed on as a 'B' (at the
// event's place in the file) and an 'E' (once the thread's next event begins at or after its
// end, or at the end of the input), both with the event's args, so readers handle one form
// whether a writer writes pairs or complete slices. Ticks and pid 0's complete slices (STEP) are
// handed on as they are.
TraceReadResult read_trace(std::istream& in, const TraceEventCallback& on_event,
                           const TraceReadOptions& options = {});
// A file, plain or gzip (read as its text, offsets the text's).
TraceReadResult read_trace_file(const std::string& path, const TraceEventCallback& on_event,
                                const TraceReadOptions& options = {});

// Whether the file at `path` starts with gzip's magic bytes.
bool is_gzip_file(const std::string& path);

// The files of one run, in the order to read them: a glob pattern ("t*.json", quoted so the shell
// leaves it) expands to the files it matches, and the pieces of a rotated trace (NAME.json,
// NAME.1.json, NAME.2.json, ...; also .json.gz) are put in rotation order, NAME.json first, not
// in the shell's alphabetical order (t.10.json before t.2.json). Sets error and returns {} when a
// pattern matches nothing.
std::vector<std::string> trace_file_set(const std::vector<std::string>& args, std::string* error);

}  // namespace ranktime::timeline
