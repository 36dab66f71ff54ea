// `ranktime merge`'s pure parts: the profiler-trace reader (both torch formats, hostile input),
// the anchors' clock fit and the event mapping (the merge of small files end to end:
// test_profile_merge_files.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>

#include "profile_merge_inputs.h"

namespace ranktime::timeline {
namespace {

using json = nlohmann::json;
using namespace test;  // NOLINT: the merge tests' inputs

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

}  // namespace
}  // namespace ranktime::timeline
