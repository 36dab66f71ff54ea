// EventFormatter tests, record → JSON events: which events each kind of record gives, against
// docs/timeline-format.md. No writer thread, no file (formatter_output.h).
#include <algorithm>
#include <cstdint>
#include <random>
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
#include "trace_test_data.h"

namespace ranktime::timeline::test {
namespace {

TEST(EventFormatter, RunMetadataOpensAndRunEndClosesAFile) {
  StringTable strings;
  const RunMetadata metadata = two_rank_metadata();
  EventFormatter formatter(strings, metadata.start_ns);
  TextBuffer out;
  EXPECT_EQ(formatter.append_run_metadata(metadata, &out), 4u);
  const json opened = json::parse(as_json_array(out.view()));
  const std::vector<json> expected = two_rank_metadata_events();
  ASSERT_EQ(opened.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(opened[i], expected[i]) << i;

  out.clear();
  EXPECT_EQ(formatter.append_run_end(5, 0, metadata.clock_offsets_us, metadata.clock_uncertainty_us,
                                     &out),
            1u);
  const json closed = json::parse(as_json_array(out.view()));
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0], two_rank_run_end_event());
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
      json::parse(R"({"name":"ALLREDUCE","ph":"B","pid":3,"tid":2,"ts":21013.000,"args":{
          "dtype":"float32","shape":[64,64,1,1],"bytes":16384,"fused_tensors":12}})"),
      json::parse(R"({"name":"QUEUE","ph":"B","pid":3,"tid":2,"ts":21013.000})"),
      json::parse(R"({"name":"QUEUE","ph":"E","pid":3,"tid":2,"ts":21013.400})"),
      json::parse(R"({"name":"MEMCPY_IN_FUSION_BUFFER","ph":"B","pid":3,"tid":2,"ts":21013.400})"),
      json::parse(R"({"name":"MEMCPY_IN_FUSION_BUFFER","ph":"E","pid":3,"tid":2,"ts":21020.100})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"B","pid":3,"tid":2,"ts":21020.100})"),
      json::parse(R"({"name":"MPI_ALLREDUCE","ph":"E","pid":3,"tid":2,"ts":21101.900})"),
      json::parse(R"({"name":"ALLREDUCE","ph":"E","pid":3,"tid":2,"ts":21108.000})"),
  };
  EXPECT_EQ(events, expected);
}

TEST(EventFormatter, OperationErrorAndTruncatedShape) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.w");
  const uint32_t message = strings.intern("rank 1 sent float16, rank 0 float32");
  const std::vector<json> events =
      events_of(strings, {op_begin(tensor, 0, at_us(5), Phase::kAllgather, 4,
                                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 7257600, 1),
                          op_end(tensor, 0, at_us(9), Phase::kAllgather, message)});
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], json::parse(R"({"name":"ALLGATHER","ph":"B","pid":2,"tid":1,"ts":5.000,
      "args":{"dtype":"float16","shape":[1,2,3,4,5,6,7,8],"shape_truncated":true,
              "bytes":7257600,"fused_tensors":1}})"));
  EXPECT_EQ(events[1], json::parse(R"({"name":"ALLGATHER","ph":"E","pid":2,"tid":1,"ts":9.000,
      "args":{"error":"rank 1 sent float16, rank 0 float32"}})"));
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
  for (const json& e : events_of(strings, records)) {
    if (e["ph"] == "B") names.push_back(e["args"]["dtype"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"uint8", "int8", "int32", "int64", "float16",
                                             "bfloat16", "float32", "float64"}));
}

// A fused batch travels as one record per tensor; the formatter expands it into exactly the
// events of per-tensor records: operation slice, QUEUE, the batch's sub-phases, and the error if
// any.
TEST(EventFormatter, FusedBatchExpandsToTheEventsOfPerTensorRecords) {
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
    for (const int16_t rank : {int16_t{0}, int16_t{3}}) {
      std::vector<Record> compact_tensors;
      std::vector<Record> per_tensor;
      const auto fused = static_cast<uint16_t>(tensors.size());
      for (const Tensor& t : tensors) {
        compact_tensors.push_back(
            op_begin(t.id, rank, 0, Phase::kAllreduce, t.dtype, t.dims, t.bytes, 0));
        per_tensor.push_back(
            op_begin(t.id, rank, at_us(10), Phase::kAllreduce, t.dtype, t.dims, t.bytes, fused));
        per_tensor.push_back(span(t.id, rank, Phase::kQueue, at_us(10), at_us(11.5)));
        for (const auto& [phase, times] : spans)
          per_tensor.push_back(span(t.id, rank, phase, times.first, times.second));
        per_tensor.push_back(op_end(t.id, rank, at_us(44.5), Phase::kAllreduce, error));
      }
      const std::vector<Record> compact = batch(rank, Phase::kAllreduce, at_us(10), at_us(11.5),
                                                at_us(44.5), spans, compact_tensors, error);
      const std::vector<json> expected = events_of(strings, per_tensor);
      ASSERT_EQ(expected.size(), tensors.size() * 10);
      EXPECT_EQ(events_of(strings, compact), expected) << "error " << error << " rank " << rank;
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
  ASSERT_EQ(events.size(), 6u);  // the last batch only
  EXPECT_EQ(events[0], json::parse(R"({"name":"BROADCAST","ph":"B","pid":2,"tid":3,"ts":9.000,
      "args":{"dtype":"float32","shape":[4],"bytes":16,"fused_tensors":1}})"));
  EXPECT_EQ(events[5], json::parse(R"({"name":"BROADCAST","ph":"E","pid":2,"tid":3,"ts":11.000})"));
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
                negotiate_begin(tensor, at_us(30000), Phase::kNegotiateBarrier),
                negotiate_end(tensor, at_us(30001), 0, 500, mismatch, Phase::kNegotiateBarrier)});
  const std::vector<json> expected = {
      json::parse(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"B","pid":3,"tid":0,"ts":1000.000})"),
      json::parse(R"({"name":"0","ph":"X","pid":3,"tid":0,"ts":1000.000,"dur":0,
                      "args":{"rank":0,"lag_us":0.000}})"),
      json::parse(R"({"name":"1","ph":"X","pid":3,"tid":0,"ts":21000.250,"dur":0,
                      "args":{"rank":1,"lag_us":20000.250}})"),
      json::parse(R"({"name":"NEGOTIATE_ALLREDUCE","ph":"E","pid":3,"tid":0,"ts":21012.500,
                      "args":{"last_rank":1,"spread_us":20000.250}})"),
      json::parse(R"({"name":"NEGOTIATE_BARRIER","ph":"B","pid":3,"tid":0,"ts":30000.000})"),
      json::parse(R"({"name":"NEGOTIATE_BARRIER","ph":"E","pid":3,"tid":0,"ts":30001.000,
          "args":{"last_rank":0,"spread_us":0.500,
                  "error":"shape mismatch: rank 0 [4], rank 1 [5]"}})"),
  };
  EXPECT_EQ(events, expected);
}

// A negotiation of up to kMaxInlineTicks ranks travels as one record; the formatter gives exactly
// the events of the begin/tick/end records, each tick clamped into the slice the way the recorder
// clamps them (into [previous negotiation's end, the moment all were known]).
TEST(EventFormatter, NegotiationRecordGivesTheEventsOfBeginTicksAndEnd) {
  StringTable strings;
  const uint32_t tensor = strings.intern("grad.n");
  const uint32_t message = strings.intern("tensor 'grad.n': shapes differ: rank 0 [4], rank 2 [5]");
  std::mt19937_64 random(20261122);
  std::vector<Record> compact, expanded;
  for (int trial = 0; trial < 400; ++trial) {
    const int ranks = 1 + static_cast<int>(random() % kMaxInlineTicks);
    std::vector<std::pair<int64_t, int>> ready;
    for (int r = 0; r < ranks; ++r)
      ready.emplace_back(at_us(1000.0 * trial + static_cast<double>(random() % 900'000) / 1000), r);
    std::sort(ready.begin(), ready.end());
    // Sometimes the previous end lies after the first readiness, or beyond the known time.
    const int64_t known = ready.back().first + static_cast<int64_t>(random() % 3000) - 1000;
    const int64_t floor = ready.front().first + static_cast<int64_t>(random() % 4000) - 2000;
    const auto clamp = [&](int64_t t) { return std::min(std::max(t, floor), known); };
    const uint32_t error = trial % 7 == 0 ? message : 0;
    const Phase phase = trial % 2 ? Phase::kNegotiateAllreduce : Phase::kNegotiateBroadcast;

    Record n = negotiate_begin(tensor, clamp(ready.front().first), phase);
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
    for (const auto& [t, rank] : ready) expanded.push_back(tick(tensor, rank, clamp(t), t - first));
    expanded.push_back(negotiate_end(tensor, n.end_ns, ready.back().second,
                                     ready.back().first - first, error, phase));
  }
  const std::vector<json> expected = events_of(strings, expanded);
  EXPECT_EQ(events_of(strings, compact), expected);

  Record empty = compact.front();
  empty.args.negotiation.ticks = 0;  // corrupt: no tick, no slice
  EXPECT_TRUE(events_of(strings, {empty}).empty());
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

}  // namespace
}  // namespace ranktime::timeline::test
