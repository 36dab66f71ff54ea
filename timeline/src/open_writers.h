// The registry of open TraceWriters that the SIGINT/SIGTERM flush closes (signal_flush.cc).
// Writers register when they open and unregister after they close.
#pragma once

#include "ranktime/timeline/trace_writer.h"

namespace ranktime::timeline::detail {

void register_open_writer(TraceWriter::Impl* writer);
void unregister_open_writer(TraceWriter::Impl* writer);

// Drains and closes `writer` (idempotent, thread-safe); defined in trace_writer.cc.
void close_writer(TraceWriter::Impl* writer);

}  // namespace ranktime::timeline::detail
