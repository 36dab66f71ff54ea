// The GPU backend driven directly (no runtime around it), on every rank under mpirun: every op x
// dtype (x reduction, fused and not) exact against a host reference, ready events waited for on
// the stream, and every completion's sub-phases in plan order, nested and non-overlapping.
// --mode=nccl | hierarchical | mpi picks the device set's mode (see tests/gpu/CMakeLists.txt).
#include <mpi.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/gpu/device_fusion.h"
#include "backends/gpu/gpu_backend.h"
#include "backends/gpu/stream_resources.h"
#include "core/rows.h"
#include "gpu_test_util.h"

namespace ranktime::gpu_test {
extern std::string g_mode;
namespace {

using gpu::GpuBackend;
using gpu::GpuCompletion;
using gpu::GpuMode;
using gpu::GpuOptions;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

GpuOptions options_for_mode() {
  GpuOptions o;
  if (g_mode == "nccl") o.collectives = GpuOptions::Collectives::kNccl;
  if (g_mode == "hierarchical") {
    o.collectives = GpuOptions::Collectives::kNccl;
    o.hierarchical_allreduce = true;
  }
  if (g_mode == "mpi") o.collectives = GpuOptions::Collectives::kMpi;
  return o;
}

// One tensor of a test: device memory plus the entry the backend sees.
struct Tensor {
  std::unique_ptr<DeviceBuffer> memory;
  std::unique_ptr<TensorEntry> entry;
};

class GpuBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (device_count() == 0) return;
    device_ = world_rank() % device_count();
    cudaSetDevice(device_);
    backend_ = new GpuBackend(MPI_COMM_WORLD, &clock_, options_for_mode(), nullptr);
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    RANKTIME_SKIP_WITHOUT_GPU();
    cudaSetDevice(device_);
  }

  static Tensor make_tensor(const std::string& name, DataType dtype, std::vector<int64_t> shape,
                            const std::vector<uint8_t>& bytes) {
    Tensor t;
    t.entry = std::make_unique<TensorEntry>();
    t.entry->request.name = name;
    t.entry->view.dtype = dtype;
    t.entry->view.shape = std::move(shape);
    t.entry->view.device = device_;
    t.entry->handle = std::make_shared<detail::HandleState>();
    t.memory = std::make_unique<DeviceBuffer>(t.entry->view.num_bytes());
    t.memory->upload(bytes);
    t.entry->view.data = t.entry->view.num_bytes() ? t.memory->data() : nullptr;
    return t;
  }

  static Response make_response(OpType op, DataType dtype, ReduceOp reduce, int root,
                                const std::vector<Tensor>& tensors) {
    Response r;
    r.op = op;
    r.dtype = dtype;
    r.reduce_op = reduce;
    r.root = root;
    r.device = 0;  // the device set's key: rank 0's ordinal, the same on every rank
    for (size_t i = 0; i < tensors.size(); ++i) {
      r.names.push_back(tensors[i].entry->request.name);
      r.tensor_ids.push_back(static_cast<uint32_t>(i));
    }
    return r;
  }

  // Runs one response and returns its completion after checking its timeline.
  // `packed`: a reducescatter whose rows do not split evenly (the plan packs them first).
  static GpuCompletion run(const Response& r, const std::vector<Tensor>& tensors,
                           bool ready_events = false, bool packed = false) {
    std::vector<TensorEntry*> entries;
    for (const Tensor& t : tensors) entries.push_back(t.entry.get());
    const int64_t arrival = clock_.now_ns();
    backend_->enqueue(r, entries, arrival);
    backend_->drain();
    std::vector<GpuCompletion> out;
    backend_->take_completions(&out);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(backend_->pending(), 0u);
    if (out.empty()) return {};
    check_timeline(out[0], r, tensors.size(), arrival, ready_events, packed);
    return std::move(out[0]);
  }

  static void check_timeline(const GpuCompletion& c, const Response& r, size_t n, int64_t arrival,
                             bool ready_events, bool packed) {
    EXPECT_GE(c.start_ns, arrival);
    EXPECT_GE(c.end_ns, c.start_ns);
    auto mode = backend_->mode(0);
    ASSERT_TRUE(mode.has_value());
    const bool root = r.op == OpType::kBroadcast && world_rank() == r.root;
    std::vector<gpu::Step> plan = gpu::plan_steps({r.op, *mode, n > 1, root, packed});
    std::vector<timeline::Phase> expected;
    if (ready_events) expected.push_back(timeline::Phase::kWaitForData);
    for (const gpu::Step& s : plan) expected.push_back(s.phase);
    std::vector<timeline::Phase> got;
    int64_t t = c.start_ns;
    for (const PhaseLog::Span& s : c.log.spans) {
      got.push_back(s.phase);
      EXPECT_GE(s.begin_ns, t) << timeline::phase_name(s.phase) << " overlaps what came before";
      EXPECT_GE(s.end_ns, s.begin_ns) << timeline::phase_name(s.phase);
      t = s.end_ns;
    }
    EXPECT_LE(t, c.end_ns);
    EXPECT_EQ(got, expected);
    for (const PhaseLog& l : c.entry_logs) {
      int64_t u = c.start_ns;
      for (const PhaseLog::Span& s : l.spans) {
        EXPECT_GE(s.begin_ns, u);
        u = s.end_ns;
      }
      EXPECT_LE(u, c.end_ns);
    }
  }

  static void expect_mode() {
    auto mode = backend_->mode(0);
    ASSERT_TRUE(mode.has_value());
    if (g_mode == "nccl") {
      EXPECT_EQ(*mode, GpuMode::kNccl);
    }
    if (g_mode == "hierarchical") {
      EXPECT_EQ(*mode, GpuMode::kNcclHierarchical);
    }
    if (g_mode == "mpi") {
      EXPECT_EQ(*mode, GpuMode::kMpiStaging);
    }
  }

  static inline int device_ = 0;
  static inline Clock clock_{0};
  static inline GpuBackend* backend_ = nullptr;
};

// ---------------------------------------------------------------------------------------------

using AllreduceParam = std::tuple<DataType, ReduceOp, bool /*fused*/>;
class GpuAllreduce : public GpuBackendTest, public ::testing::WithParamInterface<AllreduceParam> {};

TEST_P(GpuAllreduce, ExactAgainstHostReference) {
  const auto [dtype, op, fused] = GetParam();
  // Odd sizes exercise the fusion padding; the empty tensor, a batch member with no bytes.
  const std::vector<int64_t> sizes =
      fused ? std::vector<int64_t>{1, 7, 300, 0, 129, 4096} : std::vector<int64_t>{1000};
  std::vector<Tensor> tensors;
  for (size_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back(
        make_tensor("ar." + std::to_string(t), dtype, {sizes[t]},
                    make_input(world_rank(), static_cast<int>(t), sizes[t], op, dtype)));
  }
  GpuCompletion c = run(make_response(OpType::kAllreduce, dtype, op, 0, tensors), tensors);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  expect_mode();
  const size_t es = dtype_size(dtype);
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<uint8_t> out = tensors[t].memory->download();
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const double want = expected_value(world_size(), static_cast<int>(t), i, op, dtype);
      ASSERT_EQ(decode(dtype, &out[i * es]), want)
          << dtype_name(dtype) << " " << reduce_op_name(op) << " tensor " << t << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndReduction, GpuAllreduce,
                         ::testing::Combine(::testing::ValuesIn(all_dtypes()),
                                            ::testing::ValuesIn(all_reductions()),
                                            ::testing::Bool()));

class GpuBroadcast : public GpuBackendTest,
                     public ::testing::WithParamInterface<std::tuple<DataType, bool>> {};

TEST_P(GpuBroadcast, EveryRankGetsTheRootsTensor) {
  const auto [dtype, fused] = GetParam();
  const int root = world_size() - 1;
  const std::vector<int64_t> sizes =
      fused ? std::vector<int64_t>{5, 0, 333, 64} : std::vector<int64_t>{2049};
  std::vector<Tensor> tensors;
  for (size_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back(make_tensor(
        "bc." + std::to_string(t), dtype, {sizes[t]},
        make_input(world_rank(), static_cast<int>(t), sizes[t], ReduceOp::kSum, dtype)));
  }
  GpuCompletion c =
      run(make_response(OpType::kBroadcast, dtype, ReduceOp::kSum, root, tensors), tensors);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  for (size_t t = 0; t < sizes.size(); ++t) {
    EXPECT_EQ(tensors[t].memory->download(),
              make_input(root, static_cast<int>(t), sizes[t], ReduceOp::kSum, dtype))
        << dtype_name(dtype) << " tensor " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, GpuBroadcast,
                         ::testing::Combine(::testing::ValuesIn(all_dtypes()), ::testing::Bool()));

class GpuAllgather : public GpuBackendTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(GpuAllgather, FirstDimensionDiffersPerRank) {
  const DataType dtype = GetParam();
  const int64_t cols = 5;
  auto rows_of = [](int r) { return static_cast<int64_t>(r % 3 == 2 ? 0 : r + 1); };
  const int rank = world_rank();
  std::vector<Tensor> tensors;
  tensors.push_back(make_tensor("ag", dtype, {rows_of(rank), cols},
                                make_input(rank, 0, rows_of(rank) * cols, ReduceOp::kSum, dtype)));
  Response r = make_response(OpType::kAllgather, dtype, ReduceOp::kSum, 0, tensors);
  std::vector<uint8_t> want;
  int64_t rows = 0;
  for (int q = 0; q < world_size(); ++q) {
    r.first_dims.push_back(rows_of(q));
    rows += rows_of(q);
    auto part = make_input(q, 0, rows_of(q) * cols, ReduceOp::kSum, dtype);
    want.insert(want.end(), part.begin(), part.end());
  }
  GpuCompletion c = run(r, tensors);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  const auto& state = *tensors[0].entry->handle;
  ASSERT_EQ(state.output.size(), want.size());
  EXPECT_EQ(std::memcmp(state.output.data(), want.data(), want.size()), 0) << dtype_name(dtype);
  EXPECT_EQ(state.output_shape, (std::vector<int64_t>{rows, cols}));
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, GpuAllgather, ::testing::ValuesIn(all_dtypes()));

using ReducescatterParam = std::tuple<DataType, ReduceOp, bool /*rows split evenly*/>;
class GpuReducescatter : public GpuBackendTest,
                         public ::testing::WithParamInterface<ReducescatterParam> {};

TEST_P(GpuReducescatter, EachRankGetsItsRowsReduced) {
  const auto [dtype, op, even] = GetParam();
  const int size = world_size(), rank = world_rank();
  const int64_t cols = 3, rows = 2 * size + (even ? 0 : 1);  // uneven: rank 0 gets one more
  std::vector<Tensor> tensors;
  tensors.push_back(
      make_tensor("rs", dtype, {rows, cols}, make_input(rank, 0, rows * cols, op, dtype)));
  Response r = make_response(OpType::kReducescatter, dtype, op, 0, tensors);
  GpuCompletion c = run(r, tensors, false, rows % size != 0);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  const auto& state = *tensors[0].entry->handle;
  const int64_t mine = scatter_rows(rows, size, rank);
  ASSERT_EQ(state.output_shape, (std::vector<int64_t>{mine, cols}));
  ASSERT_EQ(state.output.size(), static_cast<size_t>(mine * cols) * dtype_size(dtype));
  const int64_t first = scatter_first_row(rows, size, rank) * cols;
  for (int64_t j = 0; j < mine * cols; ++j) {
    ASSERT_EQ(decode(dtype, reinterpret_cast<const uint8_t*>(&state.output[j * dtype_size(dtype)])),
              expected_value(size, 0, first + j, op, dtype))
        << dtype_name(dtype) << " " << reduce_op_name(op) << " element " << j;
  }
  // The input is left as it was.
  EXPECT_EQ(tensors[0].memory->download(), make_input(rank, 0, rows * cols, op, dtype));
}

INSTANTIATE_TEST_SUITE_P(EveryDtypeAndReduction, GpuReducescatter,
                         ::testing::Combine(::testing::ValuesIn(all_dtypes()),
                                            ::testing::ValuesIn(all_reductions()),
                                            ::testing::Bool()));

class GpuAlltoall : public GpuBackendTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(GpuAlltoall, RowsArriveInRankOrder) {
  const DataType dtype = GetParam();
  const int size = world_size(), rank = world_rank();
  const int64_t cols = 4;
  // Rank p sends (p + q) % 3 rows to rank q: some parts are empty.
  auto splits_of = [size](int p) {
    std::vector<int32_t> s;
    for (int q = 0; q < size; ++q) s.push_back((p + q) % 3);
    return s;
  };
  auto rows_of = [&](int p) {
    int64_t n = 0;
    for (int32_t k : splits_of(p)) n += k;
    return n;
  };
  std::vector<Tensor> tensors;
  tensors.push_back(make_tensor("a2a", dtype, {rows_of(rank), cols},
                                make_input(rank, 0, rows_of(rank) * cols, ReduceOp::kSum, dtype)));
  tensors[0].entry->splits = splits_of(rank);
  std::vector<uint8_t> want;
  std::vector<int32_t> received;
  const size_t row_bytes = cols * dtype_size(dtype);
  for (int p = 0; p < size; ++p) {
    const std::vector<int32_t> splits = splits_of(p);
    int64_t before = 0;
    for (int q = 0; q < rank; ++q) before += splits[q];
    const auto input = make_input(p, 0, rows_of(p) * cols, ReduceOp::kSum, dtype);
    want.insert(want.end(), input.begin() + before * row_bytes,
                input.begin() + (before + splits[rank]) * row_bytes);
    received.push_back(splits[rank]);
  }
  GpuCompletion c =
      run(make_response(OpType::kAlltoall, dtype, ReduceOp::kSum, 0, tensors), tensors);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  const auto& state = *tensors[0].entry->handle;
  EXPECT_EQ(state.received_splits, received);
  ASSERT_EQ(state.output.size(), want.size());
  EXPECT_EQ(std::memcmp(state.output.data(), want.data(), want.size()), 0) << dtype_name(dtype);
  EXPECT_EQ(state.output_shape,
            (std::vector<int64_t>{static_cast<int64_t>(want.size() / row_bytes), cols}));
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, GpuAlltoall, ::testing::ValuesIn(all_dtypes()));

// ---------------------------------------------------------------------------------------------

// Producers still writing on their own streams when the tensors are submitted: the backend waits
// for their events on its stream (the CPU does not wait), and the lanes show WAIT_FOR_DATA.
TEST_F(GpuBackendTest, WaitsForReadyEventsOnTheStream) {
  const DataType dtype = DataType::kFloat32;
  const int64_t n = 1 << 20;
  std::vector<Tensor> tensors;
  for (int t = 0; t < 2; ++t) {
    tensors.push_back(make_tensor("ready." + std::to_string(t), dtype, {n}, {}));
  }
  cudaStream_t producer[2];
  cudaEvent_t ready[2];
  // Pinned sources, so that the copies below are asynchronous and really still running.
  void* inputs[2] = {};
  for (int t = 0; t < 2; ++t) {
    CUDA_OK(cudaStreamCreateWithFlags(&producer[t], cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&ready[t], cudaEventDisableTiming));
    CUDA_OK(cudaMallocHost(&inputs[t], n * 4));
    std::vector<uint8_t> bytes = make_input(world_rank(), t, n, ReduceOp::kSum, dtype);
    std::memcpy(inputs[t], bytes.data(), bytes.size());
  }
  // Tensor 1's producer is held for a while first.
  CUDA_OK(delay_stream(producer[1], 50));
  for (int t = 0; t < 2; ++t) {
    CUDA_OK(cudaMemcpyAsync(tensors[t].memory->data(), inputs[t], n * 4, cudaMemcpyHostToDevice,
                            producer[t]));
    CUDA_OK(cudaEventRecord(ready[t], producer[t]));
    tensors[t].entry->view.ready_event = ready[t];
  }
  GpuCompletion c =
      run(make_response(OpType::kAllreduce, dtype, ReduceOp::kSum, 0, tensors), tensors, true);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  for (int t = 0; t < 2; ++t) {
    std::vector<uint8_t> out = tensors[t].memory->download();
    for (int64_t i = 0; i < n; i += 4099) {
      ASSERT_EQ(decode(dtype, &out[i * 4]),
                expected_value(world_size(), t, i, ReduceOp::kSum, dtype));
    }
  }
  // Tensor 0 was ready first (tensor 1's producer was held 50 ms): its lane shows its own wait,
  // then the wait for the other tensor's data; tensor 1's only its own.
  ASSERT_EQ(c.entry_logs.size(), 2u);
  ASSERT_GE(c.entry_logs[0].spans.size(), 2u);
  EXPECT_EQ(c.entry_logs[0].spans[0].phase, timeline::Phase::kWaitForData);
  EXPECT_EQ(c.entry_logs[0].spans[1].phase, timeline::Phase::kWaitForOtherTensorData);
  ASSERT_FALSE(c.entry_logs[1].spans.empty());
  EXPECT_EQ(c.entry_logs[1].spans[0].phase, timeline::Phase::kWaitForData);
  // In NCCL mode both times are marks on the collectives' stream, so the last tensor waited for no
  // other. The worker modes time each producer on the ingress stream (mapped from the anchor), a
  // few microseconds before the stream's own mark: a sliver of the other wait may show there.
  if (g_mode == "nccl") {
    for (const PhaseLog::Span& span : c.entry_logs[1].spans) {
      EXPECT_NE(span.phase, timeline::Phase::kWaitForOtherTensorData);
    }
  }
  for (int t = 0; t < 2; ++t) {
    cudaEventDestroy(ready[t]);
    cudaStreamDestroy(producer[t]);
    cudaFreeHost(inputs[t]);
  }
}

// The batched copy kernel on its own: more copies than one launch takes, copies that cross its
// 64 KiB chunks, odd sizes and unaligned pointers (the byte path), empty copies; every byte lands
// where it should and nothing else is written.
TEST(BatchedCopy, EveryByteLandsAndNothingElse) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const size_t bytes = size_t{8} << 20;
  DeviceBuffer src(bytes), dst(bytes + 4096);
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + i / 251 + 3);
  src.upload(pattern);
  dst.upload(std::vector<uint8_t>(dst.bytes(), 0xEE));
  std::vector<uint8_t> want(dst.bytes(), 0xEE);
  gpu::CopyBatch batch;
  size_t from = 0, to = 0;
  auto add = [&](size_t src_at, size_t dst_at, size_t n) {
    batch.srcs.push_back(static_cast<const char*>(src.data()) + src_at);
    batch.dsts.push_back(static_cast<char*>(dst.data()) + dst_at);
    batch.sizes.push_back(n);
    std::memcpy(want.data() + dst_at, pattern.data() + src_at, n);
  };
  for (int k = 0; k < 1500; ++k) {
    size_t n = k % 50 == 0 ? 200'001 : (k * 131) % 3000;  // some span several 64 KiB chunks
    if (k % 7 == 3) n = 0;                                // empty copies among the others
    const size_t src_skew = k % 3 == 0 ? 1 : 0;           // unaligned sources,
    const size_t dst_skew = k % 5 == 0 ? 3 : 0;           // destinations, or both
    if (from + src_skew + n > bytes || to + dst_skew + n > bytes) n = 0;
    add(from + src_skew, to + dst_skew, n);
    from += n + src_skew + 16;
    to += n + dst_skew + 48;
  }
  // A whole launch's worth of empty copies, then one more copy after them (into the 4 KiB past
  // `bytes`, which no copy above writes).
  for (int k = 0; k < 1100; ++k) add(0, 0, 0);
  add(bytes - 5000, bytes, 4096);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_OK(gpu::batched_copy(batch, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  const std::vector<uint8_t> got = dst.download();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "byte " << i;
  }
}

// Many small tensors in one batch (the case the batched copy is for).
TEST_F(GpuBackendTest, ManySmallTensorsFused) {
  const DataType dtype = DataType::kFloat32;
  std::vector<Tensor> tensors;
  for (int t = 0; t < 300; ++t) {
    const int64_t n = 1 + (t * 13) % 64;
    tensors.push_back(make_tensor("small." + std::to_string(t), dtype, {n},
                                  make_input(world_rank(), t, n, ReduceOp::kSum, dtype)));
  }
  GpuCompletion c =
      run(make_response(OpType::kAllreduce, dtype, ReduceOp::kSum, 0, tensors), tensors);
  ASSERT_TRUE(c.status.ok()) << c.status.message();
  for (int t = 0; t < 300; ++t) {
    std::vector<uint8_t> out = tensors[t].memory->download();
    for (size_t i = 0; i < out.size() / 4; ++i) {
      ASSERT_EQ(decode(dtype, &out[i * 4]),
                expected_value(world_size(), t, i, ReduceOp::kSum, dtype));
    }
  }
}

// Responses enqueued back to back run in order on the stream; each completes with its own result
// and the jobs' phases do not overlap one another.
TEST_F(GpuBackendTest, PipelinedResponsesStayInOrder) {
  const DataType dtype = DataType::kInt32;
  const int jobs = 16;
  std::vector<std::vector<Tensor>> tensors(jobs);
  std::vector<Response> responses;
  const int64_t arrival = clock_.now_ns();
  for (int j = 0; j < jobs; ++j) {
    const int64_t n = 1000 + j;
    tensors[j].push_back(make_tensor("pipe." + std::to_string(j), dtype, {n},
                                     make_input(world_rank(), j, n, ReduceOp::kSum, dtype)));
    if (j % 2) {
      tensors[j].push_back(
          make_tensor("pipe.b." + std::to_string(j), dtype, {7},
                      make_input(world_rank(), j + 100, 7, ReduceOp::kSum, dtype)));
    }
    responses.push_back(make_response(OpType::kAllreduce, dtype, ReduceOp::kSum, 0, tensors[j]));
    std::vector<TensorEntry*> entries;
    for (const Tensor& t : tensors[j]) entries.push_back(t.entry.get());
    backend_->enqueue(responses.back(), entries, arrival);
  }
  backend_->drain();
  std::vector<GpuCompletion> out;
  backend_->take_completions(&out);
  ASSERT_EQ(out.size(), static_cast<size_t>(jobs));
  int64_t previous_end = arrival;
  for (int j = 0; j < jobs; ++j) {
    EXPECT_EQ(out[j].response.names, responses[j].names);
    ASSERT_TRUE(out[j].status.ok()) << out[j].status.message();
    EXPECT_GE(out[j].start_ns, previous_end) << "job " << j << " overlaps the job before";
    previous_end = out[j].end_ns;
    check_timeline(out[j], responses[j], tensors[j].size(), arrival, false, false);
    std::vector<uint8_t> got = tensors[j][0].memory->download();
    EXPECT_EQ(decode(dtype, &got[4 * 999]),
              expected_value(world_size(), j, 999, ReduceOp::kSum, dtype));
  }
}

TEST_F(GpuBackendTest, EmptyTensor) {
  std::vector<Tensor> tensors;
  tensors.push_back(make_tensor("empty", DataType::kFloat32, {0}, {}));
  GpuCompletion c = run(
      make_response(OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, 0, tensors), tensors);
  EXPECT_TRUE(c.status.ok()) << c.status.message();
}

}  // namespace
}  // namespace ranktime::gpu_test
