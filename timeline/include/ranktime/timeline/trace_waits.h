// Wall-clock waiting between ranks, Scalasca's "wait at N x N": while rank r has a tensor ready
// and rank q has not, r waits for q. Overlapping negotiations count once (a union over time), so
// the wait on q can never exceed (ranks - 1) x wall time. Pure logic, no trace format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ranktime::timeline {

// The measure (total length) of a union of intervals, in bounded memory. Intervals are kept
// merged and sorted; past `max_open` of them, the older half is folded into a running total and
// later intervals are clipped to start after it. A trace's intervals arrive nearly in time order,
// so folding changes nothing in practice; out of order, it can only count less, never twice.
class IntervalUnion {
 public:
  explicit IntervalUnion(size_t max_open = 256) : max_open_(max_open < 2 ? 2 : max_open) {}
  void add(double begin, double end);
  double measure() const;
  bool empty() const { return open_.empty() && folded_ == 0; }

 private:
  std::vector<std::pair<double, double>> open_;  // disjoint, sorted by begin
  double folded_ = 0;
  double folded_until_ = -std::numeric_limits<double>::infinity();
  size_t max_open_;
};

// One rank's readiness in one negotiation, on rank 0's clock.
struct Readiness {
  int rank = 0;
  double ts = 0;
};

// Waits between ranks, negotiation by negotiation. Only pairs that waited take memory, so a
// trace naming absurd rank numbers costs what its ticks cost, not ranks squared.
class WaitMatrix {
 public:
  // `max_open`: IntervalUnion's bound per pair (0: one that keeps the pairs to about a million
  // intervals in all, 16 MiB, for the number of ranks seen).
  explicit WaitMatrix(size_t max_open = 0) : max_open_(max_open) {}
  // One more than the highest rank added so far.
  int ranks() const { return ranks_; }
  // One negotiation: rank r waits for rank q over [ts_r, ts_q] when ts_q > ts_r. Ranks
  // outside [0, kMaxTraceRanks) are ignored.
  void add(std::vector<Readiness> ready);

  double waited_for(int r, int q) const;  // W(r, q): the union of r's waits for q
  double caused(int q) const;             // the sum over r != q of W(r, q)
  // The union of r's waits for any rank: each negotiation's [ts_r, ts of the last rank].
  double waited(int r) const;

 private:
  static uint64_t key(int r, int q) {
    return (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(q);
  }
  IntervalUnion& union_for(std::unordered_map<uint64_t, IntervalUnion>& map, uint64_t k);
  int ranks_ = 0;
  size_t max_open_ = 0;
  std::unordered_map<uint64_t, IntervalUnion> pairs_;    // key(r, q)
  std::unordered_map<int, std::vector<int>> waiters_;    // q -> the r with a pair (r, q)
  std::unordered_map<uint64_t, IntervalUnion> waiting_;  // key(r, 0)
};

}  // namespace ranktime::timeline
