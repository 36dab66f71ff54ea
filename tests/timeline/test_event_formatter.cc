// EventFormatter tests, record → JSON events: which events each kind of record gives, against
// docs/timeline-format.md. No writer thread, no file (formatter_output.h).
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "event_formatter.h"
#include "formatter_output.h"
#include "ranktime/timeline/record.h"
#include "ranktime/timeline/string_table.h"
#include "text_buffer.h"
#include "trace_nesting.h"
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

TEST(EventFormatter, RunMetadataOpensAndRunEndClosesAFile) {
  StringTable strings;
  const RunMetadata metadata = two_rank_metadata();
  EventFormatter formatter(strings, metadata.start_ns);
  TextBuffer out;
  EXPECT_EQ(formatter.append_run_metadata(metadata, metadata.start_ns, 0, &out), 4u);
  const json opened = json::parse(as_json_array(out.view()));
  const std::vector<json> expected = two_rank_metadata_events();
  ASSERT_EQ(opened.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(opened[i], expected[i]) << i;

  out.clear();
  RunEnd end;
  end.events_written = 5;
  end.clock_offsets_us = metadata.clock_offsets_us;
  end.clock_uncertainty_us = metadata.clock_uncertainty_us;
  EXPECT_EQ(formatter.append_run_end(end, &out), 1u);
  const json closed = json::parse(as_json_array(out.view()));
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0], two_rank_run_end_event());

  // A rotated file's: at its own time, numbered, and the run end names the next file.
  out.clear();
  formatter.start_file();
  formatter.append_run_metadata(metadata, at_us(2500), 3, &out);
  formatter.append_record(cycle(at_us(2600), 9), &out);
  end.next_file = "t.4.json";
  formatter.append_run_end(end, &out);
  const json rotated = json::parse(as_json_array(out.view()));
  ASSERT_EQ(rotated.size(), 6u);
  EXPECT_EQ(rotated[3]["ts"], 2500.0);
  EXPECT_EQ(rotated[3]["args"]["file_index"], 3);
  EXPECT_EQ(rotated[5]["ts"], 2600.0);  // the file's latest event
  EXPECT_EQ(rotated[5]["args"]["next_file"], "t.4.json");
}

TEST(EventFormatter, OperationSliceAndSubPhases) {
  StringTable strings;
  strings.intern("layer1.0.conv0.weight");
  const uint32_t tensor = strings.intern("layer1.0.conv1.weight");  // id 2: pid 3
  ASSERT_EQ(tensor, 2u);
  const std::vector<json> events = events_of(
      strings,
      {op_begin(tensor, 1, at_us(21013.0), Phase::kAllreduce, 6, {64, 64, 1, 1}, 16384, 12),
       span(tensor, 1, Phase::kQueue, at_us(21013.0), at_us(21013.4)),
       span(tensor, 1, Phase::kMemcpyInFusionBuffer, at_us(21013.4), at_us(21020.1)),
       span(tensor, 1, Phase::kMpiAllreduce, at_us(21020.1), at_us(21101.9)),
       op_end(tensor, 1, at_us(21108.0))});
  const std::vector<json> expected = {
      json::parse(R"({"name":"ALLREDUCE","ph":"X","pid":3,"tid":2,"ts":21013.000,"dur":95.000,
          "args":{"dtype":"float32","shape":[64,64,1,1],"bytes":16384,"fused_tensors":12}})"),
      json::parse(R"({"name":"QUEUE","ph":"X","pid":3,"tid":2,"ts":21013.000,"dur":0.400})"),
      json::parse(R"({"name":"MEMCPY_IN_FUSION_BUFFER","ph":"X","pid":3,"tid":2,"ts":21013.400,
                      "dur":6.700})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"X","pid":3,"tid":2,"ts":21020.100,
                      "dur":81.800})"),
  };
  EXPECT_EQ(events, expected);
}

// dtype, shape and bytes are written on a lane's first operation slice in a file and again when
// they change; fused_tensors when above 1; an error always. Other lanes keep their own.
TEST(EventFormatter, OperationArgumentsAreWrittenWhenTheyChange) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const uint32_t message = strings.intern("rank 1 timed out");
  std::vector<Record> records;
  auto op = [&](int16_t rank, double at, std::vector<int64_t> dims, int64_t bytes, uint16_t fused,
                uint32_t error = 0) {
    records.push_back(op_begin(tensor, rank, at_us(at), Phase::kAllgather, 6, dims, bytes, fused));
    records.push_back(op_end(tensor, rank, at_us(at + 1), Phase::kAllgather, error));
  };
  op(0, 10, {4, 2}, 32, 1);
  op(1, 10, {4, 2}, 32, 1);  // another lane: its own first slice
  op(0, 20, {4, 2}, 32, 1);  // nothing new
  op(0, 30, {4, 2}, 32, 3);
  op(0, 40, {6, 2}, 48, 1);  // the shape changed
  op(0, 50, {6, 2}, 48, 1, message);
  std::vector<json> args;
  for (const json& e : events_of(strings, records)) args.push_back(e.value("args", json()));
  const std::vector<json> expected = {
      json::parse(R"({"dtype":"float32","shape":[4,2],"bytes":32})"),
      json::parse(R"({"dtype":"float32","shape":[4,2],"bytes":32})"),
      json(),
      json::parse(R"({"fused_tensors":3})"),
      json::parse(R"({"dtype":"float32","shape":[6,2],"bytes":48})"),
      json::parse(R"({"error":"rank 1 timed out"})"),
  };
  EXPECT_EQ(args, expected);
}

TEST(EventFormatter, OperationErrorAndTruncatedShape) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const uint32_t message = strings.intern("rank 1 sent float16, rank 0 float32");
  const std::vector<json> events =
      events_of(strings, {op_begin(tensor, 0, at_us(5), Phase::kAllgather, 4,
                                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 7257600, 1),
                          op_end(tensor, 0, at_us(9), Phase::kAllgather, message)});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], json::parse(R"({"name":"ALLGATHER","ph":"X","pid":2,"tid":1,"ts":5.000,
      "dur":4.000,"args":{"dtype":"float16","shape":[1,2,3,4,5,6,7,8],"shape_truncated":true,
      "bytes":7257600,"error":"rank 1 sent float16, rank 0 float32"}})"));
}

// An operation slice is written whole at its end: a begin whose end was lost (a full buffer)
// leaves nothing, nor does an end without its begin; a sub-phase outside any is written alone.
TEST(EventFormatter, OperationWithoutItsBeginOrEndIsLeftOut) {
  StringTable strings;
  const uint32_t a = strings.intern("a");
  const uint32_t b = strings.intern("b");
  const std::vector<json> events =
      events_of(strings, {op_begin(a, 0, at_us(1)), span(a, 0, Phase::kQueue, at_us(1), at_us(2)),
                          op_begin(b, 0, at_us(3)),  // a's end never came
                          op_end(b, 0, at_us(4)), op_end(a, 0, at_us(5)),
                          span(a, 0, Phase::kMpiAllreduce, at_us(6), at_us(7))});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["pid"], 3);
  EXPECT_EQ(events[0]["dur"], 1.0);
  EXPECT_EQ(events[1], json::parse(R"({"name":"MPI_ALLREDUCE","ph":"X","pid":2,"tid":1,
                                       "ts":6.000,"dur":1.000})"));
}

TEST(EventFormatter, EveryDataTypeHasItsName) {
  StringTable strings;
  const uint32_t tensor = strings.intern("t");
  std::vector<Record> records;
  for (uint8_t dtype = 0; dtype < 8; ++dtype) {
    records.push_back(op_begin(tensor, 0, at_us(10 * dtype), Phase::kBroadcast, dtype, {3}, 3, 1));
    records.push_back(op_end(tensor, 0, at_us(10 * dtype + 5), Phase::kBroadcast));
  }
  std::vector<std::string> names;
  for (const json& e : events_of(strings, records)) names.push_back(e["args"]["dtype"]);
  EXPECT_EQ(names, (std::vector<std::string>{"uint8", "int8", "int32", "int64", "float16",
                                             "bfloat16", "float32", "float64"}));
}

// A fused batch travels as one record per tensor. Every tensor gets its operation slice (the
// batch's times, its own args); the batch's sub-phases, the same for all, are written once, in
// the first tensor's slice: the events that tensor's own records would give.
TEST(EventFormatter, FusedBatchWritesItsSubPhasesOnceInItsFirstTensor) {
  StringTable strings;
  const uint32_t a = strings.intern("grad.a");
  const uint32_t b = strings.intern("grad.\"b\"");
  const uint32_t c = strings.intern("grad.c");
  const uint32_t message = strings.intern("tensor 'grad.c': rank 1 sent 3 elements, rank 0 4");
  const SpanList spans = {{Phase::kMemcpyInFusionBuffer, {at_us(12), at_us(15.5)}},
                          {Phase::kMpiAllreduce, {at_us(15.5), at_us(40.25)}},
                          {Phase::kMemcpyOutFusionBuffer, {at_us(40.25), at_us(44)}}};
  struct Tensor {
    uint32_t id;
    uint8_t dtype;
    std::vector<int64_t> dims;
    int64_t bytes;
  };
  const std::vector<Tensor> tensors = {
      {a, 6, {256}, 1024}, {b, 7, {2, 3}, 48}, {c, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 362880}};
  for (const uint32_t error : {0u, message}) {
    for (const int16_t rank : {int16_t{1}, int16_t{3}}) {
      std::vector<Record> compact_tensors;
      std::vector<Record> first_alone;  // the first tensor's own records
      const auto fused = static_cast<uint16_t>(tensors.size());
      for (const Tensor& t : tensors) {
        compact_tensors.push_back(
            op_begin(t.id, rank, 0, Phase::kAllreduce, t.dtype, t.dims, t.bytes, 0));
      }
      const Tensor& first = tensors.front();
      first_alone.push_back(op_begin(first.id, rank, at_us(10), Phase::kAllreduce, first.dtype,
                                     first.dims, first.bytes, fused));
      first_alone.push_back(span(first.id, rank, Phase::kQueue, at_us(10), at_us(11.5)));
      for (const auto& [phase, times] : spans)
        first_alone.push_back(span(first.id, rank, phase, times.first, times.second));
      first_alone.push_back(op_end(first.id, rank, at_us(44.5), Phase::kAllreduce, error));

      const std::vector<json> events =
          events_of(strings, batch(rank, Phase::kAllreduce, at_us(10), at_us(11.5), at_us(44.5),
                                   spans, compact_tensors, error));
      const std::vector<json> expected_first = events_of(strings, first_alone);
      ASSERT_EQ(expected_first.size(), 5u);
      ASSERT_EQ(events.size(), 5u + 2) << "error " << error << " rank " << rank;
      EXPECT_EQ(std::vector<json>(events.begin(), events.begin() + 5), expected_first);
      for (size_t i = 1; i < tensors.size(); ++i) {
        const json& e = events[4 + i];
        EXPECT_EQ(e["name"], "ALLREDUCE");
        EXPECT_EQ(e["pid"], tensors[i].id + 1);
        EXPECT_EQ(e["tid"], rank + 1);
        EXPECT_EQ(e["ts"], 10.0);
        EXPECT_EQ(e["dur"], 34.5);
        EXPECT_EQ(e["args"]["shape"],
                  json(std::vector<int64_t>(
                      tensors[i].dims.begin(),
                      tensors[i].dims.begin() + std::min<size_t>(tensors[i].dims.size(), 8))));
        EXPECT_EQ(e["args"]["bytes"], tensors[i].bytes);
        EXPECT_EQ(e["args"]["fused_tensors"], 3);
        if (error != 0) {
          EXPECT_EQ(e["args"]["error"], strings.lookup(message));
        } else {
          EXPECT_FALSE(e["args"].contains("error"));
        }
      }
    }
  }
}

// A tensor record is formatted only with its own batch's header and every sub-phase the header
// announced (records can be dropped when the buffer is full, or corrupt from a peer); batches on
// different lanes do not mix.
TEST(EventFormatter, BatchTensorWithoutItsWholeBatchIsLeftOut) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const SpanList one_span = {{Phase::kMpiAllreduce, {at_us(2), at_us(3)}}};
  const Record t = op_begin(tensor, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  std::vector<Record> records;
  auto add = [&](const std::vector<Record>& more) {
    records.insert(records.end(), more.begin(), more.end());
  };
  std::vector<Record> lone = batch(1, Phase::kAllreduce, at_us(1), at_us(1), at_us(4), {}, {t});
  add({lone.back()});  // no header on lane 1 yet
  std::vector<Record> short_of_a_span =
      batch(0, Phase::kAllreduce, at_us(1), at_us(1), at_us(4), one_span, {t});
  short_of_a_span.erase(short_of_a_span.begin() + 1);  // its only sub-phase went missing
  add(short_of_a_span);
  std::vector<Record> lane0_open =
      batch(0, Phase::kAllreduce, at_us(5), at_us(5), at_us(8), {}, {t});
  add({lane0_open.front()});
  add({lone.back()});  // lane 0 has a batch open, lane 1 still has none
  add(batch(2, Phase::kBroadcast, at_us(9), at_us(9.5), at_us(11), one_span, {t}));

  const std::vector<json> events = events_of(strings, records);
  const std::vector<json> expected = {
      json::parse(R"({"name":"BROADCAST","ph":"X","pid":2,"tid":3,"ts":9.000,"dur":2.000,
                      "args":{"dtype":"float32","shape":[4],"bytes":16}})"),
      json::parse(R"({"name":"QUEUE","ph":"X","pid":2,"tid":3,"ts":9.000,"dur":0.500})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"X","pid":2,"tid":3,"ts":2.000,"dur":1.000})"),
  };
  EXPECT_EQ(events, expected);  // the last batch only
}

TEST(EventFormatter, NegotiationSliceAndTicks) {
  StringTable strings;
  strings.intern("a");
  const uint32_t tensor = strings.intern("layer1.0.conv1.weight");
  const uint32_t mismatch = strings.intern("shape mismatch: rank 0 [4], rank 1 [5]");
  const std::vector<json> events = events_of(
      strings, {negotiate_begin(tensor, at_us(1000)), tick(tensor, 0, at_us(1000), 0),
                tick(tensor, 1, at_us(21000.25), 20000250),
                negotiate_end(tensor, at_us(21012.5), 1, 20000250),
                // rank 1's readiness came before the slice could begin (the tensor's
                // previous negotiation ended later): its tick moved, its lag kept.
                negotiate_begin(tensor, at_us(30000), Phase::kNegotiateBarrier),
                tick(tensor, 1, at_us(30000), 0), tick(tensor, 0, at_us(30000.5), 700),
                negotiate_end(tensor, at_us(30001), 0, 700, mismatch, Phase::kNegotiateBarrier)});
  const std::vector<json> expected = {
      json::parse(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"X","pid":3,"tid":0,"ts":1000.000,
          "dur":20012.500,"args":{"last_rank":1,"spread_us":20000.250}})"),
      json::parse(R"({"name":"0","ph":"X","pid":3,"tid":0,"ts":1000.000,"dur":0})"),
      json::parse(R"({"name":"1","ph":"X","pid":3,"tid":0,"ts":21000.250,"dur":0})"),
      json::parse(R"({"name":"NEGOTIATE_BARRIER","ph":"X","pid":3,"tid":0,"ts":30000.000,
          "dur":1.000,"args":{"last_rank":0,"spread_us":0.700,
                              "error":"shape mismatch: rank 0 [4], rank 1 [5]"}})"),
      json::parse(R"({"name":"1","ph":"X","pid":3,"tid":0,"ts":30000.000,"dur":0})"),
      json::parse(R"({"name":"0","ph":"X","pid":3,"tid":0,"ts":30000.500,"dur":0,
                      "args":{"lag_us":0.700}})"),
  };
  EXPECT_EQ(events, expected);

  // A negotiation without its begin or end, or without ticks, leaves nothing.
  EXPECT_TRUE(
      events_of(strings, {negotiate_begin(tensor, at_us(1)), tick(tensor, 0, at_us(1), 0),
                          negotiate_end(tensor + 1, at_us(2), 0, 0),
                          negotiate_begin(tensor, at_us(3)), negotiate_end(tensor, at_us(4), 0, 0)})
          .empty());
}

// A negotiation of up to kMaxInlineTicks ranks travels as one record; the formatter gives exactly
// the events of the begin/tick/end records, each tick placed into the slice by tick_ns() as the
// recorder places them (into [previous negotiation's end, the moment all were known)).
TEST(EventFormatter, NegotiationRecordGivesTheEventsOfBeginTicksAndEnd) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.n");
  const uint32_t message = strings.intern("tensor 'grad.n': shapes differ: rank 0 [4], rank 2 [5]");
  std::mt19937_64 random(20261122);
  std::vector<Record> compact, expanded;
  size_t lags_written = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int ranks = 1 + static_cast<int>(random() % kMaxInlineTicks);
    std::vector<std::pair<int64_t, int>> ready;
    for (int r = 0; r < ranks; ++r)
      ready.emplace_back(at_us(1000.0 * trial + static_cast<double>(random() % 900'000) / 1000), r);
    std::sort(ready.begin(), ready.end());
    // Sometimes the previous end lies after the first readiness, or beyond the known time.
    const int64_t known = ready.back().first + static_cast<int64_t>(random() % 3000) - 1000;
    const int64_t floor = ready.front().first + static_cast<int64_t>(random() % 4000) - 2000;
    const uint32_t error = trial % 7 == 0 ? message : 0;
    const Phase phase = trial % 2 ? Phase::kNegotiateAllreduce : Phase::kNegotiateBroadcast;

    Record n =
        negotiate_begin(tensor, std::min(std::max(ready.front().first, floor), known), phase);
    n.kind = RecordKind::kNegotiation;
    n.end_ns = std::max(known, n.ts_ns);
    n.args.negotiation.error_string = error;
    n.args.negotiation.ticks = static_cast<uint16_t>(ranks);
    for (int i = 0; i < ranks; ++i) {
      n.args.negotiation.ready_ns[i] = ready[i].first;
      n.args.negotiation.rank[i] = ready[i].second;
    }
    compact.push_back(n);

    expanded.push_back(negotiate_begin(tensor, n.ts_ns, phase));
    const int64_t first = ready.front().first;
    for (const auto& [t, rank] : ready) {
      const int64_t at = tick_ns(t, n.ts_ns, n.end_ns);
      EXPECT_TRUE(at >= n.ts_ns && (at < n.end_ns || at == n.ts_ns));
      lags_written += at - n.ts_ns != t - first;
      expanded.push_back(tick(tensor, rank, at, t - first));
    }
    expanded.push_back(negotiate_end(tensor, n.end_ns, ready.back().second,
                                     ready.back().first - first, error, phase));
  }
  const std::vector<json> expected = events_of(strings, expanded);
  EXPECT_EQ(events_of(strings, compact), expected);
  size_t lags = 0;
  for (const json& e : expected) lags += e.contains("args") && e["args"].contains("lag_us");
  EXPECT_EQ(lags, lags_written);
  EXPECT_GT(lags, 0u);  // the random floors moved some

  Record empty = compact.front();
  empty.args.negotiation.ticks = 0;  // corrupt: no tick, no slice
  EXPECT_TRUE(events_of(strings, {empty}).empty());
}

// In each negotiation, an arrow (a flow start on the last rank's tick, a flow end bound to the
// enclosing slice) leads to the start of the tensor's processing on rank 0's lane, written with
// that slice. Ids are unique; a failed negotiation or one whose processing began before its last
// tick (clock uncertainty) gets none.
TEST(EventFormatter, FlowArrowFromTheLastTickToRankZerosOperation) {
  StringTable strings;
  const uint32_t a = strings.intern("grad.a");
  const uint32_t b = strings.intern("grad.b");
  const uint32_t message = strings.intern("shapes differ");
  const Record ta = op_begin(a, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  const Record tb = op_begin(b, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  std::vector<Record> records = {
      negotiation(a, at_us(10), at_us(30), {{1, at_us(10)}, {0, at_us(25)}}),
      negotiation(b, at_us(12), at_us(31), {{0, at_us(12)}, {1, at_us(20)}})};
  auto add = [&](const std::vector<Record>& more) {
    records.insert(records.end(), more.begin(), more.end());
  };
  add(batch(1, Phase::kAllreduce, at_us(40), at_us(41), at_us(50), {}, {ta, tb}));  // rank 1: no
  add(batch(0, Phase::kAllreduce, at_us(42), at_us(43), at_us(52), {}, {ta, tb}));
  add({negotiation(a, at_us(60), at_us(70), {{0, at_us(60)}, {1, at_us(65)}}, message)});
  add(batch(0, Phase::kAllreduce, at_us(80), at_us(81), at_us(82), {}, {ta}));  // a failed: no
  add({negotiation(b, at_us(90), at_us(99), {{0, at_us(90)}, {1, at_us(98)}})});
  add(batch(0, Phase::kAllreduce, at_us(97), at_us(97), at_us(99), {}, {tb}));  // back in time
  add({negotiation(b, at_us(100), at_us(120), {{1, at_us(100)}, {0, at_us(110)}})});
  add({op_begin(b, 0, at_us(125)), op_end(b, 0, at_us(126))});  // each tensor's own records

  const json events = format_events(strings, records);
  std::vector<json> flows;
  for (const json& e : events) {
    if (e["ph"] == "s" || e["ph"] == "f") flows.push_back(e);
  }
  const std::vector<json> expected = {
      json::parse(R"({"name":"last_ready","ph":"s","id":1,"pid":2,"tid":0,"ts":25.000})"),
      json::parse(R"({"name":"last_ready","ph":"f","bp":"e","id":1,"pid":2,"tid":1,"ts":42.000})"),
      json::parse(R"({"name":"last_ready","ph":"s","id":2,"pid":3,"tid":0,"ts":20.000})"),
      json::parse(R"({"name":"last_ready","ph":"f","bp":"e","id":2,"pid":3,"tid":1,"ts":42.000})"),
      json::parse(R"({"name":"last_ready","ph":"s","id":3,"pid":3,"tid":0,"ts":110.000})"),
      json::parse(R"({"name":"last_ready","ph":"f","bp":"e","id":3,"pid":3,"tid":1,"ts":125.000})"),
  };
  EXPECT_EQ(flows, expected);
  // Each arrow's end follows its slice in the file.
  for (size_t i = 1; i < events.size(); ++i) {
    if (events[i]["ph"] != "f") continue;
    size_t slice = i;
    while (slice > 0 && events[slice]["ph"] != "X") --slice;
    while (slice > 0 && events[slice]["name"] != "ALLREDUCE") --slice;
    EXPECT_EQ(events[slice]["pid"], events[i]["pid"]);
    EXPECT_EQ(events[slice]["tid"], 1);
    EXPECT_EQ(events[slice]["ts"], events[i]["ts"]);
  }
}

TEST(EventFormatter, StepMarksOnAThreadPerRank) {
  StringTable strings;
  const json events = format_events(
      strings, {step(0, 0, at_us(100), at_us(200)), step(2, 0, at_us(110), at_us(215)),
                step(0, 1, at_us(200), at_us(300)), step(-1, 0, at_us(1), at_us(2))});
  const std::vector<json> expected = {
      json::parse(R"({"name":"thread_name","ph":"M","pid":0,"tid":1,
                      "args":{"name":"steps rank 0"}})"),
      json::parse(R"({"name":"thread_sort_index","ph":"M","pid":0,"tid":1,
                      "args":{"sort_index":1}})"),
      json::parse(R"({"name":"STEP","ph":"X","pid":0,"tid":1,"ts":100.000,"dur":100.000,
                      "args":{"step":0}})"),
      json::parse(R"({"name":"thread_name","ph":"M","pid":0,"tid":3,
                      "args":{"name":"steps rank 2"}})"),
      json::parse(R"({"name":"thread_sort_index","ph":"M","pid":0,"tid":3,
                      "args":{"sort_index":3}})"),
      json::parse(R"({"name":"STEP","ph":"X","pid":0,"tid":3,"ts":110.000,"dur":105.000,
                      "args":{"step":0}})"),
      json::parse(R"({"name":"STEP","ph":"X","pid":0,"tid":1,"ts":200.000,"dur":100.000,
                      "args":{"step":1}})"),
  };
  EXPECT_EQ(std::vector<json>(events.begin(), events.end()), expected);  // rank -1: corrupt
}

TEST(EventFormatter, RunLevelEventsOnPidZero) {
  StringTable strings;
  const uint32_t stall = strings.intern("STALL");
  const uint32_t message = strings.intern("ranks 2 have not submitted: grad.w");
  const uint32_t lateness = strings.intern("lateness_median_lag_us");
  const json trace =
      format_events(strings, {cycle(at_us(5021.25), 17), instant(at_us(61000), stall, message),
                              counter(at_us(62000), lateness, 2, 20011.5)});
  const std::vector<json> expected = {
      json::parse(R"({"name":"CYCLE_START","ph":"i","s":"p","pid":0,"tid":0,"ts":5021.250,
                      "args":{"cycle":17}})"),
      json::parse(R"({"name":"STALL","ph":"i","s":"g","pid":0,"tid":0,"ts":61000.000,
                      "args":{"message":"ranks 2 have not submitted: grad.w"}})"),
      json::parse(R"({"name":"lateness_median_lag_us","ph":"C","pid":0,"tid":0,"ts":62000.000,
                      "args":{"rank 2":20011.5}})"),
  };
  EXPECT_EQ(events_other_than_metadata(trace), expected);
  // pid 0 events name no tensor: no tensor process appears.
  for (const json& e : trace) EXPECT_EQ(e["pid"], 0);
}

// A realistic mix of every record kind: the file keeps to the metadata names both viewers know,
// and Perfetto's ordering of equal timestamps (longest first, then file order) nests every slice
// where the file does.
std::vector<Record> every_kind_of_record(StringTable* strings) {
  std::vector<Record> records;
  std::vector<uint32_t> tensors;
  for (int i = 0; i < 4; ++i) tensors.push_back(strings->intern("t" + std::to_string(i)));
  const uint32_t stall = strings->intern("STALL");
  for (int s = 0; s < 3; ++s) {
    const int64_t t0 = at_us(1000.0 * s);
    records.push_back(cycle(t0, s + 1));
    for (int16_t r = 0; r < 3; ++r) records.push_back(step(r, s, t0 + 7 * r, t0 + 1000 + 7 * r));
    for (uint32_t t : tensors) {
      // Ranks ready at once (equal ticks), one at the slice's begin, one clamped to its end.
      records.push_back(
          negotiation(t, t0 + 10, t0 + 50, {{0, t0 + 10}, {1, t0 + 10}, {2, t0 + 50 + 5}}));
    }
    for (int16_t r = 0; r < 3; ++r) {
      std::vector<Record> fused;
      for (uint32_t t : tensors)
        fused.push_back(op_begin(t, r, 0, Phase::kAllreduce, 6, {8}, 32, 0));
      // QUEUE shares the operation's begin, a zero-length MPI sub-phase sits between two others.
      const SpanList spans = {{Phase::kMemcpyInFusionBuffer, {t0 + 100, t0 + 120}},
                              {Phase::kMpiAllreduce, {t0 + 120, t0 + 120}},
                              {Phase::kMemcpyOutFusionBuffer, {t0 + 120, t0 + 150}}};
      const std::vector<Record> b =
          batch(r, Phase::kAllreduce, t0 + 60, t0 + 100, t0 + 150, spans, fused);
      records.insert(records.end(), b.begin(), b.end());
    }
    // One tensor on the GPU path, its sub-phases its own, one ending with the operation.
    records.push_back(op_begin(tensors[0], 1, t0 + 200, Phase::kBroadcast, 6, {8}, 32, 1));
    records.push_back(span(tensors[0], 1, Phase::kQueue, t0 + 200, t0 + 210));
    records.push_back(span(tensors[0], 1, Phase::kNcclBcast, t0 + 210, t0 + 230));
    records.push_back(op_end(tensors[0], 1, t0 + 230, Phase::kBroadcast));
    records.push_back(instant(t0 + 300, stall, stall));
  }
  return records;
}

TEST(EventFormatter, OnlyMetadataNamesBothViewersKnow) {
  StringTable strings;
  const std::vector<Record> records = every_kind_of_record(&strings);
  const RunMetadata metadata = two_rank_metadata();
  const json events = format_events(strings, records, &metadata);
  std::set<std::string> phases;
  for (const json& e : events) {
    phases.insert(e["ph"]);
    if (e["ph"] == "M") {
      EXPECT_TRUE(is_known_metadata_name(e["name"])) << e.dump();
    }
  }
  EXPECT_EQ(phases, (std::set<std::string>{"M", "X", "i", "s", "f"}));
}

TEST(EventFormatter, PerfettoNestsSlicesAsTheFileDoes) {
  StringTable strings;
  const json events = format_events(strings, every_kind_of_record(&strings));
  EXPECT_TRUE(nesting_differences(events).empty())
      << ::testing::PrintToString(nesting_differences(events));
  const Nesting nesting = format_nesting(events);
  size_t children = 0;
  for (int parent : nesting.parent) children += parent >= 0;
  EXPECT_EQ(children, 3u * (4 * 3 + 3 * 4 + 2));  // ticks, batch sub-phases, GPU sub-phases

  // The case Perfetto gets wrong, which the writer avoids: a parent that begins as a 'B'
  // event, and a child complete event sharing its timestamp, comes before it.
  const json mixed = json::parse(R"([
      {"name":"ALLREDUCE","ph":"B","pid":1,"tid":1,"ts":1.0},
      {"name":"QUEUE","ph":"X","pid":1,"tid":1,"ts":1.0,"dur":0.5}])");
  json as_x = mixed;
  as_x[0]["ph"] = "X";
  as_x[0]["dur"] = 2.0;
  EXPECT_EQ(perfetto_nesting(as_x).parent[1], 0);
}

// A new file (rotation) is told again what the previous one was: names, a lane's args, a batch's
// sub-phases; an arrow whose start went to the previous file is left out. Slices still open
// carry over and are written whole in the new file.
TEST(EventFormatter, NewFileRepeatsWhatThePreviousOneWasTold) {
  StringTable strings;
  const uint32_t a = strings.intern("grad.a");
  const uint32_t b = strings.intern("grad.b");
  EventFormatter formatter(strings, kStartNs);
  TextBuffer first, second;
  const Record ta = op_begin(a, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  const Record tb = op_begin(b, 0, 0, Phase::kAllreduce, 6, {4}, 16, 0);
  std::vector<Record> records = {negotiation(b, at_us(1), at_us(2), {{0, at_us(1)}})};
  const std::vector<Record> fused =
      batch(0, Phase::kAllreduce, at_us(3), at_us(4), at_us(5), {}, {ta, tb});
  records.insert(records.end(), fused.begin(), fused.end() - 1);  // grad.b's record comes later
  records.push_back(op_begin(a, 1, at_us(6)));
  for (const Record& r : records) formatter.append_record(r, &first);
  formatter.start_file();
  formatter.append_record(fused.back(), &second);
  formatter.append_record(op_end(a, 1, at_us(7)), &second);

  const json before = json::parse(as_json_array(first.view()));
  const json after = json::parse(as_json_array(second.view()));
  EXPECT_EQ(events_named(before, "QUEUE").size(), 1u);
  EXPECT_EQ(events_named(after, "QUEUE").size(), 1u);  // in grad.b's slice this time
  EXPECT_EQ(events_named(after, "QUEUE")[0]["pid"], b + 1);
  EXPECT_EQ(metadata_named(after, "process_name").size(), 2u);
  EXPECT_EQ(metadata_named(after, "thread_name").size(), 4u);  // 2 negotiate, rank 0 and rank 1
  for (const json& e : events_named(after, "ALLREDUCE")) {
    EXPECT_EQ(e["args"]["dtype"], "float32") << e.dump();  // told again
  }
  EXPECT_EQ(events_named(after, "ALLREDUCE").size(), 2u);  // grad.b's, and grad.a's on rank 1
  EXPECT_TRUE(events_named(after, "last_ready").empty());
  EXPECT_EQ(events_named(before, "last_ready").size(), 0u);  // grad.b's slice is in the new file
}

}  // namespace
}  // namespace ranktime::timeline::test
