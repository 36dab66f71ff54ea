// The pieces a c10d call of ProcessGroupRanktime (process_group.cc) is made of: torch's dtypes
// and reductions as ranktime's, the checks every tensor passes, tensors seen as the runtime's
// views and results copied back, and the ranktime operations behind allgather, reducescatter and
// alltoall with their finish steps. Each check fails with a TORCH_CHECK naming the call.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "call_device.h"
#include "operation.h"
#include "ranktime/ranktime.h"

namespace ranktime::c10d {

// "torch.float32", as Python spells it.
std::string torch_dtype_name(at::ScalarType type);
// ranktime's dtype and reduction for torch's; unsupported ones fail naming the call.
DataType to_ranktime(at::ScalarType type, const char* call);
ReduceOp to_ranktime(const ::c10d::ReduceOp& op, const char* call);

// The checks every tensor handed to the runtime passes: dense, a ranktime dtype. Where it is, is
// the call's business (call_device()).
void check_tensor(const at::Tensor& t, const char* call);
void check_one(const std::vector<at::Tensor>& tensors, const char* call);
void check_like_dtype(const at::Tensor& t, const at::Tensor& like, const char* call,
                      const char* what);
void check_like(const at::Tensor& t, const at::Tensor& like, const char* call, const char* what);

// A lone tensor of a call, and a list's tensors, for call_device() (`before`, the call's other
// tensors, first).
TensorPlace place(const char* what, const at::Tensor& t);
std::vector<TensorPlace> places(const char* what, const std::vector<at::Tensor>& tensors,
                                std::vector<TensorPlace> before = {});

// `contiguous` seen as the runtime's tensor, with `shape` (its own by default).
TensorView view_of(const at::Tensor& contiguous, std::vector<int64_t> shape);
TensorView view_of(const at::Tensor& contiguous);
// `bytes` (the runtime's copy of a result) seen as a tensor of `sizes`, to copy from.
at::Tensor from_bytes(const std::byte* bytes, at::IntArrayRef sizes, at::ScalarType type);
// `tensor` as the runtime may write it in place: itself where it is contiguous, else a contiguous
// copy that is written back into it once the operation has succeeded.
at::Tensor in_place_buffer(Operation& op, const at::Tensor& tensor);
// Once the operation has succeeded, hands its last handle to `take`, after checking that the
// result holds `bytes` bytes.
void on_output(Operation& op, size_t bytes, std::function<void(const Handle&)> take);

// Allgathers `input` (every rank's the same shape) and hands the result to `take`.
void add_allgather(Operation& op, const at::Tensor& input, int size,
                   std::function<void(const std::byte* bytes, size_t per_rank)> take);
// Reduces every rank's `input` (`size` parts of `output`'s shape) and copies this rank's share
// into `output`.
void add_reducescatter(Operation& op, const at::Tensor& input, const at::Tensor& output, int size,
                       ReduceOp reduce);
// Sends `splits[r]` rows of `input` to rank r; checks the rows received against `expected` and
// hands them, in rank order, to `take`.
void add_alltoall(Operation& op, const at::Tensor& input, const std::vector<int64_t>& splits,
                  std::vector<int64_t> expected, const char* unit, const char* expected_by,
                  std::function<void(const std::byte* rows)> take);
// The rows `tensor` sends to or receives from each rank, from torch's `splits` (`what`: their
// name; empty: an even split), checked against the tensor.
std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& splits, const at::Tensor& tensor,
                                   int size, const char* call, const char* what);

}  // namespace ranktime::c10d
