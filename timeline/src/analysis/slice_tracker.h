// Pairs each thread's B and E into slices, once for every analysis (the reader hands complete
// slices on as B/E pairs), and gathers each negotiation's ticks into its open slice. One stack
// per (pid, tid): memory grows with threads and nesting depth, not with events.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "analysis/analysis.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::timeline::analysis {

class SliceTracker {
 public:
  // A B: opens a slice on its thread (an operation slice's args are kept).
  void open(const TraceEvent& e);
  // An E: closes the innermost open slice of its name on its thread, and any still open inside
  // it (a mismatched E is the checker's business). Returns that slice, or nullptr when none
  // matches; *parent is then the slice it was in (nullptr at the top level). Both stay valid
  // until the next call.
  Slice* close(const TraceEvent& e, Slice** parent);
  // A tick (a zero-length X with a rank on a tensor's negotiate thread): added to the slice
  // open on its thread, if any.
  void tick(const TraceEvent& e);

 private:
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> stacks_;
  Slice closed_;
};

}  // namespace ranktime::timeline::analysis
