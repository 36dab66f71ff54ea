// The event names a ranktime timeline may contain (docs/timeline-format.md), for readers:
// which are operations, negotiations, sub-phases and collectives.
#pragma once

#include <cstdint>

#include <string>
#include <string_view>

namespace ranktime::timeline {

// More ranks than any job has: a larger rank count or rank number in a trace is corrupt input,
// and is never used to size anything.
inline constexpr int64_t kMaxTraceRanks = int64_t{1} << 20;

// "ALLREDUCE", "ALLGATHER", "BROADCAST", "BARRIER", "REDUCESCATTER", "ALLTOALL", "JOIN".
bool is_operation_name(std::string_view name);
// Those names for a message, each after `prefix`: "ALLREDUCE, ALLGATHER, ... or JOIN".
std::string operation_names_text(std::string_view prefix = "");
// "NEGOTIATE_<OP>" for a known operation; returns the operation, or "" when not one.
std::string_view negotiation_operation(std::string_view name);
// QUEUE, WAIT_FOR_DATA, ..., MEMCPY_OUT_HOST_BUFFER: the sub-phases of an operation slice.
bool is_subphase_name(std::string_view name);
// The sub-phases that move data between ranks (MPI_*, NCCL_*): what bandwidth is measured on.
bool is_collective_subphase(std::string_view name);
// Position of a sub-phase in the order Horovod lists them (for stable tables); large if unknown.
int subphase_rank(std::string_view name);
// Metadata event names: process_name, ..., ranktime_run, ranktime_run_end.
bool is_metadata_name(std::string_view name);

// Step marks: on pid 0, one thread named "steps rank r" per rank, with a complete (`X`) slice
// named STEP per step (args `step`).
inline constexpr std::string_view kStepSliceName = "STEP";
// r for a thread named "steps rank r"; -1 for any other name.
int64_t step_thread_rank(std::string_view thread_name);

// Regions: rank R's own process ("rank R", sorted after the tensors' processes) has a thread
// named "regions" (tid kRegionsThreadTid) with one complete (`X`) slice per region, named by the
// user (untrusted text), with args `blocked_us` when the rank was blocked inside ranktime
// during it. Tensor pids are string ids + 1, far below the base, so a tensor named "rank 3"
// never shares a pid with rank 3's process.
inline constexpr int64_t kRankProcessPidBase = 1'000'000'000;
inline constexpr int64_t kRegionsThreadTid = 1;
inline constexpr std::string_view kRegionsThreadName = "regions";
inline constexpr int64_t rank_process_pid(int64_t rank) { return kRankProcessPidBase + rank; }
// R for rank R's process pid; -1 for any other pid.
inline constexpr int64_t rank_process_rank(int64_t pid) {
  return pid >= kRankProcessPidBase && pid < kRankProcessPidBase + kMaxTraceRanks
             ? pid - kRankProcessPidBase
             : -1;
}

// torch.profiler events (`ranktime merge`): rank R's go into a process of their own named
// "rank R (torch)" (sorted by its pid, after the ranks' processes), on a second base clear of the
// first (kRankProcessPidBase + kMaxTraceRanks is far below it) and below 2^31, which Chrome's
// viewer needs. Their threads are the profiler's, renumbered from 1; names are the profiler's.
inline constexpr int64_t kTorchProcessPidBase = 1'500'000'000;
inline constexpr int64_t torch_process_pid(int64_t rank) { return kTorchProcessPidBase + rank; }
// R for rank R's torch process pid; -1 for any other pid.
inline constexpr int64_t torch_process_rank(int64_t pid) {
  return pid >= kTorchProcessPidBase && pid < kTorchProcessPidBase + kMaxTraceRanks
             ? pid - kTorchProcessPidBase
             : -1;
}
static_assert(kRankProcessPidBase + kMaxTraceRanks < kTorchProcessPidBase &&
                  kTorchProcessPidBase + kMaxTraceRanks < (int64_t{1} << 31),
              "torch processes clear of the ranks' and within Chrome's 32-bit pids");

}  // namespace ranktime::timeline
