// Reducescatter, alltoall and grouped operations through the real negotiation, with ranks as
// threads (thread_world.h): exact results for every dtype and reduction at 1 to 5 ranks, even and
// uneven splits of dimension 0, groups (two dtypes, over the fusion threshold) and failing as a
// whole, a call's wrong arguments failing at once on its rank and at wait() on the others, and the
// timeline's names for them, checked by the trace checker.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/rows.h"
#include "ranktime/half.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"
#include "thread_world.h"
#include "workload.h"

namespace ranktime::testing {
namespace {

using ::testing::HasSubstr;

constexpr DataType kDtypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

// A tensor of `dtype` holding `values` (small integers: exact in every dtype).
struct Tensor {
  DataType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  Tensor(DataType d, std::vector<int64_t> s, const std::vector<double>& values)
      : dtype(d), shape(std::move(s)), bytes(values.size() * dtype_size(d) + 8) {
    for (size_t i = 0; i < values.size(); ++i)
      examples::set_element(values[i], reinterpret_cast<uint8_t*>(&bytes[i * dtype_size(d)]), d);
  }
  TensorView view() { return {bytes.data(), dtype, shape}; }
};

std::vector<double> values_of(const std::vector<std::byte>& bytes, DataType dtype) {
  std::vector<double> out(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] =
        examples::element(reinterpret_cast<const uint8_t*>(&bytes[i * dtype_size(dtype)]), dtype);
  return out;
}

// Rank r's element i for a reduction `op`: one rank's 2 per element for products, else 0..4.
double input(int r, int64_t i, int size, ReduceOp op) {
  if (op == ReduceOp::kProduct) return (i + r) % size == 0 ? 2 : 1;
  return static_cast<double>((r * 7 + i) % 5);
}

double reduced(int64_t i, int size, ReduceOp op, DataType dtype) {
  double acc = input(0, i, size, op);
  for (int r = 1; r < size; ++r) {
    const double v = input(r, i, size, op);
    acc = op == ReduceOp::kMin       ? std::min(acc, v)
          : op == ReduceOp::kMax     ? std::max(acc, v)
          : op == ReduceOp::kProduct ? acc * v
                                     : acc + v;
  }
  if (op != ReduceOp::kAverage) return acc;
  switch (dtype) {
    case DataType::kFloat16:
      return half_to_float(float_to_half(static_cast<float>(acc) / size));
    case DataType::kBFloat16:
      return bfloat16_to_float(float_to_bfloat16(static_cast<float>(acc) / size));
    case DataType::kFloat32:
      return static_cast<float>(acc) / static_cast<float>(size);
    case DataType::kFloat64:
      return acc / size;
    default:
      return static_cast<double>(static_cast<int64_t>(acc) / size);
  }
}

class Ranks : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(OneToFive, Ranks, ::testing::Values(1, 2, 3, 5),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "_ranks";
                         });

// Every dtype x reduction, with dimension 0 even (2 x size rows), uneven (2 x size + 1: the first
// rank gets a row more) and smaller than the ranks (some get no row), all in flight at once.
TEST_P(Ranks, ReducescatterIsExactForEveryDtypeReductionAndSplit) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    constexpr int64_t kCols = 3;
    struct Case {
      DataType dtype;
      ReduceOp op;
      int64_t rows;
      Tensor tensor;
      Handle handle;
    };
    std::vector<Case> cases;
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (int64_t rows : {int64_t{2} * size, int64_t{2} * size + 1, int64_t{size - 1}}) {
          std::vector<double> values;
          for (int64_t i = 0; i < rows * kCols; ++i) values.push_back(input(r, i, size, op));
          cases.push_back({dtype, op, rows, Tensor(dtype, {rows, kCols}, values), {}});
        }
      }
    }
    for (Case& c : cases) {
      c.handle = rt.submit(OpType::kReducescatter, c.tensor.view(),
                           std::string("rs.") + dtype_name(c.dtype) + "." + reduce_op_name(c.op) +
                               "." + std::to_string(c.rows),
                           c.op);
    }
    for (Case& c : cases) {
      const std::string what = std::string(dtype_name(c.dtype)) + " " + reduce_op_name(c.op) +
                               ", " + std::to_string(c.rows) + " rows, rank " + std::to_string(r);
      ASSERT_TRUE(c.handle.wait().ok()) << what << ": " << c.handle.wait().message();
      const int64_t mine = scatter_rows(c.rows, size, r);
      EXPECT_EQ(c.handle.output_shape(), (std::vector<int64_t>{mine, kCols})) << what;
      const std::vector<double> got = values_of(c.handle.output(), c.dtype);
      ASSERT_EQ(got.size(), static_cast<size_t>(mine * kCols)) << what;
      const int64_t first = scatter_first_row(c.rows, size, r) * kCols;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k], reduced(first + static_cast<int64_t>(k), size, c.op, c.dtype))
            << what << ", element " << k;
      }
    }
  });
}

// Rank r sends (r + q) % 3 rows to rank q (some none), 2 columns, every dtype; one rank keeps
// rows back (splits summing to less than dimension 0, as Horovod allows); equal splits too.
TEST_P(Ranks, AlltoallDeliversEachRanksRowsInRankOrder) {
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    const auto row_value = [](int from, int to, int k, int col) {
      return static_cast<double>((from * 7 + to * 3 + k) % 50 + col);
    };
    for (DataType dtype : kDtypes) {
      std::vector<int32_t> splits;
      std::vector<double> values;
      for (int q = 0; q < size; ++q) {
        splits.push_back((r + q) % 3);
        for (int k = 0; k < splits.back(); ++k) {
          for (int col = 0; col < 2; ++col) values.push_back(row_value(r, q, k, col));
        }
      }
      const int64_t kept_back = r == 0 ? 2 : 0;
      for (int64_t k = 0; k < kept_back * 2; ++k) values.push_back(99);
      Tensor t(dtype, {static_cast<int64_t>(values.size() / 2), 2}, values);
      Handle h = rt.submit_alltoall(t.view(), splits, std::string("a2a.") + dtype_name(dtype));
      ASSERT_TRUE(h.wait().ok()) << h.wait().message();
      std::vector<double> want;
      std::vector<int32_t> received;
      for (int q = 0; q < size; ++q) {
        received.push_back((q + r) % 3);
        for (int k = 0; k < received.back(); ++k) {
          for (int col = 0; col < 2; ++col) want.push_back(row_value(q, r, k, col));
        }
      }
      EXPECT_EQ(h.received_splits(), received) << dtype_name(dtype);
      EXPECT_EQ(h.output_shape(), (std::vector<int64_t>{int64_t(want.size() / 2), 2}));
      EXPECT_EQ(values_of(h.output(), dtype), want) << dtype_name(dtype) << " on rank " << r;
    }
    // Equal split: dimension 0 divided by the ranks.
    std::vector<double> values;
    for (int q = 0; q < size; ++q) values.insert(values.end(), {double(r), double(q)});
    Tensor t(DataType::kInt32, {size, 2}, values);
    Handle h = rt.submit_alltoall(t.view(), {}, "a2a.equal");
    ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    std::vector<double> want;
    for (int q = 0; q < size; ++q) want.insert(want.end(), {double(q), double(r)});
    EXPECT_EQ(values_of(h.output(), DataType::kInt32), want);
    EXPECT_EQ(h.received_splits(), std::vector<int32_t>(size, 1));
  });
}

TEST_P(Ranks, GroupedOperationsAreExactAndCompleteTogether) {
  InProcessJob job(GetParam(), [](int) {
    return config_of({{"RANKTIME_FUSION_THRESHOLD", "64"}});  // a group ignores the threshold
  });
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    std::vector<Tensor> sums, gathers, scatters;
    for (int t = 0; t < 4; ++t) {
      const DataType dtype = t % 2 ? DataType::kFloat64 : DataType::kInt32;  // two dtypes
      std::vector<double> v;
      for (int64_t i = 0; i < 2 * size + t; ++i) v.push_back(input(r, i, size, ReduceOp::kSum));
      sums.emplace_back(dtype, std::vector<int64_t>{int64_t(v.size())}, v);
      scatters.emplace_back(dtype, std::vector<int64_t>{int64_t(v.size())}, v);
      gathers.emplace_back(dtype, std::vector<int64_t>{r + t}, std::vector<double>(r + t, r));
    }
    const auto views = [](std::vector<Tensor>& ts) {
      std::vector<TensorView> out;
      for (Tensor& t : ts) out.push_back(t.view());
      return out;
    };
    std::vector<Handle> sum = rt.submit_group(OpType::kAllreduce, views(sums), "sums");
    std::vector<Handle> gather = rt.submit_group(OpType::kAllgather, views(gathers), "gathers");
    std::vector<Handle> scatter =
        rt.submit_group(OpType::kReducescatter, views(scatters), "scatters", ReduceOp::kAverage);
    for (const auto* handles : {&sum, &gather, &scatter}) {
      ASSERT_EQ(handles->size(), 4u);
      for (const Handle& h : *handles) ASSERT_TRUE(h.wait().ok()) << h.wait().message();
    }
    for (int t = 0; t < 4; ++t) {
      const DataType dtype = sums[t].dtype;
      const std::vector<double> got = values_of(sums[t].bytes, dtype);
      for (int64_t i = 0; i < 2 * size + t; ++i) {
        EXPECT_EQ(got[i], reduced(i, size, ReduceOp::kSum, dtype)) << "sums " << t << "." << i;
      }
      std::vector<double> want;
      for (int q = 0; q < size; ++q) want.insert(want.end(), q + t, q);
      EXPECT_EQ(values_of(gather[t].output(), dtype), want) << "gathers " << t;
      const int64_t dim0 = 2 * size + t, first = scatter_first_row(dim0, size, r);
      const std::vector<double> part = values_of(scatter[t].output(), dtype);
      ASSERT_EQ(part.size(), static_cast<size_t>(scatter_rows(dim0, size, r)));
      for (size_t k = 0; k < part.size(); ++k) {
        EXPECT_EQ(part[k], reduced(first + int64_t(k), size, ReduceOp::kAverage, dtype))
            << "scatters " << t << "." << k;
      }
    }
  });
}

TEST_P(Ranks, AMismatchInOneTensorFailsTheWholeGroupOnEveryRank) {
  if (GetParam() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<float> a(4, 1), b(4, 1), c(r == 1 ? 5 : 4, 1);
    std::vector<Handle> hs = rt.submit_group(OpType::kAllreduce,
                                             {{a.data(), DataType::kFloat32, {4}},
                                              {b.data(), DataType::kFloat32, {4}},
                                              {c.data(), DataType::kFloat32, {int64_t(c.size())}}},
                                             "bad");
    for (const Handle& h : hs) {
      const Status s = h.wait();
      EXPECT_FALSE(s.ok());
      EXPECT_THAT(s.message(), HasSubstr("group 'bad' failed: tensor 'bad_3of3': shape differs "
                                         "between ranks"));
      EXPECT_THAT(s.message(), HasSubstr("[5] on rank 1"));
    }
    EXPECT_EQ(a[0], 1.0f);  // untouched: nothing of the group ran
    // The runtime carries on, with the same names.
    std::vector<float> d(4, 1), e(4, 1), f(4, 1);
    hs = rt.submit_group(OpType::kAllreduce,
                         {{d.data(), DataType::kFloat32, {4}},
                          {e.data(), DataType::kFloat32, {4}},
                          {f.data(), DataType::kFloat32, {4}}},
                         "bad");
    for (const Handle& h : hs) EXPECT_TRUE(h.wait().ok()) << h.wait().message();
    EXPECT_EQ(f[3], rt.size());
  });
}

// Splits that do not fit on one rank: that rank's handle fails at once (InvalidArgument), the
// others' when rank 0 has heard from everyone, naming the rank and what was wrong.
TEST_P(Ranks, WrongSplitsFailAtOnceOnTheirRankAndAtWaitOnTheOthers) {
  if (GetParam() < 2) GTEST_SKIP() << "needs a rank whose call is right";
  InProcessJob job(GetParam());
  job.on_every_rank([&](int r, Runtime& rt) {
    const int size = rt.size();
    std::vector<float> x(size, 1);
    std::vector<int32_t> splits(size, 1);
    if (r == 1) splits[0] = 5;  // sums to more than dimension 0
    Handle h = rt.submit_alltoall({x.data(), DataType::kFloat32, {size}}, splits, "a2a.bad");
    if (r == 1) {
      ASSERT_TRUE(h.ready());
      EXPECT_TRUE(h.wait().invalid_argument());
      EXPECT_EQ(h.wait().message(),
                "tensor 'a2a.bad': alltoall splits sum to " + std::to_string(size + 4) +
                    " rows, more than dimension 0 (" + std::to_string(size) + ")");
    } else {
      const Status s = h.wait();
      EXPECT_FALSE(s.ok());
      EXPECT_FALSE(s.invalid_argument());
      EXPECT_THAT(s.message(), HasSubstr("tensor 'a2a.bad': rank 1: alltoall splits sum to"));
    }
    // The name is free again once rank 0's answer came, on every rank.
    Handle again;
    for (int tries = 0; tries < 1000; ++tries) {
      again = rt.submit_alltoall({x.data(), DataType::kFloat32, {size}}, {}, "a2a.bad");
      if (!again.ready() || !again.wait().name_in_flight()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(again.wait().ok()) << again.wait().message();
  });
}

// The timeline names each operation: NEGOTIATE_<OP> on the negotiate lane, <OP> with its MPI_<OP>
// sub-phase on each rank's lane; the file passes the checker.
TEST(ScatterTimeline, NamesPassTheChecker) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("ranktime_scatter_timeline_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  {
    InProcessJob job(3, [&](int) { return config_of({{"TIMELINE_FILENAME", path}}); });
    job.on_every_rank([&](int r, Runtime& rt) {
      std::vector<float> x(6, float(r));
      ASSERT_TRUE(rt.submit(OpType::kReducescatter, {x.data(), DataType::kFloat32, {6}}, "tl.rs")
                      .wait()
                      .ok());
      ASSERT_TRUE(
          rt.submit_alltoall({x.data(), DataType::kFloat32, {6}}, {}, "tl.a2a").wait().ok());
      for (const Handle& h : rt.submit_group(
               OpType::kReducescatter,
               {{x.data(), DataType::kFloat32, {6}}, {x.data(), DataType::kFloat32, {3}}},
               "tl.group"))
        ASSERT_TRUE(h.wait().ok());
    });
  }
  std::set<std::string> names;
  timeline::TraceChecker checker;
  const timeline::TraceReadResult result =
      timeline::read_trace_file(path, [&](const timeline::TraceEvent& e) {
        checker.add(e);
        names.insert(e.name);
        return true;
      });
  checker.finish(result);
  std::string violations;
  for (const auto& v : checker.violations()) violations += v.message + "\n";
  EXPECT_TRUE(checker.ok() && checker.has_run_end()) << violations;
  for (const char* name : {"NEGOTIATE_REDUCESCATTER", "REDUCESCATTER", "MPI_REDUCESCATTER",
                           "NEGOTIATE_ALLTOALL", "ALLTOALL", "MPI_ALLTOALL"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ranktime::testing
