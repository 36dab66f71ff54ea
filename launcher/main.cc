// The `ranktime` command: `run` (wraps mpirun), `summary`, `check` and `report` (read timelines),
// `top` (a running job's metrics endpoint).
// `merge` (torch.profiler traces onto a timeline).
#include <CLI/CLI.hpp>

#include <algorithm>
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

// What CLI11 should see, and the program and its arguments for `ranktime run`, which CLI11 never
// touches: what follows `--`, or, as horovodrun reads its line, everything from the first
// argument that is neither a flag nor a flag's value. Also accepts the single-dash spellings of
// mpirun and horovodrun (`-np N`, `-hostfile F`).
struct SplitArgs {
  std::vector<std::string> cli;  // in reverse order, as CLI11's parse(vector) wants
  std::vector<std::string> command;
  bool has_separator = false;
  std::string program_before_separator;  // a program given before a later `--`
};

// How many arguments `flag` of `run` takes after it (0 for a switch or `--flag=value`).
size_t values_taken(const CLI::App& run, const std::string& flag) {
  if (flag.find('=') != std::string::npos) return 0;
  const CLI::Option* option = run.get_option_no_throw(flag);
  return option == nullptr ? 0 : static_cast<size_t>(std::max(0, option->get_items_expected_min()));
}

SplitArgs split_args(int argc, char** argv, const CLI::App& run) {
  SplitArgs split;
  std::vector<std::string> before;
  bool is_run = false;
  bool seen_subcommand = false;  // the subcommand is the first argument that is not a flag
  size_t values_due = 0;         // of the last flag
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!seen_subcommand && !arg.empty() && arg[0] != '-') {
      seen_subcommand = true;
      is_run = arg == "run";
      before.push_back(arg);
      continue;
    }
    if (arg == "--" && is_run) {
      split.has_separator = true;
      for (int j = i + 1; j < argc; ++j) split.command.emplace_back(argv[j]);
      break;
    }
    if (!is_run) {
      before.push_back(arg);
      continue;
    }
    if (values_due > 0) {
      --values_due;
      before.push_back(arg);
      continue;
    }
    if (arg.empty() || arg[0] != '-') {  // the program: the rest is its own
      for (int j = i; j < argc; ++j) {
        if (std::string(argv[j]) == "--") split.program_before_separator = arg;
      }
      if (!split.program_before_separator.empty()) break;
      for (int j = i; j < argc; ++j) split.command.emplace_back(argv[j]);
      split.has_separator = true;
      break;
    }
    for (const char* single : {"-np", "-hostfile"}) {
      const std::string dash = single;
      if (arg == dash || arg.rfind(dash + "=", 0) == 0) arg = "-" + arg;
    }
    values_due = values_taken(run, arg);
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

  SplitArgs split = split_args(argc, argv, *run);
  try {
    app.parse(split.cli);
  } catch (const CLI::ExtrasError& e) {
    // Never passed on silently: a flag ranktime does not know is a mistake, not the program's.
    std::cerr
        << "ranktime: error: " << e.what() << "\n  (`ranktime " << (*run ? "run" : "COMMAND")
        << " --help` lists the flags; a program's own flags go after the program or after --)\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;  // every usage error is status 2, before anything starts
  }
  if (*run) {
    if (!split.program_before_separator.empty()) {
      std::cerr << "ranktime run: error: " << split.program_before_separator
                << " comes before --: put the program and its arguments after --\n";
      return 2;
    }
    if (split.has_separator) run_options.command = split.command;
    return run_run(run_options);
  }
  if (*summary) return run_summary(summary_options);
  if (*check) return run_check(check_options);
  if (*report) return run_report(report_options);
  if (*top) return run_top(top_options);
  if (*merge) return run_merge(merge_options);
  return 2;
}
