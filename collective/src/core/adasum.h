// Adasum, Horovod's adaptive summation (ReduceOp::kAdasum), on host memory and without MPI: the
// pairwise step that the MPI backend applies at each level of its recursive doubling, so unit
// tests reach the formula directly.
//
// For gradients a and b (a from the lower ranks), per tensor:
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// with a coefficient of 1 where that norm^2 is below sqrt(DBL_MIN) (horovod/common/ops/adasum/
// adasum.h, FusedPairwiseReduceWithComm). Parallel gradients average; orthogonal ones add. Dot
// products and norms accumulate in double; each element is combined in double and rounded back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/message.h"
#include "ranktime/ranktime.h"

namespace ranktime {

// Whether Adasum reduces this dtype (Horovod's: float16, float32, float64; here bfloat16 too).
bool adasum_supports(DataType dtype);

// Why `op` on `view` over `size` ranks cannot reduce with Adasum, or "" when it can: an
// allreduce of a floating-point tensor in host memory, over a power of two ranks (as Horovod's
// CPU Adasum).
std::string adasum_refusal(OpType op, const TensorView& view, int size);

// The coefficients of a and b, from a.b, |a|^2 and |b|^2.
struct AdasumCoefficients {
  double a = 1;
  double b = 1;
};
AdasumCoefficients adasum_coefficients(double dot, double anormsq, double bnormsq);

// out = adasum(left, right) for each tensor of a fused buffer: counts[i] elements of tensor i,
// back to back. out may be left or right.
void adasum_combine(const void* left, const void* right, void* out,
                    const std::vector<int64_t>& counts, DataType dtype);

}  // namespace ranktime
