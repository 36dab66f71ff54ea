// The reader's tokenizer: nlohmann's SAX parser over a counting stream buffer, one TraceEvent per
// element of the top-level array, handed to a callback as the file has it (no format rules).
#pragma once

#include <istream>

#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline {

// Reads the array, calling on_event for each complete event; says how reading ended.
TraceReadResult parse_trace(std::istream& in, const TraceEventCallback& on_event,
                            const TraceReadOptions& options);

}  // namespace ranktime::timeline
