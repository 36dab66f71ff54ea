// Lags behind the first rank, among the chosen ranks only, and who was last.
#include "analysis/lateness.h"

#include <algorithm>

#include "analysis/trace_args.h"

namespace ranktime::timeline::analysis {

LatenessAnalysis::Rank& LatenessAnalysis::rank(int r) {
  if (static_cast<size_t>(r) >= ranks_.size()) ranks_.resize(r + 1);
  return ranks_[r];
}

void LatenessAnalysis::add(const Negotiation& n) {
  const std::vector<Tick>& ticks = n.ticks;
  if (ticks.empty()) return;
  double first = ticks.front().lag_us;
  double last = first;
  for (const Tick& tick : ticks) {
    first = std::min(first, tick.lag_us);
    last = std::max(last, tick.lag_us);
  }
  // Ties for last go to the rank the writer named, else to the first found.
  int last_rank = -1;
  const int named = static_cast<int>(int_arg(*n.end_args, "last_rank", -1));
  for (const Tick& tick : ticks) {
    if (tick.lag_us != last) continue;
    if (last_rank < 0 || tick.rank == named) last_rank = tick.rank;
  }
  for (const Tick& tick : ticks) rank(tick.rank).lag.add(tick.lag_us - first);
  if (ticks.size() < 2) return;
  ++rank(last_rank).times_last;
}

void LatenessAnalysis::finish(Summary& s) {
  // One row per chosen rank that has ticks, and every run rank when known.
  const size_t nranks = std::max(ranks_.size(), static_cast<size_t>(std::max(0, s.run.ranks)));
  ranks_.resize(nranks);
  for (size_t r = 0; r < nranks; ++r) {
    if (!pass_.selected(static_cast<int>(r))) continue;
    const Rank& a = ranks_[r];
    RankLateness row;
    row.rank = static_cast<int>(r);
    row.negotiations = a.lag.count();
    row.times_last = a.times_last;
    row.mean_lag_us = a.lag.mean();
    row.p50_lag_us = a.lag.quantile(0.50);
    row.p95_lag_us = a.lag.quantile(0.95);
    row.max_lag_us = a.lag.max();
    s.lateness.push_back(row);
  }
}

}  // namespace ranktime::timeline::analysis
