// Where each tensor of a fused batch lives in the device fusion buffer, and the copies that fill
// and drain it (issued as one batched copy, not one cudaMemcpy per tensor). Pure: pointer
// arithmetic only, so tests run without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ranktime::gpu {

// Every tensor starts on this boundary in the fusion buffer: cudaMalloc's own alignment, a
// multiple of every dtype's size, and what copy engines and NCCL's vectorised loads run fastest on.
// The padding (under 256 B per tensor) is reduced with the rest and never copied out.
inline constexpr size_t kDeviceFusionAlignment = 256;

struct FusionLayout {
  std::vector<size_t> offsets;  // per tensor, bytes from the buffer's start
  std::vector<size_t> sizes;    // per tensor, bytes
  size_t bytes = 0;             // the extent the collective covers, padding included
};

// Lays `sizes` out back to back, each at a multiple of `alignment`. The total is rounded up to a
// multiple of `granule` (0 or 1: of `alignment`): hierarchical allreduce passes
// local_size * alignment so the buffer splits into equal, aligned shards.
FusionLayout plan_device_fusion(const std::vector<size_t>& sizes,
                                size_t alignment = kDeviceFusionAlignment, size_t granule = 0);

// A batch of independent copies, in the form cudaMemcpyBatchAsync takes.
struct CopyBatch {
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  size_t count() const { return sizes.size(); }
  size_t bytes() const;
};

// Copies tensors[i] -> buffer + layout.offsets[i], one copy per tensor; empty tensors and null
// ones (a joined rank's zeros, which have no memory: the buffer is zeroed there) are skipped.
CopyBatch pack_copies(const FusionLayout& layout, const std::vector<const void*>& tensors,
                      void* buffer);
// Copies buffer + layout.offsets[i] -> tensors[i], one copy per non-empty, non-null tensor.
CopyBatch unpack_copies(const FusionLayout& layout, const std::vector<void*>& tensors,
                        const void* buffer);

// This rank's part of a buffer reduce-scattered over `local_size` ranks (bytes must divide
// evenly, as plan_device_fusion's granule ensures).
struct Shard {
  size_t offset = 0;
  size_t bytes = 0;
};
Shard shard_of(size_t total_bytes, int local_rank, int local_size);

// Allgather with a first dimension that differs per rank: where rank r's rows land in the
// gathered output, in bytes.
struct GatherLayout {
  std::vector<size_t> offsets;  // per rank
  std::vector<size_t> sizes;    // per rank
  size_t bytes = 0;
  int64_t rows = 0;
};
GatherLayout plan_gather(const std::vector<int64_t>& first_dims, size_t row_bytes);

// Reducescatter over NCCL: ncclReduceScatter gives every rank the same count, but ranks get
// scatter_rows() rows each (the first dim0 % size ranks one more). So rank r's rows sit in block r
// of equal blocks: `blocks.offsets[r]` = r * block, `blocks.sizes[r]` its rows' bytes, and
// `sources[r]` where those rows start in the tensor. Where the rows split evenly the tensor
// already is that layout (`packed` false: no copy); otherwise the rows are packed, each block
// rounded up to `alignment`, and the padding is reduced with the rest and never read.
struct ScatterLayout {
  FusionLayout blocks;
  std::vector<size_t> sources;  // per rank, bytes from the tensor's start
  size_t block = 0;             // bytes of each rank's block
  bool packed = false;
};
ScatterLayout plan_scatter(int64_t dim0, size_t row_bytes, int size,
                           size_t alignment = kDeviceFusionAlignment);

}  // namespace ranktime::gpu
