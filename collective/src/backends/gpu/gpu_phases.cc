// Step plans per op and mode, and the sub-phase logs of finished jobs (see gpu_phases.h).
#include "backends/gpu/gpu_phases.h"

#include <algorithm>

namespace ranktime::gpu {

using timeline::Phase;

const char* gpu_mode_name(GpuMode mode) {
  switch (mode) {
    case GpuMode::kNccl:
      return "nccl";
    case GpuMode::kNcclHierarchical:
      return "nccl-hierarchical";
    case GpuMode::kMpiStaging:
      return "mpi-staging";
  }
  return "invalid";
}

const char* action_name(Action action) {
  static constexpr const char* kNames[] = {"pack",
                                           "unpack",
                                           "nccl-allreduce",
                                           "nccl-broadcast",
                                           "nccl-allgather",
                                           "nccl-reduce-scatter",
                                           "nccl-allgather-shards",
                                           "copy-to-host",
                                           "copy-from-host",
                                           "mpi-allreduce",
                                           "mpi-broadcast",
                                           "mpi-allgather",
                                           "nccl-reduce-scatter-blocks",
                                           "nccl-alltoall",
                                           "mpi-reducescatter",
                                           "mpi-alltoall",
                                           "zero-fill"};
  const auto i = static_cast<size_t>(action);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "invalid";
}

bool is_collective(Action action) {
  switch (action) {
    case Action::kPack:
    case Action::kUnpack:
    case Action::kCopyToHost:
    case Action::kCopyFromHost:
    case Action::kZeroFill:
      return false;
    default:
      return true;
  }
}

namespace {

constexpr Step kPackStep{Action::kPack, Phase::kMemcpyInFusionBuffer, false};
constexpr Step kUnpackStep{Action::kUnpack, Phase::kMemcpyOutFusionBuffer, false};
constexpr Step kToHost{Action::kCopyToHost, Phase::kMemcpyInHostBuffer, false};
constexpr Step kFromHost{Action::kCopyFromHost, Phase::kMemcpyOutHostBuffer, false};
constexpr Step kZeroFillStep{Action::kZeroFill, Phase::kMemcpyInFusionBuffer, false};

std::vector<Step> allreduce_steps(GpuMode mode, bool fused) {
  std::vector<Step> s;
  switch (mode) {
    case GpuMode::kNccl:
      if (fused) s.push_back(kPackStep);
      s.push_back({Action::kNcclAllreduce, Phase::kNcclAllreduce, false});
      if (fused) s.push_back(kUnpackStep);
      break;
    case GpuMode::kNcclHierarchical:
      s = {kPackStep,  {Action::kNcclReduceScatter, Phase::kNcclReducescatter, false},
           kToHost,    {Action::kMpiAllreduce, Phase::kMpiAllreduce, true},
           kFromHost,  {Action::kNcclAllgatherShards, Phase::kNcclAllgather, false},
           kUnpackStep};
      break;
    case GpuMode::kMpiStaging:
      if (fused) s.push_back(kPackStep);
      s.push_back(kToHost);
      s.push_back({Action::kMpiAllreduce, Phase::kMpiAllreduce, true});
      s.push_back(kFromHost);
      if (fused) s.push_back(kUnpackStep);
      break;
  }
  return s;
}

std::vector<Step> broadcast_steps(GpuMode mode, bool fused, bool root) {
  std::vector<Step> s;
  if (fused && root) s.push_back(kPackStep);
  if (mode == GpuMode::kMpiStaging) {
    if (root) s.push_back(kToHost);
    s.push_back({Action::kMpiBroadcast, Phase::kMpiBcast, true});
    if (!root) s.push_back(kFromHost);
  } else {
    s.push_back({Action::kNcclBroadcast, Phase::kNcclBcast, false});
  }
  if (fused && !root) s.push_back(kUnpackStep);
  return s;
}

std::vector<Step> allgather_steps(GpuMode mode) {
  // The gathered result goes to the handle's host output (the public API's contract), so both
  // paths end with a copy into pinned host memory.
  if (mode == GpuMode::kMpiStaging) {
    return {kToHost, {Action::kMpiAllgather, Phase::kMpiAllgather, true}};
  }
  return {{Action::kNcclAllgather, Phase::kNcclAllgather, false}, kToHost};
}

// Reducescatter and alltoall return their results in the handle's host output (as allgather
// does), so the NCCL plans end with a copy into pinned host memory, and the staged ones copy the
// whole tensor to the host and run the host backend's collective there.
std::vector<Step> reducescatter_steps(GpuMode mode, bool packed) {
  if (mode == GpuMode::kMpiStaging) {
    return {kToHost, {Action::kMpiReducescatter, Phase::kMpiReducescatter, true}};
  }
  std::vector<Step> s;
  if (packed) s.push_back(kPackStep);
  s.push_back({Action::kNcclReduceScatterBlocks, Phase::kNcclReducescatter, false});
  s.push_back(kToHost);
  return s;
}

std::vector<Step> alltoall_steps(GpuMode mode) {
  if (mode == GpuMode::kMpiStaging) {
    return {kToHost, {Action::kMpiAlltoall, Phase::kMpiAlltoall, true}};
  }
  return {{Action::kNcclAlltoall, Phase::kNcclAlltoall, false}, kToHost};
}

}  // namespace

std::vector<Step> plan_steps(const PlanInput& in) {
  switch (in.op) {
    case OpType::kAllreduce: {
      std::vector<Step> steps = allreduce_steps(in.mode, in.fused);
      if (in.zeros) steps.insert(steps.begin(), kZeroFillStep);
      return steps;
    }
    case OpType::kBroadcast:
      return broadcast_steps(in.mode, in.fused, in.root);
    case OpType::kAllgather:
      return allgather_steps(in.mode);
    case OpType::kReducescatter:
      return reducescatter_steps(in.mode, in.packed);
    case OpType::kAlltoall:
      return alltoall_steps(in.mode);
    default:
      return {};
  }
}

bool returns_host_output(OpType op) {
  return op == OpType::kAllgather || op == OpType::kReducescatter || op == OpType::kAlltoall;
}

bool uses_fusion_buffer(const std::vector<Step>& steps) {
  return std::any_of(steps.begin(), steps.end(), [](const Step& s) {
    return s.action == Action::kPack || s.action == Action::kUnpack;
  });
}

JobLog build_job_log(const JobTimes& times, int64_t lo_ns, int64_t hi_ns) {
  JobLog out;
  hi_ns = std::max(hi_ns, lo_ns);
  std::vector<int64_t> m = times.marks;
  if (m.empty()) m.push_back(lo_ns);
  int64_t floor = lo_ns;
  for (int64_t& t : m) {
    t = std::min(std::max(t, floor), hi_ns);
    floor = t;
  }
  out.start_ns = m.front();
  out.end_ns = m.back();
  const bool waits =
      times.data_ready_mark >= 0 && times.data_ready_mark < static_cast<int>(m.size());
  const int64_t all_ready = waits ? m[times.data_ready_mark] : out.start_ns;

  if (waits) out.log.add(Phase::kWaitForData, out.start_ns, all_ready);
  PhaseLog steps;
  for (const JobTimes::Span& s : times.spans) {
    if (s.begin < 0 || s.end < s.begin || s.end >= static_cast<int>(m.size())) continue;
    steps.add(s.phase, m[s.begin], m[s.end]);
  }
  out.log.spans.insert(out.log.spans.end(), steps.spans.begin(), steps.spans.end());

  // Per-tensor lanes differ only when tensors became ready at different times.
  bool differ = false;
  for (int64_t t : times.tensor_ready_ns) differ = differ || t == kNoReadyEvent || t < all_ready;
  if (!waits || !differ) return out;
  out.entry_logs.resize(times.tensor_ready_ns.size());
  for (size_t i = 0; i < times.tensor_ready_ns.size(); ++i) {
    PhaseLog& l = out.entry_logs[i];
    const int64_t t = times.tensor_ready_ns[i];
    const int64_t mine =
        t == kNoReadyEvent ? out.start_ns : std::min(std::max(t, out.start_ns), all_ready);
    if (t != kNoReadyEvent) l.add(Phase::kWaitForData, out.start_ns, mine);
    if (mine < all_ready) l.add(Phase::kWaitForOtherTensorData, mine, all_ready);
    l.spans.insert(l.spans.end(), steps.spans.begin(), steps.spans.end());
  }
  return out;
}

}  // namespace ranktime::gpu
