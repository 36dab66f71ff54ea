// Fusion planning on rank 0 (see fusion_plan.h).
#include "negotiation/fusion_plan.h"

#include <map>
#include <tuple>

namespace ranktime {
namespace {

// Appends `single`'s tensor to the fused response `batch`.
void append(Response& batch, const Response& single) {
  batch.names.push_back(single.names[0]);
  batch.tensor_ids.push_back(single.tensor_ids[0]);
  batch.cache_ids.resize(batch.names.size() - 1);  // stays parallel to names
  batch.cache_ids.push_back(single.cache_ids.empty() ? 0 : single.cache_ids[0]);
  batch.first_dims.insert(batch.first_dims.end(), single.first_dims.begin(),
                          single.first_dims.end());
  // A joined rank's sizes: responses with and without them never meet (plan_fusion's key).
  batch.tensor_sizes.insert(batch.tensor_sizes.end(), single.tensor_sizes.begin(),
                            single.tensor_sizes.end());
}

}  // namespace

std::vector<Response> plan_fusion(const std::vector<Response>& singles,
                                  const std::vector<int64_t>& bytes, const FusionOptions& options) {
  struct Open {
    size_t index;
    int64_t bytes;
  };
  std::vector<Response> out;
  std::map<std::tuple<int, int, int, int, int, int32_t, bool>, Open> open;
  for (size_t i = 0; i < singles.size(); ++i) {
    const Response& s = singles[i];
    // The GPU path reduce-scatters one tensor at a time (its equal NCCL blocks are per tensor).
    bool fusable =
        s.error.empty() && s.names.size() == 1 &&
        (s.op == OpType::kAllreduce || s.op == OpType::kBroadcast ||
         (s.op == OpType::kReducescatter && s.device == kCpuDevice)) &&
        options.threshold > 0 && bytes[i] <= options.threshold &&
        (options.max_tensor <= 0 || bytes[i] < options.max_tensor || s.device != kCpuDevice);
    if (!fusable) {
      out.push_back(s);
      continue;
    }
    // Not across process sets (different communicators), nor between responses with and
    // without the sizes a joined rank needs.
    auto key = std::make_tuple(static_cast<int>(s.op), static_cast<int>(s.reduce_op),
                               static_cast<int>(s.dtype), s.device, s.root, s.process_set,
                               s.tensor_sizes.empty());
    auto it = open.find(key);
    if (it != open.end() && it->second.bytes + bytes[i] <= options.threshold) {
      append(out[it->second.index], s);
      it->second.bytes += bytes[i];
    } else {
      out.push_back(s);
      open[key] = Open{out.size() - 1, bytes[i]};
    }
  }
  return out;
}

std::vector<Response> plan_group(std::vector<Response> members) {
  std::vector<Response> out;
  // The GPU path gathers and reduce-scatters one tensor at a time.
  const bool one_each =
      (members.front().op == OpType::kAllgather || members.front().op == OpType::kReducescatter) &&
      members.front().device != kCpuDevice;
  std::map<int, size_t> batch_of_dtype;
  for (Response& m : members) {
    auto [it, fresh] = batch_of_dtype.try_emplace(static_cast<int>(m.dtype), out.size());
    if (fresh || one_each) {
      out.push_back(std::move(m));
    } else {
      append(out[it->second], m);
    }
  }
  return out;
}

}  // namespace ranktime
