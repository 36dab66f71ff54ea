// GPU path benchmarks, on every rank under mpirun with one GPU per rank (device = local rank):
//   1. a 256 MiB allreduce through ranktime vs raw ncclAllReduce       (target: >= 0.97 of raw)
//   2. the ResNet-50 gradient set through ranktime vs one raw ncclAllReduce over a pre-packed
//      buffer of the same bytes                                          (target: <= 1.15x)
//   3. the batched fusion copy (ResNet-50 layout) vs one device-to-device cudaMemcpy of the same
//      bytes, as a fraction of the latter's bandwidth
//   4. timeline on/off step-time ratio on the ResNet-50 set, alternated rounds (target: <= 1.02)
//   5. one small tensor's synchronous allreduce (256 floats), against a raw ncclAllReduce and
//      stream synchronisation of the same tensor                          (target: <= 15 us)
// --timeline PATH keeps the timeline of figure 4's "on" rounds (each phase's time, for profiling
// with `ranktime summary`).
// Prints one table on rank 0. Figures 1, 2 and 4 need the runtime to route device tensors to the
// GPU backend; figure 3 calls the backend's copy directly.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backends/gpu/device_fusion.h"
#include "backends/gpu/stream_resources.h"
#include "bench_util.h"
#include "cuda_event_timing.h"
#include "ranktime/ranktime.h"
#include "workload.h"

namespace {

using ranktime::bench::median;
using ranktime::bench::now_s;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, cudaGetErrorString(rc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void check(const ranktime::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", s.message().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Runs fn() `reps` times in lockstep; the slowest rank's time per repetition (median).
double time_median(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_s();
    fn();
    double dt = now_s() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(worst);
  }
  return median(t);
}

struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(size_t bytes) {
    check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  }
  ~DeviceMemory() { cudaFree(p); }
};

ranktime::TensorView device_view(void* p, int64_t elements, int device) {
  ranktime::TensorView v;
  v.data = p;
  v.dtype = ranktime::DataType::kFloat32;
  v.shape = {elements};
  v.device = device;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ranktime GPU benchmarks");
  std::string workload = "examples/workloads/resnet50.tsv";
  int reps = 20;
  double big_mib = 256;
  std::string kept_timeline;
  app.add_option("--workload", workload, "gradient set (name<TAB>shape<TAB>elements)");
  app.add_option("--reps", reps, "repetitions per figure (median reported)");
  app.add_option("--size-mib", big_mib, "size of the large allreduce");
  app.add_option("--timeline", kept_timeline, "keep figure 4's timeline at this path");
  CLI11_PARSE(app, argc, argv);
  // Read before MPI starts (a wrong path is one message and exit status 2).
  const auto set = ranktime::examples::read_workload_or_exit(workload, "gpu_bench");

  ranktime::init();
  const int rank = ranktime::rank(), size = ranktime::size();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (rank == 0) std::printf("gpu_bench: no CUDA device\n");
    ranktime::shutdown();
    return 0;
  }
  const int device = ranktime::local_rank() % devices;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // NCCL refuses two ranks on one GPU: the raw baselines need one GPU per rank.
  int shared = ranktime::local_size() > devices ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

  ncclComm_t comm = nullptr;
  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (!shared) {
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&comm, size, id, rank) != ncclSuccess) comm = nullptr;
  }
  // At one rank NCCL's in-place allreduce moves nothing: a ratio to it would only show ranktime's
  // own overhead (negotiation, and for a fused set the copies in and out).
  const char* no_ratio = shared ? "n/a (shared GPU)" : "n/a (1 rank: raw moves nothing)";
  const bool ratio = comm != nullptr && size > 1;
  auto raw_allreduce = [&](void* p, size_t n) {
    ncclAllReduce(p, p, n, ncclFloat32, ncclSum, comm, stream);
    cudaStreamSynchronize(stream);
  };

  struct Row {
    std::string figure;
    double ours_ms, raw_ms;
    std::string ratio, target;
  };
  std::vector<Row> rows;
  char buf[64];

  // 1. Large allreduce.
  {
    const size_t n = static_cast<size_t>(big_mib * (1 << 20)) / 4;
    DeviceMemory big(n * 4);
    cudaMemset(big.p, 0, n * 4);
    cudaDeviceSynchronize();
    auto ours = [&] {
      check(ranktime::allreduce_async(device_view(big.p, n, device), "bench.big").wait());
    };
    ours();
    const double t_ours = time_median(reps, ours);
    double t_raw = 0;
    if (comm) {
      raw_allreduce(big.p, n);
      t_raw = time_median(reps, [&] { raw_allreduce(big.p, n); });
    }
    std::snprintf(buf, sizeof(buf), "%.3f of raw", t_raw > 0 ? t_raw / t_ours : 0);
    rows.push_back({std::to_string(static_cast<int>(big_mib)) + " MiB allreduce", t_ours * 1e3,
                    t_raw * 1e3, ratio ? buf : no_ratio, ">= 0.97"});
  }

  // 2 and 4. The gradient set.
  size_t total = 0;
  std::vector<std::unique_ptr<DeviceMemory>> grads;
  for (const auto& t : set) {
    grads.push_back(std::make_unique<DeviceMemory>(t.elements * 4));
    cudaMemset(grads.back()->p, 0, t.elements * 4);
    total += t.elements;
  }
  cudaDeviceSynchronize();
  auto step = [&] {
    std::vector<ranktime::Handle> handles;
    for (size_t k = set.size(); k-- > 0;) {
      handles.push_back(ranktime::allreduce_async(device_view(grads[k]->p, set[k].elements, device),
                                                  set[k].name, ranktime::ReduceOp::kAverage));
    }
    for (auto& h : handles) check(h.wait());
  };
  for (int k = 0; k < 3; ++k) step();
  const double t_step = time_median(reps, step);
  {
    DeviceMemory packed(total * 4);
    double t_raw = 0;
    if (comm) {
      raw_allreduce(packed.p, total);
      t_raw = time_median(reps, [&] { raw_allreduce(packed.p, total); });
    }
    std::snprintf(buf, sizeof(buf), "%.3fx raw", t_raw > 0 ? t_step / t_raw : 0);
    rows.push_back({"ResNet-50 set (" + std::to_string(set.size()) + " tensors)", t_step * 1e3,
                    t_raw * 1e3, ratio ? buf : no_ratio, "<= 1.15x"});
  }

  // 3. Batched fusion copy vs one device-to-device copy of the same bytes.
  {
    std::vector<size_t> sizes;
    std::vector<const void*> srcs;
    for (size_t k = 0; k < set.size(); ++k) {
      sizes.push_back(set[k].elements * 4);
      srcs.push_back(grads[k]->p);
    }
    const ranktime::gpu::FusionLayout layout = ranktime::gpu::plan_device_fusion(sizes);
    DeviceMemory fusion(layout.bytes), flat(total * 4);
    const ranktime::gpu::CopyBatch batch = ranktime::gpu::pack_copies(layout, srcs, fusion.p);
    auto timed = [&](const std::function<void()>& enqueue) {  // seconds
      return ranktime::gpu_test::event_timed_median_ns(stream, reps, 2, enqueue) * 1e-9;
    };
    const double t_batch =
        timed([&] { check_cuda(ranktime::gpu::batched_copy(batch, stream), "batched_copy"); });
    const double t_one = timed(
        [&] { cudaMemcpyAsync(fusion.p, flat.p, total * 4, cudaMemcpyDeviceToDevice, stream); });
    std::snprintf(buf, sizeof(buf), "%.2f of memcpy BW", t_one / t_batch);
    rows.push_back({"fusion copy (" + std::to_string(batch.count()) + " copies, " +
                        std::to_string(total * 4 >> 20) + " MiB)",
                    t_batch * 1e3, t_one * 1e3, buf, "(report)"});
  }

  // 4. Timeline on/off: rounds alternated, so that a drift of the machine meets both sides.
  {
    const int rounds = 4;
    std::vector<double> on, off;
    for (int k = 0; k < rounds; ++k) {
      // A file per round; the last round's is the one --timeline keeps.
      const bool keep = k == rounds - 1 && !kept_timeline.empty();
      const std::string path = keep ? kept_timeline
                                    : "/tmp/ranktime_gpu_bench_" + std::to_string(getpid()) + "." +
                                          std::to_string(k) + ".json";
      off.push_back(time_median(reps, step));
      check(ranktime::start_timeline(path));
      on.push_back(time_median(reps, step));
      check(ranktime::stop_timeline());
      if (rank == 0 && !keep) std::remove(path.c_str());
    }
    std::snprintf(buf, sizeof(buf), "%.3f on/off", median(on) / median(off));
    rows.push_back({"timeline on vs off (ResNet-50 set, " + std::to_string(rounds) + " rounds)",
                    median(on) * 1e3, median(off) * 1e3, buf, "<= 1.02"});
  }

  // 5. One small tensor, synchronously: ranktime's own cost per operation.
  {
    const int64_t n = 256;
    DeviceMemory one(n * 4);
    cudaMemset(one.p, 0, n * 4);
    cudaDeviceSynchronize();
    auto ours = [&] {
      check(ranktime::allreduce_async(device_view(one.p, n, device), "bench.one").wait());
    };
    for (int k = 0; k < 20; ++k) ours();
    const double t_ours = time_median(reps * 10, ours);
    double t_raw = 0;
    if (comm) {
      raw_allreduce(one.p, n);
      t_raw = time_median(reps * 10, [&] { raw_allreduce(one.p, n); });
    }
    std::snprintf(buf, sizeof(buf), "%.1f us", t_ours * 1e6);
    rows.push_back(
        {"one tensor (256 floats), synchronous", t_ours * 1e3, t_raw * 1e3, buf, "<= 15 us"});
  }

  if (rank == 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    std::printf("ranktime GPU benchmarks: %d ranks, %s, median of %d\n", size, prop.name, reps);
    std::printf("%-42s %12s %12s %20s %10s\n", "figure", "ranktime ms", "baseline ms", "result",
                "target");
    for (const Row& r : rows) {
      std::printf("%-42s %12.3f %12.3f %20s %10s\n", r.figure.c_str(), r.ours_ms, r.raw_ms,
                  r.ratio.c_str(), r.target.c_str());
    }
  }
  if (comm) ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
  ranktime::shutdown();
  return 0;
}
