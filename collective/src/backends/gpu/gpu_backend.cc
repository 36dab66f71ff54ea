// The GPU path's seam: device sets by key, completions handed to the background loop
// (see gpu_backend.h).
#include "backends/gpu/gpu_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "backends/gpu/device_set.h"

namespace ranktime::gpu {

GpuOptions gpu_options(const Config& config) {
  GpuOptions o;
  o.hierarchical_allreduce = config.hierarchical_allreduce;
  o.test_fail_local = config.test_fail_local;
  o.spin = config.spin();
  return o;
}

bool GpuBackend::device_available() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

GpuBackend::GpuBackend(MPI_Comm comm, const Clock* clock, const Config& config,
                       std::function<void()> wake)
    : GpuBackend(comm, clock, gpu_options(config), std::move(wake)) {}

GpuBackend::GpuBackend(MPI_Comm comm, const Clock* clock, const GpuOptions& options,
                       std::function<void()> wake)
    : comm_(comm), clock_(clock), options_(options), wake_(std::move(wake)) {}

GpuBackend::~GpuBackend() {
  drain();
  sets_.clear();
}

void GpuBackend::enqueue(const Response& response, const std::vector<TensorEntry*>& entries,
                         int64_t arrival_ns) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++enqueued_;
  }
  const bool moves_data = response.op == OpType::kAllreduce || response.op == OpType::kBroadcast ||
                          returns_host_output(response.op);
  if (!moves_data || entries.empty()) {
    GpuCompletion c;
    c.response = response;
    c.entries = entries;
    c.arrival_ns = c.start_ns = c.end_ns = arrival_ns;
    deliver(std::move(c));
    return;
  }
  auto& set = sets_[response.device];
  if (!set) {
    // First response on this device set: every rank gets here at the same point of the response
    // stream, so the set-up's MPI collectives line up. A joined rank's zeros say no device of
    // their own (they carry the response's, rank 0's ordinal); its real tensors do.
    auto own = std::find_if(entries.begin(), entries.end(),
                            [](const TensorEntry* e) { return !e->join_zeros; });
    const int device = own != entries.end() ? (*own)->view.device : entries[0]->view.device;
    set = std::make_unique<DeviceSet>(comm_, device, clock_, options_,
                                      [this](GpuCompletion&& c) { deliver(std::move(c)); });
  }
  set->enqueue(response, entries, arrival_ns);
}

void GpuBackend::deliver(GpuCompletion&& completion) {
  completion.per_tensor = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(completion));
    ++delivered_;
  }
  delivered_cv_.notify_all();
  if (wake_) wake_();
}

void GpuBackend::take_completions(const std::function<void(Completion&)>& finish) {
  taking_.clear();
  take_completions(&taking_);
  for (GpuCompletion& c : taking_) finish(c);
  taking_.clear();
}

void GpuBackend::take_completions(std::vector<GpuCompletion>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  taken_ += ready_.size();
  for (GpuCompletion& c : ready_) out->push_back(std::move(c));
  ready_.clear();
}

size_t GpuBackend::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enqueued_ - taken_;
}

void GpuBackend::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  delivered_cv_.wait(lock, [&] { return delivered_ == enqueued_; });
}

std::optional<GpuMode> GpuBackend::mode(int device) const {
  auto it = sets_.find(device);
  if (it == sets_.end() || !it->second->error().ok()) return std::nullopt;
  return it->second->mode();
}

}  // namespace ranktime::gpu
