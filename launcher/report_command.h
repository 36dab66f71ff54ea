// `ranktime report FILE... -o report.html`: one offline HTML page about a run (lateness heat map,
// waits, phases per rank, top tensors, fusion, bandwidth), for people who were not at the terminal.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct ReportCommandOptions {
  std::vector<std::string> paths;  // files of one run, or glob patterns
  std::string output;
  size_t top_k = 10;
  bool progress = false;
  double progress_every_mb = 256;
};

CLI::App* add_report_command(CLI::App& app, ReportCommandOptions* options);
// Exit status: 0 written, 1 no complete event in the files, 2 unreadable file, unwritable output.
int run_report(const ReportCommandOptions& options);

}  // namespace ranktime::cli
