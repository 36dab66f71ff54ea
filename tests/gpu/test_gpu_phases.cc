// The step plan of every op in every GPU mode (what runs, in which order, under which timeline
// name) and the per-lane sub-phases built from a finished job's timestamps. Pure, no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/gpu/gpu_phases.h"

namespace ranktime::gpu {
namespace {

using timeline::Phase;

std::vector<std::string> names(const std::vector<Step>& steps) {
  std::vector<std::string> out;
  for (const Step& s : steps) out.push_back(timeline::phase_name(s.phase));
  return out;
}

using Names = std::vector<std::string>;

TEST(PlanSteps, NcclAllreduce) {
  EXPECT_EQ(names(plan_steps({OpType::kAllreduce, GpuMode::kNccl, false, false})),
            Names{"NCCL_ALLREDUCE"});
  EXPECT_EQ(names(plan_steps({OpType::kAllreduce, GpuMode::kNccl, true, false})),
            (Names{"MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"}));
}

TEST(PlanSteps, HierarchicalAllreduceAlwaysUsesTheFusionBuffer) {
  const Names expected = {
      "MEMCPY_IN_FUSION_BUFFER", "NCCL_REDUCESCATTER", "MEMCPY_IN_HOST_BUFFER",   "MPI_ALLREDUCE",
      "MEMCPY_OUT_HOST_BUFFER",  "NCCL_ALLGATHER",     "MEMCPY_OUT_FUSION_BUFFER"};
  for (bool fused : {false, true}) {
    auto steps = plan_steps({OpType::kAllreduce, GpuMode::kNcclHierarchical, fused, false});
    EXPECT_EQ(names(steps), expected);
    EXPECT_TRUE(uses_fusion_buffer(steps));
    EXPECT_EQ(steps[1].action, Action::kNcclReduceScatter);
    EXPECT_EQ(steps[5].action, Action::kNcclAllgatherShards);
    for (const Step& s : steps) EXPECT_EQ(s.on_host, s.phase == Phase::kMpiAllreduce);
  }
}

TEST(PlanSteps, HierarchicalModeRunsOtherOpsFlat) {
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kNcclHierarchical, false, true})),
            Names{"NCCL_BCAST"});
  EXPECT_EQ(names(plan_steps({OpType::kAllgather, GpuMode::kNcclHierarchical, false, false})),
            (Names{"NCCL_ALLGATHER", "MEMCPY_IN_HOST_BUFFER"}));
}

TEST(PlanSteps, MpiStagingAllreduce) {
  EXPECT_EQ(names(plan_steps({OpType::kAllreduce, GpuMode::kMpiStaging, false, false})),
            (Names{"MEMCPY_IN_HOST_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_HOST_BUFFER"}));
  auto fused = plan_steps({OpType::kAllreduce, GpuMode::kMpiStaging, true, false});
  EXPECT_EQ(names(fused),
            (Names{"MEMCPY_IN_FUSION_BUFFER", "MEMCPY_IN_HOST_BUFFER", "MPI_ALLREDUCE",
                   "MEMCPY_OUT_HOST_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}));
  EXPECT_TRUE(fused[2].on_host);
  EXPECT_FALSE(fused[1].on_host);  // the memcpy phases are timed on the GPU
}

TEST(PlanSteps, BroadcastCopiesDependOnTheRoot) {
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kNccl, true, true})),
            (Names{"MEMCPY_IN_FUSION_BUFFER", "NCCL_BCAST"}));
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kNccl, true, false})),
            (Names{"NCCL_BCAST", "MEMCPY_OUT_FUSION_BUFFER"}));
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kNccl, false, false})),
            Names{"NCCL_BCAST"});
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kMpiStaging, false, true})),
            (Names{"MEMCPY_IN_HOST_BUFFER", "MPI_BCAST"}));
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kMpiStaging, true, false})),
            (Names{"MPI_BCAST", "MEMCPY_OUT_HOST_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}));
}

TEST(PlanSteps, Allgather) {
  EXPECT_EQ(names(plan_steps({OpType::kAllgather, GpuMode::kNccl, false, false})),
            (Names{"NCCL_ALLGATHER", "MEMCPY_IN_HOST_BUFFER"}));
  EXPECT_EQ(names(plan_steps({OpType::kAllgather, GpuMode::kMpiStaging, false, false})),
            (Names{"MEMCPY_IN_HOST_BUFFER", "MPI_ALLGATHER"}));
}

TEST(PlanSteps, ReducescatterPacksOnlyRowsThatSplitUnevenly) {
  for (GpuMode mode : {GpuMode::kNccl, GpuMode::kNcclHierarchical}) {
    auto even = plan_steps({OpType::kReducescatter, mode, false, false, false});
    EXPECT_EQ(names(even), (Names{"NCCL_REDUCESCATTER", "MEMCPY_IN_HOST_BUFFER"}));
    EXPECT_EQ(even[0].action, Action::kNcclReduceScatterBlocks);  // every rank, not the node's
    EXPECT_FALSE(uses_fusion_buffer(even));
    auto uneven = plan_steps({OpType::kReducescatter, mode, false, false, true});
    EXPECT_EQ(names(uneven),
              (Names{"MEMCPY_IN_FUSION_BUFFER", "NCCL_REDUCESCATTER", "MEMCPY_IN_HOST_BUFFER"}));
    EXPECT_TRUE(uses_fusion_buffer(uneven));
  }
  auto staged = plan_steps({OpType::kReducescatter, GpuMode::kMpiStaging, false, false, true});
  EXPECT_EQ(names(staged), (Names{"MEMCPY_IN_HOST_BUFFER", "MPI_REDUCESCATTER"}));
  EXPECT_TRUE(staged[1].on_host);
}

TEST(PlanSteps, Alltoall) {
  auto nccl = plan_steps({OpType::kAlltoall, GpuMode::kNccl, false, false});
  EXPECT_EQ(names(nccl), (Names{"NCCL_ALLTOALL", "MEMCPY_IN_HOST_BUFFER"}));
  EXPECT_EQ(nccl[0].action, Action::kNcclAlltoall);
  EXPECT_EQ(names(plan_steps({OpType::kAlltoall, GpuMode::kMpiStaging, false, false})),
            (Names{"MEMCPY_IN_HOST_BUFFER", "MPI_ALLTOALL"}));
}

// The collective steps (what every rank must issue in the same order) agree between the root and
// the others, in every mode and op.
// A rank whose copies failed still runs the collective steps (DeviceSet::launch): what
// is_collective() calls collective must be what every rank runs, and host steps are all MPI calls.
TEST(PlanSteps, CollectiveStepsAgreeAcrossRanks) {
  auto collective = [](const std::vector<Step>& steps) {
    std::vector<Action> out;
    for (const Step& s : steps) {
      if (s.on_host) {
        EXPECT_TRUE(is_collective(s.action)) << action_name(s.action);
      }
      if (is_collective(s.action)) out.push_back(s.action);
    }
    return out;
  };
  for (Action a : {Action::kPack, Action::kUnpack, Action::kCopyToHost, Action::kCopyFromHost}) {
    EXPECT_FALSE(is_collective(a)) << action_name(a);
  }
  for (GpuMode mode : {GpuMode::kNccl, GpuMode::kNcclHierarchical, GpuMode::kMpiStaging}) {
    for (OpType op : {OpType::kAllreduce, OpType::kAllgather, OpType::kBroadcast,
                      OpType::kReducescatter, OpType::kAlltoall}) {
      for (bool fused : {false, true}) {
        // Reducescatter: ranks agree on whether rows are packed (the shape is the same on all).
        EXPECT_EQ(collective(plan_steps({op, mode, fused, true, fused})),
                  collective(plan_steps({op, mode, fused, false, fused})))
            << gpu_mode_name(mode) << " op " << static_cast<int>(op);
        EXPECT_FALSE(plan_steps({op, mode, fused, false}).empty());
        for (const Step& s : plan_steps({op, mode, fused, false, fused})) {
          EXPECT_STRNE(action_name(s.action), "invalid");
        }
      }
    }
  }
  EXPECT_TRUE(plan_steps({OpType::kBarrier, GpuMode::kNccl, false, false}).empty());
}

// A joined rank's allreduce (runtime/join_zeros.h) fills its scratch with zeros first, a copy of
// its own, then runs the same collective steps as every other rank; the fill does not make it use
// the fusion buffer where the others do not (the buffer's padding would change how many elements
// its collective covers).
TEST(PlanSteps, AJoinedRanksZerosComeFirstAndChangeNoCollectiveStep) {
  EXPECT_FALSE(is_collective(Action::kZeroFill));
  for (GpuMode mode : {GpuMode::kNccl, GpuMode::kNcclHierarchical, GpuMode::kMpiStaging}) {
    for (bool fused : {false, true}) {
      const auto plain = plan_steps({OpType::kAllreduce, mode, fused, false});
      const auto zeros = plan_steps({OpType::kAllreduce, mode, fused, false, false, true});
      ASSERT_EQ(zeros.size(), plain.size() + 1) << gpu_mode_name(mode);
      EXPECT_EQ(zeros[0].action, Action::kZeroFill);
      EXPECT_EQ(zeros[0].phase, Phase::kMemcpyInFusionBuffer);
      EXPECT_FALSE(zeros[0].on_host);
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_EQ(zeros[i + 1].action, plain[i].action) << gpu_mode_name(mode) << " step " << i;
      }
      EXPECT_EQ(uses_fusion_buffer(zeros), uses_fusion_buffer(plain)) << gpu_mode_name(mode);
    }
  }
  EXPECT_EQ(names(plan_steps({OpType::kAllreduce, GpuMode::kNccl, false, false, false, true})),
            (Names{"MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE"}));
  // Only allreduces take zeros (the coordinator refuses the rest while ranks have joined).
  EXPECT_EQ(names(plan_steps({OpType::kBroadcast, GpuMode::kNccl, false, false, false, true})),
            Names{"NCCL_BCAST"});
}

std::vector<std::string> names(const PhaseLog& log) {
  std::vector<std::string> out;
  for (const auto& s : log.spans) out.push_back(timeline::phase_name(s.phase));
  return out;
}

void expect_nested(const PhaseLog& log, int64_t lo, int64_t hi) {
  int64_t t = lo;
  for (const auto& s : log.spans) {
    EXPECT_GE(s.begin_ns, t) << timeline::phase_name(s.phase) << " overlaps the phase before";
    EXPECT_GE(s.end_ns, s.begin_ns);
    t = s.end_ns;
  }
  EXPECT_LE(t, hi);
}

TEST(BuildJobLog, StepsBetweenMarks) {
  JobTimes t;
  t.marks = {100, 150, 400, 420};
  t.spans = {{Phase::kMemcpyInFusionBuffer, 0, 1},
             {Phase::kNcclAllreduce, 1, 2},
             {Phase::kMemcpyOutFusionBuffer, 2, 3}};
  JobLog j = build_job_log(t, 90, 500);
  EXPECT_EQ(j.start_ns, 100);
  EXPECT_EQ(j.end_ns, 420);
  EXPECT_EQ(names(j.log),
            (Names{"MEMCPY_IN_FUSION_BUFFER", "NCCL_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"}));
  EXPECT_EQ(j.log.spans[1].begin_ns, 150);
  EXPECT_EQ(j.log.spans[1].end_ns, 400);
  EXPECT_TRUE(j.entry_logs.empty());
}

// Mapping error can put a GPU mark before the enqueue or make marks cross: the log still nests.
TEST(BuildJobLog, ClampsAndOrdersNoisyMarks) {
  JobTimes t;
  t.marks = {80, 150, 140, 600};
  t.spans = {{Phase::kNcclAllreduce, 0, 1},
             {Phase::kMemcpyInHostBuffer, 1, 2},
             {Phase::kMpiAllreduce, 2, 3}};
  JobLog j = build_job_log(t, 100, 500);
  EXPECT_EQ(j.start_ns, 100);
  EXPECT_EQ(j.end_ns, 500);
  expect_nested(j.log, 100, 500);
  EXPECT_EQ(j.log.spans[1].begin_ns, 150);
  EXPECT_EQ(j.log.spans[1].end_ns, 150);
}

// Host steps (MPI on the host) leave a gap after the GPU copy: marks need not be contiguous.
TEST(BuildJobLog, HostStepsWithGaps) {
  JobTimes t;
  t.marks = {100, 200, 230, 300, 310};
  t.spans = {{Phase::kMemcpyInHostBuffer, 0, 1}, {Phase::kMpiAllreduce, 2, 3}};
  JobLog j = build_job_log(t, 0, 1000);
  ASSERT_EQ(j.log.spans.size(), 2u);
  EXPECT_EQ(j.log.spans[1].begin_ns, 230);
  EXPECT_EQ(j.end_ns, 310);
}

TEST(BuildJobLog, WaitPhasesPerTensor) {
  JobTimes t;
  // start 100; all data ready at 300; then the allreduce to 500.
  t.marks = {100, 300, 500};
  t.data_ready_mark = 1;
  t.spans = {{Phase::kNcclAllreduce, 1, 2}};
  t.tensor_ready_ns = {50, 200, 300, kNoReadyEvent};
  JobLog j = build_job_log(t, 0, 1000);
  EXPECT_EQ(names(j.log), (Names{"WAIT_FOR_DATA", "NCCL_ALLREDUCE"}));
  ASSERT_EQ(j.entry_logs.size(), 4u);
  // Ready before the job started: a zero-length wait for its own data, then the others.
  EXPECT_EQ(names(j.entry_logs[0]),
            (Names{"WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA", "NCCL_ALLREDUCE"}));
  EXPECT_EQ(j.entry_logs[0].spans[0].end_ns, 100);
  EXPECT_EQ(j.entry_logs[0].spans[1].begin_ns, 100);
  EXPECT_EQ(j.entry_logs[1].spans[0].end_ns, 200);
  EXPECT_EQ(j.entry_logs[1].spans[1].begin_ns, 200);
  EXPECT_EQ(j.entry_logs[1].spans[1].end_ns, 300);
  // The last to be ready waits only for its own data.
  EXPECT_EQ(names(j.entry_logs[2]), (Names{"WAIT_FOR_DATA", "NCCL_ALLREDUCE"}));
  // No ready event: it waited for the other tensors the whole time.
  EXPECT_EQ(names(j.entry_logs[3]), (Names{"WAIT_FOR_OTHER_TENSOR_DATA", "NCCL_ALLREDUCE"}));
  for (const PhaseLog& l : j.entry_logs) expect_nested(l, j.start_ns, j.end_ns);
}

TEST(BuildJobLog, SameReadinessGivesOneSharedLog) {
  JobTimes t;
  t.marks = {100, 300, 500};
  t.data_ready_mark = 1;
  t.spans = {{Phase::kNcclAllreduce, 1, 2}};
  t.tensor_ready_ns = {300, 300};
  JobLog j = build_job_log(t, 0, 1000);
  EXPECT_TRUE(j.entry_logs.empty());
  EXPECT_EQ(names(j.log), (Names{"WAIT_FOR_DATA", "NCCL_ALLREDUCE"}));
}

}  // namespace
}  // namespace ranktime::gpu
