// Where the time went: per operation, its negotiation, the operation slice and each sub-phase,
// with counts, totals and each one's share of the wall time (a union per lane, so overlapping
// slices count once). A fused batch's shared slices count once. Summary::phases.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analysis/analysis.h"
#include "ranktime/timeline/trace_waits.h"

namespace ranktime::timeline::analysis {

class PhasesAnalysis : public Analysis {
 public:
  void add(const Negotiation& n) override;
  void add(const RankSlice& slice) override;
  void finish(Summary& s) override;

 private:
  struct Accum {
    uint64_t count = 0;
    double total = 0;
    double min = 0;
    double max = 0;
    void add(double v);
  };
  // A slice a fused batch's tensors share: same rank, name, begin and end.
  struct SliceKey {
    int rank;
    std::string name;
    int64_t begin_ns;
    int64_t end_ns;
    bool operator==(const SliceKey& o) const {
      return rank == o.rank && begin_ns == o.begin_ns && end_ns == o.end_ns && name == o.name;
    }
  };
  struct SliceKeyHash {
    size_t operator()(const SliceKey& k) const;
  };
  // Whether this is the first copy of a slice the batch's `fused_tensors` tensors share.
  bool first_of_fused(int rank, const std::string& name, double begin, double end,
                      int64_t fused_tensors);
  PhaseStat row(const Summary& s, const std::string& op, const std::string& phase, const Accum& a,
                bool negotiation) const;

  std::map<std::pair<std::string, std::string>, Accum> phase_accum_;  // (op, phase)
  std::map<std::string, Accum> negotiate_accum_;                      // op
  // Unions of one phase's slices, per rank.
  std::map<std::pair<std::string, std::string>, std::vector<IntervalUnion>> busy_;  // (op, phase)
  std::map<std::string, IntervalUnion> negotiate_busy_;                             // op
  // Shared slices of fused batches already counted, with how many copies are still to come.
  std::unordered_map<SliceKey, std::pair<uint64_t, int64_t>, SliceKeyHash> shared_slices_;
  std::deque<std::pair<SliceKey, uint64_t>> shared_order_;
  uint64_t serial_ = 0;
};

}  // namespace ranktime::timeline::analysis
