// The pieces a c10d call is made of (see call_parts.h).
#include "call_parts.h"

#include <c10/util/Exception.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <c10/core/ScalarType.h>
#else
#include <torch/csrc/utils/tensor_dtypes.h>
#endif

#include <limits>
#include <utility>

namespace ranktime::c10d {

// "torch.float32", as Python spells it: torch's own names, from c10 in torch 2 (its
// torch::utils::getDtypeNames() is not exported by torch 2.11's libtorch_python).
std::string torch_dtype_name(at::ScalarType type) {
#if TORCH_VERSION_MAJOR >= 2
  return "torch." + c10::getDtypeNames(type).first;
#else
  return "torch." + torch::utils::getDtypeNames(type).first;
#endif
}

DataType to_ranktime(at::ScalarType type, const char* call) {
  switch (type) {
    case at::kByte:
      return DataType::kUInt8;
    case at::kChar:
      return DataType::kInt8;
    case at::kShort:
      return DataType::kInt16;
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    default:
      TORCH_CHECK(false, "ranktime: ", call, ": element type ", torch_dtype_name(type),
                  " is not supported (uint8, int8, int16, int32, int64, float16, bfloat16, "
                  "float32, float64 are)");
  }
}

ReduceOp to_ranktime(const ::c10d::ReduceOp& op, const char* call) {
  const char* name = "<unknown>";
  switch (static_cast<::c10d::ReduceOp::RedOpType>(op)) {
    case ::c10d::ReduceOp::SUM:
      return ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG:
      return ReduceOp::kAverage;
    case ::c10d::ReduceOp::MIN:
      return ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX:
      return ReduceOp::kMax;
    case ::c10d::ReduceOp::PRODUCT:
      return ReduceOp::kProduct;
    case ::c10d::ReduceOp::BAND:
      name = "BAND";
      break;
    case ::c10d::ReduceOp::BOR:
      name = "BOR";
      break;
    case ::c10d::ReduceOp::BXOR:
      name = "BXOR";
      break;
    case ::c10d::ReduceOp::PREMUL_SUM:
      name = "PREMUL_SUM";
      break;
    default:
      break;
  }
  TORCH_CHECK(false, "ranktime: ", call, ": ReduceOp.", name,
              " is not supported (SUM, AVG, MIN, MAX, PRODUCT are)");
}

// The checks every tensor handed to the runtime passes: dense, a ranktime dtype. Where it is, is
// the call's business (call_device()).
void check_tensor(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.defined(), "ranktime: ", call, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "ranktime: ", call,
              ": only dense tensors are supported, not ", t.layout());
  to_ranktime(t.scalar_type(), call);
}

// A lone tensor of a call, and a list's tensors, for call_device().
TensorPlace place(const char* what, const at::Tensor& t) { return {what, -1, t.device()}; }

// (`before`, the call's other tensors, first.)
std::vector<TensorPlace> places(const char* what, const std::vector<at::Tensor>& tensors,
                                std::vector<TensorPlace> before) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    before.push_back({what, static_cast<int>(i), tensors[i].device()});
  }
  return before;
}

void check_one(const std::vector<at::Tensor>& tensors, const char* call) {
  TORCH_CHECK(tensors.size() == 1, "ranktime: ", call, " takes one tensor per call, got ",
              tensors.size());
  check_tensor(tensors[0], call);
}

void check_like_dtype(const at::Tensor& t, const at::Tensor& like, const char* call,
                      const char* what) {
  check_tensor(t, call);
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "ranktime: ", call, ": ", what, " is ",
              torch_dtype_name(t.scalar_type()), ", expected ",
              torch_dtype_name(like.scalar_type()), " (one dtype per call)");
}

void check_like(const at::Tensor& t, const at::Tensor& like, const char* call, const char* what) {
  check_tensor(t, call);
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(),
              "ranktime: ", call, ": ", what, " is ", torch_dtype_name(t.scalar_type()), " with ",
              t.numel(), " elements, expected ", torch_dtype_name(like.scalar_type()), " with ",
              like.numel());
}

// `contiguous` seen as the runtime's tensor, with `shape` (its own by default).
TensorView view_of(const at::Tensor& contiguous, std::vector<int64_t> shape) {
  TensorView view;
  view.data = contiguous.data_ptr();
  view.dtype = to_ranktime(contiguous.scalar_type(), "");
  view.shape = std::move(shape);
  return view;
}

TensorView view_of(const at::Tensor& contiguous) {
  return view_of(contiguous, contiguous.sizes().vec());
}

// `bytes` (the runtime's copy of a result) seen as a tensor of `sizes`, to copy from.
at::Tensor from_bytes(const std::byte* bytes, at::IntArrayRef sizes, at::ScalarType type) {
  return at::from_blob(const_cast<std::byte*>(bytes), sizes, at::TensorOptions().dtype(type));
}

// `tensor` as the runtime may write it in place: itself where it is contiguous, else a contiguous
// copy that is written back into it once the operation has succeeded.
at::Tensor in_place_buffer(Operation& op, const at::Tensor& tensor) {
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  op.keep(buffer);
  if (!buffer.is_same(tensor)) {
    op.on_success([tensor, buffer](const std::vector<Handle>&) mutable { tensor.copy_(buffer); });
  }
  return buffer;
}

// Once the operation has succeeded, hands its last handle (the one just added) to `take`, after
// checking that the result holds `bytes` bytes: the runtime's buffer is copied out, never trusted
// to fit.
void on_output(Operation& op, size_t bytes, std::function<void(const Handle&)> take) {
  op.on_success([take = std::move(take), bytes, call = op.call(),
                 name = op.name()](const std::vector<Handle>& handles) {
    const Handle& handle = handles.back();
    TORCH_CHECK(handle.output().size() == bytes, "ranktime: ", call, " '", name, "': received ",
                handle.output().size(), " bytes, expected ", bytes);
    take(handle);
  });
}

// Allgathers `input` (every rank's the same shape) and hands the result to `take`.
// On a CUDA device the GPU path gathers into the handle's host output too (docs/gpu.md), as it
// does reducescatter's and alltoall's results.
void add_allgather(Operation& op, const at::Tensor& input, int size,
                   std::function<void(const std::byte* bytes, size_t per_rank)> take) {
  at::Tensor buffer = input.contiguous();
  // One row per rank: the runtime checks that every rank's shape is this one.
  std::vector<int64_t> shape{1};
  for (int64_t d : buffer.sizes()) shape.push_back(d);
  op.add(allgather_async(op.placed(view_of(buffer, shape)), op.name()));
  op.keep(buffer);
  const size_t per_rank = buffer.nbytes();
  on_output(op, per_rank * size, [take = std::move(take), per_rank](const Handle& h) {
    take(h.output().data(), per_rank);
  });
}

// Reduces every rank's `input` (`size` parts of `output`'s shape, rank r's share of the result
// from part r) and copies this rank's share into `output`.
void add_reducescatter(Operation& op, const at::Tensor& input, const at::Tensor& output, int size,
                       ReduceOp reduce) {
  at::Tensor buffer = input.contiguous();
  // One row per rank, so that the runtime's split of dimension 0 gives rank r part r.
  std::vector<int64_t> shape{size};
  for (int64_t d : output.sizes()) shape.push_back(d);
  op.add(reducescatter_async(op.placed(view_of(buffer, shape)), op.name(), reduce));
  op.keep(buffer);
  on_output(op, output.nbytes(), [output](const Handle& h) mutable {
    output.copy_(from_bytes(h.output().data(), output.sizes(), output.scalar_type()));
  });
}

// Sends `splits[r]` rows (dimension 0) of `input` (at least one dimension) to rank r; once every
// rank r has sent this one `expected[r]` rows (else the call fails on this rank, saying what came
// from where against `expected_by`, what decided `expected`; `unit` names a row), hands the rows
// received, in rank order, to `take`.
void add_alltoall(Operation& op, const at::Tensor& input, const std::vector<int64_t>& splits,
                  std::vector<int64_t> expected, const char* unit, const char* expected_by,
                  std::function<void(const std::byte* rows)> take) {
  at::Tensor buffer = input.contiguous();
  std::vector<int32_t> sent;
  for (int64_t rows : splits) {
    TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), "ranktime: ", op.call(), ": ", rows,
                " ", unit, " to one rank; ranktime's alltoall sends at most 2^31 - 1 to each");
    sent.push_back(static_cast<int32_t>(rows));
  }
  op.add(alltoall_async(op.placed(view_of(buffer)), sent, op.name()));
  op.keep(buffer);
  int64_t rows = 0;
  for (int64_t r : expected) rows += r;
  const int64_t row_bytes = c10::multiply_integers(buffer.sizes().slice(1)) * buffer.element_size();
  op.on_success([expected = std::move(expected), unit, expected_by, call = op.call(),
                 name = op.name()](const std::vector<Handle>& handles) {
    const std::vector<int32_t>& got = handles.back().received_splits();
    const std::vector<int64_t> received(got.begin(), got.end());
    TORCH_CHECK(received == expected, "ranktime: ", call, " '", name,
                "': the ranks sent this rank ", c10::ArrayRef<int64_t>(received), " ", unit,
                " (from rank 0, 1, ...), but ", expected_by, " says ",
                c10::ArrayRef<int64_t>(expected));
  });
  on_output(op, static_cast<size_t>(rows * row_bytes),
            [take = std::move(take)](const Handle& h) { take(h.output().data()); });
}

// The rows `tensor` (at least one dimension) sends to or receives from each rank, from torch's
// `splits` (`what`: their name; empty: an even split), checked against the tensor.
std::vector<int64_t> rows_per_rank(const std::vector<int64_t>& splits, const at::Tensor& tensor,
                                   int size, const char* call, const char* what) {
  const int64_t dim0 = tensor.size(0);
  if (splits.empty()) {
    TORCH_CHECK(dim0 % size == 0, "ranktime: ", call, ": without ", what, ", dimension 0 (", dim0,
                " rows) is split evenly among the ", size, " ranks and must divide: pass ", what);
    return std::vector<int64_t>(size, dim0 / size);
  }
  TORCH_CHECK(splits.size() == static_cast<size_t>(size), "ranktime: ", call, ": ", what, " has ",
              splits.size(), " entries for ", size, " ranks");
  int64_t sum = 0;
  for (int64_t rows : splits) {
    TORCH_CHECK(rows >= 0, "ranktime: ", call, ": ", what, " ", c10::ArrayRef<int64_t>(splits),
                " has a negative entry");
    sum += rows;
  }
  TORCH_CHECK(sum == dim0, "ranktime: ", call, ": ", what, " ", c10::ArrayRef<int64_t>(splits),
              " sum to ", sum, " rows, but dimension 0 has ", dim0);
  return splits;
}

}  // namespace ranktime::c10d
