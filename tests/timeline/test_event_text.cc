// EventFormatter tests of the JSON text itself: numbers as written, extreme values, escaping and
// UTF-8, and the names it writes (string table, phases). No writer thread, no file.
#include <cstdint>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formatter_output.h"
#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

TEST(EventFormatter, TimestampsAreMicrosecondsWithThreeDecimals) {
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  const std::vector<int64_t> offsets_ns = {
      0,         1,          999,           1000, 1234567, -1500, -1,        86400000000001,
      100000000, 1000000001, 4000000000000, 10,   100,     99999, 123456789, -10020};
  std::vector<Record> records;
  for (int64_t offset : offsets_ns) records.push_back(cycle(kStartNs + offset, 1));
  records.push_back(negotiate_begin(tensor, kStartNs));
  records.push_back(tick(tensor, 0, kStartNs, 333));
  records.push_back(negotiate_end(tensor, kStartNs + 1, 0, 2001));

  std::vector<std::string> ts;
  std::vector<std::string> decimal3;
  const std::string text = as_json_array(format_text(strings, records));
  for (const auto& [key, lexeme] : number_lexemes(text).numbers) {
    if (key == "ts") ts.push_back(lexeme);
    if (key == "ts" || key == "lag_us" || key == "spread_us" || (key == "dur" && lexeme != "0")) {
      decimal3.push_back(lexeme);
    }
  }
  const std::vector<std::string> expected = {
      "0.000",  "0.001",           "0.999",      "1.000",       "1234.567",       "-1.500",
      "-0.001", "86400000000.001", "100000.000", "1000000.001", "4000000000.000", "0.010",
      "0.100",  "99.999",          "123456.789", "-10.020",     "0.000",          "0.000"};
  EXPECT_EQ(ts, expected);
  EXPECT_EQ(decimal3.size(), expected.size() + 3);  // the slice's dur and spread, the tick's lag
  const std::regex three_decimals(R"(-?[0-9]+\.[0-9]{3})");
  for (const std::string& lexeme : decimal3) {
    EXPECT_TRUE(std::regex_match(lexeme, three_decimals)) << lexeme;
  }
}

// Every number at its extreme in every kind of event: the text of each event still fits the
// room the formatter makes for it (it aborts otherwise) and reads back as the same values.
TEST(EventFormatter, ExtremeValuesInEveryFieldFitAndReadBack) {
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  const uint32_t name = strings.intern("n");
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Timestamps are taken relative to the run start, so they stay clear of overflow.
  constexpr int64_t kEarly = kMin / 2, kLate = kMax / 2;
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int16_t kMin16 = std::numeric_limits<int16_t>::min();
  const std::vector<int64_t> widest(12, kMin);
  std::vector<Record> records = {
      op_begin(tensor, kMin16, kEarly, Phase::kAllreduce, 255, widest, kMax, 65535),
      span(tensor, kMin16, Phase::kMemcpyInFusionBuffer, kEarly, kLate),
      op_end(tensor, kMin16, kLate, Phase::kAllreduce, name),
      span(tensor, -1, Phase::kMemcpyInFusionBuffer, kEarly, kLate),
      negotiate_begin(tensor, kEarly),
      tick(tensor, kMin32, kEarly, kMin),
      tick(tensor, kMin32, kLate - 1, kMax),
      negotiate_end(tensor, kLate, kMin32, kMin, name),
      cycle(kEarly, kMin),
      counter(kEarly, name, kMin32, -1.7976931348623157e308),
      instant(kLate, name, name),
      step(std::numeric_limits<int16_t>::max(), kMin, kEarly, kLate),
  };
  const SpanList spans(40, {Phase::kMemcpyOutFusionBuffer, {kEarly, kLate}});
  for (const Record& r :
       batch(kMin16, Phase::kBarrier, kEarly, kLate, kLate, spans,
             {op_begin(tensor, 0, 0, Phase::kAllreduce, 255, widest, kMax, 0)}, name)) {
    records.push_back(r);
  }
  Record n = negotiate_begin(tensor, kEarly);
  n.kind = RecordKind::kNegotiation;
  n.end_ns = kLate;
  n.args.negotiation.error_string = name;
  n.args.negotiation.ticks = std::numeric_limits<uint16_t>::max();  // as many as fit
  for (int i = 0; i < kMaxInlineTicks; ++i) {
    n.args.negotiation.rank[i] = kMin32;
    n.args.negotiation.ready_ns[i] = i % 2 ? kMin : kMax;
  }
  records.push_back(n);

  const std::vector<json> events = events_of(strings, records);
  ASSERT_EQ(events.size(), 2u + 1 + 3 + 3 + 1 + (2 + spans.size()) + 1 + kMaxInlineTicks);
  const json& op = events[0];
  EXPECT_EQ(op["tid"], kMin16 + 1);
  EXPECT_EQ(op["args"]["bytes"], kMax);
  EXPECT_EQ(op["args"]["shape"], json(std::vector<int64_t>(kMaxInlineDims, kMin)));
  EXPECT_EQ(op["args"]["dtype"], "unknown");
  EXPECT_EQ(op["args"]["fused_tensors"], 65535);
  EXPECT_EQ(op["args"]["error"], "n");
  EXPECT_EQ(events[1]["name"], "MEMCPY_IN_FUSION_BUFFER");
  EXPECT_EQ(events[2]["tid"], 0);  // rank -1's lane
  const json& negotiation = events[3];
  EXPECT_EQ(negotiation["args"]["last_rank"], kMin32);
  EXPECT_DOUBLE_EQ(negotiation["args"]["spread_us"].get<double>(), -9223372036854775.808);
  EXPECT_DOUBLE_EQ(events[4]["args"]["lag_us"].get<double>(), -9223372036854775.808);
  EXPECT_DOUBLE_EQ(events[5]["args"]["lag_us"].get<double>(), 9223372036854775.807);
  EXPECT_EQ(events[6]["args"]["cycle"], kMin);
  EXPECT_DOUBLE_EQ(events[7]["args"]["rank -2147483648"].get<double>(), -1.7976931348623157e308);
  EXPECT_EQ(events[8]["args"]["message"], "n");
  EXPECT_EQ(events[9]["args"]["step"], kMin);
  EXPECT_EQ(events[9]["tid"], std::numeric_limits<int16_t>::max() + 1);
  const json& barrier = events[10];
  EXPECT_EQ(barrier["name"], "BARRIER");
  EXPECT_EQ(barrier["tid"], kMin16 + 1);
  EXPECT_EQ(barrier["args"]["error"], "n");
  EXPECT_FALSE(barrier["args"].contains("shape"));  // the lane's args, written just above
  const json& inline_negotiation = events[12 + spans.size()];
  EXPECT_EQ(inline_negotiation["args"]["error"], "n");
  const json& last_tick = events.back();
  EXPECT_EQ(last_tick["name"], std::to_string(kMin32));
  EXPECT_EQ(last_tick["ts"].get<double>(), inline_negotiation["ts"].get<double>());
}

TEST(EventFormatter, EscapesNamesAndMessages) {
  StringTable strings;
  std::string controls;
  for (char c = 1; c < 0x20; ++c) controls.push_back(c);
  controls += "\x7f end";
  const std::vector<std::string> names = {
      "quote\"d", "back\\slash", "new\nline", "tab\there", "ctrl\x01",
      "梯度/∇w",  controls,      "emoji 🚀",   "",          "</script>",
  };
  std::vector<uint32_t> ids;
  for (const std::string& name : names) ids.push_back(strings.intern(name));

  RunMetadata metadata = two_rank_metadata();
  metadata.hostnames = {"host\"1\"", "梯度"};
  metadata.config = {{"WEIRD\\KEY", "va\"l\nue"}};
  std::vector<Record> records;
  for (size_t i = 0; i < ids.size(); ++i) {
    records.push_back(op_begin(ids[i], 0, at_us(i)));
    records.push_back(op_end(ids[i], 0, at_us(i + 0.5), Phase::kAllreduce, ids[i]));
    records.push_back(instant(at_us(i), ids[i], ids[i]));
    records.push_back(counter(at_us(i), ids[i], 0, 1.0));
  }
  const json trace = format_events(strings, records, &metadata);

  EXPECT_EQ(trace[3]["args"]["hostnames"], json(metadata.hostnames));
  EXPECT_EQ(trace[3]["args"]["config"], json::parse(R"({"WEIRD\\KEY":"va\"l\nue"})"));
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t pid = ids[i] + 1;
    std::vector<std::string> process_names, errors, instants, messages, counters;
    for (const json& e : trace) {
      if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid) {
        process_names.push_back(e["args"]["name"]);
      }
      if (e["ph"] == "X" && e["pid"] == pid && e.value("args", json::object()).contains("error")) {
        errors.push_back(e["args"]["error"]);
      }
      if (e["ph"] == "i" && e.value("s", "") == "g" && e["ts"] == static_cast<double>(i)) {
        instants.push_back(e["name"]);
        messages.push_back(e["args"]["message"]);
      }
      if (e["ph"] == "C" && e["ts"] == static_cast<double>(i)) counters.push_back(e["name"]);
    }
    const std::vector<std::string> expected = {names[i]};
    EXPECT_EQ(process_names, expected) << i;
    EXPECT_EQ(instants, expected) << i;
    EXPECT_EQ(messages, expected) << i;
    EXPECT_EQ(counters, expected) << i;
    // Error id 0 means "no error": the empty name's op end carries no error arg.
    EXPECT_EQ(errors, ids[i] != 0 ? expected : std::vector<std::string>{}) << i;
  }
}

TEST(EventFormatter, InvalidUtf8BecomesReplacementCharacters) {
  StringTable strings;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad\xff", "bad\xEF\xBF\xBD"},                            // never valid byte
      {"cut\xc3", "cut\xEF\xBF\xBD"},                            // truncated 2-byte sequence
      {"cut\xe6\xa2!", "cut\xEF\xBF\xBD!"},                      // truncated 3-byte sequence
      {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},                  // overlong '/'
      {"\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // UTF-16 surrogate
      {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // > U+10FFFF
      {"ok \xe2\x88\x87 \x80 ok", "ok \xe2\x88\x87 \xEF\xBF\xBD ok"},  // stray continuation
  };
  std::vector<Record> records;
  std::vector<uint32_t> ids;
  for (const auto& [raw, expected] : cases) {
    ids.push_back(strings.intern(raw));
    records.push_back(negotiation(ids.back(), at_us(1), at_us(2), {{0, at_us(1)}}));
  }
  const json trace = format_events(strings, records);  // throws if the UTF-8 is not valid
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> process_names;
    for (const json& e : metadata_named(trace, "process_name")) {
      if (e["pid"] == ids[i] + 1) process_names.push_back(e["args"]["name"]);
    }
    EXPECT_EQ(process_names, std::vector<std::string>{cases[i].second}) << i;
  }
}

TEST(StringTable, InternsDenselyAndKeepsReferences) {
  StringTable strings;
  EXPECT_EQ(strings.size(), 1u);
  EXPECT_EQ(strings.lookup(0), "");
  EXPECT_EQ(strings.intern(""), 0u);
  const uint32_t a = strings.intern("a");
  const std::string& a_ref = strings.lookup(a);
  for (int i = 0; i < 10000; ++i) strings.intern("n" + std::to_string(i));
  EXPECT_EQ(strings.intern("a"), a);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(a_ref, "a");  // still valid after growth
  EXPECT_EQ(strings.size(), 10002u);
  EXPECT_EQ(strings.lookup(123456), "");  // an id never given out reads as "none"
}

TEST(Phase, EveryPhaseHasItsDocumentedName) {
  EXPECT_STREQ(phase_name(Phase::kAllreduce), "ALLREDUCE");
  EXPECT_STREQ(phase_name(Phase::kNegotiateBarrier), "NEGOTIATE_BARRIER");
  EXPECT_STREQ(phase_name(Phase::kWaitForOtherTensorData), "WAIT_FOR_OTHER_TENSOR_DATA");
  EXPECT_STREQ(phase_name(Phase::kNcclReducescatter), "NCCL_REDUCESCATTER");
  EXPECT_STREQ(phase_name(Phase::kMemcpyOutHostBuffer), "MEMCPY_OUT_HOST_BUFFER");
  std::set<std::string> names;
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    names.insert(phase_name(static_cast<Phase>(i)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(Phase::kCount));
}

}  // namespace
}  // namespace ranktime::timeline::test
