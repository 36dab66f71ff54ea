// `ranktime run`: validate everything before starting anything, build mpirun's argument vector,
// start it with posix_spawn (never through a shell), forward SIGINT/SIGTERM, return its status.
#include "run_command.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

extern char** environ;

namespace ranktime::cli {
namespace {

namespace fs = std::filesystem;

// Bad input: say what is wrong and start nothing.
struct InputError {
  std::string message;
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// A command name is looked up on PATH (as execvp would); a name with a '/' is a path.
std::optional<std::string> find_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = dirs.find(':', pos);
    std::string dir =
        dirs.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return std::nullopt;
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(path), ec);
  if (ec) return path;
  return p.lexically_normal().string();
}

// The timeline is written by rank 0, possibly far from here; what can be checked here is that
// the directory exists and is writable (on a single host that is the real check).
std::string check_timeline_path(const std::string& given) {
  const std::string path = absolute_path(given);
  const std::string flag = "--timeline-filename " + given;
  if (!given.empty() && given.back() == '/')
    throw InputError{flag + ": is a directory, not a file"};
  fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::exists(parent, ec)) {
    throw InputError{flag + ": directory " + parent.string() + " does not exist"};
  }
  if (!fs::is_directory(parent, ec)) {
    throw InputError{flag + ": " + parent.string() + " is not a directory"};
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    throw InputError{flag + ": directory " + parent.string() + " is not writable (" +
                     std::strerror(errno) + ")"};
  }
  if (fs::is_directory(path, ec)) throw InputError{flag + ": is a directory, not a file"};
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    throw InputError{flag + ": " + path + " is not writable (" + std::strerror(errno) + ")"};
  }
  return path;
}

// Number options passed to every rank as they are: the flag, its variable, what it accepts.
struct PassThroughNumber {
  const char* flag;
  std::string RunCommandOptions::*value;
  const char* variable;
  bool positive;  // else non-negative
  const char* help;
};
const PassThroughNumber kPassThroughNumbers[] = {
    {"--cycle-time-ms", &RunCommandOptions::cycle_time_ms, "RANKTIME_CYCLE_TIME_MS", true,
     "longest wait between cycles"},
    {"--stall-check-warning-time-seconds", &RunCommandOptions::stall_warning_s,
     "RANKTIME_STALL_WARNING_S", true, "warn about ranks that have not submitted"},
    {"--stall-check-shutdown-time-seconds", &RunCommandOptions::stall_shutdown_s,
     "RANKTIME_STALL_SHUTDOWN_S", false, "fail instead of hanging"},
    {"--peer-timeout-seconds", &RunCommandOptions::peer_timeout_s, "RANKTIME_PEER_TIMEOUT_S", false,
     "fail every operation when a rank has been silent this long, e.g. died; 0 waits forever"},
};

void validate_number(const std::string& flag, const std::string& value, bool positive) {
  if (value.empty()) return;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (errno != 0 || end == value.c_str() || *end != '\0' || !std::isfinite(v) || v < 0 ||
      (positive && v == 0)) {
    throw InputError{flag + " " + value + ": expected a " +
                     (positive ? "positive" : "non-negative") + " number"};
  }
}

// --mca takes the next two arguments whatever they look like, so a forgotten value swallows the
// next flag: a NAME must be an MCA parameter's name, and a VALUE is not a long flag.
void validate_mca(const std::string& name, const std::string& value) {
  bool name_ok = !name.empty();
  for (char c : name)
    name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!name_ok || value.rfind("--", 0) == 0) {
    throw InputError{"--mca " + name + " " + value +
                     ": expected --mca NAME VALUE, NAME an Open MPI parameter such as btl"};
  }
}

// Slots of a single-host -H list ("node1:4" -> 4, "node1" -> 1); nullopt for several hosts.
std::optional<int> single_host_slots(const std::string& hosts) {
  if (hosts.empty() || hosts.find(',') != std::string::npos) return std::nullopt;
  size_t colon = hosts.rfind(':');
  if (colon == std::string::npos) return 1;
  try {
    return std::stoi(hosts.substr(colon + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Distinct host names in a -H list ("a:2,b:2,a" names two).
int count_hosts(const std::string& hosts) {
  std::set<std::string> names;
  size_t pos = 0;
  while (pos <= hosts.size()) {
    size_t comma = hosts.find(',', pos);
    std::string entry =
        hosts.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!entry.empty()) names.insert(entry.substr(0, entry.rfind(':')));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return static_cast<int>(names.size());
}

// Distinct host names in an Open MPI hostfile: the first word of each line, '#' starts a comment.
int count_hostfile_hosts(const std::string& path) {
  std::ifstream in(path);
  std::set<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string name;
    if (words >> name) names.insert(name);
  }
  return static_cast<int>(names.size());
}

// Across hosts, mpirun's daemons notice a silent peer (a pulled cable, a host that died) only
// through TCP keepalive, and Open MPI's defaults (300 s idle, 9 probes 20 s apart) leave a job
// hanging for minutes; these make it about 11 s (docs/multihost.md).
const std::pair<const char*, const char*> kMultiHostMca[] = {
    {"oob_tcp_keepalive_time", "5"},
    {"oob_tcp_keepalive_intvl", "2"},
    {"oob_tcp_keepalive_probes", "3"},
};

// Whether the user already set MCA parameter `name` (with --mca or --mpi-arg=--mca).
bool user_sets_mca(const RunCommandOptions& o, const std::string& name) {
  for (const auto& [given, value] : o.mca) {
    if (given == name) return true;
  }
  for (size_t i = 0; i + 1 < o.mpi_args.size(); ++i) {
    if ((o.mpi_args[i] == "--mca" || o.mpi_args[i] == "-mca") && o.mpi_args[i + 1] == name) {
      return true;
    }
  }
  return false;
}

// Signals to forward, delivered to the handler below.
volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_pending_signal = 0;

void forward_signal(int sig, siginfo_t* info, void*) {
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

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) out += (out.empty() ? "" : " ") + shell_quote(arg);
  return out;
}

int spawn_and_wait(const MpirunPlan& plan, bool verbose) {
  // mpirun's environment: ours, with the plan's variables set (replacing ours).
  std::set<std::string> replaced;
  for (const auto& [name, value] : plan.env) replaced.insert(name);
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    if (replaced.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : plan.env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = plan.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  if (verbose) std::cerr << "ranktime run: " << join_command(plan.argv) << "\n";
  install_forwarding();
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) {
    std::cerr << "ranktime run: cannot start " << plan.argv[0] << ": " << std::strerror(rc) << "\n";
    return 2;
  }
  g_child = pid;
  if (g_pending_signal != 0) ::kill(pid, g_pending_signal);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::cerr << "ranktime run: waitpid: " << std::strerror(errno) << "\n";
      return 1;
    }
  }
  g_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string shell_quote(const std::string& arg) {
  if (arg.empty()) return "''";
  bool plain = true;
  for (char c : arg) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./,:=+@%", c))) {
      plain = false;
      break;
    }
  }
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

MpirunPlan plan_mpirun(const RunCommandOptions& o, const std::string& mpirun,
                       const std::string& timeline_path, const HostFacts& host) {
  MpirunPlan plan;
  plan.argv.push_back(mpirun);
  if (host.is_root) {
    // Open MPI refuses to run as root unless told twice: a flag and two variables.
    plan.argv.push_back("--allow-run-as-root");
    plan.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
    plan.env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  plan.argv.push_back("-np");
  plan.argv.push_back(std::to_string(o.np));
  if (!o.hosts.empty()) {
    plan.argv.push_back("-H");
    plan.argv.push_back(o.hosts);
  }
  if (!o.hostfile.empty()) {
    plan.argv.push_back("--hostfile");
    plan.argv.push_back(o.hostfile);
  }
  // More ranks than one host has slots: Open MPI refuses unless told to oversubscribe.
  bool oversubscribe = o.oversubscribe;
  if (o.hostfile.empty()) {
    if (o.hosts.empty()) {
      oversubscribe = oversubscribe || o.np > host.local_slots;
    } else if (auto slots = single_host_slots(o.hosts)) {
      oversubscribe = oversubscribe || o.np > *slots;
    }
  }
  if (oversubscribe) plan.argv.push_back("--oversubscribe");
  // The runtime's background thread and the user's threads must not share one bound core.
  plan.argv.push_back("--bind-to");
  plan.argv.push_back("none");
  if (count_hosts(o.hosts) > 1 || host.hostfile_hosts > 1) {
    for (const auto& [name, value] : kMultiHostMca) {
      if (!user_sets_mca(o, name)) plan.argv.insert(plan.argv.end(), {"--mca", name, value});
    }
  }
  for (const auto& [name, value] : o.mca) plan.argv.insert(plan.argv.end(), {"--mca", name, value});
  for (const auto& arg : o.mpi_args) plan.argv.push_back(arg);

  if (!timeline_path.empty()) plan.rank_env.emplace_back("TIMELINE_FILENAME", timeline_path);
  if (o.timeline_mark_cycles) plan.rank_env.emplace_back("TIMELINE_MARK_CYCLES", "1");
  if (o.no_timeline_all_ranks) plan.rank_env.emplace_back("TIMELINE_ALL_RANKS", "0");
  if (!o.fusion_threshold_mb.empty()) {
    double mb = std::strtod(o.fusion_threshold_mb.c_str(), nullptr);
    plan.rank_env.emplace_back("RANKTIME_FUSION_THRESHOLD",
                               std::to_string(std::llround(mb * 1024.0 * 1024.0)));
  }
  for (const PassThroughNumber& n : kPassThroughNumbers) {
    if (!(o.*n.value).empty()) plan.rank_env.emplace_back(n.variable, o.*n.value);
  }
  if (!o.log_level.empty()) plan.rank_env.emplace_back("RANKTIME_LOG_LEVEL", o.log_level);
  for (const auto& [name, value] : plan.rank_env) {
    plan.argv.push_back("-x");
    plan.argv.push_back(name + "=" + value);
  }
  for (const auto& arg : o.command) plan.argv.push_back(arg);
  return plan;
}

CLI::App* add_run_command(CLI::App& app, RunCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run PROGRAM on N ranks through Open MPI's mpirun, with ranktime settings passed to "
      "every rank:\n  ranktime run -np 4 [options] -- PROGRAM ARGS...");
  cmd->add_option("-n,--np", o->np, "number of ranks (also -np N)")->required();
  auto* hosts = cmd->add_option("-H,--host", o->hosts, "hosts and slots: host1:2,host2:2");
  auto* hostfile = cmd->add_option("--hostfile", o->hostfile, "Open MPI hostfile");
  hosts->excludes(hostfile);
  cmd->add_option("--timeline-filename", o->timeline_filename,
                  "write the timeline here (TIMELINE_FILENAME; made absolute)");
  cmd->add_flag("--timeline-mark-cycles", o->timeline_mark_cycles,
                "cycle-start markers (TIMELINE_MARK_CYCLES=1)");
  cmd->add_flag("--no-timeline-all-ranks", o->no_timeline_all_ranks,
                "keep rank 0's processing lanes only (TIMELINE_ALL_RANKS=0)");
  cmd->add_option("--fusion-threshold-mb", o->fusion_threshold_mb,
                  "fusion buffer in MiB, 0 disables fusion (RANKTIME_FUSION_THRESHOLD, in bytes)");
  for (const PassThroughNumber& n : kPassThroughNumbers) {
    cmd->add_option(n.flag, o->*n.value, std::string(n.help) + " (" + n.variable + ")");
  }
  cmd->add_option("--log-level", o->log_level, "trace, debug, info, warning or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warning", "error"}));
  cmd->add_option("--mpirun", o->mpirun, "mpirun to use (default: the one on PATH)");
  cmd->add_flag("--oversubscribe", o->oversubscribe,
                "let Open MPI run more ranks than slots (automatic on one host with more ranks "
                "than cores)");
  cmd->add_option("--mca", o->mca,
                  "an Open MPI setting for mpirun: --mca NAME VALUE (repeat); with more than one "
                  "host, oob_tcp_keepalive_* are set unless given here")
      ->allow_extra_args(false);
  cmd->add_option("--mpi-arg", o->mpi_args,
                  "an argument for mpirun itself, as it is (repeat; write --mpi-arg=--mca)")
      ->allow_extra_args(false);
  cmd->add_flag("--dry-run", o->dry_run, "print the mpirun command and environment, run nothing");
  cmd->add_flag("--verbose", o->verbose, "print the mpirun command before running it");
  cmd->add_option("command", o->command, "PROGRAM ARGS... (after --)");
  return cmd;
}

int run_run(RunCommandOptions& o) {
  std::string timeline_path;
  std::string mpirun;
  try {
    if (o.np < 1) throw InputError{"-np must be at least 1 (got " + std::to_string(o.np) + ")"};
    if (!o.hostfile.empty() && !fs::is_regular_file(o.hostfile)) {
      throw InputError{"--hostfile " + o.hostfile + ": no such file"};
    }
    validate_number("--fusion-threshold-mb", o.fusion_threshold_mb, false);
    for (const PassThroughNumber& n : kPassThroughNumbers) {
      validate_number(n.flag, o.*n.value, n.positive);
    }
    for (const auto& [name, value] : o.mca) validate_mca(name, value);
    if (!o.timeline_filename.empty()) timeline_path = check_timeline_path(o.timeline_filename);
    if (o.command.empty()) {
      throw InputError{"no program to run: ranktime run -np N [options] -- PROGRAM ARGS..."};
    }
    if (!find_program(o.command[0])) {
      throw InputError{o.command[0].find('/') != std::string::npos
                           ? "program " + o.command[0] + " does not exist or is not executable"
                           : "program " + o.command[0] + " not found on PATH"};
    }
    if (!o.mpirun.empty()) {
      if (!is_executable_file(o.mpirun)) {
        throw InputError{"--mpirun " + o.mpirun + ": does not exist or is not executable"};
      }
      mpirun = absolute_path(o.mpirun);
    } else {
      auto found = find_program("mpirun");
      if (!found) {
        throw InputError{"mpirun not found on PATH: install Open MPI or pass --mpirun PATH"};
      }
      mpirun = absolute_path(*found);
    }
  } catch (const InputError& e) {
    std::cerr << "ranktime run: error: " << e.message << "\n";
    return 2;
  }

  HostFacts host;
  host.is_root = ::geteuid() == 0;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  host.local_slots = cores > 0 ? static_cast<int>(cores) : 1;
  if (!o.hostfile.empty()) host.hostfile_hosts = count_hostfile_hosts(o.hostfile);
  MpirunPlan plan = plan_mpirun(o, mpirun, timeline_path, host);

  if (o.dry_run) {
    std::cout << "# environment added for mpirun\n";
    for (const auto& [name, value] : plan.env) std::cout << shell_quote(name + "=" + value) << "\n";
    std::cout << "# environment of every rank (-x)\n";
    for (const auto& [name, value] : plan.rank_env) {
      std::cout << shell_quote(name + "=" + value) << "\n";
    }
    std::cout << "# command\n" << join_command(plan.argv) << "\n";
    return 0;
  }
  return spawn_and_wait(plan, o.verbose);
}

}  // namespace ranktime::cli
