// The report page: the summary's tables and the per-step matrices as JSON, inside an HTML shell
// whose only script and style are the ones built in (report/report.js, report/report.css).
#include "report_html.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "cause_tables.h"
#include "report_assets.h"
#include "report_table.h"
#include "summary_tables.h"

#ifndef RANKTIME_VERSION
#define RANKTIME_VERSION "unknown"
#endif

namespace ranktime::cli {
namespace {

using nlohmann::json;
using timeline::Summary;

// Three decimals are plenty for the page and keep it small.
json rounded(double v) {
  if (!std::isfinite(v)) return nullptr;
  return std::round(v * 1000.0) / 1000.0;
}

json numbers(const std::vector<double>& values) {
  json out = json::array();
  for (double v : values) out.push_back(rounded(v));
  return out;
}

std::string utc_time(int64_t epoch_us) {
  if (epoch_us <= 0) return "";
  const std::time_t seconds = static_cast<std::time_t>(epoch_us / 1000000);
  std::tm tm{};
  if (gmtime_r(&seconds, &tm) == nullptr) return "";
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &tm);
  return buffer;
}

int rank_count(const Summary& s) {
  size_t n = static_cast<size_t>(std::max(0, s.run.ranks));
  for (const auto& step : s.steps) n = std::max(n, step.ranks.size());
  for (const auto& row : s.lateness) n = std::max(n, static_cast<size_t>(row.rank) + 1);
  return static_cast<int>(n);
}

json run_json(const ReportInput& in, const Summary& s) {
  const timeline::RunInfo& run = s.run;
  json config = json::array();
  for (const auto& [key, value] : run.config) config.push_back({key, value});
  return {{"ranks", run.ranks},
          {"hostnames", run.hostnames},
          {"wall_ms", rounded(s.wall_us / 1e3)},
          {"events", in.events},
          {"negotiations", s.negotiations},
          {"rank_lanes", s.rank_lanes},
          {"closed_cleanly", run.has_run_end},
          {"truncated", in.truncated},
          {"error", in.error},
          {"events_dropped", run.events_dropped},
          {"start_time", utc_time(run.start_time_since_epoch_us)},
          {"clock_offsets_us", numbers(run.clock_offsets_us)},
          {"clock_uncertainty_us", numbers(run.clock_uncertainty_us)},
          {"final_clock_offsets_us", numbers(run.final_clock_offsets_us)},
          {"final_clock_uncertainty_us", numbers(run.final_clock_uncertainty_us)},
          {"config", std::move(config)},
          {"steps", s.steps.size()},
          {"steps_from", s.steps_from_marks ? "step marks" : "negotiation order"},
          {"waited_pct", rounded(s.rank_wall_us > 0 ? 100.0 * s.waited_us / s.rank_wall_us : 0.0)}};
}

// Ranks x step columns; more than kMaxHeatColumns steps are grouped (largest lag, summed waits).
json heat_json(const Summary& s, int ranks) {
  const size_t steps = s.steps.size();
  const size_t group = std::max<size_t>(1, (steps + kMaxHeatColumns - 1) / kMaxHeatColumns);
  json columns = json::array();
  std::vector<json> lag(ranks, json::array()), start(ranks, json::array()),
      caused(ranks, json::array()), waited(ranks, json::array());
  for (size_t first = 0; first < steps; first += group) {
    const size_t last = std::min(steps, first + group) - 1;
    const int64_t a = s.steps[first].step, b = s.steps[last].step;
    columns.push_back(
        {{"label", a == b ? std::to_string(a) : std::to_string(a) + "\u2013" + std::to_string(b)},
         {"first", a},
         {"last", b}});
    for (int r = 0; r < ranks; ++r) {
      double max_lag = -1, max_start = -1, sum_caused = 0, sum_waited = 0;
      for (size_t i = first; i <= last; ++i) {
        const auto& cells = s.steps[i].ranks;
        if (static_cast<size_t>(r) >= cells.size()) continue;
        max_lag = std::max(max_lag, cells[r].ready_lag_us);
        max_start = std::max(max_start, cells[r].start_lag_us);
        sum_caused += cells[r].caused_wait_us;
        sum_waited += cells[r].waited_us;
      }
      lag[r].push_back(max_lag < 0 ? json(nullptr) : rounded(max_lag / 1e3));
      start[r].push_back(max_start < 0 ? json(nullptr) : rounded(max_start / 1e3));
      caused[r].push_back(rounded(sum_caused / 1e3));
      waited[r].push_back(rounded(sum_waited / 1e3));
    }
  }
  json rank_ids = json::array();
  for (int r = 0; r < ranks; ++r) rank_ids.push_back(r);
  return {{"columns", std::move(columns)},
          {"group", group},
          {"ranks", std::move(rank_ids)},
          {"steps_from", s.steps_from_marks ? "from the step marks"
                                            : "no step marks: step n is each tensor's n-th "
                                              "negotiation"},
          {"ready_lag_ms", lag},
          {"start_lag_ms", start},
          {"others_waited_ms", caused},
          {"waited_ms", waited}};
}

json phases_by_rank_json(const Summary& s, int ranks) {
  json rows = json::array();
  for (const timeline::PhaseStat& p : s.phases) {
    if (p.negotiation) continue;
    json busy = json::array(), share = json::array();
    for (int r = 0; r < ranks; ++r) {
      // A rank whose lanes were not written (TIMELINE_RANKS) has no figure, not 0%.
      const bool seen = static_cast<size_t>(r) < p.busy_us_by_rank.size() &&
                        std::binary_search(s.lane_ranks.begin(), s.lane_ranks.end(), r);
      const double us = seen ? p.busy_us_by_rank[r] : 0;
      busy.push_back(seen ? rounded(us / 1e3) : json(nullptr));
      share.push_back(seen && s.wall_us > 0 ? rounded(100.0 * us / s.wall_us) : json(nullptr));
    }
    rows.push_back({{"op", p.op},
                    {"phase", p.phase},
                    {"sub", p.phase != p.op},
                    {"busy_ms", std::move(busy)},
                    {"share_pct", std::move(share)}});
  }
  json rank_ids = json::array();
  for (int r = 0; r < ranks; ++r) rank_ids.push_back(r);
  return {{"ranks", std::move(rank_ids)}, {"rows", std::move(rows)}};
}

}  // namespace

// The late ranks by region: each cell the region's mean excess per late step of the rank, and
// the profiler's operators in it that took longer (a merged trace's).
json causes_view_json(const timeline::Causes& c, size_t k) {
  std::vector<int> ranks;
  std::vector<std::string> regions;
  for (const timeline::Cause& x : c.causes) {
    if (std::find(ranks.begin(), ranks.end(), x.rank) == ranks.end()) ranks.push_back(x.rank);
    if (std::find(regions.begin(), regions.end(), x.region) == regions.end()) {
      regions.push_back(x.region);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  json excess = json::array(), lateness = json::array(), steps = json::array(),
       operators = json::array();
  auto find = [&](int rank, const std::string* region) {
    return std::find_if(c.causes.begin(), c.causes.end(), [&](const timeline::Cause& x) {
      return x.rank == rank && (region == nullptr || x.region == *region);
    });
  };
  for (int r : ranks) {
    const timeline::Cause& any = *find(r, nullptr);  // a rank's lateness is its every row's
    lateness.push_back(rounded(any.lateness_us / 1e3));
    steps.push_back({any.steps, any.compared_steps});
    json row = json::array(), row_operators = json::array();
    for (const std::string& region : regions) {
      auto it = find(r, &region);
      row.push_back(it == c.causes.end() ? json(nullptr) : rounded(it->excess_us / 1e3));
      row_operators.push_back(it == c.causes.end() ? json::array() : operators_json(it->operators));
    }
    excess.push_back(std::move(row));
    operators.push_back(std::move(row_operators));
  }
  json out;
  out["has_regions"] = c.has_regions;
  out["line"] = cause_line(c, timeline::CauseOptions{});
  out["ranks"] = ranks;
  out["regions"] = regions;
  out["excess_ms"] = std::move(excess);
  out["operators"] = std::move(operators);  // per rank, per region: [{"name", "excess_ms"}]
  out["lateness_ms"] = std::move(lateness);
  out["steps"] = std::move(steps);
  out["table"] = to_json_columns(causes_table(c, k));
  return out;
}

json report_data(const ReportInput& in) {
  const Summary& s = *in.summary;
  const int ranks = rank_count(s);
  json data;
  data["generator"] = std::string("ranktime ") + RANKTIME_VERSION;
  data["files"] = in.paths;
  data["run"] = run_json(in, s);
  data["slowest_rank"] = s.slowest_rank >= 0 ? json(s.slowest_rank) : json(nullptr);
  data["cost_line"] = cost_line(s);
  data["replay_line"] = replay_line(s);
  data["cost"] = to_json_columns(cost_table(s));
  data["cost_steps"] = to_json_columns(cost_steps_table(s));
  data["summary_line"] = slowest_line(s);
  data["waiting_line"] = waiting_line(s);
  data["lateness"] = to_json_columns(lateness_table(s));
  data["time"] = to_json_columns(time_table(s));
  data["top_wait"] = to_json_columns(top_wait_table(s, in.top_k));
  data["top_processing"] = to_json_columns(top_processing_table(s, in.top_k));
  data["fusion"] = to_json_columns(fusion_table(s));
  data["bandwidth"] = to_json_columns(bandwidth_table(s));
  data["cycles"] = to_json_columns(cycles_table(s));
  data["steps"] = to_json_columns(steps_table(s));
  data["heat"] = heat_json(s, ranks);
  data["phases_by_rank"] = phases_by_rank_json(s, ranks);
  data["causes"] =
      causes_view_json(in.causes != nullptr ? *in.causes : timeline::Causes(), in.top_k);
  data["attempts"] = nullptr;
  if (in.attempts != nullptr && !in.attempts->empty()) {
    const std::vector<Attempt>& a = *in.attempts;
    data["attempts"] = {{"attempts", attempts_json(a)},
                        {"restarts", restarts_json(restarts_of(a))},
                        {"lines", restart_lines(a)},
                        {"table", to_json_columns(attempts_table(a))}};
  }
  return data;
}

std::string script_safe_json(const json& value) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  // These characters occur only inside JSON strings, where \uXXXX means the same.
  for (char c : text) {
    switch (c) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string csp_hash_source(const std::string& hex) {
  static const char* kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  std::string out = "sha256-";
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kBase64[(n >> 18) & 63];
    out += kBase64[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[n & 63] : '=';
  }
  return out;
}

std::string report_html(const ReportInput& in) {
  // No network (default-src 'none'), and no script or style but the built-in ones: even text
  // that escaped its escaping could not run.
  const std::string csp = "default-src 'none'; script-src '" +
                          csp_hash_source(report_assets::kScriptSha256) + "'; style-src '" +
                          csp_hash_source(report_assets::kStyleSha256) +
                          "'; img-src data:; base-uri 'none'; form-action 'none'";
  std::string page;
  page += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += "<meta http-equiv=\"Content-Security-Policy\" content=\"" + csp + "\">\n";
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  page += "<title>ranktime report</title>\n<link rel=\"icon\" href=\"data:,\">\n";
  page += "<style>";
  page += report_assets::kStyle;
  page +=
      "</style>\n</head>\n<body>\n<main id=\"report\"><noscript>This report draws its "
      "tables and charts with JavaScript; `ranktime summary` prints the same figures."
      "</noscript></main>\n<div id=\"tooltip\" class=\"tooltip\" hidden></div>\n";
  page += "<script type=\"application/json\" id=\"report-data\">";
  page += script_safe_json(report_data(in));
  page += "</script>\n<script>";
  page += report_assets::kScript;
  page += "</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace ranktime::cli
