// What the multi-rank tests compare against: a buffer of any dtype read and written as doubles,
// each rank's inputs and the exact reduction over the ranks (shared by collectives_test.cc and
// scatter_groups_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ranktime/half.h"
#include "ranktime/ranktime.h"

namespace ranktime_test {

using ranktime::DataType;
using ranktime::ReduceOp;

inline constexpr DataType kAllTypes[] = {
    DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
    DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
    DataType::kFloat32, DataType::kFloat64, DataType::kInt16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};

// A typed buffer that converts to and from double, so one test body covers every dtype.
class Buffer {
 public:
  Buffer(DataType dtype, int64_t n)
      : dtype_(dtype), n_(n), bytes_(n * ranktime::dtype_size(dtype) + 8) {}
  void* data() { return bytes_.data(); }
  int64_t size() const { return n_; }
  void set(int64_t i, double v) {
    uint8_t* p = &bytes_[i * ranktime::dtype_size(dtype_)];
    switch (dtype_) {
      case DataType::kUInt8:
        *p = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        store<int8_t>(p, v);
        break;
      case DataType::kInt16:
        store<int16_t>(p, v);
        break;
      case DataType::kInt32:
        store<int32_t>(p, v);
        break;
      case DataType::kInt64:
        store<int64_t>(p, v);
        break;
      case DataType::kFloat16:
        store<uint16_t>(p, ranktime::float_to_half(static_cast<float>(v)), true);
        break;
      case DataType::kBFloat16:
        store<uint16_t>(p, ranktime::float_to_bfloat16(static_cast<float>(v)), true);
        break;
      case DataType::kFloat32:
        store<float>(p, v);
        break;
      case DataType::kFloat64:
        store<double>(p, v);
        break;
    }
  }
  double get(int64_t i) const {
    const uint8_t* p = &bytes_[i * ranktime::dtype_size(dtype_)];
    switch (dtype_) {
      case DataType::kUInt8:
        return *p;
      case DataType::kInt8:
        return load<int8_t>(p);
      case DataType::kInt16:
        return load<int16_t>(p);
      case DataType::kInt32:
        return load<int32_t>(p);
      case DataType::kInt64:
        return static_cast<double>(load<int64_t>(p));
      case DataType::kFloat16:
        return ranktime::half_to_float(load<uint16_t>(p));
      case DataType::kBFloat16:
        return ranktime::bfloat16_to_float(load<uint16_t>(p));
      case DataType::kFloat32:
        return load<float>(p);
      case DataType::kFloat64:
        return load<double>(p);
    }
    return 0;
  }

 private:
  template <typename T>
  static void store(uint8_t* p, double v, bool raw = false) {
    T t = raw ? static_cast<T>(v) : static_cast<T>(v);
    std::memcpy(p, &t, sizeof(T));
  }
  template <typename T>
  static T load(const uint8_t* p) {
    T t;
    std::memcpy(&t, p, sizeof(T));
    return t;
  }
  DataType dtype_;
  int64_t n_;
  std::vector<uint8_t> bytes_;
};

// Rank r's input at element i: small positive integers (1..4; 1..2 for products), so that every
// reduction over up to 8 ranks is exact in every dtype, int8 included.
inline double input(ReduceOp op, int r, int64_t i) {
  return op == ReduceOp::kProduct ? 1 + (r + i) % 2 : 1 + (r * 7 + i) % 4;
}

// The reference result over `ranks` (a process set's), rounded as the runtime rounds: average
// divides in the tensor's own type.
inline double expected_over(DataType dtype, ReduceOp op, const std::vector<int>& ranks, int64_t i) {
  const int size = static_cast<int>(ranks.size());
  double acc = input(op, ranks[0], i);
  for (int k = 1; k < size; ++k) {
    double x = input(op, ranks[k], i);
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, x);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, x);
        break;
      case ReduceOp::kProduct:
        acc *= x;
        break;
      default:
        acc += x;
        break;
    }
  }
  if (op != ReduceOp::kAverage) return acc;
  switch (dtype) {
    case DataType::kFloat64:
      return acc / size;
    case DataType::kFloat32:
      return static_cast<float>(acc) / size;
    case DataType::kFloat16:
      return ranktime::half_to_float(ranktime::float_to_half(static_cast<float>(acc) / size));
    case DataType::kBFloat16:
      return ranktime::bfloat16_to_float(
          ranktime::float_to_bfloat16(static_cast<float>(acc) / size));
    default:
      return static_cast<double>(static_cast<int64_t>(acc) / size);  // truncates
  }
}

// Over every rank of a job of `size`.
inline double expected(DataType dtype, ReduceOp op, int size, int64_t i) {
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  return expected_over(dtype, op, ranks, i);
}

inline std::string label(DataType dtype, ReduceOp op) {
  return std::string(ranktime::dtype_name(dtype)) + "." + ranktime::reduce_op_name(op);
}

}  // namespace ranktime_test
