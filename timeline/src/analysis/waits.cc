// Waits from the ticks' timestamps (each rank's readiness on rank 0's clock).
#include "analysis/waits.h"

namespace ranktime::timeline::analysis {

std::vector<Readiness> readiness_of(const std::vector<Tick>& ticks) {
  std::vector<Readiness> ready;
  ready.reserve(ticks.size());
  for (const Tick& tick : ticks) ready.push_back({tick.rank, tick.ts});
  return ready;
}

void WaitsAnalysis::add(const Negotiation& n) {
  if (n.ticks.size() < 2) return;
  waits_.add(readiness_of(n.ticks));
}

void WaitsAnalysis::finish(Summary& s) {
  double most_wait = 0;
  for (RankLateness& row : s.lateness) {
    row.caused_wait_us = waits_.caused(row.rank);
    row.waited_us = waits_.waited(row.rank);
    if (row.caused_wait_us > most_wait) {
      most_wait = row.caused_wait_us;
      s.slowest_rank = row.rank;
    }
    if (row.negotiations > 0) {
      s.waited_us += row.waited_us;
      s.rank_wall_us += s.wall_us;
    }
  }
}

}  // namespace ranktime::timeline::analysis
