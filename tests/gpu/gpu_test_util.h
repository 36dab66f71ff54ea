// Helpers for the GPU test binaries: device detection (skip with "no CUDA device"), device
// buffers, and exact host references for every dtype.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/half.h"
#include "ranktime/ranktime.h"

namespace ranktime::gpu_test {

// Devices visible to this process (0 on error: no driver, no device).
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

#define RANKTIME_SKIP_WITHOUT_GPU()                                                  \
  do {                                                                               \
    if (::ranktime::gpu_test::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    const cudaError_t cuda_ok_rc_ = (call);                                                  \
    ASSERT_EQ(cuda_ok_rc_, cudaSuccess) << #call << ": " << cudaGetErrorString(cuda_ok_rc_); \
  } while (0)

// Device memory holding `bytes`, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&data_, bytes == 0 ? 1 : bytes) != cudaSuccess) data_ = nullptr;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Returns once the data is on the device: a cudaMemcpy from pageable memory may return before
  // its DMA lands, and the runtime's non-blocking streams do not wait for the legacy stream (a
  // tensor submitted without a ready event must be complete).
  void upload(const std::vector<uint8_t>& host) const {
    if (!host.empty()) cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> host(bytes_);
    if (bytes_ > 0) cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// Small integers (and quarters of them) are exact in every dtype, float16 and bfloat16 included,
// so results compare exactly against the host reference.
// Holds `stream` for `ms` milliseconds: work queued after it runs that much later, whatever else
// shares the GPU (a busy kernel races other processes' work on a shared, time-sliced GPU).
inline cudaError_t delay_stream(cudaStream_t stream, int ms) {
  return cudaLaunchHostFunc(
      stream,
      [](void* p) {
        const auto delay = static_cast<int>(reinterpret_cast<intptr_t>(p));
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      },
      reinterpret_cast<void*>(static_cast<intptr_t>(ms)));
}

inline void encode(double v, DataType dtype, uint8_t* out) {
  switch (dtype) {
    case DataType::kUInt8: {
      uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(out, &x, 1);
      break;
    }
    case DataType::kInt8: {
      int8_t x = static_cast<int8_t>(v);
      std::memcpy(out, &x, 1);
      break;
    }
    case DataType::kInt16: {  // host tensors only (NCCL has no 16-bit integers)
      int16_t x = static_cast<int16_t>(v);
      std::memcpy(out, &x, 2);
      break;
    }
    case DataType::kInt32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    case DataType::kInt64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(out, &x, 8);
      break;
    }
    case DataType::kFloat16: {
      uint16_t x = float_to_half(static_cast<float>(v));
      std::memcpy(out, &x, 2);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t x = float_to_bfloat16(static_cast<float>(v));
      std::memcpy(out, &x, 2);
      break;
    }
    case DataType::kFloat32: {
      float x = static_cast<float>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    case DataType::kFloat64:
      std::memcpy(out, &v, 8);
      break;
  }
}

inline double decode(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kUInt8:
      return *p;
    case DataType::kInt8:
      return static_cast<int8_t>(*p);
    case DataType::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case DataType::kFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return half_to_float(x);
    }
    case DataType::kBFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return bfloat16_to_float(x);
    }
    case DataType::kFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kFloat64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
  }
  return 0;
}

inline bool is_integer(DataType d) {
  return d == DataType::kUInt8 || d == DataType::kInt8 || d == DataType::kInt16 ||
         d == DataType::kInt32 || d == DataType::kInt64;
}

// Rank `rank`'s element `i` of tensor `t`: 1..11 (1..2 for products, so that four ranks' product
// stays inside int8).
inline double input_value(int rank, int t, int64_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return 1.0 + static_cast<double>((i + t + rank) % 2);
  return 1.0 + static_cast<double>((i * 7 + t * 3 + rank * 5) % 11);
}

// What every rank holds afterwards.
inline double expected_value(int size, int t, int64_t i, ReduceOp op, DataType dtype) {
  double acc = input_value(0, t, i, op);
  for (int r = 1; r < size; ++r) {
    const double v = input_value(r, t, i, op);
    switch (op) {
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = is_integer(dtype) ? std::trunc(acc / size) : acc / size;
  return acc;
}

inline std::vector<uint8_t> make_input(int rank, int t, int64_t n, ReduceOp op, DataType dtype) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i)
    encode(input_value(rank, t, i, op), dtype, &bytes[i * dtype_size(dtype)]);
  return bytes;
}

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> d = {
      DataType::kUInt8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
      DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  return d;
}

inline const std::vector<ReduceOp>& all_reductions() {
  static const std::vector<ReduceOp> r = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                          ReduceOp::kMax, ReduceOp::kProduct};
  return r;
}

}  // namespace ranktime::gpu_test
