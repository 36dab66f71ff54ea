// Host reductions without MPI (see reduce.h).
#include "core/reduce.h"

#include <type_traits>

namespace ranktime {
namespace {

// Wrapping arithmetic for integers (as MPI implementations do), plain arithmetic for floats.
template <typename T, bool = std::is_integral_v<T>>
struct Arithmetic {
  using type = T;
};
template <typename T>
struct Arithmetic<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
T combine(T a, T b, ReduceOp op) {
  using Math = typename Arithmetic<T>::type;
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return static_cast<T>(static_cast<Math>(a) * static_cast<Math>(b));
    default:
      return static_cast<T>(static_cast<Math>(a) + static_cast<Math>(b));
  }
}

template <typename T>
void reduce_typed(const void* in, void* inout, int64_t n, ReduceOp op) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < n; ++i) b[i] = combine(b[i], a[i], op);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16bit(const void* in, void* inout, int64_t n, ReduceOp op) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  switch (op) {
    case ReduceOp::kMin:
      return reduce16<ToFloat, FromFloat, ReduceOp::kMin>(a, b, n);
    case ReduceOp::kMax:
      return reduce16<ToFloat, FromFloat, ReduceOp::kMax>(a, b, n);
    case ReduceOp::kProduct:
      return reduce16<ToFloat, FromFloat, ReduceOp::kProduct>(a, b, n);
    default:
      return reduce16<ToFloat, FromFloat, ReduceOp::kSum>(a, b, n);
  }
}

template <typename T>
void divide_typed(T* p, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void divide16(uint16_t* p, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) p[i] = FromFloat(ToFloat(p[i]) / static_cast<float>(divisor));
}

}  // namespace

void reduce_into(const void* in, void* inout, int64_t n, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8:
      return reduce_typed<uint8_t>(in, inout, n, op);
    case DataType::kInt8:
      return reduce_typed<int8_t>(in, inout, n, op);
    case DataType::kInt32:
      return reduce_typed<int32_t>(in, inout, n, op);
    case DataType::kInt64:
      return reduce_typed<int64_t>(in, inout, n, op);
    case DataType::kFloat32:
      return reduce_typed<float>(in, inout, n, op);
    case DataType::kFloat64:
      return reduce_typed<double>(in, inout, n, op);
    case DataType::kFloat16:
      return reduce_16bit<half_to_float, float_to_half>(in, inout, n, op);
    case DataType::kBFloat16:
      return reduce_16bit<bfloat16_to_float, float_to_bfloat16>(in, inout, n, op);
  }
}

void divide_in_place(void* data, int64_t n, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kUInt8:
      divide_typed(static_cast<uint8_t*>(data), n, divisor);
      break;
    case DataType::kInt8:
      divide_typed(static_cast<int8_t*>(data), n, divisor);
      break;
    case DataType::kInt32:
      divide_typed(static_cast<int32_t*>(data), n, divisor);
      break;
    case DataType::kInt64:
      divide_typed(static_cast<int64_t*>(data), n, divisor);
      break;
    case DataType::kFloat32:
      divide_typed(static_cast<float*>(data), n, divisor);
      break;
    case DataType::kFloat64:
      divide_typed(static_cast<double*>(data), n, divisor);
      break;
    case DataType::kFloat16:
      divide16<half_to_float, float_to_half>(static_cast<uint16_t*>(data), n, divisor);
      break;
    case DataType::kBFloat16:
      divide16<bfloat16_to_float, float_to_bfloat16>(static_cast<uint16_t*>(data), n, divisor);
      break;
  }
}

}  // namespace ranktime
