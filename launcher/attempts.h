// The attempts of an elastic job (`ranktime run --host-discovery-script`) on one time axis: each
// attempt writes its own trace (t.json, t.attempt1.json, ...); this reads what `summary` says
// about the restarts between them: which host was lost, when, what the restart cost, and the
// steps redone since the last commit (ranktime.elastic's `elastic.commit` regions).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report_table.h"

namespace ranktime::cli {

struct Attempt {
  int number = 0;
  std::vector<std::string> paths;  // its files, rotated pieces in order
  std::vector<std::string> hosts;  // distinct, in rank order
  std::string restart_reason;      // why the attempt before it ended ("" for the first)
  double start_s = 0;              // on the first attempt's clock (its ts 0)
  double end_s = 0;                // its last event
  double first_step_s = -1;        // rank 0's first STEP slice's start; -1: none
  double last_commit_s = -1;       // end of rank 0's last elastic.commit region; -1: none
  int steps_after_commit = 0;      // rank 0's STEP slices that ended after it
};

// The attempt number in a trace file's name: t.attempt2.json (or its rotated t.attempt2.1.json)
// -> 2; 0 for any other name.
int attempt_of(const std::string& path);

// `paths` grouped by attempt, in attempt order (one group when no name carries an attempt).
std::vector<std::vector<std::string>> split_attempts(const std::vector<std::string>& paths);

// Reads each group's run metadata, steps and commits; false (and *error) when a file cannot be
// read or has no ranktime_run.
bool read_attempts(const std::vector<std::vector<std::string>>& groups,
                   std::vector<Attempt>* attempts, std::string* error);

// `summary` and `report` of an elastic job's set: when *paths hold several attempts, reads them
// into *attempts and leaves in *paths the last attempt's files (the figures after are about it).
// False (and *error) when an attempt cannot be read.
bool read_elastic_set(std::vector<std::string>* paths, std::vector<Attempt>* attempts,
                      std::string* error);

// What ended one attempt and what the next one began with.
struct Restart {
  int before = 0;                       // the attempt that ended
  int after = 0;                        // the one that restarted
  std::vector<std::string> lost_hosts;  // before's hosts that after does not have
  double lost_at_s = 0;                 // before's last event
  double took_s = 0;                    // before's last event to after's first step (or its end)
  bool committed = false;               // before made a commit (the next two are known)
  int steps_redone = 0;                 // before's steps that ended after its last commit
  double redone_s = 0;                  // before's last commit to its last event
  std::string reason;                   // after's restart reason
};
std::vector<Restart> restarts_of(const std::vector<Attempt>& attempts);

// One line per restart, for the text summary: "restart 1 (attempt 0 -> 1): lost host h2 at ...".
std::vector<std::string> restart_lines(const std::vector<Attempt>& attempts);
nlohmann::json attempts_json(const std::vector<Attempt>& attempts);
nlohmann::json restarts_json(const std::vector<Restart>& restarts);
// One row per attempt: when it ran, where, why it began, and how it ended (the hosts lost, the
// work since its last commit that the next attempt redid, what the restart took).
Table attempts_table(const std::vector<Attempt>& attempts);

}  // namespace ranktime::cli
