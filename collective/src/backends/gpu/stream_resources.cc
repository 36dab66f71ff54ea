// Events, pinned buffers, stream-ordered device memory and batched copies (see stream_resources.h).
#include "backends/gpu/stream_resources.h"

#include <cstdint>

namespace ranktime::gpu {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::take(cudaError_t* rc) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      *rc = cudaSuccess;
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  *rc = cudaEventCreateWithFlags(&e, cudaEventBlockingSync);
  return *rc == cudaSuccess ? e : nullptr;
}

void EventPool::give(cudaEvent_t event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(event);
}

PinnedPool::~PinnedPool() {
  for (const Buffer& b : buffers_) cudaFreeHost(b.data);
}

void* PinnedPool::take(size_t bytes, cudaError_t* rc) {
  std::lock_guard<std::mutex> lock(mutex_);
  *rc = cudaSuccess;
  Buffer* best = nullptr;
  for (Buffer& b : buffers_) {
    if (!b.in_use && b.bytes >= bytes && (best == nullptr || b.bytes < best->bytes)) best = &b;
  }
  if (best == nullptr) {
    // Round up so that a slowly growing size does not leave a trail of buffers behind.
    size_t size = 4096;
    while (size < bytes) size *= 2;
    void* p = nullptr;
    *rc = cudaMallocHost(&p, size);
    if (*rc != cudaSuccess) return nullptr;
    buffers_.push_back({p, size, false});
    best = &buffers_.back();
  }
  best->in_use = true;
  return best->data;
}

void PinnedPool::give(void* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (Buffer& b : buffers_) {
    if (b.data == buffer) b.in_use = false;
  }
}

StreamMemory::~StreamMemory() {
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
}

cudaError_t StreamMemory::init(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaError_t rc = cudaMemPoolCreate(&pool_, &props);
  if (rc != cudaSuccess) {
    pool_ = nullptr;
    return rc;
  }
  // Keep freed memory in the pool: returning it at every synchronisation would make the next
  // allocation a real (slow) one.
  uint64_t keep = UINT64_MAX;
  return cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep);
}

cudaError_t StreamMemory::allocate(void** out, size_t bytes, cudaStream_t stream) {
  return cudaMallocFromPoolAsync(out, bytes == 0 ? 1 : bytes, pool_, stream);
}

cudaError_t StreamMemory::release(void* p, cudaStream_t stream) {
  return p == nullptr ? cudaSuccess : cudaFreeAsync(p, stream);
}

cudaError_t FusionBuffer::reserve(size_t bytes, cudaStream_t stream, void** out) {
  if (bytes > bytes_ || data_ == nullptr) {
    // Grow by half again so that a batch slightly larger than the last does not reallocate.
    size_t size = std::max(bytes, bytes_ + bytes_ / 2);
    void* p = nullptr;
    cudaError_t rc = memory_->allocate(&p, size, stream);
    if (rc != cudaSuccess) return rc;
    if (data_ != nullptr) memory_->release(data_, stream);
    data_ = p;
    bytes_ = size;
  }
  *out = data_;
  return cudaSuccess;
}

void FusionBuffer::release_all(cudaStream_t stream) {
  if (data_ != nullptr) memory_->release(data_, stream);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace ranktime::gpu
