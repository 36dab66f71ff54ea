// `ranktime run`: starts a job through Open MPI's mpirun with the ranktime settings passed to
// every rank as environment variables (design.md, "Environment and flags").
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "elastic.h"

namespace ranktime::cli {

struct RunCommandOptions {
  int np = 0;
  std::string hosts;     // -H host1:2,host2:2
  std::string hostfile;  // --hostfile F
  // The settings given as flags (core/settings.h): variable -> the flag's text as given (a
  // switch: its value), kept as text until validated and converted. Absent: not given.
  std::map<std::string, std::string> settings;
  std::string mpirun;  // --mpirun PATH
  bool oversubscribe = false;
  std::vector<std::pair<std::string, std::string>> mca;  // --mca NAME VALUE, for mpirun
  std::vector<std::string> mpi_args;            // --mpi-arg=ARG, passed to mpirun as they are
  std::vector<std::string> network_interfaces;  // --network-interface(s), horovodrun's
  std::string output_filename;                  // --output-filename DIR, for mpirun
  bool dry_run = false;
  bool verbose = false;
  std::vector<std::string> command;  // PROGRAM ARGS...
  ElasticOptions elastic;            // --min-np, --max-np, --host-discovery-script, ...
};

// What the machine looks like, for the plan (passed in so tests see fixed values).
struct HostFacts {
  bool is_root = false;
  int local_slots = 1;     // cores of this host
  int hostfile_hosts = 0;  // distinct hosts that --hostfile names (read before planning)
};

// The exact process to start: argv[0] is mpirun's path; env is added to mpirun's environment.
struct MpirunPlan {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;       // for mpirun itself
  std::vector<std::pair<std::string, std::string>> rank_env;  // passed to every rank with -x
};

// Builds the plan from validated options; `mpirun` and `timeline_path` are already resolved
// (absolute). Pure: no I/O.
MpirunPlan plan_mpirun(const RunCommandOptions& options, const std::string& mpirun,
                       const std::string& timeline_path, const HostFacts& host);

// POSIX shell quoting, for printing commands that can be pasted back into a shell.
std::string shell_quote(const std::string& arg);

// Registers `run`; *options is filled when it is parsed.
CLI::App* add_run_command(CLI::App& app, RunCommandOptions* options);
// Validates, then runs the job (or prints it with --dry-run). Returns the job's exit status,
// 128 + signal when mpirun was killed by a signal, or 2 for bad input (nothing started).
int run_run(RunCommandOptions& options);

}  // namespace ranktime::cli
