// Picks the device backend (see factory.h).
#include "backends/factory.h"

#if RANKTIME_WITH_CUDA
#include <nvtx3/nvToolsExt.h>

#include "backends/gpu/gpu_backend.h"
#endif

namespace ranktime {

std::unique_ptr<Backend> make_device_backend(MPI_Comm comm, const Clock* clock,
                                             const Config& config, std::function<void()> wake) {
#if RANKTIME_WITH_CUDA
  if (gpu::GpuBackend::device_available()) {
    return std::make_unique<gpu::GpuBackend>(comm, clock, config, std::move(wake));
  }
#else
  (void)comm, (void)clock, (void)config, (void)wake;
#endif
  return nullptr;
}

std::string check_device(int device) {
#if RANKTIME_WITH_CUDA
  static const bool has_gpu = gpu::GpuBackend::device_available();
  if (!has_gpu || device < 0) {
    return "device tensor (device " + std::to_string(device) +
           ") but no CUDA device is available on this host";
  }
  return "";
#else
  return "device tensors (device " + std::to_string(device) +
         ") need ranktime's GPU path, which this build does not have";
#endif
}

void device_range_begin(const std::string& name) {
#if RANKTIME_WITH_CUDA
  nvtxRangePushA(name.c_str());  // a no-op unless a profiler is attached
#else
  (void)name;
#endif
}

void device_range_end() {
#if RANKTIME_WITH_CUDA
  nvtxRangePop();
#endif
}

}  // namespace ranktime
