// `ranktime merge` of small files end to end: each rank's events on rank 0's clock, Kineto's
// format, a step window, bad input named and nothing written, gzip.
#include <gtest/gtest.h>

#include <string>

#include "profile_merge_inputs.h"

namespace ranktime::timeline {
namespace {

using json = nlohmann::json;
using namespace test;  // NOLINT: the merge tests' inputs

TEST_F(MergeFiles, PutsEachRanksEventsOnRankZerosClock) {
  // Rank 1's clock is 40 ms ahead; its profiler started when its clock read 5.010 s (+ offset).
  const int64_t start1 = kZeroNs + 10'000'000 + 40'000'000;
  const int64_t start0 = kZeroNs + 2'000'000;
  const std::string p1 =
      write_file(dir_ / "p1.json", legacy_profile(1, start1, "aten::\"q\"", 101).dump());
  const std::string p0 = write_file(dir_ / "p0.json", legacy_profile(0, start0).dump());
  MergeResult r = merge({{p1, -1}, {p0, 0}});
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].rank, 0);
  EXPECT_EQ(r.ranks[1].fit.anchors, 6u);
  std::map<int64_t, double> op_ts;
  std::map<int64_t, std::string> names;
  for (const json& e : merged()) {
    if (e["name"] == "process_name" && torch_process_rank(e["pid"]) >= 0) {
      names[e["pid"]] = e["args"]["name"];
    }
    if (e.value("name", "").rfind("aten::", 0) == 0 && e["tid"] == 1) op_ts[e["pid"]] = e["ts"];
  }
  EXPECT_EQ(names[torch_process_pid(1)], "rank 1 (torch)");
  EXPECT_EQ(names[torch_process_pid(0)], "rank 0 (torch)");
  // Profiler 30 ms after its start: rank 0 at 2 + 30 ms; rank 1 at 10 + 30 ms (offset removed).
  EXPECT_NEAR(op_ts[torch_process_pid(0)], 32'000, 0.01);
  EXPECT_NEAR(op_ts[torch_process_pid(1)], 40'000, 0.01);
}

TEST_F(MergeFiles, ReadsKinetoProfilesToo) {
  // Kineto's object, its times on a large base (as newer torch writes them): the anchors place it.
  json events = legacy_profile(1, kZeroNs + 40'000'000, "aten::mm", 101);
  for (json& e : events) e["ts"] = e["ts"].get<double>() + 1.7e12;
  json kineto = {{"schemaVersion", 1},
                 {"distributedInfo", {{"rank", 1}}},
                 {"baseTimeNanoseconds", 1'700'000'000'000'000'000},
                 {"traceEvents", events}};
  MergeResult r = merge({{write_file(dir_ / "k.json", kineto.dump()), 1}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.ranks.at(0).kineto);
  bool found = false;
  for (const json& e : merged()) {
    if (e.value("name", "") == "aten::mm" && e["tid"] == 1) {
      EXPECT_NEAR(e["ts"].get<double>(), 30'000, 0.01);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(MergeFiles, StepsKeepAWindow) {
  const std::string p0 = write_file(dir_ / "p0.json", legacy_profile(0, kZeroNs).dump());
  ASSERT_TRUE(merge({{p0, -1}}, 0, std::make_pair(1, 1)).ok);
  double first = 1e18;
  for (const json& e : merged()) {
    if (e.value("pid", int64_t{0}) == torch_process_pid(0) && e["ph"] == "X") {
      first = std::min(first, e["ts"].get<double>() + e["dur"].get<double>());
    }
  }
  EXPECT_GE(first, 51'000);  // step 1 runs from 51 ms: the op at 30 ms is not kept
  MergeResult none = merge({{p0, -1}}, 0, std::make_pair(1, 7));
  EXPECT_NE(none.error.find("no STEP 7 for rank 0"), std::string::npos) << none.error;
}

TEST_F(MergeFiles, BadInputNamesTheFileAndWritesNothing) {
  struct Case {
    std::string name, text;
    int64_t rank;
    std::string expected;
  };
  const std::string good0 = write_file(dir_ / "good0.json", legacy_profile(0, kZeroNs).dump());
  std::string cut = legacy_profile(1, kZeroNs, "x", 101).dump();
  cut.resize(cut.size() / 2);
  for (const Case& c : std::vector<Case>{
           {"other_run.json", legacy_profile(1, kZeroNs, "x", /*pid=*/4242).dump(), -1,
            "from another run: recorded by pid 4242"},
           {"twice.json", legacy_profile(0, kZeroNs).dump(), -1,
            "a second profile for rank 0 (" + good0 + " is the first)"},
           {"cut.json", cut, -1, "truncated"},
           {"not_profile.json", R"({"hello": [1, 2]})", -1, "not a profiler trace"},
           {"rank9.json", legacy_profile(9, kZeroNs).dump(), -1, "the timeline's run has 2 ranks"},
           {"wrong_rank.json", legacy_profile(1, kZeroNs, "x", 101).dump(), 0,
            "given as rank 0, but its anchors were recorded by rank 1"},
       }) {
    const std::string p = write_file(dir_ / c.name, c.text);
    MergeResult r = merge({{good0, -1}, {p, c.rank}});
    EXPECT_FALSE(r.ok) << c.name;
    EXPECT_EQ(r.error.rfind(p + ": ", 0), 0u) << r.error;
    EXPECT_NE(r.error.find(c.expected), std::string::npos) << r.error;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "merged.json")) << c.name;
  }
  int temp_files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_)) {
    temp_files += f.path().string().find(".tmp") != std::string::npos;
  }
  EXPECT_EQ(temp_files, 0);
}

TEST_F(MergeFiles, ATimelineCutShortOrWithoutClockZeroIsRefused) {
  MergeOptions o;
  o.profiles = {{write_file(dir_ / "p0.json", legacy_profile(0, kZeroNs).dump()), -1}};
  o.output = path("merged.json");
  std::string text = timeline_text(0);
  o.timeline = write_file(dir_ / "cut.json", text.substr(0, text.size() - 40));
  MergeResult r = merge_profiles(o);
  EXPECT_NE(r.error.find("ranktime check --repair"), std::string::npos) << r.error;
  json events = json::parse(timeline_text(0));
  events[1]["args"].erase("clock_zero_ns");
  o.timeline = write_file(dir_ / "old.json", events.dump());
  r = merge_profiles(o);
  EXPECT_NE(r.error.find("no clock_zero_ns"), std::string::npos) << r.error;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "merged.json"));
}

TEST_F(MergeFiles, WritesGzip) {
  MergeOptions o;
  o.timeline = write_file(dir_ / "t.json", timeline_text(0));
  o.profiles = {{write_file(dir_ / "p0.json", legacy_profile(0, kZeroNs).dump()), -1}};
  o.output = path("merged.json.gz");
  MergeResult r = merge_profiles(o);
  ASSERT_TRUE(r.ok) << r.error;
  std::ifstream in(o.output, std::ios::binary);
  unsigned char magic[2] = {};
  in.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  // A merged file is a timeline too: merging it again is refused, rank by rank.
  o.timeline = o.output;
  o.output = path("again.json");
  r = merge_profiles(o);
  EXPECT_NE(r.error.find("already holds rank 0's torch events"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace ranktime::timeline
