// Requests and responses as the negotiation tests write them: one definition for every test file
// (test_coordinator's five files are also compiled as one unity source in CI's sanitizer builds).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "negotiation/coordinator.h"

namespace ranktime {
namespace test {

inline const FusionOptions kNoFusion{0, 0};
inline const FusionOptions kFusion{1 << 20, 0};

// Tensor `name` as one rank submits it: `op` on float32 of `shape`, ready at `ready_ns`.
inline Request make_request(const std::string& name, OpType op = OpType::kAllreduce,
                            std::vector<int64_t> shape = {4}, int64_t ready_ns = 0) {
  Request q;
  q.name = name;
  q.op = op;
  q.shape = std::move(shape);
  q.ready_ns = ready_ns;
  return q;
}

// Tensor `i` of the `n` of group `group` (named `group`_`i`of`n`), as one rank submits it.
inline Request group_member(const std::string& group, int i, int n,
                            OpType op = OpType::kAllreduce) {
  Request q = make_request(group + "_" + std::to_string(i) + "of" + std::to_string(n), op);
  q.group = group;
  q.group_size = static_cast<uint32_t>(n);
  return q;
}

// The tensor names of each response, in order.
inline std::vector<std::vector<std::string>> names_of(const std::vector<Response>& responses) {
  std::vector<std::vector<std::string>> out;
  for (const Response& r : responses) out.push_back(r.names);
  return out;
}

}  // namespace test
}  // namespace ranktime
