// ProcessGroupRanktime: each c10d call becomes one or more ranktime operations under a name from
// CallNames; results reach the caller's tensors in place or through a finish step.
#include "process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/tensor_dtypes.h>

#include <stdexcept>
#include <utility>

namespace ranktime::c10d {
namespace {

using ::c10d::OpType;

// "torch.float32", as Python spells it.
std::string torch_dtype_name(at::ScalarType type) {
  return "torch." + torch::utils::getDtypeNames(type).first;
}

DataType to_ranktime(at::ScalarType type, const char* call) {
  switch (type) {
    case at::kByte:
      return DataType::kUInt8;
    case at::kChar:
      return DataType::kInt8;
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
                  " is not supported (uint8, int8, int32, int64, float16, bfloat16, float32, "
                  "float64 are)");
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

// The checks every tensor handed to the runtime passes: dense, in host memory, a ranktime dtype.
void check_tensor(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.defined(), "ranktime: ", call, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "ranktime: ", call,
              ": only dense tensors are supported, not ", t.layout());
  TORCH_CHECK(t.device().is_cpu(), "ranktime: ", call, ": tensor on ", t.device(),
              "; the ranktime backend takes host (CPU) tensors");
  to_ranktime(t.scalar_type(), call);
}

void check_one(const std::vector<at::Tensor>& tensors, const char* call) {
  TORCH_CHECK(tensors.size() == 1, "ranktime: ", call, " takes one tensor per call, got ",
              tensors.size());
  check_tensor(tensors[0], call);
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

// Allreduces `tensor` in place, through a contiguous copy where it is not contiguous.
void add_allreduce(Operation& op, const at::Tensor& tensor, const std::string& name,
                   ReduceOp reduce) {
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  op.add(allreduce_async(view_of(buffer), name, reduce));
  op.keep(buffer);
  if (!buffer.is_same(tensor)) {
    op.on_success([tensor, buffer](const std::vector<Handle>&) mutable { tensor.copy_(buffer); });
  }
}

// Allgathers `input` (every rank's the same shape) and hands the result to `take`.
void add_allgather(Operation& op, const at::Tensor& input, const std::string& name, int size,
                   std::function<void(const std::byte* bytes, size_t per_rank)> take) {
  at::Tensor buffer = input.contiguous();
  // One row per rank: the runtime checks that every rank's shape is this one.
  std::vector<int64_t> shape{1};
  for (int64_t d : buffer.sizes()) shape.push_back(d);
  op.add(allgather_async(view_of(buffer, shape), name));
  op.keep(buffer);
  const size_t per_rank = buffer.nbytes();
  op.on_success([take = std::move(take), per_rank, size, name](const std::vector<Handle>& h) {
    const std::vector<std::byte>& bytes = h.back().output();
    if (bytes.size() != per_rank * static_cast<size_t>(size)) {
      throw std::runtime_error("ranktime: allgather '" + name + "': gathered " +
                               std::to_string(bytes.size()) + " bytes, expected " +
                               std::to_string(per_rank * size));
    }
    take(bytes.data(), per_rank);
  });
}

[[noreturn]] void unsupported(const char* call) {
  TORCH_CHECK(false, "ranktime: torch.distributed.", call,
              " is not supported by the ranktime backend (it runs all_reduce, broadcast, "
              "all_gather, all_gather_object, reduce_scatter and barrier)");
}

}  // namespace

ProcessGroupRanktime::ProcessGroupRanktime(int rank, int size, const std::string& group_id)
    : ProcessGroup(rank, size),
      names_(group_id == "0" ? "c10d." : "c10d." + group_id + "."),
      completer_(std::make_unique<Completer>()) {
  init();
}

ProcessGroupRanktime::~ProcessGroupRanktime() = default;

std::string ProcessGroupRanktime::next_name(const char* call,
                                            const std::vector<at::Tensor>& tensors) {
  // A call from a future's callback would be ordered against the training thread's calls by
  // timing, which differs between ranks: refuse it rather than mismatch (or deadlock, where the
  // callback then waits on a future that only this thread would complete).
  TORCH_CHECK(!completer_->on_this_thread(), "ranktime: torch.distributed.", call,
              " was called from a future's callback (Future.then) on the ranktime backend's "
              "completion thread; start collectives from the training thread (communication "
              "hooks that chain collectives in callbacks, such as PowerSGD, are not supported)");
  std::vector<const void*> ids;
  ids.reserve(tensors.size());
  for (const at::Tensor& t : tensors) ids.push_back(t.unsafeGetTensorImpl());
  std::shared_ptr<Operation> earlier;
  CallNames::Next next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    next = names_.next(ids);
    if (next.new_round) round_.clear();
    for (const at::Tensor& t : tensors) round_.emplace_back(t.getIntrusivePtr());
    auto it = in_flight_.find(next.name);
    if (it != in_flight_.end()) earlier = it->second.lock();
  }
  // The runtime refuses a name submitted twice while in flight; the earlier call was made on
  // every rank before this one, so waiting for it cannot deadlock.
  if (earlier) earlier->complete();
  return next.name;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::start(std::shared_ptr<Operation> op,
                                                             OpType type) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_[op->name()] = op;
  }
  auto work = c10::make_intrusive<Work>(op, type, rank_);
  completer_->push(std::move(op));
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  check_one(tensors, "all_reduce");
  ReduceOp reduce = to_ranktime(opts.reduceOp, "all_reduce");
  std::string name = next_name("all_reduce", tensors);
  auto op = std::make_shared<Operation>("all_reduce", name, tensors);
  add_allreduce(*op, tensors[0], name, reduce);
  return start(std::move(op), OpType::ALLREDUCE);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) check_tensor(t, "all_reduce_coalesced");
  ReduceOp reduce = to_ranktime(opts.reduceOp, "all_reduce_coalesced");
  std::string name = next_name("all_reduce_coalesced", tensors);
  auto op = std::make_shared<Operation>("all_reduce_coalesced", name, tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    add_allreduce(*op, tensors[i], name + "." + std::to_string(i), reduce);
  }
  return start(std::move(op), OpType::ALLREDUCE_COALESCED);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  check_one(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "ranktime: broadcast: source rank ",
              opts.rootRank, " is not a rank of the group (size ", size_, ")");
  TORCH_CHECK(opts.rootTensor == 0, "ranktime: broadcast: rootTensor must be 0, got ",
              opts.rootTensor);
  std::string name = next_name("broadcast", tensors);
  auto op = std::make_shared<Operation>("broadcast", name, tensors);
  const at::Tensor& tensor = tensors[0];
  at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  op->add(broadcast_async(view_of(buffer), static_cast<int>(opts.rootRank), name));
  op->keep(buffer);
  if (!buffer.is_same(tensor)) {
    op->on_success([tensor, buffer](const std::vector<Handle>&) mutable { tensor.copy_(buffer); });
  }
  return start(std::move(op), OpType::BROADCAST);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  check_one(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1, "ranktime: all_gather takes one output list, got ",
              outputs.size());
  const at::Tensor& input = inputs[0];
  std::vector<at::Tensor> slots = outputs[0];
  TORCH_CHECK(slots.size() == static_cast<size_t>(size_), "ranktime: all_gather: ", slots.size(),
              " output tensors for ", size_, " ranks");
  for (const at::Tensor& slot : slots) check_like(slot, input, "all_gather", "an output tensor");
  std::string name = next_name("all_gather", inputs);
  auto op = std::make_shared<Operation>("all_gather", name, slots);
  add_allgather(*op, input, name, size_,
                [slots, sizes = input.sizes().vec(), type = input.scalar_type()](
                    const std::byte* bytes, size_t per_rank) mutable {
                  for (size_t r = 0; r < slots.size(); ++r) {
                    slots[r].copy_(from_bytes(bytes + r * per_rank, sizes, type));
                  }
                });
  return start(std::move(op), OpType::ALLGATHER);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions&) {
  check_tensor(input, "all_gather_into_tensor");
  check_tensor(output, "all_gather_into_tensor");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
      "ranktime: all_gather_into_tensor: the output must be ", size_, " times the input (",
      torch_dtype_name(input.scalar_type()), ", ", input.numel() * size_, " elements), got ",
      torch_dtype_name(output.scalar_type()), " with ", output.numel());
  std::vector<at::Tensor> inputs{input};
  std::string name = next_name("all_gather_into_tensor", inputs);
  auto op =
      std::make_shared<Operation>("all_gather_into_tensor", name, std::vector<at::Tensor>{output});
  add_allgather(*op, input, name, size_,
                [output, type = input.scalar_type()](const std::byte* bytes, size_t) mutable {
                  output.copy_(from_bytes(bytes, output.sizes(), type));
                });
  return start(std::move(op), OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "ranktime: reduce_scatter takes one input list, got ",
              inputs.size());
  const std::vector<at::Tensor>& parts = inputs[0];
  TORCH_CHECK(parts.size() == static_cast<size_t>(size_),
              "ranktime: reduce_scatter: ", parts.size(), " input tensors for ", size_, " ranks");
  at::Tensor output = outputs[0];
  for (const at::Tensor& part : parts) check_like(part, output, "reduce_scatter", "an input");
  ReduceOp reduce = to_ranktime(opts.reduceOp, "reduce_scatter");
  std::string name = next_name("reduce_scatter", parts);
  const int64_t n = output.numel();
  at::Tensor flat = at::empty({n * size_}, output.options());
  for (int r = 0; r < size_; ++r) flat.narrow(0, r * n, n).copy_(parts[r].reshape({-1}));
  auto op = std::make_shared<Operation>("reduce_scatter", name, outputs);
  add_allreduce(*op, flat, name, reduce);
  op->on_success([output, flat, n, r = rank_](const std::vector<Handle>&) mutable {
    output.copy_(flat.narrow(0, r * n, n).view(output.sizes()));
  });
  return start(std::move(op), OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "reduce_scatter_tensor");
  check_tensor(output, "reduce_scatter_tensor");
  TORCH_CHECK(
      output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * size_,
      "ranktime: reduce_scatter_tensor: the input must be ", size_, " times the output (",
      torch_dtype_name(output.scalar_type()), ", ", output.numel() * size_, " elements), got ",
      torch_dtype_name(input.scalar_type()), " with ", input.numel());
  ReduceOp reduce = to_ranktime(opts.reduceOp, "reduce_scatter_tensor");
  std::vector<at::Tensor> inputs{input};
  std::string name = next_name("reduce_scatter_tensor", inputs);
  const int64_t n = output.numel();
  at::Tensor flat = input.reshape({-1}).clone(at::MemoryFormat::Contiguous);
  auto op =
      std::make_shared<Operation>("reduce_scatter_tensor", name, std::vector<at::Tensor>{output});
  add_allreduce(*op, flat, name, reduce);
  op->on_success([output, flat, n, r = rank_](const std::vector<Handle>&) mutable {
    output.copy_(flat.narrow(0, r * n, n).view(output.sizes()));
  });
  return start(std::move(op), OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::barrier(const ::c10d::BarrierOptions&) {
  Status status = ranktime::barrier();
  // c10d's barrier also covers the calls made before it on this rank.
  std::vector<std::shared_ptr<Operation>> earlier;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [name, weak] : in_flight_) {
      if (auto op = weak.lock()) earlier.push_back(std::move(op));
    }
  }
  for (auto& op : earlier) op->complete();
  auto op = std::make_shared<Operation>("barrier", "ranktime.barrier", std::vector<at::Tensor>{});
  if (!status.ok()) {
    op->on_success([message = status.message()](const std::vector<Handle>&) {
      throw std::runtime_error("ranktime: barrier failed: " + message);
    });
  }
  op->complete();
  return c10::make_intrusive<Work>(std::move(op), OpType::BARRIER, rank_);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::reduce(std::vector<at::Tensor>&,
                                                              const ::c10d::ReduceOptions&) {
  unsupported("reduce");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&, std::vector<at::Tensor>&,
    const ::c10d::AllgatherOptions&) {
  unsupported("all_gather_coalesced");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::gather(std::vector<std::vector<at::Tensor>>&,
                                                              std::vector<at::Tensor>&,
                                                              const ::c10d::GatherOptions&) {
  unsupported("gather");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::scatter(
    std::vector<at::Tensor>&, std::vector<std::vector<at::Tensor>>&,
    const ::c10d::ScatterOptions&) {
  unsupported("scatter");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::alltoall_base(
    at::Tensor&, at::Tensor&, std::vector<int64_t>&, std::vector<int64_t>&,
    const ::c10d::AllToAllOptions&) {
  unsupported("all_to_all_single");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::alltoall(std::vector<at::Tensor>&,
                                                                std::vector<at::Tensor>&,
                                                                const ::c10d::AllToAllOptions&) {
  unsupported("all_to_all");
}
void ProcessGroupRanktime::monitoredBarrier(const ::c10d::BarrierOptions&, bool) {
  unsupported("monitored_barrier");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::send(std::vector<at::Tensor>&, int, int) {
  unsupported("send");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::recv(std::vector<at::Tensor>&, int, int) {
  unsupported("recv");
}
c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::recvAnysource(std::vector<at::Tensor>&,
                                                                     int) {
  unsupported("recv (from any source)");
}

}  // namespace ranktime::c10d
