// The alert command's thread (see alert_command.h).
#include "live/alert_command.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>

#include "core/log.h"

extern char** environ;

namespace ranktime {
namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(20);
}  // namespace

AlertCommand::AlertCommand(std::string command, double timeout_s)
    : command_(std::move(command)), timeout_s_(timeout_s), thread_([this] { serve(); }) {}

AlertCommand::~AlertCommand() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AlertCommand::run(Environment env) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_ = std::move(env);
  }
  cv_.notify_all();
}

void AlertCommand::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || waiting_; });
    if (stopping_) return;
    Environment env = std::move(*waiting_);
    waiting_.reset();
    lock.unlock();
    const std::string how = run_one(env);
    if (how.empty()) {
      RANKTIME_LOG(kDebug, "alert command finished");
    } else {
      RANKTIME_LOG(kWarning, "alert command " << how);
    }
    lock.lock();
  }
}

std::string AlertCommand::run_one(const Environment& env) {
  // The process's environment, less the names the alert sets, then the alert's.
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const auto& v) {
      return entry.size() > v.first.size() && entry.compare(0, v.first.size(), v.first) == 0 &&
             entry[v.first.size()] == '=';
    });
    if (!replaced) entries.emplace_back(entry);
  }
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string shell = "/bin/sh", dash_c = "-c", command = command_;
  char* argv[] = {shell.data(), dash_c.data(), command.data(), nullptr};

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: killed together
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (err != 0) return std::string("could not start: ") + std::strerror(err);

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s_));
  int status = 0;
  // Also when the job ends meanwhile: a command that was told of an alert may finish (its
  // timeout bounds how long shutdown waits for it).
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "killed after RANKTIME_ALERT_COMMAND_TIMEOUT_S=" + std::to_string(timeout_s_) + " s";
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  return WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                           : "ended by signal " + std::to_string(WTERMSIG(status));
}

}  // namespace ranktime
