// Elastic jobs: `ranktime run --min-np N --max-np M --host-discovery-script S [--reset-limit K]`,
// horovodrun's flags and meaning. When an attempt fails, the hosts it lost are blacklisted, the
// discovery script is asked again and the job starts again on what is left (at least N slots);
// hosts that appear join at the next restart. The ranks restart as new processes: they find the
// newest commit of ranktime.elastic in RANKTIME_ELASTIC_DIR (bindings/ranktime/_elastic.py).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ranktime::cli {

struct RunCommandOptions;
struct HostFacts;

// Ranks exit with this status after a commit when the launcher said that hosts appeared
// (RANKTIME_ELASTIC_DIR/hosts_updated): the job restarts on more hosts, nothing failed.
constexpr int kHostsUpdatedExit = 75;

struct ElasticOptions {
  int min_np = -1;  // -1: not given (then -np)
  int max_np = -1;  // -1: not given (then -np)
  std::string discovery_script;
  int reset_limit = -1;                // -1: no limit
  std::vector<double> cooldown_range;  // --blacklist-cooldown-range MIN MAX; empty: for good
  double elastic_timeout_s = 600;      // horovodrun's default
  int slots_per_host = 1;              // for a discovery line without :SLOTS
  bool enabled() const { return !discovery_script.empty() || min_np != -1 || max_np != -1; }
};

void add_elastic_flags(CLI::App* cmd, ElasticOptions* options);

// The first problem with the elastic flags (naming the flag and the value), or "".
std::string check_elastic_options(const RunCommandOptions& options);

// Runs attempts until one succeeds, too few hosts are left or --reset-limit is reached (or
// prints the first attempt's plan with --dry-run). Returns the last attempt's exit status, 2 for
// a discovery script that fails or prints garbage, 1 when too few hosts are left.
int run_elastic(const RunCommandOptions& options, const std::string& mpirun,
                const std::string& timeline_path, const HostFacts& host);

}  // namespace ranktime::cli
