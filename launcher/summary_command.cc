// `ranktime summary`: streams the trace files through TraceSummarizer and prints its tables.
#include "summary_command.h"

#include <cctype>
#include <cmath>
#include <iostream>

#include "attempts.h"
#include "cause_tables.h"
#include "ranktime/timeline/trace_analysis.h"
#include "report_table.h"
#include "summary_tables.h"
#include "trace_input.h"

namespace ranktime::cli {
namespace {

using timeline::Summary;

int usage_error(const std::string& message) {
  std::cerr << "ranktime summary: " << message << "\n";
  return 2;
}

}  // namespace

std::optional<double> parse_time_us(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(used);
  if (!std::isfinite(value)) return std::nullopt;
  if (unit.empty() || unit == "us") return value;
  if (unit == "ms") return value * 1e3;
  if (unit == "s") return value * 1e6;
  return std::nullopt;
}

std::optional<std::vector<int>> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    try {
      size_t used = 0;
      if (dash == std::string::npos) {
        int r = std::stoi(item, &used);
        if (used != item.size() || r < 0) return std::nullopt;
        ranks.push_back(r);
      } else {
        std::string a = item.substr(0, dash), b = item.substr(dash + 1);
        size_t ua = 0, ub = 0;
        int lo = std::stoi(a, &ua), hi = std::stoi(b, &ub);
        if (ua != a.size() || ub != b.size() || lo < 0 || hi < lo || hi - lo > 1000000) {
          return std::nullopt;
        }
        for (int r = lo; r <= hi; ++r) ranks.push_back(r);
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (ranks.empty()) return std::nullopt;
  return ranks;
}

CLI::Validator top_k_validator() {
  return CLI::Validator(
      [](const std::string& value) -> std::string {
        const bool digits =
            !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        return digits && value.find_first_not_of('0') != std::string::npos
                   ? std::string()
                   : "expected a number of tensors, 1 or more, not " + value;
      },
      "N>=1");
}

CLI::App* add_summary_command(CLI::App& app, SummaryCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "summary",
      "Summarise a timeline: lateness per rank, where the time went, top tensors, "
      "fusion and bandwidth");
  add_trace_input_options(cmd,
                          "timeline files of one run (complete, or cut short by a crash), or a "
                          "glob pattern; rotated pieces (t.json, t.1.json, ...) are read in order",
                          &o->paths, &o->progress, &o->progress_every_mb);
  cmd->add_option("--format", o->format, "text (aligned tables), csv or json")
      ->check(CLI::IsMember({"text", "csv", "json"}));
  cmd->add_option("-k,--top", o->top_k, "tensors in the top-k tables")->check(top_k_validator());
  cmd->add_option("--from", o->from,
                  "analyse what begins at or after this trace time: 1500 (us), 1500us, 1.5ms, 2s");
  cmd->add_option("--to", o->to, "analyse what begins at or before this trace time");
  cmd->add_option("--ranks", o->ranks,
                  "analyse these ranks only, e.g. 0,2-3 (lateness is recomputed among them)");
  cmd->add_option("--op", o->operations,
                  "analyse these operations only: allreduce, allgather, broadcast, barrier, "
                  "reducescatter, alltoall (repeat or separate with commas)")
      ->delimiter(',')
      ->check(CLI::IsMember(
          {"allreduce", "allgather", "broadcast", "barrier", "reducescatter", "alltoall"},
          CLI::ignore_case));
  cmd->add_option(
         "--table", o->table,
         "print one table: run, lateness, time, top_wait, top_processing, fusion, "
         "cycles, bandwidth, cost, cost_steps, cost_step_ranks, causes, cause_steps, steps, "
         "step_ranks (the last two imply --by-step)")
      ->check(CLI::IsMember({"run", "lateness", "time", "top_wait", "top_processing", "fusion",
                             "cycles", "bandwidth", "cost", "cost_steps", "cost_step_ranks",
                             "causes", "cause_steps", "steps", "step_ranks"}));
  cmd->add_flag("--by-step", o->by_step,
                "add per-step tables (cost_steps, steps, step_ranks): from the trace's STEP "
                "marks, else step n = each tensor's n-th negotiation; reads the files twice");
  return cmd;
}

namespace {

bool wants_steps(const SummaryCommandOptions& o) {
  return o.by_step || o.table == "steps" || o.table == "step_ranks";
}

}  // namespace

int run_summary(const SummaryCommandOptions& o) {
  timeline::SummaryOptions options;
  options.top_k = o.top_k;
  options.by_step = wants_steps(o);
  if (!o.from.empty()) {
    options.from_us = parse_time_us(o.from);
    if (!options.from_us)
      return usage_error("--from " + o.from + ": expected a time like 1500, 1.5ms or 2s");
  }
  if (!o.to.empty()) {
    options.to_us = parse_time_us(o.to);
    if (!options.to_us)
      return usage_error("--to " + o.to + ": expected a time like 1500, 1.5ms or 2s");
  }
  if (options.from_us && options.to_us && *options.to_us < *options.from_us) {
    return usage_error("--to " + o.to + " is before --from " + o.from);
  }
  for (std::string op : o.operations) {
    for (char& c : op) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    options.operations.push_back(op);
  }
  if (!o.ranks.empty()) {
    auto ranks = parse_rank_list(o.ranks);
    if (!ranks) return usage_error("--ranks " + o.ranks + ": expected a list like 0,2-3");
    options.ranks = *ranks;
  }

  TraceInputOptions input;
  input.command = "ranktime summary";
  input.progress = o.progress;
  input.progress_every_bytes = static_cast<uint64_t>(o.progress_every_mb * 1024 * 1024);
  std::vector<std::string> paths = expand_trace_args(input, o.paths);
  if (paths.empty()) return 2;
  // An elastic job's attempts: the restarts between them, then the last attempt's tables.
  std::vector<Attempt> attempts;
  if (std::string error; !read_elastic_set(&paths, &attempts, &error)) {
    std::cerr << "ranktime summary: " << error << "\n";
    return 2;
  }
  AnalysedRun run;
  if (int status = analyse_run(input, paths, std::move(options), &run); status != 0) {
    return status;
  }
  const Summary& s = run.summary;
  const timeline::Causes& causes = s.causes;
  const std::string cause = cause_line(causes, timeline::CauseOptions{});

  std::vector<Table> tables = {run_table(s, run.truncated, run.paths.size()),
                               lateness_table(s),
                               time_table(s),
                               top_wait_table(s, o.top_k),
                               top_processing_table(s, o.top_k),
                               fusion_table(s),
                               cycles_table(s),
                               bandwidth_table(s),
                               cost_table(s)};
  // The per-step replay is long: in text with --by-step only.
  if (wants_steps(o) || o.format != "text" || o.table == "cost_steps") {
    tables.push_back(cost_steps_table(s));
  }
  if (o.format != "text" || o.table == "cost_step_ranks") {
    tables.push_back(cost_step_ranks_table(s));
  }
  if (causes.has_regions) tables.push_back(causes_table(causes, o.top_k));
  // Each late rank's regions in each step: long, so in text with --by-step only.
  if (causes.has_regions && (wants_steps(o) || o.format != "text" || o.table == "cause_steps")) {
    tables.push_back(cause_steps_table(causes));
  }
  if (wants_steps(o)) {
    tables.push_back(steps_table(s));
    tables.push_back(step_ranks_table(s));
  }
  if (!o.table.empty()) {
    std::vector<Table> only;
    for (auto& t : tables) {
      if (t.name == o.table) only.push_back(std::move(t));
    }
    tables = std::move(only);
  }

  if (o.format == "json") {
    nlohmann::json out;
    out["file"] = run.paths.front();
    out["files"] = run.paths;
    out["reader"] = {{"events", run.events},
                     {"bytes", run.bytes},
                     {"complete", run.complete},
                     {"truncated", run.truncated},
                     {"error", run.error}};
    out["slowest_rank"] = s.slowest_rank >= 0 ? nlohmann::json(s.slowest_rank) : nlohmann::json();
    out["cost_line"] = cost_line(s);
    out["what_if"] = what_if_json(s);
    out["summary_line"] = slowest_line(s);
    out["waiting_line"] = waiting_line(s);
    out["cause_line"] = cause.empty() ? nlohmann::json() : nlohmann::json(cause);
    if (!attempts.empty()) {
      out["attempts"] = attempts_json(attempts);
      out["restarts"] = restart_lines(attempts);
    }
    out["causes"] = causes_json(causes, o.top_k);
    if (wants_steps(o)) {
      out["steps_from"] = s.steps_from_marks ? "marks" : "negotiation order";
    }
    out["tables"] = nlohmann::json::object();
    for (const auto& t : tables) out["tables"][t.name] = to_json(t);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (o.format == "csv") {
    bool first = true;
    for (const auto& t : tables) {
      if (!first) std::cout << "\n";
      first = false;
      print_csv(std::cout, t, o.table.empty());
    }
    return 0;
  }
  if (o.table.empty()) {
    // The cost first, then the cause (when the trace has regions) and how well the replay did;
    // then the run, the slowest rank and the waiting; notes follow. An elastic job's restarts
    // come before all that, which is about its last attempt.
    if (!attempts.empty()) {
      std::cout << "attempts: " << attempts.size() << " (the figures below are attempt "
                << attempts.back().number << "'s)\n";
      for (const auto& line : restart_lines(attempts)) std::cout << line << "\n";
    }
    std::cout << cost_line(s) << "\n";
    if (!cause.empty()) std::cout << cause << "\n";
    std::cout << replay_line(s) << "\n";
    std::cout << header_line(run.paths, s) << "\n";
    std::cout << slowest_line(s) << "\n";
    std::cout << waiting_line(s) << "\n";
    if (run.truncated) std::cout << "note: " << run.error << "\n";
    if (!s.run.has_run_end) {
      std::cout << "note: no ranktime_run_end: the run did not close the file (crash or SIGKILL)\n";
    }
    if (s.run.events_dropped > 0) {
      std::cout << "note: the writer dropped " << s.run.events_dropped
                << " events (its buffer was full)\n";
    }
    if (s.run.regions_dropped > 0) {
      std::cout << "note: the ranks dropped " << s.run.regions_dropped
                << " regions (recorded faster than they could be shipped to rank 0)\n";
    }
  }
  for (const auto& t : tables) {
    if (t.name == "run" && o.table.empty()) continue;  // said in the header lines
    std::cout << "\n";
    print_text(std::cout, t);
  }
  return 0;
}

}  // namespace ranktime::cli
