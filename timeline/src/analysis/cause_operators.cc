// The operators inside a late rank's region (cause_operators.h says how).
#include "ranktime/timeline/cause_operators.h"

#include <algorithm>
#include <utility>

#include "ranktime/timeline/causes.h"
#include "ranktime/timeline/what_if.h"  // median_of

namespace ranktime::timeline {
namespace {

// Deeper than any profiler's nesting: a corrupt thread's slices cannot grow the stack further.
constexpr size_t kMaxOperatorDepth = 1024;
// Operators held for a region not closed yet: a rank's last regions close at the end of the
// input, after the profiles. Beyond this many, the rest are left out.
constexpr size_t kMaxWaiting = size_t{1} << 16;

}  // namespace

void OperatorNesting::close_top(const Closed& closed) {
  Open top = std::move(stack_.back());
  stack_.pop_back();
  const double dur = top.end_us - top.begin_us;
  if (!stack_.empty()) stack_.back().children_us += dur;
  closed(top.name, top.begin_us, std::max(0.0, dur - top.children_us));
}

void OperatorNesting::add(std::string_view name, double begin_us, double dur_us,
                          const Closed& closed) {
  const double end_us = begin_us + std::max(0.0, dur_us);
  // Whatever does not hold this slice has closed (a slice that overlaps the open one without
  // fitting in it closes it too: a thread's operators nest).
  while (!stack_.empty() && (begin_us < stack_.back().begin_us || end_us > stack_.back().end_us)) {
    close_top(closed);
  }
  if (stack_.size() >= kMaxOperatorDepth) close_top(closed);
  stack_.push_back({std::string(name), begin_us, end_us, 0});
}

void OperatorNesting::flush(const Closed& closed) {
  while (!stack_.empty()) close_top(closed);
}

void CauseOperators::add_region(int rank, int64_t step, std::string_view name, double begin_us,
                                double end_us) {
  if (rank < 0 || rank >= kMaxRanks) return;
  Step& s = steps_[step];
  if (s.closed) return;  // CauseCollector gives open steps only
  if (s.regions.size() <= static_cast<size_t>(rank)) s.regions.resize(rank + 1);
  s.regions[rank].push_back({begin_us, end_us, regions_.intern(name)});
  if (closed_until_.size() <= static_cast<size_t>(rank)) closed_until_.resize(rank + 1, 0.0);
  closed_until_[rank] = std::max(closed_until_[rank], end_us);
  // Operators that came before this region closed (its E waits for its thread's next event).
  auto placed = [&](const Waiting& w) {
    return w.rank == rank && place(w.rank, w.step, w.op, w.begin_us, w.own_us);
  };
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), placed), waiting_.end());
}

void CauseOperators::add_operator(int rank, int64_t step, std::string_view name, double begin_us,
                                  double own_us) {
  if (rank < 0 || rank >= kMaxRanks) return;
  if (profiled_.size() <= static_cast<size_t>(rank)) profiled_.resize(rank + 1, false);
  profiled_[rank] = true;
  if (step < 0 || own_us <= 0) return;
  const uint32_t op = operators_.intern(name);
  if (place(rank, step, op, begin_us, own_us)) return;
  // After every region of its rank closed so far: a region still open around it may close later.
  const bool after =
      static_cast<size_t>(rank) >= closed_until_.size() || begin_us >= closed_until_[rank];
  if (after && waiting_.size() < kMaxWaiting)
    waiting_.push_back({rank, step, op, begin_us, own_us});
}

bool CauseOperators::place(int rank, int64_t step, uint32_t op, double begin_us, double own_us) {
  // The innermost region holding its begin: the latest begun (regions nest). A region begun in
  // the step before may still be open across the mark.
  Step* owner = nullptr;
  const Region* inner = nullptr;
  for (int64_t at : {step - 1, step}) {
    auto it = steps_.find(at);
    if (it == steps_.end() || it->second.regions.size() <= static_cast<size_t>(rank)) continue;
    for (const Region& r : it->second.regions[rank]) {
      if (r.begin_us > begin_us || begin_us >= r.end_us) continue;
      if (inner == nullptr || r.begin_us > inner->begin_us ||
          (r.begin_us == inner->begin_us && r.end_us < inner->end_us)) {
        inner = &r;
        owner = &it->second;
      }
    }
  }
  if (inner == nullptr) return false;
  const Key key{rank, inner->name, op};
  if (owner->closed) {
    credit(*owner, key, own_us);
  } else {
    owner->open_us[key] += own_us;
  }
  return true;
}

void CauseOperators::credit(const Step& step, const Key& key, double own_us) {
  const auto& [rank, region, op] = key;
  for (int q : step.late) {
    std::vector<double>& per_rank = sums_[{q, region, op}];
    if (per_rank.size() <= static_cast<size_t>(rank)) per_rank.resize(rank + 1, 0.0);
    per_rank[rank] += own_us;
  }
}

void CauseOperators::close_step(int64_t step, const std::vector<int>& late) {
  auto it = steps_.find(step);
  if (it == steps_.end()) return;
  if (late.empty()) {
    steps_.erase(it);  // nobody late: its operators explain nothing
    return;
  }
  Step& s = it->second;
  s.closed = true;
  s.late = late;
  for (const auto& [key, own] : s.open_us) credit(s, key, own);
  s.open_us.clear();
}

void CauseOperators::finish(std::vector<Cause>* causes) {
  for (Cause& c : *causes) {
    c.operators.clear();
    if (c.steps == 0) continue;
    const uint32_t region = regions_.intern(c.region);  // new (no sums) if no operator had it
    auto it = sums_.lower_bound({c.rank, region, 0});
    for (;
         it != sums_.end() && std::get<0>(it->first) == c.rank && std::get<1>(it->first) == region;
         ++it) {
      const std::vector<double>& per_rank = it->second;
      auto own_of = [&](size_t r) { return r < per_rank.size() ? per_rank[r] : 0.0; };
      std::vector<double> others;
      for (size_t r = 0; r < profiled_.size(); ++r) {
        if (profiled_[r] && r != static_cast<size_t>(c.rank)) others.push_back(own_of(r));
      }
      if (others.empty()) break;  // nobody to compare with
      const double excess = (own_of(static_cast<size_t>(c.rank)) - median_of(std::move(others))) /
                            static_cast<double>(c.steps);
      if (excess > 0) c.operators.push_back({operators_.lookup(std::get<2>(it->first)), excess});
    }
    std::sort(c.operators.begin(), c.operators.end(),
              [](const OperatorExcess& a, const OperatorExcess& b) {
                return a.excess_us != b.excess_us ? a.excess_us > b.excess_us : a.name < b.name;
              });
    if (c.operators.size() > kTop) c.operators.resize(kTop);
  }
}

}  // namespace ranktime::timeline
