// Picks the device backend (see factory.h).
#include "backends/factory.h"

#if RANKTIME_WITH_CUDA
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

}  // namespace ranktime
