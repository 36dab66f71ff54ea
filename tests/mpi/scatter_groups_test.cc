// Reducescatter, alltoall and the grouped operations on real ranks over MPI, exact against the
// reference of reference.h: every dtype and reduction, even and uneven splits of dimension 0,
// fused (many reducescatters in flight; groups, fused whatever the threshold) and alone; a wrong
// call failing at once on its rank and at wait() on the others; a group failing as a whole; all of
// it over process sets too (one that leaves rank 0 out, overlapping ones, with the same names in
// flight at once); reducescatter and alltoall refused while a rank has joined, as in Horovod.
// ctest runs it at 2, 3 and 4 ranks and with several fusion thresholds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/ranktime.h"
#include "reference.h"

namespace {

using ranktime::DataType;
using ranktime::ReduceOp;
using namespace ranktime_test;

// Reducescatter's split (Horovod's): dim0 / size rows each, the first dim0 % size ranks one more.
int64_t rows_of(int64_t dim0, int size, int r) { return dim0 / size + (r < dim0 % size ? 1 : 0); }
int64_t first_row_of(int64_t dim0, int size, int r) {
  return r * (dim0 / size) + std::min<int64_t>(r, dim0 % size);
}

Buffer output_of(const ranktime::Handle& h, DataType dtype) {
  Buffer out(dtype, static_cast<int64_t>(h.output().size() / ranktime::dtype_size(dtype)));
  if (!h.output().empty()) std::memcpy(out.data(), h.output().data(), h.output().size());
  return out;
}

TEST(Reducescatter, EveryDtypeReductionAndSplitInFlightTogether) {
  const int rank = ranktime::rank(), size = ranktime::size();
  constexpr int64_t kCols = 5;
  struct Item {
    DataType dtype;
    ReduceOp op;
    int64_t rows;
    Buffer in;
    ranktime::Handle handle;
  };
  std::vector<Item> items;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (int64_t rows : {int64_t{3} * size, int64_t{3} * size + 2, int64_t{1}}) {
        items.push_back({dtype, op, rows, Buffer(dtype, rows * kCols), {}});
      }
    }
  }
  for (Item& it : items) {
    for (int64_t i = 0; i < it.in.size(); ++i) it.in.set(i, input(it.op, rank, i));
    it.handle = ranktime::reducescatter_async(
        {it.in.data(), it.dtype, {it.rows, kCols}},
        "rs." + label(it.dtype, it.op) + "." + std::to_string(it.rows), it.op);
  }
  for (Item& it : items) {
    const std::string what = label(it.dtype, it.op) + " rows " + std::to_string(it.rows);
    ranktime::Status s = it.handle.wait();
    ASSERT_TRUE(s.ok()) << what << ": " << s.message();
    const int64_t mine = rows_of(it.rows, size, rank);
    ASSERT_EQ(it.handle.output_shape(), (std::vector<int64_t>{mine, kCols})) << what;
    Buffer out = output_of(it.handle, it.dtype);
    ASSERT_EQ(out.size(), mine * kCols) << what;
    const int64_t first = first_row_of(it.rows, size, rank) * kCols;
    for (int64_t k = 0; k < out.size(); ++k) {
      ASSERT_EQ(out.get(k), expected(it.dtype, it.op, size, first + k)) << what << " @" << k;
    }
  }
}

TEST(Alltoall, UnevenSplitsEveryDtype) {
  const int rank = ranktime::rank(), size = ranktime::size();
  const auto value = [](int from, int to, int64_t k) {
    return double((from * 5 + to * 3 + k) % 60);
  };
  for (DataType dtype : kAllTypes) {
    std::vector<int32_t> splits;
    std::vector<double> send;
    for (int q = 0; q < size; ++q) {
      splits.push_back((rank * 2 + q) % 4);  // 0 to 3 rows of 3 columns
      for (int64_t k = 0; k < splits.back() * 3; ++k) send.push_back(value(rank, q, k));
    }
    Buffer in(dtype, static_cast<int64_t>(send.size()));
    for (size_t i = 0; i < send.size(); ++i) in.set(static_cast<int64_t>(i), send[i]);
    ranktime::Handle h =
        ranktime::alltoall_async({in.data(), dtype, {int64_t(send.size() / 3), 3}}, splits,
                                 std::string("a2a.") + ranktime::dtype_name(dtype));
    ranktime::Status s = h.wait();
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<int32_t> received;
    std::vector<double> want;
    for (int q = 0; q < size; ++q) {
      received.push_back((q * 2 + rank) % 4);
      for (int64_t k = 0; k < received.back() * 3; ++k) want.push_back(value(q, rank, k));
    }
    EXPECT_EQ(h.received_splits(), received);
    ASSERT_EQ(h.output_shape(), (std::vector<int64_t>{int64_t(want.size() / 3), 3}));
    Buffer out = output_of(h, dtype);
    for (size_t k = 0; k < want.size(); ++k)
      ASSERT_EQ(out.get(static_cast<int64_t>(k)), want[k]) << ranktime::dtype_name(dtype);
  }
}

TEST(Alltoall, WrongSplitsFailAtOnceHereAndAtWaitElsewhere) {
  const int rank = ranktime::rank(), size = ranktime::size();
  std::vector<float> x(size + 1, 1.0f);
  // Without splits, size + 1 rows do not divide: every rank's own call is wrong.
  ranktime::Handle h =
      ranktime::alltoall_async({x.data(), DataType::kFloat32, {size + 1}}, {}, "a2a.indivisible");
  ASSERT_TRUE(h.ready());
  EXPECT_TRUE(h.wait().invalid_argument());
  EXPECT_NE(h.wait().message().find("do not divide among " + std::to_string(size) + " ranks"),
            std::string::npos)
      << h.wait().message();
  // Only the last rank's splits are too many: the others hear it from rank 0.
  std::vector<int32_t> splits(rank == size - 1 ? size + 1 : size, 1);
  ranktime::Status s =
      ranktime::alltoall_async({x.data(), DataType::kFloat32, {size + 1}}, splits, "a2a.count")
          .wait();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.invalid_argument(), rank == size - 1);
  EXPECT_NE(
      s.message().find(std::to_string(size + 1) + " splits for " + std::to_string(size) + " ranks"),
      std::string::npos)
      << s.message();
  ASSERT_TRUE(ranktime::barrier().ok());  // both names free again on every rank after this
}

// Every group operation, every dtype and reduction, with a second dtype in each group: a group
// runs as one fused collective per dtype whatever the fusion threshold (ctest varies it).
TEST(Groups, AllreduceAllgatherReducescatterExactForEveryDtypeAndReduction) {
  const int rank = ranktime::rank(), size = ranktime::size();
  constexpr int kTensors = 4;
  for (DataType main : kAllTypes) {
    const DataType other = main == DataType::kFloat16 ? DataType::kInt32 : DataType::kFloat16;
    const auto dtype_of = [&](int t) { return t % 2 ? other : main; };
    for (ReduceOp op : kAllOps) {
      std::vector<Buffer> sums, scatters, gathers;
      for (int t = 0; t < kTensors; ++t) {
        const int64_t n = 2 * size + t;
        sums.emplace_back(dtype_of(t), n);
        scatters.emplace_back(dtype_of(t), n);
        gathers.emplace_back(dtype_of(t), rank + t);
        for (int64_t i = 0; i < n; ++i) {
          sums.back().set(i, input(op, rank, i));
          scatters.back().set(i, input(op, rank, i));
        }
        for (int64_t i = 0; i < rank + t; ++i) gathers.back().set(i, rank * 10 + t);
      }
      std::vector<ranktime::TensorView> sum_views, scatter_views, gather_views;
      for (int t = 0; t < kTensors; ++t) {
        sum_views.push_back({sums[t].data(), dtype_of(t), {sums[t].size()}});
        scatter_views.push_back({scatters[t].data(), dtype_of(t), {scatters[t].size()}});
        gather_views.push_back({gathers[t].data(), dtype_of(t), {gathers[t].size()}});
      }
      const std::string suffix = label(main, op);
      auto sum = ranktime::grouped_allreduce_async(sum_views, "g.sum." + suffix, op);
      auto scatter = ranktime::grouped_reducescatter_async(scatter_views, "g.rs." + suffix, op);
      auto gather = ranktime::grouped_allgather_async(gather_views, "g.ag." + suffix);
      for (int t = 0; t < kTensors; ++t) {
        const DataType dtype = dtype_of(t);
        const std::string what = suffix + " tensor " + std::to_string(t);
        ASSERT_TRUE(sum[t].wait().ok()) << what << ": " << sum[t].wait().message();
        ASSERT_TRUE(scatter[t].wait().ok()) << what << ": " << scatter[t].wait().message();
        ASSERT_TRUE(gather[t].wait().ok()) << what << ": " << gather[t].wait().message();
        for (int64_t i = 0; i < sums[t].size(); ++i)
          ASSERT_EQ(sums[t].get(i), expected(dtype, op, size, i)) << what;
        Buffer part = output_of(scatter[t], dtype);
        const int64_t n = scatters[t].size(), first = first_row_of(n, size, rank);
        ASSERT_EQ(part.size(), rows_of(n, size, rank)) << what;
        for (int64_t k = 0; k < part.size(); ++k)
          ASSERT_EQ(part.get(k), expected(dtype, op, size, first + k)) << what;
        Buffer all = output_of(gather[t], dtype);
        int64_t at = 0;
        for (int q = 0; q < size; ++q) {
          for (int64_t k = 0; k < q + t; ++k) ASSERT_EQ(all.get(at++), q * 10 + t) << what;
        }
        ASSERT_EQ(at, all.size()) << what;
      }
    }
  }
}

TEST(Groups, OneBadTensorFailsTheWholeGroupEverywhere) {
  const int rank = ranktime::rank(), size = ranktime::size();
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  std::vector<double> c(4, 1.0);
  const DataType c_type = rank == size - 1 ? DataType::kFloat64 : DataType::kFloat32;
  auto handles =
      ranktime::grouped_allreduce_async({{a.data(), DataType::kFloat32, {4}},
                                         {c.data(), c_type, {c_type == DataType::kFloat64 ? 4 : 8}},
                                         {b.data(), DataType::kFloat32, {4}}},
                                        "g.bad");
  for (const ranktime::Handle& h : handles) {
    ranktime::Status s = h.wait();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("group 'g.bad' failed: tensor 'g.bad_2of3': dtype differs"),
              std::string::npos)
        << s.message();
  }
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(b[0], 1.0f);
  // The runtime and the names go on.
  handles = ranktime::grouped_allreduce_async({{a.data(), DataType::kFloat32, {4}},
                                               {b.data(), DataType::kFloat32, {4}},
                                               {b.data() + 2, DataType::kFloat32, {2}}},
                                              "g.bad");
  for (const ranktime::Handle& h : handles) ASSERT_TRUE(h.wait().ok()) << h.wait().message();
  EXPECT_EQ(a[3], float(size));
}

// The process sets the set tests run over, for a job of `size` ranks: a set of one rank that is not
// rank 0 (which coordinates it without being in it); from 3 ranks on, two more that overlap in
// the last rank, one without rank 0 (of size - 1 ranks: uneven splits at 4).
std::vector<std::vector<int>> test_sets(int size) {
  if (size == 2) return {{1}, {0}};
  std::vector<int> tail;
  for (int r = 1; r < size; ++r) tail.push_back(r);
  return {{1}, {0, size - 1}, tail};
}

// Every operation of this file over each set at once, the same names in every set (names are per
// set), submitted in a different order on odd ranks; every result exact over the set's members;
// twice, so that the second round goes through the response cache.
TEST(ProcessSets, ReducescatterAlltoallAndGroupsOverOverlappingSetsExact) {
  const int rank = ranktime::rank();
  const std::vector<std::vector<int>> sets = test_sets(ranktime::size());
  std::vector<int> ids;
  for (const auto& ranks : sets) ids.push_back(ranktime::add_process_set(ranks));
  constexpr int64_t kCols = 3;
  struct Scatter {
    DataType dtype;
    ReduceOp op;
    int64_t rows;
    Buffer in;
    ranktime::Handle handle;
  };
  struct Exchange {
    DataType dtype;
    std::vector<double> want;
    std::vector<int32_t> received;
    Buffer in;
    ranktime::Handle handle;
  };
  struct InSet {
    size_t set;
    std::vector<Scatter> scatters;
    std::vector<Exchange> exchanges;
    std::vector<Buffer> sums, parts;
    std::vector<ranktime::Handle> sum, part, gather;
  };
  const auto value = [](int from, int to, int64_t k) {
    return double((from * 5 + to * 3 + k) % 60);
  };
  const auto group_dtype = [](int t) { return t % 2 ? DataType::kInt32 : DataType::kFloat32; };
  for (int round = 0; round < 2; ++round) {  // the second through the response cache
    std::vector<InSet> work;
    for (size_t s = 0; s < sets.size(); ++s) {
      if (std::find(sets[s].begin(), sets[s].end(), rank) != sets[s].end()) work.push_back({s});
    }
    if (rank % 2) std::reverse(work.begin(), work.end());
    for (InSet& w : work) {
      const std::vector<int>& ranks = sets[w.set];
      const int n = static_cast<int>(ranks.size()), me = ranktime::process_set_rank(ids[w.set]);
      ASSERT_EQ(ranks[me], rank);
      for (DataType dtype : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          for (int64_t rows : {int64_t{3} * n, int64_t{3} * n + 2}) {
            w.scatters.push_back({dtype, op, rows, Buffer(dtype, rows * kCols), {}});
          }
        }
        // Alltoall: splits[q] rows of 3 to the set's q-th member, 0 to 3 of them.
        std::vector<int32_t> splits;
        std::vector<double> send;
        Exchange e{dtype, {}, {}, Buffer(dtype, 1), {}};
        for (int q = 0; q < n; ++q) {
          splits.push_back((me * 2 + q) % 4);
          for (int64_t k = 0; k < splits.back() * 3; ++k) send.push_back(value(rank, ranks[q], k));
          e.received.push_back((q * 2 + me) % 4);
          for (int64_t k = 0; k < e.received.back() * 3; ++k)
            e.want.push_back(value(ranks[q], rank, k));
        }
        e.in = Buffer(dtype, static_cast<int64_t>(send.size()) + 1);
        for (size_t i = 0; i < send.size(); ++i) e.in.set(static_cast<int64_t>(i), send[i]);
        e.handle =
            ranktime::alltoall_async({e.in.data(), dtype, {int64_t(send.size() / 3), 3}}, splits,
                                     std::string("a2a.") + ranktime::dtype_name(dtype), ids[w.set]);
        w.exchanges.push_back(std::move(e));
      }
      for (Scatter& it : w.scatters) {
        for (int64_t i = 0; i < it.in.size(); ++i) it.in.set(i, input(it.op, rank, i));
        it.handle = ranktime::reducescatter_async(
            {it.in.data(), it.dtype, {it.rows, kCols}},
            "rs." + label(it.dtype, it.op) + "." + std::to_string(it.rows), it.op, ids[w.set]);
      }
      std::vector<ranktime::TensorView> sum_views, part_views, gather_views;
      for (int t = 0; t < 4; ++t) {
        w.sums.emplace_back(group_dtype(t), 2 * n + t);
        w.parts.emplace_back(group_dtype(t), 2 * n + t);
        for (int64_t i = 0; i < 2 * n + t; ++i) {
          w.sums.back().set(i, input(ReduceOp::kSum, rank, i));
          w.parts.back().set(i, input(ReduceOp::kAverage, rank, i));
        }
      }
      for (int t = 0; t < 4; ++t) {
        sum_views.push_back({w.sums[t].data(), group_dtype(t), {w.sums[t].size()}});
        part_views.push_back({w.parts[t].data(), group_dtype(t), {w.parts[t].size()}});
        // Allgather: `me + t` rows of this rank's number.
        gather_views.push_back({w.parts[t].data(), group_dtype(t), {me + t}});
      }
      w.sum = ranktime::grouped_allreduce_async(sum_views, "g.sum", ReduceOp::kSum, ids[w.set]);
      w.part =
          ranktime::grouped_reducescatter_async(part_views, "g.rs", ReduceOp::kAverage, ids[w.set]);
      w.gather = ranktime::grouped_allgather_async(gather_views, "g.ag", ids[w.set]);
    }
    for (InSet& w : work) {
      const std::vector<int>& ranks = sets[w.set];
      const int n = static_cast<int>(ranks.size()), me = ranktime::process_set_rank(ids[w.set]);
      const std::string where = "set " + std::to_string(ids[w.set]) + " of " + std::to_string(n);
      for (Scatter& it : w.scatters) {
        const std::string what =
            where + " " + label(it.dtype, it.op) + " rows " + std::to_string(it.rows);
        ranktime::Status s = it.handle.wait();
        ASSERT_TRUE(s.ok()) << what << ": " << s.message();
        const int64_t mine = rows_of(it.rows, n, me);
        ASSERT_EQ(it.handle.output_shape(), (std::vector<int64_t>{mine, kCols})) << what;
        Buffer out = output_of(it.handle, it.dtype);
        const int64_t first = first_row_of(it.rows, n, me) * kCols;
        for (int64_t k = 0; k < out.size(); ++k) {
          ASSERT_EQ(out.get(k), expected_over(it.dtype, it.op, ranks, first + k)) << what;
        }
      }
      for (Exchange& e : w.exchanges) {
        const std::string what = where + " alltoall " + ranktime::dtype_name(e.dtype);
        ranktime::Status s = e.handle.wait();
        ASSERT_TRUE(s.ok()) << what << ": " << s.message();
        EXPECT_EQ(e.handle.received_splits(), e.received) << what;
        Buffer out = output_of(e.handle, e.dtype);
        ASSERT_EQ(out.size(), static_cast<int64_t>(e.want.size())) << what;
        for (size_t k = 0; k < e.want.size(); ++k)
          ASSERT_EQ(out.get(static_cast<int64_t>(k)), e.want[k]) << what;
      }
      for (int t = 0; t < 4; ++t) {
        const std::string what = where + " group tensor " + std::to_string(t);
        ASSERT_TRUE(w.sum[t].wait().ok()) << what << ": " << w.sum[t].wait().message();
        ASSERT_TRUE(w.part[t].wait().ok()) << what << ": " << w.part[t].wait().message();
        ASSERT_TRUE(w.gather[t].wait().ok()) << what << ": " << w.gather[t].wait().message();
        for (int64_t i = 0; i < w.sums[t].size(); ++i)
          ASSERT_EQ(w.sums[t].get(i), expected_over(group_dtype(t), ReduceOp::kSum, ranks, i))
              << what;
        Buffer part = output_of(w.part[t], group_dtype(t));
        const int64_t rows = 2 * n + t, first = first_row_of(rows, n, me);
        ASSERT_EQ(part.size(), rows_of(rows, n, me)) << what;
        for (int64_t k = 0; k < part.size(); ++k)
          ASSERT_EQ(part.get(k),
                    expected_over(group_dtype(t), ReduceOp::kAverage, ranks, first + k))
              << what;
        // Every member's first rows of its (unchanged) input, in the set's order.
        Buffer all = output_of(w.gather[t], group_dtype(t));
        int64_t at = 0;
        for (int q = 0; q < n; ++q) {
          for (int64_t k = 0; k < q + t; ++k)
            ASSERT_EQ(all.get(at++), input(ReduceOp::kAverage, ranks[q], k)) << what;
        }
        ASSERT_EQ(at, all.size()) << what;
      }
    }
  }
  for (size_t s = 0; s < sets.size(); ++s) {  // the same order on every rank
    if (std::find(sets[s].begin(), sets[s].end(), rank) != sets[s].end()) {
      ASSERT_TRUE(ranktime::barrier(ids[s]).ok());
    }
  }
  for (int id : ids) EXPECT_TRUE(ranktime::remove_process_set(id));
}

// Horovod's rule: while a rank has joined, reducescatter and alltoall (as allgather and
// broadcast) fail on every rank that submitted them; the joined rank takes part in a group's
// allreduce with zeros. Rank 0 joins first, from another thread; the others join after.
TEST(Join, ReducescatterAndAlltoallFailWhileARankHasJoined) {
  const int rank = ranktime::rank(), size = ranktime::size();
  int last = -1;
  ranktime::Status joined;
  std::thread joiner;
  if (rank == 0) {
    joiner = std::thread([&] { joined = ranktime::join(ranktime::kCpuDevice, &last); });
  } else {
    std::vector<float> x(size * 2, 1.0f), y(size, 2.0f);
    std::vector<int32_t> z(3, rank);
    ranktime::Status rs =
        ranktime::reducescatter_async({x.data(), DataType::kFloat32, {size * 2}}, "join.rs").wait();
    EXPECT_NE(rs.message().find("tensor 'join.rs': reducescatter is not supported while ranks "
                                "have joined (rank 0 called join())"),
              std::string::npos)
        << rs.message();
    ranktime::Status a2a =
        ranktime::alltoall_async({x.data(), DataType::kFloat32, {size * 2}}, {}, "join.a2a").wait();
    EXPECT_NE(a2a.message().find("alltoall is not supported while ranks have joined"),
              std::string::npos)
        << a2a.message();
    auto sums = ranktime::grouped_allreduce_async(
        {{y.data(), DataType::kFloat32, {size}}, {z.data(), DataType::kInt32, {3}}}, "join.g");
    for (const ranktime::Handle& h : sums) ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    EXPECT_EQ(y[0], 2.0f * (size - 1)) << "rank 0 added zeros";
    EXPECT_EQ(z[0], size * (size - 1) / 2);
    joined = ranktime::join(ranktime::kCpuDevice, &last);
  }
  if (joiner.joinable()) joiner.join();
  ASSERT_TRUE(joined.ok()) << joined.message();
  EXPECT_GT(last, 0) << "a rank that joined after rank 0";
  ASSERT_TRUE(ranktime::barrier().ok());
}

}  // namespace
