// GPU phase timing through the backend: sub-phases nest and never overlap, jobs on one stream
// never overlap each other, and NCCL_ALLREDUCE durations agree with an independent measurement
// (a raw ncclAllReduce of the same size on a communicator of our own, bracketed by CUDA events)
// within 5% (or 5 us, for operations too short for a percentage to mean anything). Needs one GPU
// per rank (NCCL refuses two ranks on one device); run at 1 rank on a single-GPU machine.
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/gpu/gpu_backend.h"
#include "cuda_event_timing.h"
#include "gpu_test_util.h"

namespace ranktime::gpu_test {
namespace {

using gpu::GpuBackend;
using gpu::GpuCompletion;
using gpu::GpuOptions;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class GpuTiming : public ::testing::Test {
 protected:
  void SetUp() override {
    RANKTIME_SKIP_WITHOUT_GPU();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (size_ > device_count()) GTEST_SKIP() << "needs one GPU per rank for NCCL";
    device_ = rank_ % device_count();
    cudaSetDevice(device_);
  }
  int rank_ = 0, size_ = 1, device_ = 0;
  Clock clock_;
};

// Runs `reps` allreduces of one float32 tensor of `n` elements through a backend running
// `collectives` (after 3 warm-ups) and returns the durations of its `phase` spans, as the timeline
// shows them.
std::vector<double> phase_durations(GpuOptions::Collectives collectives, void* data, size_t n,
                                    timeline::Phase phase, int reps, int device, Clock* clock) {
  std::vector<double> out;
  GpuOptions options;
  options.collectives = collectives;
  GpuBackend backend(MPI_COMM_WORLD, clock, options, nullptr);
  TensorEntry e;
  e.request.name = "big";
  e.view.data = data;
  e.view.dtype = DataType::kFloat32;
  e.view.shape = {static_cast<int64_t>(n)};
  e.view.device = device;
  e.handle = std::make_shared<detail::HandleState>();
  Response r;
  r.op = OpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  r.names = {"big"};
  r.tensor_ids = {0};
  for (int k = 0; k < reps + 3; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    backend.enqueue(r, {&e}, clock->now_ns());
    backend.drain();
    std::vector<GpuCompletion> done;
    backend.take_completions(&done);
    EXPECT_EQ(done.size(), 1u);
    if (done.size() != 1) return {};
    EXPECT_TRUE(done[0].status.ok()) << done[0].status.message();
    int64_t t = done[0].start_ns;
    for (const PhaseLog::Span& s : done[0].log.spans) {
      EXPECT_GE(s.begin_ns, t);
      EXPECT_GE(s.end_ns, s.begin_ns);
      t = s.end_ns;
      if (s.phase == phase && k >= 3) out.push_back(static_cast<double>(s.end_ns - s.begin_ns));
    }
    EXPECT_LE(t, done[0].end_ns);
  }
  return out;
}

// Prints the timeline's median `phase` duration next to the raw events' and returns it.
double report(const char* phase, int ranks, const std::vector<double>& ours, double raw_ns) {
  const double m = median(ours);
  std::printf("%s of 64 MiB at %d ranks: ranktime timeline %.1f us, raw events %.1f us\n", phase,
              ranks, m / 1e3, raw_ns / 1e3);
  return m;
}

TEST_F(GpuTiming, NcclAllreduceDurationsMatchRawNccl) {
  const int reps = 30;
  const size_t n = size_t{16} << 20;  // 64 MiB of float32
  DeviceBuffer data(n * 4);
  CUDA_OK(cudaMemset(data.data(), 0, n * 4));
  CUDA_OK(cudaDeviceSynchronize());

  const std::vector<double> ours =
      phase_durations(GpuOptions::Collectives::kNccl, data.data(), n,
                      timeline::Phase::kNcclAllreduce, reps, device_, &clock_);
  ASSERT_EQ(ours.size(), static_cast<size_t>(reps));

  // Raw NCCL, timed by events on a stream of our own.
  ncclUniqueId id;
  if (rank_ == 0) {
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, size_, id, rank_), ncclSuccess);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double m_raw = event_timed_median_ns(
      stream, reps, 3,
      [&] { ncclAllReduce(data.data(), data.data(), n, ncclFloat32, ncclSum, comm, stream); },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);

  const double m_ours = report("NCCL_ALLREDUCE", size_, ours, m_raw);
  EXPECT_LE(std::fabs(m_ours - m_raw), std::max(0.05 * m_raw, 5000.0));
}

// A phase with real GPU time at any rank count (at one rank NCCL's in-place allreduce moves
// nothing): the MPI staging path's copy to host memory, against the same copy timed by events of
// our own. Within 5%.
TEST_F(GpuTiming, StagedCopyDurationsMatchRawCopies) {
  const int reps = 20;
  const size_t n = size_t{16} << 20;  // 64 MiB of float32
  DeviceBuffer data(n * 4);
  CUDA_OK(cudaMemset(data.data(), 0, n * 4));
  CUDA_OK(cudaDeviceSynchronize());

  const std::vector<double> ours =
      phase_durations(GpuOptions::Collectives::kMpi, data.data(), n,
                      timeline::Phase::kMemcpyInHostBuffer, reps, device_, &clock_);
  ASSERT_EQ(ours.size(), static_cast<size_t>(reps));

  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, n * 4));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double m_raw = event_timed_median_ns(
      stream, reps, 3,
      [&] { cudaMemcpyAsync(pinned, data.data(), n * 4, cudaMemcpyDeviceToHost, stream); },
      [] { MPI_Barrier(MPI_COMM_WORLD); });
  cudaStreamDestroy(stream);
  cudaFreeHost(pinned);

  const double m_ours = report("MEMCPY_IN_HOST_BUFFER", size_, ours, m_raw);
  ASSERT_GT(m_raw, 100e3) << "a 64 MiB copy to host memory should take well over 100 us";
  EXPECT_LE(std::fabs(m_ours - m_raw), 0.05 * m_raw);
}

// A fused batch: MEMCPY_IN_FUSION_BUFFER, NCCL_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER in order, each
// mapped duration within a microsecond-scale error of its own nesting.
TEST_F(GpuTiming, FusedPhasesNestAndJobsDoNotOverlap) {
  GpuOptions options;
  options.collectives = GpuOptions::Collectives::kNccl;
  GpuBackend backend(MPI_COMM_WORLD, &clock_, options, nullptr);
  std::vector<std::unique_ptr<DeviceBuffer>> memory;
  std::vector<std::unique_ptr<TensorEntry>> entries;
  std::vector<TensorEntry*> batch;
  Response r;
  r.op = OpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  for (int t = 0; t < 64; ++t) {
    const int64_t n = 1000 * (t + 1);
    memory.push_back(std::make_unique<DeviceBuffer>(n * 4));
    auto e = std::make_unique<TensorEntry>();
    e->request.name = "t" + std::to_string(t);
    e->view = {memory.back()->data(), DataType::kFloat32, {n}, device_, nullptr};
    e->handle = std::make_shared<detail::HandleState>();
    r.names.push_back(e->request.name);
    r.tensor_ids.push_back(t);
    batch.push_back(e.get());
    entries.push_back(std::move(e));
  }
  const int jobs = 20;
  for (int k = 0; k < jobs; ++k) backend.enqueue(r, batch, clock_.now_ns());
  backend.drain();
  std::vector<GpuCompletion> out;
  backend.take_completions(&out);
  ASSERT_EQ(out.size(), static_cast<size_t>(jobs));
  int64_t previous_end = 0;
  for (const GpuCompletion& c : out) {
    ASSERT_TRUE(c.status.ok()) << c.status.message();
    EXPECT_GE(c.start_ns, previous_end);
    previous_end = c.end_ns;
    ASSERT_EQ(c.log.spans.size(), 3u);
    EXPECT_EQ(c.log.spans[0].phase, timeline::Phase::kMemcpyInFusionBuffer);
    EXPECT_EQ(c.log.spans[1].phase, timeline::Phase::kNcclAllreduce);
    EXPECT_EQ(c.log.spans[2].phase, timeline::Phase::kMemcpyOutFusionBuffer);
    int64_t t = c.start_ns;
    for (const PhaseLog::Span& s : c.log.spans) {
      EXPECT_GE(s.begin_ns, t);
      t = s.end_ns;
    }
    EXPECT_LE(t, c.end_ns);
  }
}

}  // namespace
}  // namespace ranktime::gpu_test
