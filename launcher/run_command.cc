// `ranktime run`: validate everything before starting anything, build mpirun's argument vector,
// start it (mpirun_job.h) and return its status.
#include "run_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include <variant>

#include "core/settings.h"
#include "inspection/lane_choice.h"
#include "mpirun_job.h"

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
std::string check_timeline_path(const char* flag_name, const std::string& given) {
  const std::string path = absolute_path(given);
  const std::string flag = flag_name + (" " + given);
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

bool is_number(const Setting& s) {
  return std::holds_alternative<int64_t Config::*>(s.field) ||
         std::holds_alternative<double Config::*>(s.field);
}

// `ranktime run --flag` for setting `s`, with its help line saying which variable it sets.
void add_setting_flag(CLI::App* cmd, const Setting& s, RunCommandOptions* o) {
  const std::string var = s.variable;
  switch (s.flag_form) {
    case FlagForm::kNone:
      return;
    case FlagForm::kSwitch:
      cmd->add_flag_callback(
          s.flag, [o, var, value = std::string(s.switch_value)] { o->settings[var] = value; },
          std::string(s.flag_help) + " (" + var + "=" + s.switch_value + ")");
      return;
    case FlagForm::kPath:
      cmd->add_option(s.flag, o->settings[var],
                      std::string(s.flag_help) + " (" + var + "; made absolute)");
      return;
    case FlagForm::kMebibytes:
      cmd->add_option(s.flag, o->settings[var],
                      std::string(s.flag_help) + " (" + var + ", in bytes)");
      return;
    case FlagForm::kValue:
      cmd->add_option(s.flag, o->settings[var], std::string(s.flag_help) + " (" + var + ")");
      return;
  }
}

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

// A value the runtime would refuse at start-up (TIMELINE_STEPS, TIMELINE_RANKS), refused here.
void validate_value(const Setting& s, const std::string& value, Config* config) {
  try {
    s.parse(value, config);
  } catch (const ConfigError& e) {
    throw InputError{std::string(s.flag) + " " + value + ": " + e.what()};
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
  // Each rank keeps two threads busy (the user's and ranktime's background thread, which waits
  // inside MPI's blocking collectives by spinning). When those outnumber this host's cores, a
  // spinning rank takes the core the rank it waits for needs, and small collectives take
  // milliseconds instead of microseconds (docs/benchmarks.md, DDP); yielding while idle avoids it.
  if (o.hosts.empty() && o.hostfile.empty() && o.np > 1 && 2 * o.np > host.local_slots &&
      !user_sets_mca(o, "mpi_yield_when_idle")) {
    plan.argv.insert(plan.argv.end(), {"--mca", "mpi_yield_when_idle", "1"});
  }
  if (count_hosts(o.hosts) > 1 || host.hostfile_hosts > 1) {
    for (const auto& [name, value] : kMultiHostMca) {
      if (!user_sets_mca(o, name)) plan.argv.insert(plan.argv.end(), {"--mca", name, value});
    }
  }
  if (!o.network_interfaces.empty()) {
    std::string list;
    for (const auto& nic : o.network_interfaces) list += (list.empty() ? "" : ",") + nic;
    for (const char* name : {"btl_tcp_if_include", "oob_tcp_if_include"})
      plan.argv.insert(plan.argv.end(), {"--mca", name, list});
  }
  if (!o.output_filename.empty()) {
    plan.argv.insert(plan.argv.end(), {"--output-filename", o.output_filename});
  }
  for (const auto& [name, value] : o.mca) plan.argv.insert(plan.argv.end(), {"--mca", name, value});
  for (const auto& arg : o.mpi_args) plan.argv.push_back(arg);

  for (const Setting& s : settings()) {
    auto given = o.settings.find(s.variable);
    if (given == o.settings.end() || given->second.empty()) continue;
    std::string value = given->second;
    if (s.flag_form == FlagForm::kPath) {
      value = timeline_path;
    } else if (s.flag_form == FlagForm::kMebibytes) {
      const double mb = std::strtod(value.c_str(), nullptr);
      value = std::to_string(std::llround(mb * 1024.0 * 1024.0));
    }
    if (!value.empty()) plan.rank_env.emplace_back(s.variable, value);
  }
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
  cmd->add_option("-n,--np,--num-proc", o->np, "number of ranks (also -np N)")->required();
  auto* hosts = cmd->add_option("-H,--host,--hosts", o->hosts, "hosts and slots: host1:2,host2:2");
  auto* hostfile = cmd->add_option("--hostfile", o->hostfile, "Open MPI hostfile (also -hostfile)");
  cmd->add_option("--network-interface,--network-interfaces", o->network_interfaces,
                  "the network interface(s) MPI may use across hosts, as horovodrun's: repeat, or "
                  "a comma-separated list (mpirun's btl_tcp_if_include and oob_tcp_if_include)")
      ->allow_extra_args(false)
      ->delimiter(',');
  cmd->add_option("--output-filename", o->output_filename,
                  "mpirun writes each rank's output under this directory (as horovodrun with MPI)");
  hosts->excludes(hostfile);
  for (const Setting& s : settings()) add_setting_flag(cmd, s, o);
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
  add_elastic_flags(cmd, &o->elastic);
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
    // Numbers and other values first, then the timeline's path.
    Config given_config;
    for (const FlagForm form : {FlagForm::kMebibytes, FlagForm::kValue, FlagForm::kPath}) {
      for (const Setting& s : settings()) {
        auto given = o.settings.find(s.variable);
        if (s.flag_form != form || given == o.settings.end() || given->second.empty()) continue;
        if (form == FlagForm::kPath) {
          timeline_path = check_timeline_path(s.flag, given->second);
        } else if (is_number(s)) {
          validate_number(s.flag, given->second, s.positive());
        } else {
          validate_value(s, given->second, &given_config);
        }
      }
    }
    try {
      check_lane_ranks(given_config.timeline_ranks, o.np);
    } catch (const ConfigError& e) {
      throw InputError{std::string("--timeline-ranks: ") + e.what()};
    }
    for (const auto& [name, value] : o.mca) validate_mca(name, value);
    for (const auto& nic : o.network_interfaces) {
      const bool ok = !nic.empty() && std::all_of(nic.begin(), nic.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_.:-/", c) != nullptr;
      });
      if (!ok) throw InputError{"--network-interface '" + nic + "': not an interface name"};
    }
    if (!o.output_filename.empty()) o.output_filename = absolute_path(o.output_filename);
    if (const std::string problem = check_elastic_options(o); !problem.empty()) {
      throw InputError{problem};
    }
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
  if (o.elastic.enabled()) return run_elastic(o, mpirun, timeline_path, host);
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
  JobRun run;
  run.verbose = o.verbose;
  return run_mpirun_job(std::move(plan), o.command.size(), run).status;
}

}  // namespace ranktime::cli
