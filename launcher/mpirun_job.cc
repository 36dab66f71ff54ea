// One mpirun process: spawn, forward signals, stop a doomed job's mpirun that cannot end, keep
// the end of its stderr when asked, read back why the job was aborted.
#include "mpirun_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>

extern char** environ;

namespace ranktime::cli {
namespace {

namespace fs = std::filesystem;

// Signals to forward, delivered to the handler below.
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_pending_signal = 0;
volatile sig_atomic_t g_interrupted = 0;

void forward_signal(int sig, siginfo_t* info, void*) {
  g_interrupted = 1;
  // Ctrl-C from the terminal (SI_KERNEL) already reached mpirun, which is in our process group;
  // sending it again would make mpirun abort without cleaning up. Forward only signals that a
  // process sent to us (kill, a batch system's SIGTERM).
  if (info != nullptr && info->si_code > 0) return;
  if (g_child > 0) {
    ::kill(static_cast<pid_t>(g_child), sig);
  } else {
    g_pending_signal = sig;
  }
}

void install_forwarding() {
  struct sigaction action {};
  action.sa_sigaction = forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// Once a rank has written why the job is doomed (RANKTIME_STATUS_FILE), mpirun normally ends the
// job within seconds (the ranks call MPI_Abort). It cannot when a host stopped answering: its
// order to that host's daemon waits in a TCP retransmission for up to 15 minutes
// (docs/reliability.md). Past this grace ranktime run stops mpirun itself, and kills it past the
// second.
constexpr auto kDoomedGrace = std::chrono::seconds(15);
constexpr auto kStopGrace = std::chrono::seconds(5);
constexpr size_t kStderrTailBytes = 64 * 1024;

bool file_has_text(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::file_size(path, ec) > 0 && !ec;
}

// Copies what mpirun wrote to its stderr pipe to ours, keeping the end of it. False at the end of
// the pipe (every writer gone).
bool pass_stderr(int fd, std::string* tail) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(STDERR_FILENO, buffer + done, static_cast<size_t>(n - done));
      if (w <= 0) break;
      done += w;
    }
    tail->append(buffer, static_cast<size_t>(n));
    if (tail->size() > 2 * kStderrTailBytes) tail->erase(0, tail->size() - kStderrTailBytes);
  }
}

// mpirun's environment: ours, with the plan's variables set (replacing ours).
std::vector<std::string> child_environment(const MpirunPlan& plan) {
  std::set<std::string> replaced;
  for (const auto& [name, value] : plan.env) replaced.insert(name);
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    if (replaced.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : plan.env) env_strings.push_back(name + "=" + value);
  return env_strings;
}

int spawn_and_wait(const MpirunPlan& plan, const JobRun& run, const std::string& status_file,
                   std::string* stderr_tail) {
  std::vector<std::string> env_strings = child_environment(plan);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (run.capture_stderr && ::pipe2(pipe_fds, O_CLOEXEC) == 0) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
    ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  }
  if (run.verbose) std::cerr << "ranktime run: " << join_command(plan.argv) << "\n";
  install_forwarding();
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (rc != 0) {
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    std::cerr << "ranktime run: cannot start " << plan.argv[0] << ": " << std::strerror(rc) << "\n";
    return 2;
  }
  g_child = pid;
  if (g_pending_signal != 0) ::kill(pid, g_pending_signal);
  int status = 0;
  std::optional<std::chrono::steady_clock::time_point> doomed_at;
  int stop_signal = 0;
  auto last_tick = std::chrono::steady_clock::now();
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      std::cerr << "ranktime run: waitpid: " << std::strerror(errno) << "\n";
      status = 1 << 8;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!doomed_at && file_has_text(status_file)) doomed_at = now;
    if (doomed_at && stop_signal == 0 && now - *doomed_at > kDoomedGrace) {
      std::cerr << "ranktime run: mpirun has not ended " << kDoomedGrace.count()
                << " s after the job was aborted (a host that stopped answering?): stopping it\n";
      stop_signal = SIGTERM;
      ::kill(pid, SIGTERM);
    } else if (stop_signal == SIGTERM && now - *doomed_at > kDoomedGrace + kStopGrace) {
      stop_signal = SIGKILL;
      ::kill(pid, SIGKILL);
    }
    if (run.every_second && now - last_tick >= std::chrono::seconds(1)) {
      last_tick = now;
      run.every_second(pid);
    }
    if (pipe_fds[0] >= 0) {
      struct pollfd p {
        pipe_fds[0], POLLIN, 0
      };
      ::poll(&p, 1, 50);
      if (!pass_stderr(pipe_fds[0], stderr_tail)) {
        ::close(pipe_fds[0]);
        pipe_fds[0] = -1;
      }
    } else {
      ::poll(nullptr, 0, 50);
    }
  }
  g_child = 0;
  if (pipe_fds[0] >= 0) {
    // What mpirun wrote last (the daemons' ends of the pipe may outlive it: do not wait).
    pass_stderr(pipe_fds[0], stderr_tail);
    ::close(pipe_fds[0]);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) out += (out.empty() ? "" : " ") + shell_quote(arg);
  return out;
}

JobOutcome run_mpirun_job(MpirunPlan plan, size_t command_size, const JobRun& run) {
  // A doomed job's first rank to give up writes why into this file before the job is aborted
  // (RANKTIME_STATUS_FILE): mpirun's own message only says that a rank called MPI_Abort.
  std::string dir_template = (fs::temp_directory_path() / "ranktime-run-XXXXXX").string();
  const bool have_dir = ::mkdtemp(dir_template.data()) != nullptr;
  const std::string status_file = have_dir ? dir_template + "/status" : "";
  if (have_dir) {
    plan.argv.insert(plan.argv.end() - static_cast<std::ptrdiff_t>(command_size),
                     {"-x", "RANKTIME_STATUS_FILE=" + status_file});
  }
  JobOutcome outcome;
  g_interrupted = 0;
  outcome.status = spawn_and_wait(plan, run, status_file, &outcome.stderr_tail);
  outcome.interrupted = g_interrupted != 0;
  if (outcome.stderr_tail.size() > kStderrTailBytes) {
    outcome.stderr_tail.erase(0, outcome.stderr_tail.size() - kStderrTailBytes);
  }
  if (have_dir) {
    std::ifstream in(status_file);
    if (outcome.status != 0 && std::getline(in, outcome.reason)) {
      std::cerr << "ranktime run: the job was aborted (exit status " << outcome.status
                << "): " << outcome.reason << "\n";
    }
    std::error_code ec;
    fs::remove_all(dir_template, ec);
  }
  return outcome;
}

}  // namespace ranktime::cli
