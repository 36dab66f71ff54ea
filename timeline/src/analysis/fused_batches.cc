// Fused batches from their tensors' operation slices (fusion, bandwidth and cycles read them).
#include "analysis/fused_batches.h"

#include <algorithm>
#include <cmath>

namespace ranktime::timeline::analysis {
namespace {

// Bound on fused batches waiting for their other members. The writer emits a batch's members
// close together; this only matters for broken traces.
constexpr size_t kMaxPending = size_t{1} << 16;

}  // namespace

size_t FusedBatches::KeyHash::operator()(const Key& k) const {
  return std::hash<int64_t>()(k.begin_ns) * 31 + std::hash<std::string>()(k.op) * 7 +
         static_cast<size_t>(k.rank);
}

void FusedBatches::add(int rank, int set_ranks, const Slice& op, bool error) {
  if (op.fused_tensors <= 1) {
    Pending batch;
    batch.rank = rank;
    batch.set_ranks = set_ranks;
    batch.tensors = 1;
    batch.bytes = static_cast<uint64_t>(std::max<int64_t>(0, op.bytes));
    batch.collective_us = op.collective_us;
    batch.error = error;
    hand_on(op.name, batch);
    return;
  }
  const double begin = op.collective_begin >= 0 ? op.collective_begin : op.ts;
  Key key{rank, op.name, std::llround(begin * 1000.0)};
  auto [it, inserted] = pending_.try_emplace(key);
  Pending& batch = it->second;
  if (inserted) {
    batch.serial = ++serial_;
    batch.rank = rank;
    batch.set_ranks = set_ranks;  // a fused batch's tensors share their process set
    batch.expected = op.fused_tensors;
    batch.collective_us = op.collective_us;
    order_.emplace_back(key, batch.serial);
  }
  ++batch.tensors;
  batch.bytes += static_cast<uint64_t>(std::max<int64_t>(0, op.bytes));
  batch.error = batch.error || error;
  if (static_cast<int64_t>(batch.tensors) >= batch.expected) {
    hand_on(op.name, batch);
    pending_.erase(it);
  }
  while (order_.size() > kMaxPending) {
    auto& [old_key, old_serial] = order_.front();
    auto old = pending_.find(old_key);
    if (old != pending_.end() && old->second.serial == old_serial) {
      hand_on(old_key.op, old->second);
      pending_.erase(old);
    }
    order_.pop_front();
  }
}

void FusedBatches::flush() {
  for (auto& [key, batch] : pending_) hand_on(key.op, batch);
  pending_.clear();
  order_.clear();
}

void FusedBatches::hand_on(const std::string& op, const Pending& pending) {
  Batch batch;
  batch.op = op;
  batch.rank = pending.rank;
  batch.set_ranks = pending.set_ranks;
  batch.ranks = pending.set_ranks > 0 ? pending.set_ranks : pass_.job_ranks();
  batch.tensors = pending.tensors;
  batch.bytes = pending.bytes;
  batch.collective_us = pending.collective_us;
  batch.error = pending.error;
  sink_(batch);
}

}  // namespace ranktime::timeline::analysis
