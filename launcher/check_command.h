// `ranktime check FILE [--repair]`: validates a timeline against docs/timeline-format.md and
// completes a file cut short.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct CheckCommandOptions {
  std::string path;
  bool repair = false;
  std::string output;  // repair into this file instead of in place
  size_t max_errors = 20;
  bool progress = false;
  double progress_every_mb = 256;
};

CLI::App* add_check_command(CLI::App& app, CheckCommandOptions* options);
// Exit status: 0 valid (after repair, if asked), 1 violations, 2 unreadable file or bad option.
int run_check(const CheckCommandOptions& options);

}  // namespace ranktime::cli
