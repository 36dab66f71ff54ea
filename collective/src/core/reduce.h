// The arithmetic of reductions, on host memory and without MPI: element-wise combining of two
// buffers (16-bit floats widened to float and rounded back per step), and the division that turns
// a sum into an average. The MPI backend's custom ops and the in-process tests' thread backend
// both use these, so tests reach them directly.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ranktime/half.h"
#include "ranktime/ranktime.h"

namespace ranktime {

// inout[i] = inout[i] (op) in[i] for 16-bit floats: widen to float, combine, round back (per
// element, so the result equals what a 16-bit accumulator would hold after each pairwise step).
// kAverage combines as kSum (the division comes after the whole reduction).
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), ReduceOp Op>
void reduce16(const uint16_t* in, uint16_t* inout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = ToFloat(in[i]), y = ToFloat(inout[i]), r;
    switch (Op) {
      case ReduceOp::kMin:
        r = std::min(x, y);
        break;
      case ReduceOp::kMax:
        r = std::max(x, y);
        break;
      case ReduceOp::kProduct:
        r = x * y;
        break;
      default:
        r = x + y;
        break;
    }
    inout[i] = FromFloat(r);
  }
}

// inout[i] = inout[i] (op) in[i] for n elements of any dtype (kAverage combines as kSum).
void reduce_into(const void* in, void* inout, int64_t n, DataType dtype, ReduceOp op);

// Divides n elements of `dtype` by `divisor` in place (average = sum / size; integer types
// truncate toward zero).
void divide_in_place(void* data, int64_t n, DataType dtype, int divisor);

}  // namespace ranktime
