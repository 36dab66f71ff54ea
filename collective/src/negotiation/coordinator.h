// Rank 0's negotiation table: which tensors every rank has requested, whether the requests agree,
// and the deterministic list of responses (fused where compatible) every rank then executes.
// Pure logic: no MPI, no clock; unit tests drive it directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/message.h"
#include "ranktime/timeline/string_table.h"

namespace ranktime {

struct FusionOptions {
  // Most bytes one fused batch may hold; 0 disables fusion.
  int64_t threshold = int64_t{64} << 20;
  // Tensors of at least this many bytes run alone, in place (0: no such limit).
  int64_t max_tensor = int64_t{1} << 20;
};

// A finished negotiation: when each rank became ready (rank 0's clock), for the timeline and the
// lateness statistics.
struct Negotiation {
  uint32_t tensor_id = 0;
  OpType op = OpType::kAllreduce;
  std::vector<int64_t> ready_ns;  // per rank
  std::string error;              // the mismatch message, if the requests disagreed
};

// Checks that every rank's request for one tensor agrees. Returns "" or a message naming the
// tensor, the field that differs and each rank's value.
std::string validate_requests(const std::vector<Request>& by_rank);

// Byte size of a request's tensor on the submitting rank.
int64_t request_bytes(const Request& request);

// Packs consecutive compatible responses (same op, reduction, dtype, device, root) into batches of
// at most options.threshold bytes. `bytes[i]` is the size of singles[i]'s tensor.
std::vector<Response> plan_fusion(const std::vector<Response>& singles,
                                  const std::vector<int64_t>& bytes, const FusionOptions& options);

class Coordinator {
 public:
  Coordinator(int size, timeline::StringTable* names);

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
  timeline::StringTable* names_;
  std::unordered_map<std::string, Entry> table_;
  std::vector<std::string> completed_;  // names, in completion order
};

}  // namespace ranktime
