// The trace reader: the tokenizer's events, completed (compact_format.h) and with complete
// slices split into B/E (slice_splitter.h), from a plain or gzip file.
#include "ranktime/timeline/trace_reader.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <istream>

#include "compact_format.h"
#include "gzip_input.h"
#include "slice_splitter.h"
#include "trace_tokenizer.h"

namespace ranktime::timeline {

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

}  // namespace ranktime::timeline
