// Reading an elastic job's attempts onto one time axis (see attempts.h).
#include "attempts.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include "ranktime/timeline/trace_names.h"
#include "ranktime/timeline/trace_reader.h"

namespace ranktime::cli {
namespace {

// Rank 0's STEP slices are on pid 0, thread 1; its regions in its own process (trace_names.h).
constexpr int64_t kRank0RegionsPid = timeline::rank_process_pid(0);
constexpr const char* kCommitRegion = "elastic.commit";

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", s);
  return text;
}

}  // namespace

int attempt_of(const std::string& path) {
  static const std::regex kName(R"(\.attempt(\d{1,6})(\.\d+)?\.json(\.gz)?$)");
  std::smatch m;
  return std::regex_search(path, m, kName) ? std::stoi(m[1].str()) : 0;
}

std::vector<std::vector<std::string>> split_attempts(const std::vector<std::string>& paths) {
  std::map<int, std::vector<std::string>> by_attempt;
  for (const auto& p : paths) by_attempt[attempt_of(p)].push_back(p);
  std::vector<std::vector<std::string>> groups;
  for (auto& [number, group] : by_attempt) groups.push_back(std::move(group));
  return groups;
}

bool read_attempts(const std::vector<std::vector<std::string>>& groups,
                   std::vector<Attempt>* attempts, std::string* error) {
  double first_start_us = 0;
  for (const auto& group : groups) {
    Attempt a;
    a.number = attempt_of(group.front());
    a.paths = group;
    double start_us = -1;
    double end_us = 0;
    double first_step_us = -1;
    double last_commit_us = -1;
    std::vector<double> step_ends_us;
    for (const auto& path : group) {
      auto read = timeline::read_trace_file(path, [&](const timeline::TraceEvent& e) {
        end_us = std::max(end_us, e.ts + e.dur);
        if (e.name == "ranktime_run" && e.pid == 0 && e.args.is_object() && start_us < 0) {
          start_us = e.args.value("start_time_since_epoch_in_micros", 0.0);
          for (const auto& h : e.args.value("hostnames", nlohmann::json::array())) {
            if (h.is_string() && std::find(a.hosts.begin(), a.hosts.end(), h) == a.hosts.end())
              a.hosts.push_back(h.get<std::string>());
          }
          const auto config = e.args.value("config", nlohmann::json::object());
          a.restart_reason = config.value("RANKTIME_ELASTIC_RESTART_REASON", "");
        } else if (e.phase() == 'X' && e.pid == 0 && e.tid == 1 && e.name == "STEP") {
          if (first_step_us < 0 || e.ts < first_step_us) first_step_us = e.ts;
          step_ends_us.push_back(e.ts + e.dur);
        } else if (e.pid == kRank0RegionsPid && e.tid == timeline::kRegionsThreadTid &&
                   e.name == kCommitRegion) {
          // The reader hands a region's complete slice on as a B and an E (trace_reader.h).
          if (e.phase() == 'E') last_commit_us = std::max(last_commit_us, e.ts);
        }
        return true;
      });
      if (!read.opened) {
        *error = read.error;
        return false;
      }
    }
    if (start_us < 0) {
      *error = group.front() + ": no ranktime_run metadata";
      return false;
    }
    if (attempts->empty()) first_start_us = start_us;
    const double offset_s = (start_us - first_start_us) / 1e6;
    a.start_s = offset_s;
    a.end_s = offset_s + end_us / 1e6;
    if (first_step_us >= 0) a.first_step_s = offset_s + first_step_us / 1e6;
    if (last_commit_us >= 0) {
      a.last_commit_s = offset_s + last_commit_us / 1e6;
      a.steps_after_commit = static_cast<int>(std::count_if(
          step_ends_us.begin(), step_ends_us.end(), [&](double t) { return t > last_commit_us; }));
    }
    attempts->push_back(std::move(a));
  }
  return true;
}

std::vector<std::string> restart_lines(const std::vector<Attempt>& attempts) {
  std::vector<std::string> lines;
  for (size_t i = 1; i < attempts.size(); ++i) {
    const Attempt& before = attempts[i - 1];
    const Attempt& after = attempts[i];
    std::vector<std::string> lost;
    for (const auto& h : before.hosts) {
      if (std::find(after.hosts.begin(), after.hosts.end(), h) == after.hosts.end())
        lost.push_back(h);
    }
    std::string line = "restart " + std::to_string(i) + " (attempt " +
                       std::to_string(before.number) + " -> " + std::to_string(after.number) +
                       "): ";
    if (!lost.empty()) {
      line += "lost host";
      for (size_t k = 0; k < lost.size(); ++k) line += (k == 0 ? " " : ", ") + lost[k];
      line += " at " + seconds(before.end_s) + "; ";
    }
    const double resumed = after.first_step_s >= 0 ? after.first_step_s : after.end_s;
    line += "restart took " + seconds(resumed - before.end_s) + " (attempt " +
            std::to_string(before.number) + "'s last event to attempt " +
            std::to_string(after.number) + "'s first step)";
    if (before.last_commit_s >= 0) {
      line += "; " + std::to_string(before.steps_after_commit) + " step" +
              (before.steps_after_commit == 1 ? "" : "s") + " and " +
              seconds(before.end_s - before.last_commit_s) + " since the last commit redone";
    }
    lines.push_back(line + "; reason: " + after.restart_reason);
  }
  return lines;
}

nlohmann::json attempts_json(const std::vector<Attempt>& attempts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : attempts) {
    out.push_back({{"attempt", a.number},
                   {"files", a.paths},
                   {"hosts", a.hosts},
                   {"restart_reason", a.restart_reason},
                   {"start_s", a.start_s},
                   {"end_s", a.end_s},
                   {"first_step_s", a.first_step_s},
                   {"last_commit_s", a.last_commit_s},
                   {"steps_after_commit", a.steps_after_commit}});
  }
  return out;
}

}  // namespace ranktime::cli
