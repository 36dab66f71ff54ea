// The steps of a device set's job, launched in order on its stream (NCCL, the batched copy,
// copies to and from pinned host memory) or on the host (MPI on the staging buffer), each
// bracketed by timing events (see device_set.h).
#include <algorithm>

#include "backends/gpu/cuda_status.h"
#include "backends/gpu/device_job.h"
#include "backends/gpu/device_set.h"
#include "backends/mpi/mpi_backend.h"
#include "backends/mpi/outcome.h"

namespace ranktime::gpu {

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
  if (job->status.ok()) job->status = injected_local_fault(test_fail_local_, rank_, job->response);
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
  if (job->use_fusion || job->skip_user_memory || job->zeros) {
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
  // The agreement below then fails the response on every rank. Only a rank without buffers
  // (allocation failed) cannot take part.
  auto can_take_part = [job](const Step& step) {
    if (!is_collective(step.action)) return false;
    if (step.on_host) return job->host != nullptr;
    // Allgather allocates its device output in its step and sends from scratch after a failure;
    // reducescatter and alltoall send from the working buffer, which only an empty tensor may
    // lack (a failed allocation must not reach NCCL as a null buffer).
    const OpType op = job->response.op;
    return job->work != nullptr || op == OpType::kAllgather ||
           ((op == OpType::kReducescatter || op == OpType::kAlltoall) && job->work_bytes == 0);
  };
  for (const Step& step : job->steps) {
    if (!s.ok() && !can_take_part(step)) continue;
    Status done = step.on_host ? run_host_step(job, step) : run_step(job, step);
    if (s.ok()) s = done;
  }
  if (!s.ok() && job->status.ok()) job->status = s;
  // Failures known at launch (waits, copies, allocations) become every rank's; errors the stream
  // reports only later stay this rank's.
  job->status = agree_on_outcome(comm_, rank_, job->status, job->response, spin_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job->launched = true;
  }
  done_cv_.notify_one();
}

DeviceSet::HostCopy DeviceSet::host_copy(const Job& job) const {
  const OpType op = job.response.op;
  auto* work = static_cast<char*>(job.work);
  if (mode_ == GpuMode::kNcclHierarchical && op == OpType::kAllreduce) {
    const Shard shard = shard_of(job.work_bytes, local_rank_, local_size_);
    return {work + shard.offset, shard.bytes};
  }
  if (!returns_host_output(op)) return {work, job.work_bytes};
  // Ops whose result goes to the handle's host output. Staged: the whole tensor goes to the host
  // collective (nothing of a tensor this rank cannot use); NCCL: the device result comes back.
  if (mode_ == GpuMode::kMpiStaging) {
    return {job.skip_user_memory ? nullptr : job.entries[0]->view.data, job.work_bytes};
  }
  return {job.output, job.result_bytes};
}

Status DeviceSet::take_host_buffer(Job* job) {
  const Response& r = job->response;
  const bool needed = std::any_of(job->steps.begin(), job->steps.end(), [](const Step& step) {
    return step.on_host || step.action == Action::kCopyToHost ||
           step.action == Action::kCopyFromHost;
  });
  if (!needed) return Status::Ok();
  const size_t bytes = host_copy(*job).bytes;
  cudaError_t rc = cudaSuccess;
  job->host = pinned_.take(std::max<size_t>(bytes, 1), &rc);
  return cuda_status(rc, "cudaMallocHost (staging buffer)", r);
}

Status DeviceSet::run_step(Job* job, const Step& step) {
  const Response& r = job->response;
  // A step after a host step begins at an event of its own: measured from the host step's end
  // (host clock) to its own end (GPU clock), it would take the anchor's error as its duration.
  if (!job->marks.empty() && job->marks.back().event == nullptr) {
    if (Status s = mark(job); !s.ok()) return s;
  }
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
      // A joined rank's zeros are null here: the zero fill put them in the buffer already, and
      // their result is never copied out.
      if (step.action == Action::kPack) {
        std::vector<const void*> src;
        if (r.op == OpType::kReducescatter) {  // each rank's rows into its block
          for (size_t from : job->scatter.sources) {
            src.push_back(static_cast<const char*>(job->entries[0]->view.data) + from);
          }
        } else {
          for (TensorEntry* e : job->entries) src.push_back(e->join_zeros ? nullptr : e->view.data);
        }
        crc = batched_copy(pack_copies(job->layout, src, work), stream_);
      } else {
        std::vector<void*> dst;
        for (TensorEntry* e : job->entries) dst.push_back(e->join_zeros ? nullptr : e->view.data);
        crc = batched_copy(unpack_copies(job->layout, dst, work), stream_);
      }
      call = "the batched copy kernel";
      break;
    }
    case Action::kZeroFill:
      // Everything the collective reads (padding included), before the real tensors are packed.
      if (job->work_bytes > 0) crc = cudaMemsetAsync(work, 0, job->work_bytes, stream_);
      call = "cudaMemsetAsync (a joined rank's zeros)";
      break;
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
    case Action::kNcclReduceScatterBlocks:
      // Every rank's block -> this rank's, reduced, in a device output of one block.
      call = "ncclReduceScatter";
      if (job->scatter.block == 0) break;
      crc = memory_.allocate(&job->output, job->scatter.block, stream_);
      if (crc == cudaSuccess && job->scatter.block >= elem) {
        nrc = ncclReduceScatter(work, job->output, job->scatter.block / elem, nccl_dtype(r.dtype),
                                nccl_op(r.reduce_op), nccl_->get(), stream_);
      }
      break;
    case Action::kNcclAlltoall: {
      call = "ncclSend/ncclRecv (alltoall)";
      crc = memory_.allocate(&job->output, job->gather.bytes, stream_);
      if (crc != cudaSuccess) break;
      auto* out = static_cast<char*>(job->output);
      nrc = ncclGroupStart();
      for (int q = 0; q < size_ && nrc == ncclSuccess; ++q) {
        if (job->sends.sizes[q] > 0) {
          nrc = ncclSend(work + job->sends.offsets[q], job->sends.sizes[q], ncclUint8, q,
                         nccl_->get(), stream_);
        }
        if (nrc == ncclSuccess && job->gather.sizes[q] > 0) {
          nrc = ncclRecv(out + job->gather.offsets[q], job->gather.sizes[q], ncclUint8, q,
                         nccl_->get(), stream_);
        }
      }
      const ncclResult_t end = ncclGroupEnd();
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
      const auto [device, bytes] = host_copy(*job);
      call = "cudaMemcpyAsync";
      if (bytes == 0 || device == nullptr) {
        // Nothing to copy, or memory this rank cannot use: the host step still runs.
      } else if (step.action == Action::kCopyToHost) {
        crc = cudaMemcpyAsync(job->host, device, bytes, cudaMemcpyDeviceToHost, stream_);
      } else {
        crc = cudaMemcpyAsync(device, job->host, bytes, cudaMemcpyHostToDevice, stream_);
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
    case Action::kMpiReducescatter:
    case Action::kMpiAlltoall:
      // The host collective writes the result (and alltoall's received counts) into the handle.
      host.view.shape = job->entries[0]->view.shape;
      host.splits = job->entries[0]->splits;
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

}  // namespace ranktime::gpu
