// Times work on a CUDA stream between two events of our own: the GPU timing tests' independent
// measurement and bench/gpu_bench's copy figure. CUDA runtime only (no GoogleTest, no MPI).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace ranktime::gpu_test {

// The median, in nanoseconds, of `reps` runs of enqueue() on `stream`, each between two events,
// after `warmups` untimed runs. before() runs ahead of every run (a barrier, say), outside the
// events.
inline double event_timed_median_ns(cudaStream_t stream, int reps, int warmups,
                                    const std::function<void()>& enqueue,
                                    const std::function<void()>& before = nullptr) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> t;
  for (int k = 0; k < warmups + reps; ++k) {
    if (before) before();
    cudaEventRecord(a, stream);
    enqueue();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (k >= warmups) t.push_back(static_cast<double>(ms) * 1e6);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (t.empty()) return 0;
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace ranktime::gpu_test
