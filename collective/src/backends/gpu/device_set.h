// One device set: the ranks' GPUs that one response's tensors live on, with everything that runs
// collectives over them: the NCCL communicator(s), the runtime's own CUDA stream, the device fusion
// buffer, the clock anchor, and the threads that launch staged work and complete jobs.
//
// A job moves: enqueue() (background thread) -> [worker thread, for modes with host steps] ->
// the stream -> the completion thread, which waits for the job's last event, maps its events onto
// the host clock and hands a GpuCompletion to the backend.
//
// Files: device_set.cc (set-up, enqueue, threads, completion), device_steps.cc (the steps a job
// launches), device_anchor.cc (anchoring CUDA event times to the host clock), device_job.h (a
// job's state, shared by the three).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/gpu/event_clock.h"
#include "backends/gpu/gpu_phases.h"
#include "backends/gpu/nccl_comm.h"
#include "backends/gpu/stream_resources.h"
#include "backends/mpi/mpi_backend.h"
#include "core/clock.h"
#include "core/message.h"
#include "core/tensor_entry.h"

namespace ranktime::gpu {

struct GpuOptions;

class DeviceSet {
 public:
  using Deliver = std::function<void(Completion&&)>;

  // Collective over `comm` (every rank, same order, on the background thread): picks the mode,
  // creates communicators and streams. On failure the set stays usable in the sense that every
  // job on it fails at once on every rank with the same message (see error()).
  DeviceSet(MPI_Comm comm, int device, const Clock* clock, const GpuOptions& options,
            Deliver deliver);
  ~DeviceSet();  // finishes every queued job first
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  const Status& error() const { return error_; }
  GpuMode mode() const { return mode_; }
  int device() const { return device_; }

  // Queues one response. Never waits for the GPU.
  void enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
               int64_t arrival_ns);

 private:
  struct Mark {
    cudaEvent_t event = nullptr;  // GPU mark (mapped at completion) ...
    int64_t host_ns = 0;          // ... or host mark
  };
  struct AnchorEvent;
  struct Job;

  Status setup_locally(const GpuOptions& options);
  Status create_communicators();
  void start_threads();

  void prepare(Job* job);
  void exchange_splits(Job* job, size_t row_bytes);
  void capture_ready_events(Job* job);
  void launch(Job* job);
  Status run_step(Job* job, const Step& step);
  Status run_host_step(Job* job, const Step& step);
  // What a job copies between the device and its pinned host buffer.
  struct HostCopy {
    void* device;
    size_t bytes;
  };
  HostCopy host_copy(const Job& job) const;
  Status take_host_buffer(Job* job);
  Status mark(Job* job, cudaEvent_t* out = nullptr);

  void worker_loop();
  void completion_loop();
  void complete(Job* job);
  void map_times(Job* job, int64_t lo_ns, int64_t seen_ns, JobTimes* times);
  void reanchor();
  // A fresh anchor, or null with the reason in *why. The `first` one waits for slow events.
  std::shared_ptr<AnchorEvent> calibrate_anchor(bool first, std::string* why);

  MPI_Comm comm_ = MPI_COMM_NULL;    // this set's duplicate of the runtime's data communicator
  MPI_Comm host_ = MPI_COMM_NULL;    // the worker's: staging and cross-node MPI collectives
  MPI_Comm local_ = MPI_COMM_NULL;   // ranks on this node (hierarchical)
  MPI_Comm cross_ = MPI_COMM_NULL;   // ranks with this local rank on every node (hierarchical)
  MPI_Comm counts_ = MPI_COMM_NULL;  // the background thread's: alltoall's row counts, at enqueue
  int device_;
  const Clock* clock_;
  Deliver deliver_;
  Status error_;
  GpuMode mode_ = GpuMode::kNccl;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<NcclComm> nccl_;        // all ranks
  std::unique_ptr<NcclComm> nccl_local_;  // this node's ranks (hierarchical)
  std::unique_ptr<MpiBackend> host_mpi_;  // host-memory collectives on host_
  std::unique_ptr<MpiBackend> cross_mpi_;

  cudaStream_t stream_ = nullptr;   // the collectives' stream
  cudaStream_t ingress_ = nullptr;  // captures producers' ready events at enqueue (worker modes)
  cudaStream_t anchor_stream_ = nullptr;  // idle: anchors record the moment they are issued
  EventPool events_;
  PinnedPool pinned_;
  StreamMemory memory_;
  std::unique_ptr<FusionBuffer> fusion_;

  EventClock event_clock_;  // completion thread only (after construction)
  int64_t reanchor_interval_ns_;
  std::string test_fail_local_;    // RANKTIME_TEST_FAIL_LOCAL (backends/mpi/outcome.h)
  std::chrono::nanoseconds spin_;  // RANKTIME_SPIN_US (backends/mpi/request_wait.h)
  int64_t last_end_ns_ = 0;        // completion thread: where the previous job ended
  std::mutex anchor_mutex_;
  std::shared_ptr<AnchorEvent> anchor_;

  std::mutex mutex_;
  std::condition_variable work_cv_;        // worker: a job to launch
  std::condition_variable done_cv_;        // completion thread: the front job is launched
  std::deque<std::unique_ptr<Job>> jobs_;  // every job not yet completed, in enqueue order
  std::deque<Job*> to_launch_;             // worker modes: jobs the worker has not launched
  bool stopping_ = false;
  std::thread worker_;
  std::thread completer_;
};

}  // namespace ranktime::gpu
