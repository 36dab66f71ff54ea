// libFuzzer target: the trace reader behind `ranktime summary` and `ranktime check` must turn
// any input (truncated, corrupt, hostile) into events and violations, never a crash.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranktime::timeline;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  TraceChecker checker;
  TraceSummarizer summarizer;
  TraceReadResult read = read_trace(in, [&](const TraceEvent& e) {
    checker.add(e);
    summarizer.add(e);
    return true;
  });
  checker.finish(read);
  summarizer.finish();
  return 0;
}
