// The checker's rules on hand-broken traces, and repair of files cut at every byte.
#include "ranktime/timeline/trace_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <unistd.h>

#include "ranktime/timeline/trace_analysis.h"
#include "trace_text.h"

namespace ranktime::timeline {
namespace {

using testing::event_lines;
using testing::find_event;
using testing::join_events;

struct Checked {
  TraceReadResult read;
  TraceChecker checker;
  std::string all_messages() const {
    std::string out;
    for (const auto& v : checker.violations()) {
      out += "#" + std::to_string(v.event_index) + ": " + v.message + "\n";
    }
    return out;
  }
  bool has(const std::string& part) const {
    for (const auto& v : checker.violations()) {
      if (v.message.find(part) != std::string::npos) return true;
    }
    return false;
  }
};

Checked check_text(const std::string& text) {
  Checked c;
  std::istringstream in(text);
  c.read = read_trace(in, [&](const TraceEvent& e) {
    c.checker.add(e);
    return true;
  });
  c.checker.finish(c.read);
  return c;
}

testing::SyntheticTrace small_trace() {
  testing::SyntheticTrace t;
  t.ranks = 2;
  t.tensors = 3;
  t.steps = 2;
  t.fused = 2;
  t.slow_rank = 1;
  t.delay_us = 250;
  t.mark_cycles = true;
  return t;
}

TEST(TraceCheck, GeneratedTracesPass) {
  for (int ranks : {1, 2, 4}) {
    testing::SyntheticTrace t = small_trace();
    t.ranks = ranks;
    t.slow_rank = ranks - 1;
    Checked c = check_text(testing::synthetic_text(t));
    EXPECT_TRUE(c.checker.ok()) << c.all_messages();
    EXPECT_EQ(c.checker.ranks(), ranks);
    EXPECT_EQ(c.checker.negotiations(), 6u);
    EXPECT_TRUE(c.checker.has_run_end());
  }
}

TEST(TraceCheck, MissingEndIsNeverClosed) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int i = find_event(events, {"\"MPI_ALLREDUCE\"", "\"ph\":\"E\""});
  ASSERT_GE(i, 0);
  events.erase(events.begin() + i);
  Checked c = check_text(join_events(events));
  EXPECT_FALSE(c.checker.ok());
  // The operation's E then meets the open MPI_ALLREDUCE.
  EXPECT_TRUE(
      c.has("'E' of 'ALLREDUCE' on pid 1 (tensor 'grad.0') tid 1 does not match the open "
            "slice 'MPI_ALLREDUCE'"))
      << c.all_messages();
}

TEST(TraceCheck, UnclosedSliceAtTheEnd) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  events.insert(
      events.end() - 1,
      R"({"name":"ALLREDUCE","ph":"B","pid":2,"tid":2,"ts":900000.000,"args":{"dtype":"float32","shape":[4],"bytes":16,"fused_tensors":1}})");
  Checked c = check_text(join_events(events));
  EXPECT_EQ(c.checker.violation_count(), 1u) << c.all_messages();
  EXPECT_TRUE(
      c.has("slice 'ALLREDUCE' on pid 2 (tensor 'grad.1') tid 2 (ts 900000.000) is never closed"))
      << c.all_messages();
  EXPECT_EQ(c.checker.violations()[0].event_index, events.size() - 2);
}

TEST(TraceCheck, EndWithoutBegin) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int i = find_event(events, {"\"QUEUE\"", "\"ph\":\"B\""});
  events.erase(events.begin() + i);
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(
      c.has("'E' of 'QUEUE' on pid 1 (tensor 'grad.0') tid 1 does not match the open slice "
            "'ALLREDUCE'"))
      << c.all_messages();
  // A stray E on an empty lane closes nothing.
  events.push_back(R"({"name":"QUEUE","ph":"E","pid":3,"tid":1,"ts":999999.000})");
  Checked d = check_text(join_events(events));
  EXPECT_TRUE(d.has("'E' of 'QUEUE' on pid 3 (tensor 'grad.2') tid 1 closes no open slice"))
      << d.all_messages();
}

TEST(TraceCheck, MissingTick) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int i = find_event(events, {"\"name\":\"1\"", "\"ph\":\"X\""});
  ASSERT_GE(i, 0);
  events.erase(events.begin() + i);
  Checked c = check_text(join_events(events));
  EXPECT_EQ(c.checker.violation_count(), 1u) << c.all_messages();
  EXPECT_TRUE(c.has("NEGOTIATE_ALLREDUCE on pid 1 (tensor 'grad.0') tid 0 (opened at event #"))
      << c.all_messages();
  EXPECT_TRUE(c.has("has ticks for 1 of 2 ranks; missing rank 1")) << c.all_messages();
}

// A process set's tensor (its name ends in the set's label) is negotiated by the set's ranks:
// their ticks, and no others, are what its negotiations need.
TEST(TraceCheck, AProcessSetsNegotiationHasItsMembersTicks) {
  testing::SyntheticTrace t = small_trace();
  t.ranks = 3;
  t.tensors = 1;
  t.fused = 1;
  t.slow_rank = -1;
  t.tensor_names = {"grad [process set 1: ranks 0,2]"};
  const auto all = event_lines(testing::synthetic_text(t));
  auto without = [](std::vector<std::string> events, const char* tick, int count) {
    for (int i; count-- > 0 && (i = find_event(events, {tick, "\"ph\":\"X\""})) >= 0;) {
      events.erase(events.begin() + i);
    }
    return events;
  };
  const auto members = without(all, "\"name\":\"1\"", 1000);
  Checked ok = check_text(join_events(members));
  EXPECT_TRUE(ok.checker.ok()) << ok.all_messages();
  EXPECT_EQ(ok.checker.negotiations(), 2u);

  Checked stranger = check_text(join_events(all));
  EXPECT_TRUE(
      stranger.has("tick of rank 1 on pid 1 (tensor 'grad [process set 1: ranks 0,2]') "
                   "tid 0, a rank outside the tensor's process set"))
      << stranger.all_messages();

  Checked missing = check_text(join_events(without(members, "\"name\":\"2\"", 1)));
  EXPECT_TRUE(missing.has("has ticks for 1 of 2 ranks of its process set; missing rank 2"))
      << missing.all_messages();
}

TEST(TraceCheck, DuplicateAndStrayTicks) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int i = find_event(events, {"\"name\":\"0\"", "\"ph\":\"X\""});
  events.insert(events.begin() + i + 1, events[i]);
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(c.has("second tick of rank 0 in the NEGOTIATE_ALLREDUCE")) << c.all_messages();

  auto outside = event_lines(testing::synthetic_text(small_trace()));
  int end = find_event(outside, {"\"NEGOTIATE_ALLREDUCE\"", "\"ph\":\"E\""});
  outside.insert(
      outside.begin() + end + 1,
      R"({"name":"0","ph":"X","pid":1,"tid":0,"ts":99999.000,"dur":0,"args":{"rank":0,"lag_us":0}})");
  Checked d = check_text(join_events(outside));
  EXPECT_TRUE(
      d.has("tick of rank 0 on pid 1 (tensor 'grad.0') tid 0 is outside a NEGOTIATE_* slice"))
      << d.all_messages();

  auto range = event_lines(testing::synthetic_text(small_trace()));
  int b = find_event(range, {"\"NEGOTIATE_ALLREDUCE\"", "\"ph\":\"B\""});
  range.insert(
      range.begin() + b + 1,
      R"({"name":"7","ph":"X","pid":1,"tid":0,"ts":1000.000,"dur":0,"args":{"rank":7,"lag_us":0}})");
  Checked e = check_text(join_events(range));
  EXPECT_TRUE(e.has("tick of rank 7 but the run has 2 ranks (0..1)")) << e.all_messages();
}

TEST(TraceCheck, UnknownNamesAndPlacement) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  events.insert(events.end() - 1, R"({"name":"REDUCE","ph":"B","pid":1,"tid":1,"ts":900000.000})");
  events.insert(events.end() - 1, R"({"name":"REDUCE","ph":"E","pid":1,"tid":1,"ts":900001.000})");
  events.insert(events.end() - 1, R"({"name":"QUEUE","ph":"B","pid":1,"tid":2,"ts":900000.000})");
  events.insert(events.end() - 1, R"({"name":"QUEUE","ph":"E","pid":1,"tid":2,"ts":900001.000})");
  events.insert(events.end() - 1,
                R"({"name":"NEGOTIATE_FOO","ph":"B","pid":2,"tid":0,"ts":900000.000})");
  events.insert(events.end() - 1,
                R"({"name":"NEGOTIATE_FOO","ph":"E","pid":2,"tid":0,"ts":900001.000})");
  events.insert(events.end() - 1, R"({"name":"foo","ph":"M","pid":0,"tid":0,"args":{}})");
  events.insert(events.end() - 1,
                R"({"name":"STALL","ph":"i","s":"g","pid":0,"tid":0,"ts":900002.000,"args":{}})");
  events.insert(events.end() - 1, R"({"name":"x","ph":"P","pid":0,"tid":0,"ts":900002.000})");
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(
      c.has("unknown slice 'REDUCE' on pid 1 (tensor 'grad.0') tid 1 (expected ALLREDUCE, "
            "ALLGATHER, BROADCAST, BARRIER, REDUCESCATTER, ALLTOALL or JOIN)"))
      << c.all_messages();
  EXPECT_TRUE(
      c.has("sub-phase 'QUEUE' on pid 1 (tensor 'grad.0') tid 2 is outside an operation slice"))
      << c.all_messages();
  EXPECT_TRUE(c.has("unknown slice 'NEGOTIATE_FOO' on the negotiate thread")) << c.all_messages();
  EXPECT_TRUE(c.has("NEGOTIATE_ALLTOALL or NEGOTIATE_JOIN)")) << c.all_messages();
  EXPECT_TRUE(c.has("unknown metadata event 'foo'")) << c.all_messages();
  EXPECT_TRUE(c.has("instant 'STALL' on pid 0 has no string \"message\" arg")) << c.all_messages();
  EXPECT_TRUE(c.has("unknown phase \"ph\":\"P\"")) << c.all_messages();
}

TEST(TraceCheck, SubphasesNeverNest) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int q = find_event(events, {"\"QUEUE\"", "\"ph\":\"B\""});
  events.insert(events.begin() + q + 1,
                R"({"name":"MPI_ALLREDUCE","ph":"B","pid":1,"tid":1,"ts":1275.000})");
  events.insert(events.begin() + q + 2,
                R"({"name":"MPI_ALLREDUCE","ph":"E","pid":1,"tid":1,"ts":1275.000})");
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(
      c.has("'MPI_ALLREDUCE' on pid 1 (tensor 'grad.0') tid 1 opens inside the sub-phase 'QUEUE'"))
      << c.all_messages();
}

TEST(TraceCheck, TimeOrderPerThread) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int q = find_event(events, {"\"QUEUE\"", "\"ph\":\"E\""});
  // Move the QUEUE end before its begin.
  auto& line = events[q];
  line.replace(line.find("\"ts\":"), std::string::npos, "\"ts\":1.000}");
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(
      c.has("ts 1.000 of 'QUEUE' ('E') is earlier than the previous event on pid 1 "
            "(tensor 'grad.0') tid 1"))
      << c.all_messages();
}

TEST(TraceCheck, MissingRunMetadataAndProcessName) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  events.erase(events.begin() + find_event(events, {"\"ranktime_run\""}));
  events.erase(events.begin() + find_event(events, {"\"process_name\"", "\"pid\":2"}));
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(c.has("no ranktime_run metadata event before the first timed event"))
      << c.all_messages();
  EXPECT_TRUE(c.has("pid 2 has events before its process_name metadata")) << c.all_messages();
}

TEST(TraceCheck, MissingArgs) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  int op = find_event(events, {"\"ALLREDUCE\"", "\"ph\":\"B\""});
  events[op] = R"({"name":"ALLREDUCE","ph":"B","pid":1,"tid":1,"ts":1270.000})";
  int end = find_event(events, {"\"NEGOTIATE_ALLREDUCE\"", "\"ph\":\"E\""});
  auto& line = events[end];
  line = line.substr(0, line.find(",\"args\"")) + "}";
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(
      c.has("ALLREDUCE slice on pid 1 (tensor 'grad.0') tid 1 has no integer \"bytes\" arg"))
      << c.all_messages();
  EXPECT_TRUE(c.has("has no integer \"last_rank\" arg")) << c.all_messages();
  EXPECT_TRUE(c.has("has no number \"spread_us\" arg")) << c.all_messages();
}

// A trace with a flow arrow from the last rank's tick of the first negotiation to the start of
// that tensor's processing on rank 0's lane, as Perfetto's flow events (v1) write it.
// The *_fields ("id":7,) go into the start and end events.
std::vector<std::string> with_flow(const std::string& start_fields, const std::string& end_fields) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  const int tick = find_event(events, {"\"name\":\"1\",\"ph\":\"X\"", "\"pid\":1,"});
  const int op = find_event(events, {"\"ALLREDUCE\",\"ph\":\"B\"", "\"pid\":1,\"tid\":1,"});
  EXPECT_GE(tick, 0);
  EXPECT_GE(op, 0);
  auto ts_of = [&](int i) {
    const std::string& e = events[i];
    size_t at = e.find("\"ts\":") + 5;
    return e.substr(at, e.find_first_of(",}", at) - at);
  };
  const std::string flow = R"({"name":"waited for rank 1","cat":"lateness",)";
  // The end first: the file is sorted per thread only, so either end may come first.
  events.insert(events.begin() + op + 1,
                flow + end_fields + R"("ph":"f","pid":1,"tid":1,"ts":)" + ts_of(op) + "}");
  events.insert(events.begin() + tick + 1,
                flow + start_fields + R"("ph":"s","pid":1,"tid":0,"ts":)" + ts_of(tick) + "}");
  return events;
}

TEST(TraceCheck, FlowArrowsValidate) {
  for (const std::string id : {R"("id":7,)", R"("id":"0x7",)"}) {
    Checked c = check_text(join_events(with_flow(id, id + R"("bp":"e",)")));
    EXPECT_TRUE(c.checker.ok()) << c.all_messages();
    EXPECT_EQ(c.checker.flows(), 1u);
    EXPECT_EQ(c.checker.flow_events(), 2u);
    EXPECT_EQ(c.checker.negotiations(), 6u);
  }
  // An arrow whose other end is not in the file (cut off, or in another rotated file) is fine.
  auto events = with_flow(R"("id":1,)", R"("id":2,"bp":"e",)");
  Checked dangling = check_text(join_events(events));
  EXPECT_TRUE(dangling.checker.ok()) << dangling.all_messages();
  EXPECT_EQ(dangling.checker.flows(), 0u);
}

TEST(TraceCheck, BrokenFlowArrows) {
  Checked no_id = check_text(join_events(with_flow("", R"("id":1,)")));
  EXPECT_TRUE(
      no_id.has("flow event 'waited for rank 1' ('s') on pid 1 (tensor 'grad.0') tid 0 "
                "has no \"id\""))
      << no_id.all_messages();
  Checked bad_bp = check_text(join_events(with_flow(R"("id":1,)", R"("id":1,"bp":"x",)")));
  EXPECT_TRUE(bad_bp.has("has \"bp\":\"x\" (the only binding point is \"e\")"))
      << bad_bp.all_messages();
  Checked float_id = check_text(join_events(with_flow(R"("id":1.5,)", R"("id":1,)")));
  EXPECT_TRUE(float_id.has("\"id\" is neither an integer nor a string")) << float_id.all_messages();
  // An arrow back in time: the end placed before the start.
  auto events = with_flow(R"("id":3,)", R"("id":3,"bp":"e",)");
  int end = find_event(events, {"\"ph\":\"f\""});
  auto& line = events[end];
  line.replace(line.find("\"ts\":"), std::string::npos, "\"ts\":1.000}");
  Checked back = check_text(join_events(events));
  EXPECT_TRUE(back.has("flow arrow id 3 ends (ts 1.000) before it starts")) << back.all_messages();
}

TEST(TraceCheck, StepMarks) {
  testing::SyntheticTrace t = small_trace();
  t.step_marks = true;
  t.start_lag_us = 20;
  const std::string text = testing::synthetic_text(t);
  Checked good = check_text(text);
  EXPECT_TRUE(good.checker.ok()) << good.all_messages();

  auto events = event_lines(text);
  auto broken = events;
  broken.erase(broken.begin() + find_event(broken, {"\"steps rank 1\""}));
  Checked unnamed = check_text(join_events(broken));
  EXPECT_TRUE(unnamed.has("STEP slice on pid 0 tid 2, a thread not named 'steps rank r'"))
      << unnamed.all_messages();

  broken = events;
  int second = find_event(broken, {"\"STEP\"", "\"tid\":1,", "\"step\":1"});
  ASSERT_GE(second, 0);
  broken[second].replace(broken[second].find("\"step\":1"), 8, "\"step\":0");
  Checked repeated = check_text(join_events(broken));
  EXPECT_TRUE(repeated.has("STEP 0 of rank 0 after step 0: a rank's steps are numbered upwards"))
      << repeated.all_messages();

  broken = events;
  int name = find_event(broken, {"\"steps rank 1\""});
  broken[name].replace(broken[name].find("steps rank 1"), 12, "steps rank 9");
  Checked outside = check_text(join_events(broken));
  EXPECT_TRUE(outside.has("thread 'steps rank 9' on pid 0 names rank 9, but the run has 2 ranks"))
      << outside.all_messages();

  broken = events;
  int step = find_event(broken, {"\"STEP\""});
  broken[step].erase(broken[step].find(",\"dur\""),
                     broken[step].find(",\"args\"") - broken[step].find(",\"dur\""));
  Checked no_dur = check_text(join_events(broken));
  EXPECT_TRUE(no_dur.has("STEP slice of rank 0 has no \"dur\" >= 0")) << no_dur.all_messages();
}

// Regions: each rank's own process (pid 1e9 + r), thread 1 `regions`, user-named slices that nest.
TEST(TraceCheck, RegionsNestOnTheirRanksThread) {
  const std::vector<std::string> events = event_lines(testing::synthetic_text(small_trace()));
  const auto with = [&](const std::vector<std::string>& regions) {
    std::vector<std::string> out = events;
    out.insert(out.end() - 1, regions.begin(), regions.end());  // before ranktime_run_end
    return check_text(join_events(out));
  };
  const std::string pid = "\"pid\":1000000001";
  const std::vector<std::string> names = {"{\"name\":\"process_name\",\"ph\":\"M\"," + pid +
                                              ",\"tid\":0,\"args\":{\"name\":\"rank 1\"}}",
                                          "{\"name\":\"thread_name\",\"ph\":\"M\"," + pid +
                                              ",\"tid\":1,\"args\":{\"name\":\"regions\"}}"};
  const auto slice = [&](const std::string& name, double ts, double dur, const std::string& args,
                         int tid = 1) {
    return "{\"name\":\"" + name + "\",\"ph\":\"X\"," + pid + ",\"tid\":" + std::to_string(tid) +
           ",\"ts\":" + std::to_string(ts) + ",\"dur\":" + std::to_string(dur) + args + "}";
  };
  std::vector<std::string> good = names;
  good.push_back(slice("step", 10, 50, ""));
  good.push_back(slice("<\\/script><script>", 10, 20, ",\"args\":{\"blocked_us\":3.5}"));
  good.push_back(slice("backward", 30, 30, ""));
  Checked nested = with(good);
  EXPECT_TRUE(nested.checker.ok()) << nested.all_messages();

  std::vector<std::string> overlap = names;
  overlap.push_back(slice("data", 10, 20, ""));
  overlap.push_back(slice("forward", 20, 20, ""));
  EXPECT_TRUE(with(overlap).has("slices on one thread must nest")) << with(overlap).all_messages();

  std::vector<std::string> blocked = names;
  blocked.push_back(slice("data", 10, 20, ",\"args\":{\"blocked_us\":-1}"));
  EXPECT_TRUE(with(blocked).has("has a \"blocked_us\" that is not a number >= 0"));

  std::vector<std::string> other_thread = names;
  other_thread.push_back(slice("data", 10, 20, "", 2));
  EXPECT_TRUE(with(other_thread).has("process has only its regions thread"));
}

// TIMELINE_RANKS / TIMELINE_ALL_RANKS=0: the other ranks' missing lanes are expected; a lane the
// run did not choose is a violation, except with slowest:K, whose choice moves.
TEST(TraceCheck, LanesOfChosenRanksOnly) {
  testing::SyntheticTrace t = small_trace();
  t.ranks = 4;
  t.slow_rank = 2;
  t.lane_ranks = {0, 2};
  t.timeline_ranks = "2";
  Checked chosen = check_text(testing::synthetic_text(t));
  EXPECT_TRUE(chosen.checker.ok()) << chosen.all_messages();
  EXPECT_EQ(chosen.checker.lane_ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(chosen.checker.lane_choice(), "TIMELINE_RANKS=2");

  t.timeline_ranks = "slowest:1";
  Checked slowest = check_text(testing::synthetic_text(t));
  EXPECT_TRUE(slowest.checker.ok()) << slowest.all_messages();
  EXPECT_EQ(slowest.checker.lane_choice(), "TIMELINE_RANKS=slowest:1");

  t.timeline_ranks = "1,3";
  Checked other = check_text(testing::synthetic_text(t));
  EXPECT_EQ(other.checker.violation_count(), 1u) << other.all_messages();
  EXPECT_TRUE(
      other.has("tid 3 is the lane of rank 2, but the run wrote only the lanes "
                "TIMELINE_RANKS=1,3 chose"))
      << other.all_messages();

  t.timeline_ranks = "";  // TIMELINE_ALL_RANKS=0: rank 0's only
  Checked rank0 = check_text(testing::synthetic_text(t));
  EXPECT_TRUE(rank0.has("lane of rank 2, but the run wrote only the lanes TIMELINE_ALL_RANKS=0"))
      << rank0.all_messages();
  t.lane_ranks = {0};
  EXPECT_TRUE(check_text(testing::synthetic_text(t)).checker.ok());

  t.lane_ranks.clear();  // every rank's: no choice to report
  Checked all = check_text(testing::synthetic_text(t));
  EXPECT_TRUE(all.checker.ok()) << all.all_messages();
  EXPECT_EQ(all.checker.lane_choice(), "");
  EXPECT_EQ(all.checker.lane_ranks(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(TraceCheck, RunMetadataMayBeAnInstant) {
  auto events = event_lines(testing::synthetic_text(small_trace()));
  for (const char* name : {"\"ranktime_run\"", "\"ranktime_run_end\""}) {
    int i = find_event(events, {name});
    ASSERT_GE(i, 0);
    const std::string m = "\"ph\":\"M\"";
    events[i].replace(events[i].find(m), m.size(), "\"ph\":\"i\",\"s\":\"g\",\"ts\":0");
  }
  // The end instant comes last, with the file's last timestamp.
  auto& end = events.back();
  end.replace(end.find("\"ts\":0"), 6, "\"ts\":999999");
  Checked c = check_text(join_events(events));
  EXPECT_TRUE(c.checker.ok()) << c.all_messages();
  EXPECT_EQ(c.checker.ranks(), 2);
  EXPECT_TRUE(c.checker.has_run_end());
}

// The same trace with every B/E pair on a tensor's threads written as one complete 'X' slice
// (at the B's place, args of both), as a writer that knows a slice's end may write it.
std::string as_complete_slices(const std::string& text) {
  auto events = event_lines(text);
  std::vector<nlohmann::json> parsed;
  std::vector<bool> keep(events.size(), true);
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> open;
  for (size_t i = 0; i < events.size(); ++i) {
    parsed.push_back(nlohmann::json::parse(events[i]));
    nlohmann::json& e = parsed.back();
    if (e["pid"].get<int64_t>() == 0 || (e["ph"] != "B" && e["ph"] != "E")) continue;
    auto& stack = open[{e["pid"].get<int64_t>(), e["tid"].get<int64_t>()}];
    if (e["ph"] == "B") {
      stack.push_back(i);
      continue;
    }
    nlohmann::json& b = parsed[stack.back()];
    stack.pop_back();
    b["ph"] = "X";
    b["dur"] = e["ts"].get<double>() - b["ts"].get<double>();
    if (e.contains("args")) b["args"].update(e["args"]);
    keep[i] = false;
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (keep[i]) out.push_back(parsed[i].dump());
  }
  return join_events(out);
}

TEST(TraceCheck, CompleteSlicesReadAsPairs) {
  testing::SyntheticTrace t = small_trace();
  t.ranks = 4;
  t.slow_rank = 2;
  t.delay_us = 5000;
  t.fused = 3;
  t.tensors = 6;
  const std::string pairs = testing::synthetic_text(t);
  const std::string complete = as_complete_slices(pairs);
  ASSERT_EQ(complete.find("\"ph\":\"B\""), std::string::npos);
  Checked c = check_text(complete);
  EXPECT_TRUE(c.checker.ok()) << c.all_messages();
  EXPECT_EQ(c.checker.negotiations(), 12u);
  EXPECT_TRUE(c.checker.open_slices().empty());

  auto summarize = [](const std::string& text) {
    TraceSummarizer summarizer;
    std::istringstream in(text);
    read_trace(in, [&](const TraceEvent& e) {
      summarizer.add(e);
      return true;
    });
    return summarizer.finish();
  };
  Summary a = summarize(pairs), b = summarize(complete);
  EXPECT_EQ(b.negotiations, a.negotiations);
  EXPECT_EQ(b.slowest_rank, 2);
  ASSERT_EQ(b.lateness.size(), a.lateness.size());
  for (size_t r = 0; r < a.lateness.size(); ++r) {
    EXPECT_DOUBLE_EQ(b.lateness[r].caused_wait_us, a.lateness[r].caused_wait_us);
    EXPECT_EQ(b.lateness[r].times_last, a.lateness[r].times_last);
  }
  ASSERT_EQ(b.phases.size(), a.phases.size());
  for (size_t i = 0; i < a.phases.size(); ++i) {
    EXPECT_EQ(b.phases[i].phase, a.phases[i].phase);
    EXPECT_EQ(b.phases[i].count, a.phases[i].count);
    EXPECT_NEAR(b.phases[i].busy_us, a.phases[i].busy_us, 1e-6);
  }
  ASSERT_EQ(b.fusion.size(), 1u);
  EXPECT_EQ(b.fusion[0].batches, a.fusion[0].batches);
  EXPECT_EQ(b.fusion[0].tensors, a.fusion[0].tensors);

  // A complete slice that overlaps its parent's end is still an improper nesting.
  auto events = event_lines(complete);
  int queue = find_event(events, {"\"QUEUE\"", "\"ph\":\"X\""});
  auto& line = events[queue];
  line.replace(line.find("\"dur\":"), std::string::npos, "\"dur\":100000.0}");
  Checked broken = check_text(join_events(events));
  EXPECT_FALSE(broken.checker.ok());
}

TEST(TraceCheck, TruncatedFileSaysWhereAndHowToRepair) {
  std::string text = testing::synthetic_text(small_trace());
  text.resize(text.size() / 2);
  Checked c = check_text(text);
  EXPECT_TRUE(c.read.truncated);
  EXPECT_TRUE(c.has("truncated at byte " + std::to_string(text.size())));
  EXPECT_TRUE(c.has("`ranktime check --repair` completes the file"));
}

std::string temp_path(const char* tag) {
  return ::testing::TempDir() + "ranktime_check_" + tag + "_" + std::to_string(::getpid()) +
         ".json";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Repairs `text` through files, as the CLI does, and returns the result.
std::string repair_text(const std::string& text, RepairPlan* plan_out = nullptr) {
  Checked c = check_text(text);
  RepairPlan plan = plan_repair(c.read, c.checker.open_slices(), c.checker.max_ts(), text.size());
  const std::string in = temp_path("in");
  {
    std::ofstream out(in, std::ios::binary);
    out << text;
  }
  std::string error;
  EXPECT_TRUE(apply_repair(in, in, plan, &error)) << error;
  std::string repaired = read_file(in);
  std::remove(in.c_str());
  if (plan_out) *plan_out = plan;
  return repaired;
}

TEST(TraceRepair, EveryCutRepairsToAValidTrace) {
  testing::SyntheticTrace t = small_trace();
  t.steps = 1;
  const std::string text = testing::synthetic_text(t);
  const auto all = event_lines(text);
  const size_t run_end = text.find("ranktime_run\"");
  const size_t after_run = text.find('}', text.find("\"all_ranks\"", run_end)) + 2;
  for (size_t cut = after_run; cut < text.size(); cut += 7) {
    const std::string prefix = text.substr(0, cut);
    Checked before = check_text(prefix);
    RepairPlan plan;
    std::string repaired = repair_text(prefix, &plan);
    Checked after = check_text(repaired);
    ASSERT_TRUE(after.checker.ok()) << "cut at " << cut << ":\n"
                                    << after.all_messages() << repaired;
    // Every complete event is kept, plus one E per open slice.
    EXPECT_EQ(after.read.events, before.read.events + plan.closed_slices) << "cut at " << cut;
    EXPECT_EQ(repaired.substr(0, before.read.last_event_end),
              prefix.substr(0, before.read.last_event_end));
  }
}

TEST(TraceRepair, ClosesSlicesOpenInAValidFile) {
  // What a SIGKILL leaves: valid JSON (the writer closes the array at every flush), but slices
  // whose E was never flushed.
  auto events = event_lines(testing::synthetic_text(small_trace()));
  events.pop_back();  // ranktime_run_end
  int last_op_end = -1;
  for (int i = 0; i < static_cast<int>(events.size()); ++i) {
    if (events[i].find("\"ph\":\"E\"") != std::string::npos &&
        events[i].find("\"ALLREDUCE\"") != std::string::npos) {
      last_op_end = i;
    }
  }
  events.erase(events.begin() + last_op_end - 2, events.begin() + last_op_end + 1);
  const std::string text = join_events(events);
  Checked before = check_text(text);
  EXPECT_TRUE(before.read.complete);
  EXPECT_TRUE(before.has("is never closed")) << before.all_messages();
  RepairPlan plan;
  std::string repaired = repair_text(text, &plan);
  EXPECT_EQ(plan.closed_slices, 1u);
  EXPECT_NE(repaired.find(R"("args":{"repaired":true})"), std::string::npos);
  Checked after = check_text(repaired);
  EXPECT_TRUE(after.checker.ok()) << after.all_messages();
  EXPECT_FALSE(after.checker.has_run_end());
  EXPECT_EQ(after.read.events, before.read.events + 1);
}

TEST(TraceRepair, CompleteTraceNeedsNothing) {
  const std::string text = testing::synthetic_text(small_trace());
  Checked c = check_text(text);
  RepairPlan plan = plan_repair(c.read, c.checker.open_slices(), c.checker.max_ts(), text.size());
  EXPECT_FALSE(plan.needed);
}

TEST(TraceRepair, EmptyAndBracketOnly) {
  EXPECT_EQ(repair_text(""), "[\n]\n");
  EXPECT_EQ(repair_text("[\n"), "[\n]\n");
}

TEST(TraceRepair, IntoAnotherFile) {
  std::string text = testing::synthetic_text(small_trace());
  text.resize(text.size() - 200);
  Checked c = check_text(text);
  RepairPlan plan = plan_repair(c.read, c.checker.open_slices(), c.checker.max_ts(), text.size());
  const std::string in = temp_path("src"), out = temp_path("dst");
  {
    std::ofstream f(in, std::ios::binary);
    f << text;
  }
  std::string error;
  ASSERT_TRUE(apply_repair(in, out, plan, &error)) << error;
  EXPECT_EQ(read_file(in), text);  // the input is left alone
  EXPECT_TRUE(check_text(read_file(out)).checker.ok());
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(TraceCheck, CorruptedBytesNeverCrashAnyReader) {
  // Flip, drop and insert random bytes: the reader, checker, summariser and repair must report,
  // never crash or loop.
  const std::string text = testing::synthetic_text(small_trace());
  std::mt19937 rng(1234);
  const std::string noise = "{}[],:\"\\0123456789.-eE tfn\n\x01\xff";
  for (int round = 0; round < 300; ++round) {
    std::string broken = text;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      size_t at = rng() % broken.size();
      char c = noise[rng() % noise.size()];
      switch (rng() % 3) {
        case 0:
          broken[at] = c;
          break;
        case 1:
          broken.erase(at, 1 + rng() % 40);
          break;
        default:
          broken.insert(at, 1, c);
      }
    }
    Checked c = check_text(broken);
    TraceSummarizer summarizer;
    std::istringstream in(broken);
    read_trace(in, [&](const TraceEvent& e) {
      summarizer.add(e);
      return true;
    });
    summarizer.finish();
    RepairPlan plan =
        plan_repair(c.read, c.checker.open_slices(), c.checker.max_ts(), broken.size());
    if (!plan.needed) continue;
    std::string repaired = broken.substr(0, plan.keep_bytes) + plan.tail;
    Checked after = check_text(repaired);
    EXPECT_TRUE(after.read.complete) << "round " << round << ": " << after.read.error;
  }
}

}  // namespace
}  // namespace ranktime::timeline
