// Negotiation on rank 0: readiness bookkeeping, request validation, ordering and fusion.
#include "negotiation/coordinator.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace ranktime {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// When the ranks differ in `key` (what is compared of a request), sets *message to "<field>
// differs between ranks: float32 on ranks 0,1; float64 on rank 2", with `text` showing a key;
// leaves it alone when they agree. Agreeing, as in every negotiation of a correct program, costs
// a comparison per rank and builds no string (building them for every tensor was 44% of rank
// 0's background thread on 1,000 small tensors).
template <typename Key, typename Text>
void describe_difference(const std::vector<Request>& by_rank, const char* field, Key key, Text text,
                         std::string* message) {
  const auto& first = key(by_rank[0]);
  if (std::all_of(by_rank.begin() + 1, by_rank.end(),
                  [&](const Request& q) { return key(q) == first; })) {
    return;
  }
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    std::string v = text(key(by_rank[r]));
    if (!groups.count(v)) order.push_back(v);
    groups[v].push_back(static_cast<int>(r));
  }
  std::string& s = *message;
  s = std::string(field) + " differs between ranks: ";
  for (size_t i = 0; i < order.size(); ++i) {
    s += (i ? "; " : "") + order[i] + " on " + ranks_str(groups[order[i]]);
  }
}

std::string number_str(int64_t n) { return std::to_string(n); }

}  // namespace

int64_t request_bytes(const Request& q) {
  int64_t n = 1;
  for (int64_t d : q.shape) n *= d;
  return n * static_cast<int64_t>(dtype_size(q.dtype));
}

std::string validate_requests(const std::vector<Request>& by_rank) {
  const Request& first = by_rank.at(0);
  std::string d;
  for (size_t r = 0; r < by_rank.size() && d.empty(); ++r) {
    if (!by_rank[r].error.empty()) d = "rank " + std::to_string(r) + ": " + by_rank[r].error;
  }
  if (d.empty()) {
    describe_difference(
        by_rank, "operation", [](const Request& q) { return q.op; }, op_type_name, &d);
  }
  if (d.empty()) {
    describe_difference(
        by_rank, "dtype", [](const Request& q) { return q.dtype; }, dtype_name, &d);
  }
  if (d.empty()) {
    describe_difference(
        by_rank, "device", [](const Request& q) { return q.device == kCpuDevice; },
        [](bool cpu) { return cpu ? "cpu" : "gpu"; }, &d);
  }
  if (d.empty() && first.op == OpType::kAllreduce) {
    describe_difference(
        by_rank, "reduction", [](const Request& q) { return q.reduce_op; }, reduce_op_name, &d);
  }
  if (d.empty() && (first.op == OpType::kAllreduce || first.op == OpType::kBroadcast)) {
    describe_difference(
        by_rank, "shape", [](const Request& q) -> const std::vector<int64_t>& { return q.shape; },
        shape_str, &d);
  }
  if (d.empty() && first.op == OpType::kAllgather) {
    describe_difference(
        by_rank, "number of dimensions", [](const Request& q) { return q.shape.size(); },
        number_str, &d);
    if (d.empty() && first.shape.empty()) d = "allgather needs at least one dimension";
    if (d.empty()) {
      describe_difference(
          by_rank, "shape after the first dimension",
          [](const Request& q) { return std::vector<int64_t>(q.shape.begin() + 1, q.shape.end()); },
          shape_str, &d);
    }
  }
  if (d.empty() && first.op == OpType::kBroadcast) {
    describe_difference(
        by_rank, "root rank", [](const Request& q) { return q.root; }, number_str, &d);
    if (d.empty() && (first.root < 0 || first.root >= static_cast<int>(by_rank.size()))) {
      d = "root rank " + std::to_string(first.root) + " is out of range for " +
          std::to_string(by_rank.size()) + " ranks";
    }
  }
  return d.empty() ? "" : "tensor '" + first.name + "': " + d;
}

std::vector<Response> plan_fusion(const std::vector<Response>& singles,
                                  const std::vector<int64_t>& bytes, const FusionOptions& options) {
  struct Open {
    size_t index;
    int64_t bytes;
  };
  std::vector<Response> out;
  std::map<std::tuple<int, int, int, int, int>, Open> open;
  for (size_t i = 0; i < singles.size(); ++i) {
    const Response& s = singles[i];
    bool fusable = s.error.empty() && (s.op == OpType::kAllreduce || s.op == OpType::kBroadcast) &&
                   options.threshold > 0 && bytes[i] <= options.threshold &&
                   (options.max_tensor <= 0 || bytes[i] < options.max_tensor);
    if (!fusable) {
      out.push_back(s);
      continue;
    }
    auto key = std::make_tuple(static_cast<int>(s.op), static_cast<int>(s.reduce_op),
                               static_cast<int>(s.dtype), s.device, s.root);
    auto it = open.find(key);
    if (it != open.end() && it->second.bytes + bytes[i] <= options.threshold) {
      Response& batch = out[it->second.index];
      batch.names.push_back(s.names[0]);
      batch.tensor_ids.push_back(s.tensor_ids[0]);
      it->second.bytes += bytes[i];
    } else {
      out.push_back(s);
      open[key] = Open{out.size() - 1, bytes[i]};
    }
  }
  return out;
}

Coordinator::Coordinator(int size, timeline::StringTable* names) : size_(size), names_(names) {}

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
    s.tensor_ids.push_back(names_->intern(name));
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
