// The GPU path's Backend: responses whose tensors live in device memory go here.
// Collectives run on ranktime's own CUDA stream per device set (NCCL, hierarchical NCCL + MPI, or
// MPI staging through pinned host memory); a completion thread per stream turns finished jobs into
// GpuCompletions, which the background loop collects with take_completions(). See docs/gpu.md.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/gpu/event_clock.h"
#include "backends/gpu/gpu_phases.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/message.h"
#include "core/tensor_entry.h"

namespace ranktime::gpu {

class DeviceSet;

// One executed response, delivered to the background loop thread: times are this rank's host
// clock (start: its first GPU work started on the stream, end: its last finished), sub-phases
// mapped onto it; per_tensor always (tensors of a fused batch may have become ready at different
// times: entry_logs then holds each lane's own WAIT_FOR_DATA / WAIT_FOR_OTHER_TENSOR_DATA).
using GpuCompletion = Completion;

struct GpuOptions {
  // RANKTIME_HIERARCHICAL_ALLREDUCE: allreduce as NCCL reduce-scatter within the node, MPI
  // allreduce across nodes on host buffers, NCCL allgather within the node. Used only when every
  // node runs the same number of ranks (the shards must line up across nodes).
  bool hierarchical_allreduce = false;
  // Which library moves device tensors. kAuto: NCCL, except where ranks of a device set share a
  // GPU (NCCL refuses two ranks on one device) or NCCL fails to start; there MPI on pinned host
  // copies. kMpi forces staging (builds or jobs without a working NCCL); kNccl turns those cases
  // into errors instead.
  enum class Collectives { kAuto, kNccl, kMpi };
  Collectives collectives = Collectives::kAuto;
  // The anchoring of CUDA event times to the host clock (re-anchor interval, drift window).
  EventClockOptions clock;
  // RANKTIME_TEST_FAIL_LOCAL: a failed ready-event wait on one rank (backends/mpi/outcome.h).
  std::string test_fail_local;
  // RANKTIME_SPIN_US: how the MPI collectives wait for the other ranks
  // (backends/mpi/request_wait.h).
  std::chrono::nanoseconds spin = Config{}.spin();
};
GpuOptions gpu_options(const Config& config);

class GpuBackend final : public Backend {
 public:
  // False (never throws, never aborts) when there is no CUDA driver or no device.
  static bool device_available();

  // comm: the runtime's data communicator (NCCL unique ids and the MPI paths go over duplicates of
  // it). wake(): called from a completion thread when completions are ready; the background loop
  // then calls take_completions().
  GpuBackend(MPI_Comm comm, const Clock* clock, const Config& config, std::function<void()> wake);
  GpuBackend(MPI_Comm comm, const Clock* clock, const GpuOptions& options,
             std::function<void()> wake);
  // Finishes every enqueued job first (call drain() and take_completions() before the entries
  // they point to are destroyed).
  ~GpuBackend() override;
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  // On the background thread, for responses whose device != kCpuDevice, in response order (every
  // rank calls it in the same order, which makes the lazy, collective creation of a device set
  // safe here). Never waits for the GPU. Device sets are keyed by response.device (rank 0's
  // ordinal, the same on every rank); each rank uses its own tensors' device.
  void enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
               int64_t arrival_ns) override;
  void take_completions(const std::function<void(Completion&)>& finish) override;
  // The same, appended to *out (tests).
  void take_completions(std::vector<GpuCompletion>* out);
  // Jobs enqueued whose completion has not been taken yet.
  size_t pending() const override;
  // Blocks until every enqueued job's completion is ready (shutdown: before failing what is left).
  void drain() override;
  // The mode device set `device` runs in; nullopt before its first response.
  std::optional<GpuMode> mode(int device) const;

 private:
  void deliver(GpuCompletion&& completion);

  MPI_Comm comm_;
  const Clock* clock_;
  GpuOptions options_;
  std::function<void()> wake_;
  std::map<int, std::unique_ptr<DeviceSet>> sets_;  // background thread only
  mutable std::mutex mutex_;
  std::condition_variable delivered_cv_;
  std::vector<GpuCompletion> ready_;
  std::vector<GpuCompletion> taking_;  // background thread: the completions being handed over
  size_t enqueued_ = 0;                // jobs handed to device sets
  size_t delivered_ = 0;               // completions produced
  size_t taken_ = 0;                   // completions handed to the loop
};

}  // namespace ranktime::gpu
