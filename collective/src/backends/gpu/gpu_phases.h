// The steps one device response runs, in order, with the timeline phase each is recorded as; and
// the mapping of a finished job's timestamps into the sub-phases of each tensor's lane. Pure: the
// backend executes these plans, tests check them without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "core/message.h"
#include "core/tensor_entry.h"
#include "ranktime/timeline/record.h"

namespace ranktime::gpu {

// How a device set moves data. Chosen once per device set, identically on every rank.
enum class GpuMode : uint8_t {
  kNccl,              // NCCL on one communicator over all ranks
  kNcclHierarchical,  // allreduce: NCCL within the node, MPI across nodes (others as kNccl)
  kMpiStaging,        // copy to pinned host memory, MPI there, copy back (no NCCL)
};
const char* gpu_mode_name(GpuMode mode);

enum class Action : uint8_t {
  kPack,                 // batched copy: tensors -> device fusion buffer
  kUnpack,               // batched copy: device fusion buffer -> tensors
  kNcclAllreduce,        // on the working buffer (fusion buffer, or the one tensor in place)
  kNcclBroadcast,        // on the working buffer
  kNcclAllgather,        // variable first dimension: grouped broadcasts into a device output
  kNcclReduceScatter,    // hierarchical: node-local, in place, leaves this rank's shard reduced
  kNcclAllgatherShards,  // hierarchical: node-local, in place, spreads the shards back
  kCopyToHost,           // working buffer (or shard, or device output) -> pinned host buffer
  kCopyFromHost,         // pinned host buffer -> working buffer (or shard)
  kMpiAllreduce,         // on the host buffer (average divides after the sum)
  kMpiBroadcast,         // on the host buffer
  kMpiAllgather,         // host buffer -> the handle's output
  // Reducescatter over every rank of the set: the equal blocks of plan_scatter (the tensor, or
  // the fusion buffer it was packed into) -> this rank's reduced block in a device output.
  kNcclReduceScatterBlocks,
  kNcclAlltoall,      // grouped ncclSend/ncclRecv per rank: the tensor -> a device output
  kMpiReducescatter,  // host buffer -> the handle's output
  kMpiAlltoall,       // host buffer -> the handle's output (exchanges the row counts first)
  kZeroFill,          // a joined rank's zeros: cudaMemsetAsync of the (scratch) working buffer
};
const char* action_name(Action action);
// Whether every rank of the set takes part (NCCL and MPI calls), as against this rank's copies.
bool is_collective(Action action);

struct Step {
  Action action;
  timeline::Phase phase;  // what the timeline calls it
  bool on_host;           // runs on the CPU (timed on the host clock), not on the stream
};

struct PlanInput {
  OpType op = OpType::kAllreduce;
  GpuMode mode = GpuMode::kNccl;
  bool fused = false;  // more than one tensor in the response
  bool root = false;   // broadcast: this rank is the root
  // Reducescatter: the rows do not split evenly among the ranks, so they are packed into equal
  // blocks first (plan_scatter).
  bool packed = false;
  // Allreduce: some of this rank's tensors are a joined rank's zeros (runtime/join_zeros.h): the
  // working buffer is scratch, zeroed before anything is packed into it.
  bool zeros = false;
};

// The ordered steps. Every rank gets the same collective steps in the same order; the copies
// differ only for broadcast (the root packs, the others unpack) and for a joined rank's zeros
// (a zero fill first, recorded as MEMCPY_IN_FUSION_BUFFER: it is how its input gets there).
// Empty for ops with no data.
std::vector<Step> plan_steps(const PlanInput& input);

// Ops whose result goes to the handle's host output (the public API's contract for a result of
// another shape than the input): allgather, reducescatter, alltoall. Their rows are dimension 0.
bool returns_host_output(OpType op);

// Whether a plan goes through the device fusion buffer even for one tensor (hierarchical
// allreduce needs a buffer it can split into equal shards).
bool uses_fusion_buffer(const std::vector<Step>& steps);

// Timestamps of one executed job, on the host clock (GPU events already mapped, so possibly a
// little out of order: mapping has an error bound).
struct JobTimes {
  struct Span {
    timeline::Phase phase;
    int begin, end;  // indexes into marks
  };
  std::vector<int64_t> marks;  // in the order they happened: marks[0] is the job's start
  std::vector<Span> spans;     // the steps, in order
  // The end of the wait for the tensors' ready events (index into marks); -1 when no tensor had a
  // ready event.
  int data_ready_mark = -1;
  // Per tensor: when its own data was ready, or kNoReadyEvent when it had no ready event.
  std::vector<int64_t> tensor_ready_ns;
};
inline constexpr int64_t kNoReadyEvent = INT64_MIN;

struct JobLog {
  int64_t start_ns = 0, end_ns = 0;
  PhaseLog log;                      // the sub-phases shared by every tensor of the job
  std::vector<PhaseLog> entry_logs;  // per tensor, when the wait phases differ; else empty
};

// Builds the lanes' sub-phases: WAIT_FOR_DATA from the start until the tensor's data was ready,
// WAIT_FOR_OTHER_TENSOR_DATA from then until every tensor's was, then the steps. Timestamps are
// made monotone and clamped to [lo_ns, hi_ns] (enqueue time, completion seen), so the phases nest
// and never overlap even where mapping error would have them cross.
JobLog build_job_log(const JobTimes& times, int64_t lo_ns, int64_t hi_ns);

}  // namespace ranktime::gpu
