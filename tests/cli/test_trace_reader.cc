// The streaming reader: fields, byte offsets, truncation at every byte, malformed input.
#include "ranktime/timeline/trace_reader.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trace_text.h"

namespace ranktime::timeline {
namespace {

struct Collected {
  std::vector<TraceEvent> events;
  TraceReadResult result;
};

Collected read_text(const std::string& text, const TraceReadOptions& options = {}) {
  Collected c;
  std::istringstream in(text);
  c.result = read_trace(
      in,
      [&](const TraceEvent& e) {
        c.events.push_back(e);
        return true;
      },
      options);
  return c;
}

TEST(TraceReader, ReadsFieldsAndArgs) {
  const std::string text =
      "[\n"
      R"({"name":"ranktime_run","ph":"M","pid":0,"tid":0,"args":{"ranks":2,"hostnames":["a","b"],"config":{"X":"1"}}},)"
      "\n"
      R"({"name":"1","ph":"X","pid":3,"tid":0,"ts":21000.250,"dur":0,"args":{"rank":1,"lag_us":20000.250}},)"
      "\n"
      R"({"name":"CYCLE_START","ph":"i","s":"p","pid":0,"tid":0,"ts":5,"args":{"cycle":17}})"
      "\n]\n";
  Collected c = read_text(text);
  ASSERT_TRUE(c.result.complete) << c.result.error;
  EXPECT_FALSE(c.result.truncated);
  ASSERT_EQ(c.events.size(), 3u);
  EXPECT_EQ(c.result.events, 3u);
  EXPECT_EQ(c.events[0].name, "ranktime_run");
  EXPECT_EQ(c.events[0].ph, "M");
  EXPECT_FALSE(c.events[0].has_ts);
  EXPECT_EQ(c.events[0].args["ranks"], 2);
  EXPECT_EQ(c.events[0].args["hostnames"][1], "b");
  EXPECT_EQ(c.events[0].args["config"]["X"], "1");
  EXPECT_EQ(c.events[1].pid, 3);
  EXPECT_EQ(c.events[1].tid, 0);
  EXPECT_TRUE(c.events[1].has_ts);
  EXPECT_DOUBLE_EQ(c.events[1].ts, 21000.25);
  EXPECT_TRUE(c.events[1].has_dur);
  EXPECT_DOUBLE_EQ(c.events[1].args["lag_us"].get<double>(), 20000.25);
  EXPECT_EQ(c.events[2].scope, "p");
  for (size_t i = 0; i < c.events.size(); ++i) {
    EXPECT_EQ(c.events[i].index, i);
    EXPECT_TRUE(c.events[i].malformed.empty());
    // The offsets frame exactly the event's text.
    std::string slice =
        text.substr(c.events[i].begin_offset, c.events[i].end_offset - c.events[i].begin_offset);
    EXPECT_EQ(slice.front(), '{');
    EXPECT_EQ(slice.back(), '}');
    EXPECT_EQ(nlohmann::json::parse(slice)["name"], c.events[i].name);
  }
  EXPECT_EQ(c.result.last_event_end, c.events.back().end_offset);
  EXPECT_EQ(c.result.array_begin, 1u);
}

TEST(TraceReader, EveryCutDeliversTheCompleteEventsBeforeIt) {
  testing::SyntheticTrace t;
  t.tensors = 2;
  t.steps = 1;
  const std::string text = testing::synthetic_text(t);
  const Collected whole = read_text(text);
  ASSERT_TRUE(whole.result.complete);
  // Strip the trailing "\n]\n": any shorter prefix is cut inside the array.
  const size_t closing = text.rfind(']');
  for (size_t cut = 0; cut < closing; ++cut) {
    Collected c = read_text(text.substr(0, cut));
    size_t expected = 0;
    while (expected < whole.events.size() && whole.events[expected].end_offset <= cut) ++expected;
    ASSERT_EQ(c.events.size(), expected) << "cut at " << cut;
    EXPECT_FALSE(c.result.complete) << "cut at " << cut;
    if (cut > 0) {
      ASSERT_TRUE(c.result.truncated) << "cut at " << cut << ": " << c.result.error;
      EXPECT_EQ(c.result.error.rfind("truncated at byte " + std::to_string(cut), 0), 0u)
          << c.result.error;
      EXPECT_EQ(c.result.error_offset, cut);
    }
    EXPECT_EQ(c.result.last_event_end, expected ? whole.events[expected - 1].end_offset : 0);
  }
}

TEST(TraceReader, EmptyInputIsNotATrace) {
  Collected c = read_text("");
  EXPECT_FALSE(c.result.complete);
  EXPECT_FALSE(c.result.truncated);
  EXPECT_FALSE(c.result.error.empty());
  EXPECT_EQ(c.result.array_begin, 0u);
}

TEST(TraceReader, CorruptionInTheMiddleIsInvalidJson) {
  Collected c =
      read_text("[\n{\"name\":\"a\",\"ph\":\"M\",\"pid\":0,\"tid\":0},\n{\"name\" \"b\"},\n{}]\n");
  EXPECT_FALSE(c.result.complete);
  EXPECT_FALSE(c.result.truncated);
  EXPECT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.result.error.rfind("invalid JSON at byte ", 0), 0u) << c.result.error;
}

TEST(TraceReader, TopLevelMustBeAnArrayOfObjects) {
  Collected object = read_text(R"({"traceEvents":[]})");
  EXPECT_NE(object.result.error.find("the top level is not a JSON array"), std::string::npos)
      << object.result.error;
  for (const char* scalar : {"5", "\"text\"", "null", "true"}) {
    Collected top = read_text(scalar);
    EXPECT_NE(top.result.error.find("the top level is not a JSON array"), std::string::npos)
        << scalar << ": " << top.result.error;
  }
  Collected number = read_text(R"([{"name":"a","ph":"M","pid":0,"tid":0}, 5])");
  EXPECT_EQ(number.events.size(), 1u);
  EXPECT_NE(number.result.error.find("element is not an object"), std::string::npos)
      << number.result.error;
}

TEST(TraceReader, WrongFieldTypesAreReportedNotFatal) {
  Collected c = read_text(
      R"([{"name":"a","ph":"B","pid":"3","tid":0,"ts":1},{"name":"b","ph":"B","pid":3,"tid":0.5,"ts":1},)"
      R"({"name":"c","ph":"B","pid":3,"tid":0,"ts":"x"},{"name":"d","ph":"B","pid":3,"tid":0,"ts":1,"args":[1]}])");
  ASSERT_TRUE(c.result.complete);
  ASSERT_EQ(c.events.size(), 4u);
  EXPECT_EQ(c.events[0].malformed, "\"pid\" is a string");
  EXPECT_EQ(c.events[1].malformed, "\"tid\" is not an integer");
  EXPECT_EQ(c.events[2].malformed, "\"ts\" is a string");
  EXPECT_EQ(c.events[3].malformed, "\"args\" is not an object");
}

TEST(TraceReader, CallbackCanStop) {
  testing::SyntheticTrace t;
  std::istringstream in(testing::synthetic_text(t));
  int seen = 0;
  TraceReadResult r = read_trace(in, [&](const TraceEvent&) { return ++seen < 5; });
  EXPECT_EQ(seen, 5);
  EXPECT_TRUE(r.stopped);
  EXPECT_FALSE(r.complete);
}

TEST(TraceReader, ReportsProgress) {
  testing::SyntheticTrace t;
  t.steps = 20;
  const std::string text = testing::synthetic_text(t);
  TraceReadOptions options;
  options.progress_every_bytes = 4096;
  std::vector<std::pair<uint64_t, uint64_t>> reports;
  options.on_progress = [&](uint64_t bytes, uint64_t events) {
    reports.emplace_back(bytes, events);
  };
  Collected c = read_text(text, options);
  ASSERT_TRUE(c.result.complete);
  EXPECT_GE(reports.size(), text.size() / 4096 - 1);
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_GE(reports[i].first, reports[i - 1].first + 4096);
    EXPECT_GT(reports[i].second, reports[i - 1].second);
  }
}

TEST(TraceReader, MissingFileSaysWhy) {
  TraceReadResult r =
      read_trace_file("/nonexistent/t.json", [](const TraceEvent&) { return true; });
  EXPECT_FALSE(r.opened);
  EXPECT_NE(r.error.find("/nonexistent/t.json"), std::string::npos);
  EXPECT_NE(r.error.find("No such file"), std::string::npos) << r.error;
}

TEST(TraceReader, KeepsUtf8AndEscapes) {
  Collected c = read_text(
      R"([{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"w\"eight\\ \u00e9 \u4e2d"}}])");
  ASSERT_TRUE(c.result.complete);
  EXPECT_EQ(c.events[0].args["name"], "w\"eight\\ \xc3\xa9 \xe4\xb8\xad");
}

TEST(TraceReader, FlowFields) {
  Collected c = read_text(R"([{"name":"a","ph":"s","id":7,"pid":1,"tid":0,"ts":1},)"
                          R"({"name":"a","ph":"f","bp":"e","id":"0x7","pid":1,"tid":1,"ts":2},)"
                          R"({"name":"a","ph":"f","pid":1,"tid":1,"ts":3}])");
  ASSERT_EQ(c.events.size(), 3u);
  EXPECT_TRUE(c.events[0].has_id);
  EXPECT_EQ(c.events[0].id, "7");
  EXPECT_EQ(c.events[0].bp, "");
  EXPECT_EQ(c.events[1].id, "0x7");
  EXPECT_EQ(c.events[1].bp, "e");
  EXPECT_FALSE(c.events[2].has_id);
  EXPECT_EQ(c.events[2].id, "");
}

TEST(TraceFileSet, RotatedPiecesInOrderAndGlobs) {
  char pattern[] = "/tmp/ranktime-file-set-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  for (const char* name : {"t.json", "t.1.json", "t.2.json", "t.10.json", "u.json", "u.1.json"}) {
    std::ofstream(dir + "/" + name) << "[]";
  }
  std::string error;
  // As a shell expands t*.json: alphabetical.
  std::vector<std::string> shell = {dir + "/t.1.json", dir + "/t.10.json", dir + "/t.2.json",
                                    dir + "/t.json"};
  std::vector<std::string> expected = {dir + "/t.json", dir + "/t.1.json", dir + "/t.2.json",
                                       dir + "/t.10.json"};
  EXPECT_EQ(trace_file_set(shell, &error), expected);
  // A pattern the shell left alone (quoted) is expanded here.
  EXPECT_EQ(trace_file_set({dir + "/t*.json"}, &error), expected);
  // Sets keep the order they were named in.
  std::vector<std::string> both = trace_file_set({dir + "/u*.json", dir + "/t.1.json"}, &error);
  std::vector<std::string> both_expected = {dir + "/u.json", dir + "/u.1.json", dir + "/t.1.json"};
  EXPECT_EQ(both, both_expected);
  // A missing plain file is left for the reader to report; a pattern matching nothing fails.
  EXPECT_EQ(trace_file_set({dir + "/missing.json"}, &error).size(), 1u);
  EXPECT_TRUE(trace_file_set({dir + "/nothing*.json"}, &error).empty());
  EXPECT_EQ(error, "no file matches " + dir + "/nothing*.json");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ranktime::timeline
