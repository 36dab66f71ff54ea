// `ranktime summary`: streams the trace through TraceSummarizer and prints its tables.
#include "summary_command.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include <unistd.h>

#include "progress.h"
#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_reader.h"
#include "report_table.h"

namespace ranktime::cli {
namespace {

using timeline::Summary;

std::string format_double(const char* format, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, v);
  return buffer;
}

// "20.051 ms", "1.250 s", "812.000 us".
std::string human_us(double us) {
  if (std::fabs(us) >= 1e6) return format_double("%.3f s", us / 1e6);
  if (std::fabs(us) >= 1e3) return format_double("%.3f ms", us / 1e3);
  return format_double("%.3f us", us);
}

std::string host_of(const Summary& s, int rank) {
  if (rank >= 0 && static_cast<size_t>(rank) < s.run.hostnames.size()) {
    return s.run.hostnames[rank];
  }
  return "";
}

double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

Table run_table(const Summary& s, const timeline::TraceReadResult& read) {
  Table t{"run", "", {}, {}, ""};
  t.columns = {{"ranks"},           {"events"},         {"negotiations"}, {"wall_ms", 3},
               {"first_ts_us", 3},  {"last_ts_us", 3},  {"slowest_rank"}, {"rank_lanes"},
               {"events_dropped"},  {"closed_cleanly"}, {"truncated"},    {"negotiation_errors"},
               {"operation_errors"}};
  t.rows.push_back(
      {int64_t{s.run.ranks}, static_cast<int64_t>(s.events), static_cast<int64_t>(s.negotiations),
       s.wall_us / 1e3, s.first_ts_us, s.last_ts_us, int64_t{s.slowest_rank}, int64_t{s.rank_lanes},
       int64_t{s.run.events_dropped}, std::string(s.run.has_run_end ? "true" : "false"),
       std::string(read.truncated ? "true" : "false"), static_cast<int64_t>(s.negotiation_errors),
       static_cast<int64_t>(s.operation_errors)});
  return t;
}

Table lateness_table(const Summary& s) {
  Table t{"lateness",
          "lateness per rank (lag behind the first rank to become ready; p50/p95 from a 1% log "
          "histogram)",
          {},
          {},
          "no negotiations with readiness ticks"};
  t.columns = {{"rank"},          {"host"},
               {"negotiations"},  {"times_last"},
               {"last_pct", 1},   {"mean_lag_ms", 3},
               {"p50_lag_ms", 3}, {"p95_lag_ms", 3},
               {"max_lag_ms", 3}, {"others_waited_ms", 3}};
  for (const auto& r : s.lateness) {
    if (r.negotiations == 0) continue;
    t.rows.push_back({int64_t{r.rank}, host_of(s, r.rank), static_cast<int64_t>(r.negotiations),
                      static_cast<int64_t>(r.times_last),
                      pct(static_cast<double>(r.times_last), static_cast<double>(r.negotiations)),
                      r.mean_lag_us / 1e3, r.p50_lag_us / 1e3, r.p95_lag_us / 1e3,
                      r.max_lag_us / 1e3, r.caused_wait_us / 1e3});
  }
  return t;
}

Table time_table(const Summary& s) {
  Table t{"time",
          "where the time went (wall " + human_us(s.wall_us) + "; share = total / (wall x " +
              std::to_string(s.rank_lanes) +
              " rank lanes); a fused batch's shared slices count once)",
          {},
          {},
          "no operation or negotiation slices"};
  t.indent_column = 1;
  t.columns = {{"op"},         {"phase"},     {"lane"},      {"count"},       {"total_ms", 3},
               {"mean_us", 3}, {"min_us", 3}, {"max_us", 3}, {"share_pct", 1}};
  for (const auto& p : s.phases) {
    const bool sub = !p.negotiation && p.phase != p.op;
    t.indents.push_back(sub ? 2 : 0);
    t.rows.push_back({p.op, p.phase, std::string(p.negotiation ? "negotiate" : "rank"),
                      static_cast<int64_t>(p.count), p.total_us / 1e3,
                      p.count ? p.total_us / static_cast<double>(p.count) : 0.0, p.min_us, p.max_us,
                      // Negotiations of different tensors overlap: a share of wall time would
                      // mislead.
                      p.negotiation ? std::nan("") : 100.0 * p.share});
  }
  return t;
}

Table top_wait_table(const Summary& s, size_t k) {
  Table t{"top_wait",
          "top " + std::to_string(k) + " tensors by negotiation wait (NEGOTIATE_* slices)",
          {},
          {},
          "no negotiations"};
  t.columns = {{"tensor"},          {"pid"},           {"negotiations"}, {"total_wait_ms", 3},
               {"mean_wait_us", 3}, {"max_wait_us", 3}};
  for (const auto& x : s.top_wait) {
    t.rows.push_back({x.name, int64_t{x.pid}, static_cast<int64_t>(x.negotiations),
                      x.wait_total_us / 1e3,
                      x.negotiations ? x.wait_total_us / static_cast<double>(x.negotiations) : 0.0,
                      x.wait_max_us});
  }
  return t;
}

Table top_processing_table(const Summary& s, size_t k) {
  Table t{"top_processing",
          "top " + std::to_string(k) +
              " tensors by processing time (operation slices, QUEUE included, all rank lanes)",
          {},
          {},
          "no operation slices"};
  t.columns = {{"tensor"}, {"pid"}, {"operations"}, {"total_ms", 3}, {"mean_us", 3}, {"max_us", 3}};
  for (const auto& x : s.top_processing) {
    t.rows.push_back(
        {x.name, int64_t{x.pid}, static_cast<int64_t>(x.operations), x.processing_total_us / 1e3,
         x.operations ? x.processing_total_us / static_cast<double>(x.operations) : 0.0,
         x.processing_max_us});
  }
  return t;
}

Table fusion_table(const Summary& s) {
  Table t{"fusion",
          "fusion (batches per rank lane; a batch is the tensors fused into one collective)",
          {},
          {},
          "no operation slices"};
  t.columns = {{"op"},
               {"batches_per_rank", 1},
               {"tensors_per_batch", 2},
               {"max_tensors_per_batch"},
               {"bytes_per_batch", 0},
               {"max_bytes_per_batch"}};
  for (const auto& f : s.fusion) {
    const double lanes = std::max(1, f.lanes);
    const double batches = static_cast<double>(f.batches);
    t.rows.push_back({f.op, batches / lanes,
                      batches > 0 ? static_cast<double>(f.tensors) / batches : 0.0,
                      static_cast<int64_t>(f.max_tensors),
                      batches > 0 ? static_cast<double>(f.bytes) / batches : 0.0,
                      static_cast<int64_t>(f.max_bytes)});
  }
  return t;
}

Table cycles_table(const Summary& s) {
  Table t{"cycles",
          "cycles (CYCLE_START markers)",
          {},
          {},
          "no cycle markers (run with --timeline-mark-cycles)"};
  t.columns = {{"cycles"},
               {"mean_interval_ms", 3},
               {"p50_interval_ms", 3},
               {"max_interval_ms", 3},
               {"batches_per_cycle", 2}};
  if (s.cycles.cycles > 0) {
    t.rows.push_back({static_cast<int64_t>(s.cycles.cycles), s.cycles.mean_interval_us / 1e3,
                      s.cycles.p50_interval_us / 1e3, s.cycles.max_interval_us / 1e3,
                      s.cycles.batches_per_cycle});
  }
  return t;
}

Table bandwidth_table(const Summary& s) {
  Table t{"bandwidth",
          "bandwidth (nccl-tests: algbw = bytes / collective time, busbw = algbw x 2(n-1)/n "
          "allreduce, (n-1)/n allgather, 1 broadcast; per rank lane)",
          {},
          {},
          "no timed collectives"};
  t.columns = {{"op"},
               {"batches_per_rank", 1},
               {"bytes_per_rank", 0},
               {"collective_ms_per_rank", 3},
               {"algbw_gbps", 3},
               {"busbw_gbps", 3},
               {"bus_factor", 3}};
  for (const auto& b : s.bandwidth) {
    const double lanes = std::max(1, b.lanes);
    t.rows.push_back({b.op, static_cast<double>(b.batches) / lanes,
                      static_cast<double>(b.bytes) / lanes, b.collective_us / 1e3 / lanes,
                      b.algbw_gbps, b.busbw_gbps, b.bus_factor});
  }
  return t;
}

std::string slowest_line(const Summary& s) {
  if (s.slowest_rank < 0) return "slowest rank: none (no rank kept the others waiting)";
  const timeline::RankLateness* row = nullptr;
  for (const auto& x : s.lateness) {
    if (x.rank == s.slowest_rank) row = &x;
  }
  if (row == nullptr) return "slowest rank: " + std::to_string(s.slowest_rank);
  std::string host = host_of(s, row->rank);
  return "slowest rank: " + std::to_string(row->rank) + (host.empty() ? "" : " (" + host + ")") +
         ", last to be ready in " + std::to_string(row->times_last) + " of " +
         std::to_string(row->negotiations) + " negotiations (" +
         format_double("%.1f", pct(static_cast<double>(row->times_last),
                                   static_cast<double>(row->negotiations))) +
         "%), mean lag " + human_us(row->mean_lag_us) + "; the other ranks waited " +
         human_us(row->caused_wait_us) + " for it";
}

std::string header_line(const SummaryCommandOptions& o, const Summary& s) {
  std::string hosts;
  std::map<std::string, int> per_host;
  for (const auto& h : s.run.hostnames) ++per_host[h];
  for (const auto& [h, n] : per_host) {
    hosts += (hosts.empty() ? "" : ", ") + h + (n > 1 ? " x" + std::to_string(n) : "");
  }
  std::string line = o.path + ": ";
  line += s.run.ranks > 0 ? std::to_string(s.run.ranks) + " ranks" : "ranks unknown";
  if (!hosts.empty()) line += " (" + hosts + ")";
  line += ", " + human_us(s.wall_us) + " of trace, " + std::to_string(s.events) + " events, " +
          std::to_string(s.negotiations) + " negotiations";
  return line;
}

int usage_error(const std::string& message) {
  std::cerr << "ranktime summary: " << message << "\n";
  return 2;
}

}  // namespace

std::optional<double> parse_time_us(const std::string& text) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(used);
  if (!std::isfinite(value)) return std::nullopt;
  if (unit.empty() || unit == "us") return value;
  if (unit == "ms") return value * 1e3;
  if (unit == "s") return value * 1e6;
  return std::nullopt;
}

std::optional<std::vector<int>> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    try {
      size_t used = 0;
      if (dash == std::string::npos) {
        int r = std::stoi(item, &used);
        if (used != item.size() || r < 0) return std::nullopt;
        ranks.push_back(r);
      } else {
        std::string a = item.substr(0, dash), b = item.substr(dash + 1);
        size_t ua = 0, ub = 0;
        int lo = std::stoi(a, &ua), hi = std::stoi(b, &ub);
        if (ua != a.size() || ub != b.size() || lo < 0 || hi < lo || hi - lo > 1000000) {
          return std::nullopt;
        }
        for (int r = lo; r <= hi; ++r) ranks.push_back(r);
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (ranks.empty()) return std::nullopt;
  return ranks;
}

CLI::App* add_summary_command(CLI::App& app, SummaryCommandOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "summary",
      "Summarise a timeline: lateness per rank, where the time went, top tensors, "
      "fusion and bandwidth");
  cmd->add_option("file", o->path, "timeline file (complete, or cut short by a crash)")->required();
  cmd->add_option("--format", o->format, "text (aligned tables), csv or json")
      ->check(CLI::IsMember({"text", "csv", "json"}));
  cmd->add_option("-k,--top", o->top_k, "tensors in the top-k tables")->check(CLI::PositiveNumber);
  cmd->add_option("--from", o->from,
                  "analyse what begins at or after this trace time: 1500 (us), 1500us, 1.5ms, 2s");
  cmd->add_option("--to", o->to, "analyse what begins at or before this trace time");
  cmd->add_option("--ranks", o->ranks,
                  "analyse these ranks only, e.g. 0,2-3 (lateness is recomputed among them)");
  cmd->add_option("--op", o->operations,
                  "analyse these operations only: allreduce, allgather, broadcast, barrier "
                  "(repeat or separate with commas)")
      ->delimiter(',')
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "barrier"}, CLI::ignore_case));
  cmd->add_option("--table", o->table,
                  "print one table: run, lateness, time, top_wait, top_processing, fusion, "
                  "cycles, bandwidth")
      ->check(CLI::IsMember({"run", "lateness", "time", "top_wait", "top_processing", "fusion",
                             "cycles", "bandwidth"}));
  cmd->add_flag("--progress", o->progress,
                "report progress on stderr (on by default when stderr is a terminal)");
  cmd->add_option("--progress-every-mb", o->progress_every_mb, "MiB between progress reports")
      ->check(CLI::PositiveNumber);
  return cmd;
}

int run_summary(const SummaryCommandOptions& o) {
  timeline::SummaryOptions options;
  options.top_k = o.top_k;
  if (!o.from.empty()) {
    options.from_us = parse_time_us(o.from);
    if (!options.from_us)
      return usage_error("--from " + o.from + ": expected a time like 1500, 1.5ms or 2s");
  }
  if (!o.to.empty()) {
    options.to_us = parse_time_us(o.to);
    if (!options.to_us)
      return usage_error("--to " + o.to + ": expected a time like 1500, 1.5ms or 2s");
  }
  if (options.from_us && options.to_us && *options.to_us < *options.from_us) {
    return usage_error("--to " + o.to + " is before --from " + o.from);
  }
  for (std::string op : o.operations) {
    for (char& c : op) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    options.operations.push_back(op);
  }
  if (!o.ranks.empty()) {
    auto ranks = parse_rank_list(o.ranks);
    if (!ranks) return usage_error("--ranks " + o.ranks + ": expected a list like 0,2-3");
    options.ranks = *ranks;
  }

  ProgressReporter progress("ranktime summary", o.path, o.progress || isatty(2),
                            static_cast<uint64_t>(o.progress_every_mb * 1024 * 1024));
  timeline::TraceSummarizer summarizer(options);
  timeline::TraceReadResult read = timeline::read_trace_file(
      o.path,
      [&](const timeline::TraceEvent& e) {
        summarizer.add(e);
        return true;
      },
      progress.read_options());
  progress.done();
  if (!read.opened) return usage_error(read.error);
  if (!read.complete) {
    std::cerr << "ranktime summary: warning: " << o.path << ": " << read.error
              << "; summarising the " << read.events << " complete events before it\n";
    if (read.events == 0) return 1;
  }
  Summary s = summarizer.finish();

  std::vector<Table> tables = {run_table(s, read),
                               lateness_table(s),
                               time_table(s),
                               top_wait_table(s, o.top_k),
                               top_processing_table(s, o.top_k),
                               fusion_table(s),
                               cycles_table(s),
                               bandwidth_table(s)};
  if (!o.table.empty()) {
    std::vector<Table> only;
    for (auto& t : tables) {
      if (t.name == o.table) only.push_back(std::move(t));
    }
    tables = std::move(only);
  }

  if (o.format == "json") {
    nlohmann::json out;
    out["file"] = o.path;
    out["reader"] = {{"events", read.events},
                     {"bytes", read.bytes},
                     {"complete", read.complete},
                     {"truncated", read.truncated},
                     {"error", read.error}};
    if (o.table.empty()) {
      out["slowest_rank"] = s.slowest_rank >= 0 ? nlohmann::json(s.slowest_rank) : nlohmann::json();
      out["summary_line"] = slowest_line(s);
    }
    out["tables"] = nlohmann::json::object();
    for (const auto& t : tables) out["tables"][t.name] = to_json(t);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (o.format == "csv") {
    bool first = true;
    for (const auto& t : tables) {
      if (!first) std::cout << "\n";
      first = false;
      print_csv(std::cout, t, o.table.empty());
    }
    return 0;
  }
  if (o.table.empty()) {
    std::cout << header_line(o, s) << "\n";
    if (read.truncated) std::cout << "note: " << read.error << "\n";
    if (!s.run.has_run_end) {
      std::cout << "note: no ranktime_run_end: the run did not close the file (crash or SIGKILL)\n";
    }
    if (s.run.events_dropped > 0) {
      std::cout << "note: the writer dropped " << s.run.events_dropped
                << " events (its buffer was full)\n";
    }
    std::cout << slowest_line(s) << "\n";
  }
  for (const auto& t : tables) {
    if (t.name == "run" && o.table.empty()) continue;  // said in the header lines
    std::cout << "\n";
    print_text(std::cout, t);
  }
  return 0;
}

}  // namespace ranktime::cli
