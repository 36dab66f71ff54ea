// ProcessGroupRanktime: the torch.distributed backend "ranktime", whose collectives are
// ranktime's (negotiated, fused, and recorded in the timeline). Host tensors, or CUDA tensors (one
// device per call) on ranktime's GPU path. A c10d ProcessGroup in torch 1.13; in torch 2, which
// split ProcessGroup into the group Python holds and a Backend per device type that runs its
// calls, a c10d Backend (the calls' signatures are the same).
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "call_names.h"
#include "operation.h"

namespace ranktime::c10d {

#if TORCH_VERSION_MAJOR >= 2
using C10dBase = ::c10d::Backend;
#else
using C10dBase = ::c10d::ProcessGroup;
#endif

class ProcessGroupRanktime : public C10dBase {
 public:
  // Spans every rank of ranktime (the runtime's collectives have no subgroups). `group_id` is
  // torch's name for the group ("0" for the default group); it prefixes the tensor names of the
  // other groups so that two groups' calls never meet.
  ProcessGroupRanktime(int rank, int size, const std::string& group_id);
  ~ProcessGroupRanktime() override;

  const std::string getBackendName() const override { return "ranktime"; }

  c10::intrusive_ptr<::c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceOptions& opts = ::c10d::AllreduceOptions()) override;
  // One grouped allreduce (tensors named `<name>_<i+1>of<n>`): negotiated once, fused per dtype,
  // failed as a whole.
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceCoalescedOptions& opts = ::c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<::c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const ::c10d::BroadcastOptions& opts = ::c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<::c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  // One ranktime reducescatter of the inputs laid end to end (the list's parts, or the one
  // tensor), `size` rows of the output's shape: rank r receives row r's reduction.
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
  // One ranktime alltoall: of the input's rows (dimension 0), as the split sizes say (or evenly);
  // of the list's tensors flattened and laid end to end. What arrives from each rank is checked
  // against what the output expects (the output split sizes, the output tensors' sizes): a rank
  // that expects otherwise fails its call, naming both, after the exchange.
  c10::intrusive_ptr<::c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  // ranktime's barrier blocks, so this one returns a completed Work, after every earlier call of
  // this group has completed too.
  c10::intrusive_ptr<::c10d::Work> barrier(
      const ::c10d::BarrierOptions& opts = ::c10d::BarrierOptions()) override;

  // The rest fail with a message that names the call.
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>&,
                                          const ::c10d::ReduceOptions&) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>&,
                                                       std::vector<at::Tensor>&,
                                                       const ::c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>&,
                                          std::vector<at::Tensor>&,
                                          const ::c10d::GatherOptions&) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>&,
                                           std::vector<std::vector<at::Tensor>>&,
                                           const ::c10d::ScatterOptions&) override;
  void monitoredBarrier(const ::c10d::BarrierOptions&, bool) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>&, int, int) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>&, int, int) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override;

 private:
  // Names the next call (`call`, for messages) after the tensors it communicates and keeps them
  // from being reused while they are in the naming round; waits for an earlier call of the same
  // name still in flight.
  std::string next_name(const char* call, const std::vector<at::Tensor>& tensors);
  // Hands `op` to the completer and returns its Work.
  c10::intrusive_ptr<::c10d::Work> start(std::shared_ptr<Operation> op, ::c10d::OpType type);

  std::mutex mutex_;  // names_, round_, in_flight_ (calls may come from several threads)
  CallNames names_;
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> round_;
  std::unordered_map<std::string, std::weak_ptr<Operation>> in_flight_;
  std::unique_ptr<Completer> completer_;  // last member: drained first on destruction
};

}  // namespace ranktime::c10d
