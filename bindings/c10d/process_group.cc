// ProcessGroupRanktime: each c10d call becomes one or more ranktime operations under a name from
// CallNames; results reach the caller's tensors in place or through a finish step. A call's
// tensors are all on the CPU (ranktime's host path) or all on one CUDA device (its GPU path,
// ordered after torch's current stream).
#include "process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <stdexcept>
#include <utility>

#include "call_device.h"
#include "call_parts.h"

namespace ranktime::c10d {
namespace {

using ::c10d::OpType;

[[noreturn]] void unsupported(const char* call) {
  TORCH_CHECK(false, "ranktime: torch.distributed.", call,
              " is not supported by the ranktime backend (it runs all_reduce, broadcast, "
              "all_gather, reduce_scatter, all_to_all, their variants and barrier)");
}

}  // namespace

ProcessGroupRanktime::ProcessGroupRanktime(int rank, int size, const std::string& group_id)
    : C10dBase(rank, size),
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
  const c10::Device device = call_device("all_reduce", {place("tensor", tensors[0])});
  std::string name = next_name("all_reduce", tensors);
  auto op = std::make_shared<Operation>("all_reduce", name, tensors, device);
  op->add(allreduce_async(op->placed(view_of(in_place_buffer(*op, tensors[0]))), name, reduce));
  return start(std::move(op), OpType::ALLREDUCE);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) check_tensor(t, "all_reduce_coalesced");
  ReduceOp reduce = to_ranktime(opts.reduceOp, "all_reduce_coalesced");
  const c10::Device device = call_device("all_reduce_coalesced", places("tensor", tensors));
  std::string name = next_name("all_reduce_coalesced", tensors);
  auto op = std::make_shared<Operation>("all_reduce_coalesced", name, tensors, device);
  // One group: negotiated once, fused per dtype, and failed as a whole (no tensor reduced while
  // another is not) when the ranks disagree about any tensor.
  std::vector<TensorView> views;
  for (const at::Tensor& t : tensors) views.push_back(view_of(in_place_buffer(*op, t)));
  for (TensorView& view : views) view = op->placed(std::move(view));  // after every buffer's copy
  if (!views.empty()) {
    for (Handle& h : grouped_allreduce_async(views, name, reduce)) op->add(std::move(h));
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
  const c10::Device device = call_device("broadcast", {place("tensor", tensors[0])});
  std::string name = next_name("broadcast", tensors);
  auto op = std::make_shared<Operation>("broadcast", name, tensors, device);
  op->add(broadcast_async(op->placed(view_of(in_place_buffer(*op, tensors[0]))),
                          static_cast<int>(opts.rootRank), name));
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
  const c10::Device device =
      call_device("all_gather", places("output", slots, {place("input", input)}));
  std::string name = next_name("all_gather", inputs);
  auto op = std::make_shared<Operation>("all_gather", name, slots, device);
  add_allgather(*op, input, size_,
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
  const c10::Device device =
      call_device("all_gather_into_tensor", {place("input", input), place("output", output)});
  std::vector<at::Tensor> inputs{input};
  std::string name = next_name("all_gather_into_tensor", inputs);
  auto op = std::make_shared<Operation>("all_gather_into_tensor", name,
                                        std::vector<at::Tensor>{output}, device);
  add_allgather(*op, input, size_,
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
  const c10::Device device =
      call_device("reduce_scatter", places("input", parts, {place("output", output)}));
  std::string name = next_name("reduce_scatter", parts);
  // The parts laid end to end, as all_to_all lays its inputs: rank r gets part r's reduction.
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& part : parts) flat_parts.push_back(part.reshape({-1}));
  auto op = std::make_shared<Operation>("reduce_scatter", name, outputs, device);
  add_reducescatter(*op, at::cat(flat_parts), output, size_, reduce);
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
  const c10::Device device =
      call_device("reduce_scatter_tensor", {place("input", input), place("output", output)});
  std::vector<at::Tensor> inputs{input};
  std::string name = next_name("reduce_scatter_tensor", inputs);
  auto op = std::make_shared<Operation>("reduce_scatter_tensor", name,
                                        std::vector<at::Tensor>{output}, device);
  add_reducescatter(*op, input, output, size_, reduce);
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
  auto op = std::make_shared<Operation>("barrier", "ranktime.barrier", std::vector<at::Tensor>{},
                                        c10::Device(c10::kCPU));
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
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const ::c10d::AllToAllOptions&) {
  const char* call = "all_to_all_single";
  check_tensor(input, call);
  check_tensor(output, call);
  TORCH_CHECK(input.dim() > 0 && output.dim() > 0, "ranktime: ", call,
              ": the input and the output need at least one dimension (dimension 0 is split "
              "among the ranks); the input has ",
              input.dim(), ", the output ", output.dim());
  const int64_t row = c10::multiply_integers(input.sizes().slice(1));
  const int64_t output_row = c10::multiply_integers(output.sizes().slice(1));
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output_row == row, "ranktime: ", call,
              ": the output's rows (dimension 0) are ", torch_dtype_name(output.scalar_type()),
              " with ", output_row, " elements, the input's ",
              torch_dtype_name(input.scalar_type()), " with ", row, "; they must agree");
  std::vector<int64_t> sends =
      rows_per_rank(input_split_sizes, input, size_, call, "input_split_sizes");
  std::vector<int64_t> receives =
      rows_per_rank(output_split_sizes, output, size_, call, "output_split_sizes");
  const c10::Device device = call_device(call, {place("input", input), place("output", output)});
  std::vector<at::Tensor> inputs{input};
  std::string name = next_name(call, inputs);
  auto op = std::make_shared<Operation>(call, name, std::vector<at::Tensor>{output}, device);
  add_alltoall(*op, input, sends, receives, "rows",
               output_split_sizes.empty() ? "the output's even split" : "output_split_sizes",
               [output](const std::byte* rows) mutable {
                 output.copy_(from_bytes(rows, output.sizes(), output.scalar_type()));
               });
  return start(std::move(op), OpType::ALLTOALL_BASE);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupRanktime::alltoall(std::vector<at::Tensor>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const ::c10d::AllToAllOptions&) {
  const char* call = "all_to_all";
  TORCH_CHECK(inputs.size() == static_cast<size_t>(size_) && outputs.size() == inputs.size(),
              "ranktime: ", call, ": ", outputs.size(), " output and ", inputs.size(),
              " input tensors for ", size_, " ranks (one of each per rank)");
  // Every tensor flattened and the inputs laid end to end: one alltoall of elements, whatever
  // the tensors' shapes (which torch lets differ from rank to rank).
  std::vector<int64_t> sends, receives;
  std::vector<at::Tensor> flat_inputs;
  for (int r = 0; r < size_; ++r) {
    check_like_dtype(inputs[r], inputs[0], call, "an input tensor");
    check_like_dtype(outputs[r], inputs[0], call, "an output tensor");
    sends.push_back(inputs[r].numel());
    receives.push_back(outputs[r].numel());
    flat_inputs.push_back(inputs[r].reshape({-1}));
  }
  const c10::Device device = call_device(call, places("output", outputs, places("input", inputs)));
  std::string name = next_name(call, inputs);
  auto op = std::make_shared<Operation>(call, name, outputs, device);
  add_alltoall(
      *op, at::cat(flat_inputs), sends, receives, "elements", "the output tensors' sizes",
      [outputs](const std::byte* elements) mutable {
        for (size_t r = 0; r < outputs.size(); ++r) {
          outputs[r].copy_(from_bytes(elements, outputs[r].sizes(), outputs[r].scalar_type()));
          elements += outputs[r].nbytes();
        }
      });
  return start(std::move(op), OpType::ALLTOALL);
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
