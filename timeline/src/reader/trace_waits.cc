// Interval unions and the rank-by-rank wait matrix behind `others_waited_ms`.
#include "ranktime/timeline/trace_waits.h"

#include <algorithm>

#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

// Intervals kept for the whole matrix when the bound is picked automatically: about 16 MiB
// (more above 500 ranks, where each pair keeps at least 4).
constexpr size_t kMatrixIntervals = size_t{1} << 20;

size_t auto_bound(int ranks) {
  const size_t cells = static_cast<size_t>(std::max(1, ranks)) * static_cast<size_t>(ranks + 1);
  return std::clamp<size_t>(kMatrixIntervals / cells, 4, 1024);
}

}  // namespace

void IntervalUnion::add(double begin, double end) {
  begin = std::max(begin, folded_until_);
  if (!(end > begin)) return;
  if (open_.empty() || begin > open_.back().second) {
    open_.emplace_back(begin, end);
  } else {
    // First interval that ends at or after `begin`: it and those after it that start at or
    // before `end` merge with the new one.
    auto first = std::lower_bound(open_.begin(), open_.end(), begin,
                                  [](const auto& iv, double b) { return iv.second < b; });
    auto last = first;
    double lo = begin, hi = end;
    while (last != open_.end() && last->first <= end) {
      lo = std::min(lo, last->first);
      hi = std::max(hi, last->second);
      ++last;
    }
    if (first == last) {
      open_.insert(first, {begin, end});
    } else {
      *first = {lo, hi};
      open_.erase(first + 1, last);
    }
  }
  if (open_.size() > max_open_) {
    const size_t fold = open_.size() / 2;
    for (size_t i = 0; i < fold; ++i) folded_ += open_[i].second - open_[i].first;
    folded_until_ = open_[fold - 1].second;
    open_.erase(open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(fold));
  }
}

double IntervalUnion::measure() const {
  double total = folded_;
  for (const auto& [b, e] : open_) total += e - b;
  return total;
}

IntervalUnion& WaitMatrix::union_for(std::unordered_map<uint64_t, IntervalUnion>& map, uint64_t k) {
  auto it = map.find(k);
  if (it != map.end()) return it->second;
  return map.emplace(k, IntervalUnion(max_open_ > 0 ? max_open_ : auto_bound(ranks_)))
      .first->second;
}

void WaitMatrix::add(std::vector<Readiness> ready) {
  ready.erase(
      std::remove_if(ready.begin(), ready.end(),
                     [](const Readiness& x) { return x.rank < 0 || x.rank >= kMaxTraceRanks; }),
      ready.end());
  if (ready.size() < 2) return;
  for (const Readiness& x : ready) ranks_ = std::max(ranks_, x.rank + 1);
  std::sort(ready.begin(), ready.end(),
            [](const Readiness& a, const Readiness& b) { return a.ts < b.ts; });
  const double last = ready.back().ts;
  for (size_t i = 0; i < ready.size(); ++i) {
    const Readiness& r = ready[i];
    if (r.ts < last) union_for(waiting_, key(r.rank, 0)).add(r.ts, last);
    // Only later ranks keep r waiting; a tie is no wait.
    for (size_t j = i + 1; j < ready.size(); ++j) {
      const Readiness& q = ready[j];
      if (q.ts <= r.ts || q.rank == r.rank) continue;
      const uint64_t k = key(r.rank, q.rank);
      if (pairs_.count(k) == 0) waiters_[q.rank].push_back(r.rank);
      union_for(pairs_, k).add(r.ts, q.ts);
    }
  }
}

double WaitMatrix::waited_for(int r, int q) const {
  if (r < 0 || q < 0) return 0;
  auto it = pairs_.find(key(r, q));
  return it == pairs_.end() ? 0 : it->second.measure();
}

double WaitMatrix::caused(int q) const {
  auto it = waiters_.find(q);
  if (it == waiters_.end()) return 0;
  double total = 0;
  for (int r : it->second) total += waited_for(r, q);
  return total;
}

double WaitMatrix::waited(int r) const {
  if (r < 0) return 0;
  auto it = waiting_.find(key(r, 0));
  return it == waiting_.end() ? 0 : it->second.measure();
}

}  // namespace ranktime::timeline
