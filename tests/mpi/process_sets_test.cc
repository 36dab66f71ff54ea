// Process sets and join through the public C++ API on real ranks (3 and 4): overlapping sets
// with the same names in flight at once (names are per set), every operation exact over its set's
// communicator; the queries; refusals naming the set and its ranks; join with uneven numbers of
// steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ranktime/ranktime.h"

namespace {

using ranktime::DataType;
using ranktime::ReduceOp;

bool has(const std::vector<int>& ranks, int r) {
  return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

TEST(ProcessSets, OverlappingSetsRunEveryOperationExactly) {
  const int n = ranktime::size(), r = ranktime::rank();
  const std::vector<std::vector<int>> sets = {{0, 1}, {n - 1, 1}, {0, n - 1}};
  std::vector<int> ids;
  for (const auto& ranks : sets) ids.push_back(ranktime::add_process_set(ranks));
  ASSERT_EQ(ranktime::process_set_ids(), (std::vector<int>{0, ids[0], ids[1], ids[2]}));
  EXPECT_EQ(ranktime::process_set_ranks(ids[1]), (std::vector<int>{1, n - 1}));  // sorted
  EXPECT_EQ(ranktime::process_set_size(ids[2]), 2);
  EXPECT_EQ(ranktime::process_set_rank(ids[1]), r == 1 ? 0 : r == n - 1 ? 1 : -1);
  EXPECT_EQ(ranktime::process_set_included(ids[0]), r <= 1);
  for (int round = 0; round < 3; ++round) {
    struct Op {
      size_t set;
      std::vector<double> sum, bcast;
      std::vector<int32_t> rows;
      ranktime::Handle a, b, g;
    };
    std::vector<Op> ops;
    for (size_t s = 0; s < sets.size(); ++s) {
      if (has(sets[s], r)) ops.push_back({s, std::vector<double>(7, r + 0.5), {}, {}, {}, {}, {}});
    }
    std::reverse(ops.begin() + (r % 2), ops.end());  // not the same order on every rank
    for (Op& op : ops) {
      const int id = ids[op.set];
      op.bcast.assign(3, r * 10.0 + 1);
      op.rows.assign(1 + r % 2, r);
      op.a = ranktime::allreduce_async({op.sum.data(), DataType::kFloat64, {7}}, "sum",
                                       ReduceOp::kSum, id);
      op.b = ranktime::broadcast_async({op.bcast.data(), DataType::kFloat64, {3}},
                                       sets[op.set].back(), "bcast", id);
      op.g = ranktime::allgather_async(
          {op.rows.data(), DataType::kInt32, {int64_t(op.rows.size())}}, "gather", id);
    }
    for (Op& op : ops) {
      const std::vector<int>& ranks = sets[op.set];
      ASSERT_TRUE(op.a.wait().ok()) << op.a.wait().message();
      ASSERT_TRUE(op.b.wait().ok()) << op.b.wait().message();
      ASSERT_TRUE(op.g.wait().ok()) << op.g.wait().message();
      double want = 0;
      for (int q : ranks) want += q + 0.5;
      EXPECT_EQ(op.sum, std::vector<double>(7, want));
      EXPECT_EQ(op.bcast, std::vector<double>(3, ranks.back() * 10.0 + 1));  // the root's
      std::vector<int> sorted = ranks;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int32_t> rows;
      for (int q : sorted) rows.insert(rows.end(), 1 + q % 2, q);
      std::vector<int32_t> got(op.g.output().size() / 4);
      std::memcpy(got.data(), op.g.output().data(), op.g.output().size());
      EXPECT_EQ(got, rows);
    }
    // Blocking calls in the same order on every rank (in any other, ranks would wait in a
    // circle, as with MPI).
    for (size_t s = 0; s < sets.size(); ++s) {
      if (has(sets[s], r)) {
        ASSERT_TRUE(ranktime::barrier(ids[s]).ok());
      }
    }
  }
  for (int id : ids) EXPECT_TRUE(ranktime::remove_process_set(id));
  EXPECT_EQ(ranktime::process_set_ids(), (std::vector<int>{0}));
}

TEST(ProcessSets, RefusalsNameTheSetAndItsRanks) {
  const int n = ranktime::size(), r = ranktime::rank();
  const int id = ranktime::add_process_set({0, 1});
  float x[2] = {1, 1};
  if (r >= 2) {
    EXPECT_EQ(ranktime::allreduce_async({x, DataType::kFloat32, {2}}, "x", ReduceOp::kSum, id)
                  .wait()
                  .message(),
              "tensor 'x': rank " + std::to_string(r) + " is not in process set " +
                  std::to_string(id) + " (ranks 0,1): only its members may submit its operations");
  }
  EXPECT_FALSE(ranktime::remove_process_set(ranktime::kGlobalProcessSet));
  EXPECT_FALSE(ranktime::remove_process_set(id + 100));
  EXPECT_THROW(ranktime::process_set_ranks(id + 100), ranktime::Error);
  try {
    ranktime::add_process_set({1, 0});
    ADD_FAILURE() << "a duplicate set was added";
  } catch (const ranktime::Error& e) {
    EXPECT_EQ(std::string(e.what()), "add_process_set: process set " + std::to_string(id) +
                                         " (ranks 0,1) has these ranks already");
  }
  EXPECT_THROW(ranktime::add_process_set({0, n}), ranktime::Error);
  EXPECT_TRUE(ranktime::remove_process_set(id));
}

TEST(Join, UnevenStepsAverageOverEveryRank) {
  const int n = ranktime::size(), r = ranktime::rank();
  for (int step = 0; step < r + 1; ++step) {
    std::vector<float> g(33, float(4 * (r + 1)));
    ASSERT_TRUE(
        ranktime::allreduce_async({g.data(), DataType::kFloat32, {33}}, "grad", ReduceOp::kAverage)
            .wait()
            .ok());
    float sum = 0;
    for (int q = step; q < n; ++q) sum += float(4 * (q + 1));  // ranks with a step `step`
    EXPECT_EQ(g[0], sum / n) << "step " << step;
  }
  int last = -1;
  ASSERT_TRUE(ranktime::join(ranktime::kCpuDevice, &last).ok());
  EXPECT_EQ(last, n - 1);
  ASSERT_TRUE(ranktime::barrier().ok());
}

}  // namespace
