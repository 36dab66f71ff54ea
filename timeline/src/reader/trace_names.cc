// The names of docs/timeline-format.md, as lists a reader can check against.
#include "ranktime/timeline/trace_names.h"

#include <array>

namespace ranktime::timeline {
namespace {

constexpr std::array<std::string_view, 4> kOperations = {"ALLREDUCE", "ALLGATHER", "BROADCAST",
                                                         "BARRIER"};
// In Horovod's order: the order tables list them in.
constexpr std::array<std::string_view, 15> kSubphases = {
    "QUEUE",
    "WAIT_FOR_DATA",
    "WAIT_FOR_OTHER_TENSOR_DATA",
    "MEMCPY_IN_FUSION_BUFFER",
    "MEMCPY_IN_HOST_BUFFER",
    "NCCL_REDUCESCATTER",
    "NCCL_REDUCE",
    "MPI_ALLREDUCE",
    "MPI_ALLGATHER",
    "MPI_BCAST",
    "NCCL_ALLREDUCE",
    "NCCL_ALLGATHER",
    "NCCL_BCAST",
    "MEMCPY_OUT_HOST_BUFFER",
    "MEMCPY_OUT_FUSION_BUFFER",
};
constexpr std::array<std::string_view, 6> kMetadata = {"process_name", "process_sort_index",
                                                       "thread_name",  "thread_sort_index",
                                                       "ranktime_run", "ranktime_run_end"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view name) {
  for (std::string_view item : list) {
    if (item == name) return true;
  }
  return false;
}

}  // namespace

bool is_operation_name(std::string_view name) { return contains(kOperations, name); }

std::string_view negotiation_operation(std::string_view name) {
  constexpr std::string_view kPrefix = "NEGOTIATE_";
  if (name.substr(0, kPrefix.size()) != kPrefix) return {};
  std::string_view op = name.substr(kPrefix.size());
  for (std::string_view item : kOperations) {
    if (item == op) return item;
  }
  return {};
}

bool is_subphase_name(std::string_view name) { return contains(kSubphases, name); }

bool is_collective_subphase(std::string_view name) {
  return name.substr(0, 4) == "MPI_" || name.substr(0, 5) == "NCCL_";
}

int subphase_rank(std::string_view name) {
  for (size_t i = 0; i < kSubphases.size(); ++i) {
    if (kSubphases[i] == name) return static_cast<int>(i);
  }
  return 1000;
}

bool is_metadata_name(std::string_view name) { return contains(kMetadata, name); }

}  // namespace ranktime::timeline
