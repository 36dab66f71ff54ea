// Process sets and join through the real Runtime, ranks as threads (thread_world.h): overlapping
// sets with the same tensor names in flight at once, in different orders on different ranks
// (exact, no deadlock); a set's broadcast root and allgather order; refusals naming the set and
// its ranks; a set removed with work in flight; join with uneven numbers of steps (exact
// averages over every rank, through the response cache); and the timeline of both, checked as
// `ranktime check` does, with each set's negotiations ticked by its members only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "negotiation/process_sets.h"
#include "ranktime/timeline/process_set_label.h"
#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"
#include "thread_world.h"

namespace ranktime::testing {
namespace {

using ::testing::HasSubstr;

// Collective on every rank: the new set's id.
int add_set(Runtime& rt, const std::vector<int>& ranks) {
  Handle h = rt.submit(OpType::kAddProcessSet, TensorView{}, "ranktime.process_set", ReduceOp::kSum,
                       0, ranks_argument(ranks));
  const Status s = h.wait();
  EXPECT_TRUE(s.ok()) << s.message();
  return s.ok() ? static_cast<int>(h.output_shape().at(0)) : -1;
}

Status remove_set(Runtime& rt, int id) {
  return rt
      .submit(OpType::kRemoveProcessSet, TensorView{}, "ranktime.process_set", ReduceOp::kSum, 0,
              std::to_string(id))
      .wait();
}

Handle allreduce(Runtime& rt, std::vector<float>* data, const std::string& name, int set,
                 ReduceOp op = ReduceOp::kSum) {
  return rt.submit(OpType::kAllreduce, {data->data(), DataType::kFloat32, {int64_t(data->size())}},
                   name, op, 0, {}, 0, set);
}

Status join(Runtime& rt, int* last) {
  Handle h = rt.submit(OpType::kJoin, TensorView{}, "ranktime.join");
  const Status s = h.wait();
  if (s.ok()) *last = static_cast<int>(h.output_shape().at(0));
  return s;
}

class Sizes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(ThreeToSix, Sizes, ::testing::Values(3, 4, 6),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "_ranks";
                         });

TEST_P(Sizes, OverlappingSetsInFlightAtOnceAreExact) {
  const int size = GetParam();
  InProcessJob job(size);
  // Three sets that overlap: ranks 0, 1 and the last are in two each; the same names in each.
  const std::vector<std::vector<int>> sets = {{0, 1}, {1, size - 1}, {0, size - 1}};
  job.on_every_rank([&](int r, Runtime& rt) {
    std::vector<int> ids;
    for (const auto& ranks : sets) ids.push_back(add_set(rt, ranks));
    ASSERT_EQ(ids, (std::vector<int>{1, 2, 3}));
    for (int round = 0; round < 3; ++round) {  // later rounds through the response cache
      struct Op {
        size_t set;
        std::vector<float> data;
        Handle handle;
      };
      std::vector<Op> ops;
      for (size_t s = 0; s < sets.size(); ++s) {
        if (std::find(sets[s].begin(), sets[s].end(), r) == sets[s].end()) continue;
        ops.push_back({s, std::vector<float>(5, float(r + 1) * (s + 1)), {}});
      }
      // Each rank submits its sets in its own order: no order is the same on all ranks.
      if (!ops.empty()) std::rotate(ops.begin(), ops.begin() + (r % ops.size()), ops.end());
      std::vector<float> everyone(3, float(r));
      for (Op& op : ops) op.handle = allreduce(rt, &op.data, "w", ids[op.set]);
      Handle global = allreduce(rt, &everyone, "w", kGlobalSet);
      for (Op& op : ops) {
        ASSERT_TRUE(op.handle.wait().ok()) << op.handle.wait().message();
        float want = 0;
        for (int q : sets[op.set]) want += float(q + 1) * (op.set + 1);
        EXPECT_EQ(op.data, std::vector<float>(5, want)) << "set " << ids[op.set] << " rank " << r;
      }
      ASSERT_TRUE(global.wait().ok());
      EXPECT_EQ(everyone[0], size * (size - 1) / 2.0f);
    }
    // Broadcast from a global rank of the set; allgather in the set's rank order; an average
    // divides by the set's size.
    if (r == 1 || r == size - 1) {
      std::vector<double> b(3, r == size - 1 ? 7.5 : -1.0);
      Handle bc = rt.submit(OpType::kBroadcast, {b.data(), DataType::kFloat64, {3}}, "b",
                            ReduceOp::kSum, size - 1, {}, 0, ids[1]);
      std::vector<int32_t> rows(r == 1 ? 2 : 1, r);
      Handle ag =
          rt.submit(OpType::kAllgather, {rows.data(), DataType::kInt32, {int64_t(rows.size())}},
                    "g", ReduceOp::kSum, 0, {}, 0, ids[1]);
      std::vector<float> avg(2, float(r));
      Handle av = allreduce(rt, &avg, "avg", ids[1], ReduceOp::kAverage);
      ASSERT_TRUE(bc.wait().ok()) << bc.wait().message();
      ASSERT_TRUE(ag.wait().ok()) << ag.wait().message();
      ASSERT_TRUE(av.wait().ok()) << av.wait().message();
      EXPECT_EQ(b, std::vector<double>(3, 7.5));
      std::vector<int32_t> got(ag.output().size() / 4);
      std::memcpy(got.data(), ag.output().data(), ag.output().size());
      EXPECT_EQ(got, (std::vector<int32_t>{1, 1, size - 1}));
      EXPECT_EQ(avg[0], (1 + size - 1) / 2.0f);
    }
    // Process-set barriers, then every set goes.
    for (size_t s = 0; s < sets.size(); ++s) {
      if (std::find(sets[s].begin(), sets[s].end(), r) == sets[s].end()) continue;
      EXPECT_TRUE(rt.submit(OpType::kBarrier, TensorView{}, "ranktime.barrier", ReduceOp::kSum, 0,
                            {}, 0, ids[s])
                      .wait()
                      .ok());
    }
    for (int id : ids) EXPECT_TRUE(remove_set(rt, id).ok());
  });
}

TEST(ProcessSets, RefusalsNameTheSetAndItsRanks) {
  InProcessJob job(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    const int id = add_set(rt, {0, 2});
    std::vector<float> x(2, 1.0f);
    if (r == 1) {
      const Status s = allreduce(rt, &x, "x", id).wait();
      EXPECT_EQ(s.message(),
                "tensor 'x': rank 1 is not in process set 1 (ranks 0,2): only its members may "
                "submit its operations");
    } else {
      Status s = rt.submit(OpType::kBroadcast, {x.data(), DataType::kFloat32, {2}}, "b",
                           ReduceOp::kSum, 1, {}, 0, id)
                     .wait();
      EXPECT_EQ(s.message(),
                "tensor 'b [process set 1: ranks 0,2]': rank 0: root rank 1 is not in process "
                "set 1 (ranks 0,2) (roots are global ranks)");
    }
    EXPECT_THAT(allreduce(rt, &x, "y", 9).wait().message(),
                HasSubstr("process set 9 does not exist (never added, or removed)"));
    // Adding the same ranks again, or ranks the job does not have, fails on every rank.
    Handle again = rt.submit(OpType::kAddProcessSet, TensorView{}, "ranktime.process_set",
                             ReduceOp::kSum, 0, ranks_argument({0, 2}));
    EXPECT_EQ(again.wait().message(),
              "add_process_set: process set 1 (ranks 0,2) has these ranks already");
    Handle bad = rt.submit(OpType::kAddProcessSet, TensorView{}, "ranktime.process_set",
                           ReduceOp::kSum, 0, ranks_argument({1, 3}));
    EXPECT_EQ(bad.wait().message(),
              "add_process_set: rank 3 is not a rank of this job of 3 ranks (0..2)");
    EXPECT_TRUE(remove_set(rt, id).ok());
  });
}

TEST(ProcessSets, ASetRemovedWithWorkInFlightFailsThatWork) {
  InProcessJob job(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    const int id = add_set(rt, {0, 1});
    std::vector<float> x(4, 1.0f);
    Handle pending;
    if (r == 0) pending = allreduce(rt, &x, "x", id);  // rank 1 never submits it
    EXPECT_TRUE(remove_set(rt, id).ok());
    if (r == 0) {
      EXPECT_EQ(pending.wait().message(),
                "process set 1 (ranks 0,1) was removed while tensor 'x [process set 1: ranks "
                "0,1]' was in flight (rank 1 had not submitted it)");
    }
    EXPECT_THAT(allreduce(rt, &x, "x", id).wait().message(), HasSubstr("does not exist"));
    std::vector<float> after(2, float(r));
    ASSERT_TRUE(allreduce(rt, &after, "after", kGlobalSet).wait().ok());
    EXPECT_EQ(after[0], 3.0f);
  });
}

// Rank r has 2 + r steps of data: the others' averages divide by every rank, with zeros from
// the ranks that have joined; every rank learns that the last rank joined last.
TEST_P(Sizes, JoinWithUnevenStepsIsExact) {
  const int size = GetParam();
  InProcessJob job(size);
  job.on_every_rank([&](int r, Runtime& rt) {
    for (int step = 0; step < 2 + r; ++step) {
      std::vector<float> a(3, float((r + 1) * 4));
      std::vector<float> b(17, float(step));
      std::vector<std::vector<float>*> tensors = {&a, &b};
      Handle ha = allreduce(rt, &a, "a", kGlobalSet, ReduceOp::kAverage);
      Handle hb = allreduce(rt, &b, "b", kGlobalSet, ReduceOp::kSum);
      ASSERT_TRUE(ha.wait().ok()) << ha.wait().message();
      ASSERT_TRUE(hb.wait().ok()) << hb.wait().message();
      float sum = 0;
      int active = 0;
      for (int q = 0; q < size; ++q) {
        if (step < 2 + q) sum += float((q + 1) * 4), ++active;
      }
      EXPECT_EQ(a[0], sum / size) << "step " << step << " rank " << r;
      EXPECT_EQ(b[0], float(step * active)) << "step " << step << " rank " << r;
    }
    int last = -1;
    ASSERT_TRUE(join(rt, &last).ok());
    EXPECT_EQ(last, size - 1);
    // Joined ranks are back for the next collective (all of them needed again).
    std::vector<float> x(2, 1.0f);
    ASSERT_TRUE(allreduce(rt, &x, "after", kGlobalSet).wait().ok());
    EXPECT_EQ(x[0], float(size));
  });
}

TEST(Join, AllgatherAndBroadcastFailWhileARankHasJoined) {
  InProcessJob job(3);
  job.on_every_rank([&](int r, Runtime& rt) {
    int last = -1;
    if (r != 2) {
      std::vector<int32_t> rows(2, r);
      Status s = rt.submit(OpType::kAllgather, {rows.data(), DataType::kInt32, {2}}, "g").wait();
      EXPECT_EQ(s.message(),
                "tensor 'g': allgather is not supported while ranks have joined (rank 2 called "
                "join()): a joined rank takes part only in allreduces and barriers (with "
                "DistributedOptimizer, pass sparse_as_dense=True)");
      s = rt.submit(OpType::kBroadcast, {rows.data(), DataType::kInt32, {2}}, "b", ReduceOp::kSum,
                    0)
              .wait();
      EXPECT_THAT(s.message(), HasSubstr("broadcast is not supported while ranks have joined"));
      EXPECT_TRUE(rt.submit(OpType::kBarrier, TensorView{}, "ranktime.barrier").wait().ok());
    }
    ASSERT_TRUE(join(rt, &last).ok());
    EXPECT_NE(last, 2);
  });
}

class SetsTimeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ranktime_sets_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Each negotiation's ticks by tensor name, the names, and whether `ranktime check` passes.
struct Ticks {
  std::map<std::string, std::vector<std::vector<int>>> by_tensor;
  std::vector<std::string> instants;
  std::string violations;
};

Ticks read_ticks(const std::string& path) {
  Ticks t;
  std::map<int64_t, std::string> names;
  timeline::TraceChecker checker;
  const auto result = timeline::read_trace_file(path, [&](const timeline::TraceEvent& e) {
    checker.add(e);
    if (e.ph == "M" && e.name == "process_name") names[e.pid] = e.args["name"];
    if (e.ph == "i" && e.pid == 0) {
      t.instants.push_back(e.name + ": " + e.args.value("message", std::string()));
    }
    // The reader hands a negotiation over as its begin, its ticks ('X'), its end.
    if (e.pid > 0 && e.tid == 0 && e.phase() == 'B' && e.name.rfind("NEGOTIATE_", 0) == 0) {
      t.by_tensor[names[e.pid]].emplace_back();
    } else if (e.pid > 0 && e.tid == 0 && e.phase() == 'X' && !t.by_tensor[names[e.pid]].empty()) {
      t.by_tensor[names[e.pid]].back().push_back(std::stoi(e.name));
    }
    return true;
  });
  checker.finish(result);
  for (const auto& v : checker.violations()) t.violations += v.message + "\n";
  for (auto& [name, negotiations] : t.by_tensor) {
    for (auto& ticks : negotiations) std::sort(ticks.begin(), ticks.end());
  }
  return t;
}

TEST_F(SetsTimeline, ASetsTicksAreItsMembersAndJoinShowsWhenEachRankJoined) {
  const std::string path = (dir_ / "t.json").string();
  {
    InProcessJob job(4, [&](int) { return config_of({{"TIMELINE_FILENAME", path}}); });
    job.on_every_rank([&](int r, Runtime& rt) {
      const int odd = add_set(rt, {1, 3});
      if (r % 2 == 1) {
        for (int step = 0; step < 2; ++step) {
          std::vector<float> x(8, 1.0f);
          ASSERT_TRUE(allreduce(rt, &x, "x", odd).wait().ok());
        }
      }
      for (int step = 0; step < r + 1; ++step) {  // uneven: ranks join one after the other
        std::vector<float> y(8, 1.0f);
        ASSERT_TRUE(allreduce(rt, &y, "y", kGlobalSet).wait().ok());
      }
      int last = -1;
      ASSERT_TRUE(join(rt, &last).ok());
      EXPECT_TRUE(remove_set(rt, odd).ok());
    });
  }
  const Ticks t = read_ticks(path);
  EXPECT_EQ(t.violations, "");
  const std::string x = "x" + timeline::process_set_label(1, {1, 3});
  ASSERT_EQ(t.by_tensor.count(x), 1u) << "the set's tensor is named with its label";
  EXPECT_EQ(t.by_tensor.at(x), (std::vector<std::vector<int>>{{1, 3}, {1, 3}}));
  // y: every rank ticks every negotiation, joined ranks included (at the first rank's time).
  ASSERT_EQ(t.by_tensor.at("y").size(), 4u);
  for (const auto& ticks : t.by_tensor.at("y")) EXPECT_EQ(ticks, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(t.by_tensor.at("ranktime.join").size(), 1u);
  EXPECT_THAT(t.instants, ::testing::Contains("PROCESS_SET_ADDED: process set 1 (ranks 1,3)"));
  EXPECT_THAT(t.instants, ::testing::Contains("PROCESS_SET_REMOVED: process set 1 (ranks 1,3)"));
}

}  // namespace
}  // namespace ranktime::testing
