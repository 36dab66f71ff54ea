// `ranktime check FILE... [--repair]`: validates timelines against docs/timeline-format.md and
// completes files cut short.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct CheckCommandOptions {
  std::vector<std::string> paths;  // each checked on its own (rotated pieces are standalone)
  bool repair = false;
  std::string output;  // repair into this file instead of in place
  size_t max_errors = 20;
  bool progress = false;
  double progress_every_mb = 256;
};

CLI::App* add_check_command(CLI::App& app, CheckCommandOptions* options);
// Exit status: 0 every file valid (after repair, if asked), 1 violations, 2 an unreadable file or
// a bad option.
int run_check(const CheckCommandOptions& options);

}  // namespace ranktime::cli
