// Regions and readiness into the causes' steps (causes_analysis.h).
#include "analysis/causes_analysis.h"

namespace ranktime::timeline::analysis {

CausesAnalysis::CausesAnalysis(const Pass& pass)
    : marks_(pass.options().step_marks),
      collector_(CauseOptions{}, [this](int rank, double ts) { return marks_.step_at(rank, ts); }) {
}

void CausesAnalysis::add(const Negotiation& n) {
  if (marks_.empty()) return;
  for (const Tick& tick : n.ticks) {
    collector_.add_readiness(marks_.step_at(tick.rank, tick.ts), tick.rank, tick.ts);
  }
}

void CausesAnalysis::add(const RegionSlice& r) {
  collector_.add_region(r.rank, *r.name, r.begin_us, r.end_us, r.blocked_us);
}

void CausesAnalysis::add(const OperatorSlice& o) {
  collector_.add_operator(o.rank, *o.name, o.begin_us, o.own_us);
}

void CausesAnalysis::finish(Summary& s) { s.causes = collector_.finish(); }

}  // namespace ranktime::timeline::analysis
