// Gathers the operation slices of a fused batch (one per tensor, on each rank lane) into the
// batch they ran as, keyed by (rank, op, first collective sub-phase's begin), and hands each
// batch on once all its tensors have closed. Bounded: past kMaxPending batches waiting for
// members (only broken traces get there), the oldest is handed on as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "analysis/analysis.h"

namespace ranktime::timeline::analysis {

class FusedBatches {
 public:
  using Sink = std::function<void(const Batch&)>;
  // `sink` gets each batch; `pass` gives the job's ranks at the time a batch closes.
  FusedBatches(const Pass& pass, Sink sink) : pass_(pass), sink_(std::move(sink)) {}
  // One tensor's operation slice on rank `rank`'s lane; `set_ranks`: its process set's size.
  void add(int rank, int set_ranks, const Slice& op, bool error);
  // Hands on the batches still waiting for members (window edge, truncated file) as they are.
  void flush();

 private:
  struct Key {
    int rank;
    std::string op;
    int64_t begin_ns;
    bool operator==(const Key& o) const {
      return rank == o.rank && begin_ns == o.begin_ns && op == o.op;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Pending {
    uint64_t serial = 0;
    int64_t expected = 1;
    uint64_t tensors = 0;
    uint64_t bytes = 0;
    double collective_us = 0;
    bool error = false;
    int rank = 0;
    int set_ranks = 0;
  };
  void hand_on(const std::string& op, const Pending& batch);

  const Pass& pass_;
  Sink sink_;
  std::unordered_map<Key, Pending, KeyHash> pending_;
  std::deque<std::pair<Key, uint64_t>> order_;
  uint64_t serial_ = 0;
};

}  // namespace ranktime::timeline::analysis
