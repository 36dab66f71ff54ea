// What one device set's stream needs besides NCCL: timing events, pinned host buffers, device
// memory allocated in stream order, and the batched copy that packs and unpacks the fusion buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "backends/gpu/device_fusion.h"

namespace ranktime::gpu {

// Timing-enabled events with blocking sync: the completion thread sleeps in cudaEventSynchronize
// instead of spinning. Reused, since creating an event costs more than recording one.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  // Null (with *rc set) when CUDA cannot create one. The device must be current.
  cudaEvent_t take(cudaError_t* rc);
  void give(cudaEvent_t event);

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// Page-locked host buffers for staging (only pinned memory lets copies run asynchronously).
// Buffers are kept for reuse: cudaFreeHost synchronises the device, so nothing is freed before
// the pool is destroyed.
class PinnedPool {
 public:
  PinnedPool() = default;
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  // A buffer of at least `bytes` (null with *rc set on failure).
  void* take(size_t bytes, cudaError_t* rc);
  void give(void* buffer);

 private:
  struct Buffer {
    void* data;
    size_t bytes;
    bool in_use;
  };
  std::mutex mutex_;
  std::vector<Buffer> buffers_;
};

// Device memory in stream order from a pool of the set's own, so that freeing a job's scratch or
// growing the fusion buffer never synchronises with the GPU (cudaFree would).
class StreamMemory {
 public:
  StreamMemory() = default;
  ~StreamMemory();
  StreamMemory(const StreamMemory&) = delete;
  StreamMemory& operator=(const StreamMemory&) = delete;
  cudaError_t init(int device);
  cudaError_t allocate(void** out, size_t bytes, cudaStream_t stream);
  cudaError_t release(void* p, cudaStream_t stream);

 private:
  cudaMemPool_t pool_ = nullptr;
};

// The persistent device fusion buffer, grown in stream order when a batch needs more.
class FusionBuffer {
 public:
  explicit FusionBuffer(StreamMemory* memory) : memory_(memory) {}
  // A buffer of at least `bytes` for work enqueued on `stream` from now on.
  cudaError_t reserve(size_t bytes, cudaStream_t stream, void** out);
  void release_all(cudaStream_t stream);

 private:
  StreamMemory* memory_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Enqueues every copy of `batch` (device memory to device memory) on `stream` as one kernel
// (batched_copy.cu): 0.84-0.93 of one large cudaMemcpy's bandwidth on an H100, where
// cudaMemcpyBatchAsync ran at 0.08 of it and one cudaMemcpyAsync per copy costs a launch per
// tensor (what it falls back to where the kernel cannot run: a GPU older than sm_75, a driver
// older than CUDA 12.1).
cudaError_t batched_copy(const CopyBatch& batch, cudaStream_t stream);

}  // namespace ranktime::gpu
