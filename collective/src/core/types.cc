// Element types and tensor views: sizes and names shared by every part of the runtime.
#include <array>

#include "ranktime/ranktime.h"

namespace ranktime {
namespace {
struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr std::array<DtypeInfo, kNumDataTypes> kDtypes = {{{"uint8", 1},
                                                           {"int8", 1},
                                                           {"int32", 4},
                                                           {"int64", 8},
                                                           {"float16", 2},
                                                           {"bfloat16", 2},
                                                           {"float32", 4},
                                                           {"float64", 8},
                                                           {"int16", 2}}};
constexpr std::array<const char*, kNumReduceOps> kReduceOps = {"sum", "average", "min",
                                                               "max", "product", "adasum"};
}  // namespace

size_t dtype_size(DataType dtype) { return kDtypes.at(static_cast<size_t>(dtype)).size; }
const char* dtype_name(DataType dtype) {
  auto i = static_cast<size_t>(dtype);
  return i < kDtypes.size() ? kDtypes[i].name : "invalid";
}
std::optional<DataType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kDtypes.size(); ++i) {
    if (name == kDtypes[i].name) return static_cast<DataType>(i);
  }
  return std::nullopt;
}
const char* reduce_op_name(ReduceOp op) {
  auto i = static_cast<size_t>(op);
  return i < kReduceOps.size() ? kReduceOps[i] : "invalid";
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
size_t TensorView::num_bytes() const {
  return static_cast<size_t>(num_elements()) * dtype_size(dtype);
}

}  // namespace ranktime
