// `ranktime check`: one streaming pass through TraceChecker; --repair plans from that pass,
// rewrites the tail, and checks the result again.
#include "check_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "progress.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"
#include "ranktime/timeline/trace_repair.h"
#include "trace_input.h"

namespace ranktime::cli {
namespace {

struct CheckPass {
  timeline::TraceReadResult read;
  timeline::TraceChecker checker;
};

CheckPass check_file(const CheckCommandOptions& o, const std::string& path) {
  CheckPass pass;
  ProgressReporter progress("ranktime check", path, o.progress || isatty(2),
                            static_cast<uint64_t>(o.progress_every_mb * 1024 * 1024));
  pass.read = timeline::read_trace_file(
      path,
      [&](const timeline::TraceEvent& e) {
        pass.checker.add(e);
        return true;
      },
      progress.read_options());
  progress.done();
  if (pass.read.opened) pass.checker.finish(pass.read);
  return pass;
}

// Prints the violations and a verdict; returns the exit status.
int report(const CheckCommandOptions& o, const std::string& path, const CheckPass& pass) {
  const auto& checker = pass.checker;
  size_t shown = 0;
  for (const auto& v : checker.violations()) {
    if (shown == o.max_errors) break;
    ++shown;
    std::cout << path << ": ";
    if (v.event_index != timeline::kNoEvent) {
      std::cout << "event #" << v.event_index << " (byte " << v.offset << "): ";
    }
    std::cout << v.message << "\n";
  }
  if (checker.violation_count() > shown) {
    std::cout << path << ": ... and " << (checker.violation_count() - shown)
              << " more violations (--max-errors N shows more)\n";
  }
  std::string facts = std::to_string(pass.read.events) + " events, " +
                      (checker.ranks() > 0 ? std::to_string(checker.ranks()) : "unknown") +
                      " ranks, " + std::to_string(checker.negotiations()) + " negotiations";
  if (checker.flows() > 0) facts += ", " + std::to_string(checker.flows()) + " flow arrows";
  if (!checker.lane_choice().empty()) {
    // The other ranks' lanes are missing by choice, not lost.
    std::string ranks;
    for (int r : checker.lane_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    facts += ", lanes of rank" + std::string(checker.lane_ranks().size() == 1 ? " " : "s ") +
             ranks + " (chosen by " + checker.lane_choice() + ")";
  }
  if (checker.ok()) {
    std::cout << path << ": OK: " << facts
              << (checker.has_run_end()
                      ? ", closed cleanly"
                      : ", no ranktime_run_end (the run did not close the file; still valid)")
              << "\n";
    return 0;
  }
  std::cout << path << ": " << checker.violation_count() << " violation"
            << (checker.violation_count() == 1 ? "" : "s") << " (" << facts << ")\n";
  return 1;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::exists(b, ec)) return std::filesystem::equivalent(a, b, ec);
  return a == b;
}

}  // namespace

CLI::App* add_check_command(CLI::App& app, CheckCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Validate a timeline against docs/timeline-format.md; --repair completes a file "
      "cut short");
  add_trace_input_options(cmd, "timeline files, or a glob pattern; each is checked on its own",
                          &o->paths, &o->progress, &o->progress_every_mb);
  cmd->add_flag("--repair", o->repair,
                "complete a file cut short: keep every complete event, close open slices, close "
                "the array (in place, or into -o)");
  cmd->add_option("-o,--output", o->output, "with --repair: write the repaired file here");
  cmd->add_option("--max-errors", o->max_errors, "violations to print (all are counted)");
  return cmd;
}

namespace {

// Checks (and repairs, if asked) one file; returns its exit status.
int check_one(const CheckCommandOptions& o, const std::string& path) {
  CheckPass pass = check_file(o, path);
  if (!pass.read.opened) {
    std::cerr << "ranktime check: " << pass.read.error << "\n";
    return 2;
  }
  if (!o.repair) return report(o, path, pass);

  struct stat st {};
  uint64_t size = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  // A gzip trace is repaired as its text (the reader's offsets are the text's).
  if (timeline::is_gzip_file(path)) size = pass.read.bytes;
  const std::string out = o.output.empty() ? path : o.output;
  const bool in_place = same_file(path, out);
  timeline::RepairPlan plan =
      timeline::plan_repair(pass.read, pass.checker.open_slices(), pass.checker.max_ts(), size);
  if (!plan.needed) {
    std::cout << path << ": nothing to repair (complete JSON, every slice closed)\n";
    if (in_place) return report(o, path, pass);
  }
  std::string error;
  if (!timeline::apply_repair(path, in_place ? path : out, plan, &error)) {
    std::cerr << "ranktime check: " << error << "\n";
    return 2;
  }
  if (plan.needed) {
    std::cout << path << ": repaired" << (in_place ? "" : " into " + out) << ": kept "
              << plan.events_kept << " complete events, closed " << plan.closed_slices
              << " open slice" << (plan.closed_slices == 1 ? "" : "s") << ", dropped "
              << plan.bytes_dropped << " bytes after the last complete event\n";
  }
  return report(o, out, check_file(o, out));
}

}  // namespace

int run_check(const CheckCommandOptions& o) {
  if (!o.output.empty() && !o.repair) {
    std::cerr << "ranktime check: -o/--output is only used with --repair\n";
    return 2;
  }
  std::string error;
  const std::vector<std::string> paths = timeline::trace_file_set(o.paths, &error);
  if (paths.empty()) {
    std::cerr << "ranktime check: " << error << "\n";
    return 2;
  }
  if (!o.output.empty() && paths.size() > 1) {
    std::cerr << "ranktime check: -o/--output takes one file to repair, not " << paths.size()
              << "\n";
    return 2;
  }
  int status = 0;
  for (const std::string& path : paths) status = std::max(status, check_one(o, path));
  return status;
}

}  // namespace ranktime::cli
