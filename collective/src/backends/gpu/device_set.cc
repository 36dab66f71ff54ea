// A device set's set-up, enqueue, threads and completion (see device_set.h); the steps a job
// launches are in device_steps.cc, the clock anchoring in device_anchor.cc.
#include "backends/gpu/device_set.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backends/gpu/cuda_status.h"
#include "backends/gpu/device_job.h"
#include "backends/gpu/gpu_backend.h"
#include "core/log.h"
#include "core/rows.h"

namespace ranktime::gpu {

// ---------------------------------------------------------------------------------------------
// Set-up: collective over the runtime's data communicator, in response order on every rank.

DeviceSet::DeviceSet(MPI_Comm comm, int device, const Clock* clock, const GpuOptions& options,
                     Deliver deliver)
    : device_(device),
      clock_(clock),
      deliver_(std::move(deliver)),
      event_clock_(options.clock),
      reanchor_interval_ns_(options.clock.reanchor_interval_ns),
      test_fail_local_(options.test_fail_local),
      spin_(options.spin) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_dup(comm, &counts_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  Status local = setup_locally(options);

  // Every rank learns whether every rank could set up, and which GPU each one drives.
  struct Identity {
    char where[320];
    int ok;
  } me{};
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char bus[64] = "?";
  if (local.ok()) cudaDeviceGetPCIBusId(bus, sizeof(bus), device_);
  std::snprintf(me.where, sizeof(me.where), "%s/%s", host, bus);
  me.ok = local.ok();
  std::vector<Identity> all(size_);
  MPI_Allgather(&me, sizeof(me), MPI_BYTE, all.data(), sizeof(me), MPI_BYTE, comm_);
  std::string failed;
  for (int r = 0; r < size_; ++r) {
    if (!all[r].ok) failed += (failed.empty() ? "" : ",") + std::to_string(r);
  }
  if (!failed.empty()) {
    error_ =
        Status::Error("GPU set-up for device " + std::to_string(device_) + " failed on ranks " +
                      failed + (local.ok() ? std::string() : "; here: " + local.message()));
    return;
  }
  bool shared_gpu = false;
  for (int a = 0; a < size_ && !shared_gpu; ++a) {
    for (int b = a + 1; b < size_ && !shared_gpu; ++b) {
      shared_gpu = std::strncmp(all[a].where, all[b].where, sizeof(me.where)) == 0;
    }
  }

  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_);
  MPI_Comm_rank(local_, &local_rank_);
  MPI_Comm_size(local_, &local_size_);
  int sizes[2] = {-local_size_, local_size_};
  MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, comm_);
  const bool same_ranks_per_node = -sizes[0] == sizes[1];

  using Collectives = GpuOptions::Collectives;
  if (options.collectives == Collectives::kMpi) {
    mode_ = GpuMode::kMpiStaging;
  } else if (shared_gpu) {
    if (options.collectives == Collectives::kNccl) {
      error_ = Status::Error("NCCL cannot run with several ranks on one GPU (device " +
                             std::to_string(device_) +
                             "); let ranktime stage through host memory instead");
      return;
    }
    mode_ = GpuMode::kMpiStaging;
    RANKTIME_LOG(kInfo, "device " << device_
                                  << ": ranks share a GPU; device collectives use MPI on pinned "
                                     "host copies");
  } else if (options.hierarchical_allreduce && same_ranks_per_node) {
    mode_ = GpuMode::kNcclHierarchical;
  } else {
    if (options.hierarchical_allreduce) {
      RANKTIME_LOG(kWarning,
                   "RANKTIME_HIERARCHICAL_ALLREDUCE ignored: nodes run different "
                   "numbers of ranks ("
                       << -sizes[0] << " to " << sizes[1] << ")");
    }
    mode_ = GpuMode::kNccl;
  }
  if (mode_ == GpuMode::kNcclHierarchical) {
    MPI_Comm_split(comm_, local_rank_, rank_, &cross_);
  }

  Status comms = create_communicators();
  if (!comms.ok()) {
    if (options.collectives == Collectives::kAuto) {
      RANKTIME_LOG(kWarning, comms.message() << "; device collectives fall back to MPI staging");
      nccl_.reset();
      nccl_local_.reset();
      mode_ = GpuMode::kMpiStaging;
      comms = create_communicators();
    }
    if (!comms.ok()) {
      error_ = comms;
      return;
    }
  }
  RANKTIME_LOG(kDebug, "device set " << device_ << ": mode " << gpu_mode_name(mode_) << ", "
                                     << size_ << " ranks, " << local_size_ << " per node");
  start_threads();
}

Status DeviceSet::setup_locally(const GpuOptions&) {
  cudaError_t rc = cudaSetDevice(device_);
  if (rc != cudaSuccess)
    return Status::Error("cudaSetDevice(" + std::to_string(device_) + "): " + cuda_error_text(rc));
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  // Our own non-blocking streams: never the default stream, and no implicit synchronisation with
  // it. The collectives' stream gets the highest priority so that compute does not starve it.
  rc = cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest);
  if (rc == cudaSuccess) rc = cudaStreamCreateWithFlags(&ingress_, cudaStreamNonBlocking);
  if (rc == cudaSuccess) {
    rc = cudaStreamCreateWithPriority(&anchor_stream_, cudaStreamNonBlocking, greatest);
  }
  if (rc == cudaSuccess) rc = memory_.init(device_);
  if (rc != cudaSuccess) return Status::Error("CUDA stream set-up: " + cuda_error_text(rc));
  fusion_ = std::make_unique<FusionBuffer>(&memory_);
  std::string why;
  anchor_ = calibrate_anchor(/*first=*/true, &why);
  if (!anchor_) return Status::Error("could not anchor CUDA event times to the host clock: " + why);
  return Status::Ok();
}

Status DeviceSet::create_communicators() {
  switch (mode_) {
    case GpuMode::kNccl:
      return NcclComm::create(comm_, &nccl_);
    case GpuMode::kNcclHierarchical: {
      Status s = NcclComm::create(comm_, &nccl_);
      if (s.ok()) s = NcclComm::create(local_, &nccl_local_);
      if (s.ok()) {
        cross_mpi_ = std::make_unique<MpiBackend>(cross_, clock_, Config{}.allreduce_chunk, nullptr,
                                                  std::string(), spin_);
      }
      return s;
    }
    case GpuMode::kMpiStaging:
      if (host_ == MPI_COMM_NULL) MPI_Comm_dup(comm_, &host_);
      host_mpi_ = std::make_unique<MpiBackend>(host_, clock_, Config{}.allreduce_chunk, nullptr,
                                               std::string(), spin_);
      return Status::Ok();
  }
  return Status::Ok();
}

void DeviceSet::start_threads() {
  if (mode_ != GpuMode::kNccl) worker_ = std::thread(&DeviceSet::worker_loop, this);
  completer_ = std::thread(&DeviceSet::completion_loop, this);
}

DeviceSet::~DeviceSet() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  done_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (completer_.joinable()) completer_.join();
  cudaSetDevice(device_);
  if (stream_ != nullptr) {
    if (fusion_) fusion_->release_all(stream_);
    cudaStreamSynchronize(stream_);
  }
  nccl_local_.reset();
  nccl_.reset();
  anchor_.reset();
  for (cudaStream_t s : {stream_, ingress_, anchor_stream_}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  host_mpi_.reset();
  cross_mpi_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&cross_, &local_, &host_, &counts_, &comm_}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

// ---------------------------------------------------------------------------------------------
// Enqueue (background thread)

void DeviceSet::enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
                        int64_t arrival_ns) {
  auto job = std::make_unique<Job>();
  job->response = response;
  job->entries = entries;
  job->arrival_ns = arrival_ns;
  job->enqueue_ns = clock_->now_ns();
  if (!error_.ok()) {
    GpuCompletion c;
    c.response = response;
    c.entries = entries;
    c.arrival_ns = c.start_ns = c.end_ns = arrival_ns;
    c.status = Status::Error(describe_tensors(response) + ": " + error_.message());
    deliver_(std::move(c));
    return;
  }
  prepare(job.get());
  if (mode_ == GpuMode::kNccl) {
    // Nothing runs on the host in the middle, so this thread issues the stream work itself: one
    // thread hop less per response.
    launch(job.get());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    done_cv_.notify_one();
    return;
  }
  // The worker issues this job after earlier ones' host steps; capture the producers' events now,
  // while they still mark this data (a producer may record them again once we return).
  capture_ready_events(job.get());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    to_launch_.push_back(job.get());
    jobs_.push_back(std::move(job));
  }
  work_cv_.notify_one();
}

void DeviceSet::prepare(Job* job) {
  const Response& r = job->response;
  const TensorView& first = job->entries.at(0)->view;
  const size_t row_bytes =
      returns_host_output(r.op)
          ? static_cast<size_t>(row_elements(first.shape)) * dtype_size(first.dtype)
          : 0;
  const int64_t dim0 = first.shape.empty() ? 0 : first.shape[0];
  job->root = r.op == OpType::kBroadcast && rank_ == r.root;
  if (r.op == OpType::kReducescatter) job->scatter = plan_scatter(dim0, row_bytes, size_);
  job->zeros = std::any_of(job->entries.begin(), job->entries.end(),
                           [](const TensorEntry* e) { return e->join_zeros; });
  job->steps = plan_steps(
      {r.op, mode_, job->entries.size() > 1, job->root, job->scatter.packed, job->zeros});
  job->use_fusion = uses_fusion_buffer(job->steps);
  for (TensorEntry* e : job->entries) {
    job->sizes.push_back(e->view.num_bytes());
    // A joined rank's zeros have no memory of their own: they are made on this set's device.
    if (!e->join_zeros && e->view.device != device_ && job->status.ok()) {
      // Only this rank knows: it still takes part (with scratch memory) so the others finish.
      job->status = Status::Error(
          "tensor '" + e->request.name + "' is on device " + std::to_string(e->view.device) +
          " but this rank's device set " + std::to_string(r.device) + " runs on device " +
          std::to_string(device_) + "; keep each rank's tensors of one device set on one GPU");
      job->skip_user_memory = true;
    }
  }
  job->work_bytes = job->sizes.at(0);
  job->result_shape = first.shape;
  if (r.op == OpType::kAllgather) {
    job->gather = plan_gather(r.first_dims, row_bytes);
    job->result_bytes = job->gather.bytes;
    if (job->result_shape.empty()) job->result_shape.push_back(0);
    job->result_shape[0] = job->gather.rows;
  } else if (r.op == OpType::kReducescatter) {
    if (job->scatter.packed) job->layout = job->scatter.blocks;
    if (job->use_fusion) job->work_bytes = job->layout.bytes;
    job->result_bytes = job->scatter.blocks.sizes.at(rank_);
    job->result_shape.at(0) = scatter_rows(dim0, size_, rank_);
  } else if (r.op == OpType::kAlltoall) {
    if (mode_ != GpuMode::kMpiStaging) exchange_splits(job, row_bytes);
  } else if (job->use_fusion) {
    const size_t granule =
        mode_ == GpuMode::kNcclHierarchical ? kDeviceFusionAlignment * local_size_ : 0;
    job->layout = plan_device_fusion(job->sizes, kDeviceFusionAlignment, granule);
    job->work_bytes = job->layout.bytes;
  }
  job->entry_event.assign(job->entries.size(), -1);
  for (size_t i = 0; i < job->entries.size(); ++i) {
    auto ev = static_cast<cudaEvent_t>(job->entries[i]->view.ready_event);
    if (ev == nullptr) continue;
    auto it = std::find(job->ready_events.begin(), job->ready_events.end(), ev);
    job->entry_event[i] = static_cast<int>(it - job->ready_events.begin());
    if (it == job->ready_events.end()) job->ready_events.push_back(ev);
  }
  std::lock_guard<std::mutex> lock(anchor_mutex_);
  job->anchor = anchor_;
}

void DeviceSet::exchange_splits(Job* job, size_t row_bytes) {
  // NCCL needs every receive's size before the job is issued (and the pinned buffer is taken at
  // launch), so the ranks swap their row counts here, on the background thread, in response
  // order: a communicator of its own, since the worker may be using comm_ meanwhile. The time is
  // part of the job's QUEUE.
  const std::vector<int32_t>& splits = job->entries.at(0)->splits;
  job->received_splits.assign(size_, 0);
  const int rc = MPI_Alltoall(splits.data(), 1, MPI_INT32_T, job->received_splits.data(), 1,
                              MPI_INT32_T, counts_);
  if (rc != MPI_SUCCESS && job->status.ok()) {
    job->status =
        Status::Error(describe_tensors(job->response) +
                      ": MPI_Alltoall of the row counts failed (error " + std::to_string(rc) + ")");
  }
  job->sends = plan_gather(std::vector<int64_t>(splits.begin(), splits.end()), row_bytes);
  job->gather = plan_gather(
      std::vector<int64_t>(job->received_splits.begin(), job->received_splits.end()), row_bytes);
  job->result_bytes = job->gather.bytes;
  job->result_shape.at(0) = job->gather.rows;
}

void DeviceSet::capture_ready_events(Job* job) {
  cudaSetDevice(device_);
  const bool each = job->ready_events.size() <= kMaxTimedReadyEvents;
  for (size_t k = 0; k < job->ready_events.size(); ++k) {
    cudaError_t rc = cudaStreamWaitEvent(ingress_, job->ready_events[k], 0);
    if (rc == cudaSuccess && (each || k + 1 == job->ready_events.size())) {
      cudaEvent_t copy = events_.take(&rc);
      if (copy != nullptr) rc = cudaEventRecord(copy, ingress_);
      if (rc == cudaSuccess) {
        job->captured.push_back(copy);
      } else {
        events_.give(copy);
      }
    }
    if (rc != cudaSuccess && job->status.ok()) {
      // This rank's result will be wrong, but it still takes part so that the others finish.
      job->status = cuda_status(rc, "waiting for the ready event", job->response);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Threads

void DeviceSet::worker_loop() {
  cudaSetDevice(device_);
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return !to_launch_.empty() || stopping_; });
      if (to_launch_.empty()) return;
      job = to_launch_.front();
      to_launch_.pop_front();
    }
    launch(job);
  }
}

void DeviceSet::completion_loop() {
  cudaSetDevice(device_);
  const auto interval = std::chrono::nanoseconds(reanchor_interval_ns_);
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const bool woken = done_cv_.wait_for(lock, interval, [&] {
        return (!jobs_.empty() && jobs_.front()->launched) || (stopping_ && jobs_.empty());
      });
      if (woken && jobs_.empty()) return;
      if (woken) job = jobs_.front().get();
    }
    if (job != nullptr) {
      complete(job);
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.pop_front();
    }
    // Also while idle, so that the next job's anchor is fresh (once an interval: a few
    // microseconds of polling).
    if (event_clock_.due(clock_->now_ns())) reanchor();
  }
}

void DeviceSet::complete(Job* job) {
  Status status = job->status;
  if (job->last_event != nullptr) {
    // Sleeps (blocking-sync event) until the stream has run the job's last step.
    Status s = cuda_status(cudaEventSynchronize(job->last_event), "the device set's stream",
                           job->response);
    if (status.ok() && !s.ok()) status = s;
  }
  const int64_t seen_ns = clock_->now_ns();
  JobTimes times;
  // Jobs run one after another on the stream: none starts before the previous one ended, whatever
  // the mapping error.
  const int64_t lo_ns = std::max(job->enqueue_ns, last_end_ns_);
  map_times(job, lo_ns, seen_ns, &times);
  JobLog timing = build_job_log(times, lo_ns, seen_ns);
  last_end_ns_ = timing.end_ns;

  // NCCL allgather, reducescatter, alltoall: the result is in pinned memory; the public API
  // returns it as host bytes.
  const OpType op = job->response.op;
  if (status.ok() && returns_host_output(op) && mode_ != GpuMode::kMpiStaging) {
    auto& state = *job->entries[0]->handle;
    const auto* p = static_cast<const std::byte*>(job->host);
    state.output.assign(p, p + job->result_bytes);
    state.output_shape = job->result_shape;
    if (op == OpType::kAlltoall) state.received_splits = job->received_splits;
  }

  if (job->output != nullptr) memory_.release(job->output, stream_);  // a failed job's
  for (const Mark& m : job->marks) events_.give(m.event);
  for (cudaEvent_t e : job->captured) events_.give(e);
  pinned_.give(job->host);

  GpuCompletion c;
  c.response = std::move(job->response);
  c.entries = std::move(job->entries);
  c.arrival_ns = job->arrival_ns;
  c.start_ns = timing.start_ns;
  c.end_ns = timing.end_ns;
  c.log = std::move(timing.log);
  c.entry_logs = std::move(timing.entry_logs);
  c.status = status;
  deliver_(std::move(c));
}

}  // namespace ranktime::gpu
