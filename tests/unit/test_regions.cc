// Tests for regions without MPI: each thread's stack (nesting, the errors of a bad end, ended
// regions held until the outermost ends), the bounded log (drops the oldest, counts), the names
// that travel once per rank, the blocked-time counter, and the recorder writing them: another
// rank's regions on rank 0's clock under their own names, nested slices in time order, blocked_us,
// TIMELINE_STEPS and the dropped count in the closing metadata.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ranktime/timeline/trace_names.h"
#include "recording/region_log.h"
#include "recording/region_stack.h"
#include "recording/timeline_recorder.h"

namespace ranktime {
namespace {

using nlohmann::json;

constexpr int64_t kMs = 1'000'000;

TEST(RegionStack, EndsMustNameTheInnermostOpenRegion) {
  RegionStack stack;
  OpenRegion ended;
  EXPECT_EQ(stack.pop("data", &ended), "no region is open on this thread");
  stack.push("step", 1, 0, 0, true);
  stack.push("data", 2, 0, 0, true);
  EXPECT_EQ(stack.pop("step", &ended),
            "region \"data\", begun inside it, is still open (end it first)");
  EXPECT_EQ(stack.pop("other", &ended),
            "it is not open on this thread; the innermost open region is \"data\"");
  EXPECT_EQ(stack.depth(), 2u);  // failed ends change nothing
  EXPECT_EQ(stack.pop("data", &ended), "");
  EXPECT_EQ(ended.name, "data");
  EXPECT_EQ(ended.begin_ns, 2);
  EXPECT_EQ(stack.open_names(), std::vector<std::string>{"step"});
  EXPECT_EQ(stack.pop("step", &ended), "");
  EXPECT_EQ(stack.depth(), 0u);
}

TEST(RegionStack, HeldRegionsComeOutInTimeOrderOnceTheOutermostEnds) {
  RegionStack stack;
  OpenRegion ended;
  stack.push("step", 10, 0, 0, true);
  stack.push("data", 10, 0, 0, true);  // the same begin as its parent
  ASSERT_EQ(stack.pop("data", &ended), "");
  EXPECT_TRUE(stack.hold({"data", 0, 10, 20, 0}).empty());
  EXPECT_TRUE(stack.ready().empty());  // "step" is still open and comes first
  ASSERT_EQ(stack.pop("step", &ended), "");
  stack.hold({"step", 0, 10, 30, 0});
  const std::vector<ClosedRegion>& ready = stack.ready();
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].name, "step");  // the longer of two with one begin: the parent
  EXPECT_EQ(ready[1].name, "data");
  EXPECT_TRUE(stack.ready().empty());  // handed over once
}

TEST(RegionStack, TooManyHeldLeaveTheOpenRegionsAroundThemOut) {
  RegionStack stack;
  stack.push("epoch", 0, 0, 0, true);
  std::vector<std::string> left_out;
  for (size_t i = 0; i < RegionStack::kMaxHeld && left_out.empty(); ++i) {
    left_out = stack.hold({"step", 0, int64_t(i + 1), int64_t(i + 2), 0});
  }
  EXPECT_EQ(left_out, std::vector<std::string>{"epoch"});
  EXPECT_EQ(stack.ready().size(), RegionStack::kMaxHeld);  // nothing recorded is open now
}

TEST(RegionStack, ARegionOpenOnAnotherThreadIsFoundThere) {
  this_thread_regions().push("mine", 0, 0, 0, false);
  bool other_sees_it = false;
  std::thread([&] { other_sees_it = region_open_on_other_thread("mine"); }).join();
  EXPECT_TRUE(other_sees_it);
  EXPECT_FALSE(region_open_on_other_thread("mine"));  // on this thread, not another
  const std::vector<std::string> open = open_regions_everywhere();
  EXPECT_NE(std::find(open.begin(), open.end(), "mine"), open.end());
  OpenRegion ended;
  EXPECT_EQ(this_thread_regions().pop("mine", &ended), "");
}

TEST(RegionLog, AFullLogDropsItsOldestAndCountsThem) {
  RegionLog log(3);
  for (uint32_t i = 1; i <= 5; ++i) log.add({i, i, i + 1, 0});
  std::vector<RegionEntry> taken;
  log.take(&taken);
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].name, 3u);
  EXPECT_EQ(taken[2].name, 5u);
  EXPECT_EQ(log.dropped(), 2u);
  taken.clear();
  log.take(&taken);
  EXPECT_TRUE(taken.empty());
}

TEST(RegionNames, EachNameTravelsOnceAndMapsToTheTracesIds) {
  RegionNames rank1;
  const uint32_t data = rank1.intern("data");
  EXPECT_EQ(rank1.intern("data"), data);
  const uint32_t fwd = rank1.intern("forward");
  EXPECT_EQ(rank1.take_new(), (std::vector<std::string>{"data", "forward"}));
  EXPECT_TRUE(rank1.take_new().empty());
  timeline::StringTable trace;
  trace.intern("a tensor");  // rank 0's table has other ids
  RegionNameMap map;
  map.learn(1, {"data", "forward"}, &trace);
  EXPECT_EQ(trace.lookup(map.to_trace(1, data)), "data");
  EXPECT_EQ(trace.lookup(map.to_trace(1, fwd)), "forward");
  EXPECT_EQ(map.to_trace(1, 99), 0u);  // never named: ""
  EXPECT_EQ(map.to_trace(2, data), 0u);
}

TEST(BlockedTime, NestedScopesCountOnce) {
  const int64_t before = detail::thread_blocked_ns();
  {
    detail::BlockedScope outer;
    detail::BlockedScope inner;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int64_t blocked = detail::thread_blocked_ns() - before;
  EXPECT_GE(blocked, 2 * kMs);
  int64_t other = -1;
  std::thread([&] { other = detail::thread_blocked_ns(); }).join();
  EXPECT_EQ(other, 0);  // per thread
}

class RecorderRegions : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ranktime_regions_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TimelineRecorder> rank0(int size, const StepWindow& window = {}) {
    auto recorder = std::make_unique<TimelineRecorder>(0, size);
    recorder->set_limits(window, 0, 0);
    timeline::RunMetadata metadata;
    metadata.ranks = size;
    metadata.hostnames.assign(size, "h");
    metadata.pids.assign(size, 1);
    EXPECT_TRUE(recorder->start(path(), false, metadata).ok());
    return recorder;
  }
  json file() {
    std::ifstream in(path());
    return json::parse(in);
  }
  // The slices of rank `rank`'s regions thread, in file order.
  json regions(const json& all, int rank) {
    json out = json::array();
    for (const json& e : all) {
      if (e["ph"] == "X" && e["pid"] == timeline::rank_process_pid(rank) &&
          e["tid"] == timeline::kRegionsThreadTid)
        out.push_back(e);
    }
    return out;
  }
  std::string path() const { return (dir_ / "t.json").string(); }
  std::filesystem::path dir_;
};

TEST_F(RecorderRegions, AnotherRanksRegionsLandOnRankZerosClockUnderTheirNames) {
  auto recorder = rank0(2);
  TimelineRecorder rank1(1, 2);
  ASSERT_TRUE(rank1.start("", false, {}).ok());
  // Two threads' worth of order: the outer region first (held until it ended, api.cc).
  rank1.region("step", -1, 10 * kMs, 20 * kMs, 0);
  rank1.region("</script><script>", -1, 11 * kMs, 15 * kMs, 3 * kMs);
  rank1.record_steps();
  std::vector<timeline::Record> shipped = rank1.take_outbox();
  ASSERT_EQ(shipped.size(), 2u);
  // Rank 1's clock is 5 ms ahead of rank 0's.
  OffsetEstimator offset;
  ASSERT_TRUE(offset.add({0, 5 * kMs, 5 * kMs, 0}));
  recorder->learn_regions(1, rank1.take_region_names(), rank1.regions_dropped());
  recorder->ingest(&shipped, offset, 1);
  recorder->region("data", -1, 1 * kMs, 2 * kMs, 0);  // rank 0's own
  recorder->record_steps();
  recorder->stop();

  const json all = file();
  const json r1 = regions(all, 1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0]["name"], "step");
  EXPECT_EQ(r1[0]["ts"], 5000);
  EXPECT_EQ(r1[0]["dur"], 10000);
  EXPECT_FALSE(r1[0].contains("args"));  // never blocked: no args
  EXPECT_EQ(r1[1]["name"], "</script><script>");
  EXPECT_EQ(r1[1]["ts"], 6000);
  EXPECT_EQ(r1[1]["args"]["blocked_us"], 3000);
  const json r0 = regions(all, 0);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(r0[0]["name"], "data");
  // Each rank's process is named and sorted after every tensor; its thread named "regions".
  bool named = false, threaded = false;
  for (const json& e : all) {
    if (e["ph"] != "M" || e["pid"] != timeline::rank_process_pid(1)) continue;
    if (e["name"] == "process_name") named = e["args"]["name"] == "rank 1";
    if (e["name"] == "thread_name") threaded = e["args"]["name"] == "regions";
    if (e["name"] == "process_sort_index") {
      EXPECT_EQ(e["args"]["sort_index"], 1000000001);
    }
  }
  EXPECT_TRUE(named);
  EXPECT_TRUE(threaded);
}

TEST_F(RecorderRegions, ARefreshedOffsetNeverPutsARanksRegionsOutOfOrder) {
  auto recorder = rank0(2);
  TimelineRecorder rank1(1, 2);
  ASSERT_TRUE(rank1.start("", false, {}).ok());
  // The second message's offset says rank 1's clock is 3 ms further ahead (a refresh).
  OffsetEstimator offsets[2];
  ASSERT_TRUE(offsets[0].add({0, 0, 0, 0}));
  ASSERT_TRUE(offsets[1].add({0, 3 * kMs, 3 * kMs, 0}));
  for (int message = 0; message < 2; ++message) {
    rank1.region("step", -1, (10 + message * 5) * kMs, (14 + message * 5) * kMs, 0);
    rank1.region("data", -1, (11 + message * 5) * kMs, (12 + message * 5) * kMs, 0);
    rank1.record_steps();
    std::vector<timeline::Record> shipped = rank1.take_outbox();
    recorder->learn_regions(1, rank1.take_region_names(), 0);
    recorder->ingest(&shipped, offsets[message], 1);
  }
  recorder->stop();
  const json r1 = regions(file(), 1);
  ASSERT_EQ(r1.size(), 4u);
  // 15 - 3 = 12 ms would overlap the first step (to 14 ms): moved there, the data inside it.
  EXPECT_EQ(r1[2]["ts"], 14000);
  EXPECT_EQ(r1[3]["ts"], 15000);
  EXPECT_EQ(r1[2]["dur"], 4000);
}

TEST_F(RecorderRegions, StepWindowLanesAndDropsApplyToRegions) {
  StepWindow window;
  window.on = true;
  window.start = 2;
  window.end = 3;
  auto recorder = rank0(2, window);
  recorder->region("outside", 1, 1 * kMs, 2 * kMs, 0);
  recorder->region("inside", 2, 3 * kMs, 4 * kMs, 0);
  recorder->record_steps();
  // Rank 1, not a chosen lane (TIMELINE_RANKS): its regions stay home.
  TimelineRecorder rank1(1, 2);
  ASSERT_TRUE(rank1.start("", false, {}).ok());
  rank1.set_lanes_wanted(false);
  rank1.region("data", -1, 1 * kMs, 2 * kMs, 0);
  rank1.record_steps();
  EXPECT_EQ(rank1.outbox_size(), 0u);
  recorder->learn_regions(1, rank1.take_region_names(), 7);  // rank 1 reports 7 dropped
  recorder->stop();
  const json all = file();
  const json r0 = regions(all, 0);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(r0[0]["name"], "inside");
  EXPECT_EQ(all.back()["name"], "ranktime_run_end");
  EXPECT_EQ(all.back()["args"]["regions_dropped"], 7);
}

TEST_F(RecorderRegions, NothingIsRecordedWhileTheTimelineIsOff) {
  TimelineRecorder rank1(1, 2);
  rank1.region("data", -1, 1 * kMs, 2 * kMs, 0);
  rank1.record_steps();
  EXPECT_EQ(rank1.outbox_size(), 0u);
}

}  // namespace
}  // namespace ranktime
