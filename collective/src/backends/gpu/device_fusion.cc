// Device fusion buffer layout and copy descriptors (see device_fusion.h).
#include "backends/gpu/device_fusion.h"

#include "core/rows.h"

namespace ranktime::gpu {
namespace {

size_t round_up(size_t n, size_t multiple) {
  return multiple <= 1 ? n : (n + multiple - 1) / multiple * multiple;
}

// Appends one copy. Copies of neighbouring tensors are never merged, even when they continue
// each other on both sides: two allocations can be adjacent in the address space, and a copy that
// spans both is invalid (cudaErrorInvalidValue, seen on an H100 with two cudaMalloc'd tensors).
// A null end is a joined rank's zeros: nothing of its own to copy.
void add_copy(CopyBatch* batch, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == nullptr || src == nullptr) return;
  batch->dsts.push_back(dst);
  batch->srcs.push_back(src);
  batch->sizes.push_back(bytes);
}

}  // namespace

FusionLayout plan_device_fusion(const std::vector<size_t>& sizes, size_t alignment,
                                size_t granule) {
  FusionLayout layout;
  layout.offsets.reserve(sizes.size());
  layout.sizes = sizes;
  size_t offset = 0;
  for (size_t s : sizes) {
    offset = round_up(offset, alignment);
    layout.offsets.push_back(offset);
    offset += s;
  }
  layout.bytes = round_up(round_up(offset, alignment), granule > 1 ? granule : alignment);
  return layout;
}

size_t CopyBatch::bytes() const {
  size_t total = 0;
  for (size_t s : sizes) total += s;
  return total;
}

CopyBatch pack_copies(const FusionLayout& layout, const std::vector<const void*>& tensors,
                      void* buffer) {
  CopyBatch batch;
  for (size_t i = 0; i < tensors.size() && i < layout.sizes.size(); ++i) {
    add_copy(&batch, static_cast<char*>(buffer) + layout.offsets[i], tensors[i], layout.sizes[i]);
  }
  return batch;
}

CopyBatch unpack_copies(const FusionLayout& layout, const std::vector<void*>& tensors,
                        const void* buffer) {
  CopyBatch batch;
  for (size_t i = 0; i < tensors.size() && i < layout.sizes.size(); ++i) {
    add_copy(&batch, tensors[i], static_cast<const char*>(buffer) + layout.offsets[i],
             layout.sizes[i]);
  }
  return batch;
}

Shard shard_of(size_t total_bytes, int local_rank, int local_size) {
  if (local_size <= 0) return {0, total_bytes};
  const size_t bytes = total_bytes / static_cast<size_t>(local_size);
  return {bytes * static_cast<size_t>(local_rank), bytes};
}

GatherLayout plan_gather(const std::vector<int64_t>& first_dims, size_t row_bytes) {
  GatherLayout g;
  for (int64_t rows : first_dims) {
    const size_t bytes = static_cast<size_t>(rows) * row_bytes;
    g.offsets.push_back(g.bytes);
    g.sizes.push_back(bytes);
    g.bytes += bytes;
    g.rows += rows;
  }
  return g;
}

ScatterLayout plan_scatter(int64_t dim0, size_t row_bytes, int size, size_t alignment) {
  ScatterLayout s;
  if (size <= 0) return s;
  s.packed = dim0 % size != 0;
  const auto most = static_cast<size_t>(scatter_rows(dim0, size, 0)) * row_bytes;
  s.block = s.packed ? round_up(most, alignment) : most;
  for (int r = 0; r < size; ++r) {
    s.blocks.offsets.push_back(static_cast<size_t>(r) * s.block);
    s.blocks.sizes.push_back(static_cast<size_t>(scatter_rows(dim0, size, r)) * row_bytes);
    s.sources.push_back(static_cast<size_t>(scatter_first_row(dim0, size, r)) * row_bytes);
  }
  s.blocks.bytes = s.block * static_cast<size_t>(size);
  return s;
}

}  // namespace ranktime::gpu
