// Step marks, capture windows, the size budget and whose lanes are written through the real
// Runtime at several ranks (threads over the in-memory channel): every rank's marks become STEP
// slices on rank 0's file; TIMELINE_STEPS records exactly its steps' negotiations and lanes;
// TIMELINE_MAX_MB rotates into valid files, each within the budget plus one write piece, with
// nothing dropped; TIMELINE_RANKS writes exactly the chosen ranks' lanes (a list, or the rank
// made late for slowest:K), every tick and step mark, and the others never ship their lanes, also
// for a process set's reducescatter, alltoall and group (whose ticks are its members');
// malformed values of the new variables fail at start-up naming variable and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/wire.h"
#include "negotiation/process_sets.h"

#include "ranktime/timeline/trace_check.h"
#include "ranktime/timeline/trace_reader.h"
#include "ranktime/timeline/trace_writer.h"
#include "thread_world.h"

namespace ranktime::testing {
namespace {

using ::testing::HasSubstr;
using timeline::TraceEvent;

class TimelineSteps : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ranktime_steps_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  // `ranks` ranks run `steps` steps, each marked, then allreducing `tensors` tensors named after
  // the step ("s3.t1"), so that the file tells which steps it recorded. Rank `late_rank` sleeps
  // `late_ms` before each step's submissions (as ranktime-synth --slow-rank).
  static void run(int ranks, int steps, int tensors, const std::map<std::string, std::string>& env,
                  const std::function<void(MemoryHub&)>& hub_setup = {}, int late_rank = -1,
                  int late_ms = 0) {
    InProcessJob job(
        ranks, [&](int) { return config_of(env); }, hub_setup);
    job.on_every_rank([&](int r, Runtime& rt) {
      std::vector<float> data(64, static_cast<float>(r));
      for (int s = 0; s < steps; ++s) {
        rt.mark_step(std::nullopt);
        if (r == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
        std::vector<Handle> handles;
        for (int t = 0; t < tensors; ++t) {
          handles.push_back(rt.submit(OpType::kAllreduce, {data.data(), DataType::kFloat32, {64}},
                                      "s" + std::to_string(s) + ".t" + std::to_string(t)));
        }
        for (Handle& h : handles) ASSERT_TRUE(h.wait().ok());
      }
    });
  }

  std::filesystem::path dir_;
};

struct Contents {
  std::map<int, std::vector<int64_t>> steps;  // rank: its STEP slices' steps, in file order
  std::set<int> negotiated;                   // steps with a NEGOTIATE slice
  std::set<int> lanes;                        // steps with an ALLREDUCE slice on a rank lane
  std::set<int> lane_ranks;                   // ranks with an ALLREDUCE slice on their lane
  uint64_t negotiations = 0;
  uint64_t ticks = 0;
  nlohmann::json run;                      // ranktime_run's args
  std::vector<std::string> lane_messages;  // TIMELINE_RANKS instants
  uint64_t dropped = 0;
  bool checked_ok = true;
  std::string violations;
};

// Reads and checks one file, adding what it holds to *c.
void read(const std::string& file, Contents* c) {
  std::map<int64_t, std::string> names;  // pid: process name
  timeline::TraceChecker checker;
  const timeline::TraceReadResult result =
      timeline::read_trace_file(file, [&](const TraceEvent& e) {
        checker.add(e);
        if (e.ph == "M" && e.name == "process_name") names[e.pid] = e.args["name"];
        if (e.ph == "M" && e.name == "thread_name" && e.pid == 0) return true;
        const auto step_of = [&](int64_t pid) { return std::stoi(names[pid].substr(1)); };
        if (e.ph == "X" && e.name == "STEP")
          c->steps[static_cast<int>(e.tid)].push_back(e.args["step"]);
        // The reader hands a tensor's complete slices on as a B and an E.
        if (e.ph == "B" && e.name == "NEGOTIATE_ALLREDUCE") {
          c->negotiated.insert(step_of(e.pid));
          ++c->negotiations;
        }
        if (e.ph == "B" && e.name == "ALLREDUCE") {
          c->lanes.insert(step_of(e.pid));
          c->lane_ranks.insert(static_cast<int>(e.tid) - 1);
        }
        if (e.ph == "X" && e.pid > 0 && e.tid == 0 && !e.name.empty() && std::isdigit(e.name[0]))
          ++c->ticks;
        if (e.name == "ranktime_run") c->run = e.args;
        if (e.name == "TIMELINE_RANKS") c->lane_messages.push_back(e.args["message"]);
        if (e.name == "ranktime_run_end") c->dropped += e.args.value("events_dropped", 0);
        return true;
      });
  checker.finish(result);
  if (!checker.ok() || !checker.has_run_end()) {
    c->checked_ok = false;
    for (const auto& v : checker.violations()) c->violations += v.message + "\n";
  }
}

std::set<int> range(int from, int to, int every = 1) {
  std::set<int> out;
  for (int s = from; s < to; s += every) out.insert(s);
  return out;
}

TEST_F(TimelineSteps, EveryRanksMarksAreStepSlicesOnRankZerosFile) {
  run(3, 5, 2, {{"TIMELINE_FILENAME", path("t.json")}});
  Contents c;
  read(path("t.json"), &c);
  EXPECT_TRUE(c.checked_ok) << c.violations;
  ASSERT_EQ(c.steps.size(), 3u);  // one thread per rank
  for (const auto& [tid, steps] : c.steps)
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "thread " << tid;
  EXPECT_EQ(c.negotiated, range(0, 5));
  EXPECT_EQ(c.lanes, range(0, 5));
}

TEST_F(TimelineSteps, AWindowRecordsExactlyItsStepsAndKeepsEveryStepMark) {
  run(3, 9, 2, {{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_STEPS", "2:6"}});
  Contents c;
  read(path("t.json"), &c);
  EXPECT_TRUE(c.checked_ok) << c.violations;
  EXPECT_EQ(c.negotiated, range(2, 6));
  EXPECT_EQ(c.lanes, range(2, 6));
  for (const auto& [tid, steps] : c.steps) EXPECT_EQ(steps.size(), 9u) << "thread " << tid;
}

TEST_F(TimelineSteps, EveryTakesEveryNthStepOfTheWindow) {
  run(2, 12, 2, {{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_STEPS", "1:11:3"}});
  Contents c;
  read(path("t.json"), &c);
  EXPECT_TRUE(c.checked_ok) << c.violations;
  EXPECT_EQ(c.negotiated, (std::set<int>{1, 4, 7, 10}));
  EXPECT_EQ(c.lanes, (std::set<int>{1, 4, 7, 10}));
}

// A budget over a long run: several files, each a valid trace of at most the budget plus one
// write piece (the writer's pieces are at most 512 KiB, far less here), nothing dropped, and
// together every step's negotiations.
TEST_F(TimelineSteps, ABudgetRotatesIntoValidFilesWithinItAndDropsNothing) {
  constexpr double kBudgetMb = 0.05;
  run(2, 60, 8,
      {{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_MAX_MB", std::to_string(kBudgetMb)}});
  Contents all;
  int files = 0;
  for (;; ++files) {
    const std::string file = timeline::rotated_path(path("t.json"), files);
    if (!std::filesystem::exists(file)) break;
    EXPECT_LE(std::filesystem::file_size(file), kBudgetMb * (1 << 20) + (512 << 10)) << file;
    Contents one;
    read(file, &one);
    EXPECT_TRUE(one.checked_ok) << file << "\n" << one.violations;
    read(file, &all);
  }
  EXPECT_GE(files, 3);
  EXPECT_EQ(all.dropped, 0u);
  EXPECT_EQ(all.negotiated, range(0, 60));
  EXPECT_EQ(all.lanes, range(0, 60));
}

TEST_F(TimelineSteps, KeepFilesKeepsTheNewest) {
  run(2, 60, 8,
      {{"TIMELINE_FILENAME", path("t.json")},
       {"TIMELINE_MAX_MB", "0.05"},
       {"TIMELINE_KEEP_FILES", "2"}});
  int present = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    (void)entry;
    ++present;
  }
  EXPECT_EQ(present, 2);
  EXPECT_FALSE(std::filesystem::exists(path("t.json")));  // the oldest went first
}

// The processing-lane records each rank ships to rank 0 (what TIMELINE_RANKS saves on the wire).
class LaneRecordsShipped {
 public:
  std::function<void(MemoryHub&)> install() {
    return [this](MemoryHub& hub) {
      hub.set_faults([this](int from, int to, const std::vector<uint8_t>& message) {
        if (to == 0) count(from, message);
        return MessageFate{};
      });
    };
  }
  uint64_t from(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return by_rank_[rank];
  }

 private:
  void count(int rank, const std::vector<uint8_t>& message) {
    const WorkerMessage m = decode_worker_message(message.data(), message.size());
    uint64_t lanes = 0;
    for (const timeline::Record& r : m.records) {
      using K = timeline::RecordKind;
      lanes += r.kind == K::kBatch || r.kind == K::kBatchSpan || r.kind == K::kBatchTensor ||
               r.kind == K::kOpBegin || r.kind == K::kSpan || r.kind == K::kOpEnd;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    by_rank_[rank] += lanes;
  }
  std::mutex mutex_;
  std::map<int, uint64_t> by_rank_;
};

TEST_F(TimelineSteps, ALaneListWritesExactlyThoseLanesAndEveryTickAndStepMark) {
  LaneRecordsShipped shipped;
  run(4, 6, 3, {{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_RANKS", "2"}}, shipped.install());
  Contents c;
  read(path("t.json"), &c);
  EXPECT_TRUE(c.checked_ok) << c.violations;  // every negotiation has every rank's tick
  EXPECT_EQ(c.lane_ranks, (std::set<int>{0, 2}));
  EXPECT_EQ(c.negotiations, 6u * 3u);
  EXPECT_EQ(c.ticks, c.negotiations * 4);
  ASSERT_EQ(c.steps.size(), 4u);
  for (const auto& [tid, steps] : c.steps) EXPECT_EQ(steps.size(), 6u) << "thread " << tid;
  EXPECT_EQ(c.run["timeline_ranks"], "2");
  EXPECT_EQ(c.run["all_ranks"], false);
  EXPECT_EQ(c.dropped, 0u);
  // Ranks not chosen never recorded their lanes, so nothing of them crossed the wire.
  EXPECT_EQ(shipped.from(1), 0u);
  EXPECT_EQ(shipped.from(3), 0u);
  EXPECT_GT(shipped.from(2), 0u);
}

// slowest:1 with rank 3 12 ms late every step: rank 0 starts with its own lanes only and, at its
// next inspection (a second in), chooses rank 3 and tells it; ranks 1 and 2 are never chosen.
TEST_F(TimelineSteps, SlowestChoosesTheRankMadeLate) {
  LaneRecordsShipped shipped;
  run(4, 150, 2, {{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_RANKS", "slowest:1"}},
      shipped.install(), /*late_rank=*/3, /*late_ms=*/12);
  Contents c;
  read(path("t.json"), &c);
  EXPECT_TRUE(c.checked_ok) << c.violations;
  EXPECT_EQ(c.lane_ranks, (std::set<int>{0, 3}));
  EXPECT_EQ(c.ticks, c.negotiations * 4);
  EXPECT_EQ(c.negotiations, 150u * 2u);
  for (const auto& [tid, steps] : c.steps) EXPECT_EQ(steps.size(), 150u) << "thread " << tid;
  EXPECT_EQ(c.run["timeline_ranks"], "slowest:1");
  EXPECT_THAT(c.lane_messages,
              ::testing::Contains(HasSubstr("lanes of ranks 0,3 from here on (slowest:1)")));
  EXPECT_EQ(shipped.from(1), 0u);
  EXPECT_EQ(shipped.from(2), 0u);
  EXPECT_GT(shipped.from(3), 0u);
}

// A process set {1, 2} of a job of 4 writing rank 2's lanes only: its reducescatter, alltoall and
// grouped allreduce show on rank 2's lane alone (rank 1 is not chosen, ranks 0 and 3 are not
// members), their negotiations tick ranks 1 and 2, and the file passes the checks.
TEST_F(TimelineSteps, ALaneListWithAProcessSetsNewOperations) {
  LaneRecordsShipped shipped;
  {
    InProcessJob job(
        4,
        [&](int) {
          return config_of({{"TIMELINE_FILENAME", path("t.json")}, {"TIMELINE_RANKS", "2"}});
        },
        shipped.install());
    job.on_every_rank([&](int r, Runtime& rt) {
      Handle add = rt.submit(OpType::kAddProcessSet, TensorView{}, "ranktime.process_set",
                             ReduceOp::kSum, 0, ranks_argument({1, 2}));
      ASSERT_TRUE(add.wait().ok()) << add.wait().message();
      const int set = static_cast<int>(add.output_shape().at(0));
      if (r == 1 || r == 2) {
        std::vector<float> x(6, 1.0f), y(4, 1.0f);
        std::vector<Handle> handles = rt.submit_group(
            OpType::kAllreduce,
            {{y.data(), DataType::kFloat32, {2}}, {y.data() + 2, DataType::kFloat32, {2}}}, "g",
            ReduceOp::kSum, set);
        handles.push_back(rt.submit(OpType::kReducescatter, {x.data(), DataType::kFloat32, {6}},
                                    "rs", ReduceOp::kSum, 0, {}, 0, set));
        handles.push_back(
            rt.submit_alltoall({x.data(), DataType::kFloat32, {6}}, {1, 2}, "a2a", set));
        for (Handle& h : handles) ASSERT_TRUE(h.wait().ok()) << h.wait().message();
        EXPECT_EQ(y[0], 2.0f);
      }
      Handle barrier = rt.submit(OpType::kBarrier, TensorView{}, "ranktime.barrier");
      ASSERT_TRUE(barrier.wait().ok());
    });
  }
  std::map<int64_t, std::string> names;         // pid: tensor
  std::map<std::string, std::set<int>> lanes;   // tensor: ranks with its operation slice
  std::map<std::string, std::set<int>> ticked;  // tensor: ranks that ticked it
  timeline::TraceChecker checker;
  const timeline::TraceReadResult result =
      timeline::read_trace_file(path("t.json"), [&](const TraceEvent& e) {
        checker.add(e);
        if (e.ph == "M" && e.name == "process_name") names[e.pid] = e.args["name"];
        if (e.pid == 0 || names.count(e.pid) == 0) return true;
        const std::string& tensor = names[e.pid];
        if (e.ph == "B" && e.tid > 0 &&
            (e.name == "REDUCESCATTER" || e.name == "ALLTOALL" || e.name == "ALLREDUCE"))
          lanes[tensor].insert(static_cast<int>(e.tid) - 1);
        if (e.ph == "X" && e.tid == 0 && !e.name.empty() && std::isdigit(e.name[0]))
          ticked[tensor].insert(std::stoi(e.name));
        return true;
      });
  checker.finish(result);
  std::string violations;
  for (const auto& v : checker.violations()) violations += v.message + "\n";
  EXPECT_TRUE(checker.ok()) << violations;
  const std::string label = " [process set 1: ranks 1,2]";
  for (const char* tensor : {"rs", "a2a", "g_1of2", "g_2of2"}) {
    EXPECT_EQ(lanes[tensor + label], (std::set<int>{2})) << tensor;
    EXPECT_EQ(ticked[tensor + label], (std::set<int>{1, 2})) << tensor;
  }
  EXPECT_EQ(shipped.from(1), 0u);
  EXPECT_EQ(shipped.from(3), 0u);
}

// A rank the job does not have fails at start-up on every rank, before any exchange.
TEST(TimelineRankSettings, ARankTheJobDoesNotHaveIsAStartUpError) {
  for (const char* value : {"3", "1,3", "slowest:3"}) {
    auto hub = std::make_shared<MemoryHub>(3);
    auto group = std::make_shared<ThreadGroup>(3);
    try {
      Runtime rt(config_of({{"TIMELINE_RANKS", value}}),
                 std::make_unique<ThreadWorld>(0, hub, group));
      ADD_FAILURE() << "TIMELINE_RANKS='" << value << "' accepted at 3 ranks";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(std::string("TIMELINE_RANKS='") + value + "'"));
      EXPECT_THAT(e.what(), HasSubstr("3 ranks"));
    }
  }
}

TEST(TimelineStepSettings, MalformedValuesNameTheVariableAndTheValue) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"TIMELINE_STEPS", "5"},        {"TIMELINE_STEPS", "5:2"},       {"TIMELINE_STEPS", "1:9:0"},
      {"TIMELINE_STEPS", "-1:4"},     {"TIMELINE_STEPS", "1:4:2:3"},   {"TIMELINE_STEPS", "a:b"},
      {"TIMELINE_STEPS", "1:"},       {"TIMELINE_MAX_MB", "-1"},       {"TIMELINE_MAX_MB", "lots"},
      {"TIMELINE_KEEP_FILES", "-2"},  {"TIMELINE_KEEP_FILES", "1.5"},  {"TIMELINE_RANKS", "0,x"},
      {"TIMELINE_RANKS", "slowest:"}, {"TIMELINE_RANKS", "slowest:0"}, {"TIMELINE_RANKS", "1,1"},
  };
  for (const auto& [variable, value] : bad) {
    try {
      config_of({{variable, value}});
      ADD_FAILURE() << variable << "=" << value << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(variable + "='" + value + "'"));
    }
  }
  const Config c = config_of({{"TIMELINE_STEPS", "10:20:5"}});
  EXPECT_TRUE(c.timeline_steps.contains(15));
  EXPECT_FALSE(c.timeline_steps.contains(16));
  EXPECT_FALSE(c.timeline_steps.contains(20));
}

}  // namespace
}  // namespace ranktime::testing
