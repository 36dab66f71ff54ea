// RANKTIME_ALERT_COMMAND: run on rank 0's host when an alert fires, through /bin/sh -c, on a
// thread of its own so that the background loop never waits for it. A command still running
// after RANKTIME_ALERT_COMMAND_TIMEOUT_S is killed with its process group.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ranktime {

class AlertCommand {
 public:
  using Environment = std::vector<std::pair<std::string, std::string>>;

  AlertCommand(std::string command, double timeout_s);
  ~AlertCommand();  // lets a running command finish (within its timeout)
  AlertCommand(const AlertCommand&) = delete;
  AlertCommand& operator=(const AlertCommand&) = delete;

  // Returns at once. The command runs with the process's environment plus `env`; while one
  // runs, a newer request replaces the one waiting.
  void run(Environment env);

 private:
  void serve();
  // Starts the command and waits for it (or kills it); returns how it ended, for the log.
  std::string run_one(const Environment& env);

  std::string command_;
  double timeout_s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<Environment> waiting_;  // guarded by mutex_
  bool stopping_ = false;               // guarded by mutex_
  std::thread thread_;
};

}  // namespace ranktime
