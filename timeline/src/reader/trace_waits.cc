// Interval unions and the rank-by-rank wait matrix behind `others_waited_ms`.
#include "ranktime/timeline/trace_waits.h"

#include <algorithm>

#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

// Intervals kept for the whole matrix when the bound is picked automatically: about 16 MiB.
constexpr size_t kMatrixIntervals = size_t{1} << 20;

size_t auto_bound(int ranks) {
  const size_t cells = static_cast<size_t>(std::max(1, ranks)) * static_cast<size_t>(ranks + 1);
  return std::clamp<size_t>(kMatrixIntervals / cells, 16, 1024);
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

WaitMatrix::WaitMatrix(int ranks, size_t max_open)
    : max_open_(max_open), auto_bound_(max_open == 0) {
  reserve(ranks);
}

void WaitMatrix::reserve(int ranks) {
  if (ranks <= ranks_) return;
  const size_t bound = auto_bound_ ? auto_bound(ranks) : max_open_;
  std::vector<IntervalUnion> pairs(static_cast<size_t>(ranks) * ranks, IntervalUnion(bound));
  for (int r = 0; r < ranks_; ++r) {
    for (int q = 0; q < ranks_; ++q) {
      pairs[static_cast<size_t>(r) * ranks + q] = std::move(pairs_[index(r, q)]);
    }
  }
  pairs_ = std::move(pairs);
  waiting_.resize(static_cast<size_t>(ranks), IntervalUnion(bound));
  ranks_ = ranks;
}

void WaitMatrix::add(std::vector<Readiness> ready) {
  ready.erase(
      std::remove_if(ready.begin(), ready.end(),
                     [](const Readiness& x) { return x.rank < 0 || x.rank >= kMaxTraceRanks; }),
      ready.end());
  if (ready.size() < 2) return;
  int top = 0;
  for (const Readiness& x : ready) top = std::max(top, x.rank);
  reserve(top + 1);
  std::sort(ready.begin(), ready.end(),
            [](const Readiness& a, const Readiness& b) { return a.ts < b.ts; });
  const double last = ready.back().ts;
  for (size_t i = 0; i < ready.size(); ++i) {
    const Readiness& r = ready[i];
    waiting_[r.rank].add(r.ts, last);
    // Only later ranks keep r waiting; a tie is no wait.
    for (size_t j = i + 1; j < ready.size(); ++j) {
      if (ready[j].ts > r.ts && ready[j].rank != r.rank) {
        pairs_[index(r.rank, ready[j].rank)].add(r.ts, ready[j].ts);
      }
    }
  }
}

double WaitMatrix::waited_for(int r, int q) const {
  if (r < 0 || q < 0 || r >= ranks_ || q >= ranks_) return 0;
  return pairs_[index(r, q)].measure();
}

double WaitMatrix::caused(int q) const {
  double total = 0;
  for (int r = 0; r < ranks_; ++r) {
    if (r != q) total += waited_for(r, q);
  }
  return total;
}

double WaitMatrix::waited(int r) const {
  if (r < 0 || r >= ranks_) return 0;
  return waiting_[r].measure();
}

}  // namespace ranktime::timeline
