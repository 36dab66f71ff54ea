// Negotiation on rank 0: readiness bookkeeping, then validation and fusion of what is ready.
#include "negotiation/coordinator.h"

#include <algorithm>

namespace ranktime {

Coordinator::Coordinator(int size, TensorIds* ids) : size_(size), ids_(ids) {}

void Coordinator::add(int rank, Request request) {
  auto [it, inserted] = table_.try_emplace(request.name);
  Entry& e = it->second;
  if (inserted) e.by_rank.resize(size_);
  if (e.by_rank[rank]) {
    e.duplicate_error = "tensor '" + request.name + "': rank " + std::to_string(rank) +
                        " submitted it twice while in flight";
    return;
  }
  e.first_ready_ns = std::min(e.first_ready_ns, request.ready_ns);
  e.by_rank[rank] = std::move(request);
  if (++e.count == size_) completed_.push_back(it->first);
}

std::vector<Response> Coordinator::take_ready(const FusionOptions& options,
                                              std::vector<Negotiation>* negotiations) {
  std::vector<Response> singles;
  std::vector<int64_t> bytes;
  singles.reserve(completed_.size());
  bytes.reserve(completed_.size());
  std::vector<Request> by_rank;
  for (const std::string& name : completed_) {
    auto node = table_.extract(name);
    Entry& e = node.mapped();
    by_rank.clear();
    for (auto& q : e.by_rank) by_rank.push_back(std::move(*q));
    const Request& q0 = by_rank[0];
    Response s;
    s.op = q0.op;
    s.reduce_op = q0.reduce_op;
    s.dtype = q0.dtype;
    s.device = q0.device;
    s.root = q0.root;
    s.flags = q0.flags;
    s.argument = q0.argument;
    s.names.push_back(name);
    s.tensor_ids.push_back(ids_->id_of(name));
    s.error = e.duplicate_error.empty() ? validate_requests(by_rank) : e.duplicate_error;
    if (s.error.empty() && s.op == OpType::kAllgather) {
      for (const Request& q : by_rank) s.first_dims.push_back(q.shape[0]);
    }
    Negotiation n;
    n.tensor_id = s.tensor_ids[0];
    n.op = q0.op;
    n.error = s.error;
    n.ready_ns.reserve(by_rank.size());
    for (const Request& q : by_rank) n.ready_ns.push_back(q.ready_ns);
    negotiations->push_back(std::move(n));
    bytes.push_back(request_bytes(q0));
    singles.push_back(std::move(s));
  }
  completed_.clear();
  return plan_fusion(singles, bytes, options);
}

std::vector<Coordinator::Stalled> Coordinator::stalled(int64_t older_than_ns) const {
  std::vector<Stalled> out;
  for (const auto& [name, e] : table_) {
    if (e.first_ready_ns > older_than_ns) continue;
    Stalled s{name, {}, e.first_ready_ns};
    for (int r = 0; r < size_; ++r) {
      if (!e.by_rank[r]) s.missing_ranks.push_back(r);
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const Stalled& a, const Stalled& b) { return a.first_ready_ns < b.first_ready_ns; });
  return out;
}

std::vector<std::string> Coordinator::drain() {
  std::vector<std::string> names;
  for (auto& [name, e] : table_) names.push_back(name);
  table_.clear();
  completed_.clear();
  return names;
}

}  // namespace ranktime
