// Time per phase: totals of the slices, and busy time as unions per lane.
#include "analysis/phases.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline::analysis {
namespace {

// Bound on fused batches' shared slices waiting for their other copies. The writer emits a
// batch's members close together; this only matters for broken traces.
constexpr size_t kMaxPending = size_t{1} << 16;
// Intervals kept per (phase, rank) union before older ones are folded (IntervalUnion).
constexpr size_t kPhaseUnionIntervals = 256;

}  // namespace

void PhasesAnalysis::Accum::add(double v) {
  if (count == 0) {
    min = max = v;
  } else {
    min = std::min(min, v);
    max = std::max(max, v);
  }
  ++count;
  total += v;
}

size_t PhasesAnalysis::SliceKeyHash::operator()(const SliceKey& k) const {
  return std::hash<int64_t>()(k.begin_ns) * 31 + std::hash<int64_t>()(k.end_ns) * 17 +
         std::hash<std::string>()(k.name) * 7 + static_cast<size_t>(k.rank);
}

void PhasesAnalysis::add(const Negotiation& n) {
  const std::string op(n.op);
  auto busy = negotiate_busy_.try_emplace(op, kPhaseUnionIntervals).first;
  busy->second.add(n.begin_us, n.end_us);
  negotiate_accum_[op].add(n.end_us - n.begin_us);
}

void PhasesAnalysis::add(const RankSlice& slice) {
  const std::string& op = slice.op->name;
  const std::string& name = *slice.name;
  std::vector<IntervalUnion>& by_rank = busy_[{op, name}];
  if (static_cast<size_t>(slice.rank) >= by_rank.size()) {
    by_rank.resize(slice.rank + 1, IntervalUnion(kPhaseUnionIntervals));
  }
  by_rank[slice.rank].add(slice.begin_us, slice.end_us);
  if (first_of_fused(slice.rank, name, slice.begin_us, slice.end_us, slice.op->fused_tensors)) {
    phase_accum_[{op, name}].add(slice.end_us - slice.begin_us);
  }
}

bool PhasesAnalysis::first_of_fused(int rank, const std::string& name, double begin, double end,
                                    int64_t fused_tensors) {
  if (fused_tensors <= 1) return true;
  SliceKey key{rank, name, to_ns(begin), to_ns(end)};
  auto it = shared_slices_.find(key);
  if (it != shared_slices_.end()) {
    if (--it->second.second <= 0) shared_slices_.erase(it);
    return false;
  }
  const uint64_t serial = ++serial_;
  shared_slices_.emplace(key, std::make_pair(serial, fused_tensors - 1));
  shared_order_.emplace_back(std::move(key), serial);
  while (shared_order_.size() > kMaxPending) {
    auto& [old_key, old_serial] = shared_order_.front();
    auto old = shared_slices_.find(old_key);
    if (old != shared_slices_.end() && old->second.first == old_serial) shared_slices_.erase(old);
    shared_order_.pop_front();
  }
  return true;
}

PhaseStat PhasesAnalysis::row(const Summary& s, const std::string& op, const std::string& phase,
                              const Accum& a, bool negotiation) const {
  PhaseStat row;
  row.op = op;
  row.phase = phase;
  row.negotiation = negotiation;
  row.count = a.count;
  row.total_us = a.total;
  row.min_us = a.min;
  row.max_us = a.max;
  if (negotiation) {
    auto busy = negotiate_busy_.find(op);
    row.busy_us = busy == negotiate_busy_.end() ? 0 : busy->second.measure();
  } else {
    auto busy = busy_.find({op, phase});
    if (busy != busy_.end()) {
      double sum = 0;
      for (const IntervalUnion& u : busy->second) {
        row.busy_us_by_rank.push_back(u.measure());
        sum += row.busy_us_by_rank.back();
      }
      row.busy_us = sum / std::max(1, s.rank_lanes);
    }
  }
  row.share = s.wall_us > 0 ? std::min(1.0, row.busy_us / s.wall_us) : 0;
  return row;
}

void PhasesAnalysis::finish(Summary& s) {
  // Operations by total time, each followed by its negotiation and its sub-phases in Horovod's
  // order.
  std::map<std::string, double> op_total;
  for (const auto& [key, accum] : phase_accum_) {
    if (key.first == key.second) op_total[key.first] += accum.total;
  }
  for (const auto& [op, accum] : negotiate_accum_) op_total.try_emplace(op, 0.0);
  std::vector<std::string> ops;
  for (const auto& [op, total] : op_total) ops.push_back(op);
  std::stable_sort(ops.begin(), ops.end(), [&](const std::string& a, const std::string& b) {
    return op_total[a] > op_total[b];
  });
  for (const std::string& op : ops) {
    auto neg = negotiate_accum_.find(op);
    if (neg != negotiate_accum_.end()) {
      s.phases.push_back(row(s, op, "NEGOTIATE_" + op, neg->second, true));
    }
    auto self = phase_accum_.find({op, op});
    if (self != phase_accum_.end()) s.phases.push_back(row(s, op, op, self->second, false));
    std::vector<std::pair<std::string, const Accum*>> subs;
    for (auto it = phase_accum_.lower_bound({op, ""});
         it != phase_accum_.end() && it->first.first == op; ++it) {
      if (it->first.second != op) subs.emplace_back(it->first.second, &it->second);
    }
    std::stable_sort(subs.begin(), subs.end(), [](const auto& a, const auto& b) {
      return subphase_rank(a.first) < subphase_rank(b.first);
    });
    for (const auto& [phase, accum] : subs) s.phases.push_back(row(s, op, phase, *accum, false));
  }
}

}  // namespace ranktime::timeline::analysis
