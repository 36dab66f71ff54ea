// ranktime-synth: a synthetic data-parallel training loop. Each step submits every gradient of a
// workload in reverse order (as backward produces them), waits for all, and checks the results.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#if RANKTIME_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "ranktime/ranktime.h"
#include "workload.h"

namespace {

using ranktime::DataType;

// The gradient value of element i of tensor t on rank r: small integers, so every sum over up
// to 32 ranks is exact in every dtype (int8 and float16 included).
int grad_value(int r, int64_t t, int64_t i) {
  return (r % 3 + 1) * static_cast<int>((i + t) % 3 + 1);
}

// Fills tensor t with this rank's gradient. float32 (the common case) is written directly.
void fill(std::vector<uint8_t>& buf, DataType dtype, int rank, int64_t t, int64_t n) {
  if (dtype == DataType::kFloat32) {
    auto* f = reinterpret_cast<float*>(buf.data());
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(grad_value(rank, t, i));
    return;
  }
  const size_t es = ranktime::dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i)
    ranktime::examples::set_element(grad_value(rank, t, i), &buf[i * es], dtype);
}

// Returns the first wrong element's index, or -1.
int64_t verify(const std::vector<uint8_t>& buf, DataType dtype, int size, int64_t t, int64_t n,
               double* got, double* want) {
  int rank_sum = 0;
  for (int r = 0; r < size; ++r) rank_sum += r % 3 + 1;
  const size_t es = ranktime::dtype_size(dtype);
  for (int64_t i = 0; i < n; ++i) {
    double expected = static_cast<double>(rank_sum) * ((i + t) % 3 + 1);
    double v = ranktime::examples::element(&buf[i * es], dtype);
    if (v != expected) {
      *got = v;
      *want = expected;
      return i;
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ranktime-synth: synthetic data-parallel training steps over ranktime"};
  std::string workload_path;
  int steps = 10, warmup = 1, slow_rank = -1, small_tensors = 0, delay_after = 0;
  int64_t small_elements = 256;
  double delay_ms = 0, compute_us = 0, scale = 1;
  std::string dtype_name = "float32", device = "cpu", slow_region;
  bool no_verify = false, quiet = false, no_barrier = false;
  app.add_option("--workload", workload_path, "workload file: name<TAB>shape<TAB>elements");
  app.add_option("--small-tensors", small_tensors, "instead of a file: this many small tensors");
  app.add_option("--small-elements", small_elements, "elements per small tensor")
      ->capture_default_str();
  app.add_option("--scale", scale,
                 "every tensor's elements times this (at least one each, shape flattened): the "
                 "workload's tensors at a fraction of its bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", steps, "training steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--dtype", dtype_name, "uint8 int8 int32 int64 float16 bfloat16 float32 float64")
      ->capture_default_str();
  app.add_option("--device", device, "cpu or gpu")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  app.add_option("--slow-rank", slow_rank,
                 "this rank sleeps --delay-ms before each step's submissions");
  app.add_option("--delay-ms", delay_ms, "the slow rank's delay per step")->capture_default_str();
  app.add_option("--slow-region", slow_region,
                 "every rank marks each step's regions: data, forward, backward (the submissions "
                 "and the waits), optimizer (the check of the results); the slow rank's "
                 "--delay-ms sleep runs inside the region of this name (any other name: a region "
                 "of its own, between data and forward)");
  app.add_option("--delay-after-tensors", delay_after,
                 "the slow rank sleeps after submitting this many tensors (inside backward: late "
                 "for the rest only) instead of before the first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  int slow_from_step = 0;
  app.add_option("--slow-from-step", slow_from_step,
                 "the slow rank sleeps from this step on (steps as marked, warmup included): a "
                 "slowdown that starts while the job runs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--compute-us", compute_us, "simulated compute between two submissions")
      ->capture_default_str();
  app.add_flag("--no-verify", no_verify, "skip checking the results");
  app.add_flag("--quiet", quiet, "print only the summary line");
  app.add_flag("--no-barrier", no_barrier, "do not line the ranks up before each step");
  CLI11_PARSE(app, argc, argv);

  auto dtype = ranktime::parse_dtype(dtype_name);
  if (!dtype) {
    std::fprintf(stderr, "ranktime-synth: unknown --dtype '%s'\n", dtype_name.c_str());
    return 2;
  }
#if !RANKTIME_WITH_CUDA
  if (device != "cpu") {
    std::fprintf(
        stderr,
        "ranktime-synth: --device gpu needs ranktime's GPU path, which is not built here\n");
    return 2;
  }
#endif
  std::vector<ranktime::examples::WorkloadTensor> tensors;
  try {
    if (small_tensors > 0) {
      tensors = ranktime::examples::synthetic_workload(small_tensors, small_elements);
    } else if (!workload_path.empty()) {
      tensors = ranktime::examples::read_workload(workload_path);
    } else {
      std::fprintf(stderr, "ranktime-synth: give --workload FILE or --small-tensors N\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ranktime-synth: %s\n", e.what());
    return 2;
  }
  if (scale != 1) ranktime::examples::scale_workload(&tensors, scale);

  try {
    ranktime::init();
  } catch (const ranktime::Error& e) {
    std::fprintf(stderr, "ranktime-synth: %s\n", e.what());
    return 2;
  }
  const int rank = ranktime::rank(), size = ranktime::size();
  const size_t es = ranktime::dtype_size(*dtype);
  std::vector<std::vector<uint8_t>> buffers(tensors.size());
  int64_t total_bytes = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    buffers[t].resize(tensors[t].elements * es);
    total_bytes += tensors[t].elements * static_cast<int64_t>(es);
  }

  // --device gpu: each gradient lives on this rank's GPU (local rank modulo the GPUs present);
  // the host buffers hold the fill and the results checked.
  int gpu = ranktime::kCpuDevice;
  std::vector<void*> device_buffers(tensors.size(), nullptr);
#if RANKTIME_WITH_CUDA
  if (device == "gpu") {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "ranktime-synth: --device gpu but no CUDA device is available\n");
      ranktime::shutdown();
      return 2;
    }
    gpu = ranktime::local_rank() % count;
    cudaSetDevice(gpu);
    for (size_t t = 0; t < tensors.size(); ++t) cudaMalloc(&device_buffers[t], buffers[t].size());
  }
#endif
  auto to_device = [&](size_t t) {
#if RANKTIME_WITH_CUDA
    if (gpu != ranktime::kCpuDevice) {
      cudaMemcpy(device_buffers[t], buffers[t].data(), buffers[t].size(), cudaMemcpyHostToDevice);
    }
#endif
    (void)t;
  };
  auto to_host = [&](size_t t) {
#if RANKTIME_WITH_CUDA
    if (gpu != ranktime::kCpuDevice) {
      cudaMemcpy(buffers[t].data(), device_buffers[t], buffers[t].size(), cudaMemcpyDeviceToHost);
    }
#endif
    (void)t;
  };

  std::vector<double> step_ms;
  std::vector<ranktime::Handle> handles(tensors.size());
  int failures = 0;
  for (int step = 0; step < warmup + steps && failures == 0; ++step) {
    ranktime::mark_step(step);
    for (size_t t = 0; t < tensors.size(); ++t) {
      fill(buffers[t], *dtype, rank, t, tensors[t].elements);
      to_device(t);
    }
    // Untimed: every rank starts the step together, so the only skew is the slow rank's delay
    // (filling 100 MB takes uneven time when ranks share cores).
    if (!no_barrier) ranktime::barrier();
    // With --slow-region every rank marks the step's regions, and the slow rank sleeps in one.
    const bool regions = !slow_region.empty();
    // With --delay-after-tensors the sleep is inside backward instead, after that many tensors.
    const bool slow = rank == slow_rank && delay_ms > 0 && step >= slow_from_step;
    const auto slow_down = [&] {
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000)));
    };
    const auto slow_delay = [&](const std::string& region) {
      if (slow && delay_after == 0 && region == slow_region) slow_down();
    };
    std::optional<ranktime::Region> region;
    const auto enter = [&](const std::string& name) {
      region.reset();
      if (!regions) return;
      region.emplace(name);
      slow_delay(name);
    };
    if (regions) {
      enter("data");
      if (slow_region != "data" && slow_region != "forward" && slow_region != "backward" &&
          slow_region != "optimizer") {
        enter(slow_region);
      }
      enter("forward");
    } else {
      slow_delay(slow_region);  // no regions: the sleep before the submissions, as always
    }
    auto t0 = std::chrono::steady_clock::now();
    enter("backward");
    for (size_t k = 0; k < tensors.size(); ++k) {
      size_t t = tensors.size() - 1 - k;  // backward: last layer first
      if (slow && delay_after > 0 && k == static_cast<size_t>(delay_after)) slow_down();
      if (compute_us > 0 && k > 0) {
        std::this_thread::sleep_for(
            std::chrono::nanoseconds(static_cast<int64_t>(compute_us * 1000)));
      }
      void* data = gpu == ranktime::kCpuDevice ? buffers[t].data() : device_buffers[t];
      ranktime::TensorView view{data, *dtype, tensors[t].shape, gpu};
      handles[t] = ranktime::allreduce_async(view, "grad." + tensors[t].name);
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      ranktime::Status s = handles[t].wait();
      if (!s.ok()) {
        std::fprintf(stderr, "ranktime-synth rank %d: %s\n", rank, s.message().c_str());
        ++failures;
      }
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step >= warmup) {
      step_ms.push_back(ms);
      if (!quiet && rank == 0) std::printf("step %d: %.3f ms\n", step - warmup, ms);
    }
    enter("optimizer");
    if (!no_verify && failures == 0) {
      for (size_t t = 0; t < tensors.size(); ++t) {
        to_host(t);
        double got = 0, want = 0;
        int64_t bad = verify(buffers[t], *dtype, size, t, tensors[t].elements, &got, &want);
        if (bad >= 0) {
          std::fprintf(
              stderr,
              "ranktime-synth rank %d: step %d tensor '%s' element %lld is %g, expected %g\n", rank,
              step, tensors[t].name.c_str(), static_cast<long long>(bad), got, want);
          ++failures;
          break;
        }
      }
    }
  }
  // Rank 0's live what-if cost per step of each rank (the mean over the last 100 steps).
  std::string live_cost;
  for (const ranktime::RankLateness& s : ranktime::lateness()) {
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.3f", s.cost_per_step_us / 1e3);
    live_cost += (live_cost.empty() ? "" : ",") + std::string(ms);
  }
  ranktime::shutdown();
#if RANKTIME_WITH_CUDA
  for (void* p : device_buffers) cudaFree(p);
#endif
  if (rank == 0 && !step_ms.empty()) {
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    double mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
    std::printf(
        "ranktime-synth: ranks=%d tensors=%zu bytes=%lld dtype=%s steps=%zu median_step_ms=%.3f "
        "mean_step_ms=%.3f min_step_ms=%.3f live_cost_ms_per_step=%s verify=%s\n",
        size, tensors.size(), static_cast<long long>(total_bytes), dtype_name.c_str(),
        step_ms.size(), sorted[sorted.size() / 2], mean, sorted.front(), live_cost.c_str(),
        no_verify ? "skipped" : (failures ? "FAILED" : "ok"));
  }
  return failures ? 1 : 0;
}
