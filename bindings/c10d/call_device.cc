// call_device(); see call_device.h.
#include "call_device.h"

#include <c10/util/Exception.h>

#include <ostream>

namespace ranktime::c10d {

// "input", "output 2". Static in TensorPlace's namespace, where TORCH_CHECK's stream finds it.
static std::ostream& operator<<(std::ostream& out, const TensorPlace& t) {
  out << t.what;
  if (t.index >= 0) out << ' ' << t.index;
  return out;
}

c10::Device call_device(const char* call, const std::vector<TensorPlace>& tensors) {
  if (tensors.empty()) return c10::Device(c10::kCPU);
  const TensorPlace& first = tensors.front();
  for (const TensorPlace& t : tensors) {
    TORCH_CHECK(t.device.is_cpu() || t.device.is_cuda(), "ranktime: ", call, ": ", t, " is on ",
                t.device, "; the ranktime backend takes CPU and CUDA tensors");
    TORCH_CHECK(t.device == first.device, "ranktime: ", call,
                ": a call's tensors must all be on one device, but ", first, " is on ",
                first.device, " and ", t, " on ", t.device);
  }
  return first.device;
}

}  // namespace ranktime::c10d
