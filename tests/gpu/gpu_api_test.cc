// Device tensors through the public API (ranktime::allreduce_async & co.), on every rank under
// mpirun: every op x dtype exact, a producer's ready event, and with the timeline on, a trace that
// passes `ranktime check` (GPU phases nest, never overlap); it prints the step-time ratio on/off
// for the ResNet-50 gradient set (a figure, not asserted: tests never assert on wall-clock time,
// the target is bench/gpu_bench's). Needs the runtime to route device tensors to the GPU backend.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "ranktime/timeline/trace_check.h"
#include "workload.h"

namespace ranktime::gpu_test {
namespace {

int device() { return ranktime::local_rank() % device_count(); }

TensorView view_of(const DeviceBuffer& b, DataType dtype, std::vector<int64_t> shape) {
  TensorView v;
  v.data = b.data();
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.device = device();
  return v;
}

// `n` floats of `value`, as bytes for DeviceBuffer::upload.
std::vector<uint8_t> floats(int64_t n, float value) {
  std::vector<uint8_t> bytes(n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) std::memcpy(&bytes[i * sizeof(float)], &value, sizeof(float));
  return bytes;
}

class GpuApi : public ::testing::Test {
 protected:
  void SetUp() override {
    RANKTIME_SKIP_WITHOUT_GPU();
    cudaSetDevice(device());
  }
};

TEST_F(GpuApi, AllreduceEveryDtypeAndReduction) {
  const int64_t n = 777;
  for (DataType dtype : all_dtypes()) {
    for (ReduceOp op : all_reductions()) {
      DeviceBuffer b(n * dtype_size(dtype));
      b.upload(make_input(rank(), 0, n, op, dtype));
      Status s = allreduce_async(view_of(b, dtype, {n}), "api.ar", op).wait();
      ASSERT_TRUE(s.ok()) << s.message();
      std::vector<uint8_t> out = b.download();
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(decode(dtype, &out[i * dtype_size(dtype)]),
                  expected_value(size(), 0, i, op, dtype))
            << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << i;
      }
    }
  }
}

TEST_F(GpuApi, FusedAllreduce) {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<Handle> handles;
  for (int t = 0; t < 40; ++t) {
    const int64_t n = 1 + t * 31;
    buffers.push_back(std::make_unique<DeviceBuffer>(n * 4));
    buffers.back()->upload(make_input(rank(), t, n, ReduceOp::kSum, DataType::kFloat32));
    handles.push_back(allreduce_async(view_of(*buffers.back(), DataType::kFloat32, {n}),
                                      "api.fused." + std::to_string(t)));
  }
  for (int t = 0; t < 40; ++t) {
    ASSERT_TRUE(handles[t].wait().ok()) << handles[t].wait().message();
    std::vector<uint8_t> out = buffers[t]->download();
    for (size_t i = 0; i < out.size() / 4; ++i) {
      ASSERT_EQ(decode(DataType::kFloat32, &out[i * 4]),
                expected_value(size(), t, i, ReduceOp::kSum, DataType::kFloat32));
    }
  }
}

TEST_F(GpuApi, AllgatherAndBroadcastEveryDtype) {
  for (DataType dtype : all_dtypes()) {
    const int64_t rows = rank() + 1, cols = 3;
    DeviceBuffer b(rows * cols * dtype_size(dtype));
    b.upload(make_input(rank(), 0, rows * cols, ReduceOp::kSum, dtype));
    Handle h = allgather_async(view_of(b, dtype, {rows, cols}), "api.ag");
    ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    std::vector<uint8_t> want;
    int64_t total = 0;
    for (int q = 0; q < size(); ++q) {
      auto part = make_input(q, 0, (q + 1) * cols, ReduceOp::kSum, dtype);
      want.insert(want.end(), part.begin(), part.end());
      total += q + 1;
    }
    ASSERT_EQ(h.output().size(), want.size());
    EXPECT_EQ(std::memcmp(h.output().data(), want.data(), want.size()), 0) << dtype_name(dtype);
    EXPECT_EQ(h.output_shape(), (std::vector<int64_t>{total, cols}));

    DeviceBuffer c(100 * dtype_size(dtype));
    c.upload(make_input(rank(), 1, 100, ReduceOp::kSum, dtype));
    const int root = size() - 1;
    Status s = broadcast_async(view_of(c, dtype, {100}), root, "api.bc").wait();
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.download(), make_input(root, 1, 100, ReduceOp::kSum, dtype)) << dtype_name(dtype);
  }
}

TEST_F(GpuApi, ReducescatterAndAlltoallEveryDtype) {
  for (DataType dtype : all_dtypes()) {
    const size_t elem = dtype_size(dtype);
    const int64_t cols = 2, rows = 2 * size() + 1;  // uneven: rank 0 gets a row more
    DeviceBuffer b(rows * cols * elem);
    b.upload(make_input(rank(), 0, rows * cols, ReduceOp::kAverage, dtype));
    Handle h = reducescatter_async(view_of(b, dtype, {rows, cols}), "api.rs", ReduceOp::kAverage);
    ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    const int64_t mine = rows / size() + (rank() < rows % size() ? 1 : 0);
    const int64_t first = rank() * (rows / size()) + std::min<int64_t>(rank(), rows % size());
    ASSERT_EQ(h.output_shape(), (std::vector<int64_t>{mine, cols}));
    for (int64_t j = 0; j < mine * cols; ++j) {
      ASSERT_EQ(decode(dtype, reinterpret_cast<const uint8_t*>(h.output().data()) + j * elem),
                expected_value(size(), 0, first * cols + j, ReduceOp::kAverage, dtype))
          << dtype_name(dtype) << " element " << j;
    }

    // Rank p sends p + 1 rows to every rank.
    const int64_t sent = (rank() + 1) * size();
    DeviceBuffer a(sent * cols * elem);
    a.upload(make_input(rank(), 1, sent * cols, ReduceOp::kSum, dtype));
    std::vector<int32_t> splits(size(), rank() + 1);
    Handle t = alltoall_async(view_of(a, dtype, {sent, cols}), splits, "api.a2a");
    ASSERT_TRUE(t.wait().ok()) << t.wait().message();
    std::vector<uint8_t> want;
    std::vector<int32_t> received;
    for (int p = 0; p < size(); ++p) {
      const auto input = make_input(p, 1, (p + 1) * size() * cols, ReduceOp::kSum, dtype);
      const size_t part = (p + 1) * cols * elem;
      want.insert(want.end(), input.begin() + rank() * part, input.begin() + (rank() + 1) * part);
      received.push_back(p + 1);
    }
    EXPECT_EQ(t.received_splits(), received);
    ASSERT_EQ(t.output().size(), want.size());
    EXPECT_EQ(std::memcmp(t.output().data(), want.data(), want.size()), 0) << dtype_name(dtype);
  }
}

TEST_F(GpuApi, ReadyEvent) {
  const int64_t n = 1 << 20;
  DeviceBuffer b(n * 4);
  cudaStream_t producer;
  cudaEvent_t ready;
  CUDA_OK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  void* pinned = nullptr;
  CUDA_OK(cudaMallocHost(&pinned, n * 4));
  auto input = make_input(rank(), 0, n, ReduceOp::kSum, DataType::kFloat32);
  std::memcpy(pinned, input.data(), input.size());
  CUDA_OK(delay_stream(producer, 50));  // the data lands well after the tensor is submitted
  CUDA_OK(cudaMemcpyAsync(b.data(), pinned, n * 4, cudaMemcpyHostToDevice, producer));
  CUDA_OK(cudaEventRecord(ready, producer));
  TensorView v = view_of(b, DataType::kFloat32, {n});
  v.ready_event = ready;
  Status s = allreduce_async(v, "api.ready").wait();
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<uint8_t> out = b.download();
  for (int64_t i = 0; i < n; i += 1009) {
    ASSERT_EQ(decode(DataType::kFloat32, &out[i * 4]),
              expected_value(size(), 0, i, ReduceOp::kSum, DataType::kFloat32));
  }
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
}

// Two process sets, the even ranks and the odd ones (at two ranks, one rank each): each set's
// device allreduces sum over its members only, and a fused batch stays within its set.
TEST_F(GpuApi, ProcessSetAllreduce) {
  if (size() < 2) GTEST_SKIP() << "a process set needs ranks outside it";
  std::vector<std::vector<int>> sets(2);
  for (int q = 0; q < size(); ++q) sets[q % 2].push_back(q);
  std::vector<int> ids;
  for (const auto& ranks : sets) ids.push_back(add_process_set(ranks));
  for (size_t k = 0; k < sets.size(); ++k) {
    const auto& members = sets[k];
    if (std::find(members.begin(), members.end(), rank()) == members.end()) continue;
    const int64_t n = 1000;
    std::vector<std::unique_ptr<DeviceBuffer>> buffers;
    std::vector<Handle> handles;
    for (int t = 0; t < 3; ++t) {
      buffers.push_back(std::make_unique<DeviceBuffer>(n * 4));
      buffers.back()->upload(floats(n, float(rank() + 1 + t)));
      handles.push_back(allreduce_async(view_of(*buffers.back(), DataType::kFloat32, {n}),
                                        "api.set." + std::to_string(t), ReduceOp::kSum, ids[k]));
    }
    for (int t = 0; t < 3; ++t) {
      Status st = handles[t].wait();
      ASSERT_TRUE(st.ok()) << st.message();
      float want = 0;
      for (int q : members) want += float(q + 1 + t);
      std::vector<uint8_t> out = buffers[t]->download();
      EXPECT_EQ(decode(DataType::kFloat32, &out[0]), want) << "set " << k << " tensor " << t;
      EXPECT_EQ(decode(DataType::kFloat32, &out[(n - 1) * 4]), want);
    }
  }
  ASSERT_TRUE(barrier().ok());
  for (int id : ids) EXPECT_TRUE(remove_process_set(id));
}

// Horovod's join on device tensors: rank r makes r + 1 steps of an averaged allreduce, then joins;
// the ranks that have joined take part with zeros made on the GPU, so every step averages over
// every rank the gradients of the ranks still stepping.
TEST_F(GpuApi, JoinedRanksContributeZerosOnTheDevice) {
  const int64_t n = 4099;  // more than one copy chunk of the zero fill
  for (int step = 0; step < rank() + 1; ++step) {
    DeviceBuffer b(n * 4);
    b.upload(floats(n, float(4 * (rank() + 1))));
    Status st =
        allreduce_async(view_of(b, DataType::kFloat32, {n}), "api.join", ReduceOp::kAverage).wait();
    ASSERT_TRUE(st.ok()) << st.message();
    float sum = 0;
    for (int q = step; q < size(); ++q) sum += float(4 * (q + 1));  // ranks with a step `step`
    std::vector<uint8_t> out = b.download();
    EXPECT_EQ(decode(DataType::kFloat32, &out[0]), sum / size()) << "step " << step;
    EXPECT_EQ(decode(DataType::kFloat32, &out[(n - 1) * 4]), sum / size()) << "step " << step;
  }
  int last = -1;
  ASSERT_TRUE(join(device(), &last).ok());
  EXPECT_EQ(last, size() - 1);
  ASSERT_TRUE(barrier().ok());
}

// One training step of the ResNet-50 gradient set: every gradient submitted in reverse order, as
// backward produces them, then all waited for. Returns the slowest rank's step time in seconds.
double resnet_step(const std::vector<examples::WorkloadTensor>& set,
                   const std::vector<std::unique_ptr<DeviceBuffer>>& grads) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Handle> handles;
  for (size_t k = set.size(); k-- > 0;) {
    handles.push_back(allreduce_async(view_of(*grads[k], DataType::kFloat32, {set[k].elements}),
                                      set[k].name, ReduceOp::kAverage));
  }
  for (Handle& h : handles) EXPECT_TRUE(h.wait().ok());
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), worst;
  MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

double median_step(const std::vector<examples::WorkloadTensor>& set,
                   const std::vector<std::unique_ptr<DeviceBuffer>>& grads, int steps) {
  std::vector<double> t;
  for (int k = 0; k < steps; ++k) t.push_back(resnet_step(set, grads));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST_F(GpuApi, TimelineTraceAndOnOffRatioOnResNet50) {
  const auto set = examples::read_workload(RANKTIME_RESNET50_TSV);
  std::vector<std::unique_ptr<DeviceBuffer>> grads;
  for (const auto& t : set) {
    grads.push_back(std::make_unique<DeviceBuffer>(t.elements * 4));
    cudaMemset(grads.back()->data(), 0, t.elements * 4);
  }
  cudaDeviceSynchronize();  // no ready events below: the tensors must be complete
  for (int k = 0; k < 3; ++k) resnet_step(set, grads);  // warm-up: NCCL, buffers, pools

  const std::string path = "/tmp/ranktime_gpu_api_" + std::to_string(getppid()) + ".json";
  const int steps = 15;
  double off_1 = median_step(set, grads, steps);
  ASSERT_TRUE(start_timeline(path).ok());
  double on = median_step(set, grads, steps);
  ASSERT_TRUE(stop_timeline().ok());
  double off_2 = median_step(set, grads, steps);
  const double off = std::min(off_1, off_2);
  if (rank() == 0) {
    std::printf("ResNet-50 set, %d ranks: step %.3f ms timeline off, %.3f ms on, ratio %.3f\n",
                size(), off * 1e3, on * 1e3, on / off);
  }

  if (rank() != 0) return;
  timeline::TraceChecker checker;
  size_t gpu_phases = 0;
  auto read = timeline::read_trace_file(path, [&](const timeline::TraceEvent& e) {
    checker.add(e);
    if (e.phase() == 'B' && (e.name.rfind("NCCL_", 0) == 0 || e.name.rfind("MEMCPY_", 0) == 0))
      ++gpu_phases;
    return true;
  });
  checker.finish(read);
  for (const auto& v : checker.violations()) ADD_FAILURE() << v.message;
  EXPECT_TRUE(checker.ok());
  EXPECT_GT(gpu_phases, 0u);
  std::remove(path.c_str());
}

// Says once, from rank 0, why the tests skip here (ctest's skip pattern); main() is the
// multi-rank one all MPI tests share.
class NoDeviceNotice : public ::testing::Environment {
 public:
  void SetUp() override {
    if (ranktime::rank() == 0 && device_count() == 0) {
      std::printf("no CUDA device: the GPU tests skip\n");
    }
  }
};
::testing::Environment* const kNoDeviceNotice =
    ::testing::AddGlobalTestEnvironment(new NoDeviceNotice);

}  // namespace
}  // namespace ranktime::gpu_test
