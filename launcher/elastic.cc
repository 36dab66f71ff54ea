// The elastic loop of `ranktime run`: ask the discovery script, choose the hosts, run one
// attempt through mpirun, and on failure blacklist the hosts it lost and start again.
#include "elastic.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <thread>

#include "elastic_hosts.h"
#include "mpirun_job.h"
#include "run_command.h"

extern char** environ;

namespace ranktime::cli {
namespace {

namespace fs = std::filesystem;

// A discovery script that takes longer than this is stopped (Horovod waits for ever).
constexpr auto kDiscoveryTimeout = std::chrono::seconds(30);

struct Discovery {
  bool ok = false;
  std::string output;  // stdout
  std::string error;   // why not ok
};

// Runs the script (never through a shell) and reads its standard output.
Discovery discover(const std::string& script) {
  Discovery d;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    d.error = std::string("pipe: ") + std::strerror(errno);
    return d;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::string path = script;
  char* argv[] = {path.data(), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    d.error = std::string("cannot start it: ") + std::strerror(rc);
    return d;
  }
  const auto deadline = std::chrono::steady_clock::now() + kDiscoveryTimeout;
  bool timed_out = false;
  for (char buffer[4096];;) {
    struct pollfd p {
      fds[0], POLLIN, 0
    };
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    d.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    d.error = "did not finish within " + std::to_string(kDiscoveryTimeout.count()) + " s";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    d.error = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                : "died of signal " + std::to_string(WTERMSIG(status));
  } else {
    d.ok = true;
  }
  return d;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? "none" : out;
}

// A message line as an environment value: one line, printable, bounded.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (out.size() >= 300) break;
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;
  }
  return out;
}

// The first line of `messages` that names `host` as failed, for the restart's reason.
std::string line_naming(const std::string& messages, const std::string& host) {
  size_t start = 0;
  while (start < messages.size()) {
    size_t end = messages.find('\n', start);
    if (end == std::string::npos) end = messages.size();
    const std::string line = messages.substr(start, end - start);
    if (failed_hosts(line, {host}).size() == 1) return line;
    start = end + 1;
  }
  return "";
}

class ElasticJob {
 public:
  ElasticJob(const RunCommandOptions& o, std::string mpirun, std::string timeline_path,
             const HostFacts& host)
      : o_(o),
        e_(o.elastic),
        mpirun_(std::move(mpirun)),
        timeline_path_(std::move(timeline_path)),
        host_(host),
        blacklist_(e_.cooldown_range.empty()
                       ? std::nullopt
                       : std::optional(std::pair(e_.cooldown_range[0], e_.cooldown_range[1]))),
        min_np_(e_.min_np != -1 ? e_.min_np : o.np),
        max_np_(e_.max_np != -1 ? e_.max_np : std::max(o.np, min_np_)),
        random_(std::random_device{}()) {}

  int run();

 private:
  // The hosts of the next attempt: asks the script until they have --min-np slots, or gives up
  // after --elastic-timeout. nullopt after printing why (status_ says which exit status).
  std::optional<AttemptHosts> wait_for_hosts();
  MpirunPlan plan(const AttemptHosts& hosts, int attempt, const std::string& reason) const;
  // While an attempt runs: tells its ranks when the script finds hosts the job could grow onto.
  void watch_for_new_hosts(const AttemptHosts& running);

  const RunCommandOptions& o_;
  const ElasticOptions& e_;
  std::string mpirun_;
  std::string timeline_path_;
  HostFacts host_;
  HostBlacklist blacklist_;
  int min_np_;
  int max_np_;
  std::mt19937 random_;
  std::string dir_;  // RANKTIME_ELASTIC_DIR: the commits, and the hosts_updated note
  int status_ = 0;
  int attempt_ = 0;
  bool told_hosts_updated_ = false;
};

std::optional<AttemptHosts> ElasticJob::wait_for_hosts() {
  const double start = now_s();
  for (;;) {
    const Discovery d = discover(e_.discovery_script);
    if (!d.ok) {
      std::cerr << "ranktime run: error: --host-discovery-script " << e_.discovery_script << ": "
                << d.error << "\n";
      status_ = 2;
      return std::nullopt;
    }
    std::vector<DiscoveredHost> found;
    try {
      found = parse_discovered_hosts(d.output, e_.slots_per_host);
    } catch (const DiscoveryError& error) {
      std::cerr << "ranktime run: error: --host-discovery-script " << e_.discovery_script
                << " printed " << error.what() << "\n";
      status_ = 2;
      return std::nullopt;
    }
    const double now = now_s();
    if (auto chosen = choose_hosts(found, blacklist_, now, min_np_, max_np_)) return chosen;
    if (now - start >= e_.elastic_timeout_s) {
      int slots = 0;
      for (const auto& h : found) slots += blacklist_.excludes(h.name, now) ? 0 : h.slots;
      std::cerr << "ranktime run: error: --host-discovery-script found " << slots
                << " usable slots, fewer than --min-np " << min_np_ << ", for --elastic-timeout "
                << e_.elastic_timeout_s << " s (blacklisted: " << joined(blacklist_.excluded(now))
                << "): giving up\n";
      status_ = 1;
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

MpirunPlan ElasticJob::plan(const AttemptHosts& hosts, int attempt,
                            const std::string& reason) const {
  RunCommandOptions attempt_options = o_;
  attempt_options.np = hosts.np;
  attempt_options.hosts = hosts.host_list;
  const std::string trace =
      timeline_path_.empty() ? "" : attempt_trace_path(timeline_path_, attempt);
  MpirunPlan p = plan_mpirun(attempt_options, mpirun_, trace, host_);
  std::vector<std::pair<std::string, std::string>> elastic_env = {
      {"RANKTIME_ELASTIC_DIR", dir_}, {"RANKTIME_ELASTIC_ATTEMPT", std::to_string(attempt)}};
  if (!reason.empty()) elastic_env.emplace_back("RANKTIME_ELASTIC_RESTART_REASON", reason);
  auto at = p.argv.end() - static_cast<std::ptrdiff_t>(o_.command.size());
  for (const auto& [name, value] : elastic_env) {
    at = p.argv.insert(at, {"-x", name + "=" + value}) + 2;
    p.rank_env.emplace_back(name, value);
  }
  return p;
}

void ElasticJob::watch_for_new_hosts(const AttemptHosts& running) {
  if (told_hosts_updated_ || running.np >= max_np_) return;
  const Discovery d = discover(e_.discovery_script);
  if (!d.ok) return;  // asked again in a second; a restart would report it
  try {
    auto chosen = choose_hosts(parse_discovered_hosts(d.output, e_.slots_per_host), blacklist_,
                               now_s(), min_np_, max_np_);
    if (!chosen || chosen->np <= running.np) return;
    std::vector<std::string> added;
    for (const auto& name : chosen->names) {
      if (std::find(running.names.begin(), running.names.end(), name) == running.names.end())
        added.push_back(name);
    }
    const std::string note = dir_ + "/hosts_updated";
    std::ofstream(note + ".tmp") << attempt_ << "\n";
    fs::rename(note + ".tmp", note);
    told_hosts_updated_ = true;
    std::cerr << "ranktime run: hosts appeared (" << joined(added)
              << "): the job restarts on them after its next commit\n";
  } catch (const std::exception&) {
    // garbage now: a restart would report it
  }
}

int ElasticJob::run() {
  std::string dir_template = (fs::temp_directory_path() / "ranktime-elastic-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    std::cerr << "ranktime run: error: cannot make a directory for the commits: "
              << std::strerror(errno) << "\n";
    return 2;
  }
  dir_ = dir_template;
  std::string reason;
  int resets = 0;
  for (attempt_ = 0;; ++attempt_) {
    auto hosts = wait_for_hosts();
    if (!hosts) break;
    MpirunPlan p = plan(*hosts, attempt_, reason);
    if (o_.dry_run) {
      for (const auto& [name, value] : p.rank_env)
        std::cout << shell_quote(name + "=" + value) << "\n";
      std::cout << join_command(p.argv) << "\n";
      status_ = 0;
      break;
    }
    std::cerr << "ranktime run: attempt " << attempt_ << " on " << hosts->host_list << " ("
              << hosts->np << " ranks)\n";
    std::error_code ec;
    fs::remove(dir_ + "/hosts_updated", ec);
    told_hosts_updated_ = false;
    JobRun job;
    job.verbose = o_.verbose;
    job.capture_stderr = true;
    job.every_second = [&](pid_t) { watch_for_new_hosts(*hosts); };
    const JobOutcome out = run_mpirun_job(p, o_.command.size(), job);
    status_ = out.status;
    if (out.status == 0 || out.interrupted) break;
    std::vector<std::string> lost;
    if (out.status == kHostsUpdatedExit && told_hosts_updated_) {
      reason = "hosts appeared";
    } else {
      const std::string messages = out.reason + "\n" + out.stderr_tail;
      lost = failed_hosts(messages, hosts->names);
      std::uniform_real_distribution<double> uniform(0.0, 1.0);
      for (const auto& h : lost) blacklist_.add(h, now_s(), uniform(random_));
      reason = lost.empty() ? "attempt " + std::to_string(attempt_) + " failed (exit status " +
                                  std::to_string(out.status) + ")"
                            : "lost host " + joined(lost) + ": " +
                                  one_line(line_naming(messages, lost.front()));
    }
    if (e_.reset_limit >= 0 && resets >= e_.reset_limit) {
      std::cerr << "ranktime run: error: giving up after " << resets << " reset"
                << (resets == 1 ? "" : "s") << " (--reset-limit " << e_.reset_limit << "): attempt "
                << attempt_ << " ended: " << reason << "\n";
      break;
    }
    ++resets;
    std::cerr << "ranktime run: attempt " << attempt_ << " ended (exit status " << out.status
              << "): " << reason << "; blacklisted: " << joined(blacklist_.excluded(now_s()))
              << "; restarting\n";
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
  return status_;
}

}  // namespace

void add_elastic_flags(CLI::App* cmd, ElasticOptions* e) {
  const char* group = "Elastic (horovodrun's)";
  cmd->add_option("--min-np,--min-num-proc", e->min_np,
                  "elastic: the fewest ranks to run on (default: -np)")
      ->group(group);
  cmd->add_option("--max-np,--max-num-proc", e->max_np,
                  "elastic: the most ranks to run on (default: -np)")
      ->group(group);
  cmd->add_option("--host-discovery-script", e->discovery_script,
                  "elastic: an executable that prints the hosts available now, one HOST:SLOTS "
                  "a line; asked before each attempt and while it runs")
      ->group(group);
  cmd->add_option("--reset-limit", e->reset_limit,
                  "elastic: give up after this many restarts (default: no limit)")
      ->group(group);
  cmd->add_option("--blacklist-cooldown-range", e->cooldown_range,
                  "elastic: MIN MAX seconds a failed host is left out, doubling with each "
                  "failure (default: for good)")
      ->expected(2)
      ->allow_extra_args(false)
      ->group(group);
  cmd->add_option("--elastic-timeout", e->elastic_timeout_s,
                  "elastic: seconds to wait for --min-np slots before giving up (default 600)")
      ->group(group);
  cmd->add_option("--slots-per-host,--slots", e->slots_per_host,
                  "elastic: slots of a discovered host whose line gives none (default 1)")
      ->group(group);
}

std::string check_elastic_options(const RunCommandOptions& o) {
  const ElasticOptions& e = o.elastic;
  if (!e.enabled()) return "";
  if (e.discovery_script.empty()) {
    return std::string(e.min_np != -1 ? "--min-np" : "--max-np") +
           " needs --host-discovery-script (elastic jobs take their hosts from it)";
  }
  const std::string script = "--host-discovery-script " + e.discovery_script;
  struct stat st {};
  if (::stat(e.discovery_script.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(e.discovery_script.c_str(), X_OK) != 0) {
    return script + ": not an executable file";
  }
  if (!o.hosts.empty() || !o.hostfile.empty()) {
    return script + " takes the hosts from the script: drop -H/--hostfile";
  }
  for (const auto& [flag, value] : {std::pair{"--min-np ", e.min_np}, {"--max-np ", e.max_np}}) {
    if (value == 0 || value < -1) return flag + std::to_string(value) + ": must be at least 1";
  }
  const int min_np = e.min_np != -1 ? e.min_np : o.np;
  const int max_np = e.max_np != -1 ? e.max_np : std::max(o.np, min_np);
  if (max_np < min_np) {
    return "--max-np " + std::to_string(max_np) + ": below --min-np " + std::to_string(min_np);
  }
  if (e.reset_limit < -1) {
    return "--reset-limit " + std::to_string(e.reset_limit) + ": must be 0 or more";
  }
  if (!e.cooldown_range.empty() &&
      (e.cooldown_range[0] < 0 || e.cooldown_range[1] < e.cooldown_range[0])) {
    return "--blacklist-cooldown-range " + std::to_string(e.cooldown_range[0]) + " " +
           std::to_string(e.cooldown_range[1]) + ": expected 0 <= MIN <= MAX seconds";
  }
  if (!(e.elastic_timeout_s >= 0)) {
    return "--elastic-timeout " + std::to_string(e.elastic_timeout_s) + ": must be 0 or more";
  }
  if (e.slots_per_host < 1) {
    return "--slots-per-host " + std::to_string(e.slots_per_host) + ": must be at least 1";
  }
  return "";
}

int run_elastic(const RunCommandOptions& options, const std::string& mpirun,
                const std::string& timeline_path, const HostFacts& host) {
  return ElasticJob(options, mpirun, timeline_path, host).run();
}

}  // namespace ranktime::cli
