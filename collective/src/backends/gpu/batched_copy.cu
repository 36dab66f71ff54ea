// The fusion buffer's copies in and out as one kernel (see stream_resources.h), or one
// cudaMemcpyAsync per copy on a GPU or driver that cannot run it. The copy
// descriptors travel as kernel parameters (CUDA 12.1+ allows 32 KiB of them), so a launch needs no
// memory of its own and nothing to free; a batch of more than kMaxCopies copies takes several
// launches. Each copy is cut into chunks of kChunkBytes and every block copies one chunk, so a
// 9 MB gradient and a 1 KB bias get blocks in proportion to their bytes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backends/gpu/stream_resources.h"

namespace ranktime::gpu {
namespace {

constexpr int kMaxCopies = 1024;
constexpr size_t kChunkBytes = size_t{64} << 10;
constexpr int kThreads = 256;

struct CopyList {
  const char* src[kMaxCopies];
  char* dst[kMaxCopies];
  uint64_t bytes[kMaxCopies];
  uint32_t first_chunk[kMaxCopies];  // prefix sum of each copy's chunks
  int count;
};
static_assert(sizeof(CopyList) < 32764, "kernel parameters are limited to 32764 bytes");

__global__ void copy_chunks(const __grid_constant__ CopyList list) {
  // The copy this block's chunk belongs to: the last one whose first chunk is <= blockIdx.x.
  const uint32_t chunk = blockIdx.x;
  int lo = 0, hi = list.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (list.first_chunk[mid] <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const uint64_t begin = static_cast<uint64_t>(chunk - list.first_chunk[lo]) * kChunkBytes;
  const uint64_t end = begin + kChunkBytes < list.bytes[lo] ? begin + kChunkBytes : list.bytes[lo];
  const char* src = list.src[lo];
  char* dst = list.dst[lo];
  uint64_t i = begin + threadIdx.x * 16;
  // 16-byte loads and stores where both sides allow them (fusion-buffer offsets are 256-aligned,
  // and so are most tensors); bytes elsewhere and for the tail.
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    for (; i + 16 <= end; i += kThreads * 16) {
      *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
    }
    const uint64_t tail = begin + (end - begin) / 16 * 16;
    i = tail + threadIdx.x;
  } else {
    i = begin + threadIdx.x;
  }
  for (; i < end; i += kThreads) dst[i] = src[i];
}

}  // namespace

cudaError_t batched_copy(const CopyBatch& batch, cudaStream_t stream) {
  static std::atomic<bool> kernel_runs{true};
  const size_t n = batch.count();
  for (size_t first = 0; first < n; first += kMaxCopies) {
    CopyList list;
    list.count = 0;
    uint64_t chunks = 0;
    for (size_t k = first; k < std::min(n, first + kMaxCopies); ++k) {
      if (batch.sizes[k] == 0) continue;
      const int c = list.count++;
      list.src[c] = static_cast<const char*>(batch.srcs[k]);
      list.dst[c] = static_cast<char*>(batch.dsts[k]);
      list.bytes[c] = batch.sizes[k];
      list.first_chunk[c] = static_cast<uint32_t>(chunks);
      chunks += (batch.sizes[k] + kChunkBytes - 1) / kChunkBytes;
    }
    if (list.count == 0) continue;
    if (chunks > 0x7fffffffu) return cudaErrorInvalidValue;  // over 128 TiB in one launch
    if (kernel_runs.load(std::memory_order_relaxed)) {
      // A launch reports its error only through cudaGetLastError, which also holds whatever an
      // earlier call on this thread left there (a failed cudaEventElapsedTime, say, which the
      // caller handled): clear that first so this copy is not failed for it.
      cudaGetLastError();
      copy_chunks<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(list);
      const cudaError_t rc = cudaGetLastError();
      if (rc == cudaSuccess) continue;
      // No machine code or PTX for this GPU (older than sm_75), or a driver older than CUDA
      // 12.1's large kernel parameters: one cudaMemcpyAsync per copy from now on.
      if (rc != cudaErrorNoKernelImageForDevice && rc != cudaErrorInvalidValue &&
          rc != cudaErrorNotSupported && rc != cudaErrorInvalidDeviceFunction &&
          rc != cudaErrorLaunchOutOfResources) {
        return rc;
      }
      kernel_runs.store(false, std::memory_order_relaxed);
    }
    for (int c = 0; c < list.count; ++c) {
      const cudaError_t rc = cudaMemcpyAsync(list.dst[c], list.src[c], list.bytes[c],
                                             cudaMemcpyDeviceToDevice, stream);
      if (rc != cudaSuccess) return rc;
    }
  }
  return cudaSuccess;
}

}  // namespace ranktime::gpu
