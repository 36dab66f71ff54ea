// Step marks (STEP slices on pid 0, a thread "steps rank r" per rank), gathered in a first pass.
#include <algorithm>
#include <iterator>

#include "analysis/trace_args.h"
#include "ranktime/timeline/trace_analysis.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {

using analysis::int_arg;

bool StepMarks::empty() const {
  for (const auto& marks : by_rank) {
    if (!marks.empty()) return false;
  }
  return true;
}

int64_t StepMarks::step_at(int rank, double ts) const {
  if (rank < 0 || static_cast<size_t>(rank) >= by_rank.size()) return -1;
  const auto& marks = by_rank[rank];
  auto after = std::upper_bound(marks.begin(), marks.end(), ts,
                                [](double t, const auto& mark) { return t < mark.first; });
  if (after == marks.begin()) return -1;
  return std::prev(after)->second;
}

void StepMarkCollector::add(const TraceEvent& e) {
  if (e.pid != 0) return;
  if (e.phase() == 'M' && e.name == "thread_name" && e.args.is_object() &&
      e.args.contains("name") && e.args["name"].is_string()) {
    const int64_t rank = step_thread_rank(e.args["name"].get<std::string>());
    if (rank >= 0 && rank < kMaxTraceRanks) thread_rank_[e.tid] = rank;
    return;
  }
  if (e.phase() != 'X' || e.name != kStepSliceName || !e.has_ts) return;
  auto it = thread_rank_.find(e.tid);
  const int64_t rank = it != thread_rank_.end() ? it->second : int_arg(e.args, "rank", -1);
  const int64_t step = int_arg(e.args, "step", -1);
  if (rank < 0 || rank >= kMaxTraceRanks || step < 0) return;
  if (static_cast<size_t>(rank) >= marks_.by_rank.size()) marks_.by_rank.resize(rank + 1);
  marks_.by_rank[rank].emplace_back(e.ts, step);
}

StepMarks StepMarkCollector::finish() {
  for (auto& marks : marks_.by_rank) std::stable_sort(marks.begin(), marks.end());
  return std::move(marks_);
}

}  // namespace ranktime::timeline
