// The tables and lines of `ranktime summary`, built from a Summary; `ranktime report` shows the
// same ones.
#include "summary_tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace ranktime::cli {

using timeline::Summary;

std::string format_double(const char* format, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, v);
  return buffer;
}

namespace {

double pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

// A lag that may be absent (-1): NaN, printed "-" and written null.
double optional_ms(double us) { return us < 0 ? std::nan("") : us / 1e3; }

// "mean of 4"; when the run wrote chosen ranks' lanes only (TIMELINE_RANKS, TIMELINE_ALL_RANKS=0)
// it says which, and that the others' are missing on purpose.
std::string lane_mean_text(const Summary& s) {
  std::string text = "mean of " + std::to_string(s.rank_lanes);
  if (s.run.all_ranks) return text;
  text += ": rank";
  text += s.lane_ranks.size() == 1 ? " " : "s ";
  for (size_t i = 0; i < s.lane_ranks.size(); ++i)
    text += (i ? "," : "") + std::to_string(s.lane_ranks[i]);
  text += s.run.timeline_ranks.empty()
              ? ", TIMELINE_ALL_RANKS=0"
              : ", of those TIMELINE_RANKS=" + s.run.timeline_ranks + " chose";
  return text + "; the other ranks' lanes were not written";
}

}  // namespace

Table run_table(const Summary& s, bool truncated, size_t files) {
  Table t{"run", "", {}, {}, ""};
  t.columns = {{"ranks"},
               {"events"},
               {"negotiations"},
               {"wall_ms", 3},
               {"first_ts_us", 3},
               {"last_ts_us", 3},
               {"slowest_rank"},
               {"rank_lanes"},
               {"waited_ms", 3},
               {"waited_pct", 1},
               {"events_dropped"},
               {"closed_cleanly"},
               {"truncated"},
               {"negotiation_errors"},
               {"operation_errors"},
               {"files"}};
  t.rows.push_back({int64_t{s.run.ranks}, static_cast<int64_t>(s.events),
                    static_cast<int64_t>(s.negotiations), s.wall_us / 1e3, s.first_ts_us,
                    s.last_ts_us, int64_t{s.slowest_rank}, int64_t{s.rank_lanes}, s.waited_us / 1e3,
                    pct(s.waited_us, s.rank_wall_us), int64_t{s.run.events_dropped},
                    s.run.has_run_end, truncated, static_cast<int64_t>(s.negotiation_errors),
                    static_cast<int64_t>(s.operation_errors), static_cast<int64_t>(files)});
  return t;
}

Table lateness_table(const Summary& s) {
  Table t{"lateness",
          "lateness per rank (lag behind the first rank to become ready; p50/p95 from a 1% log "
          "histogram; others_waited: wall-clock time the other ranks waited for this one, "
          "waited: for the others)",
          {},
          {},
          "no negotiations with readiness ticks"};
  t.columns = {{"rank"},          {"host"},
               {"negotiations"},  {"times_last"},
               {"last_pct", 1},   {"mean_lag_ms", 3},
               {"p50_lag_ms", 3}, {"p95_lag_ms", 3},
               {"max_lag_ms", 3}, {"others_waited_ms", 3},
               {"waited_ms", 3}};
  for (const auto& r : s.lateness) {
    if (r.negotiations == 0) continue;
    t.rows.push_back({int64_t{r.rank}, host_of(s, r.rank), static_cast<int64_t>(r.negotiations),
                      static_cast<int64_t>(r.times_last),
                      pct(static_cast<double>(r.times_last), static_cast<double>(r.negotiations)),
                      r.mean_lag_us / 1e3, r.p50_lag_us / 1e3, r.p95_lag_us / 1e3,
                      r.max_lag_us / 1e3, r.caused_wait_us / 1e3, r.waited_us / 1e3});
  }
  return t;
}

Table time_table(const Summary& s) {
  Table t{"time",
          "where the time went (wall " + human_us(s.wall_us) +
              "; busy = time at least one such slice was open, per rank lane (" +
              lane_mean_text(s) +
              "), or on any negotiate lane; share = busy / wall; total counts a fused batch's "
              "shared slices once)",
          {},
          {},
          "no operation or negotiation slices"};
  t.indent_column = 1;
  t.columns = {{"op"},         {"phase"},     {"lane"},      {"count"},      {"total_ms", 3},
               {"mean_us", 3}, {"min_us", 3}, {"max_us", 3}, {"busy_ms", 3}, {"share_pct", 1}};
  for (const auto& p : s.phases) {
    const bool sub = !p.negotiation && p.phase != p.op;
    t.indents.push_back(sub ? 2 : 0);
    t.rows.push_back({p.op, p.phase, std::string(p.negotiation ? "negotiate" : "rank"),
                      static_cast<int64_t>(p.count), p.total_us / 1e3,
                      p.count ? p.total_us / static_cast<double>(p.count) : 0.0, p.min_us, p.max_us,
                      p.busy_us / 1e3, 100.0 * p.share});
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
          "allreduce, (n-1)/n allgather, reducescatter and alltoall, 1 broadcast, n = ranks: the "
          "run's, or a process set's; per rank lane)",
          {},
          {},
          "no timed collectives"};
  t.columns = {{"op"},
               {"ranks"},
               {"batches_per_rank", 1},
               {"bytes_per_rank", 0},
               {"collective_ms_per_rank", 3},
               {"algbw_gbps", 3},
               {"busbw_gbps", 3},
               {"bus_factor", 3}};
  for (const auto& b : s.bandwidth) {
    const double lanes = std::max(1, b.lanes);
    t.rows.push_back({b.op, int64_t{b.ranks}, static_cast<double>(b.batches) / lanes,
                      static_cast<double>(b.bytes) / lanes, b.collective_us / 1e3 / lanes,
                      b.algbw_gbps, b.busbw_gbps, b.bus_factor});
  }
  return t;
}

Table steps_table(const Summary& s) {
  Table t{"steps",
          std::string("steps (") +
              (s.steps_from_marks ? "from the STEP marks"
                                  : "no step marks in the trace: step n is each tensor's n-th "
                                    "negotiation") +
              "; last_rank: the rank the others waited for most in the step)",
          {},
          {},
          "no steps"};
  t.columns = {{"step"},        {"begin_ms", 3},          {"negotiations"},
               {"last_rank"},   {"last_ready_lag_ms", 3}, {"waited_for_last_ms", 3},
               {"waited_ms", 3}};
  for (const auto& st : s.steps) {
    double lag = std::nan("");
    if (st.last_rank >= 0 && static_cast<size_t>(st.last_rank) < st.ranks.size()) {
      lag = optional_ms(st.ranks[st.last_rank].ready_lag_us);
    }
    t.rows.push_back({st.step, st.begin_us / 1e3, static_cast<int64_t>(st.negotiations),
                      int64_t{st.last_rank}, lag, st.waited_for_last_us / 1e3, st.waited_us / 1e3});
  }
  return t;
}

Table step_ranks_table(const Summary& s) {
  Table t{"step_ranks",
          "each rank in each step (start_lag: its STEP mark behind the first rank's; ready_lag: "
          "its last tensor's readiness behind the first rank's; others_waited / waited as in "
          "the lateness table, within the step)",
          {},
          {},
          "no steps"};
  t.columns = {
      {"step"},        {"rank"}, {"start_lag_ms", 3}, {"ready_lag_ms", 3}, {"others_waited_ms", 3},
      {"waited_ms", 3}};
  for (const auto& st : s.steps) {
    for (size_t r = 0; r < st.ranks.size(); ++r) {
      const timeline::StepRankStat& x = st.ranks[r];
      if (x.start_lag_us < 0 && x.ready_lag_us < 0) continue;
      t.rows.push_back({st.step, static_cast<int64_t>(r), optional_ms(x.start_lag_us),
                        optional_ms(x.ready_lag_us), x.caused_wait_us / 1e3, x.waited_us / 1e3});
    }
  }
  return t;
}

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

// "rank 2 (host-b)", or "rank 2" when the trace names no host.
std::string rank_on_host(const Summary& s, int rank) {
  const std::string host = host_of(s, rank);
  return "rank " + std::to_string(rank) + (host.empty() ? "" : " (" + host + ")");
}

std::string slowest_line(const Summary& s) {
  if (s.slowest_rank < 0) return "slowest rank: none (no rank kept the others waiting)";
  const timeline::RankLateness* row = nullptr;
  for (const auto& x : s.lateness) {
    if (x.rank == s.slowest_rank) row = &x;
  }
  if (row == nullptr) return "slowest rank: " + std::to_string(s.slowest_rank);
  const std::string host = host_of(s, row->rank);
  return "slowest rank: " + std::to_string(row->rank) + (host.empty() ? "" : " (" + host + ")") +
         ", last to be ready in " + std::to_string(row->times_last) + " of " +
         std::to_string(row->negotiations) + " negotiations (" +
         format_double("%.1f", pct(static_cast<double>(row->times_last),
                                   static_cast<double>(row->negotiations))) +
         "%), mean lag " + human_us(row->mean_lag_us) + "; the other ranks waited " +
         human_us(row->caused_wait_us) + " for it";
}

std::string waiting_line(const Summary& s) {
  if (s.waited_us <= 0) return "waiting: none (no rank had a tensor ready before another)";
  int ranks = 0;
  for (const auto& row : s.lateness) ranks += row.negotiations > 0 ? 1 : 0;
  std::string line = "waiting: the ranks spent " + human_us(s.waited_us) + " of their " +
                     std::to_string(ranks) + " x " + human_us(s.wall_us) + " (" +
                     format_double("%.1f", pct(s.waited_us, s.rank_wall_us)) +
                     "%) waiting for another rank's tensor";
  for (const auto& row : s.lateness) {
    if (row.rank != s.slowest_rank) continue;
    std::string host = host_of(s, row.rank);
    line += "; " + format_double("%.1f", pct(row.caused_wait_us, s.waited_us)) +
            "% of it for rank " + std::to_string(row.rank) +
            (host.empty() ? "" : " (" + host + ")");
  }
  return line;
}

std::string header_line(const std::vector<std::string>& paths, const Summary& s) {
  std::string hosts;
  std::map<std::string, int> per_host;
  for (const auto& h : s.run.hostnames) ++per_host[h];
  for (const auto& [h, n] : per_host) {
    hosts += (hosts.empty() ? "" : ", ") + h + (n > 1 ? " x" + std::to_string(n) : "");
  }
  std::string line = paths.empty() ? std::string("(no file)") : paths.front();
  if (paths.size() > 1) line += " (+" + std::to_string(paths.size() - 1) + " files)";
  line += ": ";
  line += s.run.ranks > 0 ? std::to_string(s.run.ranks) + " ranks" : "ranks unknown";
  if (!hosts.empty()) line += " (" + hosts + ")";
  line += ", " + human_us(s.wall_us) + " of trace, " + std::to_string(s.events) + " events, " +
          std::to_string(s.negotiations) + " negotiations";
  return line;
}

}  // namespace ranktime::cli

namespace ranktime::cli {
namespace {

std::string steps_from_text(const timeline::WhatIfSummary& w) {
  return w.steps_from_marks ? "from the STEP marks"
                            : "no step marks read: step n is each tensor's n-th negotiation";
}

// A mean step of `total` over `steps`.
std::string mean_step(double total_us, size_t steps) {
  return human_us(steps == 0 ? 0 : total_us / static_cast<double>(steps));
}

}  // namespace

Table cost_table(const Summary& s) {
  const timeline::WhatIfSummary& w = s.what_if;
  Table t{"cost",
          "cost: how much sooner the run would have ended had each rank been on time (its "
          "readiness no later than the other ranks' median, for every tensor), by replaying each "
          "step (" +
              steps_from_text(w) + ")",
          {},
          {},
          "no steps to replay"};
  t.columns = {{"rank"}, {"host"}, {"saving_ms", 3}, {"saving_pct", 1}, {"saving_per_step_ms", 3}};
  const double steps = static_cast<double>(std::max<size_t>(1, w.steps.size()));
  for (const auto& r : w.ranks) {
    t.rows.push_back({int64_t{r.rank}, host_of(s, r.rank), r.saving_us / 1e3, r.saving_pct,
                      r.saving_us / 1e3 / steps});
  }
  return t;
}

Table cost_steps_table(const Summary& s) {
  const timeline::WhatIfSummary& w = s.what_if;
  Table t{"cost_steps",
          "each step measured and replayed (saving_ms: the most one rank's lateness cost in it; "
          "nobody_late_ms: with every rank at the median)",
          {},
          {},
          "no steps to replay"};
  t.columns = {
      {"step"},         {"begin_ms", 3},    {"measured_ms", 3}, {"replayed_ms", 3},
      {"error_pct", 1}, {"costliest_rank"}, {"saving_ms", 3},   {"nobody_late_saving_ms", 3}};
  for (const auto& st : w.steps) {
    int64_t rank = -1;
    double saving = 0;
    for (const auto& x : st.savings) {
      if (x.saving_us > saving) {
        saving = x.saving_us;
        rank = x.rank;
      }
    }
    t.rows.push_back({st.step, st.begin_us / 1e3, st.measured_us / 1e3, st.replayed_us / 1e3,
                      pct(std::abs(st.replayed_us - st.measured_us), st.measured_us), rank,
                      saving / 1e3, st.nobody_late_saving_us / 1e3});
  }
  return t;
}

Table cost_step_ranks_table(const Summary& s) {
  Table t{"cost_step_ranks",
          "what each rank's lateness cost in each step (ranks and steps where it cost nothing are "
          "left out; a rank's saving_ms over the steps adds up to its saving_ms in cost)",
          {},
          {},
          "no rank's lateness cost anything"};
  t.columns = {{"step"}, {"rank"}, {"saving_ms", 3}};
  for (const auto& st : s.what_if.steps) {
    for (const auto& x : st.savings)
      t.rows.push_back({st.step, int64_t{x.rank}, x.saving_us / 1e3});
  }
  return t;
}

nlohmann::json what_if_json(const Summary& s) {
  const timeline::WhatIfSummary& w = s.what_if;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : w.ranks) {
    ranks.push_back(
        {{"rank", r.rank}, {"saving_ms", r.saving_us / 1e3}, {"saving_pct", r.saving_pct}});
  }
  const double steps = static_cast<double>(w.steps.size());
  return {{"wall_ms", w.wall_us / 1e3},
          {"steps", w.steps.size()},
          {"steps_from", w.steps_from_marks ? "marks" : "negotiation order"},
          {"replay_error_pct", w.replay_error_pct},
          {"worst_step_error_pct", w.worst_step_error_pct},
          {"ranks", ranks},
          {"costliest_rank",
           w.costliest_rank() >= 0 ? nlohmann::json(w.costliest_rank()) : nlohmann::json()},
          {"nobody_late_saving_ms", w.nobody_late_saving_us / 1e3},
          {"measured_step_ms", steps > 0 ? w.measured_us / 1e3 / steps : 0.0},
          {"replayed_step_ms", steps > 0 ? w.replayed_us / 1e3 / steps : 0.0}};
}

std::string cost_line(const Summary& s) {
  const timeline::WhatIfSummary& w = s.what_if;
  if (w.steps.empty()) return "cost: no steps to replay (no negotiation with every rank's ticks)";
  const int rank = w.costliest_rank();
  if (rank < 0) {
    return "cost: no rank's lateness made the job longer; steps took " +
           mean_step(w.measured_us, w.steps.size()) + " on average";
  }
  const auto& r = *std::find_if(w.ranks.begin(), w.ranks.end(),
                                [&](const timeline::WhatIfRankCost& x) { return x.rank == rank; });
  return "cost: " + rank_on_host(s, rank) + " made the job " + human_us(r.saving_us) + " longer (" +
         format_double("%.1f", r.saving_pct) + "% of " + human_us(w.wall_us) +
         "); without it, steps would take " +
         mean_step(w.measured_us - r.saving_us, w.steps.size()) + " instead of " +
         mean_step(w.measured_us, w.steps.size());
}

std::string replay_line(const Summary& s) {
  const timeline::WhatIfSummary& w = s.what_if;
  if (w.steps.empty()) return "replay: no steps";
  return "replay: " + std::to_string(w.steps.size()) + " steps (" + steps_from_text(w) +
         ") replayed within " + format_double("%.1f", w.replay_error_pct) +
         "% of their measured time (worst step " + format_double("%.1f", w.worst_step_error_pct) +
         "%); with nobody late they would take " + human_us(w.nobody_late_saving_us) + " less";
}

}  // namespace ranktime::cli
