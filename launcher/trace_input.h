// The trace files a reading command was given, analysed as one run: globs expanded, rotated
// pieces in order, each file streamed in turn (twice when per-step figures, or the regions of a
// trace that has them, need the step marks), with progress lines and a warning for a file cut
// short.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::cli {

struct TraceInputOptions {
  std::string command;  // "ranktime summary": prefixes progress lines and messages
  bool progress = false;
  uint64_t progress_every_bytes = uint64_t{256} << 20;
};

struct AnalysedRun {
  std::vector<std::string> paths;
  std::vector<timeline::TraceReadResult> reads;  // per file, of the analysing pass
  timeline::Summary summary;
  uint64_t events = 0;  // complete events read, all files
  uint64_t bytes = 0;
  bool complete = true;    // every file complete
  bool truncated = false;  // some file cut short
  std::string error;       // the first file's error, if any ("PATH: truncated at ...")
};

// The options every reading command takes: the files (one run, or glob patterns), --progress and
// --progress-every-mb.
void add_trace_input_options(CLI::App* cmd, const std::string& files_help,
                             std::vector<std::string>* paths, bool* progress,
                             double* progress_every_mb);

// The files named by `args` (trace_file_set); an empty list and a message on stderr when a
// pattern matches nothing.
std::vector<std::string> expand_trace_args(const TraceInputOptions& o,
                                           const std::vector<std::string>& args);

// Reads `paths` as one run into run->summary. Returns 0, 1 (no complete event in any file) or
// 2 (a file cannot be opened); messages go to stderr.
int analyse_run(const TraceInputOptions& o, const std::vector<std::string>& paths,
                timeline::SummaryOptions options, AnalysedRun* run);

}  // namespace ranktime::cli
