// Adasum's pairwise step (see adasum.h).
#include "core/adasum.h"

#include <cfloat>
#include <cmath>

#include "ranktime/half.h"

namespace ranktime {
namespace {

// Element access for each dtype, as double.
template <typename T>
struct Plain {
  static double get(const void* p, int64_t i) { return static_cast<const T*>(p)[i]; }
  static void set(void* p, int64_t i, double x) { static_cast<T*>(p)[i] = static_cast<T>(x); }
};
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct Half {
  static double get(const void* p, int64_t i) {
    return ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void set(void* p, int64_t i, double x) {
    static_cast<uint16_t*>(p)[i] = FromFloat(static_cast<float>(x));
  }
};

template <typename E>
void combine(const void* left, const void* right, void* out, const std::vector<int64_t>& counts) {
  int64_t at = 0;
  for (const int64_t n : counts) {
    double dot = 0, anormsq = 0, bnormsq = 0;
    for (int64_t i = at; i < at + n; ++i) {
      const double a = E::get(left, i), b = E::get(right, i);
      dot += a * b;
      anormsq += a * a;
      bnormsq += b * b;
    }
    const AdasumCoefficients c = adasum_coefficients(dot, anormsq, bnormsq);
    for (int64_t i = at; i < at + n; ++i)
      E::set(out, i, c.a * E::get(left, i) + c.b * E::get(right, i));
    at += n;
  }
}

}  // namespace

bool adasum_supports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

std::string adasum_refusal(OpType op, const TensorView& view, int size) {
  if (op != OpType::kAllreduce)
    return std::string("Adasum reduces allreduces only, not ") + op_type_name(op);
  if (!adasum_supports(view.dtype)) {
    return std::string("Adasum reduces float16, bfloat16, float32 and float64 tensors, not ") +
           dtype_name(view.dtype);
  }
  if (view.device != kCpuDevice) {
    return "Adasum runs on host memory only, and this tensor is on CUDA device " +
           std::to_string(view.device) + ": move it to the CPU";
  }
  if (size < 1 || (size & (size - 1)) != 0) {
    return "Adasum needs a power of two ranks (as Horovod's), and there are " +
           std::to_string(size);
  }
  return "";
}

AdasumCoefficients adasum_coefficients(double dot, double anormsq, double bnormsq) {
  static const double kTiny = std::sqrt(DBL_MIN);  // Horovod's sqrt_double_min
  AdasumCoefficients c;
  if (anormsq >= kTiny) c.a = 1.0 - dot / anormsq * 0.5;
  if (bnormsq >= kTiny) c.b = 1.0 - dot / bnormsq * 0.5;
  return c;
}

void adasum_combine(const void* left, const void* right, void* out,
                    const std::vector<int64_t>& counts, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return combine<Half<half_to_float, float_to_half>>(left, right, out, counts);
    case DataType::kBFloat16:
      return combine<Half<bfloat16_to_float, float_to_bfloat16>>(left, right, out, counts);
    case DataType::kFloat32:
      return combine<Plain<float>>(left, right, out, counts);
    case DataType::kFloat64:
      return combine<Plain<double>>(left, right, out, counts);
    default:
      return;  // refused before: adasum_supports()
  }
}

}  // namespace ranktime
