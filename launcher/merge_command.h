// `ranktime merge TIMELINE PROFILE... -o OUT`: every rank's torch.profiler trace (recorded under
// ranktime.torch.profile) put onto the timeline, on rank 0's clock (docs/cli.md).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct MergeCommandOptions {
  std::string timeline;
  std::vector<std::string> profiles;  // PATH, or R=PATH
  std::string output;
  std::string steps;  // A:B, "" for all
};

CLI::App* add_merge_command(CLI::App& app, MergeCommandOptions* options);
// Exit status: 0 merged, 1 a bad input (named, nothing written), 2 a bad option.
int run_merge(const MergeCommandOptions& options);

}  // namespace ranktime::cli
