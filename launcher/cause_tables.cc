// The causes' line and tables (cause_tables.h).
#include "cause_tables.h"

#include <cmath>
#include <cstdio>

#include "summary_tables.h"

namespace ranktime::cli {

Table causes_table(const timeline::Causes& c, size_t k) {
  Table t{"causes",
          "causes: the late ranks' regions that took longer than the other ranks' median for the "
          "same region (own time: less time blocked in ranktime and in nested regions; "
          "excess per late step; explained = excess / lateness)",
          {},
          {},
          c.has_regions ? "no late rank's region took longer than the others'"
                        : "no regions in the trace (ranktime.region, ranktime.torch.instrument)"};
  t.columns = {{"rank"},
               {"region"},
               {"steps"},
               {"of_steps"},
               {"lateness_ms", 3},
               {"excess_ms", 3},
               {"total_excess_ms", 3},
               {"explained_pct", 1}};
  for (const timeline::Cause& x : c.causes) {
    if (x.total_excess_us <= 0 || t.rows.size() >= k) break;
    t.rows.push_back({int64_t{x.rank}, x.region, static_cast<int64_t>(x.steps),
                      static_cast<int64_t>(x.compared_steps), x.lateness_us / 1e3,
                      x.excess_us / 1e3, x.total_excess_us / 1e3, x.explained_pct});
  }
  return t;
}

Table cause_steps_table(const timeline::Causes& c) {
  Table t{"cause_steps",
          "each late rank in each step, with each region (own: its own time; others_median: the "
          "other ranks' median for the region; excess = own - others_median)",
          {},
          {},
          "no rank was late in a step with regions"};
  t.columns = {{"step"},        {"rank"},      {"lateness_ms", 3},
               {"region"},      {"own_ms", 3}, {"others_median_ms", 3},
               {"excess_ms", 3}};
  for (const timeline::LateRankStep& st : c.steps) {
    for (const timeline::RegionExcess& x : st.regions) {
      t.rows.push_back({st.step, int64_t{st.rank}, st.lateness_us / 1e3, x.region, x.own_us / 1e3,
                        x.others_median_us / 1e3, x.excess_us / 1e3});
    }
  }
  return t;
}

nlohmann::json causes_json(const timeline::Causes& c, size_t k) {
  return to_json(causes_table(c, k));
}

std::string quoted_region(const std::string& name) {
  return nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string cause_line(const timeline::Causes& c, const timeline::CauseOptions& options) {
  if (!c.has_regions) return "";
  if (c.compared_steps == 0) {
    return "cause: unknown: no step had both readiness and regions of two ranks (steps come "
           "from step marks: ranktime.mark_step, DistributedOptimizer, ranktime.torch.instrument)";
  }
  const std::string of_steps = " of " + std::to_string(c.compared_steps) + " steps";
  if (c.causes.empty()) {
    return "cause: none: no rank was late by " + human_us(options.late_threshold_us) +
           " or more in any" + of_steps + " with regions";
  }
  const timeline::Cause& top = c.causes.front();
  std::string line = "cause: rank " + std::to_string(top.rank) + " was late by " +
                     human_us(top.lateness_us) + " in " + std::to_string(top.steps) + " of " +
                     std::to_string(top.compared_steps) + " steps; ";
  if (top.total_excess_us <= 0) {
    return line +
           "none of its regions took longer than the other ranks' median (the time went "
           "outside its regions)";
  }
  char pct[32];
  std::snprintf(pct, sizeof(pct), "%.0f", top.explained_pct);
  return line + "its " + quoted_region(top.region) + " region took " + human_us(top.excess_us) +
         " longer than the other ranks' median (" + pct + "% of its lateness)";
}

}  // namespace ranktime::cli
