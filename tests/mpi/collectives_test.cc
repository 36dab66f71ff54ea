// Every collective, dtype and reduction checked exactly against a reference computed here, on
// 2 and 4 real ranks; fused and unfused (ctest runs this with several fusion thresholds).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/half.h"
#include "ranktime/ranktime.h"
#include "reference.h"

namespace {

using ranktime::DataType;
using ranktime::ReduceOp;
using namespace ranktime_test;

TEST(Collectives, AllreduceEveryDtypeAndReduction) {
  const int rank = ranktime::rank(), size = ranktime::size();
  // Three tensors per (dtype, reduction), all submitted at once: with fusion on they share a
  // fusion buffer; alone (n large, or fusion off) each is reduced in place.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
    struct Item {
      DataType dtype;
      ReduceOp op;
      Buffer buffer;
      std::string name;
      ranktime::Handle handle;
    };
    std::vector<Item> items;
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        for (int64_t len : {n, n + 1, int64_t{7}}) {
          items.push_back({dtype,
                           op,
                           Buffer(dtype, len),
                           "allreduce." + label(dtype, op) + "." + std::to_string(n) + "." +
                               std::to_string(len),
                           {}});
        }
      }
    }
    for (Item& it : items) {
      for (int64_t i = 0; i < it.buffer.size(); ++i) it.buffer.set(i, input(it.op, rank, i));
      it.handle = ranktime::allreduce_async({it.buffer.data(), it.dtype, {it.buffer.size()}},
                                            it.name, it.op);
    }
    for (Item& it : items) {
      ranktime::Status s = it.handle.wait();
      ASSERT_TRUE(s.ok()) << it.name << ": " << s.message();
      for (int64_t i = 0; i < it.buffer.size(); ++i) {
        ASSERT_EQ(it.buffer.get(i), expected(it.dtype, it.op, size, i))
            << it.name << " element " << i;
      }
    }
  }
}

TEST(Collectives, AllgatherFirstDimensionDiffersPerRank) {
  const int rank = ranktime::rank(), size = ranktime::size();
  for (DataType dtype : kAllTypes) {
    const int64_t rows = rank == 1 ? 0 : rank + 1;  // rank 1 contributes nothing
    const int64_t cols = 3;
    Buffer in(dtype, rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) in.set(i, (rank * 10 + i) % 100);
    ranktime::Handle h = ranktime::allgather_async(
        {in.data(), dtype, {rows, cols}}, std::string("allgather.") + ranktime::dtype_name(dtype));
    ranktime::Status s = h.wait();
    ASSERT_TRUE(s.ok()) << s.message();
    int64_t total_rows = 0;
    for (int r = 0; r < size; ++r) total_rows += r == 1 ? 0 : r + 1;
    ASSERT_EQ(h.output_shape(), (std::vector<int64_t>{total_rows, cols}));
    ASSERT_EQ(h.output().size(),
              static_cast<size_t>(total_rows * cols) * ranktime::dtype_size(dtype));
    Buffer out(dtype, total_rows * cols);
    std::memcpy(out.data(), h.output().data(), h.output().size());
    int64_t at = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t rrows = r == 1 ? 0 : r + 1;
      for (int64_t i = 0; i < rrows * cols; ++i, ++at) {
        ASSERT_EQ(out.get(at), (r * 10 + i) % 100)
            << ranktime::dtype_name(dtype) << " from rank " << r;
      }
    }
  }
}

TEST(Collectives, BroadcastFromEveryRootFused) {
  const int rank = ranktime::rank(), size = ranktime::size();
  for (int root = 0; root < size; ++root) {
    std::vector<Buffer> buffers;
    std::vector<ranktime::Handle> handles;
    for (DataType dtype : kAllTypes) buffers.emplace_back(dtype, 257);
    for (size_t k = 0; k < buffers.size(); ++k) {
      for (int64_t i = 0; i < 257; ++i) buffers[k].set(i, rank == root ? (i + k) % 50 : 99);
      handles.push_back(ranktime::broadcast_async(
          {buffers[k].data(), kAllTypes[k], {257}}, root,
          "broadcast." + std::to_string(root) + "." + ranktime::dtype_name(kAllTypes[k])));
    }
    for (size_t k = 0; k < buffers.size(); ++k) {
      ranktime::Status s = handles[k].wait();
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t i = 0; i < 257; ++i)
        ASSERT_EQ(buffers[k].get(i), (i + k) % 50) << "root " << root;
    }
  }
}

// Random tensor counts and sizes (0 elements to several MiB), submitted in a different random
// order on every rank, waited for in yet another order.
TEST(Collectives, RandomisedCountsSizesAndOrders) {
  const int rank = ranktime::rank(), size = ranktime::size();
  std::mt19937 shared(12345);      // same on every rank: the tensor set
  std::mt19937 local(777 + rank);  // differs per rank: the order
  for (int round = 0; round < 5; ++round) {
    const int count = std::uniform_int_distribution<int>(1, 60)(shared);
    std::vector<int64_t> sizes(count);
    for (auto& n : sizes) {
      int kind = std::uniform_int_distribution<int>(0, 9)(shared);
      n = kind == 0  ? 0
          : kind < 7 ? std::uniform_int_distribution<int64_t>(1, 4096)(shared)
                     : std::uniform_int_distribution<int64_t>(100000, 1500000)(shared);
    }
    std::vector<std::vector<float>> data(count);
    for (int t = 0; t < count; ++t) {
      data[t].resize(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i)
        data[t][i] = static_cast<float>((rank + 1) * ((i + t) % 5));
    }
    std::vector<int> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), local);
    std::vector<ranktime::Handle> handles(count);
    for (int t : order) {
      handles[t] =
          ranktime::allreduce_async({data[t].data(), DataType::kFloat32, {sizes[t]}},
                                    "random." + std::to_string(round) + "." + std::to_string(t));
    }
    std::shuffle(order.begin(), order.end(), local);
    const float rank_sum = size * (size + 1) / 2.0f;
    for (int t : order) {
      ranktime::Status s = handles[t].wait();
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t i = 0; i < sizes[t]; ++i) {
        ASSERT_EQ(data[t][i], rank_sum * ((i + t) % 5))
            << "round " << round << " tensor " << t << " element " << i;
      }
    }
  }
}

// One fused batch whose MPI calls (RANKTIME_ALLREDUCE_CHUNK bytes each) begin and end inside
// tensors: every dtype and reduction still exact, element by element, on both sides of each
// boundary. mpi_collectives_chunked_3 runs it with 1000-byte calls; with the default chunk the
// tensors would have to be larger than RANKTIME_FUSION_MAX_TENSOR, which are not fused.
TEST(Collectives, FusedBatchWhoseChunksStraddleTensorBoundaries) {
  const char* chunk_text = std::getenv("RANKTIME_ALLREDUCE_CHUNK");
  const int64_t chunk = chunk_text ? std::atoll(chunk_text) : 0;
  if (chunk <= 0 || chunk > 65536) GTEST_SKIP() << "needs RANKTIME_ALLREDUCE_CHUNK of 1-65536";
  const int rank = ranktime::rank(), size = ranktime::size();
  for (DataType dtype : kAllTypes) {
    const int64_t per_chunk = std::max<int64_t>(1, chunk / ranktime::dtype_size(dtype));
    // Boundaries at a third, a half and one element before or after a chunk's end.
    const std::vector<int64_t> lengths = {
        per_chunk / 3 + 1, per_chunk / 2 + 1, per_chunk - 1, per_chunk + per_chunk / 3, 1,
        2 * per_chunk + 1};
    for (ReduceOp op : kAllOps) {
      const std::string name = "straddle." + label(dtype, op);
      std::vector<Buffer> buffers;
      std::vector<ranktime::TensorView> views;
      for (size_t t = 0; t < lengths.size(); ++t) buffers.emplace_back(dtype, lengths[t]);
      int64_t offset = 0;  // element index across the batch: each tensor's values differ
      for (Buffer& b : buffers) {
        for (int64_t i = 0; i < b.size(); ++i) b.set(i, input(op, rank, offset + i));
        offset += b.size();
        views.push_back({b.data(), dtype, {b.size()}});
      }
      std::vector<ranktime::Handle> handles = ranktime::grouped_allreduce_async(views, name, op);
      offset = 0;
      for (size_t t = 0; t < buffers.size(); ++t) {
        ranktime::Status s = handles[t].wait();
        ASSERT_TRUE(s.ok()) << name << ": " << s.message();
        for (int64_t i = 0; i < buffers[t].size(); ++i) {
          ASSERT_EQ(buffers[t].get(i), expected(dtype, op, size, offset + i))
              << name << " tensor " << t << " element " << i;
        }
        offset += buffers[t].size();
      }
    }
  }
}

TEST(Collectives, AsyncHandlesCompleteIndependently) {
  const int size = ranktime::size();
  std::vector<int32_t> a(10, 1), b(20, 2), c(30, 3);
  auto ha = ranktime::allreduce_async({a.data(), DataType::kInt32, {10}}, "async.a");
  auto hb = ranktime::allreduce_async({b.data(), DataType::kInt32, {20}}, "async.b");
  auto hc = ranktime::allreduce_async({c.data(), DataType::kInt32, {30}}, "async.c");
  ASSERT_TRUE(hc.wait().ok());
  ASSERT_TRUE(ha.wait().ok());
  ASSERT_TRUE(hb.wait().ok());
  EXPECT_TRUE(ha.ready() && hb.ready() && hc.ready());
  EXPECT_EQ(a[9], size);
  EXPECT_EQ(b[19], 2 * size);
  EXPECT_EQ(c[29], 3 * size);
}

// After many steps negotiated through the response cache, one rank's shape change fails the
// tensor with the message it had without the cache (mpi_collectives_no_cache_3 runs this with
// RANKTIME_CACHE_CAPACITY=0); the next step is negotiated in full again and runs.
TEST(Errors, AShapeChangeInSteadyStateGivesTheSameErrorAsWithoutTheCache) {
  const int rank = ranktime::rank(), size = ranktime::size();
  if (size < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  std::string others = size == 2 ? "rank 0" : "ranks 0";
  for (int r = 2; r < size; ++r) others += "," + std::to_string(r);
  for (int k = 0; k < 10; ++k) {
    std::vector<float> x(k == 6 && rank == 1 ? 5 : 4, float(k));
    ranktime::Status s =
        ranktime::allreduce_async({x.data(), DataType::kFloat32, {int64_t(x.size())}}, "steady.w")
            .wait();
    if (k == 6) {
      EXPECT_EQ(s.message(), "tensor 'steady.w': shape differs between ranks: [4] on " + others +
                                 "; [5] on rank 1");
    } else {
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(x[3], float(k * size));
    }
  }
}

// A mismatch fails that tensor on every rank with a message naming the tensor, the field and the
// ranks' values; the runtime keeps working for later tensors.
TEST(Errors, MismatchFailsTheTensorOnEveryRankOnly) {
  const int rank = ranktime::rank(), size = ranktime::size();
  std::vector<float> x(rank == 1 ? 5 : 4, 1.0f);
  std::vector<float> ok(8, 1.0f);
  auto bad = ranktime::allreduce_async({x.data(), DataType::kFloat32, {int64_t(x.size())}},
                                       "mismatch.shape");
  auto good = ranktime::allreduce_async({ok.data(), DataType::kFloat32, {8}}, "mismatch.neighbour");
  ranktime::Status s = bad.wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mismatch.shape"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("shape"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[5] on rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[4] on rank"), std::string::npos) << s.message();
  ASSERT_TRUE(good.wait().ok());
  EXPECT_EQ(ok[0], size);

  std::vector<double> d(4, 1.0);
  std::vector<float> f(4, 1.0f);
  auto dtype_bad =
      rank == size - 1
          ? ranktime::allreduce_async({d.data(), DataType::kFloat64, {4}}, "mismatch.dtype")
          : ranktime::allreduce_async({f.data(), DataType::kFloat32, {4}}, "mismatch.dtype");
  s = dtype_bad.wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dtype"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("float64 on rank " + std::to_string(size - 1)), std::string::npos)
      << s.message();

  auto root_bad = ranktime::broadcast_async({f.data(), DataType::kFloat32, {4}}, rank == 0 ? 1 : 0,
                                            "mismatch.root");
  s = root_bad.wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("root rank"), std::string::npos) << s.message();

  auto out_of_range = ranktime::broadcast_async({f.data(), DataType::kFloat32, {4}}, size + 3,
                                                "mismatch.root_range");
  s = out_of_range.wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();

  auto op_bad = ranktime::allreduce_async({f.data(), DataType::kFloat32, {4}}, "mismatch.reduction",
                                          rank == 0 ? ReduceOp::kMax : ReduceOp::kSum);
  s = op_bad.wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reduction differs"), std::string::npos) << s.message();

  std::vector<float> g(3, 2.0f);  // still usable afterwards
  ASSERT_TRUE(
      ranktime::allreduce_async({g.data(), DataType::kFloat32, {3}}, "after.mismatch").wait().ok());
  EXPECT_EQ(g[2], 2.0f * size);
}

// Bad input on one rank fails that tensor everywhere instead of leaving other ranks waiting.
TEST(Errors, LocalBadInputFailsEveryRank) {
  const int rank = ranktime::rank();
  std::vector<float> x(16, 1.0f);
  struct Case {
    const char* name;
    ranktime::TensorView view;
    const char* message;
  };
  Case cases[] = {
      {"bad.null", {rank == 1 ? nullptr : x.data(), DataType::kFloat32, {16}}, "null data pointer"},
      {"bad.negative", {x.data(), DataType::kFloat32, {rank == 1 ? -4 : 16}}, "negative dimension"},
      {"bad.overflow",
       {x.data(),
        DataType::kFloat32,
        {rank == 1 ? int64_t{1} << 40 : 16, rank == 1 ? int64_t{1} << 40 : 1}},
       "overflows"},
      {"bad.misaligned",
       {reinterpret_cast<uint8_t*>(x.data()) + (rank == 1 ? 1 : 0), DataType::kFloat32, {4}},
       "not aligned"},
  };
  for (const Case& c : cases) {
    ranktime::Status s = ranktime::allreduce_async(c.view, c.name).wait();
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.name), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
  ranktime::Status s = ranktime::allreduce_async({x.data(), DataType::kFloat32, {16}}, "").wait();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.message();
  ASSERT_TRUE(
      ranktime::allreduce_async({x.data(), DataType::kFloat32, {16}}, "bad.after").wait().ok());
}

TEST(Errors, DuplicateNameWhileInFlight) {
  const int size = ranktime::size();
  const int rank = ranktime::rank();
  // A tensor completes once every rank has submitted it, so a rank's first "dup" is surely still
  // in flight when it submits the second only if some other rank submits its own first "dup"
  // later than that. Two rounds give every rank that guarantee once: in round 0 the ranks other
  // than 0 submit the pair while rank 0 holds its first back until they are done; in round 1 the
  // other way round. The rank whose turn it is not submits only the first.
  for (int round = 0; round < 2; ++round) {
    const bool my_turn = (rank == 0) == (round == 1);
    const std::string name = "dup." + std::to_string(round);
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    auto go = [&] {
      float x = 1;
      ASSERT_TRUE(
          ranktime::allreduce_async({&x, DataType::kFloat32, {1}}, name + ".go").wait().ok());
    };
    if (!my_turn) go();
    auto first = ranktime::allreduce_async({a.data(), DataType::kFloat32, {4}}, name);
    if (my_turn) {
      auto second = ranktime::allreduce_async({b.data(), DataType::kFloat32, {4}}, name);
      ASSERT_TRUE(second.ready());  // refused at submission, not after negotiation
      ranktime::Status s2 = second.wait();
      ASSERT_FALSE(s2.ok());
      EXPECT_TRUE(s2.name_in_flight());
      EXPECT_NE(s2.message().find("'" + name + "' was submitted twice while in flight"),
                std::string::npos)
          << s2.message();
      go();
    }
    ranktime::Status s1 = first.wait();
    ASSERT_TRUE(s1.ok());
    EXPECT_FALSE(s1.name_in_flight());
    EXPECT_EQ(a[0], size);
    EXPECT_EQ(b[0], 1.0f);  // the rejected request never touched its buffer
    // Once complete, the name may be used again.
    ASSERT_TRUE(ranktime::allreduce_async({b.data(), DataType::kFloat32, {4}}, name).wait().ok());
    EXPECT_EQ(b[0], size);
  }
}

TEST(Collectives, BarrierAndSynchronousReuse) {
  ASSERT_TRUE(ranktime::barrier().ok());
  float x = 1;
  for (int i = 0; i < 200; ++i) {  // the same name back to back, as a training loop does
    x = 1;
    ASSERT_TRUE(ranktime::allreduce_async({&x, DataType::kFloat32, {1}}, "reuse").wait().ok());
    ASSERT_EQ(x, ranktime::size());
  }
  ASSERT_TRUE(ranktime::barrier().ok());
}

// The synchronous calls (ranktime::allreduce, broadcast, barrier) run the runtime's steps on the
// calling thread: the same exact results as the asynchronous ones, for every dtype, reduction
// and root, sizes from one element to several chunks.
TEST(SynchronousCalls, EveryDtypeReductionAndRoot) {
  const int rank = ranktime::rank(), size = ranktime::size();
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        Buffer b(dtype, n);
        for (int64_t i = 0; i < n; ++i) b.set(i, input(op, rank, i));
        const std::string name = "sync." + label(dtype, op) + "." + std::to_string(n);
        ranktime::Status s = ranktime::allreduce({b.data(), dtype, {n}}, name, op);
        ASSERT_TRUE(s.ok()) << name << ": " << s.message();
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(b.get(i), expected(dtype, op, size, i)) << name << " element " << i;
      }
    }
  }
  for (int root = 0; root < size; ++root) {
    for (size_t k = 0; k < std::size(kAllTypes); ++k) {
      Buffer b(kAllTypes[k], 257);
      for (int64_t i = 0; i < 257; ++i) b.set(i, rank == root ? (i + k) % 50 : 99);
      ranktime::Status s = ranktime::broadcast(
          {b.data(), kAllTypes[k], {257}}, root,
          "sync.broadcast." + std::to_string(root) + "." + ranktime::dtype_name(kAllTypes[k]));
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t i = 0; i < 257; ++i) ASSERT_EQ(b.get(i), (i + k) % 50) << "root " << root;
    }
  }
}

// Two threads make synchronous calls (they take turns at the steps) while a third waits for
// asynchronous ones, which the background thread or either caller may run: every result exact.
// A lost wake-up hangs the test until ctest's timeout.
TEST(SynchronousCalls, BesideOtherThreadsSynchronousAndAsynchronousWork) {
  const int rank = ranktime::rank(), size = ranktime::size();
  const float sum = size * (size + 1) / 2.0f;
  auto synchronous = [&](const std::string& name) {
    for (int i = 0; i < 300; ++i) {
      float x = rank + 1;
      ranktime::Status s = ranktime::allreduce({&x, DataType::kFloat32, {1}}, name);
      EXPECT_TRUE(s.ok()) << name << ": " << s.message();
      EXPECT_EQ(x, sum) << name << " call " << i;
    }
  };
  std::thread first(synchronous, "sync.first"), second(synchronous, "sync.second");
  for (int round = 0; round < 100; ++round) {
    std::vector<float> x(4, rank + 1);
    std::vector<ranktime::Handle> handles;
    for (int k = 0; k < 4; ++k) {
      handles.push_back(ranktime::allreduce_async({&x[k], DataType::kFloat32, {1}},
                                                  "async." + std::to_string(k)));
    }
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(handles[k].wait().ok());
      EXPECT_EQ(x[k], sum) << "round " << round;
    }
  }
  first.join();
  second.join();
}

// Each rank in turn is 20 ms late: the others' callers spin, hand the steps back to their
// background threads, which finish the call; then a mismatch fails on every rank, naming it.
TEST(SynchronousCalls, ALateRankAndAMismatch) {
  const int rank = ranktime::rank(), size = ranktime::size();
  for (int late = 0; late < size; ++late) {
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    float x = rank + 1;
    ASSERT_TRUE(ranktime::allreduce({&x, DataType::kFloat32, {1}}, "sync.late").ok());
    ASSERT_EQ(x, size * (size + 1) / 2.0f) << "late rank " << late;
    ASSERT_TRUE(ranktime::barrier().ok());
  }
  std::vector<float> x(rank == 1 ? 5 : 4, 1.0f);
  ranktime::Status s =
      ranktime::allreduce({x.data(), DataType::kFloat32, {int64_t(x.size())}}, "sync.mismatch");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sync.mismatch"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[5] on rank 1"), std::string::npos) << s.message();
}

}  // namespace
