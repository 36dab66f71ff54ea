// The causes' line and tables (cause_tables.h).
#include "cause_tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "summary_tables.h"

namespace ranktime::cli {

namespace {

// "\"aten::mm\" 14.200; \"slow_op\" 2.000": the operators' names quoted, excess in ms.
std::string operators_text(const std::vector<timeline::OperatorExcess>& operators) {
  std::string text;
  for (const timeline::OperatorExcess& op : operators) {
    if (!text.empty()) text += "; ";
    text += quoted_region(op.name) + " " + format_double("%.3f", op.excess_us / 1e3);
  }
  return text;
}

// The rows causes_table shows: positive excess, largest first, k at most.
std::vector<const timeline::Cause*> shown_causes(const timeline::Causes& c, size_t k) {
  std::vector<const timeline::Cause*> shown;
  for (const timeline::Cause& x : c.causes) {
    if (x.total_excess_us <= 0 || shown.size() >= k) break;
    shown.push_back(&x);
  }
  return shown;
}

}  // namespace

Table causes_table(const timeline::Causes& c, size_t k) {
  Table t{"causes",
          "causes: the late ranks' regions that took longer than the other ranks' median for the "
          "same region (own time: less time blocked in ranktime and in nested regions; "
          "excess per late step; explained = excess / lateness; operators: the profiler's "
          "operators inside the region that took longer, ms per late step)",
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
  const std::vector<const timeline::Cause*> shown = shown_causes(c, k);
  // Only a merged trace (`ranktime merge`) has operators: the column only when one has some.
  const bool with_operators = std::any_of(
      shown.begin(), shown.end(), [](const timeline::Cause* x) { return !x->operators.empty(); });
  if (with_operators) t.columns.push_back({"operators"});
  for (const timeline::Cause* x : shown) {
    t.rows.push_back({int64_t{x->rank}, x->region, static_cast<int64_t>(x->steps),
                      static_cast<int64_t>(x->compared_steps), x->lateness_us / 1e3,
                      x->excess_us / 1e3, x->total_excess_us / 1e3, x->explained_pct});
    if (with_operators) t.rows.back().push_back(operators_text(x->operators));
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

nlohmann::json operators_json(const std::vector<timeline::OperatorExcess>& operators) {
  nlohmann::json out = nlohmann::json::array();
  for (const timeline::OperatorExcess& op : operators) {
    out.push_back({{"name", op.name}, {"excess_ms", op.excess_us / 1e3}});
  }
  return out;
}

nlohmann::json causes_json(const timeline::Causes& c, size_t k) {
  nlohmann::json rows = to_json(causes_table(c, k));
  const std::vector<const timeline::Cause*> shown = shown_causes(c, k);
  for (size_t i = 0; i < shown.size() && i < rows.size(); ++i) {
    rows[i]["operators"] = operators_json(shown[i]->operators);  // a list, not the text's column
  }
  return rows;
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
  line += "its " + quoted_region(top.region) + " region took " + human_us(top.excess_us) +
          " longer than the other ranks' median (" + pct + "% of its lateness)";
  if (!top.operators.empty()) {
    const timeline::OperatorExcess& op = top.operators.front();
    line +=
        "; inside it, " + quoted_region(op.name) + " took " + human_us(op.excess_us) + " longer";
  }
  return line;
}

}  // namespace ranktime::cli
