// The device backend this build and this host have: the GPU backend (backends/gpu/) when ranktime
// is built with CUDA and the host has a device, none otherwise. The only place outside
// backends/gpu/ that knows whether the GPU path is built.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "core/clock.h"
#include "core/config.h"

namespace ranktime {

// Null when there is no GPU backend. `comm`: the runtime's data communicator.
std::unique_ptr<Backend> make_device_backend(MPI_Comm comm, const Clock* clock,
                                             const Config& config, std::function<void()> wake);

// "" when tensors on `device` can run here, else why not.
std::string check_device(int device);

// A named range on the calling thread for GPU profilers (NVTX: Nsight Systems shows it), around
// a region (ranktime::region_begin/end); nothing without the GPU path. Ranges nest per thread.
void device_range_begin(const std::string& name);
void device_range_end();

}  // namespace ranktime
