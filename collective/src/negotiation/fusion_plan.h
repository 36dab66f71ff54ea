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
  // Host tensors of at least this many bytes run alone, in place (0: no such limit). Device
  // tensors fuse whatever their size, as in Horovod: on the GPU a copy costs far less than a
  // collective's call (on the H200, fusing the ResNet-50 set whole took its step at one rank
  // from 1.04-1.16 ms to 0.61-0.72, docs/benchmarks.md).
  int64_t max_tensor = int64_t{1} << 20;
};

// Packs consecutive compatible responses (same op, reduction, dtype, device, root, process set)
// into batches of at most options.threshold bytes. `bytes[i]` is the size of singles[i]'s tensor.
// Allreduce, broadcast and reducescatter fuse; a response that already holds several tensors (a
// group's) passes through as it is.
std::vector<Response> plan_fusion(const std::vector<Response>& singles,
                                  const std::vector<int64_t>& bytes, const FusionOptions& options);

// A group's tensors (one single response each, without errors, the same op, reduction, device and
// root) as the responses that run them: one fused response per dtype, whatever the fusion
// threshold (a group is one execution), in the order the dtypes first appear. Device allgathers
// stay one response per tensor: the GPU path gathers one tensor at a time.
std::vector<Response> plan_group(std::vector<Response> members);

}  // namespace ranktime
