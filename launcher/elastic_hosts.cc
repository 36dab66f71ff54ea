// Discovery output, blacklist, host choice and failed-host detection for the elastic loop.
#include "elastic_hosts.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <regex>
#include <sstream>

#include "ranktime/timeline/trace_paths.h"

namespace ranktime::cli {

bool is_host_name(const std::string& name) {
  if (name.empty() || name.size() > 253 || name[0] == '-' || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

namespace {

// A line of the script's output as a message may show it: quoted, unprintable bytes escaped.
std::string quoted_line(const std::string& line) {
  std::string out = "'";
  for (char c : line.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\'' || c == '\\') {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + (line.size() > 200 ? "...'" : "'");
}

}  // namespace

std::vector<DiscoveredHost> parse_discovered_hosts(const std::string& output, int default_slots) {
  std::vector<DiscoveredHost> hosts;
  std::istringstream lines(output);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const std::string text = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    const std::string where = "line " + std::to_string(number) + " " + quoted_line(line);
    DiscoveredHost host;
    host.name = text.substr(0, text.find(':'));
    host.slots = default_slots;
    if (text.find(':') != std::string::npos) {
      const std::string slots = text.substr(text.find(':') + 1);
      auto [end, ec] = std::from_chars(slots.data(), slots.data() + slots.size(), host.slots);
      if (slots.empty() || ec != std::errc() || end != slots.data() + slots.size() ||
          host.slots < 1) {
        throw DiscoveryError(where + ": expected HOST or HOST:SLOTS with SLOTS >= 1");
      }
    }
    if (!is_host_name(host.name)) {
      throw DiscoveryError(where + ": not a host name (letters, digits, '.', '-', '_')");
    }
    for (const auto& seen : hosts) {
      if (seen.name == host.name) throw DiscoveryError(where + ": host named twice");
    }
    hosts.push_back(host);
  }
  return hosts;
}

void HostBlacklist::add(const std::string& host, double now_s, double uniform01) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.host == host; });
  if (it == entries_.end()) it = entries_.insert(entries_.end(), Entry{host, 0, 0});
  if (!cooldown_ || it->until_s > now_s) return;  // still cooling down: as Horovod, no longer
  const auto [low, high] = *cooldown_;
  ++it->failures;
  const double delay = low * std::ldexp(1.0, std::min(it->failures, 30)) + uniform01 * low;
  it->until_s = now_s + std::max(low, std::min(high, delay));
}

bool HostBlacklist::excludes(const std::string& host, double now_s) const {
  for (const auto& e : entries_) {
    if (e.host == host) return !cooldown_ || e.until_s > now_s;
  }
  return false;
}

std::vector<std::string> HostBlacklist::excluded(double now_s) const {
  std::vector<std::string> out;
  for (const auto& e : entries_) {
    if (excludes(e.host, now_s)) out.push_back(e.host);
  }
  return out;
}

std::optional<AttemptHosts> choose_hosts(const std::vector<DiscoveredHost>& found,
                                         const HostBlacklist& blacklist, double now_s, int min_np,
                                         int max_np) {
  AttemptHosts chosen;
  for (const auto& host : found) {
    if (blacklist.excludes(host.name, now_s) || chosen.np >= max_np) continue;
    const int ranks = std::min(host.slots, max_np - chosen.np);
    chosen.host_list +=
        (chosen.host_list.empty() ? "" : ",") + host.name + ":" + std::to_string(ranks);
    chosen.np += ranks;
    chosen.names.push_back(host.name);
  }
  if (chosen.np < min_np) return std::nullopt;
  return chosen;
}

std::vector<std::string> failed_hosts(const std::string& messages,
                                      const std::vector<std::string>& candidates) {
  // Open MPI: a rank that died, a daemon it lost, a launch that could not connect (ssh's and the
  // emulated hosts' agent's words); ranktime: a host whose ranks all went silent, and a silent
  // rank 0 named by the ranks that gave up on it.
  static const std::regex kPatterns[] = {
      std::regex(R"(on node (\S+) exited on signal)"),
      std::regex(R"(Remote daemon: \S+ on node (\S+))"),
      std::regex(R"(connect to host (\S+))"),
      std::regex(R"(host (\S+) \(ranks? [0-9, ]+\) cannot be reached)"),
      std::regex(R"(rank 0 \(host (\S+), pid \d+\) has sent nothing)"),
  };
  std::vector<std::string> failed;
  for (const auto& pattern : kPatterns) {
    for (std::sregex_iterator it(messages.begin(), messages.end(), pattern), end; it != end; ++it) {
      const std::string host = (*it)[1].str();
      if (std::find(candidates.begin(), candidates.end(), host) != candidates.end() &&
          std::find(failed.begin(), failed.end(), host) == failed.end()) {
        failed.push_back(host);
      }
    }
  }
  return failed;
}

std::string attempt_trace_path(const std::string& path, int attempt) {
  return attempt == 0 ? path : timeline::tagged_path(path, "attempt" + std::to_string(attempt));
}

}  // namespace ranktime::cli
