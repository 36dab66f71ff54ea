// `ranktime report`: analyses the files as `summary --by-step` does, then writes the page.
#include "report_command.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "attempts.h"
#include "report_html.h"
#include "summary_command.h"
#include "trace_input.h"

namespace ranktime::cli {

CLI::App* add_report_command(CLI::App& app, ReportCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write one self-contained HTML page about a run: lateness by rank and step, waits, phases "
      "per rank, top tensors, fusion and bandwidth (opens offline, in any browser)");
  add_trace_input_options(cmd,
                          "timeline files of one run, or a glob pattern; rotated pieces are read "
                          "in order",
                          &o->paths, &o->progress, &o->progress_every_mb);
  cmd->add_option("-o,--output", o->output, "the HTML file to write")->required();
  cmd->add_option("-k,--top", o->top_k, "tensors in the top-k tables")->check(top_k_validator());
  return cmd;
}

int run_report(const ReportCommandOptions& o) {
  TraceInputOptions input;
  input.command = "ranktime report";
  input.progress = o.progress;
  input.progress_every_bytes = static_cast<uint64_t>(o.progress_every_mb * 1024 * 1024);
  // Refuse an unwritable output before reading a big trace.
  {
    std::ofstream probe(o.output, std::ios::app);
    if (!probe) {
      std::cerr << "ranktime report: cannot write " << o.output << ": " << std::strerror(errno)
                << "\n";
      return 2;
    }
  }
  std::vector<std::string> paths = expand_trace_args(input, o.paths);
  if (paths.empty()) return 2;
  // An elastic job's attempts: a section of their own, then the last attempt's figures.
  std::vector<Attempt> attempts;
  if (std::string error; !read_elastic_set(&paths, &attempts, &error)) {
    std::cerr << "ranktime report: " << error << "\n";
    return 2;
  }
  timeline::SummaryOptions options;
  options.top_k = o.top_k;
  options.by_step = true;
  AnalysedRun run;
  if (int status = analyse_run(input, paths, std::move(options), &run); status != 0) {
    return status;
  }
  ReportInput page;
  page.paths = run.paths;
  page.summary = &run.summary;
  page.causes = &run.summary.causes;
  page.truncated = run.truncated;
  page.error = run.error;
  page.events = run.events;
  page.top_k = o.top_k;
  page.attempts = &attempts;
  const std::string html = report_html(page);
  std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
  out << html;
  out.close();
  if (!out) {
    std::cerr << "ranktime report: cannot write " << o.output << ": " << std::strerror(errno)
              << "\n";
    return 2;
  }
  std::cout << o.output << ": " << html.size() << " bytes, " << run.summary.steps.size()
            << " steps, " << std::max(0, run.summary.run.ranks) << " ranks, from " << run.events
            << " events\n";
  return 0;
}

}  // namespace ranktime::cli
