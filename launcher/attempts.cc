// Reading an elastic job's attempts onto one time axis (see attempts.h).
#include "attempts.h"

#include <algorithm>
#include <cmath>
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

bool read_elastic_set(std::vector<std::string>* paths, std::vector<Attempt>* attempts,
                      std::string* error) {
  const auto groups = split_attempts(*paths);
  if (groups.size() < 2) return true;
  if (!read_attempts(groups, attempts, error)) return false;
  *paths = groups.back();
  return true;
}

std::vector<Restart> restarts_of(const std::vector<Attempt>& attempts) {
  std::vector<Restart> restarts;
  for (size_t i = 1; i < attempts.size(); ++i) {
    const Attempt& before = attempts[i - 1];
    const Attempt& after = attempts[i];
    Restart r;
    r.before = before.number;
    r.after = after.number;
    for (const auto& h : before.hosts) {
      if (std::find(after.hosts.begin(), after.hosts.end(), h) == after.hosts.end())
        r.lost_hosts.push_back(h);
    }
    r.lost_at_s = before.end_s;
    r.took_s = (after.first_step_s >= 0 ? after.first_step_s : after.end_s) - before.end_s;
    r.committed = before.last_commit_s >= 0;
    if (r.committed) {
      r.steps_redone = before.steps_after_commit;
      r.redone_s = before.end_s - before.last_commit_s;
    }
    r.reason = after.restart_reason;
    restarts.push_back(std::move(r));
  }
  return restarts;
}

std::vector<std::string> restart_lines(const std::vector<Attempt>& attempts) {
  std::vector<std::string> lines;
  int n = 0;
  for (const Restart& r : restarts_of(attempts)) {
    const std::string before = std::to_string(r.before), after = std::to_string(r.after);
    std::string line =
        "restart " + std::to_string(++n) + " (attempt " + before + " -> " + after + "): ";
    if (!r.lost_hosts.empty()) {
      line += "lost host";
      for (size_t k = 0; k < r.lost_hosts.size(); ++k)
        line += (k == 0 ? " " : ", ") + r.lost_hosts[k];
      line += " at " + seconds(r.lost_at_s) + "; ";
    }
    line += "restart took " + seconds(r.took_s) + " (attempt " + before +
            "'s last event to attempt " + after + "'s first step)";
    if (r.committed) {
      line += "; " + std::to_string(r.steps_redone) + " step" + (r.steps_redone == 1 ? "" : "s") +
              " and " + seconds(r.redone_s) + " since the last commit redone";
    }
    lines.push_back(line + "; reason: " + r.reason);
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

nlohmann::json restarts_json(const std::vector<Restart>& restarts) {
  nlohmann::json out = nlohmann::json::array();
  for (const Restart& r : restarts) {
    out.push_back({{"before", r.before},
                   {"after", r.after},
                   {"lost_hosts", r.lost_hosts},
                   {"lost_at_s", r.lost_at_s},
                   {"took_s", r.took_s},
                   {"steps_redone", r.committed ? nlohmann::json(r.steps_redone) : nullptr},
                   {"redone_s", r.committed ? nlohmann::json(r.redone_s) : nullptr},
                   {"reason", r.reason}});
  }
  return out;
}

Table attempts_table(const std::vector<Attempt>& attempts) {
  Table t{"attempts",
          "attempts: each on the first one's clock; lost_hosts, steps_redone and redone_s (the "
          "work after its last commit) and restart_s (to the next attempt's first step) say how "
          "it ended",
          {},
          {},
          "not an elastic job's attempts"};
  t.columns = {{"attempt"},     {"start_s", 2},  {"end_s", 2},         {"hosts"},
               {"reason"},      {"lost_hosts"},  {"last_commit_s", 2}, {"steps_redone"},
               {"redone_s", 2}, {"restart_s", 2}};
  const std::vector<Restart> restarts = restarts_of(attempts);
  const double none = std::nan("");
  auto joined = [](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
    return text;
  };
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    std::vector<Cell> row = {int64_t{a.number},
                             a.start_s,
                             a.end_s,
                             joined(a.hosts),
                             a.restart_reason,
                             std::string(),
                             a.last_commit_s >= 0 ? a.last_commit_s : none};
    if (i < restarts.size()) {  // the restart after it
      const Restart& r = restarts[i];
      row[5] = joined(r.lost_hosts);
      row.push_back(r.committed ? Cell(int64_t{r.steps_redone}) : Cell(none));
      row.push_back(r.committed ? r.redone_s : none);
      row.push_back(r.took_s);
    } else {
      row.insert(row.end(), {Cell(none), Cell(none), Cell(none)});
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

}  // namespace ranktime::cli
