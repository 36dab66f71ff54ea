// One mpirun process of `ranktime run`: started with posix_spawn (never through a shell), with
// SIGINT/SIGTERM forwarded, stopped when a doomed job's mpirun cannot end by itself, and the
// reason the first rank to give up wrote (RANKTIME_STATUS_FILE) read back.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "run_command.h"

namespace ranktime::cli {

struct JobRun {
  bool verbose = false;  // print the command before starting it
  // Keep the end of mpirun's stderr (still copied to ours as it comes): the elastic loop reads
  // which host mpirun saw fail there.
  bool capture_stderr = false;
  // Called about once a second while mpirun runs, with its pid (the elastic loop asks the
  // discovery script whether hosts appeared).
  std::function<void(pid_t)> every_second;
};

struct JobOutcome {
  // mpirun's exit status; 128 + N when it died of signal N; 2 when it could not be started.
  int status = 0;
  std::string reason;        // the first line a rank wrote to RANKTIME_STATUS_FILE, or ""
  std::string stderr_tail;   // the last 64 KiB of mpirun's stderr, when captured
  bool interrupted = false;  // SIGINT or SIGTERM reached ranktime while mpirun ran
};

// Runs `plan` (whose last `command_size` arguments are the program and its arguments), adding
// RANKTIME_STATUS_FILE for the ranks, and prints the reason when the job was aborted.
JobOutcome run_mpirun_job(MpirunPlan plan, size_t command_size, const JobRun& run);

// The command line, shell-quoted, to print.
std::string join_command(const std::vector<std::string>& argv);

}  // namespace ranktime::cli
