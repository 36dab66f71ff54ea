// The hosts of an elastic job (`ranktime run --host-discovery-script`), as pure functions: the
// discovery script's output, Horovod's blacklist with its cooldown, the hosts each attempt runs
// on, and which hosts a failed attempt's messages name. No I/O, no clock: tests call them.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ranktime::cli {

struct DiscoveredHost {
  std::string name;
  int slots = 1;
};

struct DiscoveryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The script's output, horovodrun's format: one host a line, `HOST` (default_slots slots) or
// `HOST:SLOTS`; blank lines are skipped. Throws DiscoveryError naming the line (number and text,
// quoted) for a name that is not a host name, a bad slot count or a host named twice.
std::vector<DiscoveredHost> parse_discovered_hosts(const std::string& output, int default_slots);

// Whether `name` is a host name (letters, digits, '.', '-', '_'; not starting with '-' or '.').
bool is_host_name(const std::string& name);

// Horovod's blacklist (horovod/runner/elastic/discovery.py, HostState): a failed host is left out
// of later attempts. Without a cooldown range it is left out for good; with one, for
// clamp(MIN * 2^n + u * MIN, MIN, MAX) seconds after its n-th failure (u uniform in [0, 1)), so a
// host that keeps failing waits longer each time, and then it is used again.
class HostBlacklist {
 public:
  explicit HostBlacklist(std::optional<std::pair<double, double>> cooldown_range)
      : cooldown_(cooldown_range) {}
  // `host` failed at `now_s` (any monotonic seconds); `uniform01` is the random part.
  void add(const std::string& host, double now_s, double uniform01);
  bool excludes(const std::string& host, double now_s) const;
  // The hosts left out at `now_s`, for messages.
  std::vector<std::string> excluded(double now_s) const;

 private:
  struct Entry {
    std::string host;
    int failures = 0;
    double until_s = 0;  // unused without a cooldown range
  };
  std::optional<std::pair<double, double>> cooldown_;
  std::vector<Entry> entries_;
};

struct AttemptHosts {
  std::string host_list;           // mpirun's -H: "h0:1,h1:2"
  int np = 0;                      // ranks
  std::vector<std::string> names;  // hosts that get ranks, in discovery order
};

// The next attempt's hosts: those found and not excluded, in discovery order, filled up to
// max_np ranks; nullopt when they have fewer than min_np slots.
std::optional<AttemptHosts> choose_hosts(const std::vector<DiscoveredHost>& found,
                                         const HostBlacklist& blacklist, double now_s, int min_np,
                                         int max_np);

// The hosts among `candidates` that mpirun's or ranktime's messages name as failed: a rank that
// died there, a daemon mpirun lost, a host ranktime could not reach, a host a launch could not
// connect to. Hosts the messages only mention in passing are not taken.
std::vector<std::string> failed_hosts(const std::string& messages,
                                      const std::vector<std::string>& candidates);

// Attempt k's timeline: t.json for attempt 0, t.attempt1.json, t.attempt2.json.gz, ...
std::string attempt_trace_path(const std::string& path, int attempt);

}  // namespace ranktime::cli
