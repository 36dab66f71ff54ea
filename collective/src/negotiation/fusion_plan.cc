// Fusion planning on rank 0 (see fusion_plan.h).
#include "negotiation/fusion_plan.h"

#include <map>
#include <tuple>

namespace ranktime {

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
    bool fusable = s.error.empty() && (s.op == OpType::kAllreduce || s.op == OpType::kBroadcast) &&
                   options.threshold > 0 && bytes[i] <= options.threshold &&
                   (options.max_tensor <= 0 || bytes[i] < options.max_tensor);
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
      Response& batch = out[it->second.index];
      batch.names.push_back(s.names[0]);
      batch.tensor_ids.push_back(s.tensor_ids[0]);
      batch.cache_ids.resize(batch.names.size() - 1);  // stays parallel to names
      batch.cache_ids.push_back(s.cache_ids.empty() ? 0 : s.cache_ids[0]);
      if (!s.tensor_sizes.empty()) batch.tensor_sizes.push_back(s.tensor_sizes[0]);
      it->second.bytes += bytes[i];
    } else {
      out.push_back(s);
      open[key] = Open{out.size() - 1, bytes[i]};
    }
  }
  return out;
}

}  // namespace ranktime
