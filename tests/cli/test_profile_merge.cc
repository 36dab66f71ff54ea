// `ranktime merge`'s pure parts: the profiler-trace reader (both torch formats, hostile input),
// the anchors' clock fit, the event mapping, and the merge of small files end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "ranktime/timeline/profile_merge.h"
#include "ranktime/timeline/profile_trace.h"
#include "ranktime/timeline/trace_names.h"

namespace ranktime::timeline {
namespace {

using json = nlohmann::json;

constexpr int64_t kZeroNs = 5'000'000'000;  // rank 0's clock at the timeline's ts 0

// Anchor n of `rank` taken at profiler time `profiler_us`, when the rank's clock read `clock_ns`.
json anchor_events(int n, double profiler_us, int64_t clock_ns, int rank, int64_t pid = 100,
                   const std::string& host = "h.example") {
  const std::string marker = "ranktime.anchor." + std::to_string(n) + ".ns." +
                             std::to_string(clock_ns) + ".rank." + std::to_string(rank) + ".pid." +
                             std::to_string(pid) + ".host." + host;
  return json::array({{{"name", "ranktime.anchor." + std::to_string(n)},
                       {"ph", "X"},
                       {"ts", profiler_us - 2},
                       {"dur", 4},
                       {"tid", 1},
                       {"pid", "CPU functions"},
                       {"args", json::object()}},
                      {{"name", marker},
                       {"ph", "X"},
                       {"ts", profiler_us + 3},
                       {"dur", 1},
                       {"tid", 1},
                       {"pid", "CPU functions"},
                       {"args", json::object()}}});
}

// A legacy (torch 1.13) profile of `rank`: its profiler started at clock `start_ns` (the rank's
// clock), anchors every 20 ms for 100 ms, and an operator `op` at profiler time 30 ms.
json legacy_profile(int rank, int64_t start_ns, const std::string& op = "aten::addmm",
                    int64_t pid = 100) {
  json events = json::array();
  for (int n = 0; n <= 5; ++n) {
    const double us = 20'000.0 * n + 10;
    for (auto& e : anchor_events(n, us, start_ns + static_cast<int64_t>(us * 1000), rank, pid)) {
      events.push_back(e);
    }
  }
  events.push_back({{"name", op},
                    {"ph", "X"},
                    {"ts", 30'000},
                    {"dur", 250},
                    {"tid", 1},
                    {"pid", "CPU functions"},
                    {"args", json::object()}});
  events.push_back({{"name", "aten::mm"},
                    {"ph", "X"},
                    {"ts", 30'010},
                    {"dur", 100},
                    {"tid", 2},
                    {"pid", "CPU functions"},
                    {"args", {{"shape", "[[2, 4]]"}}}});
  return events;
}

std::string write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// A two-rank timeline: rank 1's clock is `offset_us` ahead of rank 0's; steps 0 and 1 on both.
std::string timeline_text(double offset_us, const std::string& extra = "") {
  json run = {{"ranks", 2},
              {"hostnames", {"h.example", "h.example"}},
              {"pids", {100, 101}},
              {"clock_offsets_us", {0.0, offset_us}},
              {"clock_uncertainty_us", {0.0, 3.5}},
              {"clock_zero_ns", kZeroNs}};
  json events = json::array({{{"name", "process_name"},
                              {"ph", "M"},
                              {"pid", 0},
                              {"tid", 0},
                              {"args", {{"name", "ranktime"}}}},
                             {{"name", "ranktime_run"},
                              {"ph", "i"},
                              {"s", "g"},
                              {"pid", 0},
                              {"tid", 0},
                              {"ts", 0.0},
                              {"args", run}}});
  for (int r = 0; r < 2; ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", 10 + r},
                      {"args", {{"name", "steps rank " + std::to_string(r)}}}});
    for (int s = 0; s < 2; ++s) {
      events.push_back({{"name", "STEP"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", 10 + r},
                        {"ts", 1000.0 + 50'000 * s},
                        {"dur", 49'000.0},
                        {"args", {{"step", s}}}});
    }
  }
  std::string text = events.dump();
  text.pop_back();  // the closing bracket
  return text + extra + "]\n";
}

class MergeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("profile_merge_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  MergeResult merge(const std::vector<MergeProfile>& profiles, double offset_us = 40'000,
                    std::optional<std::pair<int64_t, int64_t>> steps = std::nullopt) {
    MergeOptions o;
    o.timeline = write_file(dir_ / "t.json", timeline_text(offset_us));
    o.profiles = profiles;
    o.output = (dir_ / "merged.json").string();
    o.steps = steps;
    return merge_profiles(o);
  }
  json merged() {
    std::ifstream in(dir_ / "merged.json");
    return json::parse(in);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST(ProfileReader, ReadsTheLegacyList) {
  std::istringstream in(legacy_profile(1, 0).dump());
  uint64_t seen = 0;
  ProfileReadResult r = read_profile_events(in, [&](const json& e, uint64_t index) {
    EXPECT_EQ(index, seen++);
    EXPECT_TRUE(e.contains("name"));
    return true;
  });
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.kineto);
  EXPECT_EQ(r.events, 14u);
}

TEST(ProfileReader, ReadsKinetosObjectAndSkipsItsOtherFields) {
  json events = legacy_profile(0, 0);
  json kineto = {{"schemaVersion", 1},
                 {"distributedInfo", {{"backend", "nccl"}, {"rank", 0}, {"world_size", 2}}},
                 {"deviceProperties", json::array({{{"id", 0}, {"name", "H100"}}})},
                 {"baseTimeNanoseconds", 1'700'000'000'000'000'000},
                 {"traceEvents", events},
                 {"traceName", "x.json"}};
  std::istringstream in(kineto.dump());
  ProfileScan scan = scan_profile(in);
  EXPECT_EQ(scan.error, "");
  EXPECT_TRUE(scan.kineto);
  EXPECT_EQ(scan.events, events.size());
  EXPECT_EQ(scan.anchors.size(), 6u);
  EXPECT_EQ(scan.identity.rank, 0);
  EXPECT_EQ(scan.identity.host, "h.example");
  EXPECT_EQ(scan.threads.size(), 2u);
}

TEST(ProfileReader, SaysWhatIsWrongWithOtherJson) {
  struct Case {
    std::string text, expected;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"a": 1})", "without \"traceEvents\""},
           {R"("text")", "neither a list"},
           {R"(42)", "neither a list"},
           {R"([1, 2])", "element 0 is not an event object"},
           {R"([{"name": "x"}, [1]])", "element 1 is not an event object"},
           {R"([{"name": "x", "ts": 1}, {"name": )", "truncated"},
           {R"([{"name": "x"} junk])", "invalid JSON at byte"},
           {std::string(100, '[') + std::string(100, ']'), "element 0 is not an event object"},
           {"[{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}]",
            "nested deeper than 64"},
       }) {
    std::istringstream in(c.text);
    ProfileReadResult r = read_profile_events(in, [](const json&, uint64_t) { return true; });
    EXPECT_FALSE(r.ok) << c.text;
    EXPECT_NE(r.error.find(c.expected), std::string::npos) << c.text << " -> " << r.error;
  }
}

TEST(ProfileReader, AnAnchorlessTraceIsNotMergeable) {
  std::istringstream in(R"([{"name": "aten::mm", "ph": "X", "ts": 1, "dur": 2}])");
  EXPECT_NE(scan_profile(in).error.find("no ranktime anchors"), std::string::npos);
}

TEST(ProfileReader, RejectsAnchorsOfTwoProcessesAndTwiceRecordedAnchors) {
  json events = legacy_profile(1, 0);
  for (auto& e : anchor_events(9, 5, 5000, 1, /*pid=*/999)) events.push_back(e);
  std::istringstream mixed(events.dump());
  EXPECT_NE(scan_profile(mixed).error.find("anchors of two processes"), std::string::npos);

  events = legacy_profile(1, 0);
  events.push_back(events[0]);
  std::istringstream twice(events.dump());
  EXPECT_NE(scan_profile(twice).error.find("anchor 0 recorded twice"), std::string::npos);

  std::istringstream bad(R"([{"name": "ranktime.anchor.1.ns.x.rank.0", "ph": "X", "ts": 1}])");
  EXPECT_NE(scan_profile(bad).error.find("malformed anchor name"), std::string::npos);
}

TEST(ProfileReader, ParsesAnchorMarkersStrictly) {
  int64_t n = 0, ns = 0;
  ProfileIdentity who;
  ASSERT_TRUE(parse_anchor_marker("3.ns.-17.rank.2.pid.44.host.a.b.c", &n, &ns, &who));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(ns, -17);
  EXPECT_EQ(who.rank, 2);
  EXPECT_EQ(who.pid, 44);
  EXPECT_EQ(who.host, "a.b.c");
  for (const char* bad : {"3.ns.1.rank.2.pid.44", "3.ns.1e3.rank.2.pid.4.host.h", "-1.ns.1.rank.2",
                          "3.ns.99999999999999999999.rank.2.pid.4.host.h",
                          "3.ns.1.rank.-2.pid.4.host.h", "", "3.ts.1.rank.2.pid.4.host.h"}) {
    EXPECT_FALSE(parse_anchor_marker(bad, &n, &ns, &who)) << bad;
  }
}

TEST(ClockFitTest, FitsAnOffsetAndADrift) {
  std::vector<AnchorPoint> points;
  for (int i = 0; i < 10; ++i) {
    const double x = 1e6 + i * 10'000.0;
    points.push_back({x, 500 + (x - 1e6) * 1.0001, 1});
  }
  std::string error;
  auto fit = fit_anchors(points, &error);
  ASSERT_TRUE(fit) << error;
  EXPECT_NEAR(fit->slope, 1.0001, 1e-9);
  EXPECT_NEAR(fit->map(1e6), 500, 1e-6);
  EXPECT_NEAR(fit->max_residual_us, 0, 1e-6);
}

TEST(ClockFitTest, AShortSpanKeepsSlopeOne) {
  std::string error;
  auto fit = fit_anchors({{0, 100, 0}, {1000, 1200, 0}}, &error);  // 1 ms apart
  ASSERT_TRUE(fit) << error;
  EXPECT_EQ(fit->slope, 1);
  EXPECT_NEAR(fit->map(500), 650, 1e-9);
}

TEST(ClockFitTest, RejectsAnchorsThatAreNotOneClock) {
  std::string error;
  EXPECT_FALSE(fit_anchors({}, &error));
  EXPECT_FALSE(fit_anchors({{0, 0, 0}, {20'000, 40'000, 0}}, &error));  // slope 2
  EXPECT_NE(error.find("slope"), std::string::npos);
  std::vector<AnchorPoint> points;
  for (int i = 0; i <= 10; ++i) points.push_back({i * 10'000.0, i * 10'000.0, 0});
  points[5].trace_us += 2'000;  // one anchor of another clock, in the middle: slope still 1
  EXPECT_FALSE(fit_anchors(points, &error));
  EXPECT_NE(error.find("off the others' line"), std::string::npos);
}

TEST(MergedEvent, MapsRemapsAndEscapes) {
  ProfilePlacement p;
  p.rank = 3;
  p.fit.x0 = 100;
  p.fit.y0 = 5000;
  p.tids[profile_thread_key({{"pid", "CPU functions"}, {"tid", 7}})] = 2;
  uint64_t skipped = 0;
  const std::string hostile = "</script><b>\"quoted\"\\ \u00e9";
  json e = {{"name", hostile}, {"ph", "X"},
            {"ts", 150},       {"dur", 10},
            {"tid", 7},        {"pid", "CPU functions"},
            {"cat", "cpu_op"}, {"args", {{"<k>", "v\""}}}};
  const json out = json::parse(merged_event_text(e, p, &skipped));
  EXPECT_EQ(out["name"], hostile);
  EXPECT_EQ(out["pid"], torch_process_pid(3));
  EXPECT_EQ(out["tid"], 2);
  EXPECT_DOUBLE_EQ(out["ts"].get<double>(), 5050);
  EXPECT_DOUBLE_EQ(out["dur"].get<double>(), 10);
  EXPECT_EQ(out["args"]["<k>"], "v\"");
  EXPECT_EQ(skipped, 0u);

  json flow = {
      {"name", "fwdbwd"},      {"ph", "f"}, {"bp", "e"}, {"id", 12}, {"ts", 150}, {"tid", 7},
      {"pid", "CPU functions"}};
  const json f = json::parse(merged_event_text(flow, p, &skipped));
  EXPECT_EQ(f["id"].get<uint64_t>(), (uint64_t{1} << 52) + (uint64_t{3} << 32) + 12);
  EXPECT_EQ(f["bp"], "e");
}

TEST(MergedEvent, DropsWhatCannotBePlaced) {
  ProfilePlacement p;
  p.tids[profile_thread_key({{"pid", 1}, {"tid", 1}})] = 1;
  uint64_t skipped = 0;
  const json base = {{"name", "x"}, {"ph", "X"}, {"ts", 1}, {"dur", 1}, {"pid", 1}, {"tid", 1}};
  auto with = [&](const char* key, json value) {
    json e = base;
    e[key] = std::move(value);
    return merged_event_text(e, p, &skipped);
  };
  EXPECT_EQ(with("ts", 1e300), "");
  EXPECT_EQ(with("ts", "1"), "");
  EXPECT_EQ(with("dur", -5), "");
  EXPECT_EQ(with("dur", 1e200), "");
  EXPECT_EQ(with("name", 5), "");
  EXPECT_EQ(with("tid", 99), "");  // a thread the scan never saw
  EXPECT_EQ(with("ph", "XX"), "");
  EXPECT_EQ(skipped, 7u);
  EXPECT_EQ(with("ph", "M"), "");  // metadata: renamed, not malformed
  EXPECT_EQ(with("ph", "P"), "");  // samples: Chrome's legacy viewer lacks them
  EXPECT_EQ(skipped, 7u);
  EXPECT_NE(with("ph", "i"), "");
}

// Property: whatever bytes a profile holds, the reader ends with events read or a reason, and
// every event it hands on maps to valid JSON or to nothing.
TEST(ProfileReader, HostileInputNeverCrashesOrEmitsBadJson) {
  const std::string seed = legacy_profile(0, 0).dump();
  const std::vector<std::string> pieces = {"\"",       "\\",
                                           "\\u0000",  "\\ud800",
                                           "<script>", "]",
                                           "}",        "[",
                                           "{",        ",",
                                           ":",        "1e999",
                                           "-1e999",   "18446744073709551616",
                                           "NaN",      "\xff\xfe",
                                           "\"ts\":",  "\"ph\":\"X\"",
                                           "null"};
  std::mt19937 random(12345);
  ProfilePlacement p;
  for (int round = 0; round < 2000; ++round) {
    std::string text = seed;
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < edits; ++i) {
      const size_t at = random() % (text.size() + 1);
      switch (random() % 3) {
        case 0:
          text.insert(at, pieces[random() % pieces.size()]);
          break;
        case 1:
          text.erase(at, random() % 16);
          break;
        default:
          text.resize(std::min(text.size(), at + 1));
          break;
      }
    }
    std::istringstream in(text);
    ProfileScan scan = scan_profile(in);
    number_threads(scan, &p);
    std::istringstream again(text);
    uint64_t skipped = 0;
    ProfileReadResult r = read_profile_events(again, [&](const json& e, uint64_t) {
      const std::string out = merged_event_text(e, p, &skipped);
      if (!out.empty()) {
        EXPECT_TRUE(json::accept(out)) << out;
      }
      return true;
    });
    EXPECT_TRUE(r.ok || !r.error.empty());
    if (scan.error.empty()) {
      EXPECT_FALSE(scan.anchors.empty());
    }
  }
}

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
