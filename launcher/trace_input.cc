// Multi-file, two-pass reading for `summary` and `report`.
#include "trace_input.h"

#include <unistd.h>

#include <iostream>

#include "progress.h"

namespace ranktime::cli {

void add_trace_input_options(CLI::App* cmd, const std::string& files_help,
                             std::vector<std::string>* paths, bool* progress,
                             double* progress_every_mb) {
  cmd->add_option("files", *paths, files_help)->required();
  cmd->add_flag("--progress", *progress,
                "report progress on stderr (on by default when stderr is a terminal)");
  cmd->add_option("--progress-every-mb", *progress_every_mb, "MiB between progress reports")
      ->check(CLI::PositiveNumber);
}

std::vector<std::string> expand_trace_args(const TraceInputOptions& o,
                                           const std::vector<std::string>& args) {
  std::string error;
  std::vector<std::string> paths = timeline::trace_file_set(args, &error);
  if (paths.empty()) std::cerr << o.command << ": " << error << "\n";
  return paths;
}

int analyse_run(const TraceInputOptions& o, const std::vector<std::string>& paths,
                timeline::SummaryOptions options, AnalysedRun* run) {
  const bool show = o.progress || isatty(STDERR_FILENO) != 0;
  auto read_all =
      [&](const std::string& pass,
          const timeline::TraceEventCallback& on_event) -> std::vector<timeline::TraceReadResult> {
    std::vector<timeline::TraceReadResult> reads;
    for (const std::string& path : paths) {
      ProgressReporter progress(o.command + pass, path, show, o.progress_every_bytes);
      reads.push_back(timeline::read_trace_file(path, on_event, progress.read_options()));
      progress.done();
      if (!reads.back().opened) {
        std::cerr << o.command << ": " << reads.back().error << "\n";
        return {};
      }
    }
    return reads;
  };

  const bool two_passes = options.by_step;
  if (two_passes) {
    timeline::StepMarkCollector marks;
    auto reads = read_all(": pass 1 of 2 (step marks)", [&](const timeline::TraceEvent& e) {
      marks.add(e);
      return true;
    });
    if (reads.empty()) return 2;
    options.step_marks = marks.finish();
  }
  timeline::StepMarkCollector marks;  // in one pass: for the regions' steps, if there are any
  timeline::TraceSummarizer summarizer(options);
  run->paths = paths;
  run->reads = read_all(two_passes ? ": pass 2 of 2" : "", [&](const timeline::TraceEvent& e) {
    summarizer.add(e);
    if (!two_passes) marks.add(e);
    return true;
  });
  if (run->reads.empty()) return 2;
  for (size_t i = 0; i < paths.size(); ++i) {
    const timeline::TraceReadResult& read = run->reads[i];
    run->events += read.events;
    run->bytes += read.bytes;
    if (read.complete) continue;
    run->complete = false;
    run->truncated = run->truncated || read.truncated;
    if (run->error.empty()) run->error = paths[i] + ": " + read.error;
    std::cerr << o.command << ": warning: " << paths[i] << ": " << read.error << "; using the "
              << read.events << " complete events before it\n";
  }
  run->summary = summarizer.finish();
  if (!two_passes && run->summary.causes.has_regions) {
    // A region's step comes from its rank's step marks, which follow it in the file: once more,
    // with the marks, for the causes.
    options.step_marks = marks.finish();
    timeline::TraceSummarizer again(options);
    if (read_all(": pass 2 of 2 (regions)", [&](const timeline::TraceEvent& e) {
          again.add(e);
          return true;
        }).empty()) {
      return 2;
    }
    run->summary.causes = again.finish().causes;
  }
  return run->events == 0 && !run->complete ? 1 : 0;
}

}  // namespace ranktime::cli
