// Step marks, capture windows and the size budget through the real Runtime at several ranks
// (threads over the in-memory channel): every rank's marks become STEP slices on rank 0's file;
// TIMELINE_STEPS records exactly its steps' negotiations and lanes; TIMELINE_MAX_MB rotates into
// valid files, each within the budget plus one write piece, with nothing dropped; malformed
// values of the new variables fail at start-up naming variable and value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

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
  // the step ("s3.t1"), so that the file tells which steps it recorded.
  static void run(int ranks, int steps, int tensors,
                  const std::map<std::string, std::string>& env) {
    InProcessJob job(ranks, [&](int) { return config_of(env); });
    job.on_every_rank([&](int r, Runtime& rt) {
      std::vector<float> data(64, static_cast<float>(r));
      for (int s = 0; s < steps; ++s) {
        rt.mark_step(std::nullopt);
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
        if (e.ph == "B" && e.name == "NEGOTIATE_ALLREDUCE") c->negotiated.insert(step_of(e.pid));
        if (e.ph == "B" && e.name == "ALLREDUCE") c->lanes.insert(step_of(e.pid));
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

TEST(TimelineStepSettings, MalformedValuesNameTheVariableAndTheValue) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"TIMELINE_STEPS", "5"},       {"TIMELINE_STEPS", "5:2"},      {"TIMELINE_STEPS", "1:9:0"},
      {"TIMELINE_STEPS", "-1:4"},    {"TIMELINE_STEPS", "1:4:2:3"},  {"TIMELINE_STEPS", "a:b"},
      {"TIMELINE_STEPS", "1:"},      {"TIMELINE_MAX_MB", "-1"},      {"TIMELINE_MAX_MB", "lots"},
      {"TIMELINE_KEEP_FILES", "-2"}, {"TIMELINE_KEEP_FILES", "1.5"},
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
