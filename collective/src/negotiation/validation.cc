// Request validation on the submitting rank and on rank 0 (see validation.h).
#include "negotiation/validation.h"

#include <algorithm>
#include <climits>
#include <map>
#include <utility>

#include "core/wire.h"

namespace ranktime {
namespace {

// When the ranks differ in `key` (what is compared of a request), sets *message to "<field>
// differs between ranks: float32 on ranks 0,1; float64 on rank 2", with `text` showing a key;
// leaves it alone when they agree. Agreeing, as in every negotiation of a correct program, costs
// a comparison per rank and builds no string (building them for every tensor was 44% of rank
// 0's background thread on 1,000 small tensors).
template <typename Key, typename Text>
void describe_difference(const std::vector<Request>& by_rank, const std::vector<int>* ranks,
                         const char* field, Key key, Text text, std::string* message) {
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
    groups[v].push_back(ranks ? (*ranks)[r] : static_cast<int>(r));
  }
  std::string& s = *message;
  s = std::string(field) + " differs between ranks: ";
  for (size_t i = 0; i < order.size(); ++i) {
    s += (i ? "; " : "") + order[i] + " on " + ranks_text(groups[order[i]]);
  }
}

std::string number_str(int64_t n) { return std::to_string(n); }

std::string group_text(const std::pair<std::string, uint32_t>& group) {
  if (group.second == 0) return "none";
  return "'" + group.first + "' of " + std::to_string(group.second);
}

}  // namespace

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string check_tensor_view(const TensorView& v) {
  if (static_cast<int>(v.dtype) >= kNumDataTypes) {
    return "invalid dtype value " + std::to_string(static_cast<int>(v.dtype));
  }
  if (v.shape.size() > kMaxDims) {
    return "shape has " + std::to_string(v.shape.size()) +
           " dimensions (most: " + std::to_string(kMaxDims) + ")";
  }
  int64_t elements = 1;
  for (int64_t d : v.shape) {
    if (d < 0) return "negative dimension in shape " + shape_text(v.shape);
    if (d != 0 && elements > INT64_MAX / static_cast<int64_t>(dtype_size(v.dtype)) / d) {
      return "shape " + shape_text(v.shape) + " overflows a 64-bit byte count";
    }
    elements *= d;
  }
  size_t bytes = static_cast<size_t>(elements) * dtype_size(v.dtype);
  if (v.data == nullptr && bytes > 0) {
    return "null data pointer for a tensor of " + std::to_string(bytes) + " bytes";
  }
  if (v.data != nullptr && reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) != 0) {
    return "data pointer is not aligned to its " + std::to_string(dtype_size(v.dtype)) +
           "-byte dtype " + dtype_name(v.dtype);
  }
  return "";
}

std::string check_arguments(OpType op, const TensorView& v, const std::vector<int32_t>& splits,
                            int size) {
  if (op != OpType::kReducescatter && op != OpType::kAlltoall) return "";
  const std::string what = op_type_name(op);
  if (v.shape.empty()) {
    return what +
           " needs at least one dimension (it splits dimension 0 among the ranks); "
           "reshape a scalar to [1]";
  }
  if (op != OpType::kAlltoall) return "";
  const int64_t dim0 = v.shape[0];
  if (splits.empty()) {
    if (dim0 % size == 0) return "";
    return "alltoall without splits divides dimension 0 evenly among the ranks, and " +
           std::to_string(dim0) + " rows do not divide among " + std::to_string(size) +
           " ranks: pass splits";
  }
  if (splits.size() != static_cast<size_t>(size)) {
    return "alltoall has " + std::to_string(splits.size()) + " splits for " + std::to_string(size) +
           " ranks (one per rank, or none for an equal split)";
  }
  int64_t sum = 0;
  for (size_t r = 0; r < splits.size(); ++r) {
    if (splits[r] < 0) {
      return "alltoall split for rank " + std::to_string(r) + " is negative (" +
             std::to_string(splits[r]) + ")";
    }
    sum += splits[r];
  }
  if (sum > dim0) {
    return "alltoall splits sum to " + std::to_string(sum) + " rows, more than dimension 0 (" +
           std::to_string(dim0) + ")";
  }
  return "";
}

int64_t request_bytes(const Request& q) {
  int64_t n = 1;
  for (int64_t d : q.shape) n *= d;
  return n * static_cast<int64_t>(dtype_size(q.dtype));
}

std::string validate_requests(const std::vector<Request>& by_rank, const std::vector<int>* ranks,
                              const ProcessSet* set) {
  const Request& first = by_rank.at(0);
  std::string d;
  for (size_t r = 0; r < by_rank.size() && d.empty(); ++r) {
    if (!by_rank[r].error.empty()) {
      d = "rank " + std::to_string(ranks ? (*ranks)[r] : static_cast<int>(r)) + ": " +
          by_rank[r].error;
    }
  }
  if (d.empty()) {
    describe_difference(
        by_rank, ranks, "operation", [](const Request& q) { return q.op; }, op_type_name, &d);
  }
  if (d.empty()) {
    describe_difference(
        by_rank, ranks, "dtype", [](const Request& q) { return q.dtype; }, dtype_name, &d);
  }
  if (d.empty()) {
    describe_difference(
        by_rank, ranks, "device", [](const Request& q) { return q.device == kCpuDevice; },
        [](bool cpu) { return cpu ? "cpu" : "gpu"; }, &d);
  }
  if (d.empty()) {
    describe_difference(
        by_rank, ranks, "group",
        [](const Request& q) { return std::make_pair(q.group, q.group_size); }, group_text, &d);
  }
  const bool reduces = first.op == OpType::kAllreduce || first.op == OpType::kReducescatter;
  if (d.empty() && reduces) {
    describe_difference(
        by_rank, ranks, "reduction", [](const Request& q) { return q.reduce_op; }, reduce_op_name,
        &d);
  }
  if (d.empty() && (reduces || first.op == OpType::kBroadcast)) {
    describe_difference(
        by_rank, ranks, "shape",
        [](const Request& q) -> const std::vector<int64_t>& { return q.shape; }, shape_text, &d);
  }
  if (d.empty() && (first.op == OpType::kAllgather || first.op == OpType::kAlltoall)) {
    describe_difference(
        by_rank, ranks, "number of dimensions", [](const Request& q) { return q.shape.size(); },
        number_str, &d);
    if (d.empty() && first.shape.empty()) {
      d = std::string(op_type_name(first.op)) + " needs at least one dimension";
    }
    if (d.empty()) {
      describe_difference(
          by_rank, ranks, "shape after the first dimension",
          [](const Request& q) { return std::vector<int64_t>(q.shape.begin() + 1, q.shape.end()); },
          shape_text, &d);
    }
  }
  if (d.empty() && first.op == OpType::kBroadcast) {
    describe_difference(
        by_rank, ranks, "root rank", [](const Request& q) { return q.root; }, number_str, &d);
    const int size = set ? set->size() : static_cast<int>(by_rank.size());
    if (d.empty() && set != nullptr && set->id != kGlobalSet && !set->contains(first.root)) {
      d = "root rank " + std::to_string(first.root) + " is not in " + process_set_text(*set);
    } else if (d.empty() && (set == nullptr || set->id == kGlobalSet) &&
               (first.root < 0 || first.root >= size)) {
      d = "root rank " + std::to_string(first.root) + " is out of range for " +
          std::to_string(size) + " ranks";
    }
  }
  if (d.empty() && (first.op == OpType::kAddProcessSet || first.op == OpType::kRemoveProcessSet)) {
    describe_difference(
        by_rank, ranks,
        first.op == OpType::kAddProcessSet ? "process set ranks" : "process set to remove",
        [](const Request& q) -> const std::string& { return q.argument; },
        [](const std::string& a) { return "[" + a + "]"; }, &d);
  }
  return d.empty() ? "" : "tensor '" + first.name + "': " + d;
}

std::string duplicate_request_error(const std::string& name, int rank) {
  return "tensor '" + name + "': rank " + std::to_string(rank) +
         " submitted it twice while in flight";
}

}  // namespace ranktime
