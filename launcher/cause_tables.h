// The causes' line and tables in `ranktime summary` and `ranktime report`: which region made a
// late rank late (timeline/include/ranktime/timeline/causes.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/causes.h"
#include "report_table.h"

namespace ranktime::cli {

// The (rank, region) pairs with a positive excess, largest first, at most k.
Table causes_table(const timeline::Causes& c, size_t k);
// Each late rank in each step, with each of its regions.
Table cause_steps_table(const timeline::Causes& c);
// "cause: rank 2 was late by 20.400 ms in 20 of 21 steps; its "data" region took 19.800 ms longer
// than the other ranks' median (97% of its lateness)", then, from a merged profiler trace, ";
// inside it, "aten::mm" took 14.200 ms longer" (its top operator), or why there is none; "" when
// the trace has no regions.
std::string cause_line(const timeline::Causes& c, const timeline::CauseOptions& options);
// The JSON `causes` list: causes_table's rows as objects, each with `operators`, a list of
// {"name", "excess_ms"} (empty without profiler events).
nlohmann::json causes_json(const timeline::Causes& c, size_t k);
// [{"name", "excess_ms"}], largest excess first.
nlohmann::json operators_json(const std::vector<timeline::OperatorExcess>& operators);
// A region's name as the text output shows it: in double quotes, escaped as in JSON, so that
// any name stays one line of text.
std::string quoted_region(const std::string& name);

}  // namespace ranktime::cli
