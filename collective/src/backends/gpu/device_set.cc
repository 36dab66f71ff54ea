// A device set's stream, communicators and threads (see device_set.h).
#include "backends/gpu/device_set.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/gpu/cuda_status.h"
#include "backends/gpu/gpu_backend.h"
#include "core/log.h"

namespace ranktime::gpu {
namespace {

// Calibration attempts per anchor; the narrowest window wins.
constexpr int kAnchorTries = 4;
// An anchor event on an idle stream completes within microseconds; poll for it this long, then
// wait for it.
constexpr int64_t kAnchorPollNs = 10'000'000;
// Up to this many distinct ready events per response get their own timing event, so that each
// tensor's lane shows when its own data was ready. Beyond it (a framework that records one event
// per gradient), one event after all the waits: an event record costs about a microsecond of the
// background thread's time, per event, timeline on or off.
constexpr size_t kMaxTimedReadyEvents = 8;

double elapsed_ns(cudaEvent_t from, cudaEvent_t to, bool* ok) {
  float ms = 0;
  *ok = cudaEventElapsedTime(&ms, from, to) == cudaSuccess;
  return static_cast<double>(ms) * 1e6;
}

}  // namespace

struct DeviceSet::AnchorEvent {
  cudaEvent_t event = nullptr;
  Anchor anchor;
  ~AnchorEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

struct DeviceSet::Job {
  Response response;
  std::vector<TensorEntry*> entries;
  int64_t arrival_ns = 0;
  int64_t enqueue_ns = 0;  // no GPU mark of this job can precede it
  std::vector<Step> steps;
  bool root = false;              // broadcast root
  bool use_fusion = false;        // the working buffer is the device fusion buffer
  bool skip_user_memory = false;  // this rank cannot use its tensors: take part with scratch
  std::vector<size_t> sizes;      // per entry, bytes
  FusionLayout layout;            // use_fusion
  size_t work_bytes = 0;          // what the collective covers: identical on every rank
  GatherLayout gather;            // allgather
  std::shared_ptr<AnchorEvent> anchor;

  std::vector<cudaEvent_t> ready_events;  // distinct producer events
  std::vector<int> entry_event;           // per entry: index into ready_events, or -1
  std::vector<cudaEvent_t> captured;      // worker modes: our copies (one each, or one for all)
  std::vector<int> ready_marks;           // direct waits: per ready event, the mark after it

  std::vector<Mark> marks;
  std::vector<JobTimes::Span> spans;
  int data_ready_mark = -1;
  void* work = nullptr;    // device working buffer
  void* output = nullptr;  // allgather: device result (freed in stream order)
  void* host = nullptr;    // pinned staging buffer, or the allgather result on the host
  Status status;
  bool launched = false;  // every stream and host step is issued (guarded by mutex_)
  cudaEvent_t last_event = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Set-up: collective over the runtime's data communicator, in response order on every rank.

DeviceSet::DeviceSet(MPI_Comm comm, int device, const Clock* clock, const GpuOptions& options,
                     Deliver deliver)
    : device_(device),
      clock_(clock),
      deliver_(std::move(deliver)),
      event_clock_(options.clock),
      reanchor_interval_ns_(options.clock.reanchor_interval_ns) {
  MPI_Comm_dup(comm, &comm_);
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
      if (s.ok()) cross_mpi_ = std::make_unique<MpiBackend>(cross_, clock_);
      return s;
    }
    case GpuMode::kMpiStaging:
      if (host_ == MPI_COMM_NULL) MPI_Comm_dup(comm_, &host_);
      host_mpi_ = std::make_unique<MpiBackend>(host_, clock_);
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
  for (MPI_Comm* c : {&cross_, &local_, &host_, &comm_}) {
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
  job->root = r.op == OpType::kBroadcast && rank_ == r.root;
  job->steps = plan_steps({r.op, mode_, job->entries.size() > 1, job->root});
  job->use_fusion = uses_fusion_buffer(job->steps);
  for (TensorEntry* e : job->entries) {
    job->sizes.push_back(e->view.num_bytes());
    if (e->view.device != device_ && job->status.ok()) {
      // Only this rank knows: it still takes part (with scratch memory) so the others finish.
      job->status = Status::Error(
          "tensor '" + e->request.name + "' is on device " + std::to_string(e->view.device) +
          " but this rank's device set " + std::to_string(r.device) + " runs on device " +
          std::to_string(device_) + "; keep each rank's tensors of one device set on one GPU");
      job->skip_user_memory = true;
    }
  }
  if (r.op == OpType::kAllgather) {
    const TensorView& v = job->entries.at(0)->view;
    size_t row_bytes = dtype_size(v.dtype);
    for (size_t d = 1; d < v.shape.size(); ++d) row_bytes *= static_cast<size_t>(v.shape[d]);
    job->gather = plan_gather(r.first_dims, row_bytes);
    job->work_bytes = job->sizes.at(0);
  } else if (job->use_fusion) {
    const size_t granule =
        mode_ == GpuMode::kNcclHierarchical ? kDeviceFusionAlignment * local_size_ : 0;
    job->layout = plan_device_fusion(job->sizes, kDeviceFusionAlignment, granule);
    job->work_bytes = job->layout.bytes;
  } else {
    job->work_bytes = job->sizes.at(0);
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
// Launch (background thread in kNccl mode, the worker otherwise)

Status DeviceSet::mark(Job* job, cudaEvent_t* out) {
  cudaError_t rc = cudaSuccess;
  cudaEvent_t ev = events_.take(&rc);
  if (ev != nullptr) rc = cudaEventRecord(ev, stream_);
  if (rc != cudaSuccess) {
    events_.give(ev);
    return cuda_status(rc, "recording a timing event", job->response);
  }
  job->marks.push_back({ev, 0});
  job->last_event = ev;
  if (out != nullptr) *out = ev;
  return Status::Ok();
}

void DeviceSet::launch(Job* job) {
  cudaSetDevice(device_);
  Status s = mark(job);  // the job's start: the stream has finished everything before it
  // Wait for the producers on the stream, never on the CPU. A failed wait fails this rank's
  // tensors but not the collective, which the other ranks are already in.
  const bool worker_mode = mode_ != GpuMode::kNccl;
  const std::vector<cudaEvent_t>& waits = worker_mode ? job->captured : job->ready_events;
  const bool each = !worker_mode && waits.size() <= kMaxTimedReadyEvents;
  for (size_t k = 0; s.ok() && k < waits.size(); ++k) {
    const cudaError_t rc = cudaStreamWaitEvent(stream_, waits[k], 0);
    if (rc != cudaSuccess && job->status.ok()) {
      job->status = cuda_status(rc, "cudaStreamWaitEvent on the ready event", job->response);
    }
    // Direct waits get a mark each (when the stream got past that producer); captured events
    // carry their own time.
    if (each) {
      s = mark(job);
      job->ready_marks.push_back(static_cast<int>(job->marks.size()) - 1);
    }
  }
  if (s.ok() && !waits.empty()) {
    if (!each) s = mark(job);
    job->data_ready_mark = static_cast<int>(job->marks.size()) - 1;
  }
  // The buffers are taken even after a failure above, so that this rank can still take part.
  Status buffers;
  if (job->use_fusion || job->skip_user_memory) {
    const size_t need = std::max(job->work_bytes, job->layout.bytes);
    buffers = cuda_status(fusion_->reserve(need, stream_, &job->work),
                          "allocating the fusion buffer", job->response);
  } else if (job->response.op != OpType::kAllgather) {
    job->work = job->entries.at(0)->view.data;
  }
  const Status host = take_host_buffer(job);
  if (buffers.ok()) buffers = host;
  if (s.ok()) s = buffers;
  // After a failure this rank's result is lost, but it still takes part in the collectives (on
  // whatever its buffers hold), as after a failed wait: the other ranks are in them already.
  // Their results for this response are then wrong without an error (agreeing on one would cost
  // another collective per response); this rank's tensors fail. Only a rank without buffers
  // (allocation failed) cannot take part.
  auto can_take_part = [job](const Step& step) {
    if (!is_collective(step.action)) return false;
    if (step.on_host) return job->host != nullptr;
    return job->work != nullptr || job->response.op == OpType::kAllgather;
  };
  for (const Step& step : job->steps) {
    if (!s.ok() && !can_take_part(step)) continue;
    Status done = step.on_host ? run_host_step(job, step) : run_step(job, step);
    if (s.ok()) s = done;
  }
  if (!s.ok() && job->status.ok()) job->status = s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job->launched = true;
  }
  done_cv_.notify_one();
}

Status DeviceSet::take_host_buffer(Job* job) {
  const Response& r = job->response;
  const bool needed = std::any_of(job->steps.begin(), job->steps.end(), [](const Step& step) {
    return step.on_host || step.action == Action::kCopyToHost ||
           step.action == Action::kCopyFromHost;
  });
  if (!needed) return Status::Ok();
  size_t bytes = job->work_bytes;
  if (mode_ == GpuMode::kNcclHierarchical && r.op == OpType::kAllreduce) {
    bytes = shard_of(job->work_bytes, local_rank_, local_size_).bytes;
  } else if (r.op == OpType::kAllgather && mode_ != GpuMode::kMpiStaging) {
    bytes = job->gather.bytes;
  }
  cudaError_t rc = cudaSuccess;
  job->host = pinned_.take(std::max<size_t>(bytes, 1), &rc);
  return cuda_status(rc, "cudaMallocHost (staging buffer)", r);
}

Status DeviceSet::run_step(Job* job, const Step& step) {
  const Response& r = job->response;
  const int begin = static_cast<int>(job->marks.size()) - 1;
  const size_t elem = dtype_size(r.dtype);
  auto* work = static_cast<char*>(job->work);
  cudaError_t crc = cudaSuccess;
  ncclResult_t nrc = ncclSuccess;
  const char* call = action_name(step.action);
  const Shard shard = shard_of(job->work_bytes, local_rank_, local_size_);
  switch (step.action) {
    case Action::kPack:
    case Action::kUnpack: {
      if (job->skip_user_memory) break;
      if (step.action == Action::kPack) {
        std::vector<const void*> src;
        for (TensorEntry* e : job->entries) src.push_back(e->view.data);
        crc = batched_copy(pack_copies(job->layout, src, work), stream_);
      } else {
        std::vector<void*> dst;
        for (TensorEntry* e : job->entries) dst.push_back(e->view.data);
        crc = batched_copy(unpack_copies(job->layout, dst, work), stream_);
      }
      call = "the batched copy kernel";
      break;
    }
    case Action::kNcclAllreduce:
      if (job->work_bytes >= elem) {
        nrc = ncclAllReduce(work, work, job->work_bytes / elem, nccl_dtype(r.dtype),
                            nccl_op(r.reduce_op), nccl_->get(), stream_);
      }
      call = "ncclAllReduce";
      break;
    case Action::kNcclBroadcast:
      if (job->work_bytes > 0) {
        nrc = ncclBroadcast(work, work, job->work_bytes, ncclUint8, r.root, nccl_->get(), stream_);
      }
      call = "ncclBroadcast";
      break;
    case Action::kNcclAllgather: {
      // First dimensions differ per rank, so ncclAllGather's equal counts do not fit: one
      // broadcast per rank into its place, as one group.
      call = "ncclBroadcast (allgather)";
      crc = memory_.allocate(&job->output, job->gather.bytes, stream_);
      if (crc != cudaSuccess) break;
      auto* out = static_cast<char*>(job->output);
      nrc = ncclGroupStart();
      for (int q = 0; q < size_ && nrc == ncclSuccess; ++q) {
        if (job->gather.sizes[q] == 0) continue;
        void* dst = out + job->gather.offsets[q];
        const void* src = q == rank_ && !job->skip_user_memory ? job->entries[0]->view.data : dst;
        nrc = ncclBroadcast(src, dst, job->gather.sizes[q], ncclUint8, q, nccl_->get(), stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      if (nrc == ncclSuccess) nrc = end;
      break;
    }
    case Action::kNcclReduceScatter:
      call = "ncclReduceScatter";
      if (shard.bytes >= elem) {
        nrc = ncclReduceScatter(work, work + shard.offset, shard.bytes / elem, nccl_dtype(r.dtype),
                                nccl_partial_op(r.reduce_op), nccl_local_->get(), stream_);
      }
      break;
    case Action::kNcclAllgatherShards:
      call = "ncclAllGather";
      if (shard.bytes >= elem) {
        nrc = ncclAllGather(work + shard.offset, work, shard.bytes / elem, nccl_dtype(r.dtype),
                            nccl_local_->get(), stream_);
      }
      break;
    case Action::kCopyToHost:
    case Action::kCopyFromHost: {
      const void* device = work;
      size_t bytes = job->work_bytes;
      if (mode_ == GpuMode::kNcclHierarchical && r.op == OpType::kAllreduce) {
        device = work + shard.offset;
        bytes = shard.bytes;
      } else if (r.op == OpType::kAllgather) {
        device = mode_ == GpuMode::kMpiStaging ? job->entries[0]->view.data : job->output;
        bytes = mode_ == GpuMode::kMpiStaging ? job->work_bytes : job->gather.bytes;
        if (job->skip_user_memory && mode_ == GpuMode::kMpiStaging) bytes = 0;
      }
      call = "cudaMemcpyAsync";
      if (bytes > 0 && step.action == Action::kCopyToHost) {
        crc = cudaMemcpyAsync(job->host, device, bytes, cudaMemcpyDeviceToHost, stream_);
      } else if (bytes > 0) {
        crc = cudaMemcpyAsync(const_cast<void*>(device), job->host, bytes, cudaMemcpyHostToDevice,
                              stream_);
      }
      if (crc == cudaSuccess && job->output != nullptr) {
        // Freed in stream order: after the copy above, without waiting for it.
        crc = memory_.release(job->output, stream_);
        job->output = nullptr;
      }
      break;
    }
    default:
      break;
  }
  if (crc != cudaSuccess) return cuda_status(crc, call, r);
  if (nrc != ncclSuccess) {
    ncclComm_t comm =
        step.action == Action::kNcclReduceScatter || step.action == Action::kNcclAllgatherShards
            ? nccl_local_->get()
            : (nccl_ ? nccl_->get() : nullptr);
    return nccl_status(nrc, call, r, comm);
  }
  Status s = mark(job);
  if (s.ok()) job->spans.push_back({step.phase, begin, static_cast<int>(job->marks.size()) - 1});
  return s;
}

Status DeviceSet::run_host_step(Job* job, const Step& step) {
  const Response& r = job->response;
  // The host reads what the stream copied: wait for it (this thread is not the background loop,
  // and staged collectives cannot start before their data is on the host anyway).
  // A failed wait fails this rank's tensors, but the MPI call below still runs: the other ranks
  // are in it.
  Status waited;
  if (job->last_event != nullptr) {
    waited = cuda_status(cudaEventSynchronize(job->last_event),
                         "waiting for the copy to host memory", r);
  }
  TensorEntry host;
  host.handle = std::make_shared<detail::HandleState>();
  host.request.name = r.names.empty() ? std::string() : r.names[0];
  host.view.data = job->host;
  host.view.dtype = r.dtype;
  Response hr = r;
  PhaseLog log;
  Status s;
  const size_t elem = dtype_size(r.dtype);
  switch (step.action) {
    case Action::kMpiAllreduce:
      if (mode_ == GpuMode::kNcclHierarchical) {
        // Across nodes on this rank's shard; an average divides by every rank once, here.
        const Shard shard = shard_of(job->work_bytes, local_rank_, local_size_);
        const int64_t n = static_cast<int64_t>(shard.bytes / elem);
        host.view.shape = {n};
        if (r.reduce_op == ReduceOp::kAverage) hr.reduce_op = ReduceOp::kSum;
        s = cross_mpi_->execute(hr, {&host}, &log);
        if (s.ok() && r.reduce_op == ReduceOp::kAverage)
          divide_in_place(job->host, n, r.dtype, size_);
      } else {
        host.view.shape = {static_cast<int64_t>(job->work_bytes / elem)};
        s = host_mpi_->execute(hr, {&host}, &log);
      }
      break;
    case Action::kMpiBroadcast:
      host.view.dtype = DataType::kUInt8;
      host.view.shape = {static_cast<int64_t>(job->work_bytes)};
      s = host_mpi_->execute(hr, {&host}, &log);
      break;
    case Action::kMpiAllgather:
      host.view.shape = job->entries[0]->view.shape;
      if (!job->skip_user_memory) host.handle = job->entries[0]->handle;
      s = host_mpi_->execute(hr, {&host}, &log);
      break;
    default:
      break;
  }
  for (const PhaseLog::Span& span : log.spans) {
    job->marks.push_back({nullptr, span.begin_ns});
    job->marks.push_back({nullptr, span.end_ns});
    const int end = static_cast<int>(job->marks.size()) - 1;
    job->spans.push_back({step.phase, end - 1, end});
  }
  return waited.ok() ? s : waited;
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
  map_times(job, seen_ns, &times);
  // Jobs run one after another on the stream: none starts before the previous one ended, whatever
  // the mapping error.
  JobLog timing = build_job_log(times, std::max(job->enqueue_ns, last_end_ns_), seen_ns);
  last_end_ns_ = timing.end_ns;

  // NCCL allgather: the result is in pinned memory; the public API returns it as host bytes.
  if (status.ok() && job->response.op == OpType::kAllgather && mode_ != GpuMode::kMpiStaging) {
    auto& state = *job->entries[0]->handle;
    const auto* p = static_cast<const std::byte*>(job->host);
    state.output.assign(p, p + job->gather.bytes);
    state.output_shape = job->entries[0]->view.shape;
    if (state.output_shape.empty()) state.output_shape.push_back(0);
    state.output_shape[0] = job->gather.rows;
  }

  if (job->output != nullptr) memory_.release(job->output, stream_);  // a failed allgather's
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

void DeviceSet::map_times(Job* job, int64_t seen_ns, JobTimes* times) {
  // GPU marks: the job's first event against the anchor (one float of up to ~1 s), the others
  // against the first (short distances keep float milliseconds precise).
  const AnchorEvent* anchor = job->anchor.get();
  cudaEvent_t base = nullptr;
  int64_t base_ns = seen_ns;
  times->marks.reserve(job->marks.size());
  for (const Mark& m : job->marks) {
    if (m.event == nullptr) {
      times->marks.push_back(m.host_ns);
      continue;
    }
    bool ok = false;
    if (base == nullptr) {
      base = m.event;
      const double g = anchor ? elapsed_ns(anchor->event, m.event, &ok) : 0;
      base_ns = ok ? event_clock_.to_host(anchor->anchor, g) : seen_ns;
      times->marks.push_back(base_ns);
      continue;
    }
    const double g = elapsed_ns(base, m.event, &ok);
    times->marks.push_back(ok ? base_ns + std::llround(event_clock_.rate() * g) : seen_ns);
  }
  times->spans = job->spans;
  times->data_ready_mark = job->data_ready_mark;
  times->tensor_ready_ns.assign(job->entries.size(), kNoReadyEvent);
  // Per tensor: when its producer's event had fired (as far as the stream could tell).
  const bool per_event = job->captured.empty() ? job->ready_marks.size() == job->ready_events.size()
                                               : job->captured.size() == job->ready_events.size();
  for (size_t i = 0; i < job->entries.size() && i < job->entry_event.size(); ++i) {
    const int k = job->entry_event[i];
    if (k < 0 || job->data_ready_mark < 0) continue;
    if (!per_event) {
      times->tensor_ready_ns[i] = times->marks[job->data_ready_mark];
    } else if (job->captured.empty()) {
      times->tensor_ready_ns[i] = times->marks[job->ready_marks[k]];
    } else {
      bool ok = false;
      const double g = anchor ? elapsed_ns(anchor->event, job->captured[k], &ok) : 0;
      times->tensor_ready_ns[i] = ok ? event_clock_.to_host(anchor->anchor, g) : seen_ns;
    }
  }
}

std::shared_ptr<DeviceSet::AnchorEvent> DeviceSet::calibrate_anchor(bool first, std::string* why) {
  std::vector<AnchorSample> samples;
  std::vector<cudaEvent_t> events;
  cudaError_t failure = cudaSuccess;
  for (int k = 0; k < kAnchorTries; ++k) {
    cudaEvent_t ev = nullptr;
    cudaError_t rc = cudaEventCreate(&ev);
    if (rc != cudaSuccess) {
      failure = rc;
      break;
    }
    // The anchor stream is idle, so the event executes as soon as the GPU sees it: its timestamp
    // lies between these two host readings. Polling (briefly, once a second) keeps the window
    // tight; a blocking wait would widen it by the wake-up latency. The first events on a fresh
    // context can take tens of milliseconds: for the first anchor, wait for them and keep their
    // wide window (still a true bound) if no later try does better. A re-anchor drops a slow try
    // instead (a busy, shared GPU): keeping the previous anchor maps better than a wide one.
    const int64_t before = clock_->now_ns();
    rc = cudaEventRecord(ev, anchor_stream_);
    while (rc == cudaSuccess && (rc = cudaEventQuery(ev)) == cudaErrorNotReady &&
           clock_->now_ns() - before < kAnchorPollNs) {
    }
    if (rc == cudaErrorNotReady && first) rc = cudaEventSynchronize(ev);
    if (rc == cudaErrorNotReady) {
      // A re-anchor on a busy (shared) GPU: the next tries would queue behind this one.
      failure = rc;
      cudaEventDestroy(ev);
      break;
    }
    const int64_t after = clock_->now_ns();
    if (rc != cudaSuccess) {
      failure = rc;
      cudaGetLastError();
      cudaEventDestroy(ev);
      continue;
    }
    samples.push_back({before, after});
    events.push_back(ev);
  }
  const int best = best_anchor_sample(samples);
  std::shared_ptr<AnchorEvent> fresh;
  if (best >= 0) {
    std::shared_ptr<AnchorEvent> previous;
    {
      std::lock_guard<std::mutex> lock(anchor_mutex_);
      previous = anchor_;
    }
    bool ok = false;
    const double since = previous ? elapsed_ns(previous->event, events[best], &ok) : 0;
    if (!previous || ok) {
      fresh = std::make_shared<AnchorEvent>();
      fresh->event = events[best];
      fresh->anchor = event_clock_.add_anchor(samples[best], since);
      events[best] = nullptr;
      RANKTIME_LOG(kDebug, "device " << device_ << ": anchor " << fresh->anchor.id << " within "
                                     << fresh->anchor.uncertainty_ns << " ns (" << samples.size()
                                     << " tries in "
                                     << (samples.back().after_ns - samples.front().before_ns)
                                     << " ns)");
    } else if (why != nullptr) {
      *why = "cudaEventElapsedTime from the previous anchor failed";
    }
  } else if (why != nullptr) {
    *why = "no anchor event completed in " + std::to_string(kAnchorTries) +
           " tries: " + cuda_error_text(failure);
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  return fresh;
}

void DeviceSet::reanchor() {
  std::string why;
  std::shared_ptr<AnchorEvent> fresh = calibrate_anchor(/*first=*/false, &why);
  if (!fresh) {
    RANKTIME_LOG(kDebug, "device " << device_ << ": re-anchoring the event clock failed (" << why
                                   << "); GPU phase times keep the previous anchor");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(anchor_mutex_);
    anchor_ = std::move(fresh);
  }
  RANKTIME_LOG(kTrace, "device " << device_ << ": re-anchored event clock, drift "
                                 << event_clock_.drift_ppm() << " ppm, residual "
                                 << event_clock_.last_residual_ns() << " ns");
}

}  // namespace ranktime::gpu
