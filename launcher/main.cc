// The `ranktime` command: `run` (wraps mpirun), `summary`, `check` and `report` (read timelines),
// `top` (a running job's metrics endpoint).
// `merge` (torch.profiler traces onto a timeline).
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "check_command.h"
#include "merge_command.h"
#include "report_command.h"
#include "run_command.h"
#include "summary_command.h"
#include "top_command.h"

#ifndef RANKTIME_VERSION
#define RANKTIME_VERSION "unknown"
#endif

namespace {

// What CLI11 should see, and what follows `--` for `ranktime run` (the program and its
// arguments, which CLI11 never touches). Also accepts mpirun's spelling `-np N`.
struct SplitArgs {
  std::vector<std::string> cli;  // in reverse order, as CLI11's parse(vector) wants
  std::vector<std::string> command;
  bool has_separator = false;
};

SplitArgs split_args(int argc, char** argv) {
  SplitArgs split;
  std::vector<std::string> before;
  bool is_run = false;
  bool seen_subcommand = false;  // the subcommand is the first argument that is not a flag
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!seen_subcommand && !arg.empty() && arg[0] != '-') {
      seen_subcommand = true;
      is_run = arg == "run";
    }
    if (arg == "--" && is_run) {
      split.has_separator = true;
      for (int j = i + 1; j < argc; ++j) split.command.emplace_back(argv[j]);
      break;
    }
    if (is_run && arg == "-np") arg = "--np";
    if (is_run && arg.rfind("-np=", 0) == 0) arg = "-" + arg;
    before.push_back(arg);
  }
  split.cli.assign(before.rbegin(), before.rend());
  return split;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ranktime::cli;
  CLI::App app{"ranktime: run collective jobs and read their timelines", "ranktime"};
  app.set_version_flag("--version", RANKTIME_VERSION);
  app.require_subcommand(1);
  RunCommandOptions run_options;
  SummaryCommandOptions summary_options;
  CheckCommandOptions check_options;
  ReportCommandOptions report_options;
  TopCommandOptions top_options;
  MergeCommandOptions merge_options;
  CLI::App* run = add_run_command(app, &run_options);
  CLI::App* summary = add_summary_command(app, &summary_options);
  CLI::App* check = add_check_command(app, &check_options);
  CLI::App* report = add_report_command(app, &report_options);
  CLI::App* top = add_top_command(app, &top_options);
  CLI::App* merge = add_merge_command(app, &merge_options);

  SplitArgs split = split_args(argc, argv);
  try {
    app.parse(split.cli);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;  // every usage error is status 2, before anything starts
  }
  if (*run) {
    if (split.has_separator) {
      if (!run_options.command.empty()) {
        std::cerr << "ranktime run: error: " << run_options.command.front()
                  << " comes before --: put the program and its arguments after --\n";
        return 2;
      }
      run_options.command = split.command;
    }
    return run_run(run_options);
  }
  if (*summary) return run_summary(summary_options);
  if (*check) return run_check(check_options);
  if (*report) return run_report(report_options);
  if (*top) return run_top(top_options);
  if (*merge) return run_merge(merge_options);
  return 2;
}
