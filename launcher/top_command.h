// `ranktime top [HOST:PORT]`: a live terminal view of a running job, read from rank 0's metrics
// endpoint (RANKTIME_METRICS_ADDR) like any other client: one row per rank, the costliest (then
// the latest) first, refreshed each second; --once prints one frame.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct TopCommandOptions {
  std::string address;  // HOST:PORT; empty: RANKTIME_METRICS_ADDR
  bool once = false;
  double interval_s = 1;
};

CLI::App* add_top_command(CLI::App& app, TopCommandOptions* options);
// Exit status: 0, or 1 when --once could not read the endpoint, 2 a bad option.
int run_top(const TopCommandOptions& options);

// One sample of the text format: name, labels, value.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
// The samples of a Prometheus text-format page; comments, blank and malformed lines are skipped.
std::vector<MetricSample> parse_metrics_text(const std::string& text);
// The frame `top` prints for a page (`width`: the terminal's columns).
std::string top_frame(const std::vector<MetricSample>& samples, const std::string& address,
                      int width);

}  // namespace ranktime::cli
