// Tensor fusion, as rank 0 plans it: which ready tensors run together as one collective. Pure.
// (The backends lay a plan out in memory: backends/mpi packs host buffers back to back,
// backends/gpu/device_fusion.h aligns device buffers.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/message.h"

namespace ranktime {

struct FusionOptions {
  // Most bytes one fused batch may hold; 0 disables fusion.
  int64_t threshold = int64_t{64} << 20;
  // Tensors of at least this many bytes run alone, in place (0: no such limit).
  int64_t max_tensor = int64_t{1} << 20;
};

// Packs consecutive compatible responses (same op, reduction, dtype, device, root, process set)
// into batches of at most options.threshold bytes. `bytes[i]` is the size of singles[i]'s tensor.
std::vector<Response> plan_fusion(const std::vector<Response>& singles,
                                  const std::vector<int64_t>& bytes, const FusionOptions& options);

}  // namespace ranktime
