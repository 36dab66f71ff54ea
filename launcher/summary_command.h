// `ranktime summary FILE...`: who was late and who waited for whom, where the time went, top
// tensors, fusion, bandwidth and, with --by-step, each step.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct SummaryCommandOptions {
  std::vector<std::string> paths;  // files of one run, or glob patterns
  std::string format = "text";     // text, csv, json
  size_t top_k = 10;
  std::string from;                     // window start: "1500", "1500us", "1.5ms", "2s"
  std::string to;                       // window end
  std::string ranks;                    // "0,2-3"
  std::vector<std::string> operations;  // "allreduce", "BROADCAST", ...
  std::string table;                    // print only this table
  bool by_step = false;                 // add the steps and step_ranks tables
  bool progress = false;
  double progress_every_mb = 256;
};

// Registers the subcommand; *options is filled when it is parsed.
CLI::App* add_summary_command(CLI::App& app, SummaryCommandOptions* options);
// Returns the exit status: 0, 1 (the file held no events), 2 (bad option, unreadable file).
int run_summary(const SummaryCommandOptions& options);

// Checks -k/--top: a whole number, 1 or more, with a plain message otherwise.
CLI::Validator top_k_validator();

// "1500" (µs), "1500us", "1.5ms", "2s" -> microseconds; nullopt when malformed.
std::optional<double> parse_time_us(const std::string& text);
// "0,2-3" -> {0, 2, 3}; nullopt when malformed.
std::optional<std::vector<int>> parse_rank_list(const std::string& text);

}  // namespace ranktime::cli
