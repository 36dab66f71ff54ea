// Slice names of the timeline's phases, as they appear in the file.
#include <cstddef>

#include "ranktime/timeline/record.h"

namespace ranktime::timeline {

namespace {

// Indexed by Phase; must follow the enum's order.
constexpr const char* kPhaseNames[] = {
    "ALLREDUCE",
    "ALLGATHER",
    "BROADCAST",
    "BARRIER",
    "NEGOTIATE_ALLREDUCE",
    "NEGOTIATE_ALLGATHER",
    "NEGOTIATE_BROADCAST",
    "NEGOTIATE_BARRIER",
    "QUEUE",
    "WAIT_FOR_DATA",
    "WAIT_FOR_OTHER_TENSOR_DATA",
    "MEMCPY_IN_FUSION_BUFFER",
    "MEMCPY_OUT_FUSION_BUFFER",
    "MPI_ALLREDUCE",
    "MPI_ALLGATHER",
    "MPI_BCAST",
    "NCCL_ALLREDUCE",
    "NCCL_ALLGATHER",
    "NCCL_BCAST",
    "NCCL_REDUCESCATTER",
    "NCCL_REDUCE",
    "MEMCPY_IN_HOST_BUFFER",
    "MEMCPY_OUT_HOST_BUFFER",
    "MPI_REDUCE",
    "REDUCESCATTER",
    "ALLTOALL",
    "NEGOTIATE_REDUCESCATTER",
    "NEGOTIATE_ALLTOALL",
    "MPI_REDUCESCATTER",
    "MPI_ALLTOALL",
    "JOIN",
    "NEGOTIATE_JOIN",
    "ADASUM_EXCHANGE",
    "ADASUM_COMBINE",
    "NCCL_ALLTOALL",
};
static_assert(sizeof(kPhaseNames) / sizeof(kPhaseNames[0]) == static_cast<size_t>(Phase::kCount),
              "every Phase needs a name");

}  // namespace

const char* phase_name(Phase phase) {
  // Records arrive from other ranks as bytes: an out-of-range value must not index past the end.
  const auto index = static_cast<size_t>(phase);
  return index < static_cast<size_t>(Phase::kCount) ? kPhaseNames[index] : "UNKNOWN_PHASE";
}

}  // namespace ranktime::timeline
