// Rank 0's negotiation table: which tensors every rank has requested, whether the requests agree
// (validation.h), and the deterministic list of responses (fused where compatible, fusion_plan.h)
// every rank then executes. Pure logic: no MPI, no clock; unit tests drive it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "negotiation/fusion_plan.h"
#include "negotiation/tensor_ids.h"
#include "negotiation/validation.h"

namespace ranktime {

// A finished negotiation: when each rank became ready (rank 0's clock), for the timeline and the
// lateness statistics.
struct Negotiation {
  uint32_t tensor_id = 0;
  OpType op = OpType::kAllreduce;
  std::vector<int64_t> ready_ns;  // per rank
  std::string error;              // the mismatch message, if the requests disagreed
};

class Coordinator {
 public:
  // `ids` names tensors for the responses and the timeline (outlives this).
  Coordinator(int size, TensorIds* ids);

  // Adds `rank`'s request (ready_ns already on rank 0's clock). A second request for a name the
  // rank already has pending is recorded as an error on that tensor.
  void add(int rank, Request request);

  // Responses for every tensor that all ranks have now requested, in the order they became
  // ready, validated and fused. Appends one Negotiation per tensor to *negotiations.
  std::vector<Response> take_ready(const FusionOptions& options,
                                   std::vector<Negotiation>* negotiations);

  // Tensors some but not all ranks have requested.
  size_t pending() const { return table_.size(); }

  // For the stall inspector: each pending tensor with the ranks that have not requested it yet
  // and when the first rank requested it (rank 0's clock).
  struct Stalled {
    std::string name;
    std::vector<int> missing_ranks;
    int64_t first_ready_ns;
  };
  std::vector<Stalled> stalled(int64_t older_than_ns) const;

  // Removes every pending entry (used when the job shuts down) and returns their names.
  std::vector<std::string> drain();

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    int count = 0;
    int64_t first_ready_ns = INT64_MAX;
    std::string duplicate_error;
  };
  int size_;
  TensorIds* ids_;
  std::unordered_map<std::string, Entry> table_;
  std::vector<std::string> completed_;  // names, in completion order
};

}  // namespace ranktime
